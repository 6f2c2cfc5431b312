"""In-memory fakes for the collectives' seams: a `PostingPort` whose posts certify when the
test says so, with real agent cards from a `MemoryRegistry`, and a `FakeClock`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from harness_contract.addresses import unknown_agent_error
from harness_contract.collective_part import ResponsePart
from harness_contract.errors import FirewallSendError, SendError, SendErrorReason
from harness_contract.ids import HashId, RandomId
from harness_contract.jsonvalue import JsonValue
from harness_contract.values import CollectiveOp, CollectiveResultItem, Content, InboundItem

from gateway.clock import FakeClock
from gateway.collectives.port import MAX_OPEN_OPERATIONS, Classified
from gateway.collectives.runtime import Collectives
from gateway.engine import protocol as p
from gateway.engine.network import PostHandle
from gateway.identity.keys import SigningKey
from gateway.registry import MemoryRegistry, Registered
from gateway.store.records import PutInboxItem, PutOperation, PutReceivedRequest, Write

SCHEMA: dict[str, JsonValue] = {
    "type": "object",
    "properties": {"slot": {"type": "string", "enum": ("mon", "tue")}},
    "required": ("slot",),
}
"""A one-field form every test asks with."""


@dataclass(eq=False)
class BoundPost:
    """One post the collectives bound through the fake."""

    descriptor: p.MembershipDescriptor
    content: Content
    handle: PostHandle


@dataclass(eq=False)
class FakePosting:
    """The collectives' `PostingPort` in memory.

    Members resolve to real cards (unknown names to `unknown-agent`); a bind mints post ids
    and commits the caller's rows at once; its posts certify at once unless `auto_certify`
    is off, and then when the test calls `certify`. As with the real `Network`, every
    waiter has its own latch, and `await_certified` cancels the handle's when it gives up."""

    me: p.SignedAgentCard
    cards: dict[str, p.SignedAgentCard]
    refusals: dict[str, SendError] = field(default_factory=dict)
    """Names whose lookup fails with this error instead of resolving."""
    bind_failure: SendError | None = None
    auto_certify: bool = True
    auto_refuse: bool = False
    """Refuse each post as it is bound, as a cluster's sequencer does (cluster.md §5.4)."""
    completed: dict[str, str] = field(default_factory=dict)
    """Post ids whose intent completed while the daemon was down, and their record hashes."""
    posts: list[BoundPost] = field(default_factory=list)
    committed: list[Write] = field(default_factory=list)
    published_kinds: list[str] = field(default_factory=list)
    checked: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    """Every firewall send check: (recipients, text)."""
    checked_contents: list[dict[str, JsonValue] | None] = field(default_factory=list)
    """The `content` of each check, beside `checked`: an answer's content, None for text."""
    checked_forms: list[dict[str, JsonValue] | None] = field(default_factory=list)
    """The `form` of each check, beside `checked`: a question's requested schema."""
    refuse_sends: FirewallSendError | None = None
    """A firewall refusal every send check raises."""
    hold_checks: asyncio.Event | None = None
    """When set, every send check waits for this event (a send held mid-way)."""
    _items: dict[str, InboundItem] = field(default_factory=dict)
    _memberships: dict[str, p.MembershipDescriptor] = field(default_factory=dict)
    _latches: dict[str, list[asyncio.Future[str]]] = field(default_factory=dict)
    _certified: dict[str, str] = field(default_factory=dict)
    _seq: int = 0

    # --- PostingPort -----------------------------------------------------------------------

    async def resolve_cards(self, names: Sequence[str]) -> dict[str, p.SignedAgentCard | SendError]:
        resolved: dict[str, p.SignedAgentCard | SendError] = {}
        for name in names:
            if name in self.refusals:
                resolved[name] = self.refusals[name]
            elif name in self.cards:
                resolved[name] = self.cards[name]
            else:
                resolved[name] = unknown_agent_error(name)
        return resolved

    def membership_with(self, cards: Sequence[p.SignedAgentCard]) -> p.MembershipDescriptor:
        descriptor = p.build_membership([self.me, *cards])
        self._memberships[descriptor.conversation_id] = descriptor
        return descriptor

    async def membership(self, conversation_id: str) -> p.MembershipDescriptor | None:
        return self._memberships.get(conversation_id)

    async def bind_posts(
        self,
        posts: Sequence[tuple[p.MembershipDescriptor, Content]],
        *,
        extra_writes: Callable[[Sequence[str]], Sequence[Write]],
        within: float,
    ) -> list[PostHandle]:
        if self.bind_failure is not None:
            raise self.bind_failure
        post_ids = [RandomId.POST.mint() for _ in posts]
        self.committed.extend(extra_writes(post_ids))
        loop = asyncio.get_running_loop()
        handles: list[PostHandle] = []
        for (descriptor, content), post_id in zip(posts, post_ids, strict=True):
            drained: asyncio.Future[None] = loop.create_future()
            drained.set_result(None)
            handle = PostHandle(post_id=post_id, certified=self.latch(post_id), drained=drained)
            self.posts.append(BoundPost(descriptor=descriptor, content=content, handle=handle))
            handles.append(handle)
            if self.auto_refuse:
                self.refuse(post_id)
            elif self.auto_certify:
                self.certify(post_id)
        return handles

    async def await_certified(self, handle: PostHandle) -> str:
        if handle.certified.done() and not handle.certified.cancelled():
            return handle.certified.result()
        # The send gave up: its waiter is dropped, as `Network.forget` does.
        handle.certified.cancel()
        raise SendError(SendErrorReason.DELIVERY_PENDING)

    def follow(self, post_id: str) -> asyncio.Future[str]:
        return self.latch(post_id)

    async def settled(self, post_id: str) -> asyncio.Future[str]:
        if post_id in self.completed:
            future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            future.set_result(self.completed[post_id])
            return future
        return self.latch(post_id)

    async def check_send(
        self,
        recipients: Sequence[str],
        text: str,
        *,
        content: Mapping[str, JsonValue] | None = None,
        form: Mapping[str, JsonValue] | None = None,
    ) -> None:
        self.checked.append((tuple(recipients), text))
        self.checked_forms.append(None if form is None else dict(form))
        self.checked_contents.append(None if content is None else dict(content))
        if self.hold_checks is not None:
            await self.hold_checks.wait()
        if self.refuse_sends is not None:
            raise self.refuse_sends

    def prepare_item(
        self, item: InboundItem, *, token: str | None = None
    ) -> tuple[str, PutInboxItem]:
        token = token or RandomId.DELIVERY.mint()
        self._seq += 1
        self._items[token] = item
        write = PutInboxItem(
            agent_id=self.me.card.agent_id,
            seq=self._seq,
            token=token,
            item=b"",
            guidance=None,
            created_at=0.0,
        )
        return token, write

    async def commit(self, writes: Sequence[Write]) -> None:
        self.committed.extend(writes)

    def published(self, kind: str) -> None:
        self.published_kinds.append(kind)

    # --- what tests drive and read ------------------------------------------------------------

    def latch(self, post_id: str) -> asyncio.Future[str]:
        """A new certification future of the post's (resolved at once if it certified)."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        if post_id in self._certified:
            future.set_result(self._certified[post_id])
        else:
            self._latches.setdefault(post_id, []).append(future)
        return future

    def certify(self, post_id: str, record_hash: str | None = None) -> str:
        """Promote a post (every latch still waiting for it resolves); its record hash."""
        record_hash = record_hash or HashId.RECORD.of(post_id)
        self._certified[post_id] = record_hash
        for latch in self._latches.pop(post_id, ()):
            if not latch.done():
                latch.set_result(record_hash)
        return record_hash

    def refuse(self, post_id: str) -> None:
        """A cluster's sequencer refused the post (cluster.md §5.4): every latch still waiting
        for it fails `certification-unavailable`, as `Network.refuse` does."""
        for latch in self._latches.pop(post_id, ()):
            if not latch.done():
                latch.set_exception(SendError(SendErrorReason.CERTIFICATION_UNAVAILABLE))

    def item_of(self, writes: Sequence[Write]) -> list[InboundItem]:
        """The items whose inbox writes are among `writes`, in order."""
        return [self._items[w.token] for w in writes if isinstance(w, PutInboxItem)]

    def committed_items(self) -> list[InboundItem]:
        """Every item committed through `commit`, in order."""
        return self.item_of(self.committed)

    def operation_rows(self) -> list[bytes]:
        """The last committed row of each operation (what a restart reads back)."""
        rows: dict[str, bytes] = {}
        for write in self.committed:
            if isinstance(write, PutOperation):
                rows[write.operation_id] = write.row
        return list(rows.values())

    def request_rows(self, writes: Sequence[Write] = ()) -> list[bytes]:
        """The last row of each received request, committed or among `writes`."""
        rows: dict[str, bytes] = {}
        for write in [*self.committed, *writes]:
            if isinstance(write, PutReceivedRequest):
                rows[write.operation_id] = write.row
        return list(rows.values())


@dataclass(eq=False)
class Outcomes:
    """What the collectives reported through their metric hooks."""

    results: list[tuple[str, str]] = field(default_factory=list)
    members: list[tuple[str, str]] = field(default_factory=list)


@dataclass(eq=False)
class Agent:
    """One agent's collectives on fakes."""

    name: str
    posting: FakePosting
    clock: FakeClock
    outcomes: Outcomes
    collectives: Collectives


async def cards_of(*names: str) -> dict[str, p.SignedAgentCard]:
    """Registry-signed cards for these names (one in-memory Registry)."""
    registry = MemoryRegistry()
    cards: dict[str, p.SignedAgentCard] = {}
    for name in names:
        outcome = await registry.register(name, SigningKey.generate().public_key_b64)
        assert isinstance(outcome, Registered)
        cards[name] = outcome.card
    return cards


def agent(
    name: str,
    cards: dict[str, p.SignedAgentCard],
    clock: FakeClock | None = None,
    *,
    max_open: int = MAX_OPEN_OPERATIONS,
) -> Agent:
    """`name`'s collectives, every other card resolvable, at most `max_open` open."""
    clock = clock or FakeClock()
    posting = FakePosting(
        me=cards[name], cards={other: card for other, card in cards.items() if other != name}
    )
    outcomes = Outcomes()
    collectives = Collectives(
        posting,
        agent_name=name,
        agent_id=cards[name].card.agent_id,
        clock=clock,
        on_member_outcome=lambda op, outcome: outcomes.members.append((op, outcome)),
        on_result=lambda op, end: outcomes.results.append((op, end)),
        max_open=max_open,
    )
    return Agent(
        name=name, posting=posting, clock=clock, outcomes=outcomes, collectives=collectives
    )


# --- what tests do through the collectives ---------------------------------------------


async def ask(
    alice: Agent, op: CollectiveOp, to: str, *, deadline: int = 60, question: str = "when?"
) -> str:
    """alice asks with the one test form; the operation id."""
    return await alice.collectives.ask(
        op=op, to=to, question=question, deadline=deadline, requested_schema=SCHEMA
    )


def answer(
    alice: Agent,
    operation_id: str,
    sender: str,
    *,
    to: str | None = None,
    slot: str | None = "mon",
    record_hash: str = "",
) -> Classified:
    """Classify `sender`'s answer as alice's endpoint would; `to` defaults to the direct
    conversation, a group address marks it as posted in that group."""
    return alice.collectives.classify_response(
        ResponsePart(id=operation_id, content=None if slot is None else {"slot": slot}),
        sender=sender,
        conversation_address=to or f"agent:{sender}",
        is_group=to is not None,
        record_hash=record_hash or HashId.RECORD.of(sender),
    )


def results(alice: Agent) -> list[CollectiveResultItem]:
    """Every collective result alice's collectives committed, in order."""
    return [
        item for item in alice.posting.committed_items() if isinstance(item, CollectiveResultItem)
    ]


async def settle() -> None:
    """Let the timer and close tasks woken by the clock run to their next wait."""
    for _ in range(5):
        await asyncio.sleep(0)

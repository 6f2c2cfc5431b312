"""Local order: conversations whose members are all hosted by this daemon (engine.md §5.10).

The daemon holds every member's key and every member's rows live in one store, so for such
a conversation the daemon itself is the order. `LocalOrder` keeps one state per local
conversation (its members' heads and anchors are equal by construction) and one sequencer
task that turns waiting intents into certified records:

- for each post, in memory: the action on the common head under the current anchor, every
  member's `action_signature`, the RecordCore and RecordHash built once, every member's
  `durability_vote`, the one CertifiedRecord — the same artefacts a Router delivery would
  produce at each member, with no envelope, no outbox row and no verification of what the
  daemon's own keys just signed;
- one *local unit* per conversation per batch (one savepoint of the group commit) holding
  every row of its posts at every member: the record, the head, the author's intent
  `completed`, one pending delivery per other member. A burst of sends in one conversation
  chains in one unit (post k + 1's predecessor is post k's record).

Callers may rely on:

- A conversation's next unit is built only after its previous unit committed; memory (the
  head, the queue) changes only after the COMMIT returned, and only then are latches,
  `Certified` and delivery notices released.
- A unit that raises is rolled back alone and its conversation is set aside at every member
  (binds to it fail `certification-unavailable`, its open intents stay open); an ambiguous
  COMMIT is fatal (the daemon stops, engine.md §8). A unit the store could not take
  (`StoreUnavailable`: a network store's outage, nothing written) is built again after a
  backoff (`UNIT_RETRY_FIRST` doubling up to `UNIT_RETRY_MOST`); its sends meanwhile answer
  `delivery-pending` at their bound, as the design says of a store holding a post back.
- An idle sequencer writes nothing.

The module is long because it is one state machine: a conversation's queue, its unit in flight,
its foundation and its set-aside state change together, in the binds, the sequencer and the
commits' answers, and each step reads the others' invariants.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from harness_contract.codec import message_to_json
from harness_contract.ids import RandomId, agent_id_order_key
from harness_contract.jsonvalue import canonical_json
from harness_contract.kinds import PostKind
from harness_contract.values import Content, InboundMessage

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.engine import protocol as p
from gateway.engine.certifier import Certifier
from gateway.engine.effects import Delivered, DirectInboxes, Effects
from gateway.engine.state import (
    BindRefused,
    BoundIntent,
    ConversationState,
    project,
    router_anchor_from_bytes,
    router_anchor_hash,
)
from gateway.identity.keys import SigningKey
from gateway.store.errors import CommitAmbiguous, StoreClosed, StoreFailed, StoreUnavailable
from gateway.store.port import Store
from gateway.store.records import (
    ConversationRow,
    DeliveryState,
    IntentRow,
    IntentState,
    PutConversation,
    PutDelivery,
    PutIntent,
    PutRecord,
    Write,
)

logger = logging.getLogger(__name__)

UNIT_MAX_POSTS: Final = 512
"""Most posts one local unit certifies (engine.md §5.10 Batching)."""
UNIT_MAX_BYTES: Final = 4 * 1024 * 1024
"""Most record bytes one local unit writes per member; the rest waits for the next unit."""

UNIT_RETRY_FIRST: Final = 0.05
"""Seconds before a unit the store could not take (`StoreUnavailable`) is built again.

A network store's outage is transient and nothing of the unit was written, so its
conversation waits and tries again rather than being set aside or left for a restart."""

SIGN_BUDGET: Final = 2_000
"""Signatures one sequencer pass makes before it lets the event loop run other tasks (beats,
streams, answers to peers): about 0.1 s at 17,000 signatures/s (engine.md §8.8), so a pass over
many busy conversations never holds the loop long enough to cost a cluster replica its lease
(cluster.md §5.2)."""

RECENT_UNITS: Final = 16
"""Units per conversation whose posts the sequencer remembers, so a cluster's admission read
issued before one of them committed does not queue its posts again (cluster.md §5.2)."""

UNIT_RETRY_MOST: Final = 5.0
"""Longest wait, in seconds, between tries of one conversation's unit while the store stays
unavailable; the wait doubles from `UNIT_RETRY_FIRST` up to it, so an outage costs a few
attempts a minute, not a busy loop."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SetAside:
    """A conversation the daemon stopped serving, and why (agent status, a metric)."""

    conversation_id: str
    member_agent_ids: tuple[str, ...]
    reason: str


@dataclass(eq=False, kw_only=True)
class _Intent(BoundIntent):
    author_id: str
    ready: bool
    """The bind committed: the intent may enter a unit."""


@dataclass(eq=False, kw_only=True)
class _Conversation(ConversationState):
    queue: list[_Intent] = field(default_factory=list)
    in_flight: bool = False
    founding: asyncio.Future[bool] | None = None
    """While the bind that writes the foundation is committing: resolves True once it did."""
    retry_delay: float = 0.0
    """Seconds the last retry after `StoreUnavailable` waited; 0 once a unit committed."""
    encoded: tuple[bytes, bytes] | None = None
    """The descriptor's and the anchor's bytes, encoded once."""
    units: int = 0
    """Units committed since the conversation was loaded: its generation."""
    recent: deque[tuple[int, frozenset[str]]] = field(
        default_factory=lambda: deque(maxlen=RECENT_UNITS)
    )
    """(generation, PostIds) of the last units (a cluster's admission, cluster.md §5.2)."""

    def foundation_bytes(self) -> tuple[bytes, bytes]:
        if self.encoded is None:
            self.encoded = (p.encode(self.descriptor), p.encode(self.anchor))
        return self.encoded


@dataclass(frozen=True, slots=True)
class LocalUnit:
    """Every row of a batch of posts of one conversation at every member (one savepoint)."""

    conversation: _Conversation
    posts: tuple[_Intent, ...]
    writes: tuple[Write, ...]
    head: str
    depth: int
    effects: Effects


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalObserver:
    """Callbacks the composition root wires to metrics."""

    on_set_aside: Callable[[SetAside], None] = lambda set_aside: None
    on_unit: Callable[[int], None] = lambda posts: None
    """A local unit committed with this many posts."""


class LocalOrder:
    """The daemon's order for its local conversations, and the sequencer task."""

    _conditional: bool = False
    """Whether units move heads only `WHERE depth = $old` and complete intents only `WHERE
    state = 'open'` (a cluster, where another sequencer may have written the rows first,
    cluster.md §5.2); here the daemon alone writes them, so rows are upserted."""

    def __init__(
        self,
        *,
        store: Store,
        instance_id: str,
        certifiers: Callable[[], dict[str, Certifier]],
        release: Callable[[Effects], None],
        on_fatal: Callable[[BaseException], None],
        observer: LocalObserver | None = None,
        clock: Clock = SYSTEM_CLOCK,
        inboxes: DirectInboxes | None = None,
    ) -> None:
        """`inboxes`, outside a cluster: members' items a unit writes directly (§5.10)."""
        self._store = store
        self._clock = clock
        self._inboxes = inboxes
        self.instance_id = instance_id
        """The store's durable local instance id: the anchor every local conversation names."""
        self._certifiers = certifiers
        self._release = release
        self._on_fatal = on_fatal
        self._observer = observer or LocalObserver()
        self._conversations: dict[str, _Conversation] = {}
        self._set_aside: dict[str, SetAside] = {}
        self._ready: dict[str, None] = {}
        """Conversations with ready intents, in the order they became ready (an ordered set)."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._units: set[asyncio.Task[None]] = set()
        self._retries: set[asyncio.Task[None]] = set()
        """Conversations waiting out a store outage before their unit is built again."""
        self._restored: dict[str, dict[str, ConversationRow]] = {}
        self._restored_intents: list[tuple[str, IntentRow]] = []

    # --- which conversations -----------------------------------------------------------------

    def is_local(self, conversation_id: str) -> bool:
        """True for a local conversation, set aside or not."""
        return conversation_id in self._conversations or conversation_id in self._set_aside

    def accepts(self, descriptor: p.MembershipDescriptor) -> bool:
        """Whether a post to this member set goes through local order: the conversation is
        local, or it is new and every member is hosted here (the choice is made once)."""
        if self.is_local(descriptor.conversation_id):
            return True
        certifiers = self._certifiers()
        members = descriptor.member_agent_ids
        if any(member not in certifiers for member in members):
            return False
        # Stored on the Router path already (at any member): it stays there until the next
        # start moves it (Existing data).
        return not any(certifiers[member].knows(descriptor.conversation_id) for member in members)

    async def stored_membership(self, conversation_id: str) -> p.MembershipDescriptor | None:
        """The descriptor of a local conversation as stored (memory holds every one here)."""
        return self.membership_of(conversation_id)

    def membership_of(self, conversation_id: str) -> p.MembershipDescriptor | None:
        """The descriptor of a local conversation."""
        conversation = self._conversations.get(conversation_id)
        return None if conversation is None else conversation.descriptor

    def set_aside_of(self, agent_id: str) -> list[SetAside]:
        """The set-aside conversations this agent is a member of."""
        return [item for item in self._set_aside.values() if agent_id in item.member_agent_ids]

    @property
    def set_aside_count(self) -> int:
        """Conversations set aside (the metric)."""
        return len(self._set_aside)

    def open_intents_by_kind(self, agent_id: str) -> dict[PostKind, int]:
        """This agent's bound intents in local conversations not yet certified, by kind."""
        counts = dict.fromkeys(PostKind, 0)
        for conversation in self._conversations.values():
            counts[conversation.kind] += sum(
                1 for intent in conversation.queue if intent.author_id == agent_id
            )
        return counts

    # --- binding (engine.md §6 steps 7-8) --------------------------------------------------

    async def prepare(self, descriptor: p.MembershipDescriptor) -> None:
        """Before a bind of a post to `descriptor`: wait while its foundation is being
        written (a cluster's order also loads what the bind needs)."""
        await self.founded(descriptor.conversation_id)

    async def founded(self, conversation_id: str) -> None:
        """Wait while another bind is writing this conversation's foundation, so a bind
        never commits an intent whose foundation may yet fail."""
        conversation = self._conversations.get(conversation_id)
        while conversation is not None and conversation.founding is not None:
            await asyncio.shield(conversation.founding)
            conversation = self._conversations.get(conversation_id)

    def bind(
        self,
        certifier: Certifier,
        descriptor: p.MembershipDescriptor,
        content: Content,
        *,
        now: float,
    ) -> tuple[str, list[Write]]:
        """Mint a PostId and bind its intent; for a new conversation, write the foundation
        (descriptor, GenesisAnchor naming the local instance) at every member.

        Call `bound` once the writes committed, `unbind` if they definitely did not.
        Raises `BindRefused` for a set-aside conversation or another membership."""
        conversation_id = descriptor.conversation_id
        if conversation_id in self._set_aside:
            raise BindRefused("the conversation is set aside")
        writes: list[Write] = []
        conversation = self._conversations.get(conversation_id)
        # The hosting side hands the same descriptor object for the same members (its
        # memberships are cached), so the hash of the stored one is this one's.
        membership_hash = (
            conversation.membership_hash
            if conversation is not None and conversation.descriptor is descriptor
            else p.membership_hash(descriptor)
        )
        if conversation is None:
            conversation = _Conversation.genesis(descriptor, membership_hash, self.instance_id)
            conversation.founding = asyncio.get_running_loop().create_future()
            self._conversations[conversation_id] = conversation
            moved_from = 0 if self._conditional else None
            writes.extend(
                _conversation_write(conversation, member, head=None, depth=0, moved_from=moved_from)
                for member in conversation.member_ids
            )
        elif conversation.membership_hash != membership_hash:
            raise BindRefused("the stored conversation has another membership")
        post_id = RandomId.POST.mint()
        intent = p.PostIntent(
            conversation_id=conversation_id,
            membership_hash=membership_hash,
            author_agent_id=certifier.agent_id,
            post_id=post_id,
            content=content,
        )
        bound = _Intent(
            author_id=certifier.agent_id,
            post_id=post_id,
            intent=intent,
            bind_seq=certifier.reserve_bind_seq(),
            bound_at=now,
            resumed=False,
            ready=False,
        )
        conversation.queue.append(bound)
        writes.append(bound.write(bound.author_id, IntentState.OPEN, None))
        return post_id, writes

    def bound(self, posts: Iterable[tuple[str, str]]) -> None:
        """The binds of these (ConversationId, PostId) committed: they may certify."""
        for conversation_id, post_id in posts:
            conversation = self._conversations.get(conversation_id)
            if conversation is None:
                continue
            if conversation.founding is not None:
                conversation.founding.set_result(True)
                conversation.founding = None
            for intent in reversed(conversation.queue):  # a new intent is near the end
                if intent.post_id == post_id:
                    intent.ready = True
                    self._ready[conversation_id] = None
                    break
        self._wake.set()

    def unbind(self, posts: Iterable[tuple[str, str]]) -> None:
        """Forget intents whose bind definitely did not commit."""
        for conversation_id, post_id in posts:
            conversation = self._conversations.get(conversation_id)
            if conversation is None:
                continue
            conversation.queue = [i for i in conversation.queue if i.post_id != post_id]
            if conversation.founding is not None and not conversation.queue:
                # Its foundation never committed: the next bind writes it again.
                conversation.founding.set_result(False)
                del self._conversations[conversation_id]

    # --- rehydration -------------------------------------------------------------------------

    def restore(
        self, agent_id: str, rows: Iterable[ConversationRow], intents: Iterable[IntentRow]
    ) -> None:
        """Keep one member's stored local conversations and open intents until `start`."""
        for row in rows:
            self._restored.setdefault(row.conversation_id, {})[agent_id] = row
        self._restored_intents.extend((agent_id, intent) for intent in intents)

    def start(self) -> None:
        """Check the members' rows of every restored local conversation (the same
        descriptor, anchor and head at every member, every member hosted), queue its open
        intents in the §5.10 restart order, and start the sequencer."""
        certifiers = self._certifiers()
        for conversation_id, rows in self._restored.items():
            try:
                restored = _restored_conversation(rows, certifiers.__contains__)
            except _Unloadable as unloadable:
                members = tuple(sorted(rows, key=agent_id_order_key))
                self.set_aside(conversation_id, members, unloadable.reason)
                continue
            self._conversations[conversation_id] = restored
        self._restored.clear()
        ordered = sorted(
            self._restored_intents,
            key=lambda item: (item[1].bound_at, agent_id_order_key(item[0]), item[1].bind_seq),
        )
        self._restored_intents.clear()
        for author_id, row in ordered:
            conversation = self._conversations.get(row.conversation_id)
            if conversation is None:
                continue  # set aside: its intents stay open
            try:
                intent = p.decode(row.intent, p.PostIntent)
            except p.ProtocolError as error:
                self.set_aside(
                    row.conversation_id,
                    conversation.member_ids,
                    f"intent {row.post_id}: {error.detail}",
                )
                continue
            conversation.queue.append(
                _Intent(
                    author_id=author_id,
                    post_id=row.post_id,
                    intent=intent,
                    bind_seq=row.bind_seq,
                    bound_at=row.bound_at,
                    resumed=True,
                    ready=True,
                )
            )
            self._ready[conversation.id] = None
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
            self._task.set_name("local-order")
        self._wake.set()

    def set_aside(self, conversation_id: str, members: tuple[str, ...], reason: str) -> None:
        """Stop serving one conversation at every member, loudly, once."""
        if conversation_id in self._set_aside:
            return
        conversation = self._conversations.pop(conversation_id, None)
        if conversation is not None:
            members = conversation.member_ids
            if conversation.founding is not None:
                conversation.founding.set_result(False)
        self._ready.pop(conversation_id, None)
        item = SetAside(conversation_id=conversation_id, member_agent_ids=members, reason=reason)
        self._set_aside[conversation_id] = item
        logger.error(
            "conversation set aside conversation=%s members=%s: %s",
            conversation_id,
            ",".join(members),
            reason,
        )
        self._observer.on_set_aside(item)

    async def close(self) -> None:
        """Stop the sequencer and the retry waits (their intents stay open and certify after
        the restart); units in flight finish (their commits are the writer's)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        retries = list(self._retries)
        for retry in retries:
            retry.cancel()
        await asyncio.gather(*retries, return_exceptions=True)
        if self._units:
            await asyncio.gather(*self._units, return_exceptions=True)

    def _key(self, certifiers: dict[str, Certifier], member: str) -> SigningKey:
        """A member's signing key (every member is hosted here)."""
        return certifiers[member].identity.key

    def _commit_seq(self, certifiers: dict[str, Certifier], member: str) -> int | None:
        """The member's next commit sequence, ordering its deliveries."""
        return certifiers[member].reserve_commit_seq()

    # --- the sequencer -----------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            signed = 0
            for conversation_id in list(self._ready):
                conversation = self._conversations.get(conversation_id)
                if conversation is None:
                    self._ready.pop(conversation_id, None)
                    continue
                if conversation.in_flight:
                    continue
                posts = _ready_prefix(conversation.queue)
                if not posts:
                    self._ready.pop(conversation_id, None)
                    continue
                try:
                    unit = self._build(conversation, posts)
                except Exception as error:  # a defect or a bad stored object: this one only
                    logger.exception(
                        "local unit could not be built conversation=%s", conversation_id
                    )
                    self.set_aside(
                        conversation_id, conversation.member_ids, f"unit failed: {error}"
                    )
                    continue
                conversation.in_flight = True
                task = asyncio.ensure_future(self._commit(unit))
                task.set_name("local-unit")
                self._units.add(task)
                task.add_done_callback(self._units.discard)
                signed += 2 * len(unit.posts) * len(conversation.member_ids)
                if signed >= SIGN_BUDGET:
                    signed = 0
                    await asyncio.sleep(0)  # let beats, streams and peers run (see above)

    def _build(self, conversation: _Conversation, posts: list[_Intent]) -> LocalUnit:
        """Every row of these posts at every member, built in memory; nothing changes."""
        certifiers = self._certifiers()
        members = conversation.member_ids
        keys = {member: self._key(certifiers, member) for member in members}
        head, depth = conversation.head, conversation.depth
        # Rows of a kind go together (records, then completed intents, then deliveries, then
        # heads): no row of a unit depends on another's order, and a run of one kind is one
        # `executemany` in the store (`tables.apply_writes`).
        records: list[Write] = []
        completions: list[Write] = []
        deliveries: list[Write] = []
        items: list[Write] = []
        inboxes = self._inboxes
        effects = Effects()
        size = 0
        taken: list[_Intent] = []
        descriptor_bytes = conversation.foundation_bytes()[0]
        conditional = self._conditional
        for post in posts:
            action = conversation.action_on(head, post.intent)
            # A local conversation stays on its GenesisAnchor until its first record.
            assert action is not None
            action_hash = p.action_hash(action)
            # Every member checks the action as gap-free (it is, by construction: one head
            # for all) and signs; the default action policy signs.
            signatures = tuple(
                p.sign_statement(
                    keys[m], p.ActionSignature(signer_agent_id=m, action_hash=action_hash)
                )
                for m in members
            )
            staged = conversation.action_certified_record(
                action,
                p.Certificate(
                    kind=p.CertificateKind.ACTION, subject=action_hash, entries=signatures
                ),
            )
            record_hash = staged.record_hash
            votes = tuple(
                p.sign_statement(
                    keys[m],
                    p.DurabilityVote(
                        signer_agent_id=m,
                        conversation_id=conversation.id,
                        membership_hash=conversation.membership_hash,
                        record_hash=record_hash,
                    ),
                )
                for m in members
            )
            record = p.CertifiedRecord(
                action_certified_record=staged,
                durability_certificate=p.Certificate(
                    kind=p.CertificateKind.DURABILITY, subject=record_hash, entries=votes
                ),
            )
            data = p.encode(record)
            if taken and size + len(data) > UNIT_MAX_BYTES:
                break
            size += len(data)
            taken.append(post)
            depth += 1
            head = record_hash
            projected: tuple[InboundMessage, bytes] | None = None
            for member in members:
                commit_seq = self._commit_seq(certifiers, member)
                records.append(
                    PutRecord(
                        agent_id=member,
                        record_hash=record_hash,
                        conversation_id=conversation.id,
                        depth=depth,
                        author=post.author_id,
                        post_id=post.post_id,
                        record=data,
                        commit_seq=commit_seq,
                        membership=descriptor_bytes,
                    )
                )
                if member == post.author_id:
                    completion = post.write(post.author_id, IntentState.COMPLETED, record_hash)
                    if conditional:
                        assert isinstance(completion, PutIntent)
                        completion = dataclasses.replace(completion, from_open=True)
                    completions.append(completion)
                    effects.certified.append(post.certified(member, record_hash, conversation.kind))
                else:
                    if projected is None:
                        message = project(conversation.descriptor, post.intent)
                        projected = (message, canonical_json(message_to_json(message)))
                    token = RandomId.DELIVERY.mint()
                    item = (
                        None if inboxes is None else inboxes.item_for(member, token, projected[0])
                    )
                    if item is not None:
                        # Classified at certification: the member's item in this very unit.
                        items.append(item)
                        continue
                    delivery = PutDelivery(
                        agent_id=member,
                        token=token,
                        conversation_id=conversation.id,
                        record_hash=record_hash,
                        commit_seq=commit_seq,
                        projection=projected[1],
                        state=DeliveryState.PENDING,
                    )
                    deliveries.append(delivery)
                    effects.delivered.append(Delivered(delivery, projected[0]))
                    effects.deliveries.add(member)
        assert head is not None
        moved_from = conversation.depth if conditional else None
        heads = [
            _conversation_write(conversation, member, head=head, depth=depth, moved_from=moved_from)
            for member in members
        ]
        return LocalUnit(
            conversation=conversation,
            posts=tuple(taken),
            writes=(*records, *completions, *deliveries, *items, *heads),
            head=head,
            depth=depth,
            effects=effects,
        )

    async def apply(self, writes: Sequence[Write]) -> Callable[[], None]:
        """Commit a unit's (or a bind's) writes, their members' inbox items sequenced as
        the transaction is queued (§5.10). Returns what settles the items once committed:
        the caller calls it after releasing the unit, so the author's send answers before
        its receivers' streams run. A failure settles them at once."""
        if self._inboxes is None:
            await self._store.apply(writes)
            return no_items
        writes, settle = self._inboxes.sequence(writes)
        try:
            await self._store.apply(writes)
        except BaseException as error:
            settle(error)
            raise
        return functools.partial(settle, None)

    async def _commit(self, unit: LocalUnit) -> None:
        try:
            settle_items = await self.apply(unit.writes)
        except CommitAmbiguous as error:
            logger.error("local unit commit ambiguous: stopping the daemon")
            self._on_fatal(error)
            return
        except StoreUnavailable:
            # A network store's outage: nothing was written and the store is not FAILED
            # (engine.md §8), so the unit is built again once the store may be back. Setting
            # the conversation aside, or leaving it for a restart, would stop it for good.
            self._retry_later(unit.conversation)
            return
        except (StoreClosed, StoreFailed):
            # Shutdown, or the writer already stopped the daemon: not this conversation's
            # fault. Its intents stay open and certify after the restart.
            unit.conversation.in_flight = False
            return
        except Exception as error:
            unit.conversation.in_flight = False
            if self._stale(unit, error):
                return
            logger.exception("local unit failed conversation=%s", unit.conversation.id)
            self.set_aside(
                unit.conversation.id, unit.conversation.member_ids, f"unit failed: {error}"
            )
            return
        self.committed(unit)
        settle_items()

    def _stale(self, unit: LocalUnit, error: Exception) -> bool:
        """Whether a unit that raised was only stale (its conversation is rebuilt from rows
        instead of set aside): never where this daemon alone writes the rows."""
        return False

    def _retry_later(self, conversation: _Conversation) -> None:
        # in_flight stays set while waiting, so neither the sequencer (woken by other
        # conversations) nor a bind's own unit builds for this conversation before the wait.
        delay = min(UNIT_RETRY_MOST, max(UNIT_RETRY_FIRST, conversation.retry_delay * 2))
        conversation.retry_delay = delay
        logger.warning(
            "local unit not written, the store is unavailable; retrying in %.2f s conversation=%s",
            delay,
            conversation.id,
        )
        task = asyncio.ensure_future(self._retry_after(conversation, delay))
        task.set_name("local-unit-retry")
        self._retries.add(task)
        task.add_done_callback(self._retries.discard)

    async def _retry_after(self, conversation: _Conversation, delay: float) -> None:
        await self._clock.sleep(delay)
        conversation.in_flight = False
        if self._conversations.get(conversation.id) is conversation:  # not set aside meanwhile
            self._ready[conversation.id] = None
            self._wake.set()

    # --- certifying in the bind's own unit (§5.10 Atomic unit, rule 2) ------------------------

    def unit_in_bind(self, conversation_id: str, post_id: str) -> LocalUnit | None:
        """The unit of a just-bound post, to commit with its bind (one commit per send),
        when it is the conversation's only waiting intent and no unit is in flight."""
        conversation = self._conversations.get(conversation_id)
        if conversation is None or conversation.in_flight:
            return None
        if len(conversation.queue) != 1 or conversation.queue[0].post_id != post_id:
            return None
        try:
            unit = self._build(conversation, conversation.queue)
        except Exception:  # the sequencer meets it again and sets the conversation aside
            logger.debug("unit in bind not built conversation=%s", conversation_id, exc_info=True)
            return None
        conversation.in_flight = True
        return unit

    def abandon(self, unit: LocalUnit) -> None:
        """The bind carrying this unit definitely did not commit (the caller unbinds)."""
        unit.conversation.in_flight = False
        self._wake.set()

    def committed(self, unit: LocalUnit) -> None:
        """A unit's COMMIT returned: only now does memory move (the head, the queue), then
        the latches and the delivery notices go out."""
        conversation = unit.conversation
        conversation.head = unit.head
        conversation.depth = unit.depth
        done = frozenset(post.post_id for post in unit.posts)
        conversation.units += 1
        conversation.recent.append((conversation.units, done))
        conversation.queue = [intent for intent in conversation.queue if intent.post_id not in done]
        conversation.in_flight = False
        conversation.retry_delay = 0.0
        if _ready_prefix(conversation.queue):
            self._ready[conversation.id] = None
        self._wake.set()
        self._observer.on_unit(len(unit.posts))
        self._release(unit.effects)


class _Unloadable(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _restored_conversation(
    rows: dict[str, ConversationRow], available: Callable[[str], bool]
) -> _Conversation:
    first = next(iter(rows.values()))
    try:
        descriptor = p.decode(first.descriptor, p.MembershipDescriptor)
        anchor = router_anchor_from_bytes(first.anchor)
    except p.ProtocolError as error:
        raise _Unloadable(f"stored foundation does not decode: {error.detail}") from None
    members = descriptor.member_agent_ids
    missing = [member for member in members if member not in rows or not available(member)]
    if missing:
        raise _Unloadable(f"members not hosted or without the conversation: {','.join(missing)}")
    for member, row in rows.items():
        if (row.anchor_hash, row.head, row.depth, row.descriptor) != (
            first.anchor_hash,
            first.head,
            first.depth,
            first.descriptor,
        ):
            raise _Unloadable(f"members' heads or anchors differ (at {member})")
    if router_anchor_hash(anchor) != first.anchor_hash:
        raise _Unloadable("stored anchor does not hash to its anchor hash")
    return _Conversation.from_row(first, descriptor, anchor)


def no_items() -> None:
    """A commit that wrote no member's inbox item: nothing to settle (`LocalOrder.apply`)."""


def _ready_prefix(queue: list[_Intent]) -> list[_Intent]:
    # Intents certify in queue order: the first not yet committed bind holds back the rest.
    ready: list[_Intent] = []
    for intent in queue:
        if not intent.ready or len(ready) >= UNIT_MAX_POSTS:
            break
        ready.append(intent)
    return ready


def _conversation_write(
    conversation: _Conversation,
    member: str,
    *,
    head: str | None,
    depth: int,
    moved_from: int | None = None,
) -> PutConversation:
    descriptor, anchor = conversation.foundation_bytes()
    return PutConversation(
        agent_id=member,
        conversation_id=conversation.id,
        descriptor=descriptor,
        membership_hash=conversation.membership_hash,
        anchor=anchor,
        anchor_hash=conversation.anchor_hash,
        head=head,
        depth=depth,
        moved_from=moved_from,
    )


def fold_unit_into_bind(bind: Sequence[Write], unit: Sequence[Write]) -> list[Write]:
    """The writes of a bind and of the unit certifying its post in the same commit, each row
    written once (engine.md §5.10 Atomic unit, rule 2): the unit's completed intent and moved
    heads take the places of the bind's open intent and new foundation, keeping the bind's
    conditions (a cluster's foundation is inserted only where none exists)."""
    folded: list[Write] = list(bind)
    at: dict[tuple[type, str, str], int] = {}
    for position, bound_write in enumerate(folded):
        if isinstance(bound_write, PutIntent):
            at[(PutIntent, bound_write.agent_id, bound_write.post_id)] = position
        elif isinstance(bound_write, PutConversation):
            at[(PutConversation, bound_write.agent_id, bound_write.conversation_id)] = position
    for write in unit:
        index: int | None = None
        if isinstance(write, PutIntent):
            index = at.get((PutIntent, write.agent_id, write.post_id))
            if index is not None:
                # The row is inserted in this very commit: there is no open row to guard.
                bound_intent = folded[index]
                assert isinstance(bound_intent, PutIntent)
                write = dataclasses.replace(
                    write, from_open=False, seq_partition=bound_intent.seq_partition
                )
        elif isinstance(write, PutConversation):
            index = at.get((PutConversation, write.agent_id, write.conversation_id))
            if index is not None:
                bound = folded[index]
                assert isinstance(bound, PutConversation)
                write = dataclasses.replace(write, moved_from=bound.moved_from)
        if index is None:
            folded.append(write)
        else:
            folded[index] = write
    return folded

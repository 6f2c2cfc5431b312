"""The collectives' seam to their agent, and the values they hand back to it.

`PostingPort` is everything `gateway.collectives` needs from the agent that hosts it: its
members' cards, its conversations, binding its posts and waiting for them, and its inbox.
The endpoint runtime implements it over the Registry, the network and the inbox; unit tests
implement it in memory. `CollectiveAgent` is that port with the agent's name, id and clock,
as both sides (`Collectives`, `Responder`) hold it. `Classified` and `CollectiveRefusal`
are what the collectives return to the endpoint's classification pass and send pipeline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from harness_contract.addresses import agent_address
from harness_contract.errors import HarnessError, SendError
from harness_contract.jsonvalue import JsonValue
from harness_contract.kinds import ConsumedKind, DeliveryItem
from harness_contract.values import Content, InboundItem

from gateway.clock import Clock
from gateway.engine import protocol as p
from gateway.engine.network import PostHandle
from gateway.store.records import PutInboxItem, Write


def refusal_of(latch: asyncio.Future[str]) -> SendError | None:
    """The `SendError` an own post's latch failed with — a cluster's sequencer refused the
    post, which never certifies (cluster.md §5.2, §5.4) — else None (waiting, certified or
    cancelled at shutdown)."""
    if not latch.done() or latch.cancelled():
        return None
    error = latch.exception()
    return error if isinstance(error, SendError) else None


COLLECTIVE_SEND_WAIT: Final = 20.0
"""Seconds a gather or all_gather send waits for its request posts.

The contract's bound, never past the operation's deadline; a post still certifying keeps
going after the send returns, and the wait is never a failure."""

DEADLINE_MAX_SECONDS: Final = 2_592_000
"""Longest relative deadline of a gather or all_gather, 30 days."""

MAX_OPEN_OPERATIONS: Final = 256
"""Most gather and all_gather operations one agent may have open (asked, result not yet
emitted) before a new ask is refused `too-many-operations`; `--max-open-operations`.

Each open operation holds memory (about 20 KiB: its record, its deadline timer, its
request posts' latches), rows (about 40 KiB with its request intents) and work at every
start (it is loaded back), for up to 30 days. Unbounded, one agent token opened 3,000 in
under a minute and took 64 MB and 13 s of every later start. A model follows a few
questions at a time; 256 is far above what one agent uses and bounds an agent's cost at
about 5 MiB of memory and 10 MiB of rows."""


class PostingPort(Protocol):
    """What the collectives need from their agent: its members, its posts, its inbox."""

    async def resolve_cards(self, names: Sequence[str]) -> dict[str, p.SignedAgentCard | SendError]:
        """Registry lookups of members: each a card, or the `SendError` saying why not."""
        ...

    def membership_with(self, cards: Sequence[p.SignedAgentCard]) -> p.MembershipDescriptor:
        """The descriptor of this agent and these members; raises `SendError`."""
        ...

    async def membership(self, conversation_id: str) -> p.MembershipDescriptor | None:
        """A stored conversation's descriptor, None when this agent holds no such one."""
        ...

    async def bind_posts(
        self,
        posts: Sequence[tuple[p.MembershipDescriptor, Content]],
        *,
        extra_writes: Callable[[Sequence[str]], Sequence[Write]],
        within: float,
    ) -> list[PostHandle]:
        """Bind every post's intent in one transaction with `extra_writes(post_ids)`, within
        `within` seconds of waiting for the Router; raises `SendError`."""
        ...

    async def check_send(
        self,
        recipients: Sequence[str],
        text: str,
        *,
        content: Mapping[str, JsonValue] | None = None,
        form: Mapping[str, JsonValue] | None = None,
    ) -> None:
        """The local firewall's send check of this agent's text to these members (names),
        before anything is bound; raises `FirewallSendError`. Admitted, its guidance is the
        send's. `content` is an answer's content (empty for a decline), whose keys and
        values content patterns search as texts, `text` being its JSON; `form` a question's
        requested schema, searched the same way beside the question `text`."""
        ...

    async def await_certified(self, handle: PostHandle) -> str:
        """The post's RecordHash within the send bound, else `SendError` `delivery-pending`;
        the handle's waiters are cancelled either way."""
        ...

    def follow(self, post_id: str) -> asyncio.Future[str]:
        """A future of the caller's own of an own post's RecordHash (resolved when it is
        promoted, cancelled at shutdown), registered at once: what follows a post past a
        send that gave up."""
        ...

    async def settled(self, post_id: str) -> asyncio.Future[str]:
        """A future of an own post's RecordHash: already resolved when its intent completed
        (while the daemon was down), cancelled at shutdown."""
        ...

    def prepare_item(
        self, item: InboundItem, *, token: str | None = None
    ) -> tuple[str, PutInboxItem]:
        """An inbox write for an item (a fresh token unless given), to commit with others."""
        ...

    async def commit(self, writes: Sequence[Write]) -> None:
        """Commit writes atomically; items among them reach the agent's stream."""
        ...

    def published(self, kind: DeliveryItem) -> None:
        """An item of this kind was made durable under a fresh token (metrics)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveAgent:
    """The hosted agent both sides of its collectives act for: its posting port, its name
    and AgentId, and the clock every deadline is read on."""

    posting: PostingPort
    name: str
    agent_id: str
    clock: Clock

    @property
    def address(self) -> str:
        """This agent's `agent:<name>`."""
        return agent_address(self.name)

    def now_ms(self) -> int:
        """Wall-clock epoch milliseconds, the unit of every `deadlineAt`."""
        return int(self.clock.time() * 1000)


class CollectiveRefusal(Exception):
    """A refused gather, all_gather or answer, with the operation it names (for
    `failureDelivery: "inbound"`) and the conversation its `operationFailed` names."""

    def __init__(self, error: HarnessError, *, operation_id: str, to: str) -> None:
        super().__init__(error.message)
        self.error = error
        self.operation_id = operation_id
        self.to = to


@dataclass(frozen=True, slots=True, kw_only=True)
class Classified:
    """What classifying one collective record produced."""

    writes: tuple[Write, ...] = ()
    item: InboundItem | None = None
    """A collectiveRequest to deliver under the delivery's token."""
    consumed: ConsumedKind | None = None
    """The consumed kind (answer, close, other) when nothing is delivered."""
    published: tuple[DeliveryItem, ...] = ()
    """Items emitted under fresh tokens by these writes (collectiveResult)."""

"""What the engine's functional cores produce for the shell to carry out (engine.md §5.4
step 5, §5.5, §5.10).

A core call (`Certifier`, local order's units) changes memory and appends to an `Effects`
value: typed store writes, `OutboundEnvelope`s to hand the Router, `Certified` notices for
the waiting sends, the agents with new deliveries, and `CatchUpQuery`s the shell answers
from the store. `gateway.engine.network` commits the writes and only then releases the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from harness_contract.kinds import PostKind, PostOp
from harness_contract.values import InboundMessage

from gateway.engine import protocol as p
from gateway.store.records import PutDelivery, PutInboxItem, Write


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboundEnvelope:
    """A signed envelope to hand the Router once its outbox row is durable."""

    agent_id: str
    row_id: int
    conversation_id: str
    post_id: str | None
    signed_envelope: bytes
    retry: bool = False
    """Sent before (a restart cut its outcome): only the same bytes as a retry are safe."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Certified:
    """A locally authored post was promoted: its send may succeed."""

    agent_id: str
    post_id: str
    record_hash: str
    bound_at: float
    kind: PostKind
    """Direct or group, for the certification latency metric."""
    op: PostOp = PostOp.MULTICAST
    """What the post carried: multicast, gather, all_gather, answer or close."""
    resumed: bool = False
    """The intent was reloaded after a restart: its latency spans the downtime."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchUpQuery:
    """Another member asked for the item after a position; the shell reads the store and
    answers through `Certifier.answer_catch_up`."""

    agent_id: str
    request: p.CatchUpRequest


@dataclass(frozen=True, slots=True)
class Delivered:
    """A pending delivery's write and the message its projection encodes, made together: its
    classifier need not decode what the engine just encoded (engine.md §7.2)."""

    write: PutDelivery
    message: InboundMessage


@dataclass
class Effects:
    """What one or more core calls produced, in order."""

    writes: list[Write] = field(default_factory=list)
    envelopes: list[OutboundEnvelope] = field(default_factory=list)
    certified: list[Certified] = field(default_factory=list)
    deliveries: set[str] = field(default_factory=set)
    """Agents with new pending deliveries to classify."""
    delivered: list[Delivered] = field(default_factory=list)
    """Those pending deliveries themselves, handed to their classifiers once committed
    (engine.md §7.2): no read of what the process just wrote."""
    catch_up_queries: list[CatchUpQuery] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.writes or self.envelopes or self.certified or self.catch_up_queries)


class DirectInboxes(Protocol):
    """The hosted members' inboxes, which a local unit may write a delivery's item to
    directly (engine.md §5.10, classified at certification)."""

    def item_for(self, agent_id: str, token: str, message: InboundMessage) -> PutInboxItem | None:
        """The member's inbox item for `message` under `token`, unsequenced, when it needs
        no classifier (a plain multicast, no inbound firewall check); else None."""
        ...

    def sequence(
        self, writes: Sequence[Write]
    ) -> tuple[Sequence[Write], Callable[[BaseException | None], None]]:
        """`writes` with their inbox items sequenced (call it as the transaction is queued),
        and what to call once it answered: None when it committed, else its error."""
        ...

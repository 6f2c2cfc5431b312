"""What the Router path (`gateway.engine.certifier`) and local order (`gateway.engine.local`)
both hold of a conversation and of a bound intent, and the records built from them.

`Identity` is a hosted agent's committed identity; `BoundIntent` a bound post intent not yet
certified (its row and its `Certified` notice); `ConversationState` a conversation's
foundation and head, with the action and record it builds next; `ConversationPosition` where
one member stands. The helpers need no state: the stored anchor's hash and decoding, the post
op an intent carries, the intent row, and `project` (the delivery projection of a record).
Each path subclasses the two states with its own working state. `BindRefused` is how either
path refuses a bind (`certification-unavailable`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self, assert_never

from harness_contract.addresses import agent_address, group_address
from harness_contract.collective_part import ClosePart, RequestPart, ResponsePart, read_collective
from harness_contract.jsonvalue import parse_canonical_json
from harness_contract.kinds import PostKind, PostOp
from harness_contract.values import Content, DirectMessage, GroupMessage, InboundMessage

from gateway.engine import protocol as p
from gateway.engine.effects import Certified
from gateway.identity.keys import SigningKey
from gateway.store.records import ConversationRow, IntentState, PutIntent, Write


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """A hosted agent's committed identity."""

    agent_id: str
    agent_name: str
    key: SigningKey
    card: p.SignedAgentCard


@dataclass(eq=False, kw_only=True)
class BoundIntent:
    """A bound post intent not yet certified, as the Router path and local order hold it."""

    post_id: str
    intent: p.PostIntent
    bind_seq: int
    bound_at: float
    resumed: bool
    """Reloaded after a restart (its latency is not observed)."""

    def write(self, agent_id: str, state: IntentState, record_hash: str | None) -> Write:
        """The intent's row at `agent_id`, its author."""
        return intent_write(
            agent_id,
            self.intent,
            bind_seq=self.bind_seq,
            bound_at=self.bound_at,
            state=state,
            record_hash=record_hash,
        )

    def certified(self, agent_id: str, record_hash: str, kind: PostKind) -> Certified:
        """The notice that the post certified as `record_hash`: its send may succeed."""
        return Certified(
            agent_id=agent_id,
            post_id=self.post_id,
            record_hash=record_hash,
            bound_at=self.bound_at,
            kind=kind,
            op=post_op(self.intent.content),
            resumed=self.resumed,
        )


@dataclass(eq=False, kw_only=True)
class ConversationState:
    """A conversation's foundation and the head a member stands at, as the Router path and
    local order both hold it (each adds its own working state)."""

    id: str
    descriptor: p.MembershipDescriptor
    membership_hash: str
    anchor: p.RouterAnchor
    anchor_hash: str
    head: str | None
    depth: int

    @classmethod
    def founded(
        cls, descriptor: p.MembershipDescriptor, membership_hash: str, anchor: p.GenesisAnchor
    ) -> Self:
        """A new conversation on `anchor`, with no record yet."""
        return cls(
            id=descriptor.conversation_id,
            descriptor=descriptor,
            membership_hash=membership_hash,
            anchor=anchor,
            anchor_hash=p.anchor_hash(anchor),
            head=None,
            depth=0,
        )

    @classmethod
    def genesis(
        cls, descriptor: p.MembershipDescriptor, membership_hash: str, instance_id: str
    ) -> Self:
        """A new conversation whose GenesisAnchor names the Router instance `instance_id`."""
        anchor = p.GenesisAnchor(
            conversation_id=descriptor.conversation_id,
            membership_hash=membership_hash,
            router_instance_id=instance_id,
        )
        return cls.founded(descriptor, membership_hash, anchor)

    @classmethod
    def from_row(
        cls, row: ConversationRow, descriptor: p.MembershipDescriptor, anchor: p.RouterAnchor
    ) -> Self:
        """A stored conversation, given its row's decoded descriptor and anchor."""
        return cls(
            id=row.conversation_id,
            descriptor=descriptor,
            membership_hash=row.membership_hash,
            anchor=anchor,
            anchor_hash=row.anchor_hash,
            head=row.head,
            depth=row.depth,
        )

    def action_on(self, head: str | None, intent: p.PostIntent) -> p.Action | None:
        """The action proposing `intent` on `head` under the current anchor: a GENESIS on
        no head, else a POST; None on no head when the anchor is not a GenesisAnchor."""
        if head is None:
            if not isinstance(self.anchor, p.GenesisAnchor):
                return None
            return p.build_genesis_action(
                membership=self.descriptor, anchor=self.anchor, intent=intent
            )
        return p.build_post_action(
            anchor_hash=self.anchor_hash, previous_record_hash=head, intent=intent
        )

    def action_certified_record(
        self, action: p.Action, certificate: p.Certificate
    ) -> p.ActionCertifiedRecord:
        """The record of a certified action: its RecordCore in this membership, under the
        anchor it was proposed on (a GENESIS names its own, a POST the current one)."""
        core = p.build_record_core(membership=self.descriptor, action=action)
        return p.ActionCertifiedRecord(
            record_hash=p.record_hash(core),
            record_core=core,
            router_anchor=action.anchor if isinstance(action, p.GenesisAction) else self.anchor,
            action_certificate=certificate,
        )

    @property
    def size(self) -> int:
        return self.descriptor.size

    @property
    def member_ids(self) -> tuple[str, ...]:
        return self.descriptor.member_agent_ids

    @property
    def kind(self) -> PostKind:
        return PostKind.of_size(self.size)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationPosition:
    """Where one member stands in a conversation: its head and current anchor."""

    head: str | None
    depth: int
    anchor: p.RouterAnchor
    anchor_hash: str


def router_anchor_hash(anchor: p.RouterAnchor) -> str:
    match anchor:
        case p.GenesisAnchor():
            return p.anchor_hash(anchor)
        case p.CompletedReanchor(anchor_hash=hash_):
            return hash_
        case _:
            assert_never(anchor)


def router_anchor_from_bytes(data: bytes) -> p.RouterAnchor:
    value = parse_canonical_json(data)
    if isinstance(value, dict) and value.get("kind") == p.CompletedReanchor.KIND:
        return p.CompletedReanchor.from_json(value)
    return p.GenesisAnchor.from_json(value)


def post_op(content: Content) -> PostOp:
    """The operation an own post carries, from its collective part."""
    match read_collective(content).part:
        case RequestPart(op=op):
            return PostOp(op.value)
        case ResponsePart():
            return PostOp.ANSWER
        case ClosePart():
            return PostOp.CLOSE
        case _:
            return PostOp.MULTICAST


def intent_write(
    agent_id: str,
    intent: p.PostIntent,
    *,
    bind_seq: int,
    bound_at: float,
    state: IntentState,
    record_hash: str | None,
) -> Write:
    """The row of a post intent. A completed one carries no bytes: its certified record
    holds them and the store keeps none (so they are not encoded for nothing)."""
    return PutIntent(
        agent_id=agent_id,
        post_id=intent.post_id,
        conversation_id=intent.conversation_id,
        bind_seq=bind_seq,
        intent=b"" if state is IntentState.COMPLETED else p.encode(intent),
        state=state,
        record_hash=record_hash,
        bound_at=bound_at,
    )


def project(descriptor: p.MembershipDescriptor, intent: p.PostIntent) -> InboundMessage:
    """The delivery projection, from the certified record alone (names from its cards)."""
    author = descriptor.card_of(intent.author_agent_id)
    assert author is not None  # check_action proved the author is a member
    sender = agent_address(author.agent_name)
    if descriptor.size == 2:
        return DirectMessage(
            post_id=intent.post_id, address=sender, sender=sender, content=intent.content
        )
    names = sorted(member.card.agent_name for member in descriptor.members)
    return GroupMessage(
        post_id=intent.post_id,
        address=group_address(names),
        sender=sender,
        members=tuple(agent_address(name) for name in names),
        content=intent.content,
    )


class BindRefused(Exception):
    """The intent cannot be bound (`certification-unavailable`)."""

"""Building the objects a member proposes, with the hashes they name filled in.

`build_membership`, `build_genesis_action`, `build_post_action`, `build_record_core`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import assert_never

from harness_contract.ids import agent_id_order_key

from gateway.engine.protocol.conversation import (
    Action,
    GenesisAction,
    GenesisAnchor,
    MembershipDescriptor,
    PostAction,
    PostIntent,
    RecordCore,
    membership_order_problem,
)
from gateway.engine.protocol.hashes import (
    action_hash,
    anchor_hash,
    conversation_id,
    post_intent_hash,
)
from gateway.identity.cards import SignedAgentCard
from gateway.identity.objects import ProtocolError

# --- Builders ----------------------------------------------------------------------------


def build_membership(cards: Iterable[SignedAgentCard]) -> MembershipDescriptor:
    """The descriptor of a member set: cards in AgentId byte order and the derived id.

    Raises `ProtocolError` for a repeated id or name or a size outside 2..32. The cards'
    signatures are not checked here (see `verify_membership`).
    """
    members = tuple(sorted(cards, key=lambda member: agent_id_order_key(member.card.agent_id)))
    descriptor = MembershipDescriptor(
        conversation_id=conversation_id(member.card.agent_id for member in members),
        members=members,
    )
    problem = membership_order_problem(descriptor)
    if problem is not None:
        raise ProtocolError(f"members: {problem}")
    return descriptor


def build_genesis_action(
    *, membership: MembershipDescriptor, anchor: GenesisAnchor, intent: PostIntent
) -> GenesisAction:
    """The GENESIS action carrying `intent` under `anchor`."""
    return GenesisAction(
        conversation_id=membership.conversation_id,
        membership=membership,
        anchor=anchor,
        post_intent=intent,
        post_intent_hash=post_intent_hash(intent),
    )


def build_post_action(
    *, anchor_hash: str, previous_record_hash: str, intent: PostIntent
) -> PostAction:
    """The POST action carrying `intent` on `previous_record_hash` under `anchor_hash`."""
    return PostAction(
        conversation_id=intent.conversation_id,
        membership_hash=intent.membership_hash,
        anchor_hash=anchor_hash,
        previous_record_hash=previous_record_hash,
        post_intent=intent,
        post_intent_hash=post_intent_hash(intent),
    )


def build_record_core(*, membership: MembershipDescriptor, action: Action) -> RecordCore:
    """The RecordCore of `action`: GENESIS takes the hash of its own anchor, POST its
    `anchorHash` (engine.md §5.2)."""
    match action:
        case GenesisAction(anchor=anchor):
            core_anchor = anchor_hash(anchor)
        case PostAction(anchor_hash=post_anchor):
            core_anchor = post_anchor
        case _:
            assert_never(action)
    return RecordCore(
        membership=membership,
        anchor_hash=core_anchor,
        action=action,
        action_hash=action_hash(action),
    )

"""The protocol's hashes (engine.md §1.4): each is `HashId.X.of(obj.to_json())`.

`conversation_id`, `membership_hash` (cached), `post_intent_hash`, `anchor_hash`,
`action_hash`, `record_hash`, `evidence_id` and `envelope_digest`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from harness_contract.ids import HashId

from gateway.engine.protocol.conversation import (
    Action,
    Anchor,
    ConversationIdentity,
    MembershipDescriptor,
    PostIntent,
    RecordCore,
)
from gateway.engine.protocol.evidence import Statement
from gateway.engine.protocol.packets import SignedEnvelope

# --- Hashes (§1.4) -----------------------------------------------------------------------


def conversation_id(member_agent_ids: Iterable[str]) -> str:
    """ConversationId of a member set given in any order (sorted by AgentId bytes).

    Raises `ProtocolError` for an invalid or repeated AgentId or a size outside 2..32.
    """
    return HashId.CONVERSATION.of(ConversationIdentity.of(member_agent_ids).to_json())


@functools.lru_cache(maxsize=4096)
def membership_hash(descriptor: MembershipDescriptor) -> str:
    """MembershipHash (`mbr_`) of a descriptor.

    Cached: every check of every statement needs it, and a descriptor carries up to 32
    signed cards; descriptors are immutable values, equal ones hash alike."""
    return HashId.MEMBERSHIP.of(descriptor.to_json())


def post_intent_hash(intent: PostIntent) -> str:
    """PostIntentHash (`pit_`) of an intent."""
    return HashId.POST_INTENT.of(intent.to_json())


def anchor_hash(anchor: Anchor) -> str:
    """AnchorHash (`anc_`) of a GenesisAnchor or a ReanchorBody."""
    return HashId.ANCHOR.of(anchor.to_json())


def action_hash(action: Action) -> str:
    """ActionHash (`ach_`) of a GENESIS or POST action."""
    return HashId.ACTION.of(action.to_json())


def record_hash(core: RecordCore) -> str:
    """RecordHash (`rch_`) of a RecordCore."""
    return HashId.RECORD.of(core.to_json())


def evidence_id(statement: Statement) -> str:
    """EvidenceId (`evd_`) of a statement; evidence is deduplicated by (signer, EvidenceId)."""
    return HashId.EVIDENCE.of(statement.to_json())


def envelope_digest(signed: SignedEnvelope) -> str:
    """EnvelopeDigest (`smd_`) of a signed envelope, as the Router's `accepted` names it."""
    return HashId.ENVELOPE_DIGEST.of(signed.to_json())

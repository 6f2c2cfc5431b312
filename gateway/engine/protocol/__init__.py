"""The closed protocol objects of the certification engine (engine.md §3, §5.1-§5.3).

Every object is a frozen, slotted, keyword-only dataclass whose `to_json()` gives the spec's
JSON shape, camelCase, with `"version": "harness/1"` added; `encode(obj)` is its JCS bytes and
every hash is `HashId.X.of(obj.to_json())`.

Decoding is strict and happens before any state change. `from_json` (and `decode_packet`,
`decode_signed_envelope`, `decode`) raise exactly one error type, `ProtocolError`, for:
received bytes that are not exactly RFC 8785 (whitespace, key order, duplicate keys, ...), a
missing or extra field, an unknown `kind`, another `version`, a wrong JSON type, an identifier
with the wrong prefix, length or a non-canonical base64 spelling, invalid content, and the
invariants an object states about itself (member and signer order, a GENESIS predecessor of
null, both catch-up positions null or both set, the recipient list, the body bound).

Relationships that need hashing, keys or a second object (a card's signature, a certificate's
threshold, an action naming its membership) are checked by the pure `check_*`/`verify_*`
helpers, which take objects that may also have been built locally.

The package is split by job; each module imports only the ones above it in this list:

    conversation  identity, membership, intent, anchors, actions, RecordCore
    evidence      the signed statements and the catch-up request they may name
    certificates  certificates, completed re-anchors, certified records
    packets       packets, envelopes, decode_packet / decode_signed_envelope
    hashes        conversation_id, membership_hash, ... envelope_digest
    builders      build_membership, build_*_action, build_record_core
    signatures    sign_* / verify_*_signature, verify_membership
    rules         quorum, faults_tolerated, check_action, check_*_certificate, ...
    envelopes     envelope_recipients, seal_envelope, envelope_packet, check_envelope

What each check takes and raises:

    decode / from_json          shape and in-object rules       -> ProtocolError
    verify_card                 Registry signature (gateway.identity.cards) -> bool
    verify_*_signature          one signature (signatures)      -> bool
    verify_membership           descriptor rules of §5.2 (signatures) -> ProtocolError
    check_action                intent, hashes, anchor, §5.4.1 (rules) -> ProtocolError
    check_*_certificate         thresholds and entries, §5.1 (rules) -> ProtocolError
    check_certified_record      a whole record (rules)          -> ProtocolError
    check_catch_up_answer       page or incomplete + item (rules) -> ProtocolError
    check_envelope              sender, signature, recipients (envelopes) -> ProtocolError

Importers use `gateway.engine.protocol` (this package's names) or a module by its job. The
leaf `gateway.identity` holds what the Registry shares with the engine: cards, keys, the
field readers; the names the engine's callers use with this vocabulary are re-exported here.
"""

from __future__ import annotations

from gateway.engine.protocol.builders import (
    build_genesis_action,
    build_membership,
    build_post_action,
    build_record_core,
)
from gateway.engine.protocol.certificates import (
    ActionCertifiedRecord,
    Certificate,
    CertificateKind,
    CertifiedRecord,
    CompletedReanchor,
    RouterAnchor,
)
from gateway.engine.protocol.conversation import (
    MAX_MEMBERS,
    MIN_MEMBERS,
    Action,
    Anchor,
    ConversationIdentity,
    GenesisAction,
    GenesisAnchor,
    MembershipDescriptor,
    PostAction,
    PostIntent,
    ReanchorBody,
    RecordCore,
    action_from_json,
)
from gateway.engine.protocol.envelopes import (
    check_envelope,
    envelope_packet,
    envelope_recipients,
    seal_envelope,
)
from gateway.engine.protocol.evidence import (
    ActionSignature,
    CatchUpAttestation,
    CatchUpItemKind,
    CatchUpRequest,
    DurabilityVote,
    ReanchorVote,
    SignedStatement,
    Statement,
    statement_from_json,
)
from gateway.engine.protocol.hashes import (
    action_hash,
    anchor_hash,
    conversation_id,
    envelope_digest,
    evidence_id,
    membership_hash,
    post_intent_hash,
    record_hash,
)
from gateway.engine.protocol.packets import (
    MAX_ENVELOPE_BODY_BYTES,
    ActionProposal,
    CatchUpIncomplete,
    CatchUpItem,
    CatchUpPage,
    Envelope,
    Packet,
    SignedEnvelope,
    decode_packet,
    decode_signed_envelope,
    packet_from_json,
)
from gateway.engine.protocol.rules import (
    action_quorum_met,
    check_action,
    check_action_certificate,
    check_action_certified_record,
    check_catch_up_answer,
    check_certified_record,
    check_completed_reanchor,
    check_durability_certificate,
    check_reanchor_certificate,
    faults_tolerated,
    quorum,
)
from gateway.engine.protocol.signatures import (
    ENVELOPE_ARTIFACT,
    STATEMENT_ARTIFACT,
    sign_envelope,
    sign_statement,
    verify_envelope_signature,
    verify_member_statement,
    verify_membership,
    verify_statement_signature,
)

# Cards and the object rules live in the leaf `gateway.identity`, which the Registry shares.
from gateway.identity.cards import AgentCard, SignedAgentCard
from gateway.identity.objects import VERSION, ProtocolError, ProtocolObject, decode, encode

__all__ = [
    "ENVELOPE_ARTIFACT",
    "MAX_ENVELOPE_BODY_BYTES",
    "MAX_MEMBERS",
    "MIN_MEMBERS",
    "STATEMENT_ARTIFACT",
    "VERSION",
    "Action",
    "ActionCertifiedRecord",
    "ActionProposal",
    "ActionSignature",
    "AgentCard",
    "Anchor",
    "CatchUpAttestation",
    "CatchUpIncomplete",
    "CatchUpItem",
    "CatchUpItemKind",
    "CatchUpPage",
    "CatchUpRequest",
    "Certificate",
    "CertificateKind",
    "CertifiedRecord",
    "CompletedReanchor",
    "ConversationIdentity",
    "DurabilityVote",
    "Envelope",
    "GenesisAction",
    "GenesisAnchor",
    "MembershipDescriptor",
    "Packet",
    "PostAction",
    "PostIntent",
    "ProtocolError",
    "ProtocolObject",
    "ReanchorBody",
    "ReanchorVote",
    "RecordCore",
    "RouterAnchor",
    "SignedAgentCard",
    "SignedEnvelope",
    "SignedStatement",
    "Statement",
    "action_from_json",
    "action_hash",
    "action_quorum_met",
    "anchor_hash",
    "build_genesis_action",
    "build_membership",
    "build_post_action",
    "build_record_core",
    "check_action",
    "check_action_certificate",
    "check_action_certified_record",
    "check_catch_up_answer",
    "check_certified_record",
    "check_completed_reanchor",
    "check_durability_certificate",
    "check_envelope",
    "check_reanchor_certificate",
    "conversation_id",
    "decode",
    "decode_packet",
    "decode_signed_envelope",
    "encode",
    "envelope_digest",
    "envelope_packet",
    "envelope_recipients",
    "evidence_id",
    "faults_tolerated",
    "membership_hash",
    "packet_from_json",
    "post_intent_hash",
    "quorum",
    "record_hash",
    "seal_envelope",
    "sign_envelope",
    "sign_statement",
    "statement_from_json",
    "verify_envelope_signature",
    "verify_member_statement",
    "verify_membership",
    "verify_statement_signature",
]

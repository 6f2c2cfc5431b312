"""Evidence (engine.md §5.2): the statements a member signs, and the signed statement.

`ActionSignature`, `DurabilityVote`, `ReanchorVote` and `CatchUpAttestation` (with the
`CatchUpRequest` it names and the `CatchUpItemKind` it vouches for) form the closed
`Statement` union, read by `statement_from_json`; a `SignedStatement` is one of them with its
signer's signature, evidence and a packet of its own. `statement_entries` reads a
certificate's entry list.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Self, TypeAlias, assert_never

from harness_contract.ids import HashId, RandomId
from harness_contract.jsonvalue import JsonValue

from gateway.engine.protocol.conversation import MAX_MEMBERS, ReanchorBody
from gateway.identity.objects import (
    VERSION,
    ProtocolError,
    array_field,
    flag_field,
    hash_id_field,
    kind_of,
    null_field,
    object_fields,
    optional_hash_id_field,
    random_id_field,
    show,
    signature_field,
    strictly_byte_ordered,
    text_field,
)

# --- Catch-up request (a packet, and part of an attestation) -------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchUpRequest:
    """`{kind:"catch_up_request", conversationId, membershipHash, requesterAgentId,
    knownRecordHash, knownAnchorHash}`: both positions null (asking for GENESIS) or both set."""

    KIND: ClassVar[str] = "catch_up_request"
    conversation_id: str
    membership_hash: str
    requester_agent_id: str
    known_record_hash: str | None
    known_anchor_hash: str | None

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "conversationId": self.conversation_id,
            "membershipHash": self.membership_hash,
            "requesterAgentId": self.requester_agent_id,
            "knownRecordHash": self.known_record_hash,
            "knownAnchorHash": self.known_anchor_hash,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "catch_up_request") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(
            value,
            cls.KIND,
            (
                "conversationId",
                "membershipHash",
                "requesterAgentId",
                "knownRecordHash",
                "knownAnchorHash",
            ),
            at,
        )
        known_record = optional_hash_id_field(obj, "knownRecordHash", HashId.RECORD, at)
        known_anchor = optional_hash_id_field(obj, "knownAnchorHash", HashId.ANCHOR, at)
        if (known_record is None) != (known_anchor is None):
            raise ProtocolError(
                f"{at}: knownRecordHash and knownAnchorHash are both null or both set"
            )
        return cls(
            conversation_id=hash_id_field(obj, "conversationId", HashId.CONVERSATION, at),
            membership_hash=hash_id_field(obj, "membershipHash", HashId.MEMBERSHIP, at),
            requester_agent_id=random_id_field(obj, "requesterAgentId", RandomId.AGENT, at),
            known_record_hash=known_record,
            known_anchor_hash=known_anchor,
        )


# --- Statements (§5.2) -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionSignature:
    """`{kind:"action_signature", signerAgentId, actionHash}`."""

    KIND: ClassVar[str] = "action_signature"
    signer_agent_id: str
    action_hash: str

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "signerAgentId": self.signer_agent_id,
            "actionHash": self.action_hash,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "action_signature") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("signerAgentId", "actionHash"), at)
        return cls(
            signer_agent_id=random_id_field(obj, "signerAgentId", RandomId.AGENT, at),
            action_hash=hash_id_field(obj, "actionHash", HashId.ACTION, at),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DurabilityVote:
    """`{kind:"durability_vote", signerAgentId, conversationId, membershipHash, recordHash}`."""

    KIND: ClassVar[str] = "durability_vote"
    signer_agent_id: str
    conversation_id: str
    membership_hash: str
    record_hash: str

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "signerAgentId": self.signer_agent_id,
            "conversationId": self.conversation_id,
            "membershipHash": self.membership_hash,
            "recordHash": self.record_hash,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "durability_vote") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(
            value, cls.KIND, ("signerAgentId", "conversationId", "membershipHash", "recordHash"), at
        )
        return cls(
            signer_agent_id=random_id_field(obj, "signerAgentId", RandomId.AGENT, at),
            conversation_id=hash_id_field(obj, "conversationId", HashId.CONVERSATION, at),
            membership_hash=hash_id_field(obj, "membershipHash", HashId.MEMBERSHIP, at),
            record_hash=hash_id_field(obj, "recordHash", HashId.RECORD, at),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReanchorVote:
    """`{kind:"reanchor_vote", signerAgentId, anchorHash, reanchor}`."""

    KIND: ClassVar[str] = "reanchor_vote"
    signer_agent_id: str
    anchor_hash: str
    reanchor: ReanchorBody

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "signerAgentId": self.signer_agent_id,
            "anchorHash": self.anchor_hash,
            "reanchor": self.reanchor.to_json(),
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "reanchor_vote") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("signerAgentId", "anchorHash", "reanchor"), at)
        return cls(
            signer_agent_id=random_id_field(obj, "signerAgentId", RandomId.AGENT, at),
            anchor_hash=hash_id_field(obj, "anchorHash", HashId.ANCHOR, at),
            reanchor=ReanchorBody.from_json(obj["reanchor"], at=f"{at}.reanchor"),
        )


class CatchUpItemKind(enum.StrEnum):
    """What a catch-up attestation vouches for."""

    CERTIFIED_RECORD = "certified_record"
    """A page holding a CertifiedRecord; `itemHash` is its RecordHash."""
    COMPLETED_REANCHOR = "completed_reanchor"
    """A page holding a CompletedReanchor; `itemHash` is its AnchorHash."""
    INCOMPLETE = "incomplete"
    """The responder has nothing further; `itemHash` is null and `hasMore` false."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchUpAttestation:
    """`{kind:"catch_up_attestation", signerAgentId, request, itemKind, itemHash, hasMore}`."""

    KIND: ClassVar[str] = "catch_up_attestation"
    signer_agent_id: str
    request: CatchUpRequest
    item_kind: CatchUpItemKind
    item_hash: str | None
    has_more: bool
    """A hint, never a safety input."""

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "signerAgentId": self.signer_agent_id,
            "request": self.request.to_json(),
            "itemKind": self.item_kind.value,
            "itemHash": self.item_hash,
            "hasMore": self.has_more,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "catch_up_attestation") -> Self:
        """Decode strictly, `itemHash` matching `itemKind`; raises `ProtocolError`."""
        obj = object_fields(
            value, cls.KIND, ("signerAgentId", "request", "itemKind", "itemHash", "hasMore"), at
        )
        raw_kind = text_field(obj, "itemKind", at)
        try:
            item_kind = CatchUpItemKind(raw_kind)
        except ValueError:
            raise ProtocolError(f"{at}.itemKind: unknown item kind {show(raw_kind)}") from None
        has_more = flag_field(obj, "hasMore", at)
        item_hash: str | None
        match item_kind:
            case CatchUpItemKind.CERTIFIED_RECORD:
                item_hash = hash_id_field(obj, "itemHash", HashId.RECORD, at)
            case CatchUpItemKind.COMPLETED_REANCHOR:
                item_hash = hash_id_field(obj, "itemHash", HashId.ANCHOR, at)
            case CatchUpItemKind.INCOMPLETE:
                null_field(obj, "itemHash", at)
                item_hash = None
                if has_more:
                    raise ProtocolError(f"{at}.hasMore: must be false for an incomplete answer")
            case _:
                assert_never(item_kind)
        return cls(
            signer_agent_id=random_id_field(obj, "signerAgentId", RandomId.AGENT, at),
            request=CatchUpRequest.from_json(obj["request"], at=f"{at}.request"),
            item_kind=item_kind,
            item_hash=item_hash,
            has_more=has_more,
        )


Statement: TypeAlias = ActionSignature | DurabilityVote | ReanchorVote | CatchUpAttestation
"""What a member signs as evidence; kinds are never interchangeable."""


def statement_from_json(value: JsonValue, *, at: str = "statement") -> Statement:
    """Decode any statement by its `kind`; raises `ProtocolError`."""
    match kind_of(value, at):
        case ActionSignature.KIND:
            return ActionSignature.from_json(value, at=at)
        case DurabilityVote.KIND:
            return DurabilityVote.from_json(value, at=at)
        case ReanchorVote.KIND:
            return ReanchorVote.from_json(value, at=at)
        case CatchUpAttestation.KIND:
            return CatchUpAttestation.from_json(value, at=at)
        case other:
            raise ProtocolError(f"{at}: unknown statement kind {show(other)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedStatement:
    """`{kind:"signed_statement", statement, signature}`: `SIG(signer, "statement", statement)`.

    Evidence, and a packet of its own (the envelope sender must be the signer).
    """

    KIND: ClassVar[str] = "signed_statement"
    statement: Statement
    signature: str

    @property
    def signer_agent_id(self) -> str:
        """The statement's signer."""
        return self.statement.signer_agent_id

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "statement": self.statement.to_json(),
            "signature": self.signature,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "signed_statement") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("statement", "signature"), at)
        return cls(
            statement=statement_from_json(obj["statement"], at=f"{at}.statement"),
            signature=signature_field(obj, "signature", at),
        )


def statement_entries(
    obj: Mapping[str, JsonValue], name: str, at: str
) -> tuple[SignedStatement, ...]:
    items = array_field(obj, name, at, least=0, most=MAX_MEMBERS)
    entries = tuple(
        SignedStatement.from_json(item, at=f"{at}.{name}[{index}]")
        for index, item in enumerate(items)
    )
    if not strictly_byte_ordered([entry.signer_agent_id for entry in entries]):
        raise ProtocolError(f"{at}.{name}: not one entry per signer in AgentId byte order")
    return entries

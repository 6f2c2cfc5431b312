"""Packets and envelopes (engine.md §5.3): what members send one another through the Router.

The closed `Packet` union (`ActionProposal`, `SignedStatement`, `CatchUpRequest`,
`CatchUpPage`, `CatchUpIncomplete`, `CompletedReanchor`, read by `packet_from_json` and
`decode_packet`), and the `Envelope` / `SignedEnvelope` that carry one as a bounded body
(`decode_signed_envelope`). The envelope rules (sealing, recipients, the receiver's checks)
are in `envelopes.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final, Self, TypeAlias

from harness_contract.ids import RandomId, unb64
from harness_contract.jsonvalue import JsonValue

from gateway.engine.protocol.certificates import CertifiedRecord, CompletedReanchor
from gateway.engine.protocol.conversation import (
    MAX_MEMBERS,
    Action,
    action_from_json,
    agent_id_item,
)
from gateway.engine.protocol.evidence import CatchUpRequest, SignedStatement
from gateway.identity.objects import (
    VERSION,
    ProtocolError,
    array_field,
    flag_field,
    kind_of,
    object_fields,
    parse_object_bytes,
    random_id_field,
    show,
    signature_field,
    strictly_byte_ordered,
    text_field,
)

MAX_ENVELOPE_BODY_BYTES: Final = 262_144
"""Largest decoded envelope body (a packet's JCS bytes), per engine.md §4 and §6."""

_MAX_ENVELOPE_BODY_TEXT: Final = (MAX_ENVELOPE_BODY_BYTES * 4 + 2) // 3
"""Characters of unpadded base64url of the largest body; longer text is refused undecoded."""

# --- Packets (§5.3) ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionProposal:
    """`{kind:"action_proposal", action}`."""

    KIND: ClassVar[str] = "action_proposal"
    action: Action

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {"kind": self.KIND, "version": VERSION, "action": self.action.to_json()}

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "action_proposal") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("action",), at)
        return cls(action=action_from_json(obj["action"], at=f"{at}.action"))


CatchUpItem: TypeAlias = CertifiedRecord | CompletedReanchor
"""What one catch-up page carries."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchUpPage:
    """`{kind:"catch_up_page", request, item, hasMore, attestation}`."""

    KIND: ClassVar[str] = "catch_up_page"
    request: CatchUpRequest
    item: CatchUpItem
    has_more: bool
    attestation: SignedStatement

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "request": self.request.to_json(),
            "item": self.item.to_json(),
            "hasMore": self.has_more,
            "attestation": self.attestation.to_json(),
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "catch_up_page") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("request", "item", "hasMore", "attestation"), at)
        item: CatchUpItem
        item_at = f"{at}.item"
        match kind_of(obj["item"], item_at):
            case CertifiedRecord.KIND:
                item = CertifiedRecord.from_json(obj["item"], at=item_at)
            case CompletedReanchor.KIND:
                item = CompletedReanchor.from_json(obj["item"], at=item_at)
            case other:
                raise ProtocolError(f"{item_at}: unknown item kind {show(other)}")
        return cls(
            request=CatchUpRequest.from_json(obj["request"], at=f"{at}.request"),
            item=item,
            has_more=flag_field(obj, "hasMore", at),
            attestation=SignedStatement.from_json(obj["attestation"], at=f"{at}.attestation"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchUpIncomplete:
    """`{kind:"catch_up_incomplete", request, attestation}`."""

    KIND: ClassVar[str] = "catch_up_incomplete"
    request: CatchUpRequest
    attestation: SignedStatement

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "request": self.request.to_json(),
            "attestation": self.attestation.to_json(),
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "catch_up_incomplete") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("request", "attestation"), at)
        return cls(
            request=CatchUpRequest.from_json(obj["request"], at=f"{at}.request"),
            attestation=SignedStatement.from_json(obj["attestation"], at=f"{at}.attestation"),
        )


Packet: TypeAlias = (
    ActionProposal
    | SignedStatement
    | CatchUpRequest
    | CatchUpPage
    | CatchUpIncomplete
    | CompletedReanchor
)
"""What an envelope body carries (closed)."""


def packet_from_json(value: JsonValue, *, at: str = "packet") -> Packet:
    """Decode any packet by its `kind`; raises `ProtocolError`."""
    match kind_of(value, at):
        case ActionProposal.KIND:
            return ActionProposal.from_json(value, at=at)
        case SignedStatement.KIND:
            return SignedStatement.from_json(value, at=at)
        case CatchUpRequest.KIND:
            return CatchUpRequest.from_json(value, at=at)
        case CatchUpPage.KIND:
            return CatchUpPage.from_json(value, at=at)
        case CatchUpIncomplete.KIND:
            return CatchUpIncomplete.from_json(value, at=at)
        case CompletedReanchor.KIND:
            return CompletedReanchor.from_json(value, at=at)
        case other:
            raise ProtocolError(f"{at}: unknown packet kind {show(other)}")


# --- Envelopes (§5.3) --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    """`{kind:"envelope", senderAgentId, recipientAgentIds, messageId, body}`.

    `body` is `b64` of a packet's JCS bytes, at most 262,144 bytes decoded.
    """

    KIND: ClassVar[str] = "envelope"
    sender_agent_id: str
    recipient_agent_ids: tuple[str, ...]
    message_id: str
    body: str

    def body_bytes(self) -> bytes:
        """The decoded body. Raises `ProtocolError` when it is not canonical base64url."""
        data = unb64(self.body)
        if data is None:
            raise ProtocolError("envelope.body: not canonical unpadded base64url")
        return data

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "senderAgentId": self.sender_agent_id,
            "recipientAgentIds": list(self.recipient_agent_ids),
            "messageId": self.message_id,
            "body": self.body,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "envelope") -> Self:
        """Decode strictly: 1..32 distinct recipients in byte order, a bounded canonical body."""
        obj = object_fields(
            value, cls.KIND, ("senderAgentId", "recipientAgentIds", "messageId", "body"), at
        )
        items = array_field(obj, "recipientAgentIds", at, least=1, most=MAX_MEMBERS)
        recipients = tuple(
            agent_id_item(item, f"{at}.recipientAgentIds[{index}]")
            for index, item in enumerate(items)
        )
        if not strictly_byte_ordered(recipients):
            raise ProtocolError(f"{at}.recipientAgentIds: not distinct and in AgentId byte order")
        body = text_field(obj, "body", at)
        if len(body) > _MAX_ENVELOPE_BODY_TEXT:
            raise ProtocolError(f"{at}.body: larger than {MAX_ENVELOPE_BODY_BYTES:,} bytes")
        if unb64(body) is None:
            raise ProtocolError(f"{at}.body: not canonical unpadded base64url")
        return cls(
            sender_agent_id=random_id_field(obj, "senderAgentId", RandomId.AGENT, at),
            recipient_agent_ids=recipients,
            message_id=random_id_field(obj, "messageId", RandomId.MESSAGE, at),
            body=body,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedEnvelope:
    """`{kind:"signed_envelope", envelope, signature}`: `SIG(sender, "envelope", envelope)`.

    It attributes a packet to its sender; it is never action evidence.
    """

    KIND: ClassVar[str] = "signed_envelope"
    envelope: Envelope
    signature: str

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "envelope": self.envelope.to_json(),
            "signature": self.signature,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "signed_envelope") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("envelope", "signature"), at)
        return cls(
            envelope=Envelope.from_json(obj["envelope"], at=f"{at}.envelope"),
            signature=signature_field(obj, "signature", at),
        )


def decode_packet(data: bytes) -> Packet:
    """Decode an envelope body: canonical JCS bytes of one packet; raises `ProtocolError`."""
    return packet_from_json(parse_object_bytes(data))


def decode_signed_envelope(data: bytes) -> SignedEnvelope:
    """Decode the exact bytes a Router carries; raises `ProtocolError`.

    Shapes only: the signature is checked by `verify_envelope_signature`.
    """
    return SignedEnvelope.from_json(parse_object_bytes(data))

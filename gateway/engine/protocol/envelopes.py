"""Envelope rules (engine.md §5.3): the required recipients, sealing a packet for the Router,
reading one back, and the receiver's outer checks.

`envelope_recipients`, `seal_envelope`, `envelope_packet`, and `check_envelope` (raises
`ProtocolError`; the receiver then drops the envelope without a state change).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import assert_never

from harness_contract.ids import RandomId, agent_id_order_key, b64

from gateway.engine.protocol.certificates import CompletedReanchor
from gateway.engine.protocol.conversation import MembershipDescriptor
from gateway.engine.protocol.evidence import CatchUpRequest, SignedStatement
from gateway.engine.protocol.packets import (
    MAX_ENVELOPE_BODY_BYTES,
    ActionProposal,
    CatchUpIncomplete,
    CatchUpPage,
    Envelope,
    Packet,
    SignedEnvelope,
    decode_packet,
)
from gateway.engine.protocol.signatures import sign_envelope, verify_envelope_signature
from gateway.identity.keys import SigningKey, VerifyCache
from gateway.identity.objects import ProtocolError, encode

# --- Envelope rules (§5.3) ---------------------------------------------------------------


def envelope_recipients(
    packet: Packet, *, sender_agent_id: str, member_agent_ids: Iterable[str]
) -> tuple[str, ...]:
    """The required recipient list: every member in AgentId byte order (sender included),
    except that a catch-up page or incomplete goes only to responder (the sender) and
    requester, in byte order."""
    match packet:
        case CatchUpPage(request=request) | CatchUpIncomplete(request=request):
            chosen: Iterable[str] = {sender_agent_id, request.requester_agent_id}
        case ActionProposal() | SignedStatement() | CatchUpRequest() | CompletedReanchor():
            chosen = set(member_agent_ids)
        case _:
            assert_never(packet)
    return tuple(sorted(chosen, key=agent_id_order_key))


def seal_envelope(
    key: SigningKey,
    *,
    sender_agent_id: str,
    packet: Packet,
    member_agent_ids: Iterable[str],
    message_id: str | None = None,
) -> SignedEnvelope:
    """Wrap `packet` for the Router: body `b64(JCS(packet))`, the required recipients, a
    fresh MessageId unless given, signed by the sender's key.

    Raises `ProtocolError` when the body would exceed 262,144 bytes.
    """
    body = encode(packet)
    if len(body) > MAX_ENVELOPE_BODY_BYTES:
        raise ProtocolError(
            f"envelope.body: {len(body):,} bytes is larger than {MAX_ENVELOPE_BODY_BYTES:,}"
        )
    envelope = Envelope(
        sender_agent_id=sender_agent_id,
        recipient_agent_ids=envelope_recipients(
            packet, sender_agent_id=sender_agent_id, member_agent_ids=member_agent_ids
        ),
        message_id=message_id if message_id is not None else RandomId.MESSAGE.mint(),
        body=b64(body),
    )
    return sign_envelope(key, envelope)


def envelope_packet(envelope: Envelope) -> Packet:
    """Decode the packet in an envelope's body; raises `ProtocolError`."""
    data = envelope.body_bytes()
    if len(data) > MAX_ENVELOPE_BODY_BYTES:
        raise ProtocolError(f"envelope.body: larger than {MAX_ENVELOPE_BODY_BYTES:,} bytes")
    return decode_packet(data)


def check_envelope(
    signed: SignedEnvelope,
    packet: Packet,
    *,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """The receiver's outer checks (§5.3) for `packet` decoded from `signed`'s body: the
    sender is a member, the recipients are exactly the required list, the sender is a
    statement's signer, a proposal's author (§5.4 step 1) or a catch-up request's
    requester, and the signature verifies under the sender's card.

    Raises `ProtocolError`; the receiver then drops the envelope without a state change.
    """
    envelope = signed.envelope
    card = membership.card_of(envelope.sender_agent_id)
    if card is None:
        raise ProtocolError("envelope: the sender is not a member")
    required = envelope_recipients(
        packet,
        sender_agent_id=envelope.sender_agent_id,
        member_agent_ids=membership.member_agent_ids,
    )
    if envelope.recipient_agent_ids != required:
        raise ProtocolError("envelope: the recipients differ from the required list")
    sender = envelope.sender_agent_id
    match packet:
        case ActionProposal(action=action) if action.author_agent_id != sender:
            raise ProtocolError("envelope: a proposal's sender must be its author")
        case SignedStatement() if packet.signer_agent_id != sender:
            raise ProtocolError("envelope: a statement's signer must be the sender")
        case CatchUpRequest(requester_agent_id=requester) if requester != sender:
            raise ProtocolError("envelope: a catch-up request's sender must be its requester")
        case _:
            pass
    if not verify_envelope_signature(signed, card.public_key, cache=cache):
        raise ProtocolError("envelope: the signature is invalid")

"""Signatures (engine.md §5.2-§5.3): signing and verifying statements and envelopes, and
verifying a membership descriptor's cards.

`sign_statement`, `verify_statement_signature`, `verify_member_statement`, `sign_envelope`,
`verify_envelope_signature` return a value or a bool; `verify_membership` raises
`ProtocolError` naming the first failure.
"""

from __future__ import annotations

from typing import Final

from gateway.engine.protocol.conversation import MembershipDescriptor, membership_order_problem
from gateway.engine.protocol.evidence import SignedStatement, Statement
from gateway.engine.protocol.hashes import conversation_id
from gateway.engine.protocol.packets import Envelope, SignedEnvelope
from gateway.identity.cards import verify_card
from gateway.identity.keys import SigningKey, VerifyCache, verify
from gateway.identity.objects import ProtocolError

# --- Signatures --------------------------------------------------------------------------


STATEMENT_ARTIFACT: Final = "statement"
"""Artifact of a member's evidence signature."""
ENVELOPE_ARTIFACT: Final = "envelope"
"""Artifact of a sender's envelope signature."""


def sign_statement(key: SigningKey, statement: Statement) -> SignedStatement:
    """`statement` with `SIG(signer, "statement", statement)`; the key must be the signer's."""
    return SignedStatement(
        statement=statement, signature=key.sign(STATEMENT_ARTIFACT, statement.to_json())
    )


def verify_statement_signature(
    signed: SignedStatement, public_key: str, *, cache: VerifyCache | None = None
) -> bool:
    """True when `signed.signature` is the holder of `public_key`'s signature of the statement."""
    return verify(
        public_key, STATEMENT_ARTIFACT, signed.statement.to_json(), signed.signature, cache=cache
    )


def verify_member_statement(
    signed: SignedStatement, membership: MembershipDescriptor, *, cache: VerifyCache | None = None
) -> bool:
    """True when the signer is a member and the signature verifies under its card's key."""
    card = membership.card_of(signed.signer_agent_id)
    return card is not None and verify_statement_signature(signed, card.public_key, cache=cache)


def sign_envelope(key: SigningKey, envelope: Envelope) -> SignedEnvelope:
    """`envelope` with `SIG(sender, "envelope", envelope)`; the key must be the sender's."""
    return SignedEnvelope(
        envelope=envelope, signature=key.sign(ENVELOPE_ARTIFACT, envelope.to_json())
    )


def verify_envelope_signature(
    signed: SignedEnvelope, public_key: str, *, cache: VerifyCache | None = None
) -> bool:
    """True when the envelope carries the holder of `public_key`'s signature."""
    return verify(
        public_key, ENVELOPE_ARTIFACT, signed.envelope.to_json(), signed.signature, cache=cache
    )


# --- Membership (§5.2) -------------------------------------------------------------------


def verify_membership(
    descriptor: MembershipDescriptor,
    registry_public_key: str,
    *,
    cache: VerifyCache | None = None,
) -> None:
    """Check a descriptor: 2..32 members in AgentId byte order, distinct ids and names, each
    card signed by the Registry, and `conversationId` re-deriving from the member ids.

    Raises `ProtocolError` naming the first failure.
    """
    problem = membership_order_problem(descriptor)
    if problem is not None:
        raise ProtocolError(f"membership: {problem}")
    if descriptor.conversation_id != conversation_id(descriptor.member_agent_ids):
        raise ProtocolError("membership: conversationId does not derive from the members")
    for index, member in enumerate(descriptor.members):
        if not verify_card(member, registry_public_key, cache=cache):
            raise ProtocolError(f"membership.members[{index}]: the Registry signature is invalid")

"""The Router's envelope verification (engine.md §4 Send step 2) against Registry cards.

The Router is content-blind: it checks the outer envelope's shape and the sender's
signature under the sender's Registry card, never the body. Cards come through the
verifying, caching `RegistryClient`; signature verdicts are cached per daemon.
"""

from __future__ import annotations

from gateway.engine import protocol as p
from gateway.identity.keys import VerifyCache
from gateway.registry.client import Found, RegistryClient
from gateway.router import VerifiedEnvelope


class RegistryEnvelopeVerifier:
    """`EnvelopeVerifier` checking signatures against Registry cards."""

    def __init__(self, registry: RegistryClient, *, cache: VerifyCache) -> None:
        self._registry = registry
        self._cache = cache

    async def verify(self, signed_envelope: bytes) -> VerifiedEnvelope | str:
        """The envelope's routing facts, or why it is invalid.

        Raises `RegistryError` when the sender's card cannot be fetched."""
        try:
            signed = p.decode_signed_envelope(signed_envelope)
            body_size = len(signed.envelope.body_bytes())
        except p.ProtocolError as error:
            return error.detail
        sender = signed.envelope.sender_agent_id
        # A Registry outage raises (RegistryError): the sender retries; it is not the
        # envelope's fault, so it must not be refused as invalid.
        outcome = await self._registry.lookup_by_id(sender)
        if not isinstance(outcome, Found):
            return "the sender is not registered"
        if not p.verify_envelope_signature(signed, outcome.card.card.public_key, cache=self._cache):
            return "the envelope signature is invalid"
        return VerifiedEnvelope(
            sender_agent_id=sender,
            message_id=signed.envelope.message_id,
            recipient_agent_ids=signed.envelope.recipient_agent_ids,
            body_size=body_size,
        )

"""Test envelopes and a keyless verifier for Router tests.

A test envelope has the SignedEnvelope shape of engine.md §5.3 (JCS bytes), but its
`signature` is the word `valid` or anything else instead of an Ed25519 signature: the
Router never reads it, and the real verifier is engine code tested on its own.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence

from harness_contract.ids import RandomId, agent_id_order_key, b64, unb64
from harness_contract.jsonvalue import (
    JsonValue,
    JsonValueError,
    canonical_json,
    parse_canonical_json,
)

from gateway.router import VerifiedEnvelope

VALID_SIGNATURE = "valid"


def agent_ids(count: int) -> list[str]:
    """`count` fresh AgentIds in byte order."""
    return sorted((RandomId.AGENT.mint() for _ in range(count)), key=agent_id_order_key)


def in_byte_order(ids: Iterable[str]) -> list[str]:
    """AgentIds sorted by their decoded bytes, as an envelope lists them."""
    return sorted(ids, key=agent_id_order_key)


def signed_envelope(
    *,
    sender: str,
    recipients: Sequence[str],
    message_id: str | None = None,
    body: bytes = b"hello",
    signature: str = VALID_SIGNATURE,
) -> bytes:
    """The JCS bytes of a test SignedEnvelope; recipients are listed as given."""
    value: JsonValue = {
        "envelope": {
            "body": b64(body),
            "kind": "envelope",
            "messageId": message_id if message_id is not None else RandomId.MESSAGE.mint(),
            "recipientAgentIds": tuple(recipients),
            "senderAgentId": sender,
            "version": "harness/1",
        },
        "kind": "signed_envelope",
        "signature": signature,
        "version": "harness/1",
    }
    return canonical_json(value)


def rewrap(data: bytes, *, message_id: str | None = None, body: bytes | None = None) -> bytes:
    """The same test envelope under a fresh MessageId (or the given one), or another body."""
    value = parse_canonical_json(data)
    assert isinstance(value, Mapping)
    envelope = value["envelope"]
    assert isinstance(envelope, Mapping)
    sender, recipients = envelope["senderAgentId"], envelope["recipientAgentIds"]
    assert isinstance(sender, str)
    assert isinstance(recipients, Sequence)
    return signed_envelope(
        sender=sender,
        recipients=[str(recipient) for recipient in recipients],
        message_id=message_id if message_id is not None else RandomId.MESSAGE.mint(),
        body=body if body is not None else b"hello",
    )


class FakeVerifier:
    """An `EnvelopeVerifier` for test envelopes: canonical bytes, shape and the word `valid`.

    `calls` counts verifications. `yields(data)` is how many times a verification yields to
    the event loop before answering, so concurrent sends finish in a chosen order.
    """

    def __init__(self, *, yields: Callable[[bytes], int] | None = None) -> None:
        self.calls = 0
        self._yields = yields

    async def verify(self, signed_envelope: bytes) -> VerifiedEnvelope | str:
        self.calls += 1
        for _ in range(self._yields(signed_envelope) if self._yields is not None else 0):
            await asyncio.sleep(0)  # a yield to the loop, not a wait
        try:
            value = parse_canonical_json(signed_envelope)
        except JsonValueError as error:
            return f"not a canonical SignedEnvelope: {error.detail}"
        if not isinstance(value, Mapping) or value.get("signature") != VALID_SIGNATURE:
            return "the signature does not verify"
        envelope = value.get("envelope")
        if not isinstance(envelope, Mapping):
            return "no envelope"
        sender, message_id = envelope.get("senderAgentId"), envelope.get("messageId")
        recipients, body = envelope.get("recipientAgentIds"), envelope.get("body")
        if not isinstance(sender, str) or not isinstance(message_id, str):
            return "no sender or messageId"
        if not isinstance(recipients, Sequence) or isinstance(recipients, str):
            return "no recipient list"
        decoded = unb64(body) if isinstance(body, str) else None
        if decoded is None:
            return "the body is not base64url"
        return VerifiedEnvelope(
            sender_agent_id=sender,
            message_id=message_id,
            recipient_agent_ids=tuple(str(recipient) for recipient in recipients),
            body_size=len(decoded),
        )


def crc_yields(spread: int) -> Callable[[bytes], int]:
    """Deterministic per-envelope yield counts in `0..spread-1` (stable across runs)."""
    return lambda data: zlib.crc32(data) % spread

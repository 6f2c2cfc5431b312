"""The Router (engine.md §4): the seam every backend implements, and the in-process ring.

Others import from here only: `RouterPort` and its records, `EnvelopeVerifier`,
`InProcessRouter` with `RingSettings`, and `envelope_digest` for checking an `Accepted`.
"""

from __future__ import annotations

from gateway.router.memory import InProcessRouter, RingStatus
from gateway.router.port import (
    ENVELOPE_BODY_MAX_BYTES,
    POLL_HOLD,
    RECIPIENTS_MAX,
    SIGNED_ENVELOPE_MAX_BYTES,
    Accepted,
    Batch,
    Cursor,
    CursorInvalid,
    Entry,
    EnvelopeVerifier,
    FeedGap,
    IdempotencyConflict,
    MessageInvalid,
    PollOutcome,
    RetryIdentityUnknown,
    RouterClosedError,
    RouterPort,
    RouterRestarted,
    RouterState,
    RouterUnavailable,
    RouterVersionMismatch,
    SendMode,
    SendOutcome,
    VerifiedEnvelope,
    envelope_digest,
    routing_problem,
)
from gateway.router.settings import RingSettings

__all__ = [
    "ENVELOPE_BODY_MAX_BYTES",
    "POLL_HOLD",
    "RECIPIENTS_MAX",
    "SIGNED_ENVELOPE_MAX_BYTES",
    "Accepted",
    "Batch",
    "Cursor",
    "CursorInvalid",
    "Entry",
    "EnvelopeVerifier",
    "FeedGap",
    "IdempotencyConflict",
    "InProcessRouter",
    "MessageInvalid",
    "PollOutcome",
    "RetryIdentityUnknown",
    "RingSettings",
    "RingStatus",
    "RouterClosedError",
    "RouterPort",
    "RouterRestarted",
    "RouterState",
    "RouterUnavailable",
    "RouterVersionMismatch",
    "SendMode",
    "SendOutcome",
    "VerifiedEnvelope",
    "envelope_digest",
    "routing_problem",
]

"""Retry policy as data: which failures are retried, and how.

The channel retries only the idempotent unary methods, with the service config of
operations.md §3; the library itself retries sends (`send_may_retry`: a refusal that had
no effect, and a keyed send whose outcome is unknown, under its key) and reconnects
`messages()`. Nothing else retries, and no `except` block decides a retry on its own:
callers ask `should_reconnect`, `send_may_retry` and `never_sent`.
"""

from __future__ import annotations

import json
import random
from typing import Final

import grpc
from harness_contract.errors import (
    HarnessError,
    SendError,
    SendErrorReason,
    StatusCode,
    UnavailableError,
)

from harness_client._errors import TransportError

RETRYABLE_CODES: Final = frozenset({grpc.StatusCode.UNAVAILABLE})
"""Codes after which the call had no effect on the gateway (operations.md §3)."""

TERMINAL_CODES: Final = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
"""Codes no retry can change: the request or the agent's state must change first."""

RECONNECT_CODES: Final = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)
"""Transport codes after which a `Messages` stream reconnects: replay makes it safe."""

NEVER_SENT_MARKERS: Final = (
    "failed to connect to all addresses",
    "connection refused",
    "dns resolution failed",
)
"""Texts of gRPC core's UNAVAILABLE when no connection was made, so no request left:
a keyless send then fails `network-unavailable` rather than `outcome-unknown`."""

SERVICE_CONFIG: Final = {
    "methodConfig": [
        {
            "name": [
                {"service": "harness.v1.HarnessEndpointService", "method": "Acknowledge"},
                {"service": "harness.v1.HarnessEndpointService", "method": "ReadSend"},
                {"service": "harness.v1.HarnessEndpointService", "method": "ParseMessageText"},
            ],
            "retryPolicy": {
                "maxAttempts": 4,
                "initialBackoff": "0.2s",
                "maxBackoff": "3s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }
    ],
    "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1},
}
"""The client retry service config of operations.md §3, passed as `grpc.service_config`."""

SERVICE_CONFIG_JSON: Final = json.dumps(SERVICE_CONFIG, separators=(",", ":"))

RECONNECT_INITIAL_DELAY: Final = 0.2
"""Seconds before the first retry of a stream or a send (operations.md §10); each delay is
drawn from its upper half, so the first retry comes 0.1 to 0.2 s after the failure."""
RECONNECT_MAX_DELAY: Final = 1.0
"""Most seconds between two attempts: a stream is back, and a retried send through, within
about a second of the gateway (or a replica) answering again, however long it was away. An
attempt costs one call, so a client retrying every second puts no load worth counting on a
gateway that is down."""
RECONNECT_MULTIPLIER: Final = 2.0
"""Each failed attempt doubles the delay, up to the maximum."""

SEND_RETRY_FLOOR: Final = 1.0
"""Seconds a send's deadline must still have for the client to send it again. The gateway
answers one second before a call's deadline at the latest (operations.md §3); a shorter
attempt could only end the client's side of the call, turning a definite failure into
`outcome-unknown`."""


def should_reconnect(error: HarnessError) -> bool:
    """True when a `messages()` stream ended by `error` should reconnect.

    The gateway shutting down or not ready yet, and transport failures, reconnect (replay
    makes it safe); every typed contract failure (already-listening, a revoked token) ends
    the iterator."""
    match error:
        case UnavailableError():
            return True
        case TransportError(code=code):
            return code in RECONNECT_CODES
        case _:
            return False


def send_may_retry(error: HarnessError, *, keyed: bool) -> bool:
    """True when a send that failed with `error` may be sent again (operations.md §10).

    The gateway answers UNAVAILABLE only when the call had no effect (operations.md §3), so
    any send refused so, or refused before it left the client, is sent again. A keyed send
    is also sent again when its outcome is unknown, since the gateway joins the live
    invocation or returns the kept outcome under the key (engine.md §9.1); a keyless one
    never is, as it could post twice. A keyed send's typed failure other than
    `outcome-unknown` is the key's kept outcome: sending again would only return it."""
    match error:
        case UnavailableError():
            return True
        case SendError(reason=SendErrorReason.OUTCOME_UNKNOWN):
            return keyed
        case SendError(status_code=StatusCode.UNAVAILABLE):
            return not keyed
        case TransportError(code=code):
            return never_sent(error) or (keyed and code in RECONNECT_CODES)
        case _:
            return False


def never_sent(error: HarnessError) -> bool:
    """True when the failed call cannot have reached the gateway's handler."""
    match error:
        case UnavailableError():
            return True
        case TransportError(code=grpc.StatusCode.UNAVAILABLE, message=message):
            text = message.lower()
            return any(marker in text for marker in NEVER_SENT_MARKERS)
        case _:
            return False


def had_no_effect(error: HarnessError) -> bool:
    """True when the failed send cannot have posted anything: it never reached the gateway's
    handler, or the gateway answered UNAVAILABLE, which it does only then (operations.md §3)."""
    match error:
        case SendError(status_code=StatusCode.UNAVAILABLE):
            return True
        case _:
            return never_sent(error)


class Backoff:
    """Jittered exponential delays: 0.2 s doubling to 1 s, each drawn from [d/2, d]."""

    def __init__(
        self,
        initial: float = RECONNECT_INITIAL_DELAY,
        maximum: float = RECONNECT_MAX_DELAY,
        multiplier: float = RECONNECT_MULTIPLIER,
    ) -> None:
        self._initial = initial
        self._maximum = maximum
        self._multiplier = multiplier
        self._next = initial

    def reset(self) -> None:
        """A connection succeeded: start again from the initial delay."""
        self._next = self._initial

    def next_delay(self) -> float:
        """The next delay in seconds, jittered so reconnecting clients spread out."""
        delay = self._next
        self._next = min(self._maximum, self._next * self._multiplier)
        return random.uniform(delay / 2, delay)

"""The request check: a body that does not decode is INVALID_ARGUMENT, never a traceback.

grpc.aio decodes each request with its method's `request_deserializer` before any handler
runs. When that raises (bytes that are not protobuf, a string field that is not UTF-8),
cygrpc logs `ERROR Unexpected [DecodeError] raised by servicer method` with a traceback and
answers UNKNOWN, before authentication: anyone who can connect could fill the log.

So every method handler a server built by `gateway.rpc.server` serves (the agent, operator,
Router, Registry, cluster peer, health and reflection services alike) gets, from the one
call wrapper in `gateway/rpc/calls.py`,

- a deserializer (`lenient`) that answers `UNDECODABLE` instead of raising;
- a behaviour that ends a call whose request, or any message of its request stream, is
  `UNDECODABLE` at once with INVALID_ARGUMENT, whose `google.rpc.Status` details hold an
  `ErrorInfo` (domain `harness.v1`, reason `MALFORMED_REQUEST`) and whose message names the
  expected type (`type_name`: "the request body is not a valid harness.v1.SendRequest"),
  counted in `harness_rejected_requests_total{reason}`;
- at most one WARNING per `REJECTION_LOG_INTERVAL` per reason (`RejectionLog`), naming the
  method (always a served one) and how many rejections it held back since its last line;
  never a byte of the body, a header or a token.

Every handler shape is checked: unary and streaming requests, coroutines, async generators
and `context.write()` handlers. A synchronous behaviour (this server has none) is left
exactly as it was.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import grpc

from gateway.observability.metrics import RejectedRequestReason

logger = logging.getLogger(__name__)

REJECTION_LOG_INTERVAL: Final = 60.0
"""Seconds between two WARNING lines about rejected requests of one reason.

Anyone who can connect may send undecodable bodies as fast as they like (the check answers
before authentication), so the log says how many it held back instead of a line each."""

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


@dataclass(frozen=True, slots=True)
class Undecodable:
    """What a `lenient` deserializer answers for bytes its message type cannot decode."""

    reason: RejectedRequestReason = RejectedRequestReason.MALFORMED_REQUEST
    """Why the call is refused (`harness_rejected_requests_total{reason}`)."""


UNDECODABLE: Final = Undecodable()
"""The request a wrapped handler receives in place of bytes that do not decode."""


class RejectionLog:
    """At most one WARNING per `interval` seconds per reason, counting what it held back."""

    def __init__(
        self,
        *,
        interval: float = REJECTION_LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._interval = interval
        self._clock = clock
        self._last: dict[RejectedRequestReason, float] = {}
        self._held_back: dict[RejectedRequestReason, int] = {}

    def rejected(self, reason: RejectedRequestReason, method: str) -> None:
        """One call of `method` (a served method's full name) was refused for `reason`."""
        now = self._clock()
        last = self._last.get(reason)
        if last is not None and now - last < self._interval:
            self._held_back[reason] = self._held_back.get(reason, 0) + 1
            return
        self._last[reason] = now
        logger.warning(
            "request refused before its handler reason=%s method=%s suppressed=%d "
            "(one line per %.0f s per reason)",
            reason.value,
            method,
            self._held_back.pop(reason, 0),
            self._interval,
        )


def handler_behavior(handler: Handler) -> tuple[Any, Callable[..., Handler]]:
    """The behaviour `handler` runs for its shape (None when it has none), and the grpc
    factory that makes a handler of that shape."""
    if handler.request_streaming and handler.response_streaming:
        return handler.stream_stream, grpc.stream_stream_rpc_method_handler
    if handler.request_streaming:
        return handler.stream_unary, grpc.stream_unary_rpc_method_handler
    if handler.response_streaming:
        return handler.unary_stream, grpc.unary_stream_rpc_method_handler
    return handler.unary_unary, grpc.unary_unary_rpc_method_handler


def type_name(deserializer: Callable[[bytes], Any], method: str) -> str:
    """The request message's full name (`harness.v1.SendRequest`) when the deserializer is a
    generated `FromString`, else a phrase naming the method."""
    owner = getattr(deserializer, "__self__", None)
    full_name = getattr(getattr(owner, "DESCRIPTOR", None), "full_name", None)
    return full_name if isinstance(full_name, str) else f"request of {method}"


def lenient(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """`deserializer`, answering `UNDECODABLE` where it would raise."""

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception:  # DecodeError, or whatever a decoder raises on hostile bytes
            return UNDECODABLE

    return deserialize


__all__ = [
    "REJECTION_LOG_INTERVAL",
    "UNDECODABLE",
    "RejectionLog",
    "Undecodable",
    "handler_behavior",
    "lenient",
    "type_name",
]

"""The `grpc_server_*` metrics of every call (operations.md §2.2): how a call's end decides
its `grpc_code`, and the rows the one call wrapper (`gateway/rpc/calls.py`) counts into.

The usual Python exporter has no asyncio support, so the gateway emits the
go-grpc-prometheus names itself: `grpc_server_started_total`,
`grpc_server_handled_total{grpc_code}`, `grpc_server_msg_received_total`,
`grpc_server_msg_sent_total` and `grpc_server_handling_seconds`, labelled `grpc_type`,
`grpc_service`, `grpc_method`. The metrics themselves live in
`gateway/observability/metrics.py`; a method outside its served table counts as
`unknown`/`unknown`, and so does a method nobody serves (UNIMPLEMENTED).

How a call ends decides its `grpc_code`:

- a normal return (or a stream run to its end) is OK, unless the handler set a code
  (`context.set_code`);
- an abort (`context.abort`, `abort_with_status`, a failure `gateway/rpc/errors.py`
  translated) keeps the code it set;
- a cancelled call is CANCELLED (DEADLINE_EXCEEDED when its deadline has passed);
- any other exception is UNKNOWN, as grpc.aio answers it.

A request that did not decode (`gateway/rpc/decoding.py`) counts as a received message and
in `harness_rejected_requests_total{reason}`; the call itself ends INVALID_ARGUMENT.

Handling time runs from the handler's start to its end: for a stream, the stream's
lifetime, so latency panels filter `grpc_type="unary"`. Every async handler shape is
counted: async generators and `context.write()`/`context.read()` coroutines alike. A
synchronous handler (this server has none) passes through uncounted.

The module keeps its historical name: the counting used to be a grpc.aio interceptor, one
more coroutine frame per call than the one wrapper it is now part of.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, Protocol, TypeAlias

import grpc

from gateway.observability.metrics import GrpcType

OK: Final = grpc.StatusCode.OK.name
"""`grpc_code` of a call that ended normally."""
UNKNOWN: Final = grpc.StatusCode.UNKNOWN.name
"""`grpc_code` of a handler that raised, as grpc.aio answers it."""
CANCELLED: Final = grpc.StatusCode.CANCELLED.name
"""`grpc_code` of a call the client gave up."""
DEADLINE_EXCEEDED: Final = grpc.StatusCode.DEADLINE_EXCEEDED.name
"""`grpc_code` of a call cancelled because its deadline passed."""
UNIMPLEMENTED: Final = grpc.StatusCode.UNIMPLEMENTED.name
"""`grpc_code` of a call of a method nobody serves."""

_CODE_NAMES: Final = {code.value[0]: code.name for code in grpc.StatusCode}

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


class _Count(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class _Observe(Protocol):
    def observe(self, amount: float) -> None: ...


class MethodRow(Protocol):
    """What a call counts into: a `GrpcMethodMetrics`, or `NULL_ROW`."""

    @property
    def started(self) -> _Count: ...
    @property
    def received(self) -> _Count: ...
    @property
    def sent(self) -> _Count: ...
    @property
    def seconds(self) -> _Observe: ...
    def handled(self, code: str) -> _Count: ...


class _Nothing:
    """Counts and observes nothing."""

    __slots__ = ()

    def inc(self, amount: float = 1) -> None:
        """Nothing."""

    def observe(self, amount: float) -> None:
        """Nothing."""


class _NullRow:
    """The row of a call counted elsewhere, or by a server built without metrics."""

    __slots__ = ()
    started: Final = _Nothing()
    received: Final = _Nothing()
    sent: Final = _Nothing()
    seconds: Final = _Nothing()

    def handled(self, code: str) -> _Nothing:
        return self.started


NULL_ROW: Final[MethodRow] = _NullRow()
"""A row that counts nothing."""


def grpc_type(handler: Handler) -> GrpcType:
    """The `grpc_type` of `handler`'s shape."""
    match (handler.request_streaming, handler.response_streaming):
        case (False, False):
            return GrpcType.UNARY
        case (True, False):
            return GrpcType.CLIENT_STREAM
        case (False, True):
            return GrpcType.SERVER_STREAM
        case _:
            return GrpcType.BIDI_STREAM


def split(full_method: str) -> tuple[str, str]:
    """`/pkg.Service/Method` into its service and method (empty when malformed)."""
    service, _, method = full_method.lstrip("/").partition("/")
    return service, method


def set_code(context: Any, default: str) -> str:
    """The code the handler set on `context`, or `default` when it set none."""
    code = context.code()
    if code is None:
        return default
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int):
        return _CODE_NAMES.get(code, UNKNOWN)
    return UNKNOWN


def cancelled_code(context: Any) -> str:
    """CANCELLED, or DEADLINE_EXCEEDED when the call's deadline has passed."""
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0:
        return DEADLINE_EXCEEDED
    return CANCELLED


def raised_code(context: Any, error: BaseException) -> str:
    """The code of a call whose handler raised `error` (a cancellation or an abort)."""
    if isinstance(error, asyncio.CancelledError):
        return cancelled_code(context)
    if isinstance(error, grpc.aio.AbortError):
        return set_code(context, UNKNOWN)
    return UNKNOWN


__all__ = [
    "CANCELLED",
    "DEADLINE_EXCEEDED",
    "NULL_ROW",
    "OK",
    "UNIMPLEMENTED",
    "UNKNOWN",
    "MethodRow",
    "cancelled_code",
    "grpc_type",
    "raised_code",
    "set_code",
    "split",
]

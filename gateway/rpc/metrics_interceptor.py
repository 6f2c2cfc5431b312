"""The `grpc_server_*` metrics of every call (operations.md §2.2), as a grpc.aio interceptor.

The usual Python exporter has no asyncio support, so this emits the go-grpc-prometheus
names itself: `grpc_server_started_total`, `grpc_server_handled_total{grpc_code}`,
`grpc_server_msg_received_total`, `grpc_server_msg_sent_total` and
`grpc_server_handling_seconds`, labelled `grpc_type`, `grpc_service`, `grpc_method`. The
metrics themselves live in `gateway/observability/metrics.py`; a method outside its served
table counts as `unknown`/`unknown`.

How a call ends decides its `grpc_code`:

- a normal return (or a stream run to its end) is OK, unless the handler set a code
  (`context.set_code`);
- an abort (`context.abort`, `abort_with_status`) keeps the code it set;
- a cancelled call is CANCELLED (DEADLINE_EXCEEDED when its deadline has passed);
- any other exception is UNKNOWN, as grpc.aio answers it.

A request the request guard (`gateway/rpc/decoding.py`) could not decode arrives here as
`Undecodable` before the guarded handler refuses it: it counts as a received message and in
`harness_rejected_requests_total{reason}`; the call itself ends INVALID_ARGUMENT.

Handling time runs from the handler's start to its end: for a stream, the stream's
lifetime, so latency panels filter `grpc_type="unary"`. Every async handler shape is wrapped:
async generators and `context.write()`/`context.read()` coroutines alike. A synchronous
handler (this server has none) passes through uncounted.

    server = await build_server(core, settings, interceptors=[MetricsInterceptor(metrics)])
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import grpc

from gateway.observability.metrics import (
    GrpcMethodMetrics,
    GrpcType,
    Metrics,
    RejectedRequestReason,
)
from gateway.rpc.decoding import Undecodable, handler_behavior

OK: Final = grpc.StatusCode.OK.name
"""`grpc_code` of a call that ended normally."""
UNKNOWN: Final = grpc.StatusCode.UNKNOWN.name
"""`grpc_code` of a handler that raised, as grpc.aio answers it."""
CANCELLED: Final = grpc.StatusCode.CANCELLED.name
"""`grpc_code` of a call the client gave up."""
DEADLINE_EXCEEDED: Final = grpc.StatusCode.DEADLINE_EXCEEDED.name
"""`grpc_code` of a call cancelled because its deadline passed."""
UNIMPLEMENTED: Final = grpc.StatusCode.UNIMPLEMENTED.name
"""`grpc_code` grpc.aio answers for a method no handler serves."""

_CODE_NAMES: Final = {code.value[0]: code.name for code in grpc.StatusCode}

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
OnRejected: TypeAlias = Callable[[RejectedRequestReason], None]


def _grpc_type(handler: Handler) -> GrpcType:
    match (handler.request_streaming, handler.response_streaming):
        case (False, False):
            return GrpcType.UNARY
        case (True, False):
            return GrpcType.CLIENT_STREAM
        case (False, True):
            return GrpcType.SERVER_STREAM
        case _:
            return GrpcType.BIDI_STREAM


def _split(full_method: str) -> tuple[str, str]:
    """`/pkg.Service/Method` into its service and method (empty when malformed)."""
    service, _, method = full_method.lstrip("/").partition("/")
    return service, method


def _set_code(context: Any, default: str) -> str:
    """The code the handler set on `context`, or `default` when it set none."""
    code = context.code()
    if code is None:
        return default
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int):
        return _CODE_NAMES.get(code, UNKNOWN)
    return UNKNOWN


def _cancelled_code(context: Any) -> str:
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0:
        return DEADLINE_EXCEEDED
    return CANCELLED


def _raised_code(context: Any, error: BaseException) -> str:
    """The code of a call whose handler raised `error`."""
    if isinstance(error, asyncio.CancelledError):
        return _cancelled_code(context)
    if isinstance(error, grpc.aio.AbortError):
        return _set_code(context, UNKNOWN)
    return UNKNOWN


@dataclass(frozen=True, slots=True, kw_only=True)
class _Messages:
    """Counts one method's messages into its row."""

    row: GrpcMethodMetrics
    on_rejected: OnRejected
    request_streaming: bool

    def received(self, request: Any) -> None:
        """One request message arrived; one the guard could not decode is a rejection too."""
        self.row.received.inc()
        if isinstance(request, Undecodable):
            self.on_rejected(request.reason)

    def arguments(self, request: Any, context: Any, *, writes: bool) -> tuple[Any, Any]:
        """The request and context the handler is called with, counting every request.

        A streamed request may be read through the context as well as iterated, and a
        handler that `writes` sends its responses through the context: both get a
        counting context.
        """
        if self.request_streaming:
            return _counted_requests(request, self), _CountingContext(context, self)
        self.received(request)
        return request, _CountingContext(context, self) if writes else context


class _Call:
    """One call's measurement: started at construction, handled and timed once at `end`."""

    __slots__ = ("_ended", "_row", "_start")

    def __init__(self, row: GrpcMethodMetrics) -> None:
        self._row = row
        self._start = time.perf_counter()
        self._ended = False
        row.started.inc()

    def end(self, code: str) -> None:
        if self._ended:
            return
        self._ended = True
        self._row.handled(code).inc()
        self._row.seconds.observe(time.perf_counter() - self._start)


class _CountingContext:
    """Delegates to the real servicer context, counting `read()` and `write()` messages for a
    handler that streams through the context rather than an iterator."""

    def __init__(self, context: Any, messages: _Messages) -> None:
        self._context = context
        self._messages = messages

    async def read(self) -> Any:
        message = await self._context.read()
        if message is not grpc.aio.EOF:
            self._messages.received(message)
        return message

    async def write(self, message: Any) -> None:
        await self._context.write(message)
        self._messages.row.sent.inc()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


async def _counted_requests(requests: Any, messages: _Messages) -> AsyncIterator[Any]:
    async for request in requests:
        messages.received(request)
        yield request


def _wrap_coroutine(
    behavior: Callable[..., Awaitable[Any]], messages: _Messages, *, response_streaming: bool
) -> Callable[[Any, Any], Awaitable[Any]]:
    """A coroutine handler: it returns its one response, or writes its responses."""

    async def handle(request: Any, context: Any) -> Any:
        call = _Call(messages.row)
        code = UNKNOWN
        try:
            response = await behavior(
                *messages.arguments(request, context, writes=response_streaming)
            )
            code = _set_code(context, OK)
            if code == OK and not response_streaming:
                messages.row.sent.inc()
            return response
        except BaseException as error:
            code = _raised_code(context, error)
            raise
        finally:
            call.end(code)

    return handle


def _wrap_generator(
    behavior: Callable[..., AsyncGenerator[Any, None]], messages: _Messages
) -> Callable[[Any, Any], AsyncIterator[Any]]:
    async def handle(request: Any, context: Any) -> AsyncIterator[Any]:
        call = _Call(messages.row)
        code = UNKNOWN
        responses = behavior(*messages.arguments(request, context, writes=False))
        try:
            async for response in responses:
                messages.row.sent.inc()
                yield response
            code = _set_code(context, OK)
        except GeneratorExit:
            # grpc.aio stopped consuming: the call ended while a message was being sent.
            code = _cancelled_code(context)
            raise
        except BaseException as error:
            code = _raised_code(context, error)
            raise
        finally:
            try:
                await responses.aclose()
            finally:
                call.end(code)

    return handle


def _wrap(handler: Handler, row: GrpcMethodMetrics, on_rejected: OnRejected) -> Handler:
    """A handler that measures `handler`; the handler itself when it is synchronous."""
    behavior, factory = handler_behavior(handler)
    if behavior is None:
        return handler
    messages = _Messages(
        row=row, on_rejected=on_rejected, request_streaming=handler.request_streaming
    )
    wrapped: Callable[[Any, Any], Any]
    if inspect.isasyncgenfunction(behavior):
        wrapped = _wrap_generator(behavior, messages)
    elif inspect.iscoroutinefunction(behavior):
        wrapped = _wrap_coroutine(behavior, messages, response_streaming=handler.response_streaming)
    else:
        return handler
    return factory(
        wrapped,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Counts and times every call into `metrics`' `grpc_server_*` family."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        # Wrapped handlers of served methods only (a closed, bounded set), kept while the
        # continuation keeps answering the same handler object.
        self._wrapped: dict[str, tuple[Handler, Handler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        full_method = handler_call_details.method
        handler = await continuation(handler_call_details)
        if handler is None:
            # grpc.aio answers UNIMPLEMENTED before reading a message, so the method's shape
            # is never seen: it counts as a unary call of `unknown`/`unknown`.
            row = self._metrics.grpc_method(GrpcType.UNARY, "", "")
            _Call(row).end(UNIMPLEMENTED)
            return None
        cached = self._wrapped.get(full_method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        service, method = _split(full_method)
        row = self._metrics.grpc_method(_grpc_type(handler), service, method)
        wrapped = _wrap(handler, row, self._metrics.count_rejected_request)
        if row.known:
            self._wrapped[full_method] = (handler, wrapped)
        return wrapped


__all__ = ["MetricsInterceptor"]

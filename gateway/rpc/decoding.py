"""The request guard: a body that does not decode is INVALID_ARGUMENT, never a traceback.

grpc.aio decodes each request with its method's `request_deserializer` before any handler
runs. When that raises (bytes that are not protobuf, a string field that is not UTF-8),
cygrpc logs `ERROR Unexpected [DecodeError] raised by servicer method` with a traceback and
answers UNKNOWN, before authentication: anyone who can connect could fill the log.

`guard_requests(server)` is the server as servicers should see it. Every method handler
added through it (`add_generic_rpc_handlers` and `add_registered_method_handlers`, so every
generated `add_*Servicer_to_server`: the agent, operator, Router, Registry, health and
reflection services alike) is rewritten so that

- its deserializer answers `UNDECODABLE` instead of raising;
- its behaviour ends a call whose request, or any message of its request stream, is
  `UNDECODABLE` at once with INVALID_ARGUMENT, whose `google.rpc.Status` details hold an
  `ErrorInfo` (domain `harness.v1`, reason `MALFORMED_REQUEST`) and whose message names the
  expected type ("the request body is not a valid harness.v1.SendRequest");
- the log gets at most one WARNING per `REJECTION_LOG_INTERVAL` per reason, naming the
  method (always a served one) and how many rejections it held back since its last line;
  never a byte of the body, a header or a token.

`MetricsInterceptor` counts each rejection in `harness_rejected_requests_total{reason}`: it
sees the `UNDECODABLE` request before the guarded behaviour does. Every handler shape is
guarded: unary and streaming requests, coroutines, async generators and `context.write()`
handlers. A synchronous behaviour (this server has none) is left exactly as it was.

    guarded = guard_requests(server)
    endpoint_pb2_grpc.add_HarnessEndpointServiceServicer_to_server(servicer, guarded)
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NoReturn, TypeAlias

import grpc

from gateway.observability.metrics import RejectedRequestReason
from gateway.rpc.errors import malformed_request_status

logger = logging.getLogger(__name__)

REJECTION_LOG_INTERVAL: Final = 60.0
"""Seconds between two WARNING lines about rejected requests of one reason.

Anyone who can connect may send undecodable bodies as fast as they like (the guard answers
before authentication), so the log says how many it held back instead of a line each."""

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Reject: TypeAlias = Callable[[Any], Awaitable[NoReturn]]
Arguments: TypeAlias = Callable[[Any, Any], Awaitable[tuple[Any, Any]]]
"""The request and context a guarded behaviour is called with, once the request decoded."""


@dataclass(frozen=True, slots=True)
class Undecodable:
    """What a guarded deserializer answers for bytes its message type cannot decode."""

    reason: RejectedRequestReason = RejectedRequestReason.MALFORMED_REQUEST
    """Why the call is refused (`harness_rejected_requests_total{reason}`)."""


UNDECODABLE: Final = Undecodable()
"""The request a guarded handler receives in place of bytes that do not decode."""


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


def guard_requests(server: grpc.aio.Server, log: RejectionLog | None = None) -> grpc.aio.Server:
    """`server` as servicers should be added to it: every method handler added through the
    result is guarded (see the module docstring). Ports, start and stop pass through."""
    return _GuardedServer(server, RequestGuard(log or RejectionLog()))


class RequestGuard:
    """Rewrites method handlers so an undecodable request is a typed refusal."""

    def __init__(self, log: RejectionLog) -> None:
        self._log = log
        # Guarded handlers of served methods only (a closed, bounded set), kept while the
        # wrapped generic handler keeps answering the same handler object.
        self._guarded: dict[str, tuple[Handler, Handler]] = {}

    def handler(self, method: str, handler: Handler) -> Handler:
        """`handler` of `method` (`/package.Service/Method`) guarded; `handler` itself when
        it has no deserializer or a synchronous behaviour."""
        cached = self._guarded.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        guarded = self._guard(method, handler)
        self._guarded[method] = (handler, guarded)
        return guarded

    def _guard(self, method: str, handler: Handler) -> Handler:
        deserializer = handler.request_deserializer
        behavior, factory = handler_behavior(handler)
        generator = inspect.isasyncgenfunction(behavior)
        if deserializer is None or not (generator or inspect.iscoroutinefunction(behavior)):
            return handler
        type_name = _type_name(deserializer, method)
        log = self._log

        async def reject(context: Any) -> NoReturn:
            log.rejected(RejectedRequestReason.MALFORMED_REQUEST, method)
            await context.abort_with_status(malformed_request_status(type_name))
            raise AssertionError("abort_with_status returned")  # pragma: no cover

        async def arguments(request: Any, context: Any) -> tuple[Any, Any]:
            # A request stream is checked message by message, read through the context too.
            if handler.request_streaming:
                return _checked(request, context, reject), _CheckingContext(context, reject)
            if isinstance(request, Undecodable):
                await reject(context)
            return request, context

        wrapped: Callable[..., Any]
        if generator:
            wrapped = _wrap_generator(behavior, arguments)
        else:
            wrapped = _wrap_coroutine(behavior, arguments)
        return factory(
            wrapped,
            request_deserializer=_lenient(deserializer),
            response_serializer=handler.response_serializer,
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


def _type_name(deserializer: Callable[[bytes], Any], method: str) -> str:
    """The request message's full name (`harness.v1.SendRequest`) when the deserializer is a
    generated `FromString`, else a phrase naming the method."""
    owner = getattr(deserializer, "__self__", None)
    full_name = getattr(getattr(owner, "DESCRIPTOR", None), "full_name", None)
    return full_name if isinstance(full_name, str) else f"request of {method}"


def _lenient(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception:  # DecodeError, or whatever a decoder raises on hostile bytes
            return UNDECODABLE

    return deserialize


def _wrap_coroutine(
    behavior: Callable[[Any, Any], Awaitable[Any]], arguments: Arguments
) -> Callable[[Any, Any], Awaitable[Any]]:
    async def handle(request: Any, context: Any) -> Any:
        return await behavior(*await arguments(request, context))

    return handle


def _wrap_generator(
    behavior: Callable[[Any, Any], AsyncIterator[Any]], arguments: Arguments
) -> Callable[[Any, Any], AsyncIterator[Any]]:
    async def handle(request: Any, context: Any) -> AsyncIterator[Any]:
        responses = behavior(*await arguments(request, context))
        try:
            async for response in responses:
                yield response
        finally:
            await _aclose(responses)

    return handle


async def _checked(requests: Any, context: Any, reject: Reject) -> AsyncIterator[Any]:
    """The request stream, ending the call at the first message that did not decode."""
    async for request in requests:
        if isinstance(request, Undecodable):
            await reject(context)
        yield request


async def _aclose(responses: AsyncIterator[Any]) -> None:
    aclose = getattr(responses, "aclose", None)
    if aclose is not None:
        await aclose()


class _CheckingContext:
    """Delegates to the real servicer context; `read()` ends the call at a message that did
    not decode, as the request iterator does."""

    def __init__(self, context: Any, reject: Reject) -> None:
        self._context = context
        self._reject = reject

    async def read(self) -> Any:
        message = await self._context.read()
        if isinstance(message, Undecodable):
            await self._reject(self._context)
        return message

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class _GuardedGenericHandler(grpc.GenericRpcHandler):
    """A generic handler whose answers are guarded."""

    def __init__(self, inner: grpc.GenericRpcHandler, guard: RequestGuard) -> None:
        self._inner = inner
        self._guard = guard

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Handler | None:
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        return self._guard.handler(handler_call_details.method, handler)


class _GuardedServer(grpc.aio.Server):
    """A `grpc.aio.Server` view that guards every handler added through it and passes
    everything else to the real server (so `isinstance(view, grpc.aio.Server)` holds for
    grpcio-reflection's check)."""

    def __init__(self, server: grpc.aio.Server, guard: RequestGuard) -> None:
        self._server = server
        self._guard = guard

    def add_generic_rpc_handlers(
        self, generic_rpc_handlers: Iterable[grpc.GenericRpcHandler]
    ) -> None:
        self._server.add_generic_rpc_handlers(
            [_GuardedGenericHandler(handler, self._guard) for handler in generic_rpc_handlers]
        )

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: Mapping[str, Handler]
    ) -> None:
        self._server.add_registered_method_handlers(
            service_name,
            {
                name: self._guard.handler(f"/{service_name}/{name}", handler)
                for name, handler in method_handlers.items()
            },
        )

    def add_insecure_port(self, address: str) -> int:
        return self._server.add_insecure_port(address)

    def add_secure_port(self, address: str, server_credentials: grpc.ServerCredentials) -> int:
        return self._server.add_secure_port(address, server_credentials)

    async def start(self) -> None:
        await self._server.start()

    async def stop(self, grace: float | None) -> None:
        await self._server.stop(grace)

    async def wait_for_termination(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 - grpc.aio.Server's own signature
    ) -> bool:
        return await self._server.wait_for_termination(timeout)


__all__ = [
    "REJECTION_LOG_INTERVAL",
    "UNDECODABLE",
    "RejectionLog",
    "RequestGuard",
    "Undecodable",
    "guard_requests",
    "handler_behavior",
]

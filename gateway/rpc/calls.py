"""One wrapper per call: the request check, the `grpc_server_*` metrics and the error
mapping around the servicer's own method (operations.md §2.2, §3).

Every method handler added to a server built by `gateway.rpc.server` goes through
`RpcCalls.handler` (the server view `calls_server` does it for every generated
`add_*Servicer_to_server`, health and reflection included) and is replaced by a handler of
the same shape whose one behaviour, for each call,

- answers a request (or a message of a request stream) that did not decode with
  INVALID_ARGUMENT `MALFORMED_REQUEST` (`gateway/rpc/decoding.py`: the lenient deserializer,
  the rate-limited WARNING) and counts it in `harness_rejected_requests_total{reason}`;
- counts and times the call in `grpc_server_*` (`gateway/rpc/metrics_interceptor.py`: how a
  call's end decides its `grpc_code`);
- for a servicer method marked `unary_rpc` / `stream_rpc`, turns a failure into its status
  and a defect into INTERNAL logged once (`gateway/rpc/errors.py`, `failure_status`);
- calls the servicer's method directly: no nested coroutine, and for a stream one async
  generator per call, not one per concern.

Those modules keep their concerns as plain functions; this one calls them. An exception
nobody marked for translation (health, reflection) ends the call as grpc.aio answers it,
UNKNOWN. A synchronous behaviour (this server has none) is left as it is, uncounted.

Calls of a method nobody serves are answered UNIMPLEMENTED, and counted, by the last
generic handler (`unimplemented_handler`). Interceptors a server is built with (a cluster's
forwarder) run inside `MeteredInterceptors`, which hands them this server's handlers
without their metrics and meters whatever handler they settle on, once.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeAlias

import grpc

from gateway.observability.metrics import GrpcMethodMetrics, GrpcType, Metrics
from gateway.rpc.decoding import RejectionLog, Undecodable, handler_behavior, lenient, type_name
from gateway.rpc.errors import failure_status, is_translated, malformed_request_status
from gateway.rpc.metrics_interceptor import (
    NULL_ROW,
    OK,
    UNIMPLEMENTED,
    UNKNOWN,
    MethodRow,
    cancelled_code,
    grpc_type,
    raised_code,
    set_code,
    split,
)

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Interceptor: TypeAlias = grpc.aio.ServerInterceptor


@dataclass(frozen=True, slots=True, kw_only=True)
class _Method:
    """What one method's wrapper needs: built once per method handler, read per call."""

    name: str
    """`/package.Service/Method`."""
    row: MethodRow
    """The method's `grpc_server_*` row (`NULL_ROW` when nothing is counted)."""
    metrics: Metrics | None
    """Where a rejection is counted (None: nowhere)."""
    log: RejectionLog
    type_name: str | None
    """The request message's full name; None when the request is not decoded here."""
    translated: bool
    """Whether a failure of the behaviour becomes its status here (`errors.unary_rpc`)."""

    async def reject(self, context: Any, request: Undecodable) -> NoReturn:
        """End the call: its request (or a message of its stream) did not decode."""
        if self.metrics is not None:
            self.metrics.count_rejected_request(request.reason)
        self.log.rejected(request.reason, self.name)
        await context.abort_with_status(malformed_request_status(self.type_name or self.name))
        raise AssertionError("abort_with_status returned")  # pragma: no cover

    async def fail(self, context: Any, error: Exception) -> NoReturn:
        """End the call with the status of `error` (raising AbortError); for a translated
        method only: another's exception goes to grpc.aio, which answers UNKNOWN."""
        status = failure_status(error, self.name)
        await context.abort_with_status(status)
        raise AssertionError("abort_with_status returned")  # pragma: no cover


def _end(row: MethodRow, code: str, start: float) -> None:
    row.handled(code).inc()
    row.seconds.observe(time.perf_counter() - start)


class _CallContext:
    """The servicer context of a call that streams through it: `read()` counts each message
    and ends the call at one that did not decode, `write()` counts each response."""

    def __init__(self, context: Any, method: _Method) -> None:
        self._context = context
        self._method = method

    async def read(self) -> Any:
        message = await self._context.read()
        if message is not grpc.aio.EOF:
            self._method.row.received.inc()
            if isinstance(message, Undecodable):
                await self._method.reject(self._context, message)
        return message

    async def write(self, message: Any) -> None:
        await self._context.write(message)
        self._method.row.sent.inc()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


async def _requests(requests: Any, context: Any, method: _Method) -> AsyncIterator[Any]:
    """A request stream, counted, ending the call at the first message that did not decode."""
    async for request in requests:
        method.row.received.inc()
        if isinstance(request, Undecodable):
            await method.reject(context, request)
        yield request


def _coroutine(
    behavior: Callable[..., Awaitable[Any]],
    method: _Method,
    *,
    request_streaming: bool,
    response_streaming: bool,
) -> Callable[[Any, Any], Awaitable[Any]]:
    """A coroutine behaviour: it returns its one response, or writes its responses."""
    row = method.row
    plain = not request_streaming and not response_streaming

    async def handle(request: Any, context: Any) -> Any:
        start = time.perf_counter()
        row.started.inc()
        code = UNKNOWN
        try:
            if request_streaming:
                request = _requests(request, context, method)
            else:
                row.received.inc()
                if isinstance(request, Undecodable):
                    await method.reject(context, request)
            if plain:
                response = await behavior(request, context)
            else:
                # It reads or writes its messages through the context: count them there.
                response = await behavior(request, _CallContext(context, method))
            code = set_code(context, OK)
            if code == OK and not response_streaming:
                row.sent.inc()
            return response
        except (asyncio.CancelledError, grpc.aio.AbortError) as error:
            code = raised_code(context, error)
            raise
        except Exception as error:
            if not method.translated:
                raise  # UNKNOWN, as grpc.aio answers it
            try:
                await method.fail(context, error)
            finally:
                code = set_code(context, UNKNOWN)
        finally:
            _end(row, code, start)

    return handle


def _generator(
    behavior: Callable[..., AsyncIterator[Any]], method: _Method, *, request_streaming: bool
) -> Callable[[Any, Any], AsyncIterator[Any]]:
    """An async generator behaviour: one generator per call, yielding the behaviour's."""
    row = method.row

    async def handle(request: Any, context: Any) -> AsyncIterator[Any]:
        start = time.perf_counter()
        row.started.inc()
        code = UNKNOWN
        responses: Any = None
        try:
            if request_streaming:
                responses = behavior(
                    _requests(request, context, method), _CallContext(context, method)
                )
            else:
                row.received.inc()
                if isinstance(request, Undecodable):
                    await method.reject(context, request)
                responses = behavior(request, context)
            async for response in responses:
                row.sent.inc()
                yield response
            code = set_code(context, OK)
        except GeneratorExit:
            # grpc.aio stopped consuming: the call ended while a message was being sent.
            code = cancelled_code(context)
            raise
        except (asyncio.CancelledError, grpc.aio.AbortError) as error:
            code = raised_code(context, error)
            raise
        except Exception as error:
            if not method.translated:
                raise  # UNKNOWN, as grpc.aio answers it
            try:
                await method.fail(context, error)
            finally:
                code = set_code(context, UNKNOWN)
        finally:
            try:
                if responses is not None:
                    # The servicer's generator cleans up (its `finally`) before the call
                    # is counted as ended (house-style.md §12).
                    await responses.aclose()
            finally:
                _end(row, code, start)

    return handle


class RpcCalls:
    """Builds the one wrapper of every method handler a server serves."""

    def __init__(self, metrics: Metrics | None = None, log: RejectionLog | None = None) -> None:
        """`metrics` None counts nothing (a server built for a test)."""
        self._metrics = metrics
        self._log = log or RejectionLog()
        # The wrapped handlers of served methods (a closed, bounded set), kept while the
        # generic handler keeps answering the same handler object: method -> (the handler,
        # the wrapped one, the wrapped one without metrics).
        self._built: dict[str, tuple[Handler, Handler, Handler]] = {}
        self._bare_of: dict[int, Handler] = {}
        self._full_of: dict[int, Handler] = {}

    @property
    def metrics(self) -> Metrics | None:
        """Where calls are counted."""
        return self._metrics

    def handler(self, method: str, handler: Handler) -> Handler:
        """`handler` of `method` (`/package.Service/Method`) wrapped; `handler` itself when
        its behaviour is synchronous."""
        built = self._built.get(method)
        if built is not None and built[0] is handler:
            return built[1]
        full = self._wrap(method, handler, self._row(method, handler), decode=True)
        bare = self._wrap(method, handler, NULL_ROW, decode=True)
        if built is not None:
            # A generic handler answered another object for the method: forget the old pair.
            self._bare_of.pop(id(built[1]), None)
            self._full_of.pop(id(built[2]), None)
        self._built[method] = (handler, full, bare)
        self._bare_of[id(full)] = bare
        self._full_of[id(bare)] = full
        return full

    def bare(self, handler: Handler | None) -> Handler | None:
        """The same call without its metrics, for an interceptor that may call it from a
        handler of its own (`MeteredInterceptors` counts that one instead)."""
        if handler is None:
            return None
        return self._bare_of.get(id(handler), handler)

    def metered(self, method: str, handler: Handler | None) -> Handler | None:
        """What serves a call whose interceptors settled on `handler`: this server's own
        wrapped handler, or another's counted here (a forwarded call)."""
        if handler is None:
            return None
        full = self._full_of.get(id(handler))
        if full is not None:
            return full
        if id(handler) in self._bare_of:
            return handler
        if self._metrics is None:
            return handler
        return self._wrap(method, handler, self._row(method, handler), decode=False)

    def _row(self, method: str, handler: Handler) -> MethodRow:
        if self._metrics is None:
            return NULL_ROW
        service, name = split(method)
        row: GrpcMethodMetrics = self._metrics.grpc_method(grpc_type(handler), service, name)
        return row

    def _wrap(self, method: str, handler: Handler, row: MethodRow, *, decode: bool) -> Handler:
        behavior, factory = handler_behavior(handler)
        deserializer = handler.request_deserializer
        checked: str | None = None
        if decode and deserializer is not None:
            checked = type_name(deserializer, method)
            deserializer = lenient(deserializer)
        spec = _Method(
            name=method,
            row=row,
            metrics=self._metrics,
            log=self._log,
            type_name=checked,
            translated=is_translated(behavior),
        )
        wrapped: Callable[[Any, Any], Any]
        if inspect.isasyncgenfunction(behavior):
            wrapped = _generator(behavior, spec, request_streaming=handler.request_streaming)
        elif inspect.iscoroutinefunction(behavior):
            wrapped = _coroutine(
                behavior,
                spec,
                request_streaming=handler.request_streaming,
                response_streaming=handler.response_streaming,
            )
        else:
            return handler
        return factory(
            wrapped,
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )

    def unimplemented_handler(self) -> grpc.GenericRpcHandler:
        """The last generic handler: a method nobody serves is UNIMPLEMENTED, as grpc.aio
        answers it, and counts as a unary call of `unknown`/`unknown` (its shape is never
        seen: nothing of it is read)."""
        row: MethodRow = (
            NULL_ROW if self._metrics is None else self._metrics.grpc_method(GrpcType.UNARY, "", "")
        )

        async def unimplemented(requests: Any, context: Any) -> None:
            start = time.perf_counter()
            row.started.inc()
            try:
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            finally:
                _end(row, UNIMPLEMENTED, start)

        handler: Handler = grpc.stream_stream_rpc_method_handler(unimplemented)
        self._bare_of[id(handler)] = handler
        return _Unimplemented(handler)


class _Unimplemented(grpc.GenericRpcHandler):
    def __init__(self, handler: Handler) -> None:
        self._handler = handler

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Handler | None:
        return self._handler


class MeteredInterceptors(grpc.aio.ServerInterceptor):
    """Runs `interceptors` (in order, outermost first) around the server's handlers, so a
    call is counted once whichever handler they settle on: they see this server's handlers
    without metrics (a forwarder calls them from its own handler), and the handler they
    answer is metered here (`RpcCalls.metered`)."""

    def __init__(self, calls: RpcCalls, interceptors: Sequence[Interceptor]) -> None:
        self._calls = calls
        self._interceptors = tuple(interceptors)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        calls = self._calls

        async def resolve(details: grpc.HandlerCallDetails) -> Handler | None:
            return calls.bare(await continuation(details))

        chain: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]] = resolve
        for interceptor in reversed(self._interceptors):
            chain = _link(interceptor, chain)
        handler = await chain(handler_call_details)
        return calls.metered(handler_call_details.method, handler)


def _link(
    interceptor: Interceptor,
    continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
) -> Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]]:
    async def call(details: grpc.HandlerCallDetails) -> Handler | None:
        handler: Handler | None = await interceptor.intercept_service(continuation, details)
        return handler

    return call


class _GenericHandler(grpc.GenericRpcHandler):
    """A generic handler whose answers are wrapped."""

    def __init__(self, inner: grpc.GenericRpcHandler, calls: RpcCalls) -> None:
        self._inner = inner
        self._calls = calls

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Handler | None:
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        return self._calls.handler(handler_call_details.method, handler)


class CallsServer(grpc.aio.Server):
    """A `grpc.aio.Server` view that wraps every handler added through it and passes
    everything else to the real server (so `isinstance(view, grpc.aio.Server)` holds for
    grpcio-reflection's check)."""

    def __init__(self, server: grpc.aio.Server, calls: RpcCalls) -> None:
        self._server = server
        self._calls = calls

    def add_generic_rpc_handlers(
        self, generic_rpc_handlers: Iterable[grpc.GenericRpcHandler]
    ) -> None:
        self._server.add_generic_rpc_handlers(
            [_GenericHandler(handler, self._calls) for handler in generic_rpc_handlers]
        )

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: Mapping[str, Handler]
    ) -> None:
        self._server.add_registered_method_handlers(
            service_name,
            {
                name: self._calls.handler(f"/{service_name}/{name}", handler)
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


def calls_server(server: grpc.aio.Server, calls: RpcCalls) -> grpc.aio.Server:
    """`server` as servicers should be added to it: every method handler added through the
    result is wrapped by `calls`. Ports, start and stop pass through."""
    return CallsServer(server, calls)


__all__ = ["CallsServer", "MeteredInterceptors", "RpcCalls", "calls_server"]

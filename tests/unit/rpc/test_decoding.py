"""The request check of the one call wrapper (`gateway/rpc/calls.py`): every handler shape
refuses an undecodable request the same way."""

from __future__ import annotations

import logging
import types
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import grpc
import harness_client
import pytest
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2
from harness_contract._gen.harness.v1 import endpoint_pb2
from harness_contract.errors import InvalidIdempotencyKeyError

from gateway.observability.metrics import RejectedRequestReason
from gateway.rpc import errors
from gateway.rpc.calls import RpcCalls, calls_server
from gateway.rpc.decoding import UNDECODABLE, RejectionLog, Undecodable
from gateway.rpc.health import GatewayHealthServicer
from tests.unit.rpc.support import as_rpc_error

METHOD = "/harness.v1.HarnessEndpointService/Send"
NOT_PROTOBUF = b"\xff\xff\xff"


class _Context:
    """Just enough of a servicer context to observe an abort and feed `read()`."""

    def __init__(self, reads: Iterable[Any] = ()) -> None:
        self.status: grpc.Status | None = None
        self._reads = list(reads)

    async def abort_with_status(self, status: grpc.Status) -> None:
        self.status = status
        raise grpc.aio.AbortError()

    async def read(self) -> Any:
        return self._reads.pop(0) if self._reads else grpc.aio.EOF

    def code(self) -> grpc.StatusCode | None:
        return None if self.status is None else self.status.code

    def time_remaining(self) -> float | None:
        return None


def _rich(status: grpc.Status | None) -> tuple[int, str, str, str]:
    """(code, message, ErrorInfo domain, ErrorInfo reason) of an abort's status."""
    assert status is not None
    (key, value), *_ = status.trailing_metadata
    assert key == "grpc-status-details-bin"
    rich = status_pb2.Status.FromString(value)
    info = error_details_pb2.ErrorInfo()
    assert rich.details[0].Unpack(info)
    return rich.code, rich.message, info.domain, info.reason


EXPECTED = (
    code_pb2.INVALID_ARGUMENT,
    "the request body is not a valid harness.v1.SendRequest",
    "harness.v1",
    "MALFORMED_REQUEST",
)


def _guard() -> Any:
    """The call wrapper without metrics, typed loosely: the handlers it answers are called
    with test doubles."""
    return RpcCalls(log=RejectionLog())


async def _echo(request: Any, context: Any) -> Any:
    return request


async def _echo_stream(request: Any, context: Any) -> AsyncIterator[Any]:
    yield request
    yield request


async def _writer(request: Any, context: Any) -> None:
    await context.write(request)


async def _collect(requests: AsyncIterator[Any], context: Any) -> list[Any]:
    return [request async for request in requests]


async def _collect_stream(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
    async for request in requests:
        yield request


async def _read_twice(requests: AsyncIterator[Any], context: Any) -> list[Any]:
    return [await context.read(), await context.read()]


async def _first(result: Any) -> Any:
    """The first response of a generator handler, or a coroutine handler's result."""
    if hasattr(result, "__anext__"):
        return await anext(result)
    return await result


async def _requests(*items: Any) -> AsyncIterator[Any]:
    for item in items:
        yield item


def _handler(factory: Any, behavior: Any) -> Any:
    return factory(
        behavior,
        request_deserializer=endpoint_pb2.SendRequest.FromString,
        response_serializer=endpoint_pb2.SendResponse.SerializeToString,
    )


def test_a_wrapped_deserializer_answers_undecodable_for_bytes_that_do_not_decode():
    guarded = _guard().handler(METHOD, _handler(grpc.unary_unary_rpc_method_handler, _echo))
    assert guarded.request_deserializer(NOT_PROTOBUF) is UNDECODABLE
    assert guarded.request_deserializer(b"\x0a\x02\xc3\x28") is UNDECODABLE
    request = endpoint_pb2.SendRequest(idempotency_key="k")
    assert guarded.request_deserializer(request.SerializeToString()) == request
    assert guarded.response_serializer is endpoint_pb2.SendResponse.SerializeToString


@pytest.mark.parametrize(
    ("factory", "behavior", "attribute"),
    [
        (grpc.unary_unary_rpc_method_handler, _echo, "unary_unary"),
        (grpc.unary_stream_rpc_method_handler, _echo_stream, "unary_stream"),
        (grpc.unary_stream_rpc_method_handler, _writer, "unary_stream"),
    ],
    ids=["coroutine", "async-generator", "context-write"],
)
async def test_a_unary_request_handler_refuses_an_undecodable_request_before_its_behaviour(
    factory: Any, behavior: Any, attribute: str
):
    guarded = getattr(_guard().handler(METHOD, _handler(factory, behavior)), attribute)
    context = _Context()
    with pytest.raises(grpc.aio.AbortError):
        await _first(guarded(UNDECODABLE, context))
    assert _rich(context.status) == EXPECTED


async def test_a_decodable_request_reaches_every_unary_behaviour_unchanged():
    guard = _guard()
    request = endpoint_pb2.SendRequest(idempotency_key="k")
    unary = guard.handler(METHOD, _handler(grpc.unary_unary_rpc_method_handler, _echo))
    assert await unary.unary_unary(request, _Context()) is request
    stream = guard.handler("/x.Y/Z", _handler(grpc.unary_stream_rpc_method_handler, _echo_stream))
    assert [item async for item in stream.unary_stream(request, _Context())] == [request] * 2


async def test_a_request_stream_ends_the_call_at_its_first_undecodable_message():
    request = endpoint_pb2.SendRequest(idempotency_key="k")
    guard = _guard()
    unary = guard.handler(METHOD, _handler(grpc.stream_unary_rpc_method_handler, _collect))
    context = _Context()
    with pytest.raises(grpc.aio.AbortError):
        await unary.stream_unary(_requests(request, UNDECODABLE, request), context)
    assert _rich(context.status) == EXPECTED
    bidi = guard.handler(
        "/x.Y/Bidi", _handler(grpc.stream_stream_rpc_method_handler, _collect_stream)
    )
    context = _Context()
    responses = bidi.stream_stream(_requests(request, UNDECODABLE), context)
    assert await anext(responses) == request
    with pytest.raises(grpc.aio.AbortError):
        await anext(responses)
    assert _rich(context.status)[3] == "MALFORMED_REQUEST"
    assert await bidi.stream_stream(_requests(request), _Context()).__anext__() == request


async def test_a_handler_reading_through_the_context_is_checked_too():
    request = endpoint_pb2.SendRequest(idempotency_key="k")
    guarded = _guard().handler(METHOD, _handler(grpc.stream_unary_rpc_method_handler, _read_twice))
    context = _Context(reads=[request, UNDECODABLE])
    with pytest.raises(grpc.aio.AbortError):
        await guarded.stream_unary(_requests(), context)
    assert _rich(context.status) == EXPECTED


def test_a_synchronous_handler_is_left_as_it_is_and_one_without_a_deserializer_gets_bytes():
    def sync(request: Any, context: Any) -> Any:
        return request

    guard = _guard()
    sync_handler = _handler(grpc.unary_unary_rpc_method_handler, sync)
    assert guard.handler(METHOD, sync_handler) is sync_handler
    raw: Any = grpc.unary_unary_rpc_method_handler(_echo)
    assert guard.handler("/x.Y/Raw", raw).request_deserializer is None


def test_a_wrapped_handler_is_built_once_per_method_and_handler():
    guard = _guard()
    handler = _handler(grpc.unary_unary_rpc_method_handler, _echo)
    assert guard.handler(METHOD, handler) is guard.handler(METHOD, handler)
    other = _handler(grpc.unary_unary_rpc_method_handler, _echo)
    assert guard.handler(METHOD, other) is not guard.handler(METHOD, handler)


def test_a_deserializer_that_is_not_generated_names_the_method():
    def parse(data: bytes) -> bytes:
        raise ValueError("no")

    handler: Any = grpc.unary_unary_rpc_method_handler(_echo, request_deserializer=parse)
    guarded = _guard().handler("/x.Y/Z", handler)
    assert guarded.request_deserializer(b"") is UNDECODABLE


class _Server(grpc.aio.Server):
    """Records what is added; nothing listens."""

    def __init__(self) -> None:
        self.generic: list[Any] = []
        self.registered: dict[str, Mapping[str, Any]] = {}

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Iterable[Any]) -> None:
        self.generic.extend(generic_rpc_handlers)

    def add_registered_method_handlers(self, service_name: str, method_handlers: Any) -> None:
        self.registered[service_name] = method_handlers

    def add_insecure_port(self, address: str) -> int:
        return 1

    def add_secure_port(self, address: str, server_credentials: Any) -> int:
        return 2

    async def start(self) -> None:
        pass

    async def stop(self, grace: float | None) -> None:
        pass

    async def wait_for_termination(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        return True


def _details(method: str) -> Any:
    """Handler call details of `method` with no metadata."""
    return types.SimpleNamespace(method=method, invocation_metadata=())


def test_the_server_view_wraps_generic_and_registered_handlers_of_every_servicer():
    from harness_contract._gen.harness.v1 import endpoint_pb2_grpc

    server = _Server()
    view = calls_server(server, RpcCalls())
    assert isinstance(view, grpc.aio.Server)  # grpcio-reflection checks this
    base: Any = endpoint_pb2_grpc.HarnessEndpointServiceServicer
    endpoint_pb2_grpc.add_HarnessEndpointServiceServicer_to_server(base(), view)
    registered = server.registered["harness.v1.HarnessEndpointService"]
    assert set(registered) == {"Send", "Messages", "Acknowledge", "ParseMessageText", "ReadSend"}
    # The generated base servicer's methods are synchronous: left as they are, but the
    # async servicers below are what the gateway registers.
    (generic,) = server.generic
    assert generic.service(_details("/harness.v1.HarnessEndpointService/Send")) is not None
    assert generic.service(_details("/no.Such/Method")) is None
    assert view.add_insecure_port("x") == 1


def test_a_gateway_servicer_added_through_the_view_is_checked():
    from harness_contract._gen.harness.v1 import endpoint_pb2_grpc

    class Servicer:
        async def Send(self, request: Any, context: Any) -> Any:
            return endpoint_pb2.SendResponse()

        Messages = Acknowledge = ParseMessageText = ReadSend = Send

    server = _Server()
    servicer: Any = Servicer()
    endpoint_pb2_grpc.add_HarnessEndpointServiceServicer_to_server(
        servicer, calls_server(server, RpcCalls())
    )
    send = server.registered["harness.v1.HarnessEndpointService"]["Send"]
    assert send.request_deserializer(NOT_PROTOBUF) is UNDECODABLE
    (generic,) = server.generic
    via_generic = generic.service(_details(METHOD))
    assert via_generic.request_deserializer(NOT_PROTOBUF) is UNDECODABLE


def test_the_rejection_log_warns_once_per_interval_and_counts_what_it_held_back(
    caplog: pytest.LogCaptureFixture,
):
    now = [100.0]
    log = RejectionLog(interval=60.0, clock=lambda: now[0])
    reason = RejectedRequestReason.MALFORMED_REQUEST
    with caplog.at_level(logging.WARNING, logger="gateway.rpc.decoding"):
        log.rejected(reason, METHOD)
        for _ in range(5):
            now[0] += 1
            log.rejected(reason, METHOD)
        now[0] += 60
        log.rejected(reason, "/harness.v1.RouterService/Poll")
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2
    assert "suppressed=0" in lines[0]
    assert METHOD in lines[0]
    assert "suppressed=5" in lines[1]
    assert "RouterService/Poll" in lines[1]
    assert all(record.levelno == logging.WARNING for record in caplog.records)


def test_the_undecodable_sentinel_carries_its_reason():
    assert isinstance(UNDECODABLE, Undecodable)
    assert UNDECODABLE.reason is RejectedRequestReason.MALFORMED_REQUEST


async def test_the_health_servicer_lists_every_registered_status():
    health = GatewayHealthServicer()
    await health.set("liveness", health_pb2.HealthCheckResponse.SERVING)
    await health.set("harness.v1.ManagementService", health_pb2.HealthCheckResponse.NOT_SERVING)
    response = await health.List(health_pb2.HealthListRequest(), None)
    assert {name: status.status for name, status in response.statuses.items()} == {
        "": health_pb2.HealthCheckResponse.SERVING,
        "liveness": health_pb2.HealthCheckResponse.SERVING,
        "harness.v1.ManagementService": health_pb2.HealthCheckResponse.NOT_SERVING,
    }


def test_the_client_decodes_a_malformed_request_as_a_typed_invalid_request_never_retried():
    from harness_client._retry import send_may_retry, should_reconnect

    status = status_pb2.Status.FromString(
        dict(errors.malformed_request_status("harness.v1.SendRequest").trailing_metadata)[
            "grpc-status-details-bin"
        ]
    )
    decoded = harness_client.decode_status(as_rpc_error(status))
    assert isinstance(decoded, harness_client.InvalidRequestError)
    assert decoded.reason == "malformed-request"
    assert decoded.message == "the request body is not a valid harness.v1.SendRequest"
    assert not send_may_retry(decoded, keyed=True)
    assert not should_reconnect(decoded)


def test_the_client_decodes_an_invalid_idempotency_key_as_a_typed_invalid_request():
    from harness_client._retry import send_may_retry

    status = errors.status_for(InvalidIdempotencyKeyError())
    assert status is not None
    assert status.code == code_pb2.INVALID_ARGUMENT
    decoded = harness_client.decode_status(as_rpc_error(status))
    assert isinstance(decoded, harness_client.InvalidRequestError)
    assert decoded.reason == "invalid-idempotency-key"
    assert not send_may_retry(decoded, keyed=True)

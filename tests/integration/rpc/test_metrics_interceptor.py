"""The grpc_server_* metrics of the one call wrapper (`gateway/rpc/calls.py`) on a real grpc.aio
server, interceptors around it counted once, and the /metrics server."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from harness_contract._gen.harness.v1 import endpoint_pb2, endpoint_pb2_grpc

from gateway.observability.metrics import Metrics, Mode
from gateway.observability.metrics_server import MetricsServer, MetricsServerState
from gateway.rpc import build_server
from gateway.rpc.calls import RpcCalls, calls_server
from gateway.settings import Settings
from tests.integration.rpc.conftest import until
from tests.integration.rpc.fake_core import FakeCore

ENDPOINT = "harness.v1.HarnessEndpointService"
EXTRA = "test.v1.Extra"


@dataclass
class Scripted:
    """A raw-bytes stand-in for two endpoint methods, scripted by the request body."""

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    never: asyncio.Event = field(default_factory=asyncio.Event)

    async def send(self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        match request:
            case b"ok":
                return b"done"
            case b"abort":
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad input")
            case b"set-code":
                context.set_code(grpc.StatusCode.NOT_FOUND)
                return b""
            case b"wait":
                self.entered.set()
                await self.never.wait()
        raise RuntimeError(f"scripted failure for {request!r}")

    async def messages(
        self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        if request == b"hold":
            yield b"first"
            self.entered.set()
            await self.never.wait()
        if request == b"abort":
            yield b"first"
            await context.abort(grpc.StatusCode.UNAVAILABLE, "shutting down")
        for index in range(int(request)):
            yield str(index).encode()

    async def echo(self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        return request


@dataclass
class Server:
    """A started server whose handlers are wrapped, its metrics and a channel to it."""

    metrics: Metrics
    channel: grpc.aio.Channel
    scripted: Scripted

    def unary(self, method: str, service: str = ENDPOINT) -> Any:
        return self.channel.unary_unary(f"/{service}/{method}")

    def stream(self, method: str) -> Any:
        return self.channel.unary_stream(f"/{ENDPOINT}/{method}")

    def value(self, name: str, grpc_type: str, method: str, service: str = ENDPOINT, **more: str):
        labels = {"grpc_type": grpc_type, "grpc_service": service, "grpc_method": method, **more}
        return self.metrics.registry.get_sample_value(name, labels)

    def handled(self, grpc_type: str, method: str, code: str, service: str = ENDPOINT):
        return self.value("grpc_server_handled_total", grpc_type, method, service, grpc_code=code)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    metrics = Metrics("1.2.3", Mode.EMBEDDED)
    scripted = Scripted()
    aio_server = grpc.aio.server()
    calls = RpcCalls(metrics)
    calls_server(aio_server, calls).add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                ENDPOINT,
                {
                    "Send": grpc.unary_unary_rpc_method_handler(scripted.send),
                    "Messages": grpc.unary_stream_rpc_method_handler(scripted.messages),
                },
            ),
            grpc.method_handlers_generic_handler(
                EXTRA, {"Echo": grpc.unary_unary_rpc_method_handler(scripted.echo)}
            ),
        )
    )
    aio_server.add_generic_rpc_handlers([calls.unimplemented_handler()])
    port = aio_server.add_insecure_port("127.0.0.1:0")
    await aio_server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield Server(metrics=metrics, channel=channel, scripted=scripted)
    finally:
        scripted.never.set()
        await aio_server.stop(None)


async def call_code(call: Any) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def test_a_normal_return_counts_ok_with_one_message_each_way(server: Server):
    assert await server.unary("Send")(b"ok") == b"done"
    assert server.value("grpc_server_started_total", "unary", "Send") == 1
    assert server.handled("unary", "Send", "OK") == 1
    assert server.value("grpc_server_msg_received_total", "unary", "Send") == 1
    assert server.value("grpc_server_msg_sent_total", "unary", "Send") == 1
    assert server.value("grpc_server_handling_seconds_count", "unary", "Send") == 1


async def test_an_abort_keeps_its_code(server: Server):
    assert await call_code(server.unary("Send")(b"abort")) == grpc.StatusCode.INVALID_ARGUMENT
    # An abort sends its status before the interceptor's accounting runs.
    await until(lambda: server.handled("unary", "Send", "INVALID_ARGUMENT") == 1)
    assert server.handled("unary", "Send", "OK") == 0
    assert server.value("grpc_server_msg_sent_total", "unary", "Send") == 0
    assert server.value("grpc_server_handling_seconds_count", "unary", "Send") == 1


async def test_a_code_the_handler_set_without_raising_is_counted(server: Server):
    assert await call_code(server.unary("Send")(b"set-code")) == grpc.StatusCode.NOT_FOUND
    assert server.handled("unary", "Send", "NOT_FOUND") == 1
    assert server.value("grpc_server_msg_sent_total", "unary", "Send") == 0


async def test_a_handler_that_raises_counts_unknown(server: Server):
    assert await call_code(server.unary("Send")(b"boom")) == grpc.StatusCode.UNKNOWN
    assert server.handled("unary", "Send", "UNKNOWN") == 1
    assert server.value("grpc_server_started_total", "unary", "Send") == 1


async def test_a_call_the_client_cancels_counts_cancelled(server: Server):
    call = server.unary("Send")(b"wait")
    await asyncio.wait_for(server.scripted.entered.wait(), 10)
    call.cancel()
    await until(lambda: server.handled("unary", "Send", "CANCELLED") == 1)
    assert server.value("grpc_server_handling_seconds_count", "unary", "Send") == 1
    assert server.handled("unary", "Send", "UNKNOWN") == 0


async def test_a_call_whose_deadline_passes_counts_deadline_exceeded(server: Server):
    code = await call_code(server.unary("Send")(b"wait", timeout=0.2))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    await until(lambda: server.handled("unary", "Send", "DEADLINE_EXCEEDED") == 1)
    assert server.handled("unary", "Send", "CANCELLED") == 0


async def test_a_server_stream_counts_each_message_and_its_whole_lifetime(server: Server):
    received = [message async for message in server.stream("Messages")(b"5")]
    assert len(received) == 5
    assert server.value("grpc_server_started_total", "server_stream", "Messages") == 1
    assert server.value("grpc_server_msg_received_total", "server_stream", "Messages") == 1
    assert server.value("grpc_server_msg_sent_total", "server_stream", "Messages") == 5
    assert server.handled("server_stream", "Messages", "OK") == 1
    assert server.value("grpc_server_handling_seconds_count", "server_stream", "Messages") == 1


async def test_a_server_stream_aborted_midway_keeps_its_code(server: Server):
    call = server.stream("Messages")(b"abort")
    assert await call.read() == b"first"
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call.read()
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    # The client can see the status before the server's interceptor has counted it.
    await until(lambda: server.handled("server_stream", "Messages", "UNAVAILABLE") == 1)
    assert server.value("grpc_server_msg_sent_total", "server_stream", "Messages") == 1


async def test_a_server_stream_the_client_cancels_counts_cancelled(server: Server):
    call = server.stream("Messages")(b"hold")
    assert await call.read() == b"first"
    await asyncio.wait_for(server.scripted.entered.wait(), 10)
    call.cancel()
    await until(lambda: server.handled("server_stream", "Messages", "CANCELLED") == 1)
    assert server.value("grpc_server_msg_sent_total", "server_stream", "Messages") == 1
    assert server.value("grpc_server_handling_seconds_count", "server_stream", "Messages") == 1


async def test_an_unregistered_method_counts_as_unknown_and_unimplemented(server: Server):
    code = await call_code(server.unary("Scan", service="scanner.Probe")(b""))
    assert code == grpc.StatusCode.UNIMPLEMENTED
    assert server.handled("unary", "unknown", "UNIMPLEMENTED", service="unknown") == 1
    assert server.value("grpc_server_started_total", "unary", "unknown", service="unknown") == 1
    exported = server.metrics.render()
    assert "scanner.Probe" not in exported
    assert "Scan" not in exported


async def test_a_served_method_outside_the_table_counts_as_unknown(server: Server):
    assert await server.unary("Echo", service=EXTRA)(b"hi") == b"hi"
    assert server.handled("unary", "unknown", "OK", service="unknown") == 1
    assert EXTRA not in server.metrics.render()


async def test_every_call_of_a_method_is_counted_in_the_same_row(server: Server):
    for _ in range(3):
        await server.unary("Send")(b"ok")
    assert server.handled("unary", "Send", "OK") == 3
    assert server.value("grpc_server_handling_seconds_count", "unary", "Send") == 3


# --- the real server: health (context.write), reflection (bidi), auth (abort_with_status) ---


@dataclass
class Real:
    """The real server over a FakeCore, counting into its metrics."""

    metrics: Metrics
    address: str
    core: FakeCore


@pytest.fixture
async def real(tmp_path: Path) -> AsyncIterator[Real]:
    metrics = Metrics("1.2.3", Mode.EMBEDDED)
    core = FakeCore()
    settings = Settings(
        listen="127.0.0.1:0", metrics_listen=None, data_dir=tmp_path, reflection=True
    )
    rpc_server = await build_server(core.core, settings, metrics=metrics)
    try:
        await rpc_server.start()
        await rpc_server.set_serving()
        yield Real(metrics=metrics, address=rpc_server.address, core=core)
    finally:
        await rpc_server.stop(None)


def value(metrics: Metrics, name: str, grpc_type: str, service: str, method: str, **more: str):
    labels = {"grpc_type": grpc_type, "grpc_service": service, "grpc_method": method, **more}
    return metrics.registry.get_sample_value(name, labels)


async def test_health_check_and_watch_are_counted_on_the_real_server(real: Real):
    metrics, address = real.metrics, real.address
    health = "grpc.health.v1.Health"
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        await stub.Check(health_pb2.HealthCheckRequest(service="liveness"))
        watch = stub.Watch(health_pb2.HealthCheckRequest(service="liveness"))
        first = await watch.read()
        assert first.status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()
    assert (
        value(metrics, "grpc_server_handled_total", "unary", health, "Check", grpc_code="OK") == 1
    )
    await until(
        lambda: (
            value(
                metrics,
                "grpc_server_handled_total",
                "server_stream",
                health,
                "Watch",
                grpc_code="CANCELLED",
            )
            == 1
        )
    )
    assert value(metrics, "grpc_server_msg_sent_total", "server_stream", health, "Watch") == 1


async def test_reflection_is_counted_as_a_bidi_stream_on_the_real_server(real: Real):
    metrics, address = real.metrics, real.address
    service = "grpc.reflection.v1alpha.ServerReflection"
    async with grpc.aio.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        requests = [reflection_pb2.ServerReflectionRequest(list_services="")] * 2
        responses = [response async for response in stub.ServerReflectionInfo(iter(requests))]
    assert len(responses) == 2
    method = "ServerReflectionInfo"
    assert value(metrics, "grpc_server_msg_received_total", "bidi_stream", service, method) == 2
    assert value(metrics, "grpc_server_msg_sent_total", "bidi_stream", service, method) == 2
    assert (
        value(metrics, "grpc_server_handled_total", "bidi_stream", service, method, grpc_code="OK")
        == 1
    )


async def test_an_unauthenticated_endpoint_call_keeps_its_rich_status_code(real: Real):
    metrics, address = real.metrics, real.address
    async with grpc.aio.insecure_channel(address) as channel:
        stub = endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
        code = await call_code(stub.ReadSend(endpoint_pb2.ReadSendRequest(idempotency_key="k")))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    # The interceptor counts once the server finished the call, which may be just after the
    # client read its status.
    await until(
        lambda: (
            value(
                metrics,
                "grpc_server_handled_total",
                "unary",
                ENDPOINT,
                "ReadSend",
                grpc_code="UNAUTHENTICATED",
            )
            == 1
        )
    )


async def test_a_real_messages_stream_counts_as_a_server_stream_until_the_client_leaves(
    real: Real,
):
    metrics = real.metrics
    token = (await real.core.register("alice")).token
    async with grpc.aio.insecure_channel(real.address) as channel:
        stub = endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
        call = stub.Messages(
            endpoint_pb2.MessagesRequest(), metadata=(("authorization", f"Bearer {token}"),)
        )
        await until(
            lambda: (
                value(metrics, "grpc_server_started_total", "server_stream", ENDPOINT, "Messages")
                == 1
            )
        )
        call.cancel()
        await until(
            lambda: (
                value(
                    metrics,
                    "grpc_server_handled_total",
                    "server_stream",
                    ENDPOINT,
                    "Messages",
                    grpc_code="CANCELLED",
                )
                == 1
            )
        )
    assert (
        value(metrics, "grpc_server_msg_received_total", "server_stream", ENDPOINT, "Messages") == 1
    )


# --- the /metrics server ---


def state_of(metrics_server: MetricsServer) -> MetricsServerState:
    """The state, read through a call so a type checker does not keep an earlier narrowing."""
    return metrics_server.state


def fetch(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


async def test_the_metrics_server_serves_the_registry_on_a_free_port_and_stops_idempotently(
    server: Server,
):
    await server.unary("Send")(b"ok")
    metrics_server = MetricsServer(server.metrics, "127.0.0.1:0")
    with pytest.raises(RuntimeError, match="created"):
        _ = metrics_server.address
    metrics_server.start()
    try:
        assert state_of(metrics_server) is MetricsServerState.SERVING
        host, _, port = metrics_server.address.rpartition(":")
        assert host == "127.0.0.1"
        assert int(port) > 0
        status, content_type, body = await asyncio.to_thread(
            fetch, f"http://{metrics_server.address}/metrics"
        )
        assert status == 200
        assert content_type.startswith("text/plain")
        assert (
            'grpc_server_handled_total{grpc_code="OK",grpc_method="Send",'
            'grpc_service="harness.v1.HarnessEndpointService",grpc_type="unary"} 1.0'
        ) in body
        assert 'harness_build_info{mode="embedded",version="1.2.3"} 1.0' in body
        status, _, _ = await asyncio.to_thread(fetch, f"http://{metrics_server.address}/")
        assert status == 404
        with pytest.raises(RuntimeError, match="serving"):
            metrics_server.start()
    finally:
        await asyncio.to_thread(metrics_server.stop)
    await asyncio.to_thread(metrics_server.stop)
    assert state_of(metrics_server) is MetricsServerState.STOPPED
    with pytest.raises(urllib.error.URLError):
        await asyncio.to_thread(fetch, f"http://{metrics_server.address}/metrics")


def test_a_metrics_server_stopped_before_start_never_binds():
    metrics_server = MetricsServer(Metrics("1.2.3", Mode.EMBEDDED), "127.0.0.1:0")
    metrics_server.stop()
    assert metrics_server.state is MetricsServerState.STOPPED
    with pytest.raises(RuntimeError, match="stopped"):
        metrics_server.start()


def test_a_metrics_server_refuses_a_malformed_listen_address():
    with pytest.raises(ValueError, match="HOST:PORT"):
        MetricsServer(Metrics("1.2.3", Mode.EMBEDDED), "localhost")


def test_a_metrics_server_on_a_taken_port_fails_to_start_with_oserror():
    metrics = Metrics("1.2.3", Mode.EMBEDDED)
    first = MetricsServer(metrics, "127.0.0.1:0")
    first.start()
    try:
        second = MetricsServer(metrics, first.address)
        with pytest.raises(OSError, match="cannot listen"):
            second.start()
    finally:
        first.stop()


class Relay(grpc.aio.ServerInterceptor):
    """Answers `Acknowledge` from a handler of its own that calls the server's, as a cluster's
    forwarder does when the agent's partition came here meanwhile."""

    async def intercept_service(self, continuation: Any, handler_call_details: Any) -> Any:
        local = await continuation(handler_call_details)
        if local is None or not handler_call_details.method.endswith("/Acknowledge"):
            return local

        async def relay(request: bytes, context: Any) -> bytes:
            answer = await local.unary_unary(local.request_deserializer(request), context)
            return bytes(local.response_serializer(answer))

        return grpc.unary_unary_rpc_method_handler(relay)


async def test_a_call_an_interceptor_answers_through_the_servers_handler_is_counted_once(
    tmp_path: Path,
):
    metrics = Metrics("1.2.3", Mode.EMBEDDED)
    settings = Settings(listen="127.0.0.1:0", metrics_listen=None, data_dir=tmp_path)
    rpc_server = await build_server(
        FakeCore().core, settings, metrics=metrics, interceptors=[Relay()]
    )
    await rpc_server.start()
    await rpc_server.set_serving()
    try:
        async with grpc.aio.insecure_channel(rpc_server.address) as channel:
            stub = endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
            for method in (stub.Acknowledge, stub.ReadSend):
                request: Any = (
                    endpoint_pb2.AcknowledgeRequest(delivery_tokens=["t"])
                    if method is stub.Acknowledge
                    else endpoint_pb2.ReadSendRequest(idempotency_key="k")
                )
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await method(request)
                assert raised.value.code() is grpc.StatusCode.UNAUTHENTICATED
    finally:
        await rpc_server.stop(None)
    for name in ("Acknowledge", "ReadSend"):
        labels = ("unary", ENDPOINT, name)
        assert value(metrics, "grpc_server_started_total", *labels) == 1
        assert (
            value(metrics, "grpc_server_handled_total", *labels, grpc_code="UNAUTHENTICATED") == 1
        )
        assert value(metrics, "grpc_server_msg_received_total", *labels) == 1

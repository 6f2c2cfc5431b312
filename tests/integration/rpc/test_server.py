"""The server itself: binding, health, reflection, options and lifecycle."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gateway.rpc import RpcServerState, build_server
from gateway.rpc.server import server_options
from gateway.settings import Settings
from tests.integration.rpc.conftest import Served
from tests.integration.rpc.fake_core import FakeCore

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
READINESS = ("", "harness.v1.HarnessEndpointService", "harness.v1.ManagementService")


async def health_of(address: str, service: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = await stub.Check(health_pb2.HealthCheckRequest(service=service))
        return int(response.status)


def settings(tmp_path: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "listen": "127.0.0.1:0",
        "metrics_listen": None,
        "data_dir": tmp_path,
        **overrides,
    }
    return Settings(**values)  # type: ignore[arg-type]


async def test_the_server_binds_a_free_port_on_the_loopback_address(served: Served):
    host, _, port = served.address.rpartition(":")
    assert host == "127.0.0.1"
    assert int(port) > 0


async def test_readiness_is_not_serving_until_set_and_liveness_serves_from_listen(tmp_path):
    server = await build_server(FakeCore().core, settings(tmp_path))
    try:
        await server.start()
        for name in READINESS:
            assert await health_of(server.address, name) == NOT_SERVING
        assert await health_of(server.address, "liveness") == SERVING
        await server.set_serving()
        for name in READINESS:
            assert await health_of(server.address, name) == SERVING
        await server.set_not_serving()
        await server.set_serving()  # ignored: readiness ended for good
        for name in READINESS:
            assert await health_of(server.address, name) == NOT_SERVING
        assert await health_of(server.address, "liveness") == SERVING
    finally:
        await server.stop(None)
    assert server.state is RpcServerState.STOPPED


async def test_reflection_lists_the_harness_services(served: Served):
    async with grpc.aio.insecure_channel(served.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)

        async def requests():
            yield reflection_pb2.ServerReflectionRequest(list_services="")

        names = set()
        async for response in stub.ServerReflectionInfo(requests()):
            names |= {service.name for service in response.list_services_response.service}
    assert {
        "harness.v1.HarnessEndpointService",
        "harness.v1.ManagementService",
        "grpc.health.v1.Health",
    } <= names


async def test_reflection_is_off_when_the_settings_say_so(tmp_path):
    server = await build_server(FakeCore().core, settings(tmp_path, reflection=False))
    try:
        await server.start()
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)

            async def requests():
                yield reflection_pb2.ServerReflectionRequest(list_services="")

            with pytest.raises(grpc.aio.AioRpcError) as raised:
                async for _ in stub.ServerReflectionInfo(requests()):
                    pass
        assert raised.value.code() is grpc.StatusCode.UNIMPLEMENTED
    finally:
        await server.stop(None)


async def test_stop_is_safe_before_start_and_idempotent(tmp_path):
    server = await build_server(FakeCore().core, settings(tmp_path))
    await server.stop(None)
    await server.stop(None)
    assert server.state is RpcServerState.STOPPED
    with pytest.raises(RuntimeError, match="stopped"):
        await server.start()


async def test_an_address_in_use_cannot_be_bound(served: Served, tmp_path):
    with pytest.raises(OSError, match="cannot listen"):
        await build_server(FakeCore().core, settings(tmp_path, listen=served.address))


def test_the_server_options_follow_the_keepalive_table():
    options = dict(
        server_options(Settings(max_receive_bytes=1 << 20, keepalive_min_client_interval=10.0))
    )
    assert options["grpc.keepalive_time_ms"] == 30_000
    assert options["grpc.keepalive_timeout_ms"] == 10_000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    # The name C-core reads (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS).
    assert options["grpc.http2.min_ping_interval_without_data_ms"] == 10_000
    assert options["grpc.http2.max_ping_strikes"] == 2
    assert options["grpc.max_connection_idle_ms"] == 900_000
    assert options["grpc.max_connection_age_ms"] == 1_800_000
    assert options["grpc.max_connection_age_grace_ms"] == 70_000
    assert options["grpc.max_receive_message_length"] == 1 << 20
    assert options["grpc.max_send_message_length"] == 4 << 20


async def test_an_interceptor_sees_every_call(tmp_path):
    seen: list[str] = []

    class Recorder(grpc.aio.ServerInterceptor):
        async def intercept_service(self, continuation, handler_call_details):
            seen.append(handler_call_details.method)
            return await continuation(handler_call_details)

    server = await build_server(FakeCore().core, settings(tmp_path), interceptors=[Recorder()])
    try:
        await server.start()
        await health_of(server.address, "liveness")
    finally:
        await server.stop(None)
    assert seen == ["/grpc.health.v1.Health/Check"]

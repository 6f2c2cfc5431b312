"""TLS on the gRPC listener, mTLS, and the plaintext health-only listener (operations.md §4).

Real gateways on port 0 with certificates made in the test (`tests.certs`), real gRPC
clients: a handshake that fails is UNAVAILABLE, and nothing behind it is served.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import harness_client
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness_contract._gen.harness.v1 import endpoint_pb2, endpoint_pb2_grpc

from gateway.app import Gateway
from gateway.endpoint.api import GatewayState
from gateway.rpc.server import build_peer_server
from gateway.rpc.tls import TlsConfigError, TlsConfigReason
from gateway.settings import Settings
from gateway.testing import RunningGateway, run_gateway
from tests.certs import Pki, write_pki
from tests.support import eventually

CALL_TIMEOUT = 5.0
"""Seconds a single test call may take; a refused handshake fails well within it."""
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return write_pki(tmp_path / "pki")


def tls_settings(pki: Pki) -> Settings:
    """TLS on the listener with the test CA's server certificate."""
    return replace(Settings(), tls_cert_file=pki.server_cert, tls_key_file=pki.server_key)


def pinned(
    pki: Pki, *, cert: Path | None = None, key: Path | None = None
) -> grpc.ChannelCredentials:
    """Client credentials that trust only the test CA, optionally with a client certificate."""
    return grpc.ssl_channel_credentials(
        root_certificates=pki.ca.read_bytes(),
        private_key=None if key is None else key.read_bytes(),
        certificate_chain=None if cert is None else cert.read_bytes(),
    )


@dataclass
class Call:
    """The outcome of one `ParseMessageText` call: OK, or the failing status."""

    code: grpc.StatusCode


async def parse_call(
    address: str, credentials: grpc.ChannelCredentials | None, token: str | None
) -> Call:
    """One authenticated agent call with no effect, over TLS when `credentials` are given."""
    channel = (
        grpc.aio.insecure_channel(address)
        if credentials is None
        else grpc.aio.secure_channel(address, credentials)
    )
    async with channel:
        stub = endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
        metadata = () if token is None else (("authorization", f"Bearer {token}"),)
        try:
            await stub.ParseMessageText(
                endpoint_pb2.ParseMessageTextRequest(to="agent:bob", text="hello"),
                metadata=metadata,
                timeout=CALL_TIMEOUT,
            )
        except grpc.aio.AioRpcError as error:
            return Call(code=error.code())
        return Call(code=grpc.StatusCode.OK)


async def health_check(
    address: str, service: str = "", credentials: grpc.ChannelCredentials | None = None
) -> int | grpc.StatusCode:
    """The health status of `service`, or the status code of the failed call."""
    channel = (
        grpc.aio.insecure_channel(address)
        if credentials is None
        else grpc.aio.secure_channel(address, credentials)
    )
    async with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = await stub.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=CALL_TIMEOUT
            )
        except grpc.aio.AioRpcError as error:
            return error.code()
        return int(response.status)


@pytest.fixture
async def tls_gateway(pki: Pki) -> AsyncIterator[RunningGateway]:
    async with run_gateway(replace(tls_settings(pki), health_listen="127.0.0.1:0")) as gw:
        yield gw


@pytest.fixture
async def mtls_gateway(pki: Pki) -> AsyncIterator[RunningGateway]:
    async with run_gateway(replace(tls_settings(pki), tls_client_ca_file=pki.ca)) as gw:
        yield gw


# --- TLS -------------------------------------------------------------------------------------


async def test_a_plaintext_client_is_refused_by_a_tls_listener(tls_gateway: RunningGateway):
    token = await tls_gateway.register("alice")
    assert (await parse_call(tls_gateway.address, None, token)).code is grpc.StatusCode.UNAVAILABLE
    assert await health_check(tls_gateway.address) is grpc.StatusCode.UNAVAILABLE


async def test_a_client_that_pins_the_ca_works(tls_gateway: RunningGateway, pki: Pki):
    token = await tls_gateway.register("alice")
    async with await harness_client.connect(
        f"grpcs://{tls_gateway.address}", token=token, credentials=pinned(pki)
    ) as endpoint:
        parsed = await endpoint.parse_message_text("agent:bob", "hello")
    assert parsed is not None
    assert (await parse_call(tls_gateway.address, pinned(pki), token)).code is grpc.StatusCode.OK


async def test_a_client_that_trusts_another_ca_is_refused(tls_gateway: RunningGateway, pki: Pki):
    token = await tls_gateway.register("alice")
    stranger = grpc.ssl_channel_credentials(root_certificates=pki.other_ca.read_bytes())
    call = await parse_call(tls_gateway.address, stranger, token)
    assert call.code is grpc.StatusCode.UNAVAILABLE


# --- mTLS ------------------------------------------------------------------------------------


async def test_with_mtls_a_client_without_a_certificate_is_refused(
    mtls_gateway: RunningGateway, pki: Pki
):
    token = await mtls_gateway.register("alice")
    call = await parse_call(mtls_gateway.address, pinned(pki), token)
    assert call.code is grpc.StatusCode.UNAVAILABLE


async def test_with_mtls_a_certificate_from_an_untrusted_ca_is_refused(
    mtls_gateway: RunningGateway, pki: Pki
):
    token = await mtls_gateway.register("alice")
    credentials = pinned(pki, cert=pki.other_client_cert, key=pki.other_client_key)
    call = await parse_call(mtls_gateway.address, credentials, token)
    assert call.code is grpc.StatusCode.UNAVAILABLE


async def test_with_mtls_a_good_certificate_works_and_still_needs_its_token(
    mtls_gateway: RunningGateway, pki: Pki
):
    token = await mtls_gateway.register("alice")
    credentials = pinned(pki, cert=pki.client_cert, key=pki.client_key)
    async with await harness_client.connect(
        f"grpcs://{mtls_gateway.address}", token=token, credentials=credentials
    ) as endpoint:
        assert await endpoint.parse_message_text("agent:bob", "hello") is not None
    untokened = await parse_call(mtls_gateway.address, credentials, None)
    assert untokened.code is grpc.StatusCode.UNAUTHENTICATED


# --- the health-only listener ----------------------------------------------------------------


async def test_the_plaintext_health_port_answers_while_the_agent_port_is_tls_only(
    tls_gateway: RunningGateway, pki: Pki
):
    health = tls_gateway.gateway.health_address
    assert health is not None
    assert health != "127.0.0.1:0"
    assert health != tls_gateway.address
    assert await health_check(health) == SERVING
    assert await health_check(health, "harness.v1.HarnessEndpointService") == SERVING
    assert await health_check(health, "liveness") == SERVING
    assert await health_check(tls_gateway.address) is grpc.StatusCode.UNAVAILABLE
    assert await health_check(tls_gateway.address, credentials=pinned(pki)) == SERVING


async def test_the_health_port_serves_nothing_but_health(tls_gateway: RunningGateway):
    token = await tls_gateway.register("alice")
    health = tls_gateway.gateway.health_address
    assert health is not None
    assert (await parse_call(health, None, token)).code is grpc.StatusCode.UNIMPLEMENTED


async def test_the_health_port_reports_not_serving_through_the_shutdown_and_then_closes(
    pki: Pki, tmp_path: Path
):
    settings = replace(tls_settings(pki), health_listen="127.0.0.1:0", shutdown_delay=30.0)
    gateway = await Gateway.start(
        replace(settings, listen="127.0.0.1:0", metrics_listen=None, data_dir=tmp_path / "data")
    )
    health = gateway.health_address
    assert health is not None
    shutdown = asyncio.ensure_future(gateway.shutdown())
    try:
        # The shutdown delay holds here: the main server still runs, readiness is gone.
        status = await eventually(lambda: health_check(health), lambda s: s == NOT_SERVING)
        assert status == NOT_SERVING
        assert await health_check(health, "liveness") == SERVING
        assert gateway.state is GatewayState.STOPPING
    finally:
        await gateway.shutdown(skip_waits=True)
        await shutdown
    assert await health_check(health) is grpc.StatusCode.UNAVAILABLE


async def test_a_health_port_that_cannot_be_bound_refuses_to_start(pki: Pki, tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port} for health: "):
            async with run_gateway(
                replace(tls_settings(pki), health_listen=f"127.0.0.1:{port}"),
                data_dir=tmp_path / "data",
            ):
                pass
    # Nothing was left running: the data directory starts again.
    async with run_gateway(data_dir=tmp_path / "data") as gw:
        assert gw.gateway.state is GatewayState.SERVING


async def test_a_peer_server_gets_the_health_port_too(tmp_path: Path):
    settings = replace(
        Settings(),
        listen="127.0.0.1:0",
        metrics_listen=None,
        data_dir=tmp_path,
        health_listen="127.0.0.1:0",
    )
    server = await build_peer_server(settings, [])
    try:
        await server.start()
        assert server.health_address is not None
        assert await health_check(server.health_address) == NOT_SERVING
        await server.set_serving()
        assert await health_check(server.health_address) == SERVING
    finally:
        await server.stop(None)


# --- refusing to start -----------------------------------------------------------------------


async def test_a_key_that_does_not_match_its_certificate_refuses_to_start(pki: Pki, tmp_path: Path):
    data_dir = tmp_path / "data"
    settings = replace(tls_settings(pki), tls_key_file=pki.client_key)
    with pytest.raises(TlsConfigError) as caught:
        async with run_gateway(settings, data_dir=data_dir):
            pass
    assert caught.value.reason is TlsConfigReason.KEY_MISMATCH
    assert str(pki.client_key) in str(caught.value)
    assert str(pki.server_cert) in str(caught.value)
    # The failed start closed what it opened: the data directory's lock is free again.
    async with run_gateway(tls_settings(pki), data_dir=data_dir) as gw:
        assert gw.gateway.state is GatewayState.SERVING


@pytest.mark.parametrize("content", [None, b"-----BEGIN CERTIFICATE-----\ngarbage\n"])
async def test_an_unreadable_or_garbage_certificate_refuses_to_start_naming_the_file(
    pki: Pki, tmp_path: Path, content: bytes | None
):
    cert = tmp_path / "server-cert.pem"
    if content is not None:
        cert.write_bytes(content)
    settings = replace(tls_settings(pki), tls_cert_file=cert)
    with pytest.raises(ValueError, match=str(cert)) as caught:
        async with run_gateway(settings, data_dir=tmp_path / "data"):
            pass
    assert isinstance(caught.value, TlsConfigError)
    expected = TlsConfigReason.UNREADABLE if content is None else TlsConfigReason.NO_CERTIFICATE
    assert caught.value.reason is expected

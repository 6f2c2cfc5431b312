"""Peer authentication, always: every Router and Registry RPC refuses a caller without the
peer token — loopback included, with a valid client certificate included — and the owner's
daemons, which hold it, work, over plaintext and over TLS."""

from __future__ import annotations

import contextlib
import stat
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import harness_client
import pytest
from google.protobuf import descriptor_pool
from google.protobuf.message_factory import GetMessageClass
from harness_client import MessageInput, TextPart
from harness_contract._gen.harness.v1 import registry_pb2, router_pb2

from gateway.rpc.peer import HARNESS_VERSION, PEER_TOKEN_FILE, VERSION_KEY
from gateway.settings import Settings
from gateway.testing import RunningGateway, run_gateway
from tests.certs import Pki, write_pki
from tests.integration.network.support import message_of, next_delivery

PEER_SERVICES = (
    router_pb2.DESCRIPTOR.services_by_name["RouterService"],
    registry_pb2.DESCRIPTOR.services_by_name["RegistryService"],
)
PEER_METHODS = [
    (service.full_name, method) for service in PEER_SERVICES for method in service.methods
]
"""Every peer RPC, from the descriptors: a new one is covered without editing this file."""

WRONG_TOKEN = "hpeer_" + "w" * 43


def _request_class(method: Any) -> Any:
    pool = descriptor_pool.Default()
    return GetMessageClass(pool.FindMessageTypeByName(method.input_type.full_name))


async def _call(
    channel: grpc.aio.Channel, service: str, method: Any, metadata: list[tuple[str, str]]
) -> grpc.StatusCode:
    """The status of one call of `method` with an empty request and `metadata`."""
    request = _request_class(method)()
    path = f"/{service}/{method.name}"
    serialize = type(request).SerializeToString
    try:
        if method.server_streaming:
            call: Any = channel.unary_stream(path, request_serializer=serialize)(
                request, metadata=metadata, timeout=5
            )
            async for _ in call:
                break
            call.cancel()
        else:
            await channel.unary_unary(path, request_serializer=serialize)(
                request, metadata=metadata, timeout=5
            )
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def _peer_metadata(token: str | None) -> list[tuple[str, str]]:
    metadata = [(VERSION_KEY, HARNESS_VERSION)]
    if token is not None:
        metadata.append(("authorization", f"Bearer {token}"))
    return metadata


@contextlib.asynccontextmanager
async def hub(settings: Settings | None = None) -> AsyncIterator[RunningGateway]:
    """A daemon exposing its embedded Router and Registry, with no peer token given."""
    async with run_gateway(replace(settings or Settings(), expose_network=True)) as gateway:
        yield gateway


def _tls(pki: Pki, *, mtls: bool) -> Settings:
    return Settings(
        tls_cert_file=pki.server_cert,
        tls_key_file=pki.server_key,
        tls_client_ca_file=pki.ca if mtls else None,
    )


async def test_a_daemon_serving_peers_creates_an_owner_only_peer_token_and_keeps_it(tmp_path):
    async with run_gateway(Settings(expose_network=True), data_dir=tmp_path) as gateway:
        path = tmp_path / PEER_TOKEN_FILE
        assert gateway.gateway.peer_token_path == path
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        first = path.read_text()
        await gateway.restart()
        assert path.read_text() == first


async def test_an_embedded_daemon_that_serves_no_peers_writes_no_peer_token(tmp_path):
    async with run_gateway(data_dir=tmp_path) as gateway:
        assert gateway.gateway.peer_token_path is None
        assert not (tmp_path / PEER_TOKEN_FILE).exists()


async def test_every_peer_rpc_refuses_a_caller_without_the_token_or_with_a_wrong_one():
    async with hub() as gateway, grpc.aio.insecure_channel(gateway.address) as channel:
        for service, method in PEER_METHODS:
            for token in (None, WRONG_TOKEN, ""):
                code = await _call(channel, service, method, _peer_metadata(token))
                assert code is grpc.StatusCode.UNAUTHENTICATED, (method.full_name, token)
        # The refused calls registered nothing: the operator's registration still works.
        await gateway.register("carol")
        assert [
            agent.address
            for agent in (
                await gateway.gateway.components.management.list_agents(
                    prefix="", after=None, limit=10
                )
            )[0]
        ] == ["agent:carol"]


async def test_the_agent_and_admin_tokens_open_no_peer_rpc():
    async with hub() as gateway, grpc.aio.insecure_channel(gateway.address) as channel:
        agent_token = await gateway.register("alice")
        for service, method in PEER_METHODS:
            for token in (agent_token, gateway.admin_token):
                code = await _call(channel, service, method, _peer_metadata(token))
                assert code is grpc.StatusCode.UNAUTHENTICATED, method.full_name


async def test_with_mtls_a_valid_client_certificate_without_the_peer_token_is_refused(tmp_path):
    pki = write_pki(tmp_path / "pki")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki.ca.read_bytes(),
        private_key=pki.client_key.read_bytes(),
        certificate_chain=pki.client_cert.read_bytes(),
    )
    async with (
        hub(_tls(pki, mtls=True)) as gateway,
        grpc.aio.secure_channel(gateway.address, credentials) as channel,
    ):
        token = (gateway.data_dir / PEER_TOKEN_FILE).read_text().strip()
        for service, method in PEER_METHODS:
            for wrong in (None, WRONG_TOKEN):
                code = await _call(channel, service, method, _peer_metadata(wrong))
                assert code is grpc.StatusCode.UNAUTHENTICATED, method.full_name
        # The same certificate with the token is admitted (the transport checked it).
        get_key = registry_pb2.DESCRIPTOR.services_by_name["RegistryService"].methods_by_name[
            "GetRegistryKey"
        ]
        code = await _call(channel, "harness.v1.RegistryService", get_key, _peer_metadata(token))
        assert code is grpc.StatusCode.OK


def _joined(hub_gateway: RunningGateway, scheme: str, **tls: Path) -> Settings:
    target = f"{scheme}://{hub_gateway.address}"
    return Settings(
        router=target,
        registry=target,
        peer_token_file=hub_gateway.data_dir / PEER_TOKEN_FILE,
        **tls,  # type: ignore[arg-type]
    )


async def _exchange(hub_gateway: RunningGateway, spoke: RunningGateway, **connect: Any) -> None:
    """alice on the hub, bob on the spoke: bob's message reaches alice certified."""
    alice_token = await hub_gateway.register("alice")
    bob_token = await spoke.register("bob")
    async with (
        await harness_client.connect(hub_gateway.address, token=alice_token, **connect) as alice,
        await harness_client.connect(spoke.address, token=bob_token) as bob,
    ):
        await bob.send(MessageInput(to="agent:alice", text="across the link"))
        message = message_of(await next_delivery(alice.messages()))
        assert message.sender == "agent:bob"
        assert message.content == (TextPart(text="across the link"),)


async def test_the_owners_daemon_joins_with_the_generated_peer_token_over_plaintext():
    async with hub() as hub_gateway, run_gateway(_joined(hub_gateway, "grpc")) as spoke:
        await _exchange(hub_gateway, spoke)


@pytest.mark.parametrize("mtls", [False, True], ids=["tls", "mtls"])
async def test_a_daemon_joins_over_tls_with_the_peer_token(tmp_path, mtls):
    pki = write_pki(tmp_path / "pki")
    client_cert = {"peer_tls_cert_file": pki.client_cert, "peer_tls_key_file": pki.client_key}
    async with (
        hub(_tls(pki, mtls=mtls)) as hub_gateway,
        run_gateway(
            _joined(
                hub_gateway,
                "grpcs",
                peer_tls_ca_file=pki.ca,
                **(client_cert if mtls else {}),
            )
        ) as spoke,
    ):
        agent_credentials = grpc.ssl_channel_credentials(
            root_certificates=pki.ca.read_bytes(),
            private_key=pki.client_key.read_bytes() if mtls else None,
            certificate_chain=pki.client_cert.read_bytes() if mtls else None,
        )
        await _exchange(hub_gateway, spoke, credentials=agent_credentials)


async def test_a_daemon_pinning_another_ca_cannot_join_a_tls_hub(tmp_path):
    pki = write_pki(tmp_path / "pki")
    async with hub(_tls(pki, mtls=False)) as hub_gateway:
        settings = _joined(hub_gateway, "grpcs", peer_tls_ca_file=pki.other_ca)
        # The Registry key is fetched at start: an untrusted server certificate fails it.
        with pytest.raises(Exception, match=r"(?i)registry") as refused:
            async with run_gateway(replace(settings, registry_public_key=None)):
                pytest.fail("joined a hub whose certificate the pinned CA did not sign")
        # The error names the cause, not just that the wait ran out.
        assert "handshake failed" in str(refused.value).lower()


async def test_a_daemon_with_a_wrong_peer_token_cannot_join(tmp_path):
    wrong = tmp_path / "wrong-token"
    wrong.write_text(WRONG_TOKEN)
    wrong.chmod(0o600)
    async with hub() as hub_gateway:
        settings = replace(_joined(hub_gateway, "grpc"), peer_token_file=wrong)
        with pytest.raises(Exception, match="UNAUTHENTICATED"):
            async with run_gateway(settings):
                pytest.fail("joined with a wrong peer token")

"""The Registry contract suite through gRPC: `GrpcRegistry` against a real
`RegistryService` on 127.0.0.1:0 over each in-process backend, plus what only a remote
Registry adds (the pinned key, peer token, `harness-version`, transport failures)."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Callable

import grpc
import pytest
from harness_contract._gen.harness.v1 import registry_pb2, registry_pb2_grpc
from harness_contract.ids import RandomId

from gateway.engine import protocol as p
from gateway.identity.cards import AgentCard, sign_card
from gateway.identity.keys import SigningKey
from gateway.registry import (
    Found,
    MemoryRegistry,
    NotFound,
    RegistryClient,
    RegistryPort,
    RegistryUnavailable,
    RegistryVersionMismatch,
    SqliteRegistry,
)
from gateway.rpc.peer import PeerGuard, version_mismatch_status
from gateway.rpc.registry_client import GrpcRegistry, decode_card
from gateway.rpc.registry_service import RegistryService
from gateway.rpc.server import RpcServer, build_peer_server
from gateway.settings import Settings
from tests.servers import free_port
from tests.unit.registry.registry_contract_suite import *  # noqa: F403 - the suite, run here
from tests.unit.registry.registry_contract_suite import NOW, key, registered

PEER_TOKEN = "peer-token-" + "z" * 32


@contextlib.asynccontextmanager
async def served_registry(
    registry: RegistryPort, *, peer_token: str = PEER_TOKEN
) -> AsyncIterator[RpcServer]:
    """`registry` served on 127.0.0.1:0, stopped when the block ends."""
    server = await build_peer_server(
        Settings(listen="127.0.0.1:0", metrics_listen=None, reflection=False),
        [RegistryService(registry, PeerGuard(peer_token)).binding()],
    )
    await server.start()
    await server.set_serving()
    try:
        yield server
    finally:
        await server.stop(None)


@pytest.fixture(params=["memory", "sqlite"])
async def make_registry(request, tmp_path):
    """The contract suite's factory: each backend behind a real server, seen through
    `GrpcRegistry` (its key fetched with `GetRegistryKey`)."""
    async with contextlib.AsyncExitStack() as stack:

        async def make(
            *,
            mint_agent_id: Callable[[], str] = RandomId.AGENT.mint,
            clock: Callable[[], dt.datetime] = lambda: NOW,
        ) -> RegistryPort:
            backend: RegistryPort
            if request.param == "memory":
                backend = MemoryRegistry(mint_agent_id=mint_agent_id, clock=clock)
            else:
                backend = await stack.enter_async_context(
                    await SqliteRegistry.open(
                        tmp_path / "registry.db", mint_agent_id=mint_agent_id, clock=clock
                    )
                )
            server = await stack.enter_async_context(served_registry(backend))
            client = await GrpcRegistry.connect(f"grpc://{server.address}", peer_token=PEER_TOKEN)
            await stack.enter_async_context(client)
            assert client.registry_public_key() == backend.registry_public_key()
            return client

        yield make


async def test_a_grpc_registry_is_a_registry_port_pinning_a_configured_key_without_a_call():
    pinned = SigningKey.generate().public_key_b64
    # Nothing listens: a configured key needs no call, so the daemon starts anyway.
    async with await GrpcRegistry.connect(
        f"127.0.0.1:{free_port()}", peer_token=PEER_TOKEN, registry_public_key=pinned
    ) as client:
        port: RegistryPort = client  # mypy checks the client against the seam here
        assert port.registry_public_key() == pinned
        with pytest.raises(RegistryUnavailable):
            await client.lookup_by_name("alice")
    with pytest.raises(ValueError, match="public key"):
        await GrpcRegistry.connect(
            "127.0.0.1:1", peer_token=PEER_TOKEN, registry_public_key="not-a-key"
        )


async def test_connecting_to_an_unreachable_registry_without_a_key_is_registry_unavailable():
    with pytest.raises(RegistryUnavailable):
        await GrpcRegistry.connect(f"127.0.0.1:{free_port()}", peer_token=PEER_TOKEN, deadline=0.5)


async def test_a_call_without_the_peer_token_is_registry_unavailable_and_registers_nothing():
    backend = MemoryRegistry()
    async with served_registry(backend) as server:
        with pytest.raises(RegistryUnavailable, match="UNAUTHENTICATED"):
            await GrpcRegistry.connect(server.address, peer_token="w" * 40, deadline=2.0)
        async with await GrpcRegistry.connect(
            server.address,
            peer_token="wrong-token-" + "q" * 32,
            registry_public_key=backend.registry_public_key(),
        ) as client:
            with pytest.raises(RegistryUnavailable, match="UNAUTHENTICATED"):
                await client.register("alice", key())
        assert await backend.list() == ()


@pytest.mark.parametrize("version", [None, "harness/2"])
async def test_a_call_of_another_version_is_failed_precondition_version_mismatch(version):
    async with served_registry(MemoryRegistry()) as server:
        metadata = [("authorization", f"Bearer {PEER_TOKEN}")]
        if version is not None:
            metadata.append(("harness-version", version))
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = registry_pb2_grpc.RegistryServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.GetRegistryKey(registry_pb2.GetRegistryKeyRequest(), metadata=metadata)
    assert raised.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "VERSION_MISMATCH" in str(raised.value.trailing_metadata())


class _OtherVersionRegistry(registry_pb2_grpc.RegistryServiceServicer):
    """A Registry answering as `harness/2` would: refusing, or announcing its version."""

    def __init__(self, *, refuse: bool) -> None:
        self.refuse = refuse

    async def GetRegistryKey(self, request, context):
        if self.refuse:
            await context.abort_with_status(version_mismatch_status("harness/1"))
        await context.send_initial_metadata((("harness-version", "harness/2"),))
        return registry_pb2.GetRegistryKeyResponse(public_key=bytes(32))


@pytest.mark.parametrize("refuse", [True, False])
async def test_a_registry_of_another_version_raises_registry_version_mismatch(refuse):
    server = grpc.aio.server()
    registry_pb2_grpc.add_RegistryServiceServicer_to_server(
        _OtherVersionRegistry(refuse=refuse),  # type: ignore[abstract]  # one method is enough
        server,
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        with pytest.raises(RegistryVersionMismatch):
            await GrpcRegistry.connect(f"127.0.0.1:{port}", peer_token=PEER_TOKEN)
    finally:
        await server.stop(None)


def test_a_card_of_another_version_is_a_version_mismatch_and_garbage_is_unavailable():
    registry_key = SigningKey.generate()
    card = sign_card(
        registry_key,
        AgentCard(
            agent_id=RandomId.AGENT.mint(),
            agent_name="alice",
            public_key=key(),
            issued_at="2026-05-06T07:08:09Z",
        ),
    )
    data = p.encode(card)
    assert decode_card(data) == card
    with pytest.raises(RegistryVersionMismatch):
        decode_card(data.replace(b'"harness/1"', b'"harness/2"', 1))
    with pytest.raises(RegistryUnavailable):
        decode_card(b"{}")


async def test_the_daemons_registry_client_resolves_and_verifies_cards_through_grpc():
    backend = MemoryRegistry()
    async with (
        served_registry(backend) as server,
        await GrpcRegistry.connect(server.address, peer_token=PEER_TOKEN) as remote,
    ):
        client = RegistryClient(remote, registry_public_key=remote.registry_public_key())
        alice = await registered(client, "alice")  # type: ignore[arg-type]
        assert await client.lookup_by_name("alice") == Found(card=alice)
        assert await client.lookup_by_id(alice.card.agent_id) == Found(card=alice)
        assert await client.lookup_by_name("nobody") == NotFound()
        await client.close()


async def test_a_card_signed_by_another_key_fails_verification_in_the_daemons_client():
    backend = MemoryRegistry()
    async with (
        served_registry(backend) as server,
        await GrpcRegistry.connect(
            server.address,
            peer_token=PEER_TOKEN,
            registry_public_key=SigningKey.generate().public_key_b64,
        ) as remote,
    ):
        await backend.register("alice", key())
        client = RegistryClient(remote, registry_public_key=remote.registry_public_key())
        with pytest.raises(RegistryUnavailable, match="verification"):
            await client.lookup_by_name("alice")
        await client.close()


async def test_a_closed_client_raises_registry_unavailable():
    async with served_registry(MemoryRegistry()) as server:
        client = await GrpcRegistry.connect(server.address, peer_token=PEER_TOKEN)
        await client.close()
        await client.close()
        with pytest.raises(RegistryUnavailable, match="closed"):
            await client.lookup_by_name("alice")

"""Forwarding an agent's calls to its home (cluster.md §4.1), between real gateways.

The home is a real embedded gateway; the forwarder is a second real gateway's server with the
`ForwardingInterceptor` in front, told by a routes table where each token's agent lives. The
cluster's own routes (partitions and leases) are tested with the cluster; here the seam is
given by the test so each path of the forwarder is taken on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

import grpc
import harness_client
import pytest
from harness_contract import wire
from harness_contract._gen.harness.v1 import endpoint_pb2, endpoint_pb2_grpc
from harness_contract.errors import (
    AuthenticationError,
    SendError,
    SendErrorReason,
    UnavailableError,
    UnavailableReason,
)
from harness_contract.values import MessageInput

from gateway.cluster.routing import HERE, Placement, Remote
from gateway.cluster_parts import NAMED_METHODS
from gateway.endpoint.api import GatewayCore
from gateway.rpc.forward import (
    HOME_KEY,
    ForwardingInterceptor,
    ForwardObserver,
    HomeChannels,
)
from gateway.rpc.peer import open_peer_channel
from gateway.rpc.server import ENDPOINT_SERVICE, RpcServer, build_server
from gateway.testing import RunningGateway, run_gateway
from gateway.testing_servers import free_port

BOUND = 10.0
PEER_TOKEN = "peer-token-for-the-forwarding-tests"
METHODS = frozenset(
    f"/{ENDPOINT_SERVICE}/{name}"
    for name in ("Send", "Messages", "Acknowledge", "ReadSend", "ParseMessageText")
)


@dataclass
class Routes:
    """A routes table the test sets: token → placement, and the (partition, epoch) held."""

    homes: dict[str, Placement] = field(default_factory=dict)
    names: dict[str, Placement] = field(default_factory=dict)
    after_refresh: dict[str, Placement] = field(default_factory=dict)
    held: set[tuple[int, int]] = field(default_factory=set)
    refreshes: int = 0

    async def home_of(self, token: str) -> Placement:
        return self.homes.get(token, HERE)

    async def home_of_name(self, name: str) -> Placement:
        return self.names.get(name, HERE)

    def holds(self, partition: int, epoch: int) -> bool:
        return (partition, epoch) in self.held

    def refresh(self) -> None:
        self.refreshes += 1
        self.homes.update(self.after_refresh)


@dataclass
class Counted(ForwardObserver):
    outcomes: list[str] = field(default_factory=list)

    def on_forward(self, method: str, outcome: str) -> None:
        self.outcomes.append(outcome)


@contextlib.asynccontextmanager
async def interceptor_server(
    running: RunningGateway, routes: Routes, observer: ForwardObserver | None = None
) -> AsyncIterator[RpcServer]:
    """A second server over `running`'s core with the forwarding interceptor in front."""
    channels = HomeChannels(lambda address: open_peer_channel(address))
    core = GatewayCore(
        lifecycle=running.gateway,
        agents=running.gateway.components.agents,
        management=running.gateway.components.management,
        on_auth_refused=lambda failure: None,
    )
    server = await build_server(
        core,
        replace(running.settings, listen="127.0.0.1:0", health_listen=None),
        interceptors=[
            ForwardingInterceptor(
                routes=routes,
                channels=channels,
                peer_token=PEER_TOKEN,
                methods=METHODS,
                named=NAMED_METHODS,
                observer=observer,
            )
        ],
    )
    await server.start()
    await server.set_serving()
    try:
        yield server
    finally:
        await server.stop(None)
        await channels.close()


@contextlib.asynccontextmanager
async def stub(
    address: str,
) -> AsyncIterator[endpoint_pb2_grpc.HarnessEndpointServiceAsyncStub]:
    channel = grpc.aio.insecure_channel(address)
    try:
        yield endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
    finally:
        await channel.close()


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def send_request(to: str, text: str) -> endpoint_pb2.SendRequest:
    return endpoint_pb2.SendRequest(input=wire.send_input_to_proto(MessageInput(to=to, text=text)))


async def failure_of(call: object) -> harness_client.HarnessError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call  # type: ignore[misc]
    return harness_client.decode_status(raised.value)


@pytest.fixture
async def home_and_front() -> AsyncIterator[tuple[RunningGateway, RunningGateway]]:
    async with run_gateway() as home, run_gateway() as front:
        yield home, front


async def test_a_send_for_an_agent_homed_elsewhere_is_answered_by_its_home_with_the_home_named(
    home_and_front,
):
    home, front = home_and_front
    alice = await home.register("alice")
    bob = await home.register("bob")
    routes = Routes(homes={alice: Remote(address=home.address, partition=7, epoch=1)})
    observer = Counted()
    async with (
        interceptor_server(front, routes, observer) as forwarder,
        stub(forwarder.address) as endpoint,
    ):
        call = endpoint.Send(send_request("agent:bob", "via the front"), metadata=bearer(alice))
        response = await asyncio.wait_for(call, BOUND)
        initial = await call.initial_metadata()
        async with stub(home.address) as direct:
            stream = direct.Messages(endpoint_pb2.MessagesRequest(), metadata=bearer(bob))
            first = await asyncio.wait_for(stream.read(), BOUND)
            stream.cancel()
    result = wire.send_result_from_proto(response.result)
    assert result.post_ids
    assert (HOME_KEY, home.address) in tuple(initial)
    assert observer.outcomes == ["ok"]
    # Certified and delivered at the home: the front hosts neither agent.
    assert "via the front" in str(first)
    assert not front.gateway.components.hosted.has_name("alice")


async def test_a_forwarded_stream_delivers_the_homes_items_and_acknowledgments_reach_the_home(
    home_and_front,
):
    home, front = home_and_front
    alice = await home.register("alice")
    bob = await home.register("bob")
    routes = Routes(homes={bob: Remote(address=home.address, partition=3, epoch=1)})
    async with (
        interceptor_server(front, routes) as forwarder,
        stub(forwarder.address) as endpoint,
        stub(home.address) as direct,
    ):
        await asyncio.wait_for(
            direct.Send(
                send_request("agent:bob", "hello through the front"), metadata=bearer(alice)
            ),
            BOUND,
        )
        stream = endpoint.Messages(endpoint_pb2.MessagesRequest(), metadata=bearer(bob))
        initial = dict(await asyncio.wait_for(stream.initial_metadata(), BOUND))
        first = await asyncio.wait_for(stream.read(), BOUND)
        assert isinstance(first, endpoint_pb2.MessagesResponse)
        token = first.delivery.delivery_token
        acknowledged = await asyncio.wait_for(
            endpoint.Acknowledge(
                endpoint_pb2.AcknowledgeRequest(delivery_tokens=[token]), metadata=bearer(bob)
            ),
            BOUND,
        )
        stream.cancel()
    assert initial.get("harness-stream") == "open"
    assert initial.get(HOME_KEY) == home.address
    assert token
    assert [result.WhichOneof("result") for result in acknowledged.results] == ["ok"]


async def test_the_homes_typed_refusal_reaches_the_caller_unchanged(home_and_front):
    home, front = home_and_front
    alice = await home.register("alice")
    routes = Routes(homes={alice: Remote(address=home.address, partition=1, epoch=1)})
    async with interceptor_server(front, routes) as forwarder, stub(forwarder.address) as endpoint:
        failure = await failure_of(
            endpoint.Send(send_request("not an address", "x"), metadata=bearer(alice))
        )
        await home.gateway.components.agents.revoke_token("alice")
        refused = await failure_of(
            endpoint.ReadSend(
                endpoint_pb2.ReadSendRequest(idempotency_key="k"), metadata=bearer(alice)
            )
        )
    assert isinstance(failure, SendError)
    assert failure.reason is SendErrorReason.INVALID_ADDRESS
    assert isinstance(refused, AuthenticationError)
    assert refused.reason == "revoked"


async def test_a_home_that_no_longer_holds_the_route_refuses_and_the_forwarder_tries_the_new_one(
    home_and_front,
):
    home, front = home_and_front
    alice = await home.register("alice")
    await home.register("bob")
    home_routes = Routes(held={(5, 2)})
    async with interceptor_server(home, home_routes) as guarded:
        routes = Routes(
            homes={alice: Remote(address=guarded.address, partition=5, epoch=1)},
            after_refresh={alice: Remote(address=guarded.address, partition=5, epoch=2)},
        )
        observer = Counted()
        async with (
            interceptor_server(front, routes, observer) as forwarder,
            stub(forwarder.address) as endpoint,
        ):
            await asyncio.wait_for(
                endpoint.Send(send_request("agent:bob", "after a move"), metadata=bearer(alice)),
                BOUND,
            )
    assert observer.outcomes == ["not-owner", "ok"]
    assert routes.refreshes == 1


async def test_a_routed_call_without_the_peer_token_is_refused_before_any_effect(home_and_front):
    home, _front = home_and_front
    alice = await home.register("alice")
    await home.register("bob")
    async with (
        interceptor_server(home, Routes(held={(5, 1)})) as guarded,
        stub(guarded.address) as endpoint,
    ):
        failure = await failure_of(
            endpoint.Send(
                send_request("agent:bob", "forged route"),
                metadata=(*bearer(alice), ("harness-route", "5/1")),
            )
        )
    assert isinstance(failure, UnavailableError)
    assert failure.reason == UnavailableReason.NOT_OWNER
    assert home.gateway.components.hosted.runtime("bob") is not None


async def test_a_home_that_cannot_be_reached_is_unavailable_home_unreachable(home_and_front):
    home, front = home_and_front
    alice = await home.register("alice")
    nowhere = f"127.0.0.1:{free_port()}"
    routes = Routes(homes={alice: Remote(address=nowhere, partition=1, epoch=1)})
    async with interceptor_server(front, routes) as forwarder, stub(forwarder.address) as endpoint:
        failure = await failure_of(
            endpoint.Send(send_request("agent:bob", "x"), metadata=bearer(alice), timeout=BOUND)
        )
    assert isinstance(failure, UnavailableError)
    assert failure.reason == UnavailableReason.HOME_UNREACHABLE


async def test_a_call_for_an_agent_homed_here_is_answered_here(home_and_front):
    home, _front = home_and_front
    alice = await home.register("alice")
    await home.register("bob")
    observer = Counted()
    async with (
        interceptor_server(home, Routes(), observer) as server,
        stub(server.address) as endpoint,
    ):
        call = endpoint.Send(send_request("agent:bob", "local"), metadata=bearer(alice))
        await asyncio.wait_for(call, BOUND)
        initial = dict(await call.initial_metadata())
    assert observer.outcomes == []
    assert HOME_KEY not in initial


@contextlib.asynccontextmanager
async def silent_home(arrived: asyncio.Event) -> AsyncIterator[tuple[str, grpc.aio.Server]]:
    """A home that takes a Send and never answers it, until the test stops it."""

    async def hang(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        arrived.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                ENDPOINT_SERVICE, {"Send": grpc.unary_unary_rpc_method_handler(hang)}
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}", server
    finally:
        await server.stop(None)


async def test_a_send_cut_after_it_reached_the_home_answers_outcome_unknown_never_unavailable(
    home_and_front,
):
    home, front = home_and_front
    alice = await home.register("alice")
    arrived = asyncio.Event()
    async with silent_home(arrived) as (address, server):
        routes = Routes(homes={alice: Remote(address=address, partition=1, epoch=1)})
        async with (
            interceptor_server(front, routes) as forwarder,
            stub(forwarder.address) as endpoint,
        ):
            call = endpoint.Send(send_request("agent:bob", "x"), metadata=bearer(alice))
            await asyncio.wait_for(arrived.wait(), BOUND)
            await server.stop(0)
            failure = await failure_of(call)
    assert isinstance(failure, SendError)
    assert failure.reason is SendErrorReason.OUTCOME_UNKNOWN


async def test_a_management_call_about_an_agent_is_answered_by_that_agents_home(home_and_front):
    home, front = home_and_front
    old_token = await home.register("alice")
    routes = Routes(names={"alice": Remote(address=home.address, partition=2, epoch=1)})
    observer = Counted()
    async with interceptor_server(front, routes, observer) as forwarder:
        management = await harness_client.connect_management(
            forwarder.address, admin_token=home.admin_token
        )
        async with management:
            new_token = await management.rotate_token("alice")
    assert observer.outcomes == ["ok"]
    async with stub(home.address) as direct:
        refused = await failure_of(
            direct.ReadSend(
                endpoint_pb2.ReadSendRequest(idempotency_key="k"), metadata=bearer(old_token)
            )
        )
        answer = await direct.ReadSend(
            endpoint_pb2.ReadSendRequest(idempotency_key="k"), metadata=bearer(new_token)
        )
    assert isinstance(refused, AuthenticationError)
    assert answer is not None

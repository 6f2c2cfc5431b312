"""The Python client follows a cluster replica's home hint (`harness-home`, cluster.md §4).

No cluster is started: a real embedded gateway is the agent's home, served on a second port
(the home's own address), and a front server over the same core runs the real
`ForwardingInterceptor`, told by the test's routes table that the agent is homed at that
address, as `tests/integration/rpc/test_forward.py` does. The client dials the front; the
forwarded answers name the home; later calls go to the home directly, and back through the
front once the home stops answering.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Final

import harness_client
from harness_client import ConnectionState, MessageInput, MulticastItem, text_of

from gateway.cluster.routing import HERE, Placement, Remote
from gateway.endpoint.api import GatewayCore
from gateway.rpc.forward import ForwardingInterceptor, ForwardObserver, HomeChannels
from gateway.rpc.peer import open_peer_channel
from gateway.rpc.server import ENDPOINT_SERVICE, RpcServer, build_server
from gateway.testing import RunningGateway, run_gateway
from tests.support import eventually

BOUND: Final = 20.0
"""Seconds any single wait in these tests may take before it fails."""

PEER_TOKEN: Final = "peer-token-for-the-home-hint-tests"
FORWARDED: Final = frozenset(
    f"/{ENDPOINT_SERVICE}/{name}"
    for name in ("Send", "Messages", "Acknowledge", "ReadSend", "ParseMessageText")
)


@dataclass
class Routes:
    """The front's routes table (`HomeRoutes`): token → where its agent is answered."""

    homes: dict[str, Placement] = field(default_factory=dict)

    async def home_of(self, token: str) -> Placement:
        return self.homes.get(token, HERE)

    async def home_of_name(self, name: str) -> Placement:
        return HERE

    def holds(self, partition: int, epoch: int) -> bool:
        return True

    def refresh(self) -> None:
        pass


@dataclass
class Forwards(ForwardObserver):
    """The methods the front forwarded, in order."""

    methods: list[str] = field(default_factory=list)

    def on_forward(self, method: str, outcome: str) -> None:
        self.methods.append(method.rsplit("/", 1)[-1])


def core_of(running: RunningGateway) -> GatewayCore:
    return GatewayCore(
        lifecycle=running.gateway,
        agents=running.gateway.components.agents,
        management=running.gateway.components.management,
        on_auth_refused=lambda failure: None,
    )


@contextlib.asynccontextmanager
async def server_over(
    running: RunningGateway, *interceptors: ForwardingInterceptor
) -> AsyncIterator[RpcServer]:
    """Another server over `running`'s core, on a port of its own."""
    server = await build_server(
        core_of(running),
        replace(running.settings, listen="127.0.0.1:0", health_listen=None),
        interceptors=list(interceptors),
    )
    await server.start()
    await server.set_serving()
    try:
        yield server
    finally:
        await server.stop(None)


@contextlib.asynccontextmanager
async def front_of(
    running: RunningGateway, routes: Routes, forwards: Forwards
) -> AsyncIterator[RpcServer]:
    """A front server that forwards the agents `routes` names to their homes."""
    channels = HomeChannels(lambda address: open_peer_channel(address))
    forwarding = ForwardingInterceptor(
        routes=routes,
        channels=channels,
        peer_token=PEER_TOKEN,
        methods=FORWARDED,
        observer=forwards,
    )
    try:
        async with server_over(running, forwarding) as front:
            yield front
    finally:
        await channels.close()


async def follows(endpoint: harness_client.Endpoint, address: str) -> None:
    """Wait until the endpoint's calls go to `address`: the hinted home is dialled in the
    background and followed once it connected."""

    async def home() -> str | None:
        return endpoint._route.home_address

    await eventually(home, lambda current: current == address, within=BOUND)


async def texts_of(endpoint: harness_client.Endpoint, count: int) -> list[str]:
    texts = []
    deliveries = endpoint.messages()
    try:
        for _ in range(count):
            delivery = await asyncio.wait_for(anext(deliveries), BOUND)
            assert isinstance(delivery.item, MulticastItem)
            texts.append(text_of(delivery.item.message.content))
            await delivery.acknowledge()
    finally:
        await deliveries.aclose()
    return texts


async def test_calls_go_to_the_home_a_forwarded_answer_names_and_back_to_the_front_when_it_stops():
    async with run_gateway() as gw:
        alice_token, bob_token = await gw.register("alice"), await gw.register("bob")
        forwards = Forwards()
        async with server_over(gw) as home:
            routes = Routes(homes={alice_token: Remote(address=home.address, partition=1, epoch=1)})
            async with front_of(gw, routes, forwards) as front:
                async with await harness_client.connect(front.address, token=alice_token) as alice:
                    # connect's token check went through the front, which named the home.
                    assert forwards.methods == ["ParseMessageText"]
                    await follows(alice, home.address)
                    await alice.send(MessageInput(to="agent:bob", text="one"))
                    await alice.send(MessageInput(to="agent:bob", text="two"))
                    assert await alice.read_send("never-used") == harness_client.SendAbsent()
                    # Straight to the home: the front forwarded nothing more.
                    assert forwards.methods == ["ParseMessageText"]

                    await home.stop(None)
                    # The home is gone: the front answers alice itself from now on.
                    routes.homes.clear()
                    await alice.send(MessageInput(to="agent:bob", text="three"))
                    assert forwards.methods == ["ParseMessageText"]
                async with await harness_client.connect(gw.address, token=bob_token) as bob:
                    assert await texts_of(bob, 3) == ["one", "two", "three"]


async def test_a_listening_loop_reconnects_to_the_home_its_forwarded_stream_named():
    async with run_gateway() as gw:
        alice_token, bob_token = await gw.register("alice"), await gw.register("bob")
        forwards = Forwards()
        async with server_over(gw) as home:
            routes = Routes(homes={bob_token: Remote(address=home.address, partition=2, epoch=1)})
            async with (
                front_of(gw, routes, forwards) as front,
                await harness_client.connect(gw.address, token=alice_token) as alice,
            ):
                # A bob whose connect check was answered by the front without a hint (bob was
                # homed there then), so his first stream goes through the front.
                homes, routes.homes = routes.homes, {}
                bob = await harness_client.connect(front.address, token=bob_token)
                routes.homes = homes
                async with bob:
                    deliveries = bob.messages()
                    try:
                        await alice.send(MessageInput(to="agent:bob", text="via the front"))
                        first = await asyncio.wait_for(anext(deliveries), BOUND)
                        await first.acknowledge()
                        await follows(bob, home.address)
                    finally:
                        await deliveries.aclose()
                    # Only the forwarded stream named the home (bob's connect answer did not):
                    # with the front gone, the next stream reaches bob only at the home.
                    await front.stop(None)
                    await alice.send(MessageInput(to="agent:bob", text="at the home"))
                    assert await texts_of(bob, 1) == ["at the home"]


async def test_a_listening_loop_on_a_home_that_stops_goes_back_through_the_front():
    async with run_gateway() as gw:
        alice_token, bob_token = await gw.register("alice"), await gw.register("bob")
        async with server_over(gw) as home:
            routes = Routes(homes={bob_token: Remote(address=home.address, partition=4, epoch=1)})
            async with (
                front_of(gw, routes, Forwards()) as front,
                await harness_client.connect(gw.address, token=alice_token) as alice,
                await harness_client.connect(front.address, token=bob_token) as bob,
            ):
                await follows(bob, home.address)
                states: list[ConnectionState] = []
                bob.on_connection_state(states.append)
                deliveries = bob.messages()
                try:
                    await alice.send(MessageInput(to="agent:bob", text="at the home"))
                    first = await asyncio.wait_for(anext(deliveries), BOUND)
                    await first.acknowledge()
                    await home.stop(None)
                    routes.homes.clear()  # the front answers bob itself from now on
                    await alice.send(MessageInput(to="agent:bob", text="through the front"))
                    second = await asyncio.wait_for(anext(deliveries), BOUND)
                finally:
                    await deliveries.aclose()
        assert isinstance(second.item, MulticastItem)
        assert text_of(second.item.message.content) == "through the front"
        assert states[:3] == [
            ConnectionState.READY,
            ConnectionState.RECONNECTING,
            ConnectionState.READY,
        ]

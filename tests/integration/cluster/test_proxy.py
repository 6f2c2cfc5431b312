"""The round-robin proxy in front of two real gateways, as a Service in front of replicas:
each new gRPC channel is a new connection and lands on the next gateway, a stopped gateway is
skipped, and a channel open when its gateway leaves the list keeps using it until it closes.

Both gateways read one admin token file (cluster replicas share it); each hosts a different
agent, so the agents a channel lists say which gateway it reached."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import harness_client
from harness_client import ManagementClient, MessageInput, MulticastItem

from gateway.settings import Settings
from gateway.testing import RunningGateway, run_gateway
from gateway.testing_proxy import RoundRobinProxy

BOUND = 20.0
"""Seconds a channel may take to connect through the proxy before the test fails."""

OWN_CONNECTION = (("grpc.use_local_subchannel_pool", 1),)
"""Channel option that keeps gRPC from sharing one process-wide connection between channels
to the same target: each channel then opens its own, as separate clients would."""


@contextlib.asynccontextmanager
async def two_gateways(tmp_path: Path) -> AsyncIterator[tuple[RunningGateway, RunningGateway]]:
    """Two real gateways sharing one admin token file, hosting `alice` and `bob`."""
    token_file = tmp_path / "admin-token"
    token_file.write_text("hadm_" + secrets.token_urlsafe(32) + "\n", encoding="utf-8")
    token_file.chmod(0o600)
    settings = replace(Settings(), admin_token_file=token_file)
    async with run_gateway(settings) as first, run_gateway(settings) as second:
        await first.register("alice")
        await second.register("bob")
        yield first, second


@contextlib.asynccontextmanager
async def channel_through(
    proxy: RoundRobinProxy, admin_token: str
) -> AsyncIterator[ManagementClient]:
    """A management client on a channel (so a connection) of its own through the proxy."""
    client = await harness_client.connect_management(
        proxy.address, admin_token=admin_token, connect_timeout=BOUND, options=OWN_CONNECTION
    )
    async with client:
        yield client


async def hosted_names(client: ManagementClient) -> list[str]:
    """The agents the gateway behind this channel hosts."""
    agents, _ = await client.list_agents()
    return [agent.name for agent in agents]


async def test_successive_new_channels_land_on_both_gateways_in_turn(tmp_path):
    async with (
        two_gateways(tmp_path) as (first, second),
        RoundRobinProxy([first.address, second.address]) as proxy,
    ):
        reached = []
        for _ in range(4):
            async with channel_through(proxy, first.admin_token) as client:
                reached.append(await hosted_names(client))
        assert reached == [["alice"], ["bob"], ["alice"], ["bob"]]
        assert proxy.connections == {first.address: 2, second.address: 2}


async def test_a_stopped_gateway_is_skipped_and_new_channels_reach_the_one_still_serving(
    tmp_path,
):
    async with (
        two_gateways(tmp_path) as (first, second),
        RoundRobinProxy([first.address, second.address]) as proxy,
    ):
        await second.gateway.shutdown(skip_waits=True)
        for _ in range(3):
            async with channel_through(proxy, first.admin_token) as client:
                assert await hosted_names(client) == ["alice"]
        assert proxy.connections[second.address] == 0
        assert proxy.refusals[second.address] >= 1
        assert proxy.connections[first.address] >= 3


async def test_a_channel_open_when_its_gateway_leaves_the_list_keeps_it_and_new_channels_go_to_the_new_list(
    tmp_path,
):
    async with (
        two_gateways(tmp_path) as (first, second),
        RoundRobinProxy([first.address]) as proxy,
    ):
        async with channel_through(proxy, first.admin_token) as kept:
            assert await hosted_names(kept) == ["alice"]
            proxy.set_backends([second.address])
            # Like kube-proxy: the established connection stays with its backend.
            assert await hosted_names(kept) == ["alice"]
            assert proxy.open_connections(first.address) == 1
            for _ in range(2):
                async with channel_through(proxy, first.admin_token) as fresh:
                    assert await hosted_names(fresh) == ["bob"]
            assert await hosted_names(kept) == ["alice"]
        # When the kept connection ends is the gRPC client's business (grpc.aio releases a
        # closed channel's socket when the channel is collected); the proxy's side of a close
        # is test_proxy_pipes.py's.
        assert proxy.connections == {first.address: 1, second.address: 2}


async def test_agents_send_and_stream_through_the_proxy_as_through_a_service():
    async with run_gateway() as gateway, RoundRobinProxy([gateway.address]) as proxy:
        alice_token = await gateway.register("alice")
        bob_token = await gateway.register("bob")
        async with (
            await harness_client.connect(
                proxy.address, token=alice_token, options=OWN_CONNECTION
            ) as alice,
            await harness_client.connect(
                proxy.address, token=bob_token, options=OWN_CONNECTION
            ) as bob,
        ):
            stream = bob.messages()
            try:
                for text in ("one", "two"):
                    await alice.send(MessageInput(to="agent:bob", text=text))
                received = [await asyncio.wait_for(anext(stream), BOUND) for _ in range(2)]
            finally:
                await stream.aclose()
        texts = []
        for delivery in received:
            assert isinstance(delivery.item, MulticastItem)
            texts.append(harness_client.text_of(delivery.item.message.content))
        assert texts == ["one", "two"]
        assert proxy.connections == {gateway.address: 2}

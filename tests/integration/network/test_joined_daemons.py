"""Daemons on different processes form one network through a standalone Router and
Registry: real `harness-gateway registry`, `router` and `serve` processes
(`gateway.testing_network`), agents registered through each daemon's management API."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Final

import harness_client
import pytest
from harness_client import (
    DirectMessage,
    Endpoint,
    GroupMessage,
    MessageInput,
    MulticastItem,
    TextPart,
)

from gateway.testing_network import NetworkProcess, RunningNetwork, run_network
from tests.e2e.network_support import register
from tests.integration.network.support import BOUND, message_of, next_delivery

pytestmark = pytest.mark.e2e


@contextlib.asynccontextmanager
async def alice_and_bob(network: RunningNetwork) -> AsyncIterator[tuple[Endpoint, Endpoint]]:
    """alice registered and connected on the first daemon, bob on the second."""
    first, second = network.daemons
    alice_token = await register(first, "alice")
    bob_token = await register(second, "bob")
    async with (
        await harness_client.connect(first.address, token=alice_token) as alice,
        await harness_client.connect(second.address, token=bob_token) as bob,
    ):
        yield alice, bob


def explain(network: RunningNetwork) -> str:
    return "\n" + network.logs()


@pytest.mark.timeout(120)
async def test_a_direct_multicast_certifies_across_two_daemons_through_the_standalone_router():
    async with run_network(daemons=2) as network, alice_and_bob(network) as (alice, bob):
        try:
            result = await asyncio.wait_for(
                alice.send(MessageInput(to="agent:bob", text="hello across processes")),
                BOUND,
            )
            deliveries = bob.messages()
            delivery = await next_delivery(deliveries)
        except BaseException as error:
            raise AssertionError(f"{error!r}{explain(network)}") from error
        item = delivery.item
        assert isinstance(item, MulticastItem)
        assert isinstance(item.message, DirectMessage)
        assert item.message.sender == "agent:alice"
        assert item.message.content == (TextPart(text="hello across processes"),)
        assert result.operation_id is None
        await delivery.acknowledge()
        await deliveries.aclose()


@pytest.mark.timeout(120)
async def test_a_group_of_three_on_three_daemons_certifies_and_every_member_receives_it():
    async with run_network(daemons=3) as network:
        names = ("alice", "bob", "carol")
        tokens = {
            name: await register(daemon, name)
            for name, daemon in zip(names, network.daemons, strict=True)
        }
        daemons = dict(zip(names, network.daemons, strict=True))
        async with (
            await harness_client.connect(daemons["alice"].address, token=tokens["alice"]) as alice,
            await harness_client.connect(daemons["bob"].address, token=tokens["bob"]) as bob,
            await harness_client.connect(daemons["carol"].address, token=tokens["carol"]) as carol,
        ):
            try:
                await asyncio.wait_for(
                    alice.send(MessageInput(to="group:bob,carol", text="hi all")), BOUND
                )
                received = [await next_delivery(member.messages()) for member in (bob, carol)]
            except BaseException as error:
                raise AssertionError(f"{error!r}{explain(network)}") from error
            for delivery in received:
                message = message_of(delivery)
                assert isinstance(message, GroupMessage)
                assert message.address == "group:alice,bob,carol"
                assert message.sender == "agent:alice"
                assert message.members == ("agent:alice", "agent:bob", "agent:carol")
                await delivery.acknowledge()


@pytest.mark.timeout(120)
async def test_conversations_keep_certifying_after_the_router_process_restarts():
    async with run_network(daemons=2) as network, alice_and_bob(network) as (alice, bob):
        deliveries = bob.messages()
        try:
            await asyncio.wait_for(alice.send(MessageInput(to="agent:bob", text="one")), BOUND)
            before = await next_delivery(deliveries)
            await before.acknowledge()
            instance = network.router.ready_line["instance_id"]
            await network.router.stop()
            await network.router.start()
            assert network.router.ready_line["instance_id"] != instance
            # Both daemons recover on the new instance; the conversation re-anchors.
            await asyncio.wait_for(alice.send(MessageInput(to="agent:bob", text="two")), BOUND * 2)
            after = await next_delivery(deliveries)
        except BaseException as error:
            raise AssertionError(f"{error!r}{explain(network)}") from error
        assert message_of(after).content == (TextPart(text="two"),)
        assert message_of(after).post_id != message_of(before).post_id
        await after.acknowledge()
        await deliveries.aclose()


@pytest.mark.timeout(120)
async def test_the_registry_process_keeps_its_cards_and_key_across_a_restart():
    async with run_network(daemons=2) as network:
        first, second = network.daemons
        alice_token = await register(first, "alice")
        await network.registry.stop()
        await network.registry.start()
        # The daemons pinned the key at start: cards minted after the restart still verify.
        carol_token = await register(second, "carol")
        async with (
            await harness_client.connect(first.address, token=alice_token) as alice,
            await harness_client.connect(second.address, token=carol_token) as carol,
        ):
            try:
                await asyncio.wait_for(
                    alice.send(MessageInput(to="agent:carol", text="still here")), BOUND
                )
                delivery = await next_delivery(carol.messages())
            except BaseException as error:
                raise AssertionError(f"{error!r}{explain(network)}") from error
            assert message_of(delivery).sender == "agent:alice"


def _store_files(daemon: NetworkProcess) -> dict[str, tuple[int, int]]:
    assert daemon.data_dir is not None
    return {
        path.name: (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(daemon.data_dir.iterdir())
        if path.name.startswith("gateway.sqlite3")
    }


@pytest.mark.timeout(120)
async def test_an_idle_network_writes_nothing_and_exchanges_no_envelopes():
    async with run_network(daemons=2) as network:
        async with alice_and_bob(network) as (alice, bob):
            await asyncio.wait_for(alice.send(MessageInput(to="agent:bob", text="once")), BOUND)
            deliveries = bob.messages()
            await (await next_delivery(deliveries)).acknowledge()
            await deliveries.aclose()
        # Settled: the last votes and the acknowledgment are committed within this window.
        await asyncio.sleep(IDLE_SETTLE)
        before = [_store_files(daemon) for daemon in network.daemons]
        await asyncio.sleep(IDLE_WINDOW)  # idle: no envelope may arrive, so no row is written
        assert [_store_files(daemon) for daemon in network.daemons] == before


IDLE_SETTLE: Final = 2.0
"""Seconds after the last call before the idle window starts."""
IDLE_WINDOW: Final = 3.0
"""Seconds of the idle window (longer than the tick interval and the batched acks)."""


@pytest.mark.timeout(120)
async def test_with_the_router_stopped_local_conversations_keep_certifying_and_crossing_ones_wait():
    async with run_network(daemons=2) as network:
        first, second = network.daemons
        tokens = {name: await register(first, name) for name in ("alice", "carol")}
        await register(second, "bob")
        async with await harness_client.connect(first.address, token=tokens["alice"]) as alice:
            await asyncio.wait_for(alice.send(MessageInput(to="agent:bob", text="before")), BOUND)
            assert await network.router.stop() == 0
            # carol is hosted with alice: their conversation is local and needs no Router.
            await asyncio.wait_for(alice.send(MessageInput(to="agent:carol", text="local")), BOUND)
            with pytest.raises(harness_client.SendError) as crossing:
                await alice.send(MessageInput(to="agent:bob", text="crossing"), deadline=3.0)
            assert crossing.value.reason in {
                "network-unavailable",
                "delivery-pending",
                "outcome-unknown",
            }
        async with await harness_client.connect(first.address, token=tokens["carol"]) as carol:
            deliveries = carol.messages()
            delivery = await next_delivery(deliveries)
            assert message_of(delivery).content == (TextPart(text="local"),)
            await delivery.acknowledge()
            await deliveries.aclose()

"""Recovery across processes (issue 5): a Router restart during traffic loses and
duplicates no post; a daemon killed with SIGKILL certifies its pending intents under their
original PostIds and replays unacknowledged deliveries with the same tokens."""

from __future__ import annotations

import asyncio
from typing import Final

import harness_client
import pytest
from harness_client import HarnessError, MessageInput, MulticastItem

from gateway.testing_network import NetworkProcess, run_network
from tests.e2e.support import certified_records, intents, open_intents
from tests.support import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

BOUND: Final = 60.0
SENDS: Final = 24


async def register(daemon: NetworkProcess, name: str) -> tuple[str, str]:
    """(token, AgentId) of a new agent on `daemon`."""
    async with await harness_client.connect_management(
        daemon.address, admin_token=daemon.admin_token
    ) as operator:
        registered = await operator.register_agent(name)
    return registered.token, registered.agent_id


async def send_all(address: str, token: str, to: str, count: int) -> list[str]:
    """`count` concurrent sends; each one's outcome (`ok` or the error's reason)."""
    async with await harness_client.connect(address, token=token) as endpoint:

        async def one(index: int) -> str:
            try:
                await endpoint.send(MessageInput(to=to, text=f"m{index}"))
            except HarnessError as error:
                return str(getattr(error, "reason", type(error).__name__))
            return "ok"

        return list(await asyncio.gather(*(one(index) for index in range(count))))


async def deliveries_of(address: str, token: str, count: int) -> list[tuple[str, str]]:
    """(token, PostId) of the next `count` deliveries, acknowledged."""
    async with await harness_client.connect(address, token=token) as endpoint:
        stream = endpoint.messages()
        taken = []
        for _ in range(count):
            delivery = await asyncio.wait_for(anext(stream), BOUND)
            assert isinstance(delivery.item, MulticastItem)
            taken.append((delivery.token, delivery.item.message.post_id))
            await delivery.acknowledge()
        await stream.aclose()
        return taken


async def test_a_router_restart_during_traffic_loses_and_duplicates_no_post():
    async with run_network(daemons=2) as network:
        first, second = network.daemons
        assert first.data_dir is not None
        alice_dir = first.data_dir
        alice_token, alice_id = await register(first, "alice")
        bob_token, _ = await register(second, "bob")
        await send_all(first.address, alice_token, "agent:bob", 1)  # a warm conversation
        traffic = asyncio.ensure_future(send_all(first.address, alice_token, "agent:bob", SENDS))
        await network.router.stop()
        await network.router.start()
        outcomes = await asyncio.wait_for(traffic, BOUND * 2)
        assert set(outcomes) <= {"ok", "delivery-pending", "network-unavailable"}, outcomes
        await eventually(
            lambda: open_intents(alice_dir, alice_id), lambda rows: rows == [], within=BOUND
        )
        bound = await asyncio.to_thread(intents, alice_dir, alice_id)
        records = await asyncio.to_thread(certified_records, alice_dir, alice_id)
        assert sorted(row.post_id for row in records) == sorted(row.post_id for row in bound)
        assert len({row.post_id for row in records}) == len(records)
        received = await deliveries_of(second.address, bob_token, len(bound))
        assert sorted(post_id for _, post_id in received) == sorted(row.post_id for row in bound)


async def test_a_killed_daemon_certifies_its_pending_intents_and_replays_unacknowledged_deliveries():
    async with run_network(daemons=2) as network:
        first, second = network.daemons
        assert first.data_dir is not None
        alice_dir = first.data_dir
        alice_token, alice_id = await register(first, "alice")
        bob_token, _ = await register(second, "bob")
        await send_all(first.address, alice_token, "agent:bob", 1)
        traffic = asyncio.ensure_future(send_all(first.address, alice_token, "agent:bob", SENDS))
        # Kill alice's daemon once some intents are bound and some are not yet certified.
        await eventually(
            lambda: asyncio.to_thread(intents, alice_dir, alice_id),
            lambda rows: len(rows) > 3,
            within=BOUND,
            interval=0.001,
        )
        await first.kill()
        await asyncio.wait_for(traffic, BOUND)
        bound_before = {
            row.post_id for row in await asyncio.to_thread(intents, alice_dir, alice_id)
        }
        await first.start()
        await eventually(
            lambda: open_intents(alice_dir, alice_id), lambda rows: rows == [], within=BOUND
        )
        bound_after = await asyncio.to_thread(intents, alice_dir, alice_id)
        # No intent was lost or minted anew by recovery: the same PostIds, all certified.
        assert {row.post_id for row in bound_after} == bound_before
        records = await asyncio.to_thread(certified_records, alice_dir, alice_id)
        assert sorted(row.post_id for row in records) == sorted(bound_before)
        # bob takes one delivery without acknowledging, his daemon is killed, and the same
        # token comes back after the restart.
        async with await harness_client.connect(second.address, token=bob_token) as bob:
            stream = bob.messages()
            unacknowledged = await asyncio.wait_for(anext(stream), BOUND)
            await stream.aclose()
        await second.kill()
        await second.start()
        async with await harness_client.connect(second.address, token=bob_token) as bob:
            stream = bob.messages()
            again = await asyncio.wait_for(anext(stream), BOUND)
            await stream.aclose()
        assert again.token == unacknowledged.token
        assert again.item == unacknowledged.item
        received = await deliveries_of(second.address, bob_token, len(bound_before))
        assert sorted(post_id for _, post_id in received) == sorted(bound_before)

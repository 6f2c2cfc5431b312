"""The `harness-gateway serve` process: exclusive data directory, ordered stop, and the
inbox surviving a SIGKILL (engine.md §7, §8, §10 vector 14 e2e)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

import harness_client
import pytest
from harness_client import (
    AuthenticationError,
    ConnectError,
    ConnectErrorReason,
    InboundDelivery,
    MessageInput,
    MulticastItem,
)
from harness_contract.ids import RandomId

from gateway.testing import DaemonFailed, RunningDaemon, run_daemon
from tests.e2e import support

pytestmark = pytest.mark.e2e

BOUND: Final = 20.0
"""Seconds any one wait of these tests may take."""


async def next_delivery(deliveries: AsyncIterator[InboundDelivery]) -> InboundDelivery:
    return await asyncio.wait_for(anext(deliveries), BOUND)


def text_of(delivery: InboundDelivery) -> str:
    item = delivery.item
    assert isinstance(item, MulticastItem)
    return support.text_of(item.message.content)


@pytest.mark.timeout(90)
async def test_a_second_daemon_on_the_same_data_directory_exits_non_zero_naming_the_directory():
    async with run_daemon() as first:
        with pytest.raises(DaemonFailed) as raised:
            async with run_daemon(data_dir=first.data_dir):
                pytest.fail("a second daemon served on a locked data directory")
        assert raised.value.returncode not in (None, 0)
        assert "holds the lock" in raised.value.stderr
        assert str(first.data_dir) in raised.value.stderr
        # The first daemon was not disturbed.
        assert first.running
        async with support.management(first) as operator:
            status = await operator.status()
        assert status.hosted_agents == 0
    assert first.process.returncode == 0


@pytest.mark.timeout(90)
async def test_sigterm_stops_the_daemon_in_order_with_status_zero_and_it_starts_again():
    async with run_daemon() as daemon:
        agents = await support.register(daemon, "alice")
        first_address = daemon.address
        assert await daemon.terminate() == 0
        assert '"msg": "stopped' in daemon.stderr
        await daemon.restart()
        assert daemon.running
        assert daemon.address != ""
        async with await harness_client.connect(daemon.address, token=agents["alice"].token):
            pass
        assert first_address.startswith("127.0.0.1:")


@pytest.mark.timeout(120)
async def test_an_unacknowledged_delivery_comes_back_with_the_same_token_and_item_after_sigkill_and_restart():
    async with run_daemon() as daemon:
        agents = await support.register(daemon, "alice", "bob")
        alice_token, bob_token = agents["alice"].token, agents["bob"].token
        async with await harness_client.connect(daemon.address, token=alice_token) as alice:
            await alice.send(MessageInput(to="agent:bob", text="first"))
            await alice.send(MessageInput(to="agent:bob", text="second"))
        async with await harness_client.connect(daemon.address, token=bob_token) as bob:
            stream = bob.messages()
            first = await next_delivery(stream)
            second = await next_delivery(stream)
            assert [text_of(first), text_of(second)] == ["first", "second"]
            await first.acknowledge()
            await stream.aclose()

        anchors = support.anchor_hashes(daemon.data_dir)
        assert await daemon.kill() == -9
        await daemon.restart()
        async with await harness_client.connect(daemon.address, token=bob_token) as bob:
            stream = bob.messages()
            replayed = await next_delivery(stream)
            assert replayed.token == second.token
            assert replayed.item == second.item
            await stream.aclose()

        # A local conversation keeps its anchor across restarts (engine.md §5.10).
        assert support.anchor_hashes(daemon.data_dir) == anchors
        assert await daemon.kill() == -9
        await daemon.restart()
        async with (
            await harness_client.connect(daemon.address, token=alice_token) as alice,
            await harness_client.connect(daemon.address, token=bob_token) as bob,
        ):
            stream = bob.messages()
            again = await next_delivery(stream)
            assert again.token == second.token
            assert again.item == second.item
            await again.acknowledge()
            await stream.aclose()
            await alice.send(MessageInput(to="agent:bob", text="marker"))

        # Acknowledged before the ordered stop: nothing but the new item comes after it.
        assert await daemon.terminate() == 0
        await daemon.restart()
        async with await harness_client.connect(daemon.address, token=bob_token) as bob:
            stream = bob.messages()
            marker = await next_delivery(stream)
            assert text_of(marker) == "marker"
            assert marker.token not in {first.token, second.token}
            await marker.acknowledge()
            await stream.aclose()
        async with support.management(daemon) as operator:
            assert (await operator.agent_status("bob")).backlog == 0


@pytest.mark.timeout(60)
async def test_the_daemon_refuses_an_unknown_agent_token_unauthenticated():
    async with run_daemon() as daemon:
        await support.register(daemon, "alice")
        with pytest.raises(ConnectError) as raised:
            await harness_client.connect(daemon.address, token=RandomId.API_TOKEN.mint())
        assert raised.value.reason is ConnectErrorReason.AUTHENTICATION_FAILED
        cause = raised.value.__cause__
        assert isinstance(cause, AuthenticationError)
        assert cause.reason == "unknown"


@pytest.mark.timeout(60)
async def test_run_daemon_stops_its_process_and_removes_its_directory_even_when_the_block_raises():
    class Boom(Exception):
        pass

    started: list[RunningDaemon] = []

    async def fail_inside() -> None:
        async with run_daemon() as daemon:
            started.append(daemon)
            assert daemon.running
            raise Boom

    with pytest.raises(Boom):
        await fail_inside()
    (daemon,) = started
    assert daemon.process.returncode == 0
    assert not daemon.data_dir.exists()


@pytest.mark.timeout(60)
async def test_run_daemon_reports_a_daemon_that_refuses_its_flags():
    with pytest.raises(DaemonFailed) as raised:
        async with run_daemon(extra_args=("--stream-window", "0")):
            pytest.fail("the daemon started with an invalid stream window")
    assert raised.value.returncode == 2
    assert "--stream-window" in raised.value.stderr


async def test_texts_of_brackets_certify_deliver_and_survive_a_sigkill():
    # A text of 60 `[` once made every stored record of its conversation unreadable, and
    # the daemon refused to start: nesting counts JSON structure, never text in strings.
    texts = ["[" * 60, "[" * 10_000]
    async with run_daemon() as daemon:
        agents = await support.register(daemon, "alice", "bob")
        async with await harness_client.connect(daemon.address, token=agents["alice"].token) as a:
            for text in texts:
                await asyncio.wait_for(a.send(MessageInput(to="agent:bob", text=text)), BOUND)
        assert await daemon.kill() == -9
        await daemon.restart()
        async with await harness_client.connect(daemon.address, token=agents["bob"].token) as b:
            stream = b.messages()
            received = [await next_delivery(stream), await next_delivery(stream)]
            assert [text_of(delivery) for delivery in received] == texts
            for delivery in received:
                await delivery.acknowledge()
            await stream.aclose()
            await asyncio.wait_for(b.send(MessageInput(to="agent:alice", text="[" * 60)), BOUND)

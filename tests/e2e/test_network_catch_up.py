"""Catch-up across processes (engine.md §5.7, §10 vectors 11-12): a member whose daemon was
down while a warm group of four kept posting (quorum(4) = 3) learns every missed record once it
is back, in chain order, and receives each of them exactly once."""

from __future__ import annotations

import asyncio
from typing import Final

import harness_client
import pytest
from harness_client import MessageInput, MulticastItem, TextPart

from gateway.testing_network import NetworkProcess, run_network

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

BOUND: Final = 60.0
GROUP: Final = "group:amy,ben,cat,dan"


async def register(daemon: NetworkProcess, name: str) -> str:
    async with await harness_client.connect_management(
        daemon.address, admin_token=daemon.admin_token
    ) as operator:
        return (await operator.register_agent(name)).token


async def texts_received(daemon: NetworkProcess, token: str, count: int) -> list[str]:
    async with await harness_client.connect(daemon.address, token=token) as endpoint:
        stream = endpoint.messages()
        texts = []
        for _ in range(count):
            delivery = await asyncio.wait_for(anext(stream), BOUND)
            assert isinstance(delivery.item, MulticastItem)
            [part] = delivery.item.message.content
            assert isinstance(part, TextPart)
            texts.append(part.text)
            await delivery.acknowledge()
        await stream.aclose()
        return texts


async def test_a_member_back_from_downtime_catches_up_on_every_record_it_missed():
    # A ring of eight entries forgets the missed posts' envelopes before dan is back: he
    # reads a feed gap and must catch up from the other members.
    async with run_network(daemons=4, router_args=("--ring-max-entries", "8")) as network:
        names = ("amy", "ben", "cat", "dan")
        tokens = {
            name: await register(daemon, name)
            for name, daemon in zip(names, network.daemons, strict=True)
        }
        amy_daemon, _, _, dan_daemon = network.daemons
        async with await harness_client.connect(amy_daemon.address, token=tokens["amy"]) as amy:
            await asyncio.wait_for(amy.send(MessageInput(to=GROUP, text="warm")), BOUND)
        assert await texts_received(dan_daemon, tokens["dan"], 1) == ["warm"]
        await dan_daemon.stop()
        async with await harness_client.connect(amy_daemon.address, token=tokens["amy"]) as amy:
            # A warm group of four posts with three of four members (quorum(4) = 3).
            for text in ("missed 1", "missed 2"):
                await asyncio.wait_for(amy.send(MessageInput(to=GROUP, text=text)), BOUND)
        await dan_daemon.start()
        async with await harness_client.connect(amy_daemon.address, token=tokens["amy"]) as amy:
            await asyncio.wait_for(amy.send(MessageInput(to=GROUP, text="after")), BOUND)
        # dan holds the group's head from before; the next proposal names a record he lacks,
        # so he catches up and receives everything, in chain order, once.
        assert await texts_received(dan_daemon, tokens["dan"], 3) == [
            "missed 1",
            "missed 2",
            "after",
        ]

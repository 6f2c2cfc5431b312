"""The Python client follows its agent's home replica in a real cluster (cluster.md §4.2).

Three in-process replicas on a real PostgreSQL; alice and bob homed on different replicas
(`homes_support.homed_cluster`). alice's client dials a `RoundRobinProxy` whose one backend is
a replica that is not her home, so her first calls are forwarded there (the replica's
`harness_cluster_forwards_total` counts them). Their answers name her home in `harness-home`;
once the client has dialled it (in the background, so maybe before her first send), her calls
go to the home directly: the replica she first reached forwards nothing more and the proxy
sees no new connection. When that home stops (a rolling upgrade), her calls go back through
the front and on to the replica that took her partition over.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Final

import harness_client
import pytest
from harness_client import MessageInput, MulticastItem, text_of

from gateway.testing_proxy import RoundRobinProxy
from tests.integration.cluster.homes_support import (
    OWN_CONNECTION,
    cluster_of,
    forwards,
    homed_cluster,
)
from tests.servers import PostgresServer
from tests.support import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

BOUND: Final = 20.0
"""Seconds any single wait may take before the test fails."""

SENDS_AT_HOME: Final = 3
"""Sends made once the home is followed, none of which may be forwarded."""


async def test_calls_forwarded_by_a_replica_away_from_home_then_go_to_the_home_directly(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    async with homed_cluster(postgres_server, tmp_path, ("alice", "bob")) as cluster:
        home = cluster.home("alice")
        away = next(r for r in cluster.replicas if r is not home)
        forwarded_before = forwards(away)
        async with (
            RoundRobinProxy([away.address]) as front,
            await harness_client.connect(
                front.address, token=cluster.tokens["alice"], options=OWN_CONNECTION
            ) as alice,
            await harness_client.connect(
                cluster.address, token=cluster.tokens["bob"], options=OWN_CONNECTION
            ) as bob,
        ):
            # connect's check of the token went through the front and was forwarded.
            assert forwards(away) > forwarded_before
            assert front.connections[away.address] == 1
            await asyncio.wait_for(
                alice.send(MessageInput(to="agent:bob", text="through the front")), BOUND
            )

            async def followed() -> str | None:
                return alice._route.home_address

            assert await eventually(followed, lambda h: h is not None, within=BOUND) == (
                home.address
            )
            forwarded, connections = forwards(away), front.connections[away.address]
            for index in range(SENDS_AT_HOME):
                await asyncio.wait_for(
                    alice.send(MessageInput(to="agent:bob", text=f"at home {index}")), BOUND
                )
            assert forwards(away) == forwarded
            assert front.connections[away.address] == connections

            texts = []
            async with asyncio.timeout(BOUND):
                async for delivery in bob.messages():
                    assert isinstance(delivery.item, MulticastItem)
                    texts.append(text_of(delivery.item.message.content))
                    await delivery.acknowledge()
                    if len(texts) == 1 + SENDS_AT_HOME:
                        break
            assert texts == ["through the front"] + [f"at home {i}" for i in range(SENDS_AT_HOME)]


async def test_when_the_home_stops_calls_go_back_through_the_front_and_then_to_the_new_home(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    async with homed_cluster(postgres_server, tmp_path, ("alice", "bob")) as cluster:
        home = cluster.home("alice")
        partition = cluster.partition("alice")
        others = [r for r in cluster.replicas if r is not home]
        # The front leaves out the home that stops, as a Service drops a terminating pod.
        async with (
            RoundRobinProxy([r.address for r in others]) as front,
            await harness_client.connect(
                front.address, token=cluster.tokens["alice"], options=OWN_CONNECTION
            ) as alice,
            await harness_client.connect(
                front.address, token=cluster.tokens["bob"], options=OWN_CONNECTION
            ) as bob,
        ):

            async def followed() -> str | None:
                return alice._route.home_address

            await eventually(followed, lambda h: h == home.address, within=BOUND)
            await home.shutdown()  # hands alice's partition over (cluster.md §9.3)

            async def holders() -> list[str]:
                owned = [r for r in others if partition in cluster_of(r).membership.owned()]
                return [r.address for r in owned]

            (new_home,) = await eventually(holders, lambda held: len(held) == 1, within=BOUND)
            sent = 0

            async def forwarded_send() -> bool:
                nonlocal sent
                before = sum(forwards(r) for r in others)
                text = f"after the move {sent}"
                await asyncio.wait_for(alice.send(MessageInput(to="agent:bob", text=text)), BOUND)
                sent += 1
                return sum(forwards(r) for r in others) > before

            # The first send fails at the stopped home and goes through the front again;
            # then alice's calls reach her new home without a hop: directly, following its
            # hint, or through the front when the front's connection is to the new home
            # itself (a home answering its own agent names no home).
            await eventually(forwarded_send, lambda forwarded: not forwarded, within=BOUND)
            assert alice._route.home_address in (new_home, None)

            async with asyncio.timeout(BOUND):
                delivery = await anext(bob.messages())
            assert isinstance(delivery.item, MulticastItem)
            assert text_of(delivery.item.message.content) == "after the move 0"

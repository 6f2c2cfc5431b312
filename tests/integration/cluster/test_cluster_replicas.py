"""Three cluster replicas on one PostgreSQL behind a round-robin proxy (cluster.md §4–§6).

Real in-process gateways in cluster mode, a real PostgreSQL, the project's Python client
dialling the proxy: any replica answers any agent, posts certify once across replicas, every
member holds the same chain, and the partitions are spread over the replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import harness_client
import pytest
from harness_client import MessageInput, MulticastItem

from gateway.app import Gateway
from gateway.cluster.partitions import home_partition
from gateway.engine import protocol as p
from gateway.testing_cluster import ClusterFiles, random_name, run_replicas
from gateway.testing_proxy import RoundRobinProxy
from tests.servers import PostgresServer
from tests.support import eventually

BOUND = 30.0
"""Seconds a step may take: claims wait one lease TTL (6 s) of fresh beats first."""

OWN_CONNECTION = (("grpc.use_local_subchannel_pool", 1),)
"""Each client its own connection, so the proxy spreads them over the replicas."""

pytestmark = pytest.mark.slow


@contextlib.asynccontextmanager
async def cluster_of(
    postgres_server: PostgresServer, tmp_path: Path, count: int
) -> AsyncIterator[tuple[list[Gateway], RoundRobinProxy]]:
    files = ClusterFiles.create(tmp_path / "cluster")
    dsn = postgres_server.create_database("cluster")
    async with (
        run_replicas(files, dsn, count) as replicas,
        RoundRobinProxy([replica.address for replica in replicas]) as proxy,
    ):
        partitions = replicas[0].components.cluster.meta.partitions  # type: ignore[union-attr]

        async def owned() -> list[int]:
            return [len(r.components.cluster.membership.owned()) for r in replicas]  # type: ignore[union-attr]

        await eventually(owned, lambda held: sum(held) == partitions and all(held), within=BOUND)
        yield replicas, proxy


async def register(replica: Gateway, name: str) -> str:
    return (await replica.components.agents.register(name)).token


async def test_agents_homed_on_different_replicas_talk_through_the_service(
    postgres_server, tmp_path
):
    async with cluster_of(postgres_server, tmp_path, 3) as (replicas, proxy):
        names = [random_name("agent") for _ in range(6)]
        tokens = {name: await register(replicas[0], name) for name in names}
        clients = {
            name: await harness_client.connect(
                proxy.address, token=tokens[name], options=OWN_CONNECTION
            )
            for name in names
        }
        try:
            streams = {name: clients[name].messages() for name in names}
            sent: dict[str, list[str]] = {name: [] for name in names}
            for index, author in enumerate(names):
                recipient = names[(index + 1) % len(names)]
                text = f"{author} to {recipient}"
                await asyncio.wait_for(
                    clients[author].send(MessageInput(to=f"agent:{recipient}", text=text)),
                    BOUND,
                )
                sent[recipient].append(text)
            for name in names:
                delivery = await asyncio.wait_for(anext(streams[name]), BOUND)
                assert isinstance(delivery.item, MulticastItem)
                assert harness_client.text_of(delivery.item.message.content) in sent[name]
                assert await clients[name].acknowledge([delivery.token]) == [None]
        finally:
            for name in names:
                await clients[name].close()
        admin = replicas[0].admin_token_path.read_text(encoding="utf-8").strip()  # type: ignore[union-attr]
        async with await harness_client.connect_management(
            proxy.address, admin_token=admin, options=OWN_CONNECTION
        ) as management:
            listed, _ = await management.list_agents()
        assert set(names) <= {agent.name for agent in listed}
        homes = {
            replica.components.cluster.membership.replica_id  # type: ignore[union-attr]
            for replica in replicas
            for name in names
            if replica.components.hosted.has_name(name)
        }
        assert len(homes) > 1, "the agents should be homed on more than one replica"


async def test_every_member_holds_the_same_chain_certified_across_replicas(
    postgres_server, tmp_path
):
    async with cluster_of(postgres_server, tmp_path, 2) as (replicas, proxy):
        partitions = replicas[0].components.cluster.meta.partitions  # type: ignore[union-attr]
        owned_by_first = set(replicas[0].components.cluster.membership.owned())  # type: ignore[union-attr]
        # Two agents homed on different replicas, so every post crosses.
        alice = bob = None
        while alice is None or bob is None:
            name = random_name("member")
            registered = await replicas[0].components.agents.register(name)
            token, agent_id = registered.token, registered.agent_id
            here = home_partition(agent_id, partitions) in owned_by_first
            if here and alice is None:
                alice = (name, token, agent_id)
            elif not here and bob is None:
                bob = (name, token, agent_id)
        async with (
            await harness_client.connect(
                proxy.address, token=alice[1], options=OWN_CONNECTION
            ) as a,
            await harness_client.connect(proxy.address, token=bob[1], options=OWN_CONNECTION) as b,
        ):
            for round_ in range(5):
                await asyncio.wait_for(
                    a.send(MessageInput(to=f"agent:{bob[0]}", text=f"a{round_}")), BOUND
                )
                await asyncio.wait_for(
                    b.send(MessageInput(to=f"agent:{alice[0]}", text=f"b{round_}")), BOUND
                )
        store = replicas[0].components.store
        conversation_ids = {
            row.conversation_id for row in (await store.snapshot(alice[2])).conversations
        }
        assert len(conversation_ids) == 1
        conversation_id = conversation_ids.pop()
        at_alice = await store.records(alice[2], conversation_id, 0, 100)
        at_bob = await store.records(bob[2], conversation_id, 0, 100)
        assert [row.record_hash for row in at_alice] == [row.record_hash for row in at_bob]
        assert [row.depth for row in at_alice] == list(range(1, 11))
        assert len({row.post_id for row in at_alice}) == 10
        for row in at_alice:
            record = p.decode(row.record, p.CertifiedRecord)
            assert len(record.durability_certificate.entries) == 2

"""The store seam of a cluster replica on real PostgreSQL (cluster.md §3.2): once its replica
armed it, the store writes a unit only as a partition the replica holds. A unit submitted after
the release unit of its partition is refused `PartitionNotHeld` with nothing written while the
rest of its group commits; a claimed partition's units are accepted, one built before the claim
is not; registration and releases are exempt."""

from __future__ import annotations

import asyncio

import pytest
from harness_contract.ids import RandomId, agent_id_order_key

from gateway.cluster.partitions import home_partition, sequencing_partition
from gateway.store.errors import PartitionNotHeld
from gateway.store.postgres.membership import PostgresMembershipTable
from gateway.store.records import (
    DeliveryState,
    IntentState,
    PutConversation,
    PutDelivery,
    PutIdentity,
    PutIntent,
    PutRecord,
    PutToken,
    ReleasePartitions,
    Write,
)
from gateway.store.writer import CommitWriterState
from tests.integration.store.postgres_support import (
    CLUSTER_PARTITIONS,
    CLUSTER_REPLICA,
    Cluster,
    cluster_store,
    database_sql,
)
from tests.servers import PostgresServer

P = CLUSTER_PARTITIONS
REPLICA = CLUSTER_REPLICA
LONG_TTL = 60.0


async def claim(replica: Cluster, partitions: list[int]) -> None:
    """Claim `partitions` in the database, as the membership does (the seam not told)."""
    table = PostgresMembershipTable.for_dsn(replica.dsn, replica_id=REPLICA)
    try:
        claimed = await table.claim(REPLICA, replica.incarnation, partitions, LONG_TTL)
    finally:
        await table.close()
    assert sorted(claimed) == sorted(partitions)


def sql(server: PostgresServer, replica: Cluster, statement: str) -> list[str]:
    return database_sql(server, replica.dsn, statement).split()


def homed_apart() -> tuple[str, str]:
    """Two agents with different home partitions, the first the lower in AgentId order."""
    first = RandomId.AGENT.mint()
    while True:
        second = RandomId.AGENT.mint()
        if home_partition(second, P) != home_partition(first, P):
            low, high = sorted([first, second], key=agent_id_order_key)
            return low, high


def bind(author: str, post_id: str, bind_seq: int) -> list[Write]:
    """A home's bind: the author's open intent, naming a sequencer elsewhere."""
    return [
        PutIntent(
            agent_id=author,
            post_id=post_id,
            conversation_id="cnv-1",
            bind_seq=bind_seq,
            intent=b"intent",
            state=IntentState.OPEN,
            record_hash=None,
            bound_at=float(bind_seq),
            seq_partition=0,
            descriptor=b"descriptor",
        )
    ]


def certify(author: str, other: str, post_id: str, depth: int) -> list[Write]:
    """A sequencer's unit for one post of the conversation of `author` and `other`."""
    record_hash = f"rh-{post_id}"
    writes: list[Write] = [
        PutRecord(
            agent_id=member,
            record_hash=record_hash,
            conversation_id="cnv-1",
            depth=depth,
            author=author,
            post_id=post_id,
            record=b"{}",
            commit_seq=None,
        )
        for member in (author, other)
    ]
    writes.append(
        PutIntent(
            agent_id=author,
            post_id=post_id,
            conversation_id="cnv-1",
            bind_seq=depth,
            intent=b"",
            state=IntentState.COMPLETED,
            record_hash=record_hash,
            bound_at=float(depth),
        )
    )
    writes.append(
        PutDelivery(
            agent_id=other,
            token=f"dlv-{post_id}",
            conversation_id="cnv-1",
            record_hash=record_hash,
            commit_seq=None,
            projection=b"{}",
            state=DeliveryState.PENDING,
        )
    )
    writes.extend(
        PutConversation(
            agent_id=member,
            conversation_id="cnv-1",
            descriptor=b"d",
            membership_hash="m",
            anchor=b"a",
            anchor_hash="ah",
            head=record_hash,
            depth=depth,
        )
        for member in (author, other)
    )
    return writes


def release(replica: Cluster, *partitions: int) -> list[Write]:
    return [
        ReleasePartitions(
            partitions=partitions, replica_id=REPLICA, incarnation=replica.incarnation
        )
    ]


async def test_a_unit_submitted_after_its_partitions_release_is_refused_and_its_group_commits(
    postgres_server: PostgresServer,
) -> None:
    leaving, staying = homed_apart()
    gone, kept = home_partition(leaving, P), home_partition(staying, P)
    async with cluster_store(postgres_server) as replica:
        await claim(replica, [gone, kept])
        replica.store.hold([gone, kept])
        groups = "SELECT last_group FROM replicas"
        before = int(sql(postgres_server, replica, groups)[0])
        store = replica.store
        results = await asyncio.gather(
            store.apply(bind(leaving, "pst-1", 1)),
            store.apply(release(replica, gone)),
            store.apply(bind(leaving, "pst-2", 2)),
            store.apply(bind(staying, "pst-3", 1)),
            return_exceptions=True,
        )
        assert int(sql(postgres_server, replica, groups)[0]) == before + 1, "one group"
        assert results[0] is None
        assert results[1] is None
        refused = results[2]
        assert isinstance(refused, PartitionNotHeld)
        assert refused.partitions == (gone,)
        assert results[3] is None
        assert await store.intent(leaving, "pst-1") is not None
        assert await store.intent(leaving, "pst-2") is None
        assert await store.intent(staying, "pst-3") is not None
        holders = "SELECT partition FROM partitions WHERE holder IS NOT NULL ORDER BY partition"
        assert sql(postgres_server, replica, holders) == [str(kept)]
        with pytest.raises(PartitionNotHeld):
            await store.apply(bind(leaving, "pst-4", 4))
        assert await store.intent(leaving, "pst-4") is None
        assert store.writer_state is CommitWriterState.RUNNING
        assert replica.fatal.errors == []


async def test_a_claimed_partitions_units_are_accepted_and_one_built_before_the_claim_is_not(
    postgres_server: PostgresServer,
) -> None:
    author = RandomId.AGENT.mint()
    home = home_partition(author, P)
    async with cluster_store(postgres_server) as replica:
        await claim(replica, [home])
        store = replica.store
        store.hold([])
        with pytest.raises(PartitionNotHeld):
            await store.apply(bind(author, "pst-1", 1))
        built_before = asyncio.ensure_future(store.apply(bind(author, "pst-2", 2)))
        await asyncio.sleep(0)  # queued: its group waits the commit delay
        store.hold([home])
        with pytest.raises(PartitionNotHeld):
            await built_before
        await store.apply(bind(author, "pst-3", 3))
        assert await store.intent(author, "pst-3") is not None
        assert await store.intent(author, "pst-1") is None
        assert await store.intent(author, "pst-2") is None


async def test_registration_and_a_release_are_written_as_no_partition(
    postgres_server: PostgresServer,
) -> None:
    author = RandomId.AGENT.mint()
    async with cluster_store(postgres_server) as replica:
        await claim(replica, [home_partition(author, P)])
        store = replica.store
        store.hold([])
        await store.apply(
            [
                PutIdentity(
                    agent_id=author,
                    agent_name="alice",
                    signed_card=b"{}",
                    seed=b"s",
                    created_at="t",
                ),
                PutToken(token_digest="digest-a", agent_id=author, created_at="t"),
            ]
        )
        await store.apply(release(replica, home_partition(author, P)))
        assert [row.agent_id for row in await store.identities()] == [author]
        assert sql(postgres_server, replica, "SELECT count(holder) FROM partitions") == ["0"]


async def test_a_sequencers_unit_is_written_as_its_conversations_sequencing_partition(
    postgres_server: PostgresServer,
) -> None:
    first, other = homed_apart()
    sequencer = sequencing_partition([first, other], P)
    assert sequencer == home_partition(first, P) != home_partition(other, P)
    async with cluster_store(postgres_server) as replica:
        await claim(replica, [sequencer])
        store = replica.store
        store.hold([sequencer])
        # Records, the intent's completion and a delivery at a member homed elsewhere.
        await store.apply(certify(first, other, "pst-1", 1))
        assert [row.token for row in await store.pending_deliveries(other, 10)] == ["dlv-pst-1"]
        await store.apply(release(replica, sequencer))
        with pytest.raises(PartitionNotHeld):
            await store.apply(certify(first, other, "pst-2", 2))
        assert [row.record_hash for row in await store.records(other, "cnv-1", 0, 10)] == [
            "rh-pst-1"
        ]

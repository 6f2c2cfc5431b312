"""A cluster replica's PostgreSQL store on real PostgreSQL (cluster.md §3.1, §3.5, §3.6, §5,
§6): units planned with P store the partition columns and the database's commit order, the
backstops refuse a second copy as that unit's own failure, a fenced incarnation's group commits
nothing and stops the writer, an ambiguous COMMIT is resolved from `last_group`, and the
cluster's reads return what the rows say."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import psycopg
import pytest
from harness_contract.ids import RandomId

from gateway.cluster.partitions import home_partition
from gateway.store.errors import (
    ClusterModeMismatch,
    ConstraintViolation,
    StoreFailed,
    StoreFenced,
    StoreUnavailable,
)
from gateway.store.memory import MemoryStore
from gateway.store.postgres import PostgresStore, migrate
from gateway.store.postgres.membership import PartitionCountMismatch, PostgresMembershipTable
from gateway.store.postgres.schema import CLUSTER_OWNER, setup_cluster
from gateway.store.postgres.writer import IncarnationFence
from gateway.store.records import (
    ConversationRow,
    DeliveryState,
    IdentityRow,
    IntentRow,
    IntentState,
    PutConversation,
    PutDelivery,
    PutIdentity,
    PutIntent,
    PutRecord,
    PutToken,
    RefuseIntent,
    ReleasePartitions,
    SetAsideRow,
    SetDeliveryState,
    StoredConversation,
    Write,
)
from gateway.store.sqlite_store import SqliteStore
from gateway.store.writer import CommitWriterState
from tests.integration.store.postgres_support import (
    CLUSTER_PARTITIONS,
    CLUSTER_REPLICA,
    Cluster,
    Proxy,
    cluster_store,
    database_sql,
    opened,
)
from tests.servers import PostgresServer

P = CLUSTER_PARTITIONS
REPLICA = CLUSTER_REPLICA
LONG_TTL = 60.0

A = RandomId.AGENT.mint()
B = RandomId.AGENT.mint()
C = RandomId.AGENT.mint()


def sql(server: PostgresServer, cluster: Cluster, statement: str) -> list[str]:
    return database_sql(server, cluster.dsn, statement).split()


def identity(agent_id: str, name: str) -> PutIdentity:
    return PutIdentity(
        agent_id=agent_id, agent_name=name, signed_card=b"{}", seed=b"sealed", created_at="t"
    )


def intent(
    agent_id: str,
    post_id: str,
    bind_seq: int,
    *,
    conversation_id: str = "cnv-1",
    state: IntentState = IntentState.OPEN,
    seq_partition: int | None = 3,
    record_hash: str | None = None,
) -> PutIntent:
    return PutIntent(
        agent_id=agent_id,
        post_id=post_id,
        conversation_id=conversation_id,
        bind_seq=bind_seq,
        intent=b"intent-" + post_id.encode(),
        state=state,
        record_hash=record_hash,
        bound_at=float(bind_seq),
        seq_partition=seq_partition,
        descriptor=None if seq_partition is None else b"descriptor-" + conversation_id.encode(),
    )


def record(agent_id: str, author: str, post_id: str, depth: int, record_hash: str) -> PutRecord:
    return PutRecord(
        agent_id=agent_id,
        record_hash=record_hash,
        conversation_id="cnv-1",
        depth=depth,
        author=author,
        post_id=post_id,
        record=b"{}",
        commit_seq=None,
    )


def delivery(agent_id: str, token: str, record_hash: str) -> PutDelivery:
    return PutDelivery(
        agent_id=agent_id,
        token=token,
        conversation_id="cnv-1",
        record_hash=record_hash,
        commit_seq=None,
        projection=b"{}",
        state=DeliveryState.PENDING,
    )


def conversation(agent_id: str, conversation_id: str) -> PutConversation:
    return PutConversation(
        agent_id=agent_id,
        conversation_id=conversation_id,
        descriptor=b"d",
        membership_hash="m",
        anchor=b"a",
        anchor_hash="ah",
        head=None,
        depth=0,
    )


# --- opening ------------------------------------------------------------------------------


async def test_a_cluster_store_is_the_clusters_one_owner_with_its_local_instance_and_no_lease(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        store = cluster.store
        assert store.cluster
        assert store.partitions == P
        assert store.owner == CLUSTER_OWNER
        assert sql(
            postgres_server,
            cluster,
            "SELECT value FROM owner_meta WHERE owner = 'cluster' AND key = 'local_instance_id'",
        ) == [store.local_instance_id]
        await store.apply(
            [identity(A, "alice"), PutToken(token_digest="digest-a", agent_id=A, created_at="t")]
        )
        assert [row.agent_id for row in await store.identities()] == [A]
        assert await store.token("digest-a") == (A, False)
        assert sql(postgres_server, cluster, "SELECT count(*) FROM leases") == ["0"]


async def test_two_replicas_of_one_cluster_see_the_same_agents(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply([identity(A, "alice")])
        other = await PostgresStore.open_cluster(
            cluster.dsn, replica_id="replica-b", incarnation=1, partitions=P
        )
        try:
            assert [row.agent_id for row in await other.identities()] == [A]
            assert other.local_instance_id == cluster.store.local_instance_id
        finally:
            await other.close()


async def test_a_database_not_set_up_for_a_cluster_is_refused_by_open_cluster(
    postgres_server: PostgresServer,
) -> None:
    empty = postgres_server.create_database()
    with pytest.raises(ClusterModeMismatch, match="migrate --cluster"):
        await PostgresStore.open_cluster(empty, replica_id=REPLICA, incarnation=1, partitions=P)
    network = postgres_server.create_database()
    await migrate(network)
    with pytest.raises(ClusterModeMismatch, match="not set up for a cluster"):
        await PostgresStore.open_cluster(network, replica_id=REPLICA, incarnation=1, partitions=P)


async def test_open_cluster_refuses_another_partition_count(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    await setup_cluster(dsn, partitions=P, key_check="k")
    with pytest.raises(PartitionCountMismatch):
        await PostgresStore.open_cluster(dsn, replica_id=REPLICA, incarnation=1, partitions=P * 2)


# --- planning with P ----------------------------------------------------------------------


async def test_identities_and_deliveries_store_their_agents_home_partition(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply(
            [identity(A, "alice"), identity(B, "bob"), delivery(B, "tok-1", "rh-1")]
        )
        homes = sql(
            postgres_server,
            cluster,
            "SELECT agent_id || '=' || home_partition FROM identities ORDER BY agent_id",
        )
        assert homes == sorted([f"{A}={home_partition(A, P)}", f"{B}={home_partition(B, P)}"])
        assert sql(postgres_server, cluster, "SELECT home_partition FROM pending_deliveries") == [
            str(home_partition(B, P))
        ]


async def test_an_identity_whose_id_has_no_home_partition_is_refused_before_it_is_queued(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        with pytest.raises(ConstraintViolation, match="home partition"):
            await cluster.store.apply([identity("not-an-agent-id", "mallory")])
        assert await cluster.store.identities() == []
        assert cluster.fatal.errors == []


async def test_an_intent_bound_away_keeps_its_partition_and_descriptor_until_it_is_not_open(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply([intent(A, "pst-1", 1, seq_partition=5)])
        columns = (
            "SELECT seq_partition || ':' || coalesce(encode(descriptor, 'escape'), 'null') "
            "FROM post_intents"
        )
        assert sql(postgres_server, cluster, columns) == ["5:descriptor-cnv-1"]
        await cluster.store.apply(
            [
                intent(
                    A,
                    "pst-1",
                    1,
                    state=IntentState.COMPLETED,
                    record_hash="rh-1",
                    seq_partition=None,
                )
            ]
        )
        assert sql(postgres_server, cluster, columns) == ["5:null"]
        completed = await cluster.store.intent(A, "pst-1")
        assert completed is not None
        assert (completed.state, completed.intent) == (IntentState.COMPLETED, b"")


async def test_records_and_deliveries_without_a_commit_seq_take_the_databases_order(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply([record(A, A, "pst-1", 1, "rh-1"), delivery(B, "t-1", "rh-1")])
        await cluster.store.apply([record(A, A, "pst-2", 2, "rh-2"), delivery(B, "t-2", "rh-2")])
        records = await cluster.store.records(A, "cnv-1", 0, 10)
        assert [row.record_hash for row in records] == ["rh-1", "rh-2"]
        assert records[0].commit_seq < records[1].commit_seq
        pending = await cluster.store.pending_deliveries(B, 10)
        assert [row.token for row in pending] == ["t-1", "t-2"]
        assert pending[0].commit_seq < pending[1].commit_seq


async def test_a_second_record_of_one_post_fails_its_unit_alone(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply([record(A, B, "pst-1", 1, "rh-1")])
        # Grouped with an innocent unit: only the copy's unit fails (cluster.md §5.2).
        results = await asyncio.gather(
            cluster.store.apply([record(A, B, "pst-1", 2, "rh-copy")]),
            cluster.store.apply([record(C, B, "pst-1", 1, "rh-1")]),
            return_exceptions=True,
        )
        assert isinstance(results[0], ConstraintViolation)
        assert "certified_records_post" in str(results[0])
        assert results[1] is None
        assert [r.record_hash for r in await cluster.store.records(A, "cnv-1", 0, 10)] == ["rh-1"]
        assert [r.record_hash for r in await cluster.store.records(C, "cnv-1", 0, 10)] == ["rh-1"]
        assert cluster.fatal.errors == []


async def test_a_second_delivery_of_one_record_fails_its_unit_alone(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply([delivery(B, "t-1", "rh-1")])
        results = await asyncio.gather(
            cluster.store.apply([delivery(B, "t-2", "rh-1")]),
            cluster.store.apply([delivery(C, "t-1", "rh-1")]),
            return_exceptions=True,
        )
        assert isinstance(results[0], ConstraintViolation)
        assert "pending_deliveries_record" in str(results[0])
        assert results[1] is None
        assert [row.token for row in await cluster.store.pending_deliveries(B, 10)] == ["t-1"]
        assert [row.token for row in await cluster.store.pending_deliveries(C, 10)] == ["t-1"]


async def test_release_partitions_clears_the_holder_this_incarnation_had(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        table = PostgresMembershipTable.for_dsn(cluster.dsn, replica_id=REPLICA)
        try:
            claimed = await table.claim(REPLICA, cluster.incarnation, [1, 2, 3], LONG_TTL)
        finally:
            await table.close()
        assert sorted(claimed) == [1, 2, 3]
        await cluster.store.apply(
            [
                ReleasePartitions(
                    partitions=(1, 2), replica_id=REPLICA, incarnation=cluster.incarnation
                )
            ]
        )
        held = sql(
            postgres_server,
            cluster,
            "SELECT partition FROM partitions WHERE holder IS NOT NULL ORDER BY partition",
        )
        assert held == ["3"]


async def test_release_partitions_is_refused_by_every_store_outside_a_cluster(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    release: list[Write] = [ReleasePartitions(partitions=(1,), replica_id=REPLICA, incarnation=1)]
    dsn = postgres_server.create_database()
    async with opened(dsn) as network:
        with pytest.raises(ConstraintViolation, match="cluster"):
            await network.apply(release)
    memory = MemoryStore()
    with pytest.raises(ConstraintViolation, match="cluster"):
        await memory.apply(release)
    sqlite = await SqliteStore.open(tmp_path / "store.db")
    try:
        with pytest.raises(ConstraintViolation, match="cluster"):
            await sqlite.apply(release)
    finally:
        await sqlite.close()


# --- the fence ----------------------------------------------------------------------------


async def test_a_group_of_a_fenced_incarnation_commits_nothing_and_stops_the_writer(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply([identity(A, "alice")])
        # Another replica's claim fences this incarnation (cluster.md §3.2).
        database_sql(
            postgres_server,
            cluster.dsn,
            f"UPDATE replicas SET fenced = true WHERE replica_id = '{REPLICA}'",
        )
        with pytest.raises(StoreFenced):
            await cluster.store.apply([identity(B, "bob")])
        assert [type(error) for error in cluster.fatal.errors] == [StoreFenced]
        assert sql(postgres_server, cluster, "SELECT agent_id FROM identities") == [A]
        with pytest.raises(StoreFailed):
            await cluster.store.apply([identity(C, "carol")])
        assert len(cluster.fatal.errors) == 1


async def test_each_group_stamps_its_number_on_the_replica_row(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply([identity(A, "alice")])
        await cluster.store.apply([identity(B, "bob")])
        assert sql(
            postgres_server,
            cluster,
            f"SELECT last_group FROM replicas WHERE replica_id = '{REPLICA}'",
        ) == ["2"]


async def test_a_new_incarnation_fences_the_older_ones_writer(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        table = PostgresMembershipTable.for_dsn(cluster.dsn, replica_id=REPLICA)
        try:
            await table.join(REPLICA, "127.0.0.1:2")
        finally:
            await table.close()
        with pytest.raises(StoreFenced):
            await cluster.store.apply([identity(A, "alice")])
        assert sql(postgres_server, cluster, "SELECT count(*) FROM identities") == ["0"]


# --- an ambiguous COMMIT (cluster.md §3.5) --------------------------------------------------


async def connect(dsn: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True)


async def run_group(
    connection: psycopg.AsyncConnection[tuple[object, ...]], fence: IncarnationFence
) -> None:
    """Begin a group as the writer does (its fence first), leaving the transaction open."""
    await connection.execute("BEGIN")
    cursor = await connection.execute(*fence.group_statement())
    fence.check(await cursor.fetchone())


async def test_a_lost_commit_that_never_reached_the_server_is_resolved_not_committed(
    postgres_server: PostgresServer,
) -> None:
    proxy = Proxy(target_port=postgres_server.port)
    await proxy.start()
    try:
        async with cluster_store(postgres_server, proxy) as cluster:
            await cluster.store.apply([identity(A, "alice")])
            proxy.cut_writer_commit = True
            # Not CommitAmbiguous: the replica row says the group did not commit.
            with pytest.raises(StoreUnavailable, match="did not commit"):
                await cluster.store.apply([identity(B, "bob")])
            assert cluster.store.writer_state is CommitWriterState.RUNNING
            await cluster.store.apply([identity(C, "carol")])
            assert sorted(row.agent_id for row in await cluster.store.identities()) == sorted(
                [A, C]
            )
            assert cluster.fatal.errors == []
    finally:
        await proxy.close()


async def test_a_group_that_committed_is_resolved_committed_and_one_rolled_back_is_not(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        fence = IncarnationFence(REPLICA, cluster.incarnation)
        writer, reader = await connect(cluster.dsn), await connect(cluster.dsn)
        try:
            await run_group(writer, fence)
            await writer.execute("COMMIT")
            assert await fence.resolve(reader, writer.info.backend_pid) is True

            await run_group(writer, fence)
            await writer.execute("ROLLBACK")
            assert await fence.resolve(reader, writer.info.backend_pid) is False
        finally:
            await writer.close()
            await reader.close()


async def test_the_resolution_ends_a_backend_still_holding_the_lost_group_and_reads_again(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        fence = IncarnationFence(REPLICA, cluster.incarnation)
        stale, reader = await connect(cluster.dsn), await connect(cluster.dsn)
        try:
            # The lost group's backend keeps its row lock, as one whose client vanished would.
            await run_group(stale, fence)
            assert await fence.resolve(reader, stale.info.backend_pid) is False
            assert stale.info.backend_pid not in [
                int(pid)
                for pid in sql(postgres_server, cluster, "SELECT pid FROM pg_stat_activity")
            ]
        finally:
            await stale.close()
            await reader.close()


async def test_the_resolution_of_a_fenced_incarnation_is_store_fenced(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        fence = IncarnationFence(REPLICA, cluster.incarnation)
        writer = await connect(cluster.dsn)
        try:
            await run_group(writer, fence)
            await writer.execute("COMMIT")
            database_sql(postgres_server, cluster.dsn, "UPDATE replicas SET fenced = true")
            with pytest.raises(StoreFenced):
                await fence.resolve(writer, None)
        finally:
            await writer.close()


# --- the cluster's reads --------------------------------------------------------------------


async def test_conversation_rows_are_every_members_row(postgres_server: PostgresServer) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply(
            [conversation(A, "cnv-1"), conversation(B, "cnv-1"), conversation(A, "cnv-2")]
        )
        rows = await cluster.store.conversation_rows("cnv-1")
        assert sorted(rows) == sorted([A, B])
        assert rows[A] == StoredConversation(
            conversation_id="cnv-1",
            descriptor=b"d",
            membership_hash="m",
            anchor=b"a",
            anchor_hash="ah",
            head=None,
            depth=0,
            set_aside=None,
        )
        assert await cluster.store.conversation_rows("cnv-none") == {}


async def test_open_intents_of_a_conversation_are_those_bound_away_in_bind_order(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply(
            [
                intent(B, "pst-b", 2),
                intent(A, "pst-a", 1),
                intent(A, "pst-local", 3, seq_partition=None),
                intent(C, "pst-done", 4, state=IntentState.COMPLETED, record_hash="rh"),
                intent(C, "pst-other", 5, conversation_id="cnv-2"),
            ]
        )
        found = await cluster.store.open_intents_of("cnv-1")
        assert [(author, row.post_id) for author, row, _ in found] == [
            (A, "pst-a"),
            (B, "pst-b"),
        ]
        _, row, descriptor = found[0]
        assert row == IntentRow(
            post_id="pst-a",
            conversation_id="cnv-1",
            bind_seq=1,
            intent=b"intent-pst-a",
            state=IntentState.OPEN,
            record_hash=None,
            bound_at=1.0,
        )
        assert descriptor == b"descriptor-cnv-1"


async def test_open_conversations_are_those_with_open_intents_in_the_partitions(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply(
            [
                intent(A, "p1", 1, conversation_id="cnv-1", seq_partition=1),
                intent(A, "p2", 2, conversation_id="cnv-1", seq_partition=1),
                intent(A, "p3", 3, conversation_id="cnv-2", seq_partition=2),
                intent(A, "p4", 4, conversation_id="cnv-3", seq_partition=3),
                intent(
                    A,
                    "p5",
                    5,
                    conversation_id="cnv-4",
                    seq_partition=1,
                    state=IntentState.COMPLETED,
                    record_hash="rh",
                ),
            ]
        )
        assert await cluster.store.open_conversations([1, 2]) == ["cnv-1", "cnv-2"]
        assert await cluster.store.open_conversations([4]) == []
        assert await cluster.store.open_conversations([]) == []


async def test_agents_with_pending_are_those_homed_in_the_partitions(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply(
            [delivery(A, "t-1", "rh-1"), delivery(A, "t-2", "rh-2"), delivery(B, "t-1", "rh-1")]
        )
        # A classified delivery is nothing to do.
        await cluster.store.apply([delivery(C, "t-1", "rh-1")])
        await cluster.store.apply(
            [SetDeliveryState(agent_id=C, token="t-1", state=DeliveryState.CLASSIFIED)]
        )
        everywhere = await cluster.store.agents_with_pending(range(P))
        assert everywhere == sorted([A, B])
        assert await cluster.store.agents_with_pending([home_partition(A, P)]) == sorted(
            agent for agent in (A, B) if home_partition(agent, P) == home_partition(A, P)
        )


async def test_intent_states_are_found_by_post_id_alone(postgres_server: PostgresServer) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply(
            [
                intent(A, "pst-1", 1),
                intent(B, "pst-2", 1, state=IntentState.COMPLETED, record_hash="rh-2"),
                intent(C, "pst-3", 1, state=IntentState.REFUSED),
            ]
        )
        states = await cluster.store.intent_states(["pst-1", "pst-2", "pst-3", "pst-none"])
        assert sorted(states) == sorted(
            [
                (A, "pst-1", IntentState.OPEN, None),
                (B, "pst-2", IntentState.COMPLETED, "rh-2"),
                (C, "pst-3", IntentState.REFUSED, None),
            ]
        )
        assert await cluster.store.intent_states([]) == []


async def test_identities_in_partitions_and_one_identity_are_read_as_stored(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply([identity(A, "alice"), identity(B, "bob"), identity(C, "carol")])
        home = home_partition(A, P)
        assert [row.agent_id for row in await cluster.store.identities_in([home])] == [
            agent for agent in (A, B, C) if home_partition(agent, P) == home
        ]
        assert [row.agent_id for row in await cluster.store.identities_in(range(P))] == [A, B, C]
        assert await cluster.store.identity(B) == IdentityRow(
            agent_id=B, agent_name="bob", signed_card=b"{}", seed=b"sealed", created_at="t"
        )
        assert await cluster.store.identity(RandomId.AGENT.mint()) is None


# --- the sequencer's backstops and set-aside rows (cluster.md §5.2, §5.4) -------------------


def moved(
    agent_id: str, head: str | None, depth: int, moved_from: int, *, membership: str = "m"
) -> PutConversation:
    return dataclasses.replace(
        conversation(agent_id, "cnv-1"),
        membership_hash=membership,
        head=head,
        depth=depth,
        moved_from=moved_from,
    )


async def heads(cluster: Cluster) -> dict[str, tuple[str | None, int, str]]:
    rows = await cluster.store.conversation_rows("cnv-1")
    return {agent: (row.head, row.depth, row.membership_hash) for agent, row in rows.items()}


async def test_a_head_moves_only_from_the_depth_its_unit_was_built_on(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply([moved(A, "rh-1", 1, 0), moved(B, "rh-1", 1, 0)])
        assert await heads(cluster) == {A: ("rh-1", 1, "m"), B: ("rh-1", 1, "m")}
        results = await asyncio.gather(
            # Built on GENESIS again (memory older than the rows): stale, and alone.
            cluster.store.apply([moved(A, "rh-x", 1, 0), moved(B, "rh-x", 1, 0)]),
            cluster.store.apply([moved(A, "rh-2", 2, 1), moved(B, "rh-2", 2, 1)]),
            return_exceptions=True,
        )
        assert isinstance(results[0], ConstraintViolation)
        assert "stale unit: the head moved" in str(results[0])
        assert results[1] is None
        assert await heads(cluster) == {A: ("rh-2", 2, "m"), B: ("rh-2", 2, "m")}
        with pytest.raises(ConstraintViolation, match="stale unit"):
            await cluster.store.apply([moved(A, "rh-3", 3, 1)])  # someone else moved it
        assert cluster.fatal.errors == []


async def test_a_foundation_at_genesis_keeps_the_stored_one_and_no_head_moves_on_another(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply([moved(A, None, 0, 0)])  # a bind's foundation alone
        await cluster.store.apply([moved(A, None, 0, 0, membership="other")])
        assert await heads(cluster) == {A: (None, 0, "m")}
        with pytest.raises(ConstraintViolation, match="stale unit"):
            await cluster.store.apply([moved(A, "rh-1", 1, 0, membership="other")])
        assert await heads(cluster) == {A: (None, 0, "m")}


async def test_an_intent_completes_only_while_it_is_open(postgres_server: PostgresServer) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply([intent(A, "p-1", 1)])
        completion = dataclasses.replace(
            intent(A, "p-1", 1, state=IntentState.COMPLETED, record_hash="rh-1"), from_open=True
        )
        await cluster.store.apply([completion])
        [(_, _, state, record_hash)] = await cluster.store.intent_states(["p-1"])
        assert (state, record_hash) == (IntentState.COMPLETED, "rh-1")
        again = dataclasses.replace(completion, record_hash="rh-2")
        with pytest.raises(ConstraintViolation, match="stale unit: the intent is not open"):
            await cluster.store.apply([again])
        [(_, _, state, record_hash)] = await cluster.store.intent_states(["p-1"])
        assert (state, record_hash) == (IntentState.COMPLETED, "rh-1")


async def test_a_conversation_set_aside_is_in_every_members_row_and_its_open_intents_refused(
    postgres_server: PostgresServer,
) -> None:
    async with cluster_store(postgres_server) as cluster:
        await cluster.store.apply(
            [
                moved(A, "rh-1", 1, 0),
                intent(A, "p-1", 1),
                intent(B, "p-2", 1, state=IntentState.COMPLETED, record_hash="rh-1"),
            ]
        )
        await cluster.store.apply(
            [
                SetAsideRow(agent_id=A, conversation_id="cnv-1", reason="first"),
                # B has no row yet: its foundation first.
                SetAsideRow(
                    agent_id=B,
                    conversation_id="cnv-1",
                    reason="first",
                    foundation=moved(B, None, 0, 0),
                ),
                RefuseIntent(agent_id=A, post_id="p-1"),
                RefuseIntent(agent_id=B, post_id="p-2"),  # not open: left as it is
            ]
        )
        await cluster.store.apply(
            [SetAsideRow(agent_id=A, conversation_id="cnv-1", reason="second")]
        )
        rows = await cluster.store.conversation_rows("cnv-1")
        assert {agent: (row.depth, set_aside_of(row)) for agent, row in rows.items()} == {
            A: (1, "first"),
            B: (0, "first"),
        }
        states = await cluster.store.intent_states(["p-1", "p-2"])
        assert {post: state for _, post, state, _ in states} == {
            "p-1": IntentState.REFUSED,
            "p-2": IntentState.COMPLETED,
        }
        assert await cluster.store.open_intents_of("cnv-1") == []
        with pytest.raises(ConstraintViolation, match="stale unit"):
            await cluster.store.apply([moved(A, "rh-2", 2, 1)])  # set aside: no head moves


async def test_set_aside_rows_and_refusals_are_refused_by_every_store_outside_a_cluster(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    for write in (
        SetAsideRow(agent_id=A, conversation_id="cnv-1", reason="r"),
        RefuseIntent(agent_id=A, post_id="p-1"),
    ):
        async with opened(postgres_server.create_database()) as network:
            with pytest.raises(ConstraintViolation, match="cluster"):
                await network.apply([write])
        with pytest.raises(ConstraintViolation, match="cluster"):
            await MemoryStore().apply([write])
        sqlite = await SqliteStore.open(tmp_path / f"{type(write).__name__}.db")
        try:
            with pytest.raises(ConstraintViolation, match="cluster"):
                await sqlite.apply([write])
        finally:
            await sqlite.close()


def set_aside_of(row: ConversationRow) -> str | None:
    """The reason a cluster read says the member's row was set aside (cluster.md §5.4)."""
    assert isinstance(row, StoredConversation)
    return row.set_aside

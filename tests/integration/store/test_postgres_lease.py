"""Owners and leases in one PostgreSQL database (engine.md §8 Exclusive ownership): a
second daemon claiming an owner is refused, owners see only their own agents, and a daemon
whose lease was taken stops writing."""

from __future__ import annotations

import psycopg
import pytest

from gateway.store.errors import ClusterModeMismatch, StoreFailed, StoreLeaseHeld, StoreLeaseLost
from gateway.store.postgres import LeaseState, PostgresStore
from gateway.store.postgres.connection import ConnectSettings, advisory_key
from gateway.store.postgres.lease import Lease
from gateway.store.records import PutCursor, PutToken
from gateway.store.writer import CommitWriterState
from tests.integration.store.postgres_support import (
    FatalRecorder,
    database_sql,
    identity,
    inbox_item,
    opened,
    session_pids,
    terminate_sessions,
)
from tests.servers import PostgresServer
from tests.support import eventually

A = "agt_AAAAAAAAAAAAAAAAAAAAAA"
B = "agt_BBBBBBBBBBBBBBBBBBBBBB"
OWNER = "daemon-a"
LOCK_SESSION = f"harness-lease:{OWNER}"
NO_RETAKE = 60.0
"""A lease retry interval longer than any test: the dropped lock is not taken again."""


async def claim_when_free(dsn: str, owner: str = OWNER) -> PostgresStore:
    """Open `owner` once the previous holder's lock is gone (a terminated session takes a
    moment to release it)."""

    async def attempt() -> PostgresStore | None:
        try:
            return await PostgresStore.open(dsn, owner=owner)
        except StoreLeaseHeld:
            return None

    store = await eventually(attempt, lambda found: found is not None)
    assert store is not None
    return store


async def lease_state(store: PostgresStore) -> LeaseState:
    return store.lease_state


async def test_a_second_daemon_claiming_the_same_owner_is_refused_naming_the_holder(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    async with opened(dsn, holder="run_1 host-a pid 100") as first:
        with pytest.raises(StoreLeaseHeld, match="run_1 host-a pid 100") as refused:
            await PostgresStore.open(dsn, owner=OWNER, holder="run_2 host-b pid 200")
        assert refused.value.owner == OWNER
        assert refused.value.holder == "run_1 host-a pid 100"
        # The refused daemon left nothing behind: the first still owns and writes.
        await first.apply([identity(A, "alice")])
        assert [row.agent_name for row in await first.identities()] == ["alice"]
        assert await session_pids(postgres_server, "harness-lease:daemon-a")


async def test_another_owner_on_the_same_database_opens_and_sees_only_its_own_agents(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    async with opened(dsn, owner="daemon-a") as first, opened(dsn, owner="daemon-b") as second:
        await first.apply(
            [
                identity(A, "alice"),
                PutToken(token_digest="da", agent_id=A, created_at="t"),
                PutCursor(subscription="main", cursor=b"a"),
                inbox_item(A, 1, "ta"),
            ]
        )
        await second.apply(
            [
                identity(B, "alice"),  # names are per daemon, as in one SQLite file each
                PutToken(token_digest="db", agent_id=B, created_at="t"),
                PutCursor(subscription="main", cursor=b"b"),
                inbox_item(B, 1, "tb"),
            ]
        )
        assert [row.agent_id for row in await first.identities()] == [A]
        assert [row.agent_id for row in await second.identities()] == [B]
        assert await first.token("da") == (A, False)
        assert await first.token("db") is None
        assert await second.token("db") == (B, False)
        assert await first.cursor("main") == b"a"
        assert await second.cursor("main") == b"b"
        assert set(await first.unread_summary()) == {A}
        assert set(await second.unread_summary()) == {B}
        assert first.local_instance_id != second.local_instance_id


async def test_after_the_holder_closes_the_owner_is_claimed_with_a_higher_fence(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    async with opened(dsn) as first:
        await first.apply([identity(A, "alice")])
        fence, instance = first.fence, first.local_instance_id
    async with opened(dsn) as second:
        assert second.fence == fence + 1
        assert second.local_instance_id == instance  # minted once per owner
        assert [row.agent_name for row in await second.identities()] == ["alice"]
        await second.apply([inbox_item(A, 1, "t1")])


async def test_a_daemon_whose_lease_was_taken_stops_writing(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    fatal = FatalRecorder()
    async with opened(dsn, on_fatal=fatal, lease_retry_interval=NO_RETAKE) as first:
        await first.apply([identity(A, "alice")])
        assert await terminate_sessions(postgres_server, LOCK_SESSION) == 1
        second = await claim_when_free(dsn)
        try:
            assert second.fence == first.fence + 1
            with pytest.raises(StoreLeaseLost) as lost:
                await first.apply([inbox_item(A, 1, "from-the-old-holder")])
            assert lost.value.found == second.fence
            assert len(fatal.errors) == 1
            assert isinstance(fatal.errors[0], StoreLeaseLost)
            assert first.writer_state is CommitWriterState.FAILED
            with pytest.raises(StoreFailed):
                await first.apply([inbox_item(A, 2, "later")])
            # Nothing of the old holder's was written; the new holder writes on.
            assert await second.unread(A, 0, 10) == []
            await second.apply([inbox_item(A, 1, "from-the-new-holder")])
            assert [row.token for row in await second.unread(A, 0, 10)] == ["from-the-new-holder"]
        finally:
            await second.close()
    assert len(fatal.errors) == 1


async def test_a_dropped_lock_found_with_a_moved_fence_is_lost(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    fatal = FatalRecorder()
    async with opened(dsn, on_fatal=fatal, lease_retry_interval=0.5) as first:
        assert await terminate_sessions(postgres_server, LOCK_SESSION) == 1
        # A claimer takes the lock as soon as the old session has let go of it...
        claimer = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        try:

            async def take_lock() -> bool:
                cursor = await claimer.execute(
                    "SELECT pg_try_advisory_lock(%s)", (advisory_key(f"harness-lease:{OWNER}"),)
                )
                row = await cursor.fetchone()
                return bool(row and row[0])

            await eventually(take_lock, interval=0.005)
            # ... while it holds the lock with the old fence, the old holder keeps trying ...
            await eventually(
                lambda: lease_state(first), lambda state: state is LeaseState.RECONNECTING
            )
            # ... then it moves the fence and lets go: the old holder finds the lease taken.
            await claimer.execute("UPDATE leases SET fence = fence + 1 WHERE owner = %s", (OWNER,))
        finally:
            await claimer.close()
        await eventually(lambda: lease_state(first), lambda state: state is LeaseState.LOST)
        assert [type(error) for error in fatal.errors] == [StoreLeaseLost]
        assert first.writer_state is CommitWriterState.FAILED
        with pytest.raises(StoreFailed):
            await first.apply([identity(A, "alice")])


async def test_a_lock_connection_that_drops_with_nobody_claiming_is_retaken_and_writes_go_on(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    fatal = FatalRecorder()
    async with opened(dsn, on_fatal=fatal, lease_retry_interval=0.05) as first:
        (before,) = await session_pids(postgres_server, LOCK_SESSION)
        assert await terminate_sessions(postgres_server, LOCK_SESSION) == 1
        # Writes go on under the fence check while the lock is being taken again.
        await first.apply([identity(A, "alice")])

        async def lock_sessions() -> list[int]:
            return await session_pids(postgres_server, LOCK_SESSION)

        (after,) = await eventually(
            lock_sessions, lambda pids: len(pids) == 1 and pids[0] != before
        )
        assert after != before
        await eventually(lambda: lease_state(first), lambda state: state is LeaseState.HELD)
        await first.apply([inbox_item(A, 1, "t1")])
        assert [row.token for row in await first.unread(A, 0, 10)] == ["t1"]
        with pytest.raises(StoreLeaseHeld):
            await PostgresStore.open(dsn, owner=OWNER)
    assert fatal.errors == []


async def test_a_lease_taken_after_the_database_moved_into_a_cluster_is_refused_writing_nothing(
    postgres_server: PostgresServer,
) -> None:
    # A daemon whose schema check ran just before `migrate --cluster` committed reaches its
    # lease after the move (cluster.md §12.2): it must not start writing into the cluster.
    dsn = postgres_server.create_database()
    async with opened(dsn):
        pass
    database_sql(
        postgres_server,
        dsn,
        "INSERT INTO harness_meta (key, value) VALUES ('mode', 'cluster') "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    fences = database_sql(postgres_server, dsn, "SELECT owner || '=' || fence FROM leases")
    settings = ConnectSettings.parse(dsn, owner=OWNER)
    with pytest.raises(ClusterModeMismatch, match="--cluster"):
        await Lease.acquire(settings, holder="late", mint_instance=lambda: "unused")
    assert database_sql(postgres_server, dsn, "SELECT owner || '=' || fence FROM leases") == fences
    # The refused lock session was closed: its backend goes within moments.
    await eventually(lambda: session_pids(postgres_server, LOCK_SESSION), lambda pids: not pids)

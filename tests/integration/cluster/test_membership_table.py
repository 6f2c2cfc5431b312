"""The membership tables on real PostgreSQL (cluster.md §3.1, §3.2, §3.5, §9.6): incarnations
fence, claims race safely, a dead holder is fenced before its partitions move, and a live one is
never claimed from."""

from __future__ import annotations

import asyncio
import contextlib

import psycopg
import pytest

from gateway.store.postgres.membership import (
    PartitionCountMismatch,
    PostgresMembershipTable,
    create_partitions,
    group_fence,
    read_last_group,
    release_statement,
)
from tests.integration.cluster.membership_support import (
    connect,
    holders,
    membership_database,
)
from tests.servers import PostgresServer
from tests.support import eventually

LONG_TTL = 60.0
"""A TTL no test outlives: every replica that joined counts as alive."""
SHORT_TTL = 0.3
"""A TTL a silent replica outlives within a test."""
RACE_ROUNDS = 25


async def fence_rows(dsn: str, replica_id: str, incarnation: int, group: int) -> int:
    """Run `GROUP_FENCE` as a writer's group would, in its own committed transaction."""
    connection = await connect(dsn)
    try:
        async with connection.transaction():
            sql, parameters = group_fence(replica_id, incarnation, group)
            cursor = await connection.execute(sql, parameters)
            return len(await cursor.fetchall())
    finally:
        await connection.close()


async def test_create_partitions_is_idempotent_and_refuses_another_count(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, 16)
    connection = await connect(dsn)
    try:
        await create_partitions(connection, 16)
        with pytest.raises(PartitionCountMismatch) as refused:
            await create_partitions(connection, 32)
        assert (refused.value.found, refused.value.wanted) == (16, 32)
        with pytest.raises(PartitionCountMismatch):
            await create_partitions(connection, 8)
    finally:
        await connection.close()
    assert sorted(await holders(dsn)) == list(range(16))


async def test_rejoining_gives_a_new_incarnation_and_the_old_one_is_fenced_out(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, 4)
    async with PostgresMembershipTable.for_dsn(dsn, replica_id="r") as table:
        first = await table.join("r", "r:1")
        assert await fence_rows(dsn, "r", first.incarnation, 5) == 1
        second = await table.join("r", "r:2")
        assert second.incarnation > first.incarnation
        # The old incarnation's group, beat and ambiguous-COMMIT check all match nothing.
        assert await fence_rows(dsn, "r", first.incarnation, 6) == 0
        assert await table.beat("r", first.incarnation) is None
        assert await table.beat("r", second.incarnation) is not None
        connection = await connect(dsn)
        try:
            assert await read_last_group(connection, "r", first.incarnation) is None
            assert await read_last_group(connection, "r", second.incarnation) == 0
            assert await fence_rows(dsn, "r", second.incarnation, 7) == 1
            assert await read_last_group(connection, "r", second.incarnation) == 7
        finally:
            await connection.close()


async def test_two_replicas_racing_to_claim_one_partition_commit_exactly_one_claim(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, 4)
    async with (
        PostgresMembershipTable.for_dsn(dsn, replica_id="a") as a,
        PostgresMembershipTable.for_dsn(dsn, replica_id="b") as b,
    ):
        ia = (await a.join("a", "a:1")).incarnation
        ib = (await b.join("b", "b:1")).incarnation
        for epoch in range(1, RACE_ROUNDS + 1):
            got_a, got_b = await asyncio.gather(
                a.claim("a", ia, [2], LONG_TTL), b.claim("b", ib, [2], LONG_TTL)
            )
            # One claim committed, one epoch up; the other matched nothing.
            assert sorted([got_a, got_b], key=len) == [{}, {2: epoch}]
            winner, table, incarnation = ("a", a, ia) if got_a else ("b", b, ib)
            assert (await holders(dsn))[2] == (winner, incarnation, epoch)
            assert await table.release(2, winner, incarnation)
        assert (await holders(dsn))[2] == (None, None, RACE_ROUNDS)


async def test_racing_claimers_of_a_dead_holders_partition_fence_it_once_and_one_claim_commits(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, 4)
    async with (
        PostgresMembershipTable.for_dsn(dsn, replica_id="dead") as dead,
        PostgresMembershipTable.for_dsn(dsn, replica_id="a") as a,
        PostgresMembershipTable.for_dsn(dsn, replica_id="b") as b,
    ):
        i_dead = (await dead.join("dead", "dead:1")).incarnation
        assert await dead.claim("dead", i_dead, [0, 1], LONG_TTL) == {0: 1, 1: 1}
        ia = (await a.join("a", "a:1")).incarnation
        ib = (await b.join("b", "b:1")).incarnation

        async def dead_is_stale() -> bool:
            view = await a.read_view(SHORT_TTL)
            return not view.replicas["dead"].live

        await eventually(dead_is_stale)
        # a and b keep beating; only `dead` is silent past the short TTL.
        await a.beat("a", ia)
        await b.beat("b", ib)
        got_a, got_b = await asyncio.gather(
            a.claim("a", ia, [0, 1], SHORT_TTL), b.claim("b", ib, [0, 1], SHORT_TTL)
        )
        # Each partition went to exactly one claimer, one epoch up.
        assert sorted([*got_a, *got_b]) == [0, 1]
        assert {**got_a, **got_b} == {0: 2, 1: 2}
        view = await a.read_view(LONG_TTL)
        assert view.replicas["dead"].fenced
        assert not view.replicas["a"].fenced
        assert not view.replicas["b"].fenced
        # The fenced incarnation writes nothing more.
        assert await fence_rows(dsn, "dead", i_dead, 1) == 0
        assert await dead.beat("dead", i_dead) is None


async def test_a_live_holder_is_never_claimed_from(postgres_server: PostgresServer) -> None:
    dsn = await membership_database(postgres_server, 4)
    async with (
        PostgresMembershipTable.for_dsn(dsn, replica_id="a") as a,
        PostgresMembershipTable.for_dsn(dsn, replica_id="b") as b,
    ):
        ia = (await a.join("a", "a:1")).incarnation
        ib = (await b.join("b", "b:1")).incarnation
        assert await a.claim("a", ia, [0, 1, 2, 3], LONG_TTL) == dict.fromkeys(range(4), 1)
        assert await b.claim("b", ib, [0, 1, 2, 3], LONG_TTL) == {}
        assert {row[0] for row in (await holders(dsn)).values()} == {"a"}
        assert not (await b.read_view(LONG_TTL)).replicas["a"].fenced
        # Released through the holder, the partition goes to the next claimer.
        assert await a.release(3, "a", ia)
        assert await b.claim("b", ib, [0, 1, 2, 3], LONG_TTL) == {3: 2}


async def test_a_fenced_claimer_claims_nothing(postgres_server: PostgresServer) -> None:
    dsn = await membership_database(postgres_server, 2)
    async with PostgresMembershipTable.for_dsn(dsn, replica_id="a") as a:
        first = (await a.join("a", "a:1")).incarnation
        await a.join("a", "a:1")
        assert await a.claim("a", first, [0, 1], LONG_TTL) == {}
        assert all(row == (None, None, 0) for row in (await holders(dsn)).values())


async def test_a_claim_waits_for_the_holders_group_in_flight_and_its_beat_keeps_it_alive(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, 2)
    ttl = 1.5
    async with (
        PostgresMembershipTable.for_dsn(dsn, replica_id="slow") as slow,
        PostgresMembershipTable.for_dsn(dsn, replica_id="a") as a,
    ):
        i_slow = (await slow.join("slow", "slow:1")).incarnation
        assert await slow.claim("slow", i_slow, [0], LONG_TTL) == {0: 1}
        ia = (await a.join("a", "a:1")).incarnation

        async def slow_is_stale() -> bool:
            return not (await a.read_view(ttl)).replicas["slow"].live

        await eventually(slow_is_stale)
        await a.beat("a", ia)
        writer = await connect(dsn)
        try:
            # The slow replica's group is in flight: its fence statement holds the row lock.
            await writer.execute("BEGIN")
            sql, parameters = group_fence("slow", i_slow, 1)
            assert len(await (await writer.execute(sql, parameters)).fetchall()) == 1
            claim = asyncio.ensure_future(a.claim("a", ia, [0], ttl))
            try:
                await eventually(lambda: claim_waits_on_a_lock(postgres_server, dsn))
                assert not claim.done()
                await writer.execute("COMMIT")
                # The group's beat, committed, shows the holder alive: nothing is claimed.
                assert await claim == {}
            finally:
                claim.cancel()
        finally:
            await writer.close()
        assert (await holders(dsn))[0] == ("slow", i_slow, 1)
        assert not (await a.read_view(LONG_TTL)).replicas["slow"].fenced


async def test_a_claim_fences_a_dead_holder_whose_group_in_flight_rolls_back(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, 2)
    async with (
        PostgresMembershipTable.for_dsn(dsn, replica_id="dead") as dead,
        PostgresMembershipTable.for_dsn(dsn, replica_id="a") as a,
    ):
        i_dead = (await dead.join("dead", "dead:1")).incarnation
        assert await dead.claim("dead", i_dead, [0], LONG_TTL) == {0: 1}
        ia = (await a.join("a", "a:1")).incarnation

        async def dead_is_stale() -> bool:
            return not (await a.read_view(SHORT_TTL)).replicas["dead"].live

        await eventually(dead_is_stale)
        await a.beat("a", ia)
        writer = await connect(dsn)
        try:
            await writer.execute("BEGIN")
            sql, parameters = group_fence("dead", i_dead, 1)
            await writer.execute(sql, parameters)
            # The group also writes its partition: a release in flight, say.
            release_sql, release_parameters = release_statement(0, "dead", i_dead)
            await writer.execute(release_sql, release_parameters)
            claim = asyncio.ensure_future(a.claim("a", ia, [0, 1], SHORT_TTL))
            try:
                await eventually(lambda: claim_waits_on_a_lock(postgres_server, dsn))
                assert not claim.done()
                await writer.execute("ROLLBACK")
                # Rolled back, the group left the stale beat: the holder is fenced, and both
                # partitions (the one its group was releasing among them) are claimed.
                assert await claim == {0: 2, 1: 1}
            finally:
                claim.cancel()
        finally:
            await writer.close()
        assert (await a.read_view(LONG_TTL)).replicas["dead"].fenced
        assert await fence_rows(dsn, "dead", i_dead, 2) == 0


async def claim_waits_on_a_lock(server: PostgresServer, dsn: str) -> bool:
    """Whether the claim session of replica `a` is waiting for a row lock."""
    out = await asyncio.to_thread(
        server.sql,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'harness-claim:a' "
        "AND wait_event_type = 'Lock'",
        dsn.rsplit("/", 1)[1],
    )
    return int(out.strip() or 0) > 0


async def test_rows_of_silent_replicas_holding_nothing_are_deleted_and_their_ids_rejoin_higher(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, 2)
    async with (
        PostgresMembershipTable.for_dsn(dsn, replica_id="gone") as gone,
        PostgresMembershipTable.for_dsn(dsn, replica_id="holding") as holding,
        PostgresMembershipTable.for_dsn(dsn, replica_id="a") as a,
    ):
        i_gone = (await gone.join("gone", "gone:1")).incarnation
        i_holding = (await holding.join("holding", "holding:1")).incarnation
        assert await holding.claim("holding", i_holding, [0], LONG_TTL) == {0: 1}
        ia = (await a.join("a", "a:1")).incarnation

        async def both_silent() -> bool:
            view = await a.read_view(SHORT_TTL)
            return not view.replicas["gone"].live and not view.replicas["holding"].live

        await eventually(both_silent)
        await a.beat("a", ia)
        assert await a.forget_gone(SHORT_TTL) == 1
        assert set((await a.read_view(LONG_TTL)).replicas) == {"a", "holding"}
        # The id comes back with an incarnation no earlier one of it had.
        again = await gone.join("gone", "gone:2")
        assert again.incarnation > max(i_gone, i_holding, ia)
        assert await gone.beat("gone", i_gone) is None


async def test_a_claim_ends_the_pipeline_a_stopped_holder_left_open_and_claims_at_its_next_pass(
    postgres_server: PostgresServer,
) -> None:
    # A writer stopped (SIGSTOP) inside a pipeline: the server has run its BEGIN and fence and
    # waits for the pipeline's Sync, so `idle_in_transaction_session_timeout` never fires and
    # the row locks stay until someone ends the session (cluster.md §3.1).
    dsn = await membership_database(postgres_server, 2)
    async with (
        PostgresMembershipTable.for_dsn(dsn, replica_id="stopped") as stopped,
        PostgresMembershipTable.for_dsn(dsn, replica_id="a") as a,
    ):
        i_stopped = (await stopped.join("stopped", "stopped:1")).incarnation
        assert await stopped.claim("stopped", i_stopped, [0], LONG_TTL) == {0: 1}
        writer = await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, application_name="harness-writer:stopped"
        )
        try:
            await writer.execute("SET idle_in_transaction_session_timeout = '500ms'")
            pid = writer.info.backend_pid
            fence_sql, fence_parameters = group_fence("stopped", i_stopped, 1)
            release_sql, release_parameters = release_statement(0, "stopped", i_stopped)
            pgconn = writer.pgconn
            pgconn.enter_pipeline_mode()
            for sql, parameters in (
                ("BEGIN", ()),
                (fence_sql, fence_parameters),
                (release_sql, release_parameters),
            ):
                pgconn.send_query_params(
                    sql.replace("%s", "{}")
                    .format(*(f"${n + 1}" for n in range(len(parameters))))
                    .encode(),
                    [str(value).encode() for value in parameters],
                )
            pgconn.send_flush_request()
            assert pgconn.flush() == 0  # a few hundred bytes: all sent at once
            ia = (await a.join("a", "a:1")).incarnation

            async def stopped_is_dead() -> bool:
                await a.beat("a", ia)
                return not (await a.read_view(SHORT_TTL)).replicas["stopped"].live

            await eventually(stopped_is_dead)
            # The locks outlive the idle timeout: the server is not idle in that transaction.
            assert await backend_alive(postgres_server, dsn, pid)
            # The first pass waits on the stopped group's lock, gives way, and ends its session.
            assert await a.claim("a", ia, [0, 1], SHORT_TTL) == {}
            assert not await backend_alive(postgres_server, dsn, pid)
            # The next pass fences the stopped incarnation and claims both partitions.
            assert await a.claim("a", ia, [0, 1], SHORT_TTL) == {0: 2, 1: 1}
        finally:
            with contextlib.suppress(psycopg.Error, OSError):
                await writer.close()
        assert (await a.read_view(LONG_TTL)).replicas["stopped"].fenced


async def test_a_claim_that_gives_way_ends_only_the_dead_holders_old_transactions(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, 2)
    ttl = 1.0
    async with (
        PostgresMembershipTable.for_dsn(dsn, replica_id="live") as live,
        PostgresMembershipTable.for_dsn(dsn, replica_id="dead") as dead,
        PostgresMembershipTable.for_dsn(dsn, replica_id="a") as a,
    ):
        i_live = (await live.join("live", "live:1")).incarnation
        i_dead = (await dead.join("dead", "dead:1")).incarnation
        assert await live.claim("live", i_live, [0], LONG_TTL) == {0: 1}
        assert await dead.claim("dead", i_dead, [1], LONG_TTL) == {1: 1}
        ia = (await a.join("a", "a:1")).incarnation
        sessions = {
            name: await psycopg.AsyncConnection.connect(
                dsn, autocommit=True, application_name=f"harness-writer:{name}"
            )
            for name in ("live", "dead")
        }

        async def keep_beating() -> None:
            while True:
                await live.beat("live", i_live)
                await asyncio.sleep(0.1)

        beating = asyncio.ensure_future(keep_beating())
        try:
            # Both hold an old transaction; only the dead one's locks its replica row.
            await sessions["live"].execute("BEGIN")
            await sessions["live"].execute(
                "SELECT 1 FROM partitions WHERE partition = 0 FOR UPDATE"
            )
            await sessions["dead"].execute("BEGIN")
            sql, parameters = group_fence("dead", i_dead, 1)
            await sessions["dead"].execute(sql, parameters)
            pids = {name: session.info.backend_pid for name, session in sessions.items()}

            async def dead_is_dead_and_both_transactions_old() -> bool:
                view = await a.read_view(ttl)
                return (
                    not view.replicas["dead"].live
                    and await transactions_older_than(postgres_server, dsn, ttl) == 2
                )

            await eventually(dead_is_dead_and_both_transactions_old)
            assert await a.claim("a", ia, [0, 1], ttl) == {}
            assert not await backend_alive(postgres_server, dsn, pids["dead"])
            assert await backend_alive(postgres_server, dsn, pids["live"])
            assert await a.claim("a", ia, [0, 1], ttl) == {1: 2}
        finally:
            beating.cancel()
            for session in sessions.values():
                with contextlib.suppress(psycopg.Error, OSError):
                    await session.close()
        assert (await holders(dsn))[0] == ("live", i_live, 1)


async def transactions_older_than(server: PostgresServer, dsn: str, seconds: float) -> int:
    """How many `harness-writer:` sessions hold a transaction older than `seconds`."""
    out = await asyncio.to_thread(
        server.sql,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'harness-writer:%' "
        f"AND xact_start < now() - interval '{float(seconds)} seconds'",
        dsn.rsplit("/", 1)[1],
    )
    return int(out.strip() or 0)


async def backend_alive(server: PostgresServer, dsn: str, pid: int) -> bool:
    """Whether the server still runs the backend `pid`."""
    out = await asyncio.to_thread(
        server.sql,
        f"SELECT count(*) FROM pg_stat_activity WHERE pid = {int(pid)}",
        dsn.rsplit("/", 1)[1],
    )
    return int(out.strip() or 0) > 0

"""Group commit on PostgreSQL and what an outage does to it (engine.md §8, §6): concurrent
applies share transactions, a failing unit fails alone, a batch costs a few round trips,
and a stopped server fails writes and reads for a while without stopping the daemon."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from gateway.store.errors import CommitAmbiguous, ConstraintViolation, StoreUnavailable
from gateway.store.postgres import LeaseState
from gateway.store.writer import CommitWriterSettings, CommitWriterState
from tests.integration.store.postgres_support import (
    FatalRecorder,
    Proxy,
    identity,
    inbox_item,
    opened,
)
from tests.servers import PostgresServer
from tests.support import eventually
from tests.unit.store.support import RecordingObserver

A = "agt_AAAAAAAAAAAAAAAAAAAAAA"
GATHER = CommitWriterSettings(commit_delay=0.05)
"""A window long enough that concurrent applies surely share a group."""

OUTAGE_BOUND = 10.0
"""Seconds a write or read may take to fail while the server is down."""


async def test_concurrent_applies_share_transactions_and_a_violating_unit_fails_alone(
    postgres_server: PostgresServer,
) -> None:
    observer = RecordingObserver()
    async with opened(
        postgres_server.create_database(), writer_settings=GATHER, observer=observer
    ) as store:
        await store.apply([identity(A, "alice")])
        # Units 0..49, with unit 10 and unit 49 (the last) reusing unit 0's token.
        tokens = [f"t{seq}" for seq in range(50)]
        tokens[10] = tokens[49] = "t0"
        results = await asyncio.gather(
            *(store.apply([inbox_item(A, seq + 1, token)]) for seq, token in enumerate(tokens)),
            return_exceptions=True,
        )
        failed = [index for index, result in enumerate(results) if result is not None]
        assert failed == [10, 49]
        assert all(isinstance(results[index], ConstraintViolation) for index in failed)
        kept = [row.token for row in await store.unread(A, 0, 100)]
        assert kept == [token for index, token in enumerate(tokens) if index not in failed]
        # 50 applies after the first: a handful of transactions, not 50.
        assert len(observer.batch_sizes) <= 4
        assert sum(observer.batch_sizes) == 51


async def test_a_failing_write_in_a_unit_rolls_back_the_whole_unit(
    postgres_server: PostgresServer,
) -> None:
    async with opened(postgres_server.create_database(), writer_settings=GATHER) as store:
        await store.apply([identity(A, "alice"), inbox_item(A, 1, "t1")])
        first, second = await asyncio.gather(
            store.apply([inbox_item(A, 2, "t2"), inbox_item(A, 3, "t1")]),
            store.apply([inbox_item(A, 4, "t4")]),
            return_exceptions=True,
        )
        assert isinstance(first, ConstraintViolation)
        assert "inbox" in str(first)
        assert second is None
        assert [row.token for row in await store.unread(A, 0, 10)] == ["t1", "t4"]


async def test_a_text_holding_a_nul_is_refused_before_it_is_queued(
    postgres_server: PostgresServer,
) -> None:
    async with opened(postgres_server.create_database()) as store:
        with pytest.raises(ConstraintViolation, match="NUL"):
            await store.apply([identity(A, "al\x00ice")])
        assert await store.identities() == []


# --- round trips -----------------------------------------------------------------------


@pytest.fixture
async def proxy(postgres_server: PostgresServer) -> AsyncIterator[Proxy]:
    started = Proxy(target_port=postgres_server.port)
    await started.start()
    try:
        yield started
    finally:
        await started.close()


async def test_a_group_of_100_units_costs_a_few_round_trips_not_one_per_unit(
    postgres_server: PostgresServer, proxy: Proxy
) -> None:
    dsn = proxy.dsn(postgres_server.create_database())
    observer = RecordingObserver()
    settings = CommitWriterSettings(commit_delay=0.2)
    async with opened(dsn, writer_settings=settings, observer=observer) as store:
        await store.apply([identity(A, "alice")])
        before = proxy.writer_round_trips
        await asyncio.gather(
            *(store.apply([inbox_item(A, seq, f"t{seq}")]) for seq in range(1, 101))
        )
        assert observer.batch_sizes[-1] == 100
        trips = proxy.writer_round_trips - before
        # Pipelined units and the COMMIT: about 2 round trips (one per unit would be 100+).
        assert 1 <= trips < 6, f"a group of 100 units took {trips} round trips"
        assert len(await store.unread(A, 0, 200)) == 100


async def test_a_commit_whose_answer_is_lost_is_ambiguous_and_the_next_group_reconnects(
    postgres_server: PostgresServer, proxy: Proxy
) -> None:
    fatal = FatalRecorder()
    async with opened(proxy.dsn(postgres_server.create_database()), on_fatal=fatal) as store:
        await store.apply([identity(A, "alice")])
        proxy.cut_writer_commit = True
        with pytest.raises(CommitAmbiguous):
            await store.apply([inbox_item(A, 1, "t1")])
        assert store.writer_state is CommitWriterState.RUNNING
        assert fatal.errors == []
        await store.apply([inbox_item(A, 2, "t2")])
        # The cut COMMIT never reached the server: "may or may not" was "not" this time.
        assert [row.token for row in await store.unread(A, 0, 10)] == ["t2"]
    assert fatal.errors == []


# --- outage ----------------------------------------------------------------------------


async def test_a_stopped_server_fails_writes_and_reads_and_service_resumes_when_it_is_back(
    postgres_server: PostgresServer,
) -> None:
    fatal = FatalRecorder()
    dsn = postgres_server.create_database()
    async with opened(dsn, on_fatal=fatal, lease_retry_interval=0.1) as store:
        await store.apply([identity(A, "alice"), inbox_item(A, 1, "t1")])
        try:
            await asyncio.to_thread(postgres_server.stop)
            started = time.monotonic()
            with pytest.raises((StoreUnavailable, CommitAmbiguous)):
                async with asyncio.timeout(OUTAGE_BOUND):
                    await store.apply([inbox_item(A, 2, "t2")])
            with pytest.raises(StoreUnavailable):
                async with asyncio.timeout(OUTAGE_BOUND):
                    await store.unread(A, 0, 10)
            assert time.monotonic() - started < OUTAGE_BOUND
            assert fatal.errors == []
            assert store.writer_state is CommitWriterState.RUNNING
        finally:
            await asyncio.to_thread(postgres_server.start_again)

        seq = iter(range(3, 1000))

        async def write_one() -> bool:
            try:
                await store.apply([inbox_item(A, next(seq), "later")])
            except StoreUnavailable:
                return False
            return True

        async def read_all() -> list[str] | None:
            try:
                return [row.token for row in await store.unread(A, 0, 10)]
            except StoreUnavailable:
                return None

        await eventually(write_one, within=30)
        tokens = await eventually(read_all, lambda found: found is not None, within=30)
        assert tokens is not None
        assert tokens[0] == "t1"  # committed before the outage: kept
        assert tokens[-1] == "later"
        assert "t2" not in tokens  # refused while down: not committed

        async def lease_state() -> LeaseState:
            return store.lease_state

        await eventually(lease_state, lambda state: state is LeaseState.HELD, within=30)
    assert fatal.errors == []

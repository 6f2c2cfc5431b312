from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.store import (
    CommitAmbiguous,
    CommitWriter,
    CommitWriterSettings,
    CommitWriterState,
    StoreClosed,
    StoreError,
    StoreFailed,
)
from gateway.store.writer import UNITS_PER_SLICE, WRITER_THREAD_NAME
from tests.unit.store.support import (
    NOTES_DDL,
    Gate,
    RecordingObserver,
    UnitFailed,
    add_note,
    add_note_then_raise,
    assert_eventually,
    read_notes_file,
    start_writer,
)

QUICK = CommitWriterSettings(units_on_writer_thread=True, commit_delay=0.0)


class FaultyConnection(sqlite3.Connection):
    """A connection whose chosen statement fails as a full or broken disk would."""

    fail_on: str | None = None

    def execute(self, sql: str, parameters: object = (), /) -> sqlite3.Cursor:
        if sql == self.fail_on:
            error = sqlite3.OperationalError("disk I/O error")
            error.sqlite_errorcode = sqlite3.SQLITE_IOERR
            raise error
        return super().execute(sql, parameters)  # type: ignore[arg-type]


def faulty_connect(path: Path, made: list[FaultyConnection]) -> Callable[[], sqlite3.Connection]:
    def connect() -> sqlite3.Connection:
        connection = sqlite3.connect(
            path, isolation_level=None, factory=FaultyConnection, check_same_thread=False
        )
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(NOTES_DDL)
        made.append(connection)
        return connection

    return connect


def state_of(writer: CommitWriter) -> CommitWriterState:
    return writer.state


async def hold_writer(writer: CommitWriter) -> tuple[Gate, asyncio.Task[str]]:
    """Occupy the writer thread with a gated unit, so later submits queue up."""
    gate = Gate()
    task = asyncio.create_task(writer.submit(gate.unit))
    await gate.wait_entered()
    return gate, task


def submit_all(
    writer: CommitWriter, units: list[Callable[[sqlite3.Connection], object]]
) -> list[asyncio.Task[object]]:
    return [asyncio.create_task(writer.submit(unit)) for unit in units]


async def test_concurrent_submits_commit_in_fewer_groups_and_each_caller_gets_its_own_result(
    tmp_path: Path,
) -> None:
    observer = RecordingObserver()
    writer = await start_writer(tmp_path / "store.db", observer=observer)
    try:
        results = await asyncio.gather(
            *(writer.submit(add_note(f"agent-{i % 7}", i, f"note {i}")) for i in range(300))
        )
    finally:
        await writer.close()

    assert sum(observer.batch_sizes) == 300
    assert len(observer.batch_sizes) < 300
    assert len(observer.waits) == 300
    rows = sqlite3.connect(tmp_path / "store.db")
    try:
        by_rowid = dict(rows.execute("SELECT rowid, seq FROM notes").fetchall())
    finally:
        rows.close()
    assert [by_rowid[rowid] for rowid in results] == list(range(300))


async def test_units_run_in_submission_order_and_see_earlier_units_of_their_group(
    tmp_path: Path,
) -> None:
    writer = await start_writer(tmp_path / "store.db")
    try:
        gate, held = await hold_writer(writer)
        first = asyncio.create_task(writer.submit(add_note("a", 1, "first")))
        count = asyncio.create_task(
            writer.submit(lambda c: c.execute("SELECT count(*) FROM notes").fetchone()[0])
        )
        gate.opened.set()
        assert await held == "gate"
        await first
        assert await count == 2
    finally:
        await writer.close()


async def test_a_raising_unit_rolls_back_only_its_own_writes_while_its_group_commits(
    tmp_path: Path,
) -> None:
    observer = RecordingObserver()
    writer = await start_writer(tmp_path / "store.db", observer=observer)
    try:
        gate, held = await hold_writer(writer)
        tasks = submit_all(
            writer,
            [
                add_note("a", 1, "kept"),
                add_note_then_raise("a", 2),
                add_note("a", 3, "kept too"),
                add_note("a", 1, "duplicate key"),
            ],
        )
        gate.opened.set()
        await held
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await writer.close()

    assert isinstance(outcomes[0], int)
    assert isinstance(outcomes[1], UnitFailed)
    assert isinstance(outcomes[2], int)
    assert isinstance(outcomes[3], sqlite3.IntegrityError)
    assert observer.batch_sizes == [1, 4]
    assert writer.failure is None
    assert read_notes_file(tmp_path / "store.db") == [
        ("a", 1, "kept"),
        ("a", 3, "kept too"),
        ("gate", 0, "held"),
    ]


async def test_units_run_on_one_writer_thread_while_the_event_loop_keeps_running(
    tmp_path: Path,
) -> None:
    writer = await start_writer(tmp_path / "store.db")
    try:
        gate, held = await hold_writer(writer)
        # The loop is free: this coroutine runs while the unit blocks the writer thread.
        assert not held.done()
        names = await asyncio.gather(
            *(writer.submit(lambda _c: threading.current_thread().name) for _ in range(3)),
            asyncio.to_thread(gate.opened.set),
        )
        await held
    finally:
        await writer.close()

    assert gate.thread_name is not None
    assert gate.thread_name.startswith(WRITER_THREAD_NAME)
    assert set(names[:3]) == {gate.thread_name}
    assert gate.thread_name != threading.current_thread().name


async def test_a_full_queue_makes_submitters_wait_instead_of_growing(tmp_path: Path) -> None:
    observer = RecordingObserver()
    settings = CommitWriterSettings(
        units_on_writer_thread=True, commit_delay=0.0, max_batch=1, queue_capacity=2
    )
    writer = await start_writer(tmp_path / "store.db", settings=settings, observer=observer)
    try:
        gate, held = await hold_writer(writer)
        tasks = submit_all(writer, [add_note("a", seq, "x") for seq in range(1, 6)])
        await assert_eventually(lambda: writer.queue_depth == 2, what="the queue filled")
        for _ in range(10):
            await asyncio.sleep(0)
        assert writer.queue_depth == 2
        assert not any(task.done() for task in tasks)
        gate.opened.set()
        await held
        results = await asyncio.gather(*tasks)
    finally:
        await writer.close()

    assert len(set(results)) == 5
    assert max(observer.depths) <= 2
    assert len(read_notes_file(tmp_path / "store.db")) == 6


async def test_max_batch_caps_the_units_in_one_group(tmp_path: Path) -> None:
    observer = RecordingObserver()
    settings = CommitWriterSettings(units_on_writer_thread=True, commit_delay=0.0, max_batch=4)
    writer = await start_writer(tmp_path / "store.db", settings=settings, observer=observer)
    try:
        gate, held = await hold_writer(writer)
        tasks = submit_all(writer, [add_note("a", seq, "x") for seq in range(10)])
        await assert_eventually(lambda: writer.queue_depth == 10, what="all queued")
        gate.opened.set()
        await held
        await asyncio.gather(*tasks)
    finally:
        await writer.close()

    assert observer.batch_sizes == [1, 4, 4, 2]


async def test_close_commits_every_queued_unit_before_closing(tmp_path: Path) -> None:
    writer = await start_writer(tmp_path / "store.db", settings=QUICK)
    gate, held = await hold_writer(writer)
    tasks = submit_all(writer, [add_note("a", seq, "queued") for seq in range(20)])
    await assert_eventually(lambda: writer.queue_depth == 20, what="all queued")
    closing = asyncio.create_task(writer.close())
    await assert_eventually(lambda: writer.state is CommitWriterState.CLOSING, what="closing")
    with pytest.raises(StoreClosed, match="CLOSING"):
        await writer.submit(add_note("late", 1, "refused"))
    gate.opened.set()
    await closing
    await held
    await asyncio.gather(*tasks)

    assert writer.state is CommitWriterState.CLOSED
    assert len(read_notes_file(tmp_path / "store.db")) == 21


async def test_submit_after_close_raises_store_closed_and_close_is_idempotent(
    tmp_path: Path,
) -> None:
    writer = await start_writer(tmp_path / "store.db")
    await asyncio.gather(writer.close(), writer.close())
    await writer.close()

    with pytest.raises(StoreClosed) as refused:
        await writer.submit(add_note("a", 1, "x"))
    assert refused.value.state == "CLOSED"
    assert "CLOSED" in str(refused.value)
    assert writer.state is CommitWriterState.CLOSED


async def test_a_cancelled_submit_whose_unit_is_queued_still_commits(tmp_path: Path) -> None:
    writer = await start_writer(tmp_path / "store.db", settings=QUICK)
    try:
        gate, held = await hold_writer(writer)
        (task,) = submit_all(writer, [add_note("a", 1, "cancelled caller")])
        await assert_eventually(lambda: writer.queue_depth == 1, what="queued")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.opened.set()
        await held
    finally:
        await writer.close()

    assert ("a", 1, "cancelled caller") in read_notes_file(tmp_path / "store.db")


async def test_a_failed_commit_makes_the_group_ambiguous_fails_the_writer_and_calls_on_fatal(
    tmp_path: Path,
) -> None:
    made: list[FaultyConnection] = []
    fatal: list[BaseException] = []
    observer = RecordingObserver()
    writer = await start_writer(
        tmp_path / "store.db",
        connect=faulty_connect(tmp_path / "store.db", made),
        observer=observer,
        on_fatal=fatal.append,
        settings=QUICK,
    )
    try:
        gate, held = await hold_writer(writer)
        # The held group's COMMIT will fail; later groups must not run at all.
        made[0].fail_on = "COMMIT"
        tasks = submit_all(writer, [add_note("a", 1, "after"), add_note("a", 2, "after")])
        gate.opened.set()
        with pytest.raises(CommitAmbiguous) as ambiguous:
            await held
        refused = await asyncio.gather(*tasks, return_exceptions=True)

        assert isinstance(ambiguous.value.__cause__, sqlite3.OperationalError)
        assert writer.state is CommitWriterState.FAILED
        assert len(fatal) == 1
        assert fatal[0] is writer.failure is ambiguous.value.__cause__
        assert observer.failures == 1
        assert all(isinstance(outcome, StoreFailed) for outcome in refused)
        with pytest.raises(StoreFailed, match="FAILED"):
            await writer.submit(add_note("a", 3, "refused"))
    finally:
        await writer.close()

    # Read through a call: mypy would keep `writer.state` narrowed to FAILED.
    assert state_of(writer) is CommitWriterState.CLOSED
    assert writer.failure is fatal[0]
    assert read_notes_file(tmp_path / "store.db") == []


async def test_a_failed_commit_keeps_the_own_error_of_a_unit_that_raised(tmp_path: Path) -> None:
    made: list[FaultyConnection] = []
    writer = await start_writer(
        tmp_path / "store.db", connect=faulty_connect(tmp_path / "store.db", made)
    )

    def arm_then_add(connection: sqlite3.Connection) -> int:
        # Armed from inside the group, so only this group's COMMIT fails.
        made[0].fail_on = "COMMIT"
        return add_note("a", 1, "x")(connection)

    try:
        outcomes = await asyncio.gather(
            writer.submit(arm_then_add),
            writer.submit(add_note_then_raise("a", 2)),
            return_exceptions=True,
        )
    finally:
        await writer.close()

    assert isinstance(outcomes[0], CommitAmbiguous)
    assert isinstance(outcomes[1], UnitFailed)


async def test_a_failed_begin_fails_the_group_as_not_committed_and_the_writer(
    tmp_path: Path,
) -> None:
    made: list[FaultyConnection] = []
    fatal: list[BaseException] = []
    writer = await start_writer(
        tmp_path / "store.db",
        connect=faulty_connect(tmp_path / "store.db", made),
        on_fatal=fatal.append,
    )
    try:
        made[0].fail_on = "BEGIN IMMEDIATE"
        outcomes = await asyncio.gather(
            writer.submit(add_note("a", 1, "x")),
            writer.submit(add_note("a", 2, "y")),
            return_exceptions=True,
        )
    finally:
        await writer.close()

    assert all(isinstance(outcome, StoreFailed) for outcome in outcomes)
    assert len(fatal) == 1
    assert isinstance(fatal[0], sqlite3.OperationalError)


async def test_a_unit_that_ends_the_transaction_itself_puts_its_group_in_doubt_and_fails_the_writer(
    tmp_path: Path,
) -> None:
    fatal: list[BaseException] = []
    writer = await start_writer(tmp_path / "store.db", on_fatal=fatal.append)
    try:
        gate, held = await hold_writer(writer)
        tasks = submit_all(
            writer,
            [
                add_note("a", 1, "before"),
                lambda connection: connection.execute("COMMIT"),
                add_note("a", 3, "after"),
            ],
        )
        await assert_eventually(lambda: writer.queue_depth == 3, what="queued")
        gate.opened.set()
        await held
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await writer.close()

    assert isinstance(outcomes[0], CommitAmbiguous)
    assert isinstance(outcomes[1], CommitAmbiguous)
    assert isinstance(outcomes[2], StoreFailed)
    assert len(fatal) == 1
    assert isinstance(fatal[0], StoreError)
    # The unit's own COMMIT made the earlier unit durable: "in doubt" was the honest answer.
    assert read_notes_file(tmp_path / "store.db") == [("a", 1, "before"), ("gate", 0, "held")]


async def test_a_disk_error_raised_inside_a_unit_fails_its_whole_group_and_the_writer(
    tmp_path: Path,
) -> None:
    fatal: list[BaseException] = []
    disk_full = sqlite3.OperationalError("database or disk is full")
    disk_full.sqlite_errorcode = sqlite3.SQLITE_FULL

    def fill_disk(connection: sqlite3.Connection) -> None:
        connection.execute("INSERT INTO notes (agent, seq, body) VALUES ('a', 2, 'x')")
        raise disk_full

    writer = await start_writer(tmp_path / "store.db", on_fatal=fatal.append)
    try:
        gate, held = await hold_writer(writer)
        tasks = submit_all(writer, [add_note("a", 1, "x"), fill_disk, add_note("a", 3, "x")])
        await assert_eventually(lambda: writer.queue_depth == 3, what="queued")
        gate.opened.set()
        await held
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await writer.close()

    assert all(isinstance(outcome, StoreFailed) for outcome in outcomes)
    assert isinstance(outcomes[1], StoreFailed)
    assert outcomes[1].__cause__ is disk_full
    assert fatal == [disk_full]
    assert read_notes_file(tmp_path / "store.db") == [("gate", 0, "held")]


async def test_an_observer_that_raises_never_stops_writes(tmp_path: Path) -> None:
    class BrokenObserver(RecordingObserver):
        def on_commit(self, batch_size: int, commit_seconds: float) -> None:
            raise RuntimeError("metrics defect")

    writer = await start_writer(tmp_path / "store.db", observer=BrokenObserver())
    try:
        assert await writer.submit(lambda _c: "done") == "done"
        assert await writer.submit(lambda _c: "again") == "again"
    finally:
        await writer.close()
    assert writer.failure is None


async def test_a_connect_that_raises_propagates_and_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    def refuse() -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    with pytest.raises(sqlite3.OperationalError, match="unable to open"):
        await CommitWriter.start(refuse)


@pytest.mark.parametrize(
    "settings",
    [
        {"commit_delay": -0.001},
        {"max_batch": 0},
        {"queue_capacity": 0},
    ],
)
def test_commit_writer_settings_refuse_values_that_cannot_work(settings: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        CommitWriterSettings(**settings)  # type: ignore[arg-type]


async def test_the_writer_is_an_async_context_manager_that_closes(tmp_path: Path) -> None:
    async with await start_writer(tmp_path / "store.db") as writer:
        await writer.submit(add_note("a", 1, "x"))
    assert writer.state is CommitWriterState.CLOSED
    assert read_notes_file(tmp_path / "store.db") == [("a", 1, "x")]


# --- units on the event loop's thread (the daemon's setting, engine.md §8.4) -------------------

ON_LOOP = CommitWriterSettings(commit_delay=0.0)


class ThreadRecordingConnection(sqlite3.Connection):
    """A connection that notes the thread of every COMMIT."""

    commit_threads: list[str]

    def execute(self, sql: str, parameters: object = (), /) -> sqlite3.Cursor:
        if sql == "COMMIT":
            self.commit_threads.append(threading.current_thread().name)
        return super().execute(sql, parameters)  # type: ignore[arg-type]


async def test_units_run_on_the_loop_thread_and_only_the_commit_on_the_writer_thread(
    tmp_path: Path,
) -> None:
    made: list[ThreadRecordingConnection] = []

    def connect() -> sqlite3.Connection:
        connection = sqlite3.connect(
            tmp_path / "store.db",
            isolation_level=None,
            factory=ThreadRecordingConnection,
            check_same_thread=False,
        )
        connection.commit_threads = []
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(NOTES_DDL)
        made.append(connection)
        return connection

    writer = await start_writer(tmp_path / "store.db", settings=ON_LOOP, connect=connect)
    try:
        names = await asyncio.gather(
            *(writer.submit(lambda _c: threading.current_thread().name) for _ in range(3)),
            writer.submit(add_note("a", 1, "kept")),
        )
    finally:
        await writer.close()

    assert set(names[:3]) == {threading.current_thread().name}
    assert made[0].commit_threads
    assert all(name.startswith(WRITER_THREAD_NAME) for name in made[0].commit_threads)
    assert read_notes_file(tmp_path / "store.db") == [("a", 1, "kept")]


async def test_on_the_loop_a_raising_unit_rolls_back_only_its_own_writes(tmp_path: Path) -> None:
    writer = await start_writer(tmp_path / "store.db", settings=ON_LOOP)
    try:
        outcomes = await asyncio.gather(
            writer.submit(add_note("a", 1, "kept")),
            writer.submit(add_note_then_raise("a", 2)),
            writer.submit(add_note("a", 3, "kept too")),
            return_exceptions=True,
        )
    finally:
        await writer.close()

    assert isinstance(outcomes[1], UnitFailed)
    assert read_notes_file(tmp_path / "store.db") == [("a", 1, "kept"), ("a", 3, "kept too")]


async def test_on_the_loop_a_failed_commit_makes_the_group_ambiguous_and_fails_the_writer(
    tmp_path: Path,
) -> None:
    made: list[FaultyConnection] = []
    fatal: list[BaseException] = []
    writer = await start_writer(
        tmp_path / "store.db",
        settings=ON_LOOP,
        on_fatal=fatal.append,
        connect=faulty_connect(tmp_path / "store.db", made),
    )
    made[0].fail_on = "COMMIT"
    try:
        with pytest.raises(CommitAmbiguous):
            await writer.submit(add_note("a", 1, "doubt"))
    finally:
        await writer.close()

    assert writer.failure is not None
    assert len(fatal) == 1


async def test_a_group_larger_than_a_slice_lets_other_tasks_run_between_its_slices(
    tmp_path: Path,
) -> None:
    writer = await start_writer(tmp_path / "store.db", settings=ON_LOOP)
    ran: list[int] = []
    ticks: list[int] = []

    def unit(seq: int) -> Callable[[sqlite3.Connection], int]:
        def run(connection: sqlite3.Connection) -> int:
            ran.append(seq)
            return add_note("a", seq, "n")(connection)

        return run

    async def ticker() -> None:
        while len(ran) < 3 * UNITS_PER_SLICE:
            ticks.append(len(ran))
            await asyncio.sleep(0)

    try:
        # Queued before the loop takes them, so they form one group.
        submits = [
            asyncio.ensure_future(writer.submit(unit(i))) for i in range(3 * UNITS_PER_SLICE)
        ]
        await asyncio.gather(ticker(), *submits)
    finally:
        await writer.close()

    # The ticker ran while the group was part way through its units.
    assert any(0 < tick < 3 * UNITS_PER_SLICE for tick in ticks)
    assert len(read_notes_file(tmp_path / "store.db")) == 3 * UNITS_PER_SLICE


async def test_a_lone_unit_commits_without_waiting_the_window_and_a_burst_after_it_shares_a_group(
    tmp_path: Path,
) -> None:
    observer = RecordingObserver()
    # A window far longer than the test's bound: waiting it would fail the test.
    settings = CommitWriterSettings(commit_delay=60.0)
    writer = await start_writer(tmp_path / "store.db", settings=settings, observer=observer)
    try:
        await asyncio.wait_for(writer.submit(add_note("a", 1, "alone")), 5.0)
        # Queued before the loop takes the first: one group, committed at once after a
        # group of one.
        await asyncio.wait_for(
            asyncio.gather(*(writer.submit(add_note("a", seq, "burst")) for seq in range(2, 5))),
            5.0,
        )
    finally:
        await asyncio.wait_for(writer.close(), 5.0)

    assert observer.batch_sizes == [1, 3]
    assert len(read_notes_file(tmp_path / "store.db")) == 4

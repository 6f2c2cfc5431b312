"""Group commit: one writer, one write connection, one thread (engine.md §8).

`writer = await CommitWriter.start(connect)` opens the write connection on the writer's
own thread; `await writer.submit(unit)` queues a *unit*, a sync function
`unit(connection) -> T` that makes one atomic change. The commit loop takes every unit
queued within `commit_delay` (at most `max_batch`), runs them in submission order on the
writer thread, each in its own SAVEPOINT of one `BEGIN IMMEDIATE` transaction, COMMITs once
(one sync for the group) and then answers every caller. Callers may rely on:

- `submit` returns the unit's result only after its group's COMMIT succeeded: durable.
- A unit sees the writes of the units before it in its group.
- A unit that raises has its own writes rolled back to its savepoint; its exception reaches
  its caller as it is (never wrapped) and the rest of the group still commits.
- A failed COMMIT fails every unit that had returned with `CommitAmbiguous` ("may have
  committed"); units that raised keep their own exception (their writes were rolled back).
- An error not attributable to one unit (BEGIN or COMMIT failing, a savepoint that cannot
  be rolled back, an SQLite I/O, disk-full or corruption error, a transaction that ended
  before COMMIT) marks the writer FAILED and calls `on_fatal(cause)` once, after the
  group's callers are answered: the composition root stops the daemon rather than let
  memory and disk diverge. The group's units get `StoreFailed` (rolled back) or
  `CommitAmbiguous` (if the transaction ended outside the writer's control); later
  submits get `StoreFailed`.
- The queue is bounded (`queue_capacity`): `submit` waits for room, it never grows memory.
- Cancelling a `submit` whose unit is already queued does not withdraw the unit: it still
  runs and may commit.
- `close()` stops accepting (`StoreClosed`), commits everything already accepted, closes
  the connection; it is idempotent.

Units must return quickly (everyone in the group waits for the slowest), must not COMMIT,
ROLLBACK or RELEASE what they did not open (the writer treats an ended transaction as
fatal), and must not keep the connection after they return. The event loop never runs
SQLite: the commit loop is the one task the writer owns, and all blocking work happens on
its single thread.

`GroupCommitter` is the backend-free half: the bounded queue, the grouping window, the
answers, the FAILED state and the close order. `CommitWriter` runs its groups on the SQLite
thread; the PostgreSQL store (`gateway.store.postgres`) runs them on its network connection.
A backend decides only how one group runs (`_run_group`, reporting a `GroupReport`) and
how its connection is released (`_release`).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import enum
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future as ThreadFuture
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final, Generic, TypeAlias, TypeVar, assert_never, cast

from gateway.closing import AsyncClosing
from gateway.store.errors import CommitAmbiguous, StoreClosed, StoreError, StoreFailed
from gateway.store.observer import NullStoreObserver, StoreObserver

logger = logging.getLogger(__name__)

T = TypeVar("T")
UnitT = TypeVar("UnitT")
"""One unit as a backend runs it: a function of an SQLite connection, or the PostgreSQL
store's planned statements."""

COMMIT_DELAY: Final = 0.002
"""Seconds the commit loop waits after taking a unit, gathering more into its group, when
the last group had more than one unit (a lone writer commits at once: waiting the window
for nobody cost a lone sender half its send latency under `make bench`).

engine.md §8 and operations.md §7 (`HARNESS_COMMIT_DELAY`): long enough for the writes of
one burst to share a sync, short next to a sync on most disks."""

COMMIT_MAX_BATCH: Final = 512
"""Most units in one group commit (`HARNESS_COMMIT_MAX_BATCH`).

Bounds how long one transaction holds the write lock and how much a failed COMMIT puts
in doubt; at ~100 rows a transaction SQLite already reaches ~150,000 rows/s (§8)."""

COMMIT_QUEUE_CAPACITY: Final = 4096
"""Units that may wait for a commit before `submit` itself waits: the bound that keeps memory flat.

Eight full groups: enough to absorb a burst while one group syncs, small enough that a
stalled disk stops writers instead of growing memory."""

WRITER_THREAD_NAME: Final = "harness-store-writer"
"""Name prefix of the writer's one thread, for thread dumps."""

FATAL_SQLITE_ERRORS: Final = frozenset(
    {
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_NOTADB,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_PROTOCOL,
        sqlite3.SQLITE_READONLY,
    }
)
"""Primary SQLite result codes that describe the disk or the process, not one unit.

A unit that raises one of these fails its whole group and the writer (engine.md §8: I/O
error, disk full, failed sync)."""

_SAVEPOINT: Final = "harness_unit"
"""The savepoint around each unit; released or rolled back before the next one opens."""

FatalHandler: TypeAlias = Callable[[BaseException], None]
"""Called once, on the event loop, when the writer becomes FAILED; given the cause."""


class CommitWriterState(enum.Enum):
    """Where a `CommitWriter` is in its life."""

    RUNNING = "running"
    """Accepting and committing units."""
    CLOSING = "closing"
    """`close()` was called: refusing new units, committing those already accepted."""
    FAILED = "failed"
    """A fatal store error happened: refusing every unit, queued ones included."""
    CLOSED = "closed"
    """The loop has ended and the connection is closed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitWriterSettings:
    """How the commit writer groups units; defaults are the module constants."""

    commit_delay: float = COMMIT_DELAY
    """Seconds to gather units after the first one of a group (0 gathers only those
    already queued)."""
    max_batch: int = COMMIT_MAX_BATCH
    """Most units in one group."""
    queue_capacity: int = COMMIT_QUEUE_CAPACITY
    """Most units waiting for a commit; `submit` waits for room beyond it."""
    units_on_writer_thread: bool = False
    """Run the units on the writer thread too, not only the COMMIT (engine.md §8.4): what
    tests that hold a unit there use; the daemon runs them on the event loop's thread."""

    def __post_init__(self) -> None:
        if self.commit_delay < 0:
            raise ValueError(f"commit_delay must be >= 0 seconds, got {self.commit_delay}")
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {self.max_batch}")
        if self.queue_capacity < 1:
            raise ValueError(f"queue_capacity must be >= 1, got {self.queue_capacity}")


@dataclass(slots=True, kw_only=True, eq=False)
class _WriteRequest(Generic[UnitT]):
    """One submitted unit and the future its caller awaits."""

    unit: UnitT
    future: asyncio.Future[object]
    submitted_at: float


@dataclass(frozen=True, slots=True)
class UnitReturned:
    """A unit that ran and returned `value`; its caller gets it once the group commits."""

    value: object


@dataclass(frozen=True, slots=True)
class UnitRaised:
    """A unit whose caller gets `error`: its own exception, or its group's failure."""

    error: BaseException


UnitOutcome: TypeAlias = UnitReturned | UnitRaised


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupReport:
    """What a backend did with one group, one outcome per unit in order."""

    outcomes: Sequence[UnitOutcome]
    seconds: float
    """From BEGIN to the end of COMMIT (`StoreObserver.on_commit`)."""
    committed: bool
    fatal: BaseException | None
    """An error that must stop the writer (FAILED, then `on_fatal`), or None."""


class GroupCommitter(AsyncClosing, Generic[UnitT]):
    """The queue, the grouping window and the answers of group commit, for any backend.

    A subclass runs one group in `_run_group` and releases its connection in `_release`;
    it starts the commit loop with `_start_loop()` once its connection is open, and gives
    callers a typed `submit` over `_submit`. Everything the module docstring promises
    about queueing, answers, FAILED and close lives here.
    """

    def __init__(
        self,
        *,
        settings: CommitWriterSettings,
        observer: StoreObserver,
        on_fatal: FatalHandler | None,
    ) -> None:
        self._settings = settings
        self._observer = observer
        self._on_fatal = on_fatal
        self._state = CommitWriterState.RUNNING
        self._failure: BaseException | None = None
        # None is a wake-up: it gets the loop past `get()` to notice a state change.
        self._queue: asyncio.Queue[_WriteRequest[UnitT] | None] = asyncio.Queue(
            maxsize=settings.queue_capacity
        )
        # Submitters past the state check whose unit is not queued yet (waiting for room);
        # the loop does not stop while any remain, so each of them is answered.
        self._admitting = 0
        self._group: list[_WriteRequest[UnitT]] = []
        self._group_started = False
        self._last_group = 1
        """Units in the last group: the window is waited only after a group of several."""
        self._close_started = False
        self._closed = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None

    @abc.abstractmethod
    async def _run_group(self, units: Sequence[UnitT]) -> GroupReport:
        """Run `units` in one transaction; one outcome per unit, in order."""

    @abc.abstractmethod
    async def _release(self) -> None:
        """Close the connection: after the loop ended, or was cancelled mid-group."""

    def _start_loop(self) -> None:
        self._loop_task = asyncio.get_running_loop().create_task(
            self._commit_loop(), name="harness-store-commit-loop"
        )

    @property
    def state(self) -> CommitWriterState:
        """The writer's current state."""
        return self._state

    @property
    def failure(self) -> BaseException | None:
        """The cause that made the writer FAILED, kept after close; None if it never failed."""
        return self._failure

    @property
    def queue_depth(self) -> int:
        """Units waiting for the next group (the `harness_store_queue_depth` gauge)."""
        return self._queue.qsize()

    async def _submit(self, unit: UnitT) -> object:
        """Queue `unit` and return its outcome once its group has committed (see
        `CommitWriter.submit` for what each failure means)."""
        self._check_accepting()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        request = _WriteRequest(unit=unit, future=future, submitted_at=loop.time())
        self._admitting += 1
        try:
            await self._queue.put(request)
        finally:
            self._admitting -= 1
            if self._admitting == 0 and self._state is not CommitWriterState.RUNNING:
                self._wake()
        self._notify(self._observer.on_queue_depth, self._queue.qsize())
        return await future

    async def close(self) -> None:
        """Commit everything accepted, then release the connection.

        Idempotent; a concurrent call waits for the first to finish. Units submitted after
        this starts get `StoreClosed`.
        """
        if self._close_started:
            await self._closed.wait()
            return
        self._close_started = True
        if self._state is CommitWriterState.RUNNING:
            self._state = CommitWriterState.CLOSING
        self._wake()
        try:
            if self._loop_task is not None:
                await self._loop_task
        finally:
            try:
                await self._release()
            finally:
                self._state = CommitWriterState.CLOSED
                self._closed.set()
                logger.debug("store writer closed")

    def _check_accepting(self) -> None:
        match self._state:
            case CommitWriterState.RUNNING:
                return
            case CommitWriterState.FAILED:
                raise StoreFailed("the store writer is FAILED; no write is accepted") from (
                    self._failure
                )
            case CommitWriterState.CLOSING | CommitWriterState.CLOSED:
                raise StoreClosed("the store writer", self._state.name)
            case _:
                assert_never(self._state)

    def _wake(self) -> None:
        # A full queue means the loop has work and checks the state after it anyway.
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    def _drained(self) -> bool:
        return (
            self._state is not CommitWriterState.RUNNING
            and self._queue.empty()
            and self._admitting == 0
        )

    async def _commit_loop(self) -> None:
        try:
            while not self._drained():
                request = await self._queue.get()
                if request is None:
                    continue
                try:
                    await self._collect_group(request)
                    self._notify(self._observer.on_queue_depth, self._queue.qsize())
                    if self._state is CommitWriterState.FAILED:
                        self._refuse_group()
                    else:
                        await self._commit_group()
                except Exception as error:  # a defect here must not leave callers waiting
                    logger.exception("store commit loop failed")
                    self._abort_group(error)
                    self._fail(error)
        except asyncio.CancelledError:
            self._abort_group(None)
            self._refuse_queued()
            raise

    async def _collect_group(self, first: _WriteRequest[UnitT]) -> None:
        group = self._group = [first]
        limit = self._settings.max_batch
        # The window gathers units only while writers are concurrent: after a group of one,
        # a lone writer (one agent sending, one acknowledgment) commits at once instead of
        # waiting the whole window for units that are not coming (engine.md §8.4).
        if (
            self._state is CommitWriterState.RUNNING
            and self._last_group > 1
            and self._queue.qsize() < limit - 1
        ):
            await asyncio.sleep(self._settings.commit_delay)
        while len(group) < limit:
            try:
                request = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                break
            if request is not None:
                group.append(request)
        self._last_group = len(group)

    async def _commit_group(self) -> None:
        self._group_started = True
        report = await self._run_group([r.unit for r in self._group])
        self._answer_group(report)

    def _answer_group(self, report: GroupReport) -> None:
        group, self._group, self._group_started = self._group, [], False
        now = asyncio.get_running_loop().time()
        for request, outcome in zip(group, report.outcomes, strict=True):
            match outcome:
                case UnitReturned(value=value):
                    if not request.future.done():
                        request.future.set_result(value)
                case UnitRaised(error=error):
                    if not request.future.done():
                        request.future.set_exception(error)
                case _:
                    assert_never(outcome)
            self._notify(self._observer.on_write_done, now - request.submitted_at)
        if report.committed:
            self._notify(self._observer.on_commit, len(group), report.seconds)
        else:
            self._notify(self._observer.on_commit_failure)
        if report.fatal is not None:
            self._fail(report.fatal)

    def _refuse_group(self) -> None:
        group, self._group = self._group, []
        for request in group:
            if not request.future.done():
                error = StoreFailed("the store writer is FAILED; this write was not run")
                error.__cause__ = self._failure
                request.future.set_exception(error)

    def _abort_group(self, cause: BaseException | None) -> None:
        """Answer the callers of the group in hand when the loop cannot finish it."""
        group, started = self._group, self._group_started
        self._group, self._group_started = [], False
        for request in group:
            if request.future.done():
                continue
            error: StoreError
            if started:
                # A group handed to the backend may still commit there.
                error = CommitAmbiguous("the store writer stopped while this write's group ran")
            elif cause is None:
                error = StoreClosed("the store writer", "CLOSED")
            else:
                error = StoreFailed("the store writer failed before this write's group ran")
            error.__cause__ = cause
            request.future.set_exception(error)

    def _refuse_queued(self) -> None:
        """Answer every caller still queued when the loop is cancelled."""
        while not self._queue.empty():
            request = self._queue.get_nowait()
            if request is not None and not request.future.done():
                request.future.set_exception(StoreClosed("the store writer", "CLOSED"))

    def _fail(self, cause: BaseException) -> None:
        """Mark the writer FAILED and call `on_fatal` once; later calls change nothing."""
        if self._state in (CommitWriterState.FAILED, CommitWriterState.CLOSED):
            return
        self._state = CommitWriterState.FAILED
        self._failure = cause
        logger.error(
            "store writer failed; refusing further writes cause=%s",
            type(cause).__name__,
            exc_info=cause,
        )
        if self._on_fatal is not None:
            try:
                self._on_fatal(cause)
            except Exception:  # the handler's defect must not kill the loop that answers callers
                logger.exception("store on_fatal handler failed")

    @staticmethod
    def _notify(method: Callable[..., None], *args: object) -> None:
        try:
            method(*args)
        except Exception:  # a metrics defect must never stop writes
            logger.exception("store observer failed")


class CommitWriter(GroupCommitter[Callable[[sqlite3.Connection], object]]):
    """Owns the SQLite write connection and commits submitted units in groups.

    Obtain one with `await CommitWriter.start(connect)`; an async context manager whose
    exit calls `close()`.
    """

    def __init__(
        self,
        connection: sqlite3.Connection,
        executor: ThreadPoolExecutor,
        *,
        settings: CommitWriterSettings,
        observer: StoreObserver,
        on_fatal: FatalHandler | None,
    ) -> None:
        """Wrap an open connection and its thread; use `CommitWriter.start` instead."""
        super().__init__(settings=settings, observer=observer, on_fatal=on_fatal)
        self._connection = connection
        self._executor = executor

    @classmethod
    async def start(
        cls,
        connect: Callable[[], sqlite3.Connection],
        *,
        settings: CommitWriterSettings | None = None,
        observer: StoreObserver | None = None,
        on_fatal: FatalHandler | None = None,
    ) -> CommitWriter:
        """Run `connect()` on a new writer thread and start the commit loop.

        `connect` returns a connection in autocommit mode (`isolation_level=None`); it runs
        on the writer thread, which alone uses the connection from then on, so the
        connection needs no `check_same_thread=False`. Whatever `connect` raises propagates
        and nothing is left running.
        """
        connection, executor = await connect_on_own_thread(connect, thread_name=WRITER_THREAD_NAME)
        writer = cls(
            connection,
            executor,
            settings=settings or CommitWriterSettings(),
            observer=observer or NullStoreObserver(),
            on_fatal=on_fatal,
        )
        writer._start_loop()
        return writer

    async def submit(self, unit: Callable[[sqlite3.Connection], T]) -> T:
        """Queue `unit` and return its result once its group has committed.

        Waits for room when the queue is full.

        Raises:
            StoreClosed: the writer is CLOSING or CLOSED; nothing was queued.
            StoreFailed: the writer is FAILED, or a fatal error abandoned the unit's group;
                it was not committed.
            CommitAmbiguous: the group's COMMIT failed or its transaction ended early;
                the unit's writes may or may not be durable.
            Exception: whatever `unit` raised, as it is; its writes were rolled back.
        """
        return cast(T, await self._submit(unit))

    async def _run_group(
        self, units: Sequence[Callable[[sqlite3.Connection], object]]
    ) -> GroupReport:
        loop = asyncio.get_running_loop()
        if self._settings.units_on_writer_thread:
            return await loop.run_in_executor(self._executor, _run_group, self._connection, units)
        # The units' statements run here, on the event loop's thread; only the COMMIT (the
        # sync, and any WAL checkpoint) goes to the writer thread. Each SQLite call releases
        # the GIL, and a thread taking it back waits for the busy loop thread: measured under
        # `make bench`, a group's units took 3-4x their CPU time on the writer thread
        # (engine.md §8.4).
        started = time.perf_counter()
        connection, total = self._connection, len(units)
        outcomes: list[UnitOutcome] = []
        failed = _begin(connection, total, started)
        for first in range(0, total, UNITS_PER_SLICE):
            if failed is not None:
                return failed
            if first:
                await asyncio.sleep(0)
            failed = _run_units(
                connection,
                units[first : first + UNITS_PER_SLICE],
                outcomes,
                total=total,
                started=started,
            )
        if failed is not None:
            return failed
        return await loop.run_in_executor(
            self._executor, _commit, connection, _Ran(outcomes, started)
        )

    async def _release(self) -> None:
        # The executor runs jobs in order, so the connection closes on its own thread
        # after any group still running there (if the loop was cancelled mid-group).
        try:
            await asyncio.wrap_future(self._executor.submit(self._connection.close))
        finally:
            # The thread is idle now; it exits on its own, so the loop never joins it.
            self._executor.shutdown(wait=False)


UNITS_PER_SLICE: Final = 64
"""Units run on the event loop between two chances for its other tasks to run: a full group
of large units must not hold the loop (a cluster replica's beats, streams) for long."""


@dataclass(frozen=True, slots=True)
class _Ran:
    """A group whose units ran inside its open transaction: its COMMIT is what remains."""

    outcomes: list[UnitOutcome]
    started: float


def _begin(connection: sqlite3.Connection, total: int, started: float) -> GroupReport | None:
    """BEGIN IMMEDIATE; the abandoned group's report if it failed."""
    try:
        connection.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as error:
        return _abandon(connection, [], total, error, started, unit_ran=False)
    return None


def _run_units(
    connection: sqlite3.Connection,
    units: Sequence[Callable[[sqlite3.Connection], object]],
    outcomes: list[UnitOutcome],
    *,
    total: int,
    started: float,
) -> GroupReport | None:
    """Run units of an open group, each in its own savepoint, appending their outcomes;
    the abandoned group's report if an error not attributable to one unit ended it."""
    for unit in units:
        try:
            connection.execute(f"SAVEPOINT {_SAVEPOINT}")
        except sqlite3.Error as error:
            return _abandon(connection, outcomes, total, error, started, unit_ran=False)
        try:
            value = unit(connection)
        except Exception as error:
            if not connection.in_transaction:
                cause = _transaction_ended(error)
                return _abandon(connection, outcomes, total, cause, started, unit_ran=True)
            if _is_environmental(error):
                return _abandon(connection, outcomes, total, error, started, unit_ran=True)
            try:
                connection.execute(f"ROLLBACK TO {_SAVEPOINT}")
                connection.execute(f"RELEASE {_SAVEPOINT}")
            except sqlite3.Error as rollback_error:
                return _abandon(connection, outcomes, total, rollback_error, started, unit_ran=True)
            outcomes.append(UnitRaised(error))
            continue
        if not connection.in_transaction:
            cause = _transaction_ended(None)
            return _abandon(connection, outcomes, total, cause, started, unit_ran=True)
        try:
            connection.execute(f"RELEASE {_SAVEPOINT}")
        except sqlite3.Error as error:
            return _abandon(connection, outcomes, total, error, started, unit_ran=True)
        outcomes.append(UnitReturned(value))
    return None


def _commit(connection: sqlite3.Connection, ran: _Ran) -> GroupReport:
    """COMMIT a group whose units ran: the one sync of the group."""
    try:
        connection.execute("COMMIT")
    except sqlite3.Error as error:
        _rollback_quietly(connection)
        settled: list[UnitOutcome] = [
            UnitRaised(_in_doubt(error)) if isinstance(outcome, UnitReturned) else outcome
            for outcome in ran.outcomes
        ]
        # A deferred constraint failing at COMMIT belongs to the group's units; anything
        # else at COMMIT is the disk or the process (engine.md §8).
        fatal = None if isinstance(error, sqlite3.IntegrityError) else error
        return GroupReport(
            outcomes=settled,
            seconds=time.perf_counter() - ran.started,
            committed=False,
            fatal=fatal,
        )
    return GroupReport(
        outcomes=ran.outcomes,
        seconds=time.perf_counter() - ran.started,
        committed=True,
        fatal=None,
    )


def _run_group(
    connection: sqlite3.Connection, units: Sequence[Callable[[sqlite3.Connection], object]]
) -> GroupReport:
    """Run one whole group on the calling thread: BEGIN, a savepoint per unit, one COMMIT."""
    started = time.perf_counter()
    outcomes: list[UnitOutcome] = []
    failed = _begin(connection, len(units), started) or _run_units(
        connection, units, outcomes, total=len(units), started=started
    )
    return failed or _commit(connection, _Ran(outcomes, started))


def _abandon(
    connection: sqlite3.Connection,
    finished: Sequence[UnitOutcome],
    total: int,
    cause: BaseException,
    started: float,
    *,
    unit_ran: bool,
) -> GroupReport:
    """Give up a group after a fatal error; `finished` are the units done before it."""
    # Our own statements never end the transaction before COMMIT; if it has ended, a unit
    # or SQLite ended it, and what the units before wrote may already be durable.
    in_doubt = not connection.in_transaction
    _rollback_quietly(connection)

    def ran_failure() -> StoreError:
        error: StoreError = (
            _in_doubt(cause)
            if in_doubt
            else StoreFailed("a fatal store error abandoned this write's group; not committed")
        )
        error.__cause__ = cause
        return error

    outcomes: list[UnitOutcome] = [
        UnitRaised(ran_failure()) if isinstance(outcome, UnitReturned) else outcome
        for outcome in finished
    ]
    if unit_ran:
        outcomes.append(UnitRaised(ran_failure()))
    while len(outcomes) < total:
        not_run = StoreFailed("a fatal store error abandoned this write's group before it ran")
        not_run.__cause__ = cause
        outcomes.append(UnitRaised(not_run))
    return GroupReport(
        outcomes=outcomes,
        seconds=time.perf_counter() - started,
        committed=False,
        fatal=cause,
    )


def _in_doubt(cause: BaseException) -> CommitAmbiguous:
    error = CommitAmbiguous("the group commit failed; this write may or may not be durable")
    error.__cause__ = cause
    return error


def _transaction_ended(error: BaseException | None) -> StoreError:
    ended = StoreError(
        "the group's transaction ended before its COMMIT "
        "(a unit ended it, or SQLite rolled it back after an error)"
    )
    ended.__cause__ = error
    return ended


def _is_environmental(error: BaseException) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return (
        isinstance(error, sqlite3.Error)
        and isinstance(code, int)
        and (code & 0xFF) in FATAL_SQLITE_ERRORS
    )


def _rollback_quietly(connection: sqlite3.Connection) -> None:
    if not connection.in_transaction:
        return
    try:
        connection.execute("ROLLBACK")
    except sqlite3.Error:
        # Already failing the group and the writer; an open transaction dies with the
        # connection, and nothing of it was committed.
        logger.warning("store rollback after a fatal error failed", exc_info=True)


async def connect_on_own_thread(
    connect: Callable[[], sqlite3.Connection], *, thread_name: str
) -> tuple[sqlite3.Connection, ThreadPoolExecutor]:
    """`connect()` run on a new one-thread executor, which alone uses the connection from
    then on. Whatever `connect` raises propagates, and nothing is left running."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
    job = executor.submit(connect)
    try:
        connection = await asyncio.wrap_future(job)
    except BaseException:
        # If we were cancelled while `connect` still ran, close what it opens, on its thread.
        executor.submit(_close_opened_connection, job)
        executor.shutdown(wait=False)
        raise
    return connection, executor


def _close_opened_connection(job: ThreadFuture[sqlite3.Connection]) -> None:
    """Close the connection a finished `connect` job produced, if it produced one.

    Submitted to the same single-thread executor after a `connect` job whose caller gave
    up, so it runs after that job, on the thread that owns the connection."""
    if not job.cancelled() and job.exception() is None:
        job.result().close()

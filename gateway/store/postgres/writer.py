"""Group commit on PostgreSQL: one writer task, one write connection (engine.md §8).

`PostgresWriter` is a `GroupCommitter` (gateway.store.writer): the same bounded queue,
grouping window (`commit_delay`, `max_batch`), answers, FAILED state and close order as
the SQLite `CommitWriter`. A unit is a `UnitPlan` (the statements of one `Store.apply`).
One group is one transaction, in two round trips when nothing fails:

1. in one pipeline: `BEGIN`, the fence (`WriterFence`), the group's record bodies, then per
   unit `SAVEPOINT`, its statements, `RELEASE`; then one sync;
2. `COMMIT`, once the fence was found to be ours.

The fence is the group's first statement: a network daemon's `LeaseFence` reads its owner's
lease (`FENCE_CHECK`, engine.md §8.7); a cluster replica's `IncarnationFence` numbers the group
and stamps it on its replica row (`GROUP_FENCE`, cluster.md §3.1), which matches no row once
the incarnation is fenced.

A cluster replica's writer, once guarded (`guard`), checks each `ScopedUnit` when its group
runs, in submission order (`gateway.store.postgres.held`, cluster.md §3.2): a unit writing as a
partition not held fails `PartitionNotHeld` without a statement sent, and the rest of the group
runs; a release unit gives its partitions up at its turn.

A unit that fails on its own (a unique, foreign-key or data error: `ConstraintViolation`)
is rolled back to its savepoint and only its caller fails; the units after it are sent
again in a new pipeline of the same transaction (one more round trip per failing unit).

Failures and what callers may rely on:

- The fence is not ours (another daemon claimed the lease; the replica's incarnation was
  fenced): the transaction is rolled back, every unit fails `StoreLeaseLost` (`StoreFenced`),
  the writer is FAILED and `on_fatal` is called.
- The server cannot be reached, the connection is lost, or the server fails the whole
  transaction before COMMIT (deadlock, full disk): every unit not failed on its own gets
  `StoreUnavailable` (definitely not committed). The writer is *not* FAILED: the
  connection is dropped and the next group connects again (bounded by the connect
  timeout), so service resumes when PostgreSQL does. SQLite's I/O errors are fatal
  because the disk is local and a failing disk does not come back; a network store's
  outage is expected and transient, and stopping the daemon would only turn it into a
  restart loop. The engine maps the failures (§6: `persistence-failed`,
  `delivery-pending`).
- COMMIT fails or its answer is lost: the units that had run get `CommitAmbiguous` (may
  or may not be durable); not fatal here either, the callers decide. A cluster replica
  resolves it instead (cluster.md §3.5): on a new connection it reads its row's `last_group`
  `FOR UPDATE` (waiting, within `RESOLVE_LOCK_TIMEOUT`, for the lost group's transaction to
  end; past it the old backend, whose pid was recorded at connect, is terminated and the
  row read again). The group's number there: the units committed and are answered so; a
  lower one: not committed (`StoreUnavailable`); the incarnation fenced: `StoreFenced`,
  fatal. Only when that read fails too do the units get `CommitAmbiguous`.
- Only errors that mean memory and the database may diverge call `on_fatal`: a lost lease or
  a fenced incarnation, and data corruption reported by the server (SQLSTATE XX001, XX002).
- Every round trip is bounded (`WRITE_TIMEOUT`); a stuck server counts as unreachable
  (or as an ambiguous COMMIT when the COMMIT was in flight).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Final, Protocol, cast

import psycopg
from psycopg.pq import TransactionStatus

from gateway.store.errors import (
    CommitAmbiguous,
    ConstraintViolation,
    PartitionNotHeld,
    StoreError,
    StoreFailed,
    StoreFenced,
    StoreLeaseLost,
    StoreUnavailable,
)
from gateway.store.observer import NullStoreObserver, StoreObserver
from gateway.store.postgres.connection import (
    WRITER_ROLE,
    Connection,
    ConnectSettings,
    is_connection_error,
    is_corruption,
)
from gateway.store.postgres.held import HeldPartitions, ScopedUnit
from gateway.store.postgres.membership import (
    WRITER_SESSION_SETTINGS,
    group_fence,
    read_last_group,
)
from gateway.store.postgres.tables import (
    FENCE_CHECK,
    INSERT_BODIES,
    Statement,
    UnitPlan,
    group_bodies,
)
from gateway.store.writer import (
    CommitWriterSettings,
    FatalHandler,
    GroupCommitter,
    GroupReport,
    UnitOutcome,
    UnitRaised,
    UnitReturned,
)

logger = logging.getLogger(__name__)

WRITE_TIMEOUT: Final = 15.0
"""Seconds one round trip of a group (its statements, or its COMMIT) may take.

Far above a healthy group's few milliseconds; below it a stuck server or a silent network
is only noticed by TCP keepalives (about 25 s)."""

RESOLVE_LOCK_TIMEOUT: Final = "2s"
"""How long the ambiguous-COMMIT read waits for the lost group's row lock (a PostgreSQL
interval) before it terminates the old backend and reads again (cluster.md §3.5).

A lost COMMIT usually ends within milliseconds; a backend whose client vanished holds its lock
until the server notices, which this bounds far below the lease TTL (6 s)."""

RESOLVE_ATTEMPTS: Final = 3
"""Reads of `last_group` after an ambiguous COMMIT, the old backend terminated between them;
after the last the units stay `CommitAmbiguous`."""

_SAVEPOINT: Final = "harness_unit"
_LOCAL_LOCK_TIMEOUT: Final = "SELECT set_config('lock_timeout', %s, true)"
_LOCK_NOT_AVAILABLE: Final = "55P03"


class WriterFence(Protocol):
    """The first statement of every group and what its answer must be (cluster.md §3.1 for
    a replica, engine.md §8.7 for an owner's lease)."""

    @property
    def session_settings(self) -> Sequence[Statement]:
        """Statements run on every new write connection."""
        ...

    def group_statement(self) -> Statement:
        """The next group's first statement (numbering the group, if the fence does)."""
        ...

    def check(self, row: Sequence[object] | None) -> None:
        """Raise the fatal `StoreFailed` (`StoreLeaseLost`, `StoreFenced`) unless `row`, the
        first statement's answer, says the fence is ours."""
        ...

    def lost(self, cause: StoreFailed) -> StoreFailed:
        """A fresh copy of a fatal `cause` of `check`, one per unit."""
        ...

    @property
    def resolves(self) -> bool:
        """Whether `resolve` can tell a lost COMMIT's fate (else it is not tried)."""
        ...

    async def resolve(self, connection: Connection, stale_pid: int | None) -> bool | None:
        """After a lost COMMIT, on a new connection: whether the last group committed (True),
        did not (False), or None when this fence cannot tell. Raises `StoreFenced` when the
        fence was lost meanwhile, `psycopg.Error` when the read fails."""
        ...

    def committed(self) -> None:
        """The group whose first statement was the last `group_statement` committed."""
        ...


class LeaseFence:
    """A network daemon's fence: the owner's lease still holds this daemon's token."""

    def __init__(self, owner: str, fence: int) -> None:
        self._owner = owner
        self._fence = fence

    @property
    def session_settings(self) -> Sequence[Statement]:
        return ()

    def group_statement(self) -> Statement:
        return FENCE_CHECK, (self._owner,)

    def check(self, row: Sequence[object] | None) -> None:
        found = None if row is None else int(str(row[0]))
        if found != self._fence:
            raise StoreLeaseLost(self._owner, fence=self._fence, found=found)

    def lost(self, cause: StoreFailed) -> StoreFailed:
        assert isinstance(cause, StoreLeaseLost)
        return StoreLeaseLost(cause.owner, fence=cause.fence, found=cause.found)

    @property
    def resolves(self) -> bool:
        return False

    async def resolve(self, connection: Connection, stale_pid: int | None) -> bool | None:
        # Network groups leave no trace of their own: an ambiguous COMMIT stays ambiguous.
        return None

    def committed(self) -> None:
        """Nothing: the lease is watched on its own connection."""


class IncarnationFence:
    """A cluster replica's fence: its incarnation, current and not fenced (cluster.md §3.1).
    Numbers its groups from 1 (`JOIN` leaves `last_group` 0)."""

    def __init__(
        self,
        replica_id: str,
        incarnation: int,
        *,
        on_beat: Callable[[float], None] | None = None,
    ) -> None:
        """`on_beat(sent)` is told, after each group committed, the monotonic time its first
        statement was sent: that statement set the replica's beat (`GROUP_FENCE`), so it is
        a beat as good as the membership's own, which waits on this group's row lock
        meanwhile (cluster.md §3.1)."""
        self._replica_id = replica_id
        self._incarnation = incarnation
        self._group = 0
        self._on_beat = on_beat
        self._sent = 0.0

    @property
    def group(self) -> int:
        """The number of the group most recently begun (0 before the first)."""
        return self._group

    @property
    def session_settings(self) -> Sequence[Statement]:
        return WRITER_SESSION_SETTINGS

    def group_statement(self) -> Statement:
        self._group += 1
        self._sent = time.monotonic()
        return group_fence(self._replica_id, self._incarnation, self._group)

    def committed(self) -> None:
        if self._on_beat is not None:
            self._on_beat(self._sent)

    def check(self, row: Sequence[object] | None) -> None:
        if row is None:
            raise StoreFenced(self._replica_id, self._incarnation)

    def lost(self, cause: StoreFailed) -> StoreFailed:
        return StoreFenced(self._replica_id, self._incarnation)

    @property
    def resolves(self) -> bool:
        return True

    async def resolve(self, connection: Connection, stale_pid: int | None) -> bool | None:
        group = self._group
        for attempt in range(1, RESOLVE_ATTEMPTS + 1):
            try:
                async with connection.transaction():
                    await connection.execute(_LOCAL_LOCK_TIMEOUT, (RESOLVE_LOCK_TIMEOUT,))
                    found = await read_last_group(connection, self._replica_id, self._incarnation)
            except psycopg.Error as error:
                if error.sqlstate != _LOCK_NOT_AVAILABLE or attempt == RESOLVE_ATTEMPTS:
                    raise
                # The lost group's backend still holds the row: its client is gone, so end it
                # (its transaction commits or rolls back as far as it got) and read again.
                if stale_pid is not None and stale_pid != connection.info.backend_pid:
                    await connection.execute("SELECT pg_terminate_backend(%s)", (stale_pid,))
                continue
            if found is None:
                raise StoreFenced(self._replica_id, self._incarnation)
            if found == group:
                return True
            if found < group:
                return False
            return None  # a later group than ours: not ours to judge
        return None  # pragma: no cover - the loop returns or raises


class _GroupFailed(Exception):
    """The group cannot commit; `cause` says why, `settled` holds the outcomes known."""

    def __init__(self, cause: BaseException, settled: list[UnitOutcome | None]) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.settled = settled


class PostgresWriter(GroupCommitter[UnitPlan | ScopedUnit]):
    """Owns the write connection and commits planned units in groups, each fenced by its
    first statement (`WriterFence`). A cluster replica's writer also checks each
    `ScopedUnit` against the partitions held (`guard`, cluster.md §3.2).

    Obtain one with `PostgresWriter.start(...)`; an async context manager whose exit
    calls `close()`.
    """

    def __init__(
        self,
        connection: Connection | None,
        *,
        connect: ConnectSettings,
        fence: WriterFence,
        settings: CommitWriterSettings,
        observer: StoreObserver,
        on_fatal: FatalHandler | None,
    ) -> None:
        """Wrap an open connection; use `PostgresWriter.start` instead."""
        super().__init__(settings=settings, observer=observer, on_fatal=on_fatal)
        self._connect = connect
        self._connection = connection
        self._fence = fence
        self._backend_pid = None if connection is None else connection.info.backend_pid
        """The write connection's server process, kept from its connect: after a lost
        COMMIT it is the backend that may still hold the group's locks."""
        self._held: HeldPartitions | None = None
        """A cluster replica's partitions held, once `guard` armed the seam; None checks
        nothing (every other writer)."""

    @classmethod
    def start(
        cls,
        connection: Connection | None,
        *,
        connect: ConnectSettings,
        fence: WriterFence,
        settings: CommitWriterSettings | None = None,
        observer: StoreObserver | None = None,
        on_fatal: FatalHandler | None = None,
    ) -> PostgresWriter:
        """Start the commit loop on `connection` (opened with `connect.connect(WRITER_ROLE)`
        and given `fence.session_settings`; None connects at the first group). Writes are
        fenced by `fence`."""
        writer = cls(
            connection,
            connect=connect,
            fence=fence,
            settings=settings or CommitWriterSettings(),
            observer=observer or NullStoreObserver(),
            on_fatal=on_fatal,
        )
        writer._start_loop()
        return writer

    def guard(self, held: HeldPartitions) -> None:
        """From now on check every `ScopedUnit` against `held` when its group runs, in
        submission order (cluster.md §3.2): a release unit gives its partitions up there,
        a unit writing as a partition not held fails `PartitionNotHeld` alone."""
        self._held = held

    async def submit(self, plan: UnitPlan | ScopedUnit) -> None:
        """Queue `plan` and return once its group has committed.

        Raises:
            StoreClosed: the writer is CLOSING or CLOSED; nothing was queued.
            StoreFailed: the writer is FAILED (lease lost, corruption): not committed.
            StoreUnavailable: PostgreSQL could not take the group; not committed.
            StoreLeaseLost: the lease was taken; not committed (the writer is FAILED now).
            StoreFenced: the replica's incarnation was fenced; not committed (FAILED now).
            CommitAmbiguous: the group's COMMIT failed; the unit may or may not be durable.
            ConstraintViolation: this unit broke a constraint; it alone was rolled back.
            PartitionNotHeld: a `ScopedUnit` writing as a partition not held (or claimed
                again since it was submitted); nothing of it was run.
        """
        await self._submit(plan)

    def lose_lease(self, error: StoreLeaseLost) -> None:
        """The lease watcher found the lease taken: stop writing (FAILED, `on_fatal`)."""
        self._fail(error)

    async def _release(self) -> None:
        await self._drop_connection()

    async def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await connection.close()

    async def _connected(self) -> Connection:
        connection = self._connection
        if connection is not None and not (connection.closed or connection.broken):
            return connection
        await self._drop_connection()
        connection = await self._connect.connect(WRITER_ROLE)
        try:
            for sql, parameters in self._fence.session_settings:
                await connection.execute(sql, parameters)
        except (psycopg.Error, OSError) as error:
            with contextlib.suppress(psycopg.Error, OSError):
                await connection.close()
            raise self._connect.unavailable(
                "preparing the write connection failed", error
            ) from None
        self._connection = connection
        self._backend_pid = connection.info.backend_pid
        return connection

    async def _run_group(self, units: Sequence[UnitPlan | ScopedUnit]) -> GroupReport:
        held = self._held
        if held is None:
            # Only a guarded writer is given `ScopedUnit`s (`PostgresStore.hold`).
            return await self._run_plans(cast("Sequence[UnitPlan]", units))
        return await self._run_held(units, held)

    async def _run_held(
        self, units: Sequence[UnitPlan | ScopedUnit], held: HeldPartitions
    ) -> GroupReport:
        """Run the units whose partitions are held; the others fail `PartitionNotHeld`
        alone, nothing of them sent (cluster.md §3.2). Checked here, in submission order,
        so a release unit refuses every unit queued after it. A group left with nothing to
        run commits vacuously."""
        refusals: list[PartitionNotHeld | None] = []
        plans: list[UnitPlan] = []
        for unit in units:
            refused = held.admit(unit) if isinstance(unit, ScopedUnit) else None
            refusals.append(refused)
            if refused is None:
                plans.append(unit.plan if isinstance(unit, ScopedUnit) else unit)
        if len(plans) == len(units):
            return await self._run_plans(plans)
        for refused in refusals:
            if refused is not None:
                logger.warning(
                    "store unit refused: its partition is not held here partitions=%s",
                    ",".join(str(partition) for partition in refused.partitions),
                )
        report = (
            await self._run_plans(plans)
            if plans
            else GroupReport(outcomes=(), seconds=0.0, committed=True, fatal=None)
        )
        ran = iter(report.outcomes)
        return GroupReport(
            outcomes=[
                next(ran) if refused is None else UnitRaised(refused) for refused in refusals
            ],
            seconds=report.seconds,
            committed=report.committed,
            fatal=report.fatal,
        )

    async def _run_plans(self, units: Sequence[UnitPlan]) -> GroupReport:
        started = time.perf_counter()
        try:
            connection = await self._connected()
        except StoreUnavailable as error:
            return self._not_committed(units, [None] * len(units), error, started, fatal=None)
        try:
            async with asyncio.timeout(WRITE_TIMEOUT):
                settled = await self._run_units(connection, units)
        except (StoreLeaseLost, StoreFenced) as lost:
            await self._abandon(connection)
            return self._not_committed(units, [None] * len(units), lost, started, fatal=lost)
        except _GroupFailed as failed:
            await self._abandon(connection)
            cause = failed.cause
            fatal = cause if is_corruption(cause) else None
            return self._not_committed(units, failed.settled, cause, started, fatal=fatal)
        except TimeoutError as error:
            await self._drop_connection()
            return self._not_committed(units, [None] * len(units), error, started, fatal=None)
        stale_pid = self._backend_pid
        try:
            async with asyncio.timeout(WRITE_TIMEOUT):
                await connection.execute("COMMIT")
        except (psycopg.Error, OSError, TimeoutError) as error:
            await self._abandon(connection)
            resolved = await self._resolve(stale_pid, error)
            if isinstance(resolved, StoreFenced):
                return self._not_committed(units, settled, resolved, started, fatal=resolved)
            if resolved is True:
                logger.warning(
                    "store group commit answer lost; the group committed units=%d", len(units)
                )
                self._fence.committed()
                return GroupReport(
                    outcomes=settled,
                    seconds=time.perf_counter() - started,
                    committed=True,
                    fatal=None,
                )
            if resolved is False:
                return self._not_committed(
                    units,
                    [o if isinstance(o, UnitRaised) else None for o in settled],
                    StoreUnavailable(
                        "the group's COMMIT was lost and the group did not commit; "
                        f"not committed: {self._connect.describe(error)}"
                    ),
                    started,
                    fatal=error if is_corruption(error) else None,
                )
            logger.error(
                "store group commit failed; the group is in doubt units=%d cause=%s",
                len(units),
                self._connect.describe(error),
            )
            return GroupReport(
                outcomes=[
                    UnitRaised(_in_doubt(error)) if isinstance(outcome, UnitReturned) else outcome
                    for outcome in settled
                ],
                seconds=time.perf_counter() - started,
                committed=False,
                fatal=error if is_corruption(error) else None,
            )
        self._fence.committed()
        return GroupReport(
            outcomes=settled, seconds=time.perf_counter() - started, committed=True, fatal=None
        )

    async def _resolve(
        self, stale_pid: int | None, error: BaseException
    ) -> bool | StoreFenced | None:
        """After a lost COMMIT: whether the group committed, as the fence can tell on a new
        connection (`WriterFence.resolve`); None when it cannot, `StoreFenced` when the
        incarnation was fenced meanwhile."""
        if not self._fence.resolves:
            return None
        try:
            async with asyncio.timeout(WRITE_TIMEOUT):
                connection = await self._connected()
                return await self._fence.resolve(connection, stale_pid)
        except StoreFenced as fenced:
            return fenced
        except (StoreError, psycopg.Error, OSError, TimeoutError) as failure:
            await self._drop_connection()
            logger.warning(
                "store group commit could not be resolved cause=%s after=%s",
                self._connect.describe(failure),
                self._connect.describe(error),
            )
            return None

    async def _run_units(
        self, connection: Connection, units: Sequence[UnitPlan]
    ) -> list[UnitOutcome]:
        """Run the group's units in one open transaction; every unit's outcome (those
        that failed on their own rolled back to their savepoints)."""
        settled: list[UnitOutcome | None] = [None] * len(units)
        hashes, bodies = group_bodies(units)
        fence = connection.cursor()
        head = connection.cursor()
        start = 0
        first = True
        while True:
            markers: list[psycopg.AsyncCursor[tuple[object, ...]]] = []
            error: psycopg.Error | None = None
            try:
                async with connection.pipeline():
                    if first:
                        await connection.execute("BEGIN")
                        await fence.execute(*self._fence.group_statement())
                        if hashes:
                            await head.execute(INSERT_BODIES, (hashes, bodies))
                    for plan in units[start:]:
                        await connection.execute(f"SAVEPOINT {_SAVEPOINT}")
                        for sql, parameters in plan.statements:
                            await connection.execute(sql, parameters)
                        marker = connection.cursor()
                        await marker.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
                        markers.append(marker)
            except psycopg.Error as caught:
                error = caught
            if first:
                first = False
                await self._check_fence(fence, error, settled)
                if hashes and head.pgresult is None:
                    # The group's record bodies did not go in: no unit ran.
                    raise _GroupFailed(
                        error or StoreError("the record bodies went missing"), settled
                    )
            # A unit is done when its RELEASE answered; the first one that did not is
            # where the pipeline stopped (the rest were skipped by the server).
            done = next((i for i, m in enumerate(markers) if m.pgresult is None), len(markers))
            for index in range(start, start + done):
                settled[index] = UnitReturned(None)
            if error is None:
                return [outcome or UnitReturned(None) for outcome in settled]
            failed = start + done
            own = (
                failed < len(units)
                and isinstance(error, psycopg.IntegrityError | psycopg.DataError)
                and connection.info.transaction_status is TransactionStatus.INERROR
            )
            if not own:
                raise _GroupFailed(error, settled)
            settled[failed] = UnitRaised(_own_failure(error))
            try:
                await connection.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
                await connection.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
            except psycopg.Error as rollback_error:
                # Not this unit's failure after all if its savepoint cannot be found.
                settled[failed] = None
                raise _GroupFailed(rollback_error, settled) from None
            start = failed + 1
            if start == len(units):
                return [outcome or UnitReturned(None) for outcome in settled]

    async def _check_fence(
        self,
        fence: psycopg.AsyncCursor[tuple[object, ...]],
        error: psycopg.Error | None,
        settled: list[UnitOutcome | None],
    ) -> None:
        """Raise unless the fence, the transaction's first statement, is ours."""
        if fence.pgresult is None:
            # BEGIN or the check itself did not run: nothing of the group did.
            raise _GroupFailed(error or StoreError("the fence check returned nothing"), settled)
        self._fence.check(await fence.fetchone())

    async def _abandon(self, connection: Connection) -> None:
        """End the failed transaction; a connection that cannot is dropped."""
        if connection.closed or connection.broken:
            await self._drop_connection()
            return
        try:
            async with asyncio.timeout(WRITE_TIMEOUT):
                if connection.info.transaction_status is not TransactionStatus.IDLE:
                    await connection.execute("ROLLBACK")
        except (psycopg.Error, OSError, TimeoutError):
            await self._drop_connection()

    def _not_committed(
        self,
        units: Sequence[UnitPlan],
        settled: Sequence[UnitOutcome | None],
        cause: BaseException,
        started: float,
        *,
        fatal: BaseException | None,
    ) -> GroupReport:
        """Every unit that did not fail on its own fails with the group's definite failure."""
        if not isinstance(cause, StoreLeaseLost | StoreFenced):
            logger.warning(
                "store group not committed units=%d cause=%s",
                len(units),
                self._connect.describe(cause),
            )
        outcomes: list[UnitOutcome] = [
            outcome
            if isinstance(outcome, UnitRaised)
            else UnitRaised(self._definite_failure(cause))
            for outcome in settled
        ]
        return GroupReport(
            outcomes=outcomes,
            seconds=time.perf_counter() - started,
            committed=False,
            fatal=fatal,
        )

    def _definite_failure(self, cause: BaseException) -> StoreError:
        if isinstance(cause, StoreLeaseLost | StoreFenced):
            return self._fence.lost(cause)
        if isinstance(cause, StoreUnavailable):
            failure: StoreError = StoreUnavailable(str(cause))
        elif is_corruption(cause):
            failure = StoreFailed("PostgreSQL reported damaged data; this write was not committed")
        elif is_connection_error(cause, self._connection):
            failure = StoreUnavailable(
                "the connection to PostgreSQL was lost before this write's COMMIT; "
                f"not committed: {self._connect.describe(cause)}"
            )
        else:
            failure = StoreUnavailable(
                "PostgreSQL failed this write's group before its COMMIT; not committed: "
                f"{self._connect.describe(cause)}"
            )
        failure.__cause__ = cause
        return failure


def _own_failure(error: psycopg.Error) -> ConstraintViolation:
    """A unit's own constraint or data error, named without the row's values."""
    diagnostic = error.diag
    primary = diagnostic.message_primary or type(error).__name__
    constraint = diagnostic.constraint_name
    violation = ConstraintViolation(primary if constraint is None else f"{primary} ({constraint})")
    violation.__cause__ = error
    return violation


def _in_doubt(cause: BaseException) -> CommitAmbiguous:
    error = CommitAmbiguous("the group commit failed; this write may or may not be durable")
    error.__cause__ = cause
    return error

"""Cluster membership in PostgreSQL: the `replicas` and `partitions` tables and every statement
on them (cluster.md §3.1, §3.2, §3.5, §3.6).

`PostgresMembershipTable` implements `gateway.cluster.table.MembershipTable`; the statements the
writer runs inside its own groups are constants here, so all SQL of membership lives in this
module. Callers may rely on:

- **`MEMBERSHIP_DDL`** creates both tables (idempotent); `create_partitions(connection, P)` fills
  `partitions` with rows 0..P−1 once and refuses a different P later
  (`PartitionCountMismatch`): P changes only offline (cluster.md §2).
- **The fence is the incarnation.** `GROUP_FENCE` (parameters from `group_fence(...)`) is the
  first statement of every group of a cluster replica's writer: it returns one row while the
  incarnation is current and not fenced, and none otherwise — then the group must fail, nothing
  of it commit, and the replica exit (cluster.md §3.5). It takes the replica row's lock, so a
  claimer fencing this incarnation waits for the group in flight, and the group's `beat =
  now()` is a beat. After an ambiguous COMMIT the writer reconnects and calls
  `read_last_group`: the stored group number, or None when the incarnation was fenced or
  replaced meanwhile (then it exits).
- **A claim is one transaction** under `lock_timeout` (`CLAIM_LOCK_TIMEOUT`): it locks its own
  replica row (a fenced claimer claims nothing), fences each holder that is dead in database
  time (`now() - beat > ttl`, re-checked after waiting for the holder's in-flight group, whose
  beat may revive it), locks the target partition rows in partition order (so two claimers
  never deadlock on them), then compare-and-sets each row against the holder it read: of two
  racing claimers exactly one row update commits, the other matches nothing. A live holder is
  never fenced and never claimed from. A lock wait that runs out or a deadlock claims nothing
  this time (an empty answer, not an error).
- **A release** is `release_statement(...)`, a plain statement the writer puts into a unit of
  its own (after the partition's last unit), or `PostgresMembershipTable.release` directly.
- **Sessions** of this module set `idle_in_transaction_session_timeout`
  (`IDLE_IN_TRANSACTION_TIMEOUT`); `WRITER_SESSION_SETTINGS` is the same for the writer's
  session, so a replica paused between the statements of a transaction releases its locks
  (cluster.md §3.1). That timeout never fires for a writer paused inside a *pipeline* (the
  server waits for the pipeline's Sync, not idle in transaction): so a claim that gives way on
  a lock ends the sessions of the holders it found dead in database time whose transaction is
  older than the lease TTL (`_REAP_STUCK`), and its next pass finds the locks gone.
- Each operation is bounded (`OPERATION_TIMEOUT`); a failure to reach the database is
  `MembershipUnavailable` with the DSN's password scrubbed, and the session reconnects at its
  next operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import AsyncIterator, Collection, Iterable
from typing import Final

import psycopg
from psycopg.pq import TransactionStatus

from gateway.closing import AsyncClosing
from gateway.cluster.table import (
    Joined,
    MembershipUnavailable,
    PartitionRow,
    ReplicaRow,
    View,
)
from gateway.store.errors import StoreError
from gateway.store.postgres.connection import (
    CONNECT_TIMEOUT,
    WRITER_ROLE,
    Connection,
    ConnectSettings,
    application_name,
)
from gateway.store.postgres.tables import Statement

logger = logging.getLogger(__name__)

IDLE_IN_TRANSACTION_TIMEOUT: Final = "5s"
"""How long a membership or writer session may sit idle inside a transaction (a PostgreSQL
interval) before the server ends it.

Below the lease TTL (6 s): a replica SIGSTOPped inside a group holds its replica row's lock,
and a claimer's fencing UPDATE must not wait for it longer than the replica could still be
thought alive (cluster.md §3.1)."""

CLAIM_LOCK_TIMEOUT: Final = "2s"
"""How long a claim waits for one row lock (a PostgreSQL interval): a holder's in-flight group,
another claimer. Short, so a claim pass never stalls the claim loop; a claim that runs out
claims nothing and is tried again at the next pass."""

OPERATION_TIMEOUT: Final = 5.0
"""Seconds one membership operation (a beat, a view, a whole claim) may take on our side.

Above the claim's lock waits; a stuck server or silent network counts as unreachable, and the
connection is dropped so the statement does not linger."""

SESSION_SETTINGS: Final = (
    (
        "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
        (IDLE_IN_TRANSACTION_TIMEOUT,),
    ),
)
"""Run on every new membership session."""

WRITER_SESSION_SETTINGS: Final = SESSION_SETTINGS
"""For the lead's writer: run on every new write connection of a cluster replica."""

BEAT_ROLE: Final = "beat"
"""The beat session's role (`application_name` `harness-beat:<replica>`): join, beats,
serving."""
CLAIM_ROLE: Final = "claim"
"""The claim session's role (`harness-claim:<replica>`): claims and direct releases."""
VIEW_ROLE: Final = "view"
"""The view session's role (`harness-view:<replica>`): the routing view."""

MEMBERSHIP_DDL: Final = (
    "CREATE SEQUENCE IF NOT EXISTS replica_incarnations AS bigint",
    """CREATE TABLE IF NOT EXISTS replicas (
        replica_id text PRIMARY KEY,
        incarnation bigint NOT NULL,
        address text NOT NULL,
        beat timestamptz NOT NULL,
        joined_at timestamptz NOT NULL,
        serving boolean NOT NULL DEFAULT false,
        last_group bigint NOT NULL DEFAULT 0,
        fenced boolean NOT NULL DEFAULT false
    )""",
    """CREATE TABLE IF NOT EXISTS partitions (
        partition integer PRIMARY KEY CHECK (partition >= 0),
        holder text NULL,
        incarnation bigint NULL,
        epoch bigint NOT NULL DEFAULT 0,
        claimed_at timestamptz NULL,
        CHECK ((holder IS NULL) = (incarnation IS NULL))
    )""",
)
"""The cluster's membership tables (cluster.md §3.6), to be folded into the schema."""

JOIN: Final = (
    "INSERT INTO replicas AS r "
    "(replica_id, incarnation, address, beat, joined_at, serving, last_group, fenced) "
    "VALUES (%s, nextval('replica_incarnations'), %s, now(), now(), false, 0, false) "
    "ON CONFLICT (replica_id) DO UPDATE SET incarnation = nextval('replica_incarnations'), "
    "address = excluded.address, beat = now(), joined_at = now(), serving = false, "
    "last_group = 0, fenced = false "
    "RETURNING incarnation, now()"
)
"""A fresh incarnation per start; parameters (replica id, address). Waits for the previous
incarnation's in-flight group (the row lock), whose later groups then match nothing.

Incarnations come from one sequence: larger than any before and never reused, for any replica
id. A row deleted by `FORGET_GONE` and joined again under the same id cannot meet an old
incarnation of it (`incarnation + 1` on a re-created row would start at 1 again)."""

FORGET_GONE: Final = (
    "DELETE FROM replicas AS r WHERE now() - r.beat > %s * interval '1 second' "
    "AND NOT EXISTS (SELECT 1 FROM partitions AS p WHERE p.holder = r.replica_id) "
    "RETURNING r.replica_id"
)
"""Delete the rows of replicas that have not beaten for the given seconds and hold no
partition (cluster.md §3.1: a Deployment's pod names change at every restart)."""

BEAT: Final = (
    "UPDATE replicas SET beat = now() "
    "WHERE replica_id = %s AND incarnation = %s AND NOT fenced RETURNING now()"
)
"""One beat; parameters (replica id, incarnation). No row: fenced or replaced."""

GROUP_FENCE: Final = (
    "UPDATE replicas SET last_group = %s, beat = now() "
    "WHERE replica_id = %s AND incarnation = %s AND NOT fenced RETURNING last_group"
)
"""The first statement of every group of a cluster replica's writer; parameters from
`group_fence`. One row: the group may go on. No row: the incarnation is fenced or replaced —
the group fails, nothing of it commits, and the replica exits (cluster.md §3.5)."""

READ_LAST_GROUP: Final = (
    "SELECT last_group, incarnation, fenced FROM replicas WHERE replica_id = %s FOR UPDATE"
)
"""The last group number that committed for a replica, with its incarnation and fence;
parameter (replica id). `FOR UPDATE`: the group whose COMMIT was lost locked this row with its
first statement, so the read waits until that transaction has ended either way (cluster.md
§3.5); the caller bounds the wait (`lock_timeout`) and ends the old backend if it must."""

SET_SERVING: Final = (
    "UPDATE replicas SET serving = %s "
    "WHERE replica_id = %s AND incarnation = %s AND NOT fenced RETURNING serving"
)

RELEASE: Final = (
    "UPDATE partitions SET holder = NULL, incarnation = NULL "
    "WHERE partition = %s AND holder = %s AND incarnation = %s RETURNING partition"
)
"""Release a partition this incarnation holds; parameters from `release_statement`."""

_VIEW_BEGIN: Final = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
_VIEW_NOW: Final = "SELECT now()"
_VIEW_REPLICAS: Final = (
    "SELECT replica_id, incarnation, address, serving, fenced, "
    "greatest(extract(epoch FROM now() - beat), 0)::float8, "
    "NOT fenced AND now() - beat <= %s * interval '1 second' "
    "FROM replicas ORDER BY replica_id"
)
_VIEW_PARTITIONS: Final = (
    "SELECT partition, holder, incarnation, epoch FROM partitions ORDER BY partition"
)

_CLAIM_LOCK_TIMEOUT: Final = "SELECT set_config('lock_timeout', %s, true)"
_CLAIM_SELF: Final = (
    "SELECT 1 FROM replicas WHERE replica_id = %s AND incarnation = %s AND NOT fenced "
    "FOR NO KEY UPDATE"
)
_CLAIM_READ: Final = (
    "SELECT partition, holder, incarnation FROM partitions "
    "WHERE partition = ANY(%s::integer[]) ORDER BY partition"
)
_FENCE_DEAD: Final = (
    "UPDATE replicas SET fenced = true "
    "WHERE replica_id = %s AND incarnation = %s AND NOT fenced "
    "AND now() - beat > %s * interval '1 second'"
)
"""Fence a holder's incarnation if it is dead in database time. Waits for its in-flight group
(the row lock); the beat that group wrote is re-checked before the row is fenced."""
_HOLDER_ALIVE: Final = (
    "SELECT EXISTS (SELECT 1 FROM replicas "
    "WHERE replica_id = %s AND incarnation = %s AND NOT fenced)"
)
_LOCK_TARGETS: Final = (
    "SELECT partition FROM partitions WHERE partition = ANY(%s::integer[]) "
    "ORDER BY partition FOR UPDATE"
)
_COMPARE_AND_SET: Final = (
    "UPDATE partitions AS p SET holder = %s, incarnation = %s, epoch = p.epoch + 1, "
    "claimed_at = now() "
    "FROM unnest(%s::integer[], %s::text[], %s::bigint[]) AS c(partition, holder, incarnation) "
    "WHERE p.partition = c.partition AND p.holder IS NOT DISTINCT FROM c.holder "
    "AND p.incarnation IS NOT DISTINCT FROM c.incarnation "
    "RETURNING p.partition, p.epoch"
)

_REAP_STUCK: Final = (
    "SELECT h.replica_id, pg_terminate_backend(a.pid) "
    "FROM unnest(%s::text[], %s::text[]) AS h(replica_id, application_name) "
    "JOIN replicas r ON r.replica_id = h.replica_id "
    "AND now() - r.beat > %s * interval '1 second' "
    "JOIN pg_stat_activity a ON a.application_name = h.application_name "
    "WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() "
    "AND a.xact_start < now() - %s * interval '1 second'"
)
"""End the sessions of holders dead in database time whose transaction began more than a
lease TTL ago; parameters (replica ids, their sessions' application names, TTL, TTL). A live
replica's transactions are never that old, and a restarted one beats again, so only a stopped
process's locks go; nothing committed is touched (the transaction rolls back)."""
_REAPED_ROLES: Final = (WRITER_ROLE, CLAIM_ROLE, BEAT_ROLE)
"""The sessions that take row locks on `replicas` and `partitions`."""

_LOST_RACE_STATES: Final = frozenset({"55P03", "40P01", "40001"})
"""SQLSTATEs that end a claim with nothing claimed, to be tried again: lock_not_available
(`lock_timeout`), deadlock_detected, serialization_failure."""


class PartitionCountMismatch(StoreError):
    """The database's cluster has another number of partitions than asked for; nothing was
    changed. P changes only offline (cluster.md §2)."""

    def __init__(self, *, found: int, wanted: int) -> None:
        super().__init__(
            f"the database's cluster has {found} partitions, not {wanted}; "
            "the number of partitions changes only offline"
        )
        self.found = found
        self.wanted = wanted


def group_fence(replica_id: str, incarnation: int, group: int) -> Statement:
    """`GROUP_FENCE` with its parameters, for group number `group` of this incarnation."""
    return GROUP_FENCE, (group, replica_id, incarnation)


def release_statement(partition: int, replica_id: str, incarnation: int) -> Statement:
    """`RELEASE` with its parameters: a statement the writer runs as a unit of its own."""
    return RELEASE, (partition, replica_id, incarnation)


async def read_last_group(connection: Connection, replica_id: str, incarnation: int) -> int | None:
    """The last group number committed for this incarnation, None when it was fenced or
    replaced (an ambiguous COMMIT is then moot: the replica exits). Waits for the lost
    group's transaction to end (`READ_LAST_GROUP`). Raises `psycopg.Error` as the writer's
    other statements do."""
    cursor = await connection.execute(READ_LAST_GROUP, (replica_id,))
    row = await cursor.fetchone()
    if row is None or int(row[1]) != incarnation or bool(row[2]):
        return None
    return int(row[0])


async def create_membership_tables(connection: Connection) -> None:
    """Run `MEMBERSHIP_DDL` (idempotent) in one transaction."""
    async with connection.transaction():
        for statement in MEMBERSHIP_DDL:
            await connection.execute(statement)


async def create_partitions(connection: Connection, partitions: int) -> None:
    """Insert partition rows 0..`partitions`−1 unless they exist (idempotent).

    Raises:
        PartitionCountMismatch: the table holds another set of partitions; nothing changed.
        ValueError: `partitions` is below 1.
    """
    if partitions < 1:
        raise ValueError(f"a cluster has at least one partition, not {partitions}")
    async with connection.transaction():
        # Two set-ups at once: the second waits here, then finds the rows the first made.
        await connection.execute("LOCK TABLE partitions IN SHARE ROW EXCLUSIVE MODE")
        cursor = await connection.execute(
            "SELECT count(*), coalesce(max(partition), -1) FROM partitions"
        )
        row = await cursor.fetchone()
        assert row is not None
        found, highest = int(row[0]), int(row[1])
        if found == 0:
            await connection.execute(
                "INSERT INTO partitions (partition) SELECT generate_series(0, %s - 1)",
                (partitions,),
            )
        elif found != partitions or highest != partitions - 1:
            raise PartitionCountMismatch(found=found, wanted=partitions)


class _Session:
    """One lazily opened connection of one role, used by one operation at a time."""

    def __init__(self, settings: ConnectSettings, role: str) -> None:
        self._settings = settings
        self._role = role
        self._connection: Connection | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @contextlib.asynccontextmanager
    async def connected(self, what: str) -> AsyncIterator[Connection]:
        """The session's connection for one bounded operation; any failure of it is
        `MembershipUnavailable` (and drops the connection) unless it is a `StoreError`."""
        async with self._lock:
            if self._closed:
                raise MembershipUnavailable(f"{what}: the membership table is closed")
            try:
                async with asyncio.timeout(OPERATION_TIMEOUT):
                    connection = await self._connect()
                    yield connection
            except (psycopg.Error, OSError, TimeoutError) as error:
                await self.drop()
                raise self._unavailable(what, error) from None
            except MembershipUnavailable:
                await self.drop()
                raise
            except BaseException:
                # Cancelled (or a defect) inside an operation: a connection left inside a
                # transaction would hold its row locks until the server noticed.
                held = self._connection
                if held is not None and held.info.transaction_status is not TransactionStatus.IDLE:
                    await self.drop()
                raise

    async def _connect(self) -> Connection:
        connection = self._connection
        if connection is not None and not (connection.closed or connection.broken):
            return connection
        await self.drop()
        try:
            connection = await self._settings.connect(self._role)
        except StoreError as error:
            raise MembershipUnavailable(str(error)) from None
        try:
            for sql, parameters in SESSION_SETTINGS:
                await connection.execute(sql, parameters)
        except BaseException:
            with contextlib.suppress(psycopg.Error, OSError):
                await connection.close()
            raise
        self._connection = connection
        return connection

    def _unavailable(self, what: str, error: BaseException) -> MembershipUnavailable:
        detail = (
            "no answer in time"
            if isinstance(error, TimeoutError)
            else self._settings.describe(error)
        )
        return MembershipUnavailable(f"{what} on {self._settings.redacted} failed: {detail}")

    async def drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await connection.close()

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            await self.drop()


class PostgresMembershipTable(AsyncClosing):
    """`MembershipTable` on PostgreSQL: a beat, a claim and a view session per replica.

    Construct with `for_dsn`; it connects at its first operation. `close()` closes the
    sessions (idempotent); nothing is written at close.
    """

    def __init__(self, settings: ConnectSettings) -> None:
        """Wrap checked connect settings; `settings.owner` names the sessions."""
        self._settings = settings
        self._beat = _Session(settings, BEAT_ROLE)
        self._claim = _Session(settings, CLAIM_ROLE)
        self._view = _Session(settings, VIEW_ROLE)

    @classmethod
    def for_dsn(
        cls, dsn: str, *, replica_id: str, connect_timeout: float = CONNECT_TIMEOUT
    ) -> PostgresMembershipTable:
        """A table on `dsn` whose sessions are named after `replica_id`.

        Raises:
            StoreDsnInvalid: `dsn` is not a connection string.
            ValueError: `replica_id` is empty.
        """
        return cls(ConnectSettings.parse(dsn, owner=replica_id, connect_timeout=connect_timeout))

    async def close(self) -> None:
        """Close every session; idempotent."""
        for session in (self._beat, self._claim, self._view):
            await session.close()

    async def join(self, replica_id: str, address: str) -> Joined:
        """See `MembershipTable.join`."""
        async with self._beat.connected("joining the cluster") as connection:
            cursor = await connection.execute(JOIN, (replica_id, address))
            row = await cursor.fetchone()
        assert row is not None
        logger.info("cluster replica joined replica=%s incarnation=%d", replica_id, int(row[0]))
        return Joined(incarnation=int(row[0]), database_time=_timestamp(row[1]))

    async def beat(self, replica_id: str, incarnation: int) -> datetime.datetime | None:
        """See `MembershipTable.beat`."""
        async with self._beat.connected("a beat") as connection:
            cursor = await connection.execute(BEAT, (replica_id, incarnation))
            row = await cursor.fetchone()
        return None if row is None else _timestamp(row[0])

    async def set_serving(self, replica_id: str, incarnation: int, serving: bool) -> bool:
        """See `MembershipTable.set_serving`."""
        async with self._beat.connected("marking the replica serving") as connection:
            cursor = await connection.execute(SET_SERVING, (serving, replica_id, incarnation))
            row = await cursor.fetchone()
        return row is not None

    async def read_view(self, lease_ttl: float) -> View:
        """See `MembershipTable.read_view`."""
        async with self._view.connected("reading the membership view") as connection:
            await connection.execute(_VIEW_BEGIN)
            try:
                now = await (await connection.execute(_VIEW_NOW)).fetchone()
                replicas = await (await connection.execute(_VIEW_REPLICAS, (lease_ttl,))).fetchall()
                partitions = await (await connection.execute(_VIEW_PARTITIONS)).fetchall()
            finally:
                if not (connection.closed or connection.broken):
                    await connection.execute("COMMIT")
        assert now is not None
        return View(
            database_time=_timestamp(now[0]),
            replicas={
                str(row[0]): ReplicaRow(
                    replica_id=str(row[0]),
                    incarnation=int(row[1]),
                    address=str(row[2]),
                    serving=bool(row[3]),
                    fenced=bool(row[4]),
                    beat_age=float(row[5]),
                    live=bool(row[6]),
                )
                for row in replicas
            },
            partitions=tuple(
                PartitionRow(
                    partition=int(row[0]),
                    holder=None if row[1] is None else str(row[1]),
                    incarnation=None if row[2] is None else int(row[2]),
                    epoch=int(row[3]),
                )
                for row in partitions
            ),
        )

    async def claim(
        self, replica_id: str, incarnation: int, partitions: Collection[int], lease_ttl: float
    ) -> dict[int, int]:
        """See `MembershipTable.claim` and this module's docstring."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        holders: set[str] = set()
        async with self._claim.connected("claiming partitions") as connection:
            try:
                async with connection.transaction():
                    claimed = await _claim(
                        connection, replica_id, incarnation, wanted, lease_ttl, holders
                    )
            except psycopg.Error as error:
                if error.sqlstate not in _LOST_RACE_STATES:
                    raise
                logger.info(
                    "cluster claim gave way replica=%s partitions=%d sqlstate=%s",
                    replica_id,
                    len(wanted),
                    error.sqlstate,
                )
                await _reap_stuck(connection, sorted(holders), lease_ttl)
                return {}
        if claimed:
            logger.info(
                "cluster partitions claimed replica=%s incarnation=%d partitions=%s",
                replica_id,
                incarnation,
                _ranges(claimed),
            )
        return claimed

    async def forget_gone(self, silent_for: float) -> int:
        """See `MembershipTable.forget_gone`."""
        async with self._claim.connected("forgetting replicas gone for good") as connection:
            rows = await (await connection.execute(FORGET_GONE, (silent_for,))).fetchall()
        if rows:
            logger.info(
                "cluster replica rows deleted count=%d replicas=%s",
                len(rows),
                ",".join(sorted(str(row[0]) for row in rows)),
            )
        return len(rows)

    async def release(self, partition: int, replica_id: str, incarnation: int) -> bool:
        """See `MembershipTable.release`."""
        sql, parameters = release_statement(partition, replica_id, incarnation)
        async with self._claim.connected("releasing a partition") as connection:
            row = await (await connection.execute(sql, parameters)).fetchone()
        return row is not None


async def _claim(
    connection: Connection,
    replica_id: str,
    incarnation: int,
    wanted: list[int],
    lease_ttl: float,
    holders_seen: set[str],
) -> dict[int, int]:
    """The claim transaction's statements (inside an open transaction); adds each other
    holder it read to `holders_seen`."""
    await connection.execute(_CLAIM_LOCK_TIMEOUT, (CLAIM_LOCK_TIMEOUT,))
    # Our own row first, locked as a group would lock it: a claimer fenced meanwhile claims
    # nothing, and a fencer of this incarnation waits for this claim to end.
    if await (await connection.execute(_CLAIM_SELF, (replica_id, incarnation))).fetchone() is None:
        return {}
    rows = await (await connection.execute(_CLAIM_READ, (wanted,))).fetchall()
    holders = sorted(
        {
            (str(holder), int(held))
            for _, holder, held in rows
            if holder is not None and (holder, held) != (replica_id, incarnation)
        }
    )
    holders_seen.update(holder for holder, _ in holders)
    alive: set[tuple[str, int]] = set()
    for holder, held in holders:
        # Fencing before locking any partition row: the holder's group locks its replica row
        # first and may then lock a partition row (a release), so this order cannot deadlock
        # with it.
        await connection.execute(_FENCE_DEAD, (holder, held, lease_ttl))
        found = await (await connection.execute(_HOLDER_ALIVE, (holder, held))).fetchone()
        if found is not None and bool(found[0]):
            alive.add((holder, held))
    targets = [
        (int(partition), holder, held)
        for partition, holder, held in rows
        if holder is None
        or ((holder, held) not in alive and (holder, held) != (replica_id, incarnation))
    ]
    if not targets:
        return {}
    numbers = [partition for partition, _, _ in targets]
    await connection.execute(_LOCK_TARGETS, (numbers,))
    cursor = await connection.execute(
        _COMPARE_AND_SET,
        (
            replica_id,
            incarnation,
            numbers,
            [holder for _, holder, _ in targets],
            [held for _, _, held in targets],
        ),
    )
    return {int(partition): int(epoch) for partition, epoch in await cursor.fetchall()}


async def _reap_stuck(connection: Connection, holders: list[str], lease_ttl: float) -> None:
    """After a claim gave way: end the stuck transactions of the dead among `holders`
    (`_REAP_STUCK`), so the next claim pass does not wait on them again."""
    if not holders:
        return
    names = [
        (holder, application_name(role, holder)) for holder in holders for role in _REAPED_ROLES
    ]
    cursor = await connection.execute(
        _REAP_STUCK,
        ([holder for holder, _ in names], [name for _, name in names], lease_ttl, lease_ttl),
    )
    ended = await cursor.fetchall()
    if ended:
        logger.warning(
            "cluster claim ended %d stuck sessions of dead replicas=%s "
            "(a stopped process held its locks)",
            len(ended),
            ",".join(sorted({str(row[0]) for row in ended})),
        )


def _timestamp(value: object) -> datetime.datetime:
    assert isinstance(value, datetime.datetime)
    return value


def _ranges(partitions: Iterable[int]) -> str:
    """`0-3,7,9-10`: a short form of a set of partition numbers for a log line."""
    spans: list[list[int]] = []
    for partition in sorted(partitions):
        if spans and spans[-1][1] == partition - 1:
            spans[-1][1] = partition
        else:
            spans.append([partition, partition])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


__all__ = [
    "BEAT",
    "CLAIM_LOCK_TIMEOUT",
    "FORGET_GONE",
    "GROUP_FENCE",
    "IDLE_IN_TRANSACTION_TIMEOUT",
    "JOIN",
    "MEMBERSHIP_DDL",
    "OPERATION_TIMEOUT",
    "READ_LAST_GROUP",
    "RELEASE",
    "WRITER_SESSION_SETTINGS",
    "PartitionCountMismatch",
    "PostgresMembershipTable",
    "create_membership_tables",
    "create_partitions",
    "group_fence",
    "read_last_group",
    "release_statement",
]

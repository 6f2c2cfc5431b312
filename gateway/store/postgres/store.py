"""`PostgresStore`: the `Store` seam on PostgreSQL, for daemons that share one database.

`store = await PostgresStore.open(dsn, owner=...)` checks the schema (creating it in an
empty database), claims the owner's lease (`gateway.store.postgres.lease`), starts the
writer (`gateway.store.postgres.writer`) on its own connection and opens a small pool of
reader connections. Callers may rely on:

- Everything `SqliteStore` promises about `apply` and the reads, row for row (the store
  contract suite runs on both), for the agents of this owner: `identities`, `token`,
  `cursor` and `unread_summary` see only the owner's rows.
- While PostgreSQL is down, writes fail `StoreUnavailable` (not committed) or
  `CommitAmbiguous` (lost during COMMIT) and reads fail `StoreUnavailable`, each within a
  bound; nothing is fatal, and service resumes when the server is back. `on_fatal` is
  called only when the lease is taken by another daemon or the server reports damaged
  data: then the writer is FAILED and the daemon must stop.
- `close()` refuses new calls, ends the reads, commits every accepted write, then releases
  the lease; idempotent.

`store = await PostgresStore.open_cluster(dsn, replica_id=..., incarnation=..., partitions=P)`
is a cluster replica's store (cluster.md §3.6): no lease (the replica's incarnation, joined
before, fences every group instead: `StoreFenced` is fatal, and an ambiguous COMMIT is resolved
from the replica row), the owner `CLUSTER_OWNER` shared by every replica, identities and
deliveries stored with their home partitions and the cluster's reads (`cluster_reads.py`)
besides every `Store` read. Once its replica arms the seam (`hold`), a unit writing as a
partition the replica does not hold is refused `PartitionNotHeld` (cluster.md §3.2).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from typing import Final, TypeVar

import psycopg
from harness_contract.ids import RandomId
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from gateway.closing import AsyncClosing
from gateway.store.errors import ClusterModeMismatch, StoreClosed, StoreError
from gateway.store.observer import StoreObserver
from gateway.store.postgres import cluster_reads, schema, tables
from gateway.store.postgres.connection import (
    CONNECT_TIMEOUT,
    WRITER_ROLE,
    Connection,
    ConnectSettings,
)
from gateway.store.postgres.held import HeldPartitions
from gateway.store.postgres.lease import LEASE_RETRY_INTERVAL, Lease, LeaseState
from gateway.store.postgres.membership import PartitionCountMismatch
from gateway.store.postgres.writer import (
    IncarnationFence,
    LeaseFence,
    PostgresWriter,
)
from gateway.store.records import (
    AgentSnapshot,
    ConversationRow,
    DeliveryRow,
    IdentityRow,
    InboxRow,
    IntentRow,
    IntentState,
    RecordRow,
    SendRow,
    Write,
)
from gateway.store.writer import CommitWriterSettings, CommitWriterState, FatalHandler

logger = logging.getLogger(__name__)

T = TypeVar("T")

READ_POOL_SIZE: Final = 4
"""Most reader connections; the pool keeps one open and grows on demand.

Reads are rehydration snapshots and management lookups, short and few; a handful keeps one
slow read from stalling the rest without holding many server sessions per daemon."""

READ_TIMEOUT: Final = 15.0
"""Seconds one read may take, its wait for a pooled connection included."""

READER_RECONNECT_TIMEOUT: Final = 5.0
"""Seconds the pool keeps replacing a lost reader connection in the background (with its
growing backoff) before it gives up; after that the next read asks for a connection at
once, so reads work again soon after a long outage instead of after the backoff."""

READER_ROLE: Final = "reader"
"""The reader connections' role: their `application_name` is `harness-reader:<owner>`."""


def default_holder() -> str:
    """What a lease row says about its holder when the caller names none: host and pid."""
    return f"{socket.gethostname()} pid {os.getpid()}"


def _mint_local_instance() -> str:
    return RandomId.ROUTER_INSTANCE.mint()


class StoreState(enum.Enum):
    """Where a `PostgresStore` is in its life."""

    OPEN = "open"
    """Serving reads and writes (writes fail once the writer is FAILED)."""
    CLOSING = "closing"
    """`close()` was called: refusing new calls, finishing accepted writes."""
    CLOSED = "closed"
    """Every connection is closed and the lease released."""


class PostgresStore(AsyncClosing):
    """A `Store` in a PostgreSQL database shared by owners; every row is keyed by agent.

    Obtain one with `await PostgresStore.open(dsn, owner=...)`; an async context manager
    whose exit calls `close()`.
    """

    def __init__(
        self,
        *,
        settings: ConnectSettings,
        lease: Lease | None,
        writer: PostgresWriter,
        pool: AsyncConnectionPool[Connection],
        local_instance_id: str,
        owner: str,
        partitions: int | None = None,
    ) -> None:
        """Wrap what `open` or `open_cluster` opened; use those instead."""
        self._settings = settings
        self._lease = lease
        self._writer = writer
        self._pool = pool
        self._owner = owner
        self._state = StoreState.OPEN
        self._closed = asyncio.Event()
        self.local_instance_id: Final = local_instance_id
        """The owner's durable local instance id (engine.md §5.10): never changes."""
        self.partitions: int | None = partitions
        """A cluster's P (cluster.md §2); None in network mode."""
        self._held: HeldPartitions | None = None
        """The partitions its replica holds, once `hold` armed the seam (cluster.md §3.2)."""

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        owner: str,
        holder: str | None = None,
        writer_settings: CommitWriterSettings | None = None,
        observer: StoreObserver | None = None,
        on_fatal: FatalHandler | None = None,
        pool_size: int = READ_POOL_SIZE,
        connect_timeout: float = CONNECT_TIMEOUT,
        lease_retry_interval: float = LEASE_RETRY_INTERVAL,
    ) -> PostgresStore:
        """Check or create the schema, claim the owner's lease, start the writer and readers.

        Args:
            dsn: a libpq connection string or `postgresql://` URL (a password is better in
                PGPASSWORD or a passfile; it is never logged either way).
            owner: the name this daemon's agents are kept under (e.g. the pod's host name).
            holder: what the lease row says about this daemon (run id, host, pid), shown to
                a second daemon that is refused; default host and pid.
            writer_settings: group commit settings (`Settings.commit_delay`, `commit_max_batch`).
            observer: receives the writer's measurements (backend `postgresql`).
            on_fatal: called once if the lease is lost or the server reports damaged data.
            pool_size: most reader connections, at least 1.
            connect_timeout: seconds one connection attempt may take.
            lease_retry_interval: seconds between attempts to take the lease's lock again
                after its connection dropped.

        Raises:
            StoreDsnInvalid: `dsn` is not a connection string.
            StoreUnavailable: the server cannot be reached; nothing was written.
            DatabaseSchemaMismatch: the database is of another version (or foreign); it
                was left untouched.
            StoreLeaseHeld: another daemon holds this owner's lease; nothing was written.
        """
        if pool_size < 1:
            raise ValueError(f"a store needs at least one reader connection, got {pool_size}")
        settings = ConnectSettings.parse(dsn, owner=owner, connect_timeout=connect_timeout)
        connection = await settings.connect(WRITER_ROLE)
        lease: Lease | None = None
        writer: PostgresWriter | None = None
        try:
            try:
                await schema.prepare(connection, settings.redacted)
            except psycopg.Error as error:
                raise settings.unavailable(
                    f"checking the schema of {settings.redacted} failed", error
                ) from None
            lease = await Lease.acquire(
                settings,
                holder=holder or default_holder(),
                mint_instance=_mint_local_instance,
                retry_interval=lease_retry_interval,
            )
            writer = PostgresWriter.start(
                connection,
                connect=settings,
                fence=LeaseFence(owner, lease.fence),
                settings=writer_settings,
                observer=observer,
                on_fatal=on_fatal,
            )
            lease.watch(writer.lose_lease)
            pool = await _open_pool(settings, pool_size)
        except BaseException:
            if writer is not None:
                await writer.close()
            else:
                await connection.close()
            if lease is not None:
                await lease.release()
            raise
        logger.info(
            "store opened backend=postgresql store=%s owner=%s fence=%d schema_version=%d",
            settings.redacted,
            owner,
            lease.fence,
            schema.SCHEMA_VERSION,
        )
        return cls(
            settings=settings,
            lease=lease,
            writer=writer,
            pool=pool,
            local_instance_id=lease.local_instance_id,
            owner=owner,
        )

    @classmethod
    async def open_cluster(
        cls,
        dsn: str,
        *,
        replica_id: str,
        incarnation: int,
        partitions: int,
        settings: CommitWriterSettings | None = None,
        observer: StoreObserver | None = None,
        on_fatal: FatalHandler | None = None,
        on_beat: Callable[[float], None] | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> PostgresStore:
        """A cluster replica's store (cluster.md §3.6): check the schema is current and the
        database a cluster's of `partitions` partitions, then start the writer (fenced by
        this replica's `incarnation`, which the caller joined before) and the readers. No
        lease is taken and nothing is written at open.

        Args:
            dsn: as for `open`.
            replica_id: this replica's id (the sessions' `application_name`, the fence).
            incarnation: this start's incarnation (`MembershipTable.join`).
            partitions: the cluster's P, as the caller read it at set-up.
            settings: group commit settings.
            observer: receives the writer's measurements (backend `postgresql`).
            on_fatal: called once if the incarnation is fenced or the server reports
                damaged data: the replica must exit (cluster.md §3.5).
            connect_timeout: seconds one connection attempt may take.

        Raises:
            StoreDsnInvalid: `dsn` is not a connection string.
            StoreUnavailable: the server cannot be reached; nothing was written.
            ClusterModeMismatch: the database is empty, of an older version, or not a
                cluster's; nothing was written.
            DatabaseSchemaMismatch: a newer or unknown version, another protocol, foreign
                tables.
            PartitionCountMismatch: the cluster has another P.
        """
        connect = ConnectSettings.parse(dsn, owner=replica_id, connect_timeout=connect_timeout)
        connection = await connect.connect(WRITER_ROLE)
        try:
            meta = await _cluster_meta(connection, connect.redacted)
        except psycopg.Error as error:
            raise connect.unavailable(
                f"checking the schema of {connect.redacted} failed", error
            ) from None
        finally:
            # The writer connects at its first group, with the writer session's settings.
            await connection.close()
        if meta.partitions != partitions:
            raise PartitionCountMismatch(found=meta.partitions, wanted=partitions)
        writer = PostgresWriter.start(
            None,
            connect=connect,
            fence=IncarnationFence(replica_id, incarnation, on_beat=on_beat),
            settings=settings,
            observer=observer,
            on_fatal=on_fatal,
        )
        try:
            pool = await _open_pool(connect, READ_POOL_SIZE)
        except BaseException:
            await writer.close()
            raise
        logger.info(
            "store opened backend=postgresql store=%s mode=cluster replica=%s incarnation=%d "
            "partitions=%d schema_version=%d",
            connect.redacted,
            replica_id,
            incarnation,
            partitions,
            schema.SCHEMA_VERSION,
        )
        return cls(
            settings=connect,
            lease=None,
            writer=writer,
            pool=pool,
            local_instance_id=meta.local_instance_id,
            owner=schema.CLUSTER_OWNER,
            partitions=partitions,
        )

    @property
    def cluster(self) -> bool:
        """Whether this is a cluster replica's store (`open_cluster`)."""
        return self.partitions is not None

    @property
    def owner(self) -> str:
        """The owner this store's agents are kept under (`CLUSTER_OWNER` in a cluster)."""
        return self._owner

    @property
    def fence(self) -> int:
        """This daemon's fencing token for the owner's lease.

        Raises:
            StoreError: a cluster store, which holds no lease (its writer is fenced by the
                replica's incarnation).
        """
        return self._held_lease().fence

    @property
    def lease_state(self) -> LeaseState:
        """The lease's current state (RECONNECTING while its lock connection is down).

        Raises:
            StoreError: a cluster store, which holds no lease.
        """
        return self._held_lease().state

    def _held_lease(self) -> Lease:
        if self._lease is None:
            raise StoreError("a cluster replica's store holds no owner lease")
        return self._lease

    @property
    def state(self) -> StoreState:
        """The store's current state."""
        return self._state

    @property
    def writer_state(self) -> CommitWriterState:
        """The writer's state (FAILED after a lost lease or damaged data)."""
        return self._writer.state

    def hold(self, partitions: Iterable[int]) -> None:
        """A cluster replica holds `partitions` now: a claim of them committed, or they are
        what it holds when it arms the seam with its first call (cluster.md §3.2). From that
        call on, a unit writing as a partition not held, or submitted before the claim that
        holds it now, fails `PartitionNotHeld` with nothing written; a `ReleasePartitions`
        unit gives its partitions up in submission order.

        Raises:
            StoreError: not a cluster's store.
        """
        if self.partitions is None:
            raise StoreError("only a cluster replica's store holds partitions")
        held = self._held
        if held is None:
            held = self._held = HeldPartitions(self.partitions)
            self._writer.guard(held)
        held.claim(partitions)

    async def apply(self, writes: Iterable[Write]) -> None:
        """Commit `writes` atomically as one unit of a group commit (see `PostgresWriter.submit`).

        Raises besides: `PartitionNotHeld` once `hold` armed the seam (nothing written)."""
        unit = tuple(writes)
        if not unit:
            return
        self._check_open()
        plan = tables.plan_unit(self._owner, unit, self.partitions)
        held = self._held
        await self._writer.submit(plan if held is None else held.scoped(plan, unit))

    async def identities(self) -> list[IdentityRow]:
        return await self._read(lambda c: tables.read_identities(c, self._owner))

    async def token(self, token_digest: str) -> tuple[str, bool] | None:
        return await self._read(lambda c: tables.read_token(c, self._owner, token_digest))

    async def cursor(self, subscription: str) -> bytes | None:
        return await self._read(lambda c: tables.read_cursor(c, self._owner, subscription))

    async def snapshot(self, agent_id: str) -> AgentSnapshot:
        return await self._read(lambda c: tables.read_snapshot(c, agent_id))

    async def unread(self, agent_id: str, after_seq: int, limit: int) -> list[InboxRow]:
        return await self._read(lambda c: tables.read_unread(c, agent_id, after_seq, limit))

    async def pending_deliveries(self, agent_id: str, limit: int) -> list[DeliveryRow]:
        return await self._read(lambda c: tables.read_pending_deliveries(c, agent_id, limit))

    async def inbox_item(self, agent_id: str, token: str) -> InboxRow | None:
        return await self._read(lambda c: tables.read_inbox_by_token(c, agent_id, token))

    async def inbox_items(self, agent_id: str, tokens: Sequence[str]) -> dict[str, InboxRow]:
        return await self._read(lambda c: tables.read_inbox_by_tokens(c, agent_id, tokens))

    async def unread_summary(self) -> dict[str, tuple[int, float]]:
        return await self._read(lambda c: tables.read_unread_summary(c, self._owner))

    async def oldest_unread(self, agent_id: str) -> float | None:
        return await self._read(lambda c: tables.read_oldest_unread(c, agent_id))

    async def unread_count(self, agent_id: str) -> int:
        return await self._read(lambda c: tables.read_unread_count(c, agent_id))

    async def conversations(self, agent_id: str) -> list[ConversationRow]:
        return await self._read(lambda c: tables.read_conversations(c, agent_id))

    async def records(
        self, agent_id: str, conversation_id: str, after_depth: int, limit: int
    ) -> list[RecordRow]:
        return await self._read(
            lambda c: tables.read_records(c, agent_id, conversation_id, after_depth, limit)
        )

    async def record(self, agent_id: str, record_hash: str) -> RecordRow | None:
        return await self._read(lambda c: tables.read_record_by_hash(c, agent_id, record_hash))

    async def completed_reanchor(
        self, agent_id: str, conversation_id: str, previous_anchor_hash: str
    ) -> bytes | None:
        return await self._read(
            lambda c: tables.read_completed_reanchor(
                c, agent_id, conversation_id, previous_anchor_hash
            )
        )

    async def intent(self, agent_id: str, post_id: str) -> IntentRow | None:
        return await self._read(lambda c: tables.read_intent(c, agent_id, post_id))

    async def send_row(self, agent_id: str, key: str) -> SendRow | None:
        return await self._read(lambda c: tables.read_send(c, agent_id, key))

    # --- a cluster's reads (cluster.md §3.4, §5, §6) -----------------------------------

    async def conversation_rows(self, conversation_id: str) -> dict[str, ConversationRow]:
        """Every member's row of a conversation, by AgentId."""
        return await self._read(lambda c: cluster_reads.read_conversation_rows(c, conversation_id))

    async def open_intents_of(self, conversation_id: str) -> list[tuple[str, IntentRow, bytes]]:
        """(author, row, MembershipDescriptor bytes) of each open intent of a conversation
        bound away from its sequencer (`seq_partition` set), in bind order."""
        return await self._read(lambda c: cluster_reads.read_open_intents_of(c, conversation_id))

    async def open_conversations(self, partitions: Collection[int]) -> list[str]:
        """Conversations with open intents sequenced in `partitions`."""
        return await self._read(lambda c: cluster_reads.read_open_conversations(c, partitions))

    async def agents_with_pending(self, partitions: Collection[int]) -> list[str]:
        """Agents homed in `partitions` with pending deliveries."""
        return await self._read(lambda c: cluster_reads.read_agents_with_pending(c, partitions))

    async def intent_states(
        self, post_ids: Collection[str]
    ) -> list[tuple[str, str, IntentState, str | None]]:
        """(author, PostId, state, RecordHash) of the intents of `post_ids`."""
        return await self._read(lambda c: cluster_reads.read_intent_states(c, post_ids))

    async def identities_in(self, partitions: Collection[int]) -> list[IdentityRow]:
        """This owner's identities homed in `partitions`, seeds as stored."""
        return await self._read(
            lambda c: cluster_reads.read_identities_in(c, self._owner, partitions)
        )

    async def identity(self, agent_id: str) -> IdentityRow | None:
        """One of this owner's identities, seed as stored (sealed in a cluster)."""
        return await self._read(lambda c: cluster_reads.read_identity(c, self._owner, agent_id))

    async def close(self) -> None:
        """Close the readers, commit every accepted write, release the lease; idempotent."""
        if self._state is not StoreState.OPEN:
            await self._closed.wait()
            return
        self._state = StoreState.CLOSING
        try:
            await self._pool.close()
        finally:
            try:
                # The writer flushes under the lease, so the lease goes last.
                await self._writer.close()
            finally:
                if self._lease is not None:
                    await self._lease.release()
                self._state = StoreState.CLOSED
                self._closed.set()
                logger.info(
                    "store closed backend=postgresql store=%s owner=%s",
                    self._settings.redacted,
                    self._owner,
                )

    def _check_open(self) -> None:
        if self._state is not StoreState.OPEN:
            raise StoreClosed("the store", self._state.name)

    async def _read(self, fn: Callable[[Connection], Awaitable[T]]) -> T:
        """Run `fn` on a pooled reader connection, within `READ_TIMEOUT`.

        A pooled connection may have died with a server restart since its last use: a read
        that fails on a lost connection is tried once more on a fresh one (reads are
        idempotent). Then `StoreUnavailable`.
        """
        self._check_open()
        for attempt in (1, 2):
            try:
                async with asyncio.timeout(READ_TIMEOUT), self._pool.connection() as connection:
                    return await fn(connection)
            except PoolClosed:
                raise StoreClosed("the store", self._state.name) from None
            except psycopg.OperationalError as error:
                if attempt == 1 and _retryable(error):
                    continue
                raise self._settings.unavailable("a store read failed", error) from None
            except TimeoutError as error:
                raise self._settings.unavailable("a store read timed out", error) from None
            except psycopg.Error as error:
                raise StoreError(
                    f"a store read failed: {self._settings.describe(error)}"
                ) from error
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


async def _cluster_meta(connection: Connection, store: str) -> schema.ClusterMeta:
    """The cluster's facts, once the schema is found current (else `ClusterModeMismatch`,
    or `DatabaseSchemaMismatch` for a database this build may not touch)."""
    status = await schema.inspect(connection)
    match status.state:
        case schema.SchemaState.CURRENT:
            return await schema.read_cluster_meta(connection, store)
        case schema.SchemaState.EMPTY:
            raise ClusterModeMismatch(
                store,
                "the database is empty; set it up for the cluster with "
                "`harness-gateway migrate --cluster` first",
            )
        case schema.SchemaState.OLDER:
            raise ClusterModeMismatch(
                store,
                f"the database has schema version {status.found_value}; run "
                f"`harness-gateway migrate --store {store}` first",
            )
        case schema.SchemaState.REFUSED:
            raise schema.refusal(status, store)


def _retryable(error: psycopg.OperationalError) -> bool:
    """A read worth one more try: its pooled connection was lost, not a pool timeout."""
    return not isinstance(error, PoolTimeout)


async def _open_pool(settings: ConnectSettings, size: int) -> AsyncConnectionPool[Connection]:
    pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
        settings.dsn,
        kwargs=settings.kwargs(READER_ROLE),
        min_size=1,
        max_size=size,
        open=False,
        timeout=settings.connect_timeout,
        reconnect_timeout=READER_RECONNECT_TIMEOUT,
        name=f"harness-reader:{settings.owner}",
        num_workers=1,
    )
    try:
        await pool.open(wait=True, timeout=settings.connect_timeout)
    except psycopg.Error as error:
        await pool.close()
        raise settings.unavailable(
            f"cannot open reader connections to {settings.redacted}", error
        ) from None
    except BaseException:
        await pool.close()
        raise
    return pool

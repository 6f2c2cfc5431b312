"""The lease under which one daemon owns an owner's agents (engine.md §8 Exclusive ownership).

`await Lease.acquire(settings, holder=...)` opens a dedicated connection and takes the
session advisory lock `advisory_key("harness-lease:" + owner)` with `pg_try_advisory_lock`;
if another session holds it, `StoreLeaseHeld` names the holder from the lease row. With the
lock held it bumps the row's fencing token (`fence = fence + 1`) and mints the owner's local
instance id on its first open, in one transaction. Callers may rely on:

- The advisory lock refuses a second live daemon; the *fence* is what keeps data safe.
  Every write transaction share-locks the lease row and compares its fence first
  (`FENCE_CHECK`), so once a claimer's bump commits, no write under the old fence commits.
- `watch(on_lost)` starts the one task the lease owns: it waits on the idle lock
  connection (no query, no write while idle: keepalives notice a silent peer) and, if the
  connection drops, tries again every `retry_interval` until it holds the lock again. An
  unchanged fence means nobody claimed: it carries on (`HELD`). A changed fence means the
  lease was taken: `on_lost(StoreLeaseLost)` is called once and the lease is `LOST`. A
  lock still held elsewhere with an unchanged fence may be our own dead session the
  server has not noticed yet, or a claimer before its bump: it keeps trying.
- `release()` ends the task and closes the connection, which drops the advisory lock; the
  row stays, so the next claimer's fence is higher. Idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable
from typing import Final

import psycopg

from gateway.store.errors import (
    ClusterModeMismatch,
    StoreLeaseHeld,
    StoreLeaseLost,
    StoreUnavailable,
)
from gateway.store.layout import LOCAL_INSTANCE_KEY
from gateway.store.postgres.connection import Connection, ConnectSettings, advisory_key
from gateway.store.postgres.schema import CLUSTER_MODE, MODE_KEY

logger = logging.getLogger(__name__)

LEASE_RETRY_INTERVAL: Final = 1.0
"""Seconds between attempts to take the lock again after its connection dropped.

Short, so a daemon re-holds its lease soon after a PostgreSQL restart; each attempt is
bounded by the connect timeout, and the loop runs only while the connection is lost."""

LEASE_ROLE: Final = "lease"
"""The lock connection's role: its `application_name` is `harness-lease:<owner>`."""

_UPSERT_LEASE: Final = (
    "INSERT INTO leases (owner, fence, holder, acquired_at) VALUES (%s, 1, %s, now()) "
    "ON CONFLICT (owner) DO UPDATE SET fence = leases.fence + 1, holder = excluded.holder, "
    "acquired_at = excluded.acquired_at RETURNING fence"
)


class LeaseState(enum.Enum):
    """Where a `Lease` is in its life."""

    HELD = "held"
    """The lock connection is up and holds the advisory lock."""
    RECONNECTING = "reconnecting"
    """The lock connection dropped; writes go on under the fence check while it retries."""
    LOST = "lost"
    """Another daemon took the lease: `on_lost` was called."""
    RELEASED = "released"
    """`release()` ran: the lock connection is closed."""


class Lease:
    """One owner's lease: the lock connection, the fence and the task that watches them.

    Obtain one with `await Lease.acquire(...)`.
    """

    def __init__(
        self,
        settings: ConnectSettings,
        connection: Connection,
        *,
        fence: int,
        local_instance_id: str,
        retry_interval: float,
    ) -> None:
        """Wrap a held lock; use `Lease.acquire` instead."""
        self._settings = settings
        self._connection: Connection | None = connection
        self.fence: Final = fence
        """This daemon's fencing token: the lease row's fence right after the claim."""
        self.local_instance_id: Final = local_instance_id
        """The owner's durable local instance id (engine.md §5.10)."""
        self._retry_interval = retry_interval
        self._state = LeaseState.HELD
        self._task: asyncio.Task[None] | None = None
        self._on_lost: Callable[[StoreLeaseLost], None] | None = None

    @classmethod
    async def acquire(
        cls,
        settings: ConnectSettings,
        *,
        holder: str,
        mint_instance: Callable[[], str],
        retry_interval: float = LEASE_RETRY_INTERVAL,
    ) -> Lease:
        """Take the owner's advisory lock, bump the fence, read (or mint) the local instance.

        Raises:
            StoreLeaseHeld: another session holds the lock; nothing was written.
            ClusterModeMismatch: the database was moved into a cluster meanwhile; nothing
                was written.
            StoreUnavailable: the server cannot be reached.
        """
        if retry_interval <= 0:
            raise ValueError(f"retry_interval must be > 0 seconds, got {retry_interval}")
        owner = settings.owner
        connection = await settings.connect(LEASE_ROLE)
        try:
            if not await _try_lock(connection, owner):
                row = await (
                    await connection.execute("SELECT holder FROM leases WHERE owner = %s", (owner,))
                ).fetchone()
                raise StoreLeaseHeld(owner, None if row is None else str(row[0]))
            async with connection.transaction():
                # Checked under the lock: `migrate --cluster` holds every owner's lock while it
                # moves the database, so a daemon whose schema check ran just before the move
                # committed finds the cluster here instead of writing into it (cluster.md §12.2).
                if await _is_cluster(connection):
                    raise ClusterModeMismatch(
                        settings.redacted,
                        "the database was moved into a cluster (harness_meta.mode = cluster); "
                        "start the gateway with --cluster",
                    )
                bumped = await (await connection.execute(_UPSERT_LEASE, (owner, holder))).fetchone()
                assert bumped is not None
                await connection.execute(
                    "INSERT INTO owner_meta (owner, key, value) VALUES (%s, %s, %s) "
                    "ON CONFLICT DO NOTHING",
                    (owner, LOCAL_INSTANCE_KEY, mint_instance()),
                )
                local = await (
                    await connection.execute(
                        "SELECT value FROM owner_meta WHERE owner = %s AND key = %s",
                        (owner, LOCAL_INSTANCE_KEY),
                    )
                ).fetchone()
                assert local is not None
        except psycopg.Error as error:
            await connection.close()
            raise settings.unavailable(f"claiming the lease of {owner!r} failed", error) from None
        except BaseException:
            await connection.close()
            raise
        fence = int(bumped[0])
        logger.info("store lease held owner=%s fence=%d", owner, fence)
        return cls(
            settings,
            connection,
            fence=fence,
            local_instance_id=str(local[0]),
            retry_interval=retry_interval,
        )

    @property
    def state(self) -> LeaseState:
        """The lease's current state."""
        return self._state

    @property
    def owner(self) -> str:
        """The owner this lease is for."""
        return self._settings.owner

    def watch(self, on_lost: Callable[[StoreLeaseLost], None]) -> None:
        """Start watching the lock connection; `on_lost` is called once if the lease is
        taken (on the event loop; it must not raise)."""
        if self._task is not None or self._state is not LeaseState.HELD:
            return
        self._on_lost = on_lost
        self._task = asyncio.get_running_loop().create_task(
            self._watch_loop(), name=f"harness-store-lease:{self.owner}"
        )

    async def release(self) -> None:
        """Stop watching and close the lock connection (dropping the lock); idempotent."""
        if self._state is LeaseState.RELEASED:
            return
        lost = self._state is LeaseState.LOST
        self._state = LeaseState.RELEASED
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close_connection()
        if not lost:
            logger.info("store lease released owner=%s fence=%d", self.owner, self.fence)

    async def _close_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await connection.close()

    async def _watch_loop(self) -> None:
        while True:
            connection = self._connection
            assert connection is not None
            await _wait_closed(connection)
            self._state = LeaseState.RECONNECTING
            logger.warning(
                "store lease connection lost; taking the lock again owner=%s fence=%d",
                self.owner,
                self.fence,
            )
            await self._close_connection()
            found = await self._take_again()
            if found is not None:
                self._lose(found)
                return
            self._state = LeaseState.HELD
            logger.info("store lease held again owner=%s fence=%d", self.owner, self.fence)

    async def _take_again(self) -> StoreLeaseLost | None:
        """Until the lock is ours again with our fence (None), or the fence changed.

        Every attempt, the first included, waits `retry_interval` first: a server that cut
        the session is usually restarting, and writes go on under the fence meanwhile."""
        while True:
            await asyncio.sleep(self._retry_interval)
            try:
                connection = await self._settings.connect(LEASE_ROLE)
            except StoreUnavailable as error:
                logger.debug("store lease reconnect failed owner=%s: %s", self.owner, error)
            else:
                kept = False
                try:
                    outcome = await self._check_again(connection)
                    kept = outcome is True
                except psycopg.Error as error:
                    logger.debug(
                        "store lease check failed owner=%s: %s",
                        self.owner,
                        self._settings.describe(error),
                    )
                else:
                    if isinstance(outcome, StoreLeaseLost):
                        return outcome
                    if kept:
                        self._connection = connection
                        return None
                finally:
                    if not kept:
                        with contextlib.suppress(psycopg.Error, OSError):
                            await connection.close()

    async def _check_again(self, connection: Connection) -> bool | StoreLeaseLost:
        """On a new connection: True if the lock is ours with our fence, the loss if the
        fence moved, False if the lock is held elsewhere with our fence (try later: our
        own session the server has not reaped yet, or a claimer before its bump)."""
        locked = await _try_lock(connection, self.owner)
        row = await (
            await connection.execute("SELECT fence FROM leases WHERE owner = %s", (self.owner,))
        ).fetchone()
        found = None if row is None else int(row[0])
        if found != self.fence:
            return StoreLeaseLost(self.owner, fence=self.fence, found=found)
        return locked

    def _lose(self, error: StoreLeaseLost) -> None:
        self._state = LeaseState.LOST
        logger.error("store lease lost owner=%s fence=%d", self.owner, self.fence)
        if self._on_lost is not None:
            try:
                self._on_lost(error)
            except Exception:  # the handler's defect must not hide the loss in a dead task
                logger.exception("store lease on_lost handler failed")


SERVER_SIDE_SESSION: Final = (
    # The server's own keepalives: a daemon whose machine vanished leaves no FIN, and its
    # session (with the lock) would otherwise linger for the kernel's two hours, refusing
    # the replacement daemon. About 25 s here. Every one of these is settable by any user.
    "SET tcp_keepalives_idle = 10",
    "SET tcp_keepalives_interval = 5",
    "SET tcp_keepalives_count = 3",
    # An operator's idle timeouts must not end the lease of a daemon that is merely idle.
    "SET idle_session_timeout = 0",
    "SET idle_in_transaction_session_timeout = 0",
)
"""Settings of the lease's session, run before the lock is taken."""


async def _try_lock(connection: Connection, owner: str) -> bool:
    for statement in SERVER_SIDE_SESSION:
        await connection.execute(statement)
    row = await (
        await connection.execute(
            "SELECT pg_try_advisory_lock(%s)", (advisory_key(f"harness-lease:{owner}"),)
        )
    ).fetchone()
    return bool(row is not None and row[0])


async def _wait_closed(connection: Connection) -> None:
    """Return once the idle connection is gone: no query runs, the wait is on its socket.

    We LISTEN on nothing, so no notification ever arrives; the wait ends with the error
    psycopg raises when the server closes the session (or keepalives give up on it)."""
    try:
        async for _ in connection.notifies():
            pass
    except psycopg.Error:
        return


async def _is_cluster(connection: Connection) -> bool:
    """Whether `harness_meta` says the database is a cluster's (cluster.md §12.1)."""
    row = await (
        await connection.execute("SELECT value FROM harness_meta WHERE key = %s", (MODE_KEY,))
    ).fetchone()
    return row is not None and str(row[0]) == CLUSTER_MODE

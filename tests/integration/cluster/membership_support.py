"""Helpers for the membership tests: a database with the membership tables, a host that
records what its membership tells it, and a clock that can be paused like a SIGSTOPped process."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import psycopg

from gateway.clock import FakeClock
from gateway.cluster.membership import LeaseLoss, Membership, MembershipSettings
from gateway.store.postgres.membership import (
    PostgresMembershipTable,
    create_membership_tables,
    create_partitions,
)
from tests.servers import PostgresServer

FAST: MembershipSettings = MembershipSettings(
    beat_interval=0.2, lease_ttl=2.0, claim_interval=0.1, safety_margin=0.5, surplus_interval=0.5
)
"""Test timings: a dead replica is judged so within seconds, and a beat or pass may run late by
more than a second on a loaded machine before anything is lost."""

PACE: float = 0.01
"""Seconds of real time between two advances of a `PacedClock`."""


async def connect(dsn: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    """A plain autocommit connection, as a replica's writer would hold one."""
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True)


async def membership_database(server: PostgresServer, partitions: int) -> str:
    """A fresh database with the membership tables and `partitions` partition rows."""
    dsn = server.create_database()
    connection = await connect(dsn)
    try:
        await create_membership_tables(connection)
        await create_partitions(connection, partitions)
    finally:
        await connection.close()
    return dsn


async def holders(dsn: str) -> dict[int, tuple[str | None, int | None, int]]:
    """Every partition's (holder, incarnation, epoch), read directly."""
    connection = await connect(dsn)
    try:
        cursor = await connection.execute(
            "SELECT partition, holder, incarnation, epoch FROM partitions ORDER BY partition"
        )
        return {
            int(str(p)): (
                None if h is None else str(h),
                None if i is None else int(str(i)),
                int(str(e)),
            )
            for p, h, i, e in await cursor.fetchall()
        }
    finally:
        await connection.close()


@dataclass(eq=False)
class Host:
    """What a replica's host does with its membership's calls: it records them and, unless
    told otherwise, releases each offered partition at once (as its writer would)."""

    table: PostgresMembershipTable
    release_offered: bool = True
    lost: list[LeaseLoss] = field(default_factory=list)
    claimed: list[dict[int, int]] = field(default_factory=list)
    offered: set[int] = field(default_factory=set)
    membership: Membership | None = None
    _releases: asyncio.Queue[int] = field(default_factory=lambda: asyncio.Queue(maxsize=4096))
    _worker: asyncio.Task[None] | None = None

    def on_lost(self, reason: LeaseLoss) -> None:
        self.lost.append(reason)

    def on_claimed(self, partitions: Mapping[int, int]) -> None:
        self.claimed.append(dict(partitions))

    def on_surplus(self, partitions: frozenset[int]) -> None:
        self.offered |= partitions
        if self.release_offered:
            for partition in sorted(partitions):
                self._releases.put_nowait(partition)

    async def release(self, partition: int) -> None:
        """Release `partition` directly and report it, as the writer's release unit would."""
        membership = self.membership
        assert membership is not None
        await self.table.release(partition, membership.replica_id, membership.incarnation)
        membership.released(partition)

    async def _release_loop(self) -> None:
        while True:
            await self.release(await self._releases.get())

    def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(self._release_loop())

    async def stop(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker


@contextlib.asynccontextmanager
async def replica(
    dsn: str,
    replica_id: str,
    *,
    clock: FakeClock | None = None,
    release_offered: bool = True,
    serving: bool = True,
) -> AsyncIterator[tuple[Membership, Host]]:
    """A started membership (serving unless told otherwise) and its host, closed on exit."""
    table = PostgresMembershipTable.for_dsn(dsn, replica_id=replica_id)
    host = Host(table, release_offered=release_offered)
    try:
        membership = await Membership.start(
            table,
            replica_id=replica_id,
            address=f"{replica_id}.cluster:7443",
            on_lost=host.on_lost,
            on_claimed=host.on_claimed,
            on_surplus=host.on_surplus,
            settings=FAST,
            **({} if clock is None else {"clock": clock}),
        )
        host.membership = membership
        host.start()
        try:
            if serving:
                await membership.serving()
            yield membership, host
        finally:
            await host.stop()
            await membership.close()
    finally:
        await table.close()


@dataclass(eq=False)
class PacedClock:
    """A `FakeClock` moved forward with real time while running; `pause()` freezes it, as
    SIGSTOP freezes a process's timers (its sleepers wake only when it is moved again)."""

    clock: FakeClock = field(default_factory=FakeClock)
    _task: asyncio.Task[None] | None = None

    async def _pace_loop(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(PACE)
            now = time.monotonic()
            self.clock.advance(now - last)
            last = now

    def resume(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._pace_loop())

    async def pause(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@contextlib.asynccontextmanager
async def paced() -> AsyncIterator[PacedClock]:
    """A running `PacedClock`, paused on exit."""
    pacer = PacedClock()
    pacer.resume()
    try:
        yield pacer
    finally:
        await pacer.pause()

"""Helpers for the PostgreSQL store tests: a store on a fresh database, its sessions."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from gateway.store.postgres import PostgresStore
from gateway.store.postgres.membership import PostgresMembershipTable
from gateway.store.postgres.schema import setup_cluster
from gateway.store.records import PutIdentity, PutInboxItem
from tests.servers import PostgresServer


@dataclass
class FatalRecorder:
    """An `on_fatal` handler that keeps what it was given."""

    errors: list[BaseException] = field(default_factory=list)

    def __call__(self, error: BaseException) -> None:
        self.errors.append(error)


@asynccontextmanager
async def opened(dsn: str, owner: str = "daemon-a", **options: Any) -> AsyncIterator[PostgresStore]:
    """A `PostgresStore` on `dsn`, closed on exit."""
    store = await PostgresStore.open(dsn, owner=owner, **options)
    try:
        yield store
    finally:
        await store.close()


def identity(agent_id: str, name: str) -> PutIdentity:
    return PutIdentity(
        agent_id=agent_id, agent_name=name, signed_card=b"{}", seed=b"s" * 32, created_at="t"
    )


def inbox_item(agent_id: str, seq: int, token: str) -> PutInboxItem:
    return PutInboxItem(
        agent_id=agent_id, seq=seq, token=token, item=b"{}", guidance=None, created_at=float(seq)
    )


async def session_pids(server: PostgresServer, application_name: str) -> list[int]:
    """Backend pids of the sessions named `application_name`."""
    out = await asyncio.to_thread(
        server.sql,
        "SELECT pid FROM pg_stat_activity WHERE application_name = "
        f"'{application_name}' ORDER BY pid",
    )
    return [int(line) for line in out.split()]


async def terminate_sessions(server: PostgresServer, application_name: str) -> int:
    """Terminate every session named `application_name`; how many there were."""
    out = await asyncio.to_thread(
        server.sql,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        f"WHERE application_name = '{application_name}'",
    )
    return int(out.strip() or 0)


def database_sql(server: PostgresServer, dsn: str, statement: str) -> str:
    """Run one statement in the database of `dsn` (its last path segment)."""
    return server.sql(statement, database=dsn.rsplit("/", 1)[1])


UNDO_VERSION_3 = (
    "DROP TABLE replicas",
    "DROP TABLE partitions",
    "DROP INDEX identities_cluster_name",
    "DROP INDEX identities_by_home",
    "ALTER TABLE identities DROP COLUMN home_partition",
    "DROP INDEX conversations_by_conversation",
    "ALTER TABLE conversations DROP COLUMN set_aside",
    "DROP FUNCTION harness_stale(TEXT)",
    "DROP INDEX post_intents_sequencing",
    "DROP INDEX post_intents_by_post",
    "ALTER TABLE post_intents DROP COLUMN seq_partition",
    "ALTER TABLE post_intents DROP COLUMN descriptor",
    "DROP INDEX certified_records_post",
    "ALTER TABLE certified_records ALTER COLUMN commit_seq DROP DEFAULT",
    "DROP INDEX pending_deliveries_by_home",
    "DROP INDEX pending_deliveries_record",
    "ALTER TABLE pending_deliveries ALTER COLUMN commit_seq DROP DEFAULT",
    "ALTER TABLE pending_deliveries DROP COLUMN home_partition",
    "DROP SEQUENCE harness_commit_order",
    "UPDATE harness_meta SET value = '2' WHERE key = 'schema_version'",
)
"""Turns a database of schema version 3 back into version 2 (engine.md §8.5), as a
network-mode database written before cluster mode is."""


def as_version_2(server: PostgresServer, dsn: str) -> None:
    """Rewrite the database of `dsn` (schema version 3) as version 2 wrote it."""
    for statement in UNDO_VERSION_3:
        database_sql(server, dsn, statement)


@dataclass(eq=False)
class _Link:
    """One proxied connection: both ends' writers, and whether it is the store's writer."""

    to_client: asyncio.StreamWriter
    to_server: asyncio.StreamWriter
    writer_session: bool = False
    server_spoke: bool = False
    """The server sent something since the client last did: the client's next chunk starts
    a new round trip."""

    def cut(self) -> None:
        self.to_client.close()
        self.to_server.close()


@dataclass
class Proxy:
    """A loopback TCP proxy in front of PostgreSQL, for what the server cannot be made to do.

    - `delay`: every chunk is delivered `delay` seconds after it arrived, in order, both
      ways, so each round trip costs at least 2 × `delay`.
    - `writer_round_trips`: how many times the store's write connection sent after hearing
      from the server: its round trips, counted from the traffic's turns, not timed.
    - `cut_writer_commit`: the next chunk from the store's write connection (its startup
      names `harness-writer:`) that holds a COMMIT is not forwarded: the connection is cut
      both ways instead, as a network failure during COMMIT would.
    """

    target_port: int
    delay: float = 0.0
    cut_writer_commit: bool = False
    writer_round_trips: int = 0
    server: asyncio.Server | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    def dsn(self, direct: str) -> str:
        """`direct` (a DSN of the proxied server) through this proxy."""
        return direct.replace(f":{self.target_port}/", f":{self.port}/")

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.tasks):
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await task
        if self.server is not None:
            await self.server.wait_closed()

    def _spawn(self, coroutine: Coroutine[None, None, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(
            "127.0.0.1", self.target_port
        )
        link = _Link(to_client=writer, to_server=upstream_writer)
        self._spawn(self._pump(reader, upstream_writer, link, from_client=True))
        self._spawn(self._pump(upstream_reader, writer, link, from_client=False))

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        link: _Link,
        *,
        from_client: bool,
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(maxsize=1024)

        async def deliver() -> None:
            while True:
                due, chunk = await queue.get()
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if not chunk:
                    writer.close()
                    return
                writer.write(chunk)
                await writer.drain()

        delivering = asyncio.get_running_loop().create_task(deliver())
        try:
            while True:
                chunk = await reader.read(65536)
                if from_client:
                    link.writer_session = link.writer_session or b"harness-writer:" in chunk
                    if link.writer_session and link.server_spoke:
                        self.writer_round_trips += 1
                    link.server_spoke = False
                    if link.writer_session and self.cut_writer_commit and b"COMMIT" in chunk:
                        self.cut_writer_commit = False
                        link.cut()
                        return
                else:
                    link.server_spoke = True
                await queue.put((time.monotonic() + self.delay, chunk))
                if not chunk:
                    break
            await delivering
        except OSError:
            link.cut()
        finally:
            delivering.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await delivering
            writer.close()


CLUSTER_PARTITIONS = 8
CLUSTER_REPLICA = "replica-a"


@dataclass
class Cluster:
    dsn: str
    incarnation: int
    store: PostgresStore
    fatal: FatalRecorder


@asynccontextmanager
async def cluster_store(
    server: PostgresServer,
    proxy: Proxy | None = None,
    *,
    partitions: int = CLUSTER_PARTITIONS,
    replica_id: str = CLUSTER_REPLICA,
) -> AsyncIterator[Cluster]:
    """A database set up for a cluster of `partitions` partitions, one joined replica, its store (its
    connections through `proxy` when given)."""
    direct = server.create_database()
    dsn = direct if proxy is None else proxy.dsn(direct)
    await setup_cluster(dsn, partitions=partitions, key_check="check")
    table = PostgresMembershipTable.for_dsn(dsn, replica_id=replica_id)
    try:
        joined = await table.join(replica_id, "127.0.0.1:1")
    finally:
        await table.close()
    fatal = FatalRecorder()
    store = await PostgresStore.open_cluster(
        dsn,
        replica_id=replica_id,
        incarnation=joined.incarnation,
        partitions=partitions,
        on_fatal=fatal,
    )
    try:
        yield Cluster(dsn=dsn, incarnation=joined.incarnation, store=store, fatal=fatal)
    finally:
        await store.close()

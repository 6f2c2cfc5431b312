"""The SQLite database under the store: settings, the `meta` table, checks, readers.

`open_database(path)` gives a connection with the store's settings. `await
SqliteDatabase.open(path, schema=...)` is how the store opens its file; callers may rely on:

- An existing file is checked before anything is written to it: `PRAGMA quick_check`
  (problems, or a file that is not a database: `StoreCorrupt`), then `meta`'s
  `schema_version` and `protocol_version` (any other value than this build's, or tables
  without `meta`: `SchemaVersionMismatch`). A refused file is left as it was: the store
  fails closed (engine.md §8 "Rehydration"). A file of an older version that the
  `Schema` has a `Migration` chain for is migrated in one transaction with the versions.
- A new or empty file gets `meta`, every statement of the `Schema` and its `created`
  facts in one transaction.
- `write(unit)` is `CommitWriter.submit`: group commit on the one write connection.
- `read(fn)` runs `fn(connection)` on one of a few reader connections, each on its own
  thread, inside one read transaction (a consistent WAL snapshot); readers never wait for
  the writer and never write (`query_only`). Whatever `fn` raises reaches the caller.
- `close()` refuses new calls, closes the readers after the reads in flight, then commits
  everything accepted and closes the writer; idempotent.

Nothing here takes the data-directory lock: the composition root holds a `DataDirLock`
before it opens the database inside that directory.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from gateway.closing import AsyncClosing
from gateway.store.errors import SchemaVersionMismatch, StoreClosed, StoreCorrupt, StoreError
from gateway.store.observer import StoreObserver
from gateway.store.writer import (
    CommitWriter,
    CommitWriterSettings,
    CommitWriterState,
    FatalHandler,
    connect_on_own_thread,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

PROTOCOL_VERSION: Final = "harness/1"
"""The protocol a store file was written for, kept in `meta` (engine.md §8)."""

META_TABLE: Final = "meta"
"""The table of store-wide facts: versions now, the Registry public key later (§8)."""

SCHEMA_VERSION_KEY: Final = "schema_version"
"""`meta` key of the schema version, an integer."""

PROTOCOL_VERSION_KEY: Final = "protocol_version"
"""`meta` key of the protocol version, `PROTOCOL_VERSION`."""

BUSY_TIMEOUT: Final = 5.0
"""Seconds a connection waits for a lock another connection holds before SQLITE_BUSY.

The daemon owns its file alone (the data-directory lock), so the only waits are a reader
against a checkpoint; five seconds turns a stuck lock into an error instead of a hang."""

READER_CONNECTIONS: Final = 2
"""Reader connections, each with its own thread.

WAL lets reads run beside the writer; reads here are short lookups at rehydration and
for management calls, so two keep one slow read from stalling the others."""

QUICK_CHECK_DETAIL_LINES: Final = 5
"""Lines of a failed `quick_check` report kept in `StoreCorrupt.detail`."""

READER_THREAD_NAME: Final = "harness-store-reader"
"""Name prefix of the reader threads, for thread dumps."""

_CORRUPT_ERRORS: Final = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
"""SQLite result codes that mean the file is damaged or is not a database."""

_META_DDL: Final = "CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value NOT NULL) WITHOUT ROWID"
_META_INSERT: Final = "INSERT INTO meta (key, value) VALUES (?, ?)"
_META_VERSIONS: Final = "SELECT key, value FROM meta WHERE key IN (?, ?)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration:
    """The step from schema `from_version` to `from_version + 1`."""

    from_version: int
    apply: Callable[[sqlite3.Connection], None]
    """Runs inside the opening transaction; it must not commit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Schema:
    """The tables a store file holds, at one version.

    `statements` are single DDL statements run in order, in the transaction that creates
    `meta`, on a new file only. A file of an older version is migrated through
    `migrations` when every step is there; any other version is refused.
    """

    version: int
    """Stored as `meta.schema_version`; bump it whenever `statements` change."""
    statements: tuple[str, ...]
    """CREATE TABLE / CREATE INDEX statements, one statement each."""
    migrations: tuple[Migration, ...] = ()
    created: Callable[[], dict[str, str]] = dict
    """Facts written to `meta` when the file is created (the local instance id)."""

    def __post_init__(self) -> None:
        if self.version < 1:
            raise ValueError(f"a schema version is >= 1, got {self.version}")

    def migration_from(self, version: int) -> Migration | None:
        """The step from `version`, if this build has it."""
        return next((m for m in self.migrations if m.from_version == version), None)

    def can_migrate(self, version: int) -> bool:
        """Whether a file of `version` reaches this version through known steps."""
        while version < self.version:
            if self.migration_from(version) is None:
                return False
            version += 1
        return version == self.version


def read_meta(connection: sqlite3.Connection, key: str) -> object:
    """One `meta` value, or None."""
    row = connection.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


class DatabaseState(enum.Enum):
    """Where a `SqliteDatabase` is in its life."""

    OPEN = "open"
    """Serving reads and writes (writes fail if the writer is FAILED)."""
    CLOSING = "closing"
    """`close()` was called: refusing new reads and writes, finishing accepted ones."""
    CLOSED = "closed"
    """Every connection is closed."""


def open_database(path: Path | str, *, read_only: bool = False) -> sqlite3.Connection:
    """Open `path` with the store's settings, in the calling thread.

    Autocommit mode (`isolation_level=None`: transactions are explicit, `BEGIN IMMEDIATE`
    ... `COMMIT`), `foreign_keys=ON` and a busy timeout of `BUSY_TIMEOUT`. A writer gets
    `journal_mode=WAL` and `synchronous=FULL` (a COMMIT returns after its sync); a reader
    (`read_only`) gets `query_only=ON`. The connection keeps `check_same_thread`: open it on
    the thread that uses it.

    Raises:
        StoreCorrupt: the file is not a database or is damaged.
        StoreError: the file cannot use WAL.
    """
    connection = sqlite3.connect(
        path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=read_only
    )
    try:
        connection.execute("PRAGMA foreign_keys = ON")
        if read_only:
            connection.execute("PRAGMA query_only = ON")
        else:
            (mode,) = connection.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode != "wal":
                raise StoreError(f"store file {path} cannot use WAL (journal_mode is {mode})")
            connection.execute("PRAGMA synchronous = FULL")
    except sqlite3.DatabaseError as error:
        connection.close()
        _raise_if_corrupt(Path(path), error)
        raise
    except BaseException:
        connection.close()
        raise
    return connection


class SqliteDatabase(AsyncClosing):
    """One store file: a `CommitWriter` for writes, reader connections for reads.

    Obtain one with `await SqliteDatabase.open(path, schema=...)`; an async context manager
    whose exit calls `close()`.
    """

    def __init__(self, path: Path, writer: CommitWriter, readers: Sequence[_Reader]) -> None:
        """Wrap an open writer and readers; use `SqliteDatabase.open` instead."""
        self._path = path
        self._writer = writer
        self._readers = tuple(readers)
        self._idle_readers: asyncio.Queue[_Reader] = asyncio.Queue(maxsize=len(readers))
        for reader in readers:
            self._idle_readers.put_nowait(reader)
        self._state = DatabaseState.OPEN
        self._closed = asyncio.Event()

    @classmethod
    async def open(
        cls,
        path: Path | str,
        *,
        schema: Schema,
        writer_settings: CommitWriterSettings | None = None,
        readers: int = READER_CONNECTIONS,
        observer: StoreObserver | None = None,
        on_fatal: FatalHandler | None = None,
    ) -> SqliteDatabase:
        """Check or create the file, start the writer, open the readers.

        Args:
            path: the database file; its directory must exist.
            schema: the tables and version this build expects.
            writer_settings: group commit settings (`Settings.commit_delay` and
                `Settings.commit_max_batch`).
            readers: reader connections, at least one.
            observer: receives the writer's measurements (backend `sqlite`).
            on_fatal: called once if the writer fails (engine.md §8: stop the daemon).

        Raises:
            StoreCorrupt: `quick_check` failed or the file is not a database.
            SchemaVersionMismatch: the file is of another version; it was left untouched.
        """
        if readers < 1:
            raise ValueError(f"a database needs at least one reader, got {readers}")
        file = Path(path)
        writer = await CommitWriter.start(
            functools.partial(_open_and_prepare, file, schema),
            settings=writer_settings,
            observer=observer,
            on_fatal=on_fatal,
        )
        opened: list[_Reader] = []
        try:
            while len(opened) < readers:
                opened.append(await _Reader.open(file))
        except BaseException:
            for reader in opened:
                await reader.close()
            await writer.close()
            raise
        logger.info("store opened path=%s schema_version=%d", file, schema.version)
        return cls(file, writer, opened)

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def state(self) -> DatabaseState:
        """The database's current state."""
        return self._state

    @property
    def writer_state(self) -> CommitWriterState:
        """The commit writer's state (FAILED after a fatal store error)."""
        return self._writer.state

    async def write(self, unit: Callable[[sqlite3.Connection], T]) -> T:
        """Run `unit` in the next group commit; see `CommitWriter.submit`.

        Raises:
            StoreClosed: the database is CLOSING or CLOSED.
            StoreFailed, CommitAmbiguous, or the unit's own exception: as `submit`.
        """
        self._check_open()
        return await self._writer.submit(unit)

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(connection)` in one read transaction on a reader thread.

        Waits for a free reader. The connection is `query_only`: a write raises
        `sqlite3.OperationalError`. Whatever `fn` raises reaches the caller as it is.

        Raises:
            StoreClosed: the database is CLOSING or CLOSED.
        """
        self._check_open()
        reader = await self._idle_readers.get()
        try:
            # Re-checked: close() may have started while this call waited for a reader.
            self._check_open()
            return await reader.run(fn)
        finally:
            self._idle_readers.put_nowait(reader)

    async def close(self) -> None:
        """Close the readers, then flush and close the writer; idempotent."""
        if self._state is not DatabaseState.OPEN:
            await self._closed.wait()
            return
        self._state = DatabaseState.CLOSING
        try:
            # Each reader's thread runs its close after the read in flight there. Readers
            # go first so that the writer's connection is the last one: closing it
            # checkpoints the WAL into the file and removes it.
            for reader in self._readers:
                await reader.close()
        finally:
            await self._writer.close()
            self._state = DatabaseState.CLOSED
            self._closed.set()
            logger.info("store closed path=%s", self._path)

    def _check_open(self) -> None:
        if self._state is not DatabaseState.OPEN:
            raise StoreClosed("the store database", self._state.name)


class _Reader:
    """One reader connection and the one thread that uses it."""

    def __init__(self, connection: sqlite3.Connection, executor: ThreadPoolExecutor) -> None:
        self._connection = connection
        self._executor = executor

    @classmethod
    async def open(cls, path: Path) -> _Reader:
        connection, executor = await connect_on_own_thread(
            functools.partial(open_database, path, read_only=True),
            thread_name=READER_THREAD_NAME,
        )
        return cls(connection, executor)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.wrap_future(
            self._executor.submit(_read_snapshot, self._connection, fn)
        )

    async def close(self) -> None:
        try:
            await asyncio.wrap_future(self._executor.submit(self._connection.close))
        finally:
            self._executor.shutdown(wait=False)


def _read_snapshot(connection: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    connection.execute("BEGIN")
    try:
        return fn(connection)
    finally:
        if connection.in_transaction:
            connection.execute("ROLLBACK")


def _open_and_prepare(path: Path, schema: Schema) -> sqlite3.Connection:
    """Check an existing file without writing to it, then open it for writing (writer thread)."""
    if path.exists():
        _inspect(path, schema)
    connection = open_database(path)
    try:
        _install_schema(connection, path, schema)
    except BaseException:
        connection.close()
        raise
    return connection


def _inspect(path: Path, schema: Schema) -> None:
    """quick_check and version check on a plain connection: no pragma that writes."""
    connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
    try:
        try:
            report = [str(row[0]) for row in connection.execute("PRAGMA quick_check")]
        except sqlite3.DatabaseError as error:
            _raise_if_corrupt(path, error)
            raise
        if report != ["ok"]:
            raise StoreCorrupt(path, "; ".join(report[:QUICK_CHECK_DETAIL_LINES]))
        _check_versions(connection, path, schema)
    finally:
        connection.close()


def _install_schema(connection: sqlite3.Connection, path: Path, schema: Schema) -> None:
    """Create `meta` and the schema if the file has no table; check versions otherwise."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        if _check_versions(connection, path, schema):
            connection.execute(_META_DDL)
            for statement in schema.statements:
                connection.execute(statement)
            connection.executemany(
                _META_INSERT,
                [
                    (SCHEMA_VERSION_KEY, schema.version),
                    (PROTOCOL_VERSION_KEY, PROTOCOL_VERSION),
                    *schema.created().items(),
                ],
            )
            logger.info("store created path=%s schema_version=%d", path, schema.version)
        else:
            _migrate(connection, path, schema)
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


def _migrate(connection: sqlite3.Connection, path: Path, schema: Schema) -> None:
    """Bring a checked older file to this version, step by step, in the caller's transaction."""
    version = read_meta(connection, SCHEMA_VERSION_KEY)
    assert isinstance(version, int)
    while version < schema.version:
        step = schema.migration_from(version)
        assert step is not None  # _check_versions refused a version without a chain
        step.apply(connection)
        version += 1
        connection.execute("UPDATE meta SET value = ? WHERE key = ?", (version, SCHEMA_VERSION_KEY))
        logger.warning("store migrated path=%s schema_version=%d", path, version)


def _check_versions(connection: sqlite3.Connection, path: Path, schema: Schema) -> bool:
    """True if the file has no table yet; raises unless `meta` matches this build."""
    tables = {
        str(name)
        for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    if not tables:
        return True
    expected_version = str(schema.version)
    if META_TABLE not in tables:
        raise SchemaVersionMismatch(
            path, key=SCHEMA_VERSION_KEY, found=None, expected=expected_version
        )
    meta = {
        str(key): value
        for key, value in connection.execute(
            _META_VERSIONS,
            (SCHEMA_VERSION_KEY, PROTOCOL_VERSION_KEY),
        )
    }
    version = meta.get(SCHEMA_VERSION_KEY)
    if not (
        isinstance(version, int)
        and (
            version == schema.version or (version < schema.version and schema.can_migrate(version))
        )
    ):
        raise SchemaVersionMismatch(
            path,
            key=SCHEMA_VERSION_KEY,
            found=None if version is None else str(version),
            expected=expected_version,
        )
    protocol = meta.get(PROTOCOL_VERSION_KEY)
    if protocol != PROTOCOL_VERSION:
        raise SchemaVersionMismatch(
            path,
            key=PROTOCOL_VERSION_KEY,
            found=None if protocol is None else str(protocol),
            expected=PROTOCOL_VERSION,
        )
    return False


def _raise_if_corrupt(path: Path, error: sqlite3.DatabaseError) -> None:
    code = getattr(error, "sqlite_errorcode", None)
    if isinstance(code, int) and (code & 0xFF) in _CORRUPT_ERRORS:
        raise StoreCorrupt(path, str(error)) from error

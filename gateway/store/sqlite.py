"""The SQLite database under the store: settings, the `meta` table, checks, readers.

`open_database(path)` gives a connection with the store's settings. `await
SqliteDatabase.open(path, schema=...)` is how the store opens its file; callers may rely on:

- An existing file is checked before anything is written to it (engine.md §8.5): a file
  of at most `FULL_CHECK_LIMIT` bytes, one a check found damaged before (its
  `damaged_marker` exists), or one due for a migration, by `PRAGMA quick_check` of every
  page; a larger one by its
  header, the schema, `meta` and the `Schema`'s `checked_at_open` tables (the ones read
  whole at start, which do not grow with history), its full `quick_check` left to
  `start_integrity_check` once the daemon serves (problems, or a file that is not a
  database: `StoreCorrupt`). Then `meta`'s `schema_version` and `protocol_version` (any
  other value than this build's, or tables without `meta`: `SchemaVersionMismatch`). A
  refused file is left as it was: the store fails closed (engine.md §8.6). A file of an
  older version that the `Schema` has a `Migration` chain for is migrated in one
  transaction with the versions.
- `start_integrity_check()` runs the full `quick_check` deferred at open on a connection
  and thread of its own. Damage found then writes `damaged_marker` (so the next open
  checks every page before anything else and refuses the file until it passes) and calls
  `on_fatal` with `StoreCorrupt`: the daemon stops as it would have refused to start.
- A new or empty file gets `meta`, every statement of the `Schema` and its `created`
  facts in one transaction.
- `write(unit)` is `CommitWriter.submit`: group commit on the one write connection.
- `read(fn)` runs `fn(connection)` on one of a few reader connections, each on its own
  thread, inside one read transaction (a consistent WAL snapshot); `read(fn,
  snapshot=False)` without one, for a `fn` of one statement (SQLite reads each statement
  from one snapshot by itself). Readers never wait for the writer and never write
  (`query_only`). Whatever `fn` raises reaches the caller.
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
import os
import sqlite3
import time
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

WAL_AUTOCHECKPOINT: Final = 10_000
"""WAL pages (4 KiB each: about 40 MiB) after which a COMMIT checkpoints them into the file.

Every post rewrites the same few index leaf pages (a member's inbox, records and heads), and a
checkpoint copies each page once however often the WAL holds it: SQLite's default of 1,000
pages copied the hot pages ten times as often. Measured under `make bench`: 3 % less daemon
CPU per direct post and 8 % per post to a group of eight. A clean close checkpoints and
removes the WAL; after a crash, opening reads it back (tens of MiB at most)."""

READER_CONNECTIONS: Final = 2
"""Reader connections, each with its own thread.

WAL lets reads run beside the writer; reads here are short lookups at rehydration and
for management calls, so two keep one slow read from stalling the others."""

FULL_CHECK_LIMIT: Final = 64 * 1024 * 1024
"""Bytes of store file (and WAL) up to which `open` runs the full `quick_check` before
anything is served.

`quick_check` reads every page: about 0.1 s per 64 MB from the page cache on the 2-core
development machine, ten times that from a cold disk, so a daemon with a long history was
ready only after tens of seconds (issue 26: 26 s cold at 1,000,000 records). Below this the
full check costs little and keeps every page's damage a refusal to start; above it the check
runs after the daemon serves (`start_integrity_check`)."""

DAMAGED_SUFFIX: Final = "-damaged"
"""Appended to the store file's name for the marker a failed deferred check leaves."""

INTEGRITY_THREAD_NAME: Final = "harness-store-check"
"""Name prefix of the deferred integrity check's thread."""

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
    checked_at_open: tuple[str, ...] = ()
    """Tables `quick_check`ed before anything is served even in a file above
    `FULL_CHECK_LIMIT`: the ones read whole at start whose size does not grow with
    history (every page of the rest is checked by `start_integrity_check`)."""

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


def damaged_marker(path: Path) -> Path:
    """The marker a deferred integrity check that found damage leaves beside `path`."""
    return path.with_name(path.name + DAMAGED_SUFFIX)


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
            connection.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT}")
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

    def __init__(
        self,
        path: Path,
        writer: CommitWriter,
        readers: Sequence[_Reader],
        *,
        check_due: bool = False,
        on_fatal: FatalHandler | None = None,
    ) -> None:
        """Wrap an open writer and readers; use `SqliteDatabase.open` instead."""
        self._path = path
        self._writer = writer
        self._check_due = check_due
        """The full `quick_check` was deferred at open (`start_integrity_check`)."""
        self._on_fatal = on_fatal
        self._check: _IntegrityCheck | None = None
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
        full_check_limit: int | None = None,
    ) -> SqliteDatabase:
        """Check or create the file, start the writer, open the readers.

        Args:
            path: the database file; its directory must exist.
            schema: the tables and version this build expects.
            writer_settings: group commit settings (`Settings.commit_delay` and
                `Settings.commit_max_batch`).
            readers: reader connections, at least one.
            observer: receives the writer's measurements (backend `sqlite`).
            on_fatal: called once if the writer fails or the deferred integrity check
                finds damage (engine.md §8: stop the daemon).
            full_check_limit: file size up to which every page is checked here
                (None: `FULL_CHECK_LIMIT`, read at the call, so tests may lower it).

        Raises:
            StoreCorrupt: a `quick_check` failed, the header is damaged, or the file is
                not a database.
            SchemaVersionMismatch: the file is of another version; it was left untouched.
        """
        if readers < 1:
            raise ValueError(f"a database needs at least one reader, got {readers}")
        file = Path(path)
        limit = FULL_CHECK_LIMIT if full_check_limit is None else full_check_limit
        opening = _Opening(full=_full_check_due(file, limit))
        writer = await CommitWriter.start(
            functools.partial(_open_and_prepare, file, schema, opening),
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
        logger.info(
            "store opened path=%s schema_version=%d full_check=%s",
            file,
            schema.version,
            "done" if opening.full else "deferred",
        )
        return cls(file, writer, opened, check_due=not opening.full, on_fatal=on_fatal)

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

    async def read(self, fn: Callable[[sqlite3.Connection], T], *, snapshot: bool = True) -> T:
        """Run `fn(connection)` on a reader thread, in one read transaction unless
        `snapshot` is False.

        `snapshot=False` is for a `fn` that runs one statement: in autocommit mode SQLite
        reads one statement from one consistent snapshot on its own, so the `BEGIN` ...
        `ROLLBACK` around it is two statements of work for nothing (issue 26's profile: a
        visible share of the reader threads' CPU). A `fn` of several statements that must
        agree (a snapshot of an agent) keeps the transaction. Waits for a free reader. The
        connection is `query_only`: a write raises `sqlite3.OperationalError`. Whatever
        `fn` raises reaches the caller as it is, but for a damaged page it met.

        Raises:
            StoreClosed: the database is CLOSING or CLOSED.
            StoreCorrupt: the read met a damaged page (SQLite's `SQLITE_CORRUPT`): since a
                large file's pages are checked only after the daemon serves (engine.md
                §8.5), a start can meet one; `damaged_marker` is written, so the next
                start checks every page first.
        """
        self._check_open()
        reader = await self._idle_readers.get()
        try:
            # Re-checked: close() may have started while this call waited for a reader.
            self._check_open()
            try:
                return await reader.run(fn, snapshot=snapshot)
            except sqlite3.DatabaseError as error:
                if _code(error) not in _CORRUPT_ERRORS:
                    raise
                damage = StoreCorrupt(self._path, str(error))
                self._mark_damaged(damage)
                raise damage from error
        finally:
            self._idle_readers.put_nowait(reader)

    def start_integrity_check(self) -> None:
        """Run the full `quick_check` deferred at open, in the background; nothing when
        none was deferred or one already ran (engine.md §8.5).

        The daemon calls it once it serves. Damage found writes `damaged_marker` and calls
        `on_fatal` with `StoreCorrupt` (the daemon stops; its next start checks every page
        first and refuses the file until it passes). A check cut short by `close` reports
        nothing."""
        self._check_open()
        if not self._check_due or self._check is not None:
            return
        self._check = _IntegrityCheck(self._path, self._damaged)

    @property
    def integrity_check(self) -> asyncio.Task[None] | None:
        """The running or finished deferred check (tests wait on it), or None."""
        return None if self._check is None else self._check.task

    def _damaged(self, error: StoreCorrupt) -> None:
        """The deferred check found damage: mark the file and stop the daemon."""
        if self._state is not DatabaseState.OPEN:
            return
        self._mark_damaged(error)
        if self._on_fatal is not None:
            self._on_fatal(error)

    def _mark_damaged(self, error: StoreCorrupt) -> None:
        logger.critical("store file damaged path=%s: %s", self._path, error.detail)
        try:
            damaged_marker(self._path).write_text(error.detail + "\n", encoding="utf-8")
        except OSError as failed:
            # The next start then checks only what it can cheaply, and meets the damage again.
            logger.error("damaged-store marker not written path=%s: %s", self._path, failed)

    async def close(self) -> None:
        """Stop the deferred check, close the readers, then flush and close the writer;
        idempotent."""
        if self._state is not DatabaseState.OPEN:
            await self._closed.wait()
            return
        self._state = DatabaseState.CLOSING
        if self._check is not None:
            await self._check.stop()
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

    async def run(self, fn: Callable[[sqlite3.Connection], T], *, snapshot: bool) -> T:
        if snapshot:
            return await asyncio.wrap_future(
                self._executor.submit(_read_snapshot, self._connection, fn)
            )
        return await asyncio.wrap_future(self._executor.submit(fn, self._connection))

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


def _full_check_due(path: Path, limit: int) -> bool:
    """Whether `open` checks every page: a small file (with its WAL), a new one, or one a
    deferred check found damaged."""
    if damaged_marker(path).exists():
        return True
    size = 0
    for file in (path, path.with_name(path.name + "-wal")):
        try:
            size += file.stat().st_size
        except FileNotFoundError:
            continue
    return size <= limit


@dataclass(slots=True)
class _Opening:
    """How `open` checks the file; the writer thread's check may widen it."""

    full: bool
    """Every page is checked before anything is served (else after, in the background)."""


def _open_and_prepare(path: Path, schema: Schema, opening: _Opening) -> sqlite3.Connection:
    """Check an existing file without writing to it, then open it for writing (writer thread)."""
    if path.exists():
        _inspect(path, schema, opening)
    connection = open_database(path)
    try:
        _install_schema(connection, path, schema)
    except BaseException:
        connection.close()
        raise
    return connection


def _inspect(path: Path, schema: Schema, opening: _Opening) -> None:
    """quick_check (every page, or the cheap part of it) and version check on a plain
    connection: no pragma that writes. A file that is about to be migrated gets every page
    checked first, however large: a migration writes to it."""
    _check_header(path)
    connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
    try:
        try:
            if opening.full:
                _quick_check(connection, path)
            else:
                _quick_check(connection, path, "sqlite_schema")
                tables = _table_names(connection)
                for table in ("meta", *schema.checked_at_open):
                    if table in tables:
                        _quick_check(connection, path, table)
            new = _check_versions(connection, path, schema)
            if not (new or opening.full) and (
                read_meta(connection, SCHEMA_VERSION_KEY) != schema.version
            ):
                _quick_check(connection, path)
                opening.full = True
        except sqlite3.DatabaseError as error:
            _raise_if_corrupt(path, error)
            raise
    finally:
        connection.close()
    marker = damaged_marker(path)
    if opening.full and marker.exists():
        # Repaired or restored by the operator: the file passed the check of every page.
        marker.unlink()
        logger.warning("store file passed its full check; damage marker removed path=%s", path)


_HEADER_MAGIC: Final = b"SQLite format 3\x00"
_HEADER_SIZE: Final = 100


def _check_header(path: Path) -> None:
    """The file's header, read directly: SQLite's magic, a page size it can have, and (with
    no WAL to finish a checkpoint from) a file no shorter than the pages the header
    counts. A truncated copy is damage found without reading the pages."""
    with path.open("rb") as file:
        header = file.read(_HEADER_SIZE)
        size = os.fstat(file.fileno()).st_size
    if not header:
        return  # an empty file is a new store
    if len(header) < _HEADER_SIZE or not header.startswith(_HEADER_MAGIC):
        raise StoreCorrupt(path, "file is not a database (no SQLite header)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise StoreCorrupt(path, f"header names page size {page_size}")
    pages = int.from_bytes(header[28:32], "big")
    # The in-header size is valid only when written by the same change as the counter.
    counted = header[92:96] == header[24:28] and pages > 0
    wal = path.with_name(path.name + "-wal")
    wal_empty = not wal.exists() or wal.stat().st_size == 0
    if counted and wal_empty and size < pages * page_size:
        raise StoreCorrupt(
            path, f"file is {size} bytes, its header counts {pages} pages of {page_size}"
        )


def _quick_check(connection: sqlite3.Connection, path: Path, table: str | None = None) -> None:
    """`PRAGMA quick_check`, of every page or of one table and its indexes."""
    pragma = "PRAGMA quick_check" if table is None else f"PRAGMA quick_check({table})"
    report = [str(row[0]) for row in connection.execute(pragma)]
    if report != ["ok"]:
        raise StoreCorrupt(path, "; ".join(report[:QUICK_CHECK_DETAIL_LINES]))


def _table_names(connection: sqlite3.Connection) -> set[str]:
    return {
        str(name)
        for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }


_INTERRUPT_EVERY: Final = 0.05
"""Seconds between interrupts of a deferred check that `close` is stopping."""


class _IntegrityCheck:
    """The full `quick_check` deferred at open: one connection on one thread of its own.

    It holds a read transaction for as long as it runs, so the WAL is not checkpointed past
    it meanwhile (the writer's commits go on; the WAL grows until it ends)."""

    def __init__(self, path: Path, on_damage: Callable[[StoreCorrupt], None]) -> None:
        self._path = path
        self._on_damage = on_damage
        self._connection: sqlite3.Connection | None = None
        self._stopping = False
        self.task: asyncio.Task[None] = asyncio.ensure_future(self._run())
        self.task.set_name("store-integrity-check")

    async def _run(self) -> None:
        started = time.monotonic()
        try:
            connection, executor = await connect_on_own_thread(
                functools.partial(open_database, self._path, read_only=True),
                thread_name=INTEGRITY_THREAD_NAME,
            )
        except Exception:
            logger.exception("store integrity check could not start path=%s", self._path)
            return
        self._connection = connection
        try:
            if self._stopping:
                return
            await asyncio.wrap_future(
                executor.submit(_quick_check_every_page, connection, self._path)
            )
            logger.info(
                "store file passed its full check path=%s seconds=%.1f",
                self._path,
                time.monotonic() - started,
            )
        except StoreCorrupt as damage:
            if not self._stopping:
                self._on_damage(damage)
        except Exception:
            if not self._stopping:
                # Not damage it could name (an I/O error, a lock held past the busy
                # timeout): the writer meets a failing disk on its own, so only say so.
                logger.exception("store integrity check failed to run path=%s", self._path)
        finally:
            self._connection = None  # before its close: `stop` interrupts only a live one
            await asyncio.wrap_future(executor.submit(connection.close))
            executor.shutdown(wait=False)

    async def stop(self) -> None:
        """Interrupt the check and wait for its connection to close."""
        self._stopping = True
        while not self.task.done():
            if self._connection is not None:
                # Thread-safe: the running statement ends with SQLITE_INTERRUPT. Repeated,
                # because an interrupt before the statement started is lost.
                self._connection.interrupt()
            await asyncio.wait({self.task}, timeout=_INTERRUPT_EVERY)
        await asyncio.gather(self.task, return_exceptions=True)


def _quick_check_every_page(connection: sqlite3.Connection, path: Path) -> None:
    try:
        _quick_check(connection, path)
    except sqlite3.DatabaseError as error:
        _raise_if_corrupt(path, error)
        raise


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


def _code(error: sqlite3.DatabaseError) -> int | None:
    code = getattr(error, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _raise_if_corrupt(path: Path, error: sqlite3.DatabaseError) -> None:
    if _code(error) in _CORRUPT_ERRORS:
        raise StoreCorrupt(path, str(error)) from error

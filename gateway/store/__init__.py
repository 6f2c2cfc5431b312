"""The store, written through group commits (engine.md §8): a SQLite file in the daemon's
data directory, or PostgreSQL shared by several daemons (`gateway.store.postgres`, imported
only when chosen, by `gateway.backends`, so an embedded daemon never loads psycopg).

What other packages may import is listed in `__all__`; the modules behind it are internal.

- `DataDirLock`: exclusive ownership of the data directory for the process's lifetime.
- `SqliteDatabase`: the store file, checked at open (`quick_check`, schema version), with a
  `CommitWriter` for writes and reader connections for reads.
- `CommitWriter`: group commit of write units; `StoreObserver` receives its measurements.
- Errors: `StoreError` and its tree (see `gateway.store.errors`).

- `Store`: the typed seam the engine and endpoints use (`SqliteStore` on the file,
  `PostgresStore` in `gateway.store.postgres`, `MemoryStore` in memory for unit tests), with
  its vocabulary in `gateway.store.records`.
"""

from __future__ import annotations

from gateway.store.errors import (
    CommitAmbiguous,
    ConstraintViolation,
    DataDirLocked,
    SchemaVersionMismatch,
    StoreClosed,
    StoreCorrupt,
    StoreError,
    StoreFailed,
)
from gateway.store.lock import DataDirLock
from gateway.store.memory import MemoryStore
from gateway.store.observer import NullStoreObserver, StoreObserver
from gateway.store.port import Store
from gateway.store.sqlite import (
    PROTOCOL_VERSION,
    DatabaseState,
    Schema,
    SqliteDatabase,
    open_database,
)
from gateway.store.sqlite_store import SqliteStore
from gateway.store.writer import (
    CommitWriter,
    CommitWriterSettings,
    CommitWriterState,
    FatalHandler,
)

__all__ = [
    "PROTOCOL_VERSION",
    "CommitAmbiguous",
    "CommitWriter",
    "CommitWriterSettings",
    "CommitWriterState",
    "ConstraintViolation",
    "DataDirLock",
    "DataDirLocked",
    "DatabaseState",
    "FatalHandler",
    "MemoryStore",
    "NullStoreObserver",
    "Schema",
    "SchemaVersionMismatch",
    "SqliteDatabase",
    "SqliteStore",
    "Store",
    "StoreClosed",
    "StoreCorrupt",
    "StoreError",
    "StoreFailed",
    "StoreObserver",
    "open_database",
]

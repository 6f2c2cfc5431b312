"""`harness-gateway migrate` for the SQLite store: bring a store file to this build's schema.

`await migrate_sqlite(path)` opens the file with the store's `Schema`, which creates a new
file or migrates an older one in one transaction (`gateway.store.sqlite`), closes it, and
reports (the version found, None for a new file; the version now). Nothing else starts.
A file of an unknown or newer version is refused with `SchemaVersionMismatch` and left as
it was; a damaged one with `StoreCorrupt`.

Like `SqliteDatabase`, this takes no data-directory lock: the caller holds the
`DataDirLock` of the directory around the call, so a running daemon's file is never
migrated under it. The PostgreSQL twin is `gateway.store.postgres.migrate`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Final

from gateway.store.sqlite import SCHEMA_VERSION_KEY
from gateway.store.sqlite_store import SCHEMA, SqliteStore

STORE_FILE_MODE: Final = 0o600
"""Mode of a store file this creates: it holds agents' private seeds."""


def stored_version(path: Path) -> int | None:
    """The file's `meta.schema_version`, only read (as the open's own check reads it); None
    for a new or empty file, and for one the open will refuse, which then says why."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        try:
            row = db.execute(
                "SELECT value FROM meta WHERE key = ?", (SCHEMA_VERSION_KEY,)
            ).fetchone()
        except sqlite3.DatabaseError:
            return None
    return row[0] if row is not None and isinstance(row[0], int) else None


async def migrate_sqlite(path: Path | str) -> tuple[int | None, int]:
    """Create or migrate the store file at `path`; (version found, version now).

    Raises:
        SchemaVersionMismatch: the file is of a version this build cannot migrate; untouched.
        StoreCorrupt: the file is damaged or is not a database; untouched.
    """
    file = Path(path)
    found = stored_version(file)
    # The file holds agents' seeds: create it owner-only before SQLite opens it (its -wal
    # and -shm files copy its mode), as the daemon does.
    os.close(os.open(file, os.O_CREAT | os.O_WRONLY, STORE_FILE_MODE))
    store = await SqliteStore.open(file)
    await store.close()
    return found, SCHEMA.version

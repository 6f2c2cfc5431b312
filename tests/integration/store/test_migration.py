"""Schema 1 → 2 (engine.md §5.10, §8): a version-1 store is migrated in place at open — the
local instance id is minted once, and what version 1 kept forever is pruned."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway.store import tables
from gateway.store.errors import SchemaVersionMismatch, StoreCorrupt
from gateway.store.sqlite_store import SqliteStore
from tests.integration.store.support import A, as_version_1


async def _created(path: Path) -> str:
    store = await SqliteStore.open(path)
    try:
        return store.local_instance_id
    finally:
        await store.close()


async def test_a_version_1_store_is_migrated_pruned_and_given_a_local_instance_once(tmp_path: Path):
    path = tmp_path / "store.sqlite3"
    await _created(path)
    as_version_1(path)
    migrated = await _created(path)
    assert migrated.startswith("rti_")
    store = await SqliteStore.open(path)
    try:
        record = await store.record(A, "rch_head")
        assert record is not None
        assert record.record == b'{"membership":{"m":1}}'
    finally:
        await store.close()
    assert await _created(path) == migrated  # never minted again
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (2,)
        assert db.execute("SELECT row_id FROM outbox").fetchall() == [(3,)]
        assert db.execute("SELECT predecessor FROM proposal_locks").fetchall() == [("rch_head",)]
        assert db.execute("SELECT subject FROM evidence").fetchall() == [("ach_live",)]


async def test_a_store_of_this_version_without_its_local_instance_fails_closed(tmp_path: Path):
    path = tmp_path / "store.sqlite3"
    await _created(path)
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM meta WHERE key = ?", (tables.LOCAL_INSTANCE_KEY,))
    with pytest.raises(StoreCorrupt):
        await _created(path)


async def test_a_store_of_a_newer_version_is_refused_untouched(tmp_path: Path):
    path = tmp_path / "store.sqlite3"
    await _created(path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = 99 WHERE key = 'schema_version'")
    before = path.read_bytes()
    with pytest.raises(SchemaVersionMismatch):
        await _created(path)
    assert path.read_bytes() == before

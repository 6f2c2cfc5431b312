"""Schema 1 → 2 → 3 (engine.md §5.10, §8.5, §9.1): an older store is migrated in place at
open — version 2's local instance id is minted once and what version 1 kept forever is
pruned; version 3's `sends` columns come with the rows already there kept not resumable."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gateway.store import tables
from gateway.store.errors import SchemaVersionMismatch, StoreCorrupt
from gateway.store.records import PutSend
from gateway.store.sqlite_store import SqliteStore
from tests.integration.store.support import A, as_version_1, as_version_2


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
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            tables.SCHEMA_VERSION,
        )
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


async def test_a_version_2_store_gets_the_sends_columns_and_keeps_its_rows_not_resumable(
    tmp_path: Path,
):
    path = tmp_path / "store.sqlite3"
    store = await SqliteStore.open(path)
    try:
        await store.apply(
            [
                PutSend(agent_id=A, key=key, request=b"{}", run_id="run-0", outcome=outcome)
                for key, outcome in (("cut", None), ("kept", b"o"))
            ]
        )
    finally:
        await store.close()
    as_version_2(path)
    instance_before = await _created(path)

    store = await SqliteStore.open(path)
    try:
        cut = await store.send_row(A, "cut")
        kept = await store.send_row(A, "kept")
        assert cut is not None
        assert kept is not None
        assert (cut.outcome, cut.bound, cut.resumable) == (None, None, False)
        assert (kept.outcome, kept.bound, kept.resumable) == (b"o", None, False)
        assert store.local_instance_id == instance_before
    finally:
        await store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (3,)
        columns = [row[1] for row in db.execute("PRAGMA table_info(sends)")]
    assert columns[-2:] == ["bound", "resumable"]

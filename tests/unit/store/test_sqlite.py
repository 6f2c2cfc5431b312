from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from gateway.store import (
    PROTOCOL_VERSION,
    CommitWriterSettings,
    CommitWriterState,
    DatabaseState,
    Schema,
    SchemaVersionMismatch,
    SqliteDatabase,
    StoreClosed,
    StoreCorrupt,
    open_database,
)
from gateway.store.sqlite import (
    BUSY_TIMEOUT,
    READER_THREAD_NAME,
    WAL_AUTOCHECKPOINT,
    Migration,
    damaged_marker,
    read_meta,
)
from tests.unit.store.support import (
    NOTES_DDL,
    NOTES_SCHEMA,
    Gate,
    add_note,
    notes_of,
    read_notes_file,
)

NOTES_V2 = Schema(version=2, statements=(NOTES_DDL, "CREATE INDEX notes_by_body ON notes (body)"))


def meta_of(connection: sqlite3.Connection) -> dict[str, object]:
    return dict(connection.execute("SELECT key, value FROM meta").fetchall())


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file in `directory` with its bytes."""
    return {entry.name: entry.read_bytes() for entry in sorted(directory.iterdir())}


async def create_notes_file(path: Path, *, schema: Schema = NOTES_SCHEMA, notes: int = 3) -> None:
    async with await SqliteDatabase.open(path, schema=schema) as database:
        await asyncio.gather(
            *(database.write(add_note("a", seq, "n" * 200)) for seq in range(notes))
        )


def test_open_database_applies_the_store_settings(tmp_path: Path) -> None:
    connection = open_database(tmp_path / "store.db")
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert connection.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
        assert connection.execute("PRAGMA wal_autocheckpoint").fetchone() == (WAL_AUTOCHECKPOINT,)
        assert connection.execute("PRAGMA foreign_keys").fetchone() == (1,)
        assert connection.execute("PRAGMA busy_timeout").fetchone() == (int(BUSY_TIMEOUT * 1000),)
        assert connection.isolation_level is None
        assert not connection.in_transaction
    finally:
        connection.close()


def test_a_read_only_connection_refuses_to_write(tmp_path: Path) -> None:
    open_database(tmp_path / "store.db").close()
    connection = open_database(tmp_path / "store.db", read_only=True)
    try:
        assert connection.execute("PRAGMA query_only").fetchone() == (1,)
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            connection.execute("CREATE TABLE t (a)")
    finally:
        connection.close()


async def test_a_new_file_gets_the_schema_and_the_meta_versions(tmp_path: Path) -> None:
    async with await SqliteDatabase.open(tmp_path / "store.db", schema=NOTES_SCHEMA) as database:
        assert database.state is DatabaseState.OPEN
        assert await database.read(meta_of) == {
            "schema_version": 1,
            "protocol_version": PROTOCOL_VERSION,
        }
        assert await database.read(notes_of) == []
    assert PROTOCOL_VERSION == "harness/1"


async def test_an_empty_existing_file_is_treated_as_new(tmp_path: Path) -> None:
    (tmp_path / "store.db").touch()
    async with await SqliteDatabase.open(tmp_path / "store.db", schema=NOTES_SCHEMA) as database:
        assert (await database.read(meta_of))["schema_version"] == 1


async def test_reopening_a_file_of_the_same_version_keeps_its_rows(tmp_path: Path) -> None:
    await create_notes_file(tmp_path / "store.db", notes=3)
    async with await SqliteDatabase.open(tmp_path / "store.db", schema=NOTES_SCHEMA) as database:
        assert [seq for _, seq, _ in await database.read(notes_of)] == [0, 1, 2]
        await database.write(add_note("b", 1, "more"))
    assert len(read_notes_file(tmp_path / "store.db")) == 4


@pytest.mark.parametrize(
    ("written", "expected"),
    [(NOTES_V2, NOTES_SCHEMA), (NOTES_SCHEMA, NOTES_V2)],
    ids=["newer-file", "older-file"],
)
async def test_a_file_of_another_schema_version_is_refused_and_left_byte_identical(
    tmp_path: Path, written: Schema, expected: Schema
) -> None:
    path = tmp_path / "store.db"
    await create_notes_file(path, schema=written)
    before = snapshot(tmp_path)

    with pytest.raises(SchemaVersionMismatch) as refused:
        await SqliteDatabase.open(path, schema=expected)

    assert refused.value.key == "schema_version"
    assert refused.value.found == str(written.version)
    assert refused.value.expected == str(expected.version)
    message = str(refused.value)
    assert f"schema_version {written.version}" in message
    assert f"expects {expected.version}" in message
    assert str(path) in message
    assert snapshot(tmp_path) == before


async def test_a_file_of_another_protocol_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    await create_notes_file(path)
    edit = sqlite3.connect(path)
    edit.execute("UPDATE meta SET value = 'harness/2' WHERE key = 'protocol_version'")
    edit.commit()
    edit.close()
    before = snapshot(tmp_path)

    with pytest.raises(SchemaVersionMismatch) as refused:
        await SqliteDatabase.open(path, schema=NOTES_SCHEMA)

    assert (refused.value.key, refused.value.found) == ("protocol_version", "harness/2")
    assert refused.value.expected == PROTOCOL_VERSION
    assert snapshot(tmp_path) == before


async def test_a_file_with_tables_but_no_meta_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    foreign = sqlite3.connect(path)
    foreign.execute("CREATE TABLE something_else (a)")
    foreign.commit()
    foreign.close()
    before = snapshot(tmp_path)

    with pytest.raises(SchemaVersionMismatch, match="has no schema_version") as refused:
        await SqliteDatabase.open(path, schema=NOTES_SCHEMA)

    assert refused.value.found is None
    assert snapshot(tmp_path) == before


async def test_a_file_that_is_not_a_database_is_refused_as_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    path.write_bytes(b"this is not an sqlite database\n" * 200)
    before = snapshot(tmp_path)

    with pytest.raises(StoreCorrupt, match="file is not a database") as refused:
        await SqliteDatabase.open(path, schema=NOTES_SCHEMA)

    assert refused.value.path == path
    assert snapshot(tmp_path) == before


async def test_a_file_with_a_damaged_page_fails_quick_check_as_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    await create_notes_file(path, notes=2000)
    page_size = 4096
    data = bytearray(path.read_bytes())
    pages = len(data) // page_size
    assert pages > 20
    middle = (pages // 2) * page_size
    data[middle : middle + page_size] = b"\xab" * page_size
    path.write_bytes(bytes(data))
    before = snapshot(tmp_path)

    with pytest.raises(StoreCorrupt, match="integrity check"):
        await SqliteDatabase.open(path, schema=NOTES_SCHEMA)

    assert snapshot(tmp_path) == before


async def test_reads_run_on_reader_threads_beside_a_busy_writer(tmp_path: Path) -> None:
    # The gate holds its unit on the writer thread, so units run there.
    settings = CommitWriterSettings(units_on_writer_thread=True)
    async with await SqliteDatabase.open(
        tmp_path / "store.db", schema=NOTES_SCHEMA, writer_settings=settings
    ) as database:
        await database.write(add_note("a", 1, "committed"))
        gate = Gate()
        held = asyncio.create_task(database.write(gate.unit))
        await gate.wait_entered()

        # The writer holds an open transaction; WAL readers still see the last commit.
        rows, thread = await database.read(lambda c: (notes_of(c), threading.current_thread().name))
        assert rows == [("a", 1, "committed")]
        assert thread.startswith(READER_THREAD_NAME)

        gate.opened.set()
        await held
        assert len(await database.read(notes_of)) == 2


async def test_a_read_that_tries_to_write_fails_and_changes_nothing(tmp_path: Path) -> None:
    async with await SqliteDatabase.open(tmp_path / "store.db", schema=NOTES_SCHEMA) as database:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await database.read(add_note("a", 1, "sneaky"))
        assert await database.read(notes_of) == []


async def test_many_reads_share_the_reader_pool(tmp_path: Path) -> None:
    async with await SqliteDatabase.open(
        tmp_path / "store.db", schema=NOTES_SCHEMA, readers=2
    ) as database:
        await database.write(add_note("a", 1, "x"))
        results = await asyncio.gather(*(database.read(notes_of) for _ in range(20)))
    assert all(rows == [("a", 1, "x")] for rows in results)


async def test_read_and_write_after_close_raise_store_closed_and_close_is_idempotent(
    tmp_path: Path,
) -> None:
    database = await SqliteDatabase.open(tmp_path / "store.db", schema=NOTES_SCHEMA)
    await asyncio.gather(database.close(), database.close())
    await database.close()

    assert database.state is DatabaseState.CLOSED
    assert database.writer_state is CommitWriterState.CLOSED
    with pytest.raises(StoreClosed, match="CLOSED"):
        await database.read(notes_of)
    with pytest.raises(StoreClosed, match="CLOSED") as refused:
        await database.write(add_note("a", 1, "x"))
    assert refused.value.state == "CLOSED"


async def test_close_leaves_a_single_checkpointed_file(tmp_path: Path) -> None:
    await create_notes_file(tmp_path / "store.db", notes=50)
    assert sorted(os.listdir(tmp_path)) == ["store.db"]
    assert len(read_notes_file(tmp_path / "store.db")) == 50


def test_a_schema_version_is_at_least_one() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        Schema(version=0, statements=())


async def test_a_database_needs_at_least_one_reader(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one reader"):
        await SqliteDatabase.open(tmp_path / "store.db", schema=NOTES_SCHEMA, readers=0)
    assert not (tmp_path / "store.db").exists()


# --- the integrity check of a large file (engine.md §8.5) ----------------------------------

NOTES_CHECKED = Schema(version=1, statements=(NOTES_DDL,), checked_at_open=("notes",))
LARGE = 0
"""A `full_check_limit` below every file: each one counts as large, so its full check waits."""


def damage_middle_page(path: Path) -> None:
    """Overwrite one page in the middle of the file (a data page of `notes`)."""
    page_size = 4096
    data = bytearray(path.read_bytes())
    pages = len(data) // page_size
    assert pages > 20
    middle = (pages // 2) * page_size
    data[middle : middle + page_size] = b"\xab" * page_size
    path.write_bytes(bytes(data))


async def test_a_large_file_serves_before_its_full_check_and_a_damaged_page_found_then_is_fatal(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    await create_notes_file(path, notes=2000)
    damage_middle_page(path)
    fatal: list[BaseException] = []

    database = await SqliteDatabase.open(
        path, schema=NOTES_SCHEMA, full_check_limit=LARGE, on_fatal=fatal.append
    )
    try:
        # Header, schema and meta are sound: the file opens and answers.
        assert await database.read(lambda c: read_meta(c, "schema_version")) == 1
        database.start_integrity_check()
        check = database.integrity_check
        assert check is not None
        await check
    finally:
        await database.close()

    [error] = fatal
    assert isinstance(error, StoreCorrupt)
    assert error.path == path
    assert damaged_marker(path).read_text(encoding="utf-8").strip() == error.detail


async def test_a_file_a_deferred_check_found_damaged_is_checked_whole_and_refused_at_the_next_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    await create_notes_file(path, notes=2000)
    damage_middle_page(path)
    damaged_marker(path).write_text("found after ready\n", encoding="utf-8")
    before = snapshot(tmp_path)

    with pytest.raises(StoreCorrupt, match="integrity check"):
        await SqliteDatabase.open(path, schema=NOTES_SCHEMA, full_check_limit=LARGE)

    assert snapshot(tmp_path) == before


async def test_a_sound_file_with_a_damage_marker_passes_its_full_check_and_loses_the_marker(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    await create_notes_file(path, notes=10)
    damaged_marker(path).write_text("restored from a backup since\n", encoding="utf-8")

    async with await SqliteDatabase.open(
        path, schema=NOTES_SCHEMA, full_check_limit=LARGE
    ) as database:
        assert await database.read(notes_of) != []
        database.start_integrity_check()  # the full check ran at open: nothing deferred
        assert database.integrity_check is None

    assert not damaged_marker(path).exists()


async def test_a_sound_large_file_passes_its_deferred_check_without_a_fatal_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    await create_notes_file(path, notes=200)
    fatal: list[BaseException] = []

    async with await SqliteDatabase.open(
        path, schema=NOTES_SCHEMA, full_check_limit=LARGE, on_fatal=fatal.append
    ) as database:
        database.start_integrity_check()
        assert database.integrity_check is not None
        await database.integrity_check
        await database.write(add_note("b", 1, "after the check"))

    assert fatal == []
    assert not damaged_marker(path).exists()


async def test_damage_in_a_table_checked_at_open_refuses_a_large_file(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    await create_notes_file(path, schema=NOTES_CHECKED, notes=2000)
    damage_middle_page(path)
    before = snapshot(tmp_path)

    with pytest.raises(StoreCorrupt, match="integrity check"):
        await SqliteDatabase.open(path, schema=NOTES_CHECKED, full_check_limit=LARGE)

    assert snapshot(tmp_path) == before


async def test_a_large_file_with_a_damaged_header_is_refused_at_open(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    await create_notes_file(path, notes=2000)
    data = bytearray(path.read_bytes())
    data[0:16] = b"SQLite format 2\x00"
    path.write_bytes(bytes(data))
    before = snapshot(tmp_path)

    with pytest.raises(StoreCorrupt, match="not a database"):
        await SqliteDatabase.open(path, schema=NOTES_SCHEMA, full_check_limit=LARGE)

    assert snapshot(tmp_path) == before


async def test_a_truncated_large_file_is_refused_at_open(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    await create_notes_file(path, notes=2000)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    before = snapshot(tmp_path)

    with pytest.raises(StoreCorrupt, match="its header counts"):
        await SqliteDatabase.open(path, schema=NOTES_SCHEMA, full_check_limit=LARGE)

    assert snapshot(tmp_path) == before


async def test_a_read_without_a_snapshot_runs_outside_a_transaction(tmp_path: Path) -> None:
    async with await SqliteDatabase.open(tmp_path / "store.db", schema=NOTES_SCHEMA) as database:
        await database.write(add_note("a", 1, "committed"))

        def rows_and_transaction(c: sqlite3.Connection) -> tuple[list[tuple[str, int, str]], bool]:
            return notes_of(c), c.in_transaction

        assert await database.read(rows_and_transaction, snapshot=False) == (
            [("a", 1, "committed")],
            False,
        )
        assert await database.read(rows_and_transaction) == ([("a", 1, "committed")], True)


NOTES_V2_MIGRATED = Schema(
    version=2,
    statements=(NOTES_DDL, "CREATE INDEX notes_by_body ON notes (body)"),
    migrations=(
        Migration(
            from_version=1,
            apply=lambda db: db.execute("CREATE INDEX notes_by_body ON notes (body)").close(),
        ),
    ),
)


async def test_a_large_file_due_for_a_migration_has_every_page_checked_before_it_is_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    await create_notes_file(path, notes=2000)
    damage_middle_page(path)
    before = snapshot(tmp_path)

    with pytest.raises(StoreCorrupt, match="integrity check"):
        await SqliteDatabase.open(path, schema=NOTES_V2_MIGRATED, full_check_limit=LARGE)

    assert snapshot(tmp_path) == before


async def test_a_sound_large_file_migrated_at_open_needs_no_check_after_it_serves(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    await create_notes_file(path, notes=200)

    async with await SqliteDatabase.open(
        path, schema=NOTES_V2_MIGRATED, full_check_limit=LARGE
    ) as database:
        assert await database.read(lambda c: read_meta(c, "schema_version")) == 2
        database.start_integrity_check()
        assert database.integrity_check is None


async def test_a_read_that_meets_a_damaged_page_raises_store_corrupt_and_marks_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    await create_notes_file(path, notes=2000)
    damage_middle_page(path)
    fatal: list[BaseException] = []

    async with await SqliteDatabase.open(
        path, schema=NOTES_SCHEMA, full_check_limit=LARGE, on_fatal=fatal.append
    ) as database:
        with pytest.raises(StoreCorrupt, match="malformed"):
            await database.read(notes_of)
        # One read is one caller's failure, not the daemon's: it keeps serving.
        assert fatal == []
        assert await database.read(lambda c: read_meta(c, "schema_version")) == 1

    assert damaged_marker(path).exists()
    with pytest.raises(StoreCorrupt, match="integrity check"):
        await SqliteDatabase.open(path, schema=NOTES_SCHEMA, full_check_limit=LARGE)

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

from gateway.store import CommitWriterSettings, SqliteDatabase
from tests.unit.store.support import NOTES_SCHEMA, RecordingObserver, add_note, notes_of

AGENTS = 40
"""Concurrent writer tasks, standing in for agents."""

NOTES_PER_AGENT = 50
"""Sequential writes per task: each awaits its commit before the next, as the engine does."""


async def write_notes(database: SqliteDatabase, agent: str) -> list[int]:
    return [
        await database.write(add_note(agent, seq, f"{agent} note {seq}"))
        for seq in range(NOTES_PER_AGENT)
    ]


async def test_writes_from_many_tasks_are_grouped_and_durable_across_a_reopen(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    observer = RecordingObserver()
    async with await SqliteDatabase.open(path, schema=NOTES_SCHEMA, observer=observer) as database:
        rowids = await asyncio.gather(
            *(write_notes(database, f"agent-{i:02d}") for i in range(AGENTS))
        )

    total = AGENTS * NOTES_PER_AGENT
    assert sum(observer.batch_sizes) == total
    assert len(observer.batch_sizes) < total
    assert observer.failures == 0
    assert sorted(os.listdir(tmp_path)) == ["store.db"]

    async with await SqliteDatabase.open(path, schema=NOTES_SCHEMA) as reopened:
        rows = await reopened.read(notes_of)
        by_rowid = await reopened.read(
            lambda c: {
                rowid: (agent, seq)
                for rowid, agent, seq in c.execute("SELECT rowid, agent, seq FROM notes")
            }
        )
    assert len(rows) == total
    for i, agent_rowids in enumerate(rowids):
        assert [by_rowid[rowid] for rowid in agent_rowids] == [
            (f"agent-{i:02d}", seq) for seq in range(NOTES_PER_AGENT)
        ]


async def test_a_unit_of_several_rows_is_atomic_across_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "store.db"

    def three_rows_then_fail(connection: sqlite3.Connection) -> None:
        for seq in range(3):
            add_note("atomic", seq, "partial")(connection)
        raise ValueError("the third write's caller gives up")

    def three_rows(connection: sqlite3.Connection) -> int:
        for seq in range(3):
            add_note("whole", seq, "complete")(connection)
        return 3

    settings = CommitWriterSettings(commit_delay=0.0)
    async with await SqliteDatabase.open(
        path, schema=NOTES_SCHEMA, writer_settings=settings
    ) as database:
        outcomes = await asyncio.gather(
            database.write(three_rows_then_fail),
            database.write(three_rows),
            return_exceptions=True,
        )
    assert isinstance(outcomes[0], ValueError)
    assert outcomes[1] == 3

    async with await SqliteDatabase.open(path, schema=NOTES_SCHEMA) as reopened:
        assert [agent for agent, _, _ in await reopened.read(notes_of)] == ["whole"] * 3


async def test_a_throughput_run_completes_without_timing_assertions(tmp_path: Path) -> None:
    observer = RecordingObserver()
    async with await SqliteDatabase.open(
        tmp_path / "store.db", schema=NOTES_SCHEMA, observer=observer
    ) as database:
        await asyncio.gather(
            *(database.write(add_note("bulk", seq, "x" * 100)) for seq in range(5000))
        )
        count = await database.read(lambda c: c.execute("SELECT count(*) FROM notes").fetchone())
    assert count == (5000,)
    assert max(observer.batch_sizes) <= 512
    assert all(seconds >= 0 for seconds in observer.commit_seconds)

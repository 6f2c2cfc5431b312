"""Helpers for the store tests: a small example table, its units, a recording observer."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gateway.store import CommitWriter, CommitWriterSettings, Schema, open_database

NOTES_DDL = (
    "CREATE TABLE notes ("
    " agent TEXT NOT NULL,"
    " seq INTEGER NOT NULL,"
    " body TEXT NOT NULL,"
    " PRIMARY KEY (agent, seq))"
)
NOTES_SCHEMA = Schema(version=1, statements=(NOTES_DDL,))

EVENTUALLY_TIMEOUT = 5.0
"""Seconds `assert_eventually` polls before it fails the test."""


class UnitFailed(Exception):
    """Raised by a unit on purpose."""


def add_note(agent: str, seq: int, body: str) -> Callable[[sqlite3.Connection], int]:
    """A unit that inserts one note and returns its rowid."""

    def unit(connection: sqlite3.Connection) -> int:
        cursor = connection.execute(
            "INSERT INTO notes (agent, seq, body) VALUES (?, ?, ?)", (agent, seq, body)
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    return unit


def add_note_then_raise(agent: str, seq: int) -> Callable[[sqlite3.Connection], int]:
    """A unit that inserts a note and then raises: its insert must be rolled back."""

    def unit(connection: sqlite3.Connection) -> int:
        connection.execute(
            "INSERT INTO notes (agent, seq, body) VALUES (?, ?, ?)", (agent, seq, "doomed")
        )
        raise UnitFailed(f"unit {agent}/{seq} failed on purpose")

    return unit


def notes_of(connection: sqlite3.Connection) -> list[tuple[str, int, str]]:
    """Every note, in key order (usable as a read function)."""
    return [
        (str(agent), int(seq), str(body))
        for agent, seq, body in connection.execute(
            "SELECT agent, seq, body FROM notes ORDER BY agent, seq"
        )
    ]


def read_notes_file(path: Path) -> list[tuple[str, int, str]]:
    """Every note, read with a fresh connection straight from the file."""
    connection = sqlite3.connect(path)
    try:
        return notes_of(connection)
    finally:
        connection.close()


def connect_notes(path: Path) -> Callable[[], sqlite3.Connection]:
    """A `connect` for `CommitWriter.start`: the store's settings plus the notes table."""

    def connect() -> sqlite3.Connection:
        connection = open_database(path)
        connection.execute(NOTES_DDL.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
        return connection

    return connect


async def start_writer(
    path: Path,
    *,
    settings: CommitWriterSettings | None = None,
    observer: RecordingObserver | None = None,
    on_fatal: Callable[[BaseException], None] | None = None,
    connect: Callable[[], sqlite3.Connection] | None = None,
) -> CommitWriter:
    """A writer for the notes table; by default its units run on the writer thread, where a
    `Gate` can hold one (`writer_on_loop` starts one as the daemon runs it)."""
    settings = settings or CommitWriterSettings(units_on_writer_thread=True)
    return await CommitWriter.start(
        connect or connect_notes(path), settings=settings, observer=observer, on_fatal=on_fatal
    )


@dataclass
class RecordingObserver:
    """A `StoreObserver` that keeps every measurement."""

    batch_sizes: list[int] = field(default_factory=list)
    commit_seconds: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    failures: int = 0

    def on_commit(self, batch_size: int, commit_seconds: float) -> None:
        self.batch_sizes.append(batch_size)
        self.commit_seconds.append(commit_seconds)

    def on_write_done(self, wait_seconds: float) -> None:
        self.waits.append(wait_seconds)

    def on_queue_depth(self, depth: int) -> None:
        self.depths.append(depth)

    def on_commit_failure(self) -> None:
        self.failures += 1


class Gate:
    """Holds a unit on the writer thread until the test opens it (a writer whose units run
    there: `CommitWriterSettings.units_on_writer_thread`)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.thread_name: str | None = None

    def unit(self, connection: sqlite3.Connection) -> str:
        self.thread_name = threading.current_thread().name
        self.entered.set()
        if not self.opened.wait(EVENTUALLY_TIMEOUT):
            raise TimeoutError("the test never opened the gate")
        connection.execute("INSERT INTO notes (agent, seq, body) VALUES ('gate', 0, 'held')")
        return "gate"

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, EVENTUALLY_TIMEOUT)


async def assert_eventually(predicate: Callable[[], bool], *, what: str) -> None:
    """Poll `predicate` until true, failing after `EVENTUALLY_TIMEOUT` seconds."""
    deadline = time.monotonic() + EVENTUALLY_TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never became true: {what}")
        await asyncio.sleep(0.001)

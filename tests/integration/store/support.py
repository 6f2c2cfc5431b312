"""What the store's migration tests share: a current SQLite store turned back into schema
version 1 or 2."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gateway.store import tables

A = "agt_AAAAAAAAAAAAAAAAAAAAAA"
CNV = "cnv_qF0CzgWIvDEnr30lD2k820Oo1Hx_7hHXB5jv02vC5bQ"


def as_version_2(path: Path) -> None:
    """Rewrite the SQLite store at `path` as schema version 2 kept it: `sends` without the
    columns version 3 added (engine.md §9.1)."""
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = 2 WHERE key = 'schema_version'")
        db.execute("ALTER TABLE sends DROP COLUMN bound")
        db.execute("ALTER TABLE sends DROP COLUMN resumable")


def as_version_1(path: Path) -> None:
    """Rewrite the SQLite store at `path` as schema version 1 kept it, with a row in each table
    version 1 kept forever."""
    as_version_2(path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = 1 WHERE key = 'schema_version'")
        db.execute("DELETE FROM meta WHERE key = ?", (tables.LOCAL_INSTANCE_KEY,))
        db.execute("DROP TABLE record_bodies")
        db.execute(
            "INSERT INTO certified_records VALUES (?, 'rch_head', ?, 2, ?, 'pst_x', ?, 1)",
            (A, CNV, A, b'{"membership":{"m":1}}'),
        )
        db.execute(
            "INSERT INTO conversations VALUES (?, ?, x'00', 'mbr_x', x'00', 'anc_x', 'rch_head', 2)",
            (A, CNV),
        )
        for predecessor, action in (("rch_old", "ach_old"), ("rch_head", "ach_live")):
            db.execute(
                "INSERT INTO proposal_locks VALUES (?, ?, ?, ?, x'00')",
                (A, CNV, predecessor, action),
            )
            db.execute(
                "INSERT INTO evidence VALUES (?, ?, ?, 'action', ?, x'00')", (A, action, A, CNV)
            )
        for row_id, state in ((1, "accepted"), (2, "discarded"), (3, "pending")):
            db.execute(
                "INSERT INTO outbox VALUES (?, ?, ?, NULL, 'msg_x', x'00', ?)",
                (A, row_id, CNV, state),
            )

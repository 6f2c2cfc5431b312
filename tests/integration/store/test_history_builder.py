"""`bench.history build` writes what a daemon serving sends writes: certified records at
both members, acknowledged and unread inbox items, open intents (bench/README.md
"Start-up on a long history")."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bench.history import build, leave_open
from gateway.store.sqlite_store import STORE_FILE


def counts(path: Path, sql: str) -> dict[str, int]:
    with sqlite3.connect(path) as db:
        found = {str(key): int(count) for key, count in db.execute(sql)}
    db.close()
    return found


async def test_a_built_history_holds_the_records_items_and_open_intents_it_was_asked_for(
    tmp_path: Path,
) -> None:
    result = await build(tmp_path, records=400, conversations=2, batch=64, unread=5, open_intents=2)

    store = tmp_path / STORE_FILE
    assert result["records"] == 400
    assert counts(store, "SELECT 'records', COUNT(*) FROM certified_records") == {"records": 400}
    # 100 posts a pair, half by each member: 50 items per agent, 5 of them left unread.
    assert counts(store, "SELECT state, COUNT(*) FROM inbox GROUP BY state") == {
        "acknowledged": 4 * 45,
        "unread": 4 * 5,
    }
    assert counts(store, "SELECT state, COUNT(*) FROM post_intents GROUP BY state") == {
        "completed": 200,
        "open": 2 * 2,
    }


async def test_open_intents_are_added_to_a_built_history(tmp_path: Path) -> None:
    await build(tmp_path, records=40, conversations=2, batch=8, unread=1)

    assert await leave_open(tmp_path, intents=3) == {"conversations": 2.0, "open_intents": 6.0}

    assert counts(
        tmp_path / STORE_FILE, "SELECT state, COUNT(*) FROM post_intents GROUP BY state"
    ) == {"completed": 20, "open": 6}

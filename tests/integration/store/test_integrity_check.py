"""The integrity check of a large store file (engine.md §8.5): the cheap part before the
daemon serves, every page after it serves; damage found then stops the daemon and keeps the
next start refused."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import harness_client
import pytest
from harness_client import MessageInput

import gateway.store.sqlite as sqlite_module
from gateway.endpoint.api import GatewayState
from gateway.store import StoreCorrupt
from gateway.store.sqlite import damaged_marker
from gateway.store.sqlite_store import STORE_FILE
from gateway.testing import run_gateway

BOUND = 20.0


@pytest.fixture
def every_file_is_large(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store file counts as large: its full check waits until the daemon serves."""
    monkeypatch.setattr(sqlite_module, "FULL_CHECK_LIMIT", 0)


def damage_root_page(path: Path, table: str) -> None:
    """Overwrite the first page of `table` (one the start neither checks nor reads)."""
    with sqlite3.connect(path) as db:
        (root,) = db.execute(
            "SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,)
        ).fetchone()
        (page_size,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    data = bytearray(path.read_bytes())
    start = (root - 1) * page_size
    data[start : start + page_size] = b"\xab" * page_size
    path.write_bytes(bytes(data))


@pytest.mark.usefixtures("every_file_is_large")
async def test_a_damaged_page_found_after_ready_stops_the_daemon_and_the_next_start_is_refused(
    tmp_path: Path,
) -> None:
    async with run_gateway(data_dir=tmp_path) as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob")}
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            await alice.send(MessageInput(to="agent:bob", text="kept in record_bodies"))
        await gw.gateway.shutdown(skip_waits=True)
        store = tmp_path / STORE_FILE
        damage_root_page(store, "record_bodies")

        # Header, schema and the tables read at start are sound: the daemon serves...
        await gw.restart_stopped()
        assert gw.gateway.state in (GatewayState.SERVING, GatewayState.STOPPING)
        # ...until the check of every page finds the damage: it stops, exit code 1.
        await asyncio.wait_for(gw.gateway.wait_stopped(), BOUND)
        assert gw.gateway.exit_code == 1
        assert "malformed" in damaged_marker(store).read_text(encoding="utf-8")

        # The next start checks every page first, and refuses the file untouched.
        before = store.read_bytes()
        with pytest.raises(StoreCorrupt):
            await gw.restart_stopped()
        assert store.read_bytes() == before


@pytest.mark.usefixtures("every_file_is_large")
async def test_a_large_store_with_a_damaged_header_still_refuses_to_start(tmp_path: Path) -> None:
    async with run_gateway(data_dir=tmp_path) as gw:
        await gw.register("alice")
        await gw.gateway.shutdown(skip_waits=True)
        store = tmp_path / STORE_FILE
        data = bytearray(store.read_bytes())
        data[0:16] = b"not a database!\x00"
        store.write_bytes(bytes(data))

        with pytest.raises(StoreCorrupt, match="not a database"):
            await gw.restart_stopped()
        assert not damaged_marker(store).exists()

"""The store contract suite (`store_contract_suite.py`) on `MemoryStore` and `SqliteStore`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.store.memory import MemoryStore
from gateway.store.port import Store
from gateway.store.sqlite_store import SqliteStore
from tests.unit.store.store_contract_suite import *  # noqa: F403


@pytest.fixture(params=["memory", "sqlite"])
async def store(request, tmp_path) -> AsyncIterator[Store]:
    if request.param == "memory":
        opened: Store = MemoryStore()
    else:
        opened = await SqliteStore.open(tmp_path / "store.sqlite3")
    try:
        yield opened
    finally:
        await opened.close()

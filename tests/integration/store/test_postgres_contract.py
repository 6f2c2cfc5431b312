"""The store contract suite (`tests/unit/store/store_contract_suite.py`) on PostgreSQL.

Every test function of the suite runs here as it is (the star import), with `store` a
`PostgresStore` on a fresh database: one behaviour for SQLite, memory and PostgreSQL. New
contract tests join without an edit here."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.store.port import Store
from gateway.store.postgres import PostgresStore
from tests.servers import PostgresServer
from tests.unit.store import store_contract_suite as contract
from tests.unit.store.store_contract_suite import *  # noqa: F403


@pytest.fixture
async def store(postgres_server: PostgresServer) -> AsyncIterator[Store]:
    # Typed as the seam: mypy checks that PostgresStore implements the Protocol.
    opened: Store = await PostgresStore.open(postgres_server.create_database(), owner="contract")
    try:
        yield opened
    finally:
        await opened.close()


def test_the_whole_contract_suite_runs_here() -> None:
    names = {name for name in dir(contract) if name.startswith("test_")}
    assert names
    assert names <= set(globals())

"""The Registry contract suite (`tests/unit/registry/registry_contract_suite.py`) against
`PostgresRegistry`: one behaviour for the memory, SQLite and PostgreSQL backends.

The suite's tests are collected here through the star import; the `make_registry` below gives
each of them a fresh PostgreSQL database.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable

import pytest
from harness_contract.ids import RandomId

from gateway.identity.keys import SigningKey
from gateway.registry import RegistryPort
from gateway.registry.postgres import PostgresRegistry
from tests.servers import PostgresServer
from tests.unit.registry.registry_contract_suite import *  # noqa: F403
from tests.unit.registry.registry_contract_suite import NOW, MakeRegistry


@pytest.fixture(params=["postgres"])
async def make_registry(postgres_server: PostgresServer) -> AsyncIterator[MakeRegistry]:
    opened: list[PostgresRegistry] = []

    async def make(
        *,
        mint_agent_id: Callable[[], str] = RandomId.AGENT.mint,
        clock: Callable[[], dt.datetime] = lambda: NOW,
    ) -> RegistryPort:
        registry = await PostgresRegistry.open(
            postgres_server.create_database("registry"),
            signing_seed=SigningKey.generate().seed,
            pool_size=2,
            mint_agent_id=mint_agent_id,
            clock=clock,
        )
        opened.append(registry)
        return registry

    try:
        yield make
    finally:
        for registry in opened:
            await registry.close()

"""The Registry contract suite (`registry_contract_suite.py`) on the in-process backends:
`MemoryRegistry` and `SqliteRegistry`."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable

import pytest
from harness_contract.ids import RandomId

from gateway.registry import MemoryRegistry, RegistryPort, SqliteRegistry
from tests.unit.registry.registry_contract_suite import *  # noqa: F403
from tests.unit.registry.registry_contract_suite import NOW, MakeRegistry


@pytest.fixture(params=["memory", "sqlite"])
async def make_registry(request, tmp_path) -> AsyncIterator[MakeRegistry]:
    opened: list[SqliteRegistry] = []

    async def make(
        *,
        mint_agent_id: Callable[[], str] = RandomId.AGENT.mint,
        clock: Callable[[], dt.datetime] = lambda: NOW,
    ) -> RegistryPort:
        if request.param == "memory":
            return MemoryRegistry(mint_agent_id=mint_agent_id, clock=clock)
        registry = await SqliteRegistry.open(
            tmp_path / f"registry-{len(opened)}.db", mint_agent_id=mint_agent_id, clock=clock
        )
        opened.append(registry)
        return registry

    yield make
    for registry in opened:
        await registry.close()

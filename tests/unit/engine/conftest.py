"""The engine's unit-test fixtures: `world`, members on a fresh `MemoryStore`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.store.memory import MemoryStore
from tests.unit.engine.support import World, world_on


@pytest.fixture
async def world() -> AsyncIterator[World]:
    async with world_on(MemoryStore()) as built:
        yield built

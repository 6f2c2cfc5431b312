"""A real `grpc.aio` server on 127.0.0.1:0 over the in-memory `FakeCore`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import harness_client
import pytest

from gateway.rpc import RpcServer, build_server
from gateway.settings import Settings
from tests.integration.rpc.fake_core import ADMIN_TOKEN, FakeCore

BOUND = 10.0
"""Seconds any single wait in these tests may take before it fails."""


async def until(condition: Callable[[], bool], *, bound: float = BOUND) -> None:
    """Wait until `condition()` holds, polling, never longer than `bound` (assert_eventually)."""
    async with asyncio.timeout(bound):
        while not condition():  # noqa: ASYNC110 - polls state another task changes, bounded
            await asyncio.sleep(0.005)


@dataclass
class Served:
    """A started server, its fake core, and the admin token."""

    server: RpcServer
    core: FakeCore
    address: str
    admin_token: str = ADMIN_TOKEN

    async def register(self, name: str) -> str:
        """Register an agent directly on the core; returns its token."""
        return (await self.core.register(name)).token

    async def connect(self, name: str) -> harness_client.Endpoint:
        """Register `name` if needed and connect as it."""
        token = await self.register(name)
        return await harness_client.connect(self.address, token=token)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    core = FakeCore()
    settings = Settings(
        listen="127.0.0.1:0", metrics_listen=None, data_dir=tmp_path, reflection=True
    )
    server = await build_server(core.core, settings)
    try:
        await server.start()
        await server.set_serving()
        yield Served(server=server, core=core, address=server.address)
    finally:
        await server.stop(None)

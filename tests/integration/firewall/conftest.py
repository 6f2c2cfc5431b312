"""Shared set-up of the firewall tests: a real gateway with a firewall file, and its agents."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import harness_client
from harness_client import (
    CheckedGuidance,
    CollectiveGuidance,
    InboundDelivery,
    InboundItem,
    InboundMessage,
    JsonValue,
    MulticastItem,
    TextPart,
)

from gateway.settings import Settings
from gateway.testing import RunningGateway, run_gateway

ItemT = TypeVar("ItemT", bound=InboundItem)

BOUND = 20.0
"""Seconds any single wait may take before the test fails."""

SCHEMA: dict[str, JsonValue] = {
    "type": "object",
    "properties": {"plan": {"type": "string"}},
    "required": ["plan"],
}


EXAMPLE = Path(__file__).parents[3] / "clients" / "examples" / "firewall_middleware.py"
"""The example external middleware operators copy; the tests serve it in-process."""


def load_example() -> ModuleType:
    """The example middleware, imported from its file (it is a script, not a package)."""
    name = "firewall_middleware_example"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def message_of(delivery: InboundDelivery) -> InboundMessage:
    """The message of a multicast delivery."""
    assert isinstance(delivery.item, MulticastItem), delivery.item
    return delivery.item.message


def text_of(delivery: InboundDelivery) -> str:
    """The first text part of a multicast delivery."""
    part = message_of(delivery).content[0]
    assert isinstance(part, TextPart)
    return part.text


def checked(delivery: InboundDelivery) -> CheckedGuidance:
    """A message's or request's guidance (the checked form)."""
    assert isinstance(delivery.guidance, CheckedGuidance), delivery.guidance
    return delivery.guidance


def collective(delivery: InboundDelivery) -> CollectiveGuidance:
    """A collective result's guidance."""
    assert isinstance(delivery.guidance, CollectiveGuidance), delivery.guidance
    return delivery.guidance


def item_as(delivery: InboundDelivery, kind: type[ItemT]) -> ItemT:
    """The delivery's item, asserted to be of `kind`."""
    assert isinstance(delivery.item, kind), delivery.item
    return delivery.item


def write_config(path: Path, text: str) -> Path:
    """Write a firewall file (dedented) and return its path."""
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


class Agent:
    """One connected agent and its one stream."""

    def __init__(self, name: str, endpoint: harness_client.Endpoint) -> None:
        self.name = name
        self.endpoint = endpoint
        self.stream = endpoint.messages()

    async def next(self, within: float = BOUND) -> InboundDelivery:
        """The next delivery, acknowledged."""
        delivery = await asyncio.wait_for(self.stream.__anext__(), within)
        await delivery.acknowledge()
        return delivery

    async def next_unacknowledged(self, within: float = BOUND) -> InboundDelivery:
        return await asyncio.wait_for(self.stream.__anext__(), within)


@asynccontextmanager
async def firewalled(
    config: Path | None, *names: str
) -> AsyncIterator[tuple[RunningGateway, dict[str, Agent]]]:
    """A gateway with `config` as its firewall file and these agents connected."""
    async with run_gateway(Settings(firewall_config=config)) as gw, AsyncExitStack() as stack:
        agents: dict[str, Agent] = {}
        for name in names:
            token = await gw.register(name)
            endpoint = await stack.enter_async_context(
                await harness_client.connect(gw.address, token=token)
            )
            agents[name] = Agent(name, endpoint)
        try:
            yield gw, agents
        finally:
            for agent in agents.values():
                await agent.stream.aclose()

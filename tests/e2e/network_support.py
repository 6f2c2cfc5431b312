"""Helpers of the collectives scenarios on real daemon processes (collectives.md §8.1): one
agent per `harness-gateway serve` daemon, all joined to one standalone Router and Registry
(`gateway.testing_network`), each agent's `Messages` stream pumped into a queue."""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Final

import harness_client
from harness_client import (
    AskOperation,
    CollectiveOp,
    InboundDelivery,
    InboundItem,
    MessageInput,
    MulticastItem,
    TextPart,
)

from gateway.testing_network import NetworkProcess, RunningNetwork, run_network

S: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"slot": {"type": "string", "enum": ["mon", "tue"]}},
    "required": ["slot"],
}
"""The slot schema of collectives.md §8.1 (already normalized: it travels unchanged)."""

QUESTION: Final = "Which day works for the review?"

BOUND: Final = 30.0
"""Seconds one item may take to arrive when nothing waits on a deadline: a first
certification across processes includes Registry lookups and the Router's checks."""

SEND_WAIT: Final = 20.0
"""The collective send wait (collectives.md §1.3, §1.4)."""

LOG_TAIL: Final = 80
"""stderr lines of each process printed when a scenario fails."""

PROBE_TEXT: Final = "one measured round"


class Party:
    """One agent on its own daemon: an endpoint and its pumped `Messages` stream."""

    def __init__(self, name: str, daemon: NetworkProcess, endpoint: harness_client.Endpoint):
        self.name = name
        self.address = f"agent:{name}"
        self.daemon = daemon
        self.endpoint = endpoint
        self._queue: asyncio.Queue[InboundDelivery | Exception] = asyncio.Queue()
        self._pump = asyncio.create_task(self._run(), name=f"pump-{name}")

    async def _run(self) -> None:
        stream = self.endpoint.messages()
        try:
            async for delivery in stream:
                self._queue.put_nowait(delivery)
        except Exception as error:
            self._queue.put_nowait(error)  # the next reader raises it
        finally:
            with contextlib.suppress(BaseException):
                await stream.aclose()

    async def next_item(self, within: float = BOUND) -> InboundItem:
        """The next delivery's item, once acknowledged; fails after `within` seconds."""
        try:
            taken = await asyncio.wait_for(self._queue.get(), within)
        except TimeoutError:
            raise AssertionError(f"{self.name} received no item within {within:g} s") from None
        if isinstance(taken, Exception):
            raise AssertionError(f"{self.name}'s stream failed: {taken!r}") from taken
        await taken.acknowledge()
        return taken.item

    async def nothing_within(self, seconds: float) -> InboundItem | None:
        """None when no delivery arrives within `seconds`, else the item that did."""
        try:
            taken = await asyncio.wait_for(self._queue.get(), seconds)
        except TimeoutError:
            return None
        if isinstance(taken, Exception):
            raise AssertionError(f"{self.name}'s stream failed: {taken!r}") from taken
        return taken.item

    async def close(self) -> None:
        """End the pump and the endpoint (before its daemon is stopped, or at the end)."""
        self._pump.cancel()
        with contextlib.suppress(BaseException):
            await self._pump
        with contextlib.suppress(Exception):
            await self.endpoint.close()


async def register(daemon: NetworkProcess, name: str) -> str:
    """Register `name` on `daemon` through its ManagementService; its API token."""
    async with await harness_client.connect_management(
        daemon.address, admin_token=daemon.admin_token
    ) as operator:
        registered = await operator.register_agent(name)
    assert registered.address == f"agent:{name}"
    return registered.token


@contextlib.asynccontextmanager
async def network_parties(
    names: Sequence[str],
    *,
    label: str = "network",
    nats: str | None = None,
    store: str | None = None,
) -> AsyncIterator[tuple[RunningNetwork, dict[str, Party]]]:
    """A Registry, a Router and one daemon per name, each name registered and connected on
    its own daemon. On failure the tail of every process's stderr is printed under `label`
    (pytest shows it with the failure). `nats` and `store` put the network on NATS
    JetStream and PostgreSQL (`run_network`)."""
    async with run_network(daemons=len(names), nats=nats, store=store) as network:
        parties: dict[str, Party] = {}
        try:
            for name, daemon in zip(names, network.daemons, strict=True):
                token = await register(daemon, name)
                endpoint = await harness_client.connect(daemon.address, token=token)
                parties[name] = Party(name, daemon, endpoint)
            yield network, parties
        except BaseException:
            hosts = dict(zip((d.name for d in network.daemons), names, strict=False))
            print_logs(network, label, hosts)
            raise
        finally:
            await asyncio.gather(*(party.close() for party in parties.values()))


def print_logs(network: RunningNetwork, label: str, hosts: dict[str, str]) -> None:
    """The tail of every process's stderr; `hosts` names each daemon's agent."""
    for process in network.processes:
        tail = list(process.log)[-LOG_TAIL:]
        host = f" ({hosts[process.name]})" if process.name in hosts else ""
        print(
            f"--- {label} {process.name}{host} stderr (last {len(tail)} lines) ---",
            file=sys.stderr,
        )
        for line in tail:
            print(line, file=sys.stderr)


def ask(to: str, deadline: int, op: CollectiveOp = CollectiveOp.GATHER) -> MessageInput:
    """A gather (or all_gather) of QUESTION under S."""
    return MessageInput(
        to=to, text=QUESTION, collective=AskOperation(op=op, deadline=deadline, requested_schema=S)
    )


async def measure_deadline(requester: Party, members: Sequence[Party]) -> int:
    """collectives.md §8.1 D: time one group round (the requester multicasts to the group of
    all participants and every member takes that item); max(15, ceil(4 × seconds))."""
    group = "group:" + ",".join(sorted(party.name for party in (requester, *members)))
    started = time.monotonic()
    await asyncio.wait_for(requester.endpoint.send(MessageInput(to=group, text=PROBE_TEXT)), BOUND)
    for member in members:
        item = await member.next_item()
        assert isinstance(item, MulticastItem), item
        assert item.message.content == (TextPart(text=PROBE_TEXT),)
    elapsed = time.monotonic() - started
    return max(15, math.ceil(4 * elapsed))


def now_ms() -> int:
    return int(time.time() * 1000)


def seconds_until(epoch_ms: int) -> float:
    """Seconds from now until an epoch-millisecond instant (0 when past)."""
    return max(0.0, (epoch_ms - now_ms()) / 1000)


@contextlib.contextmanager
def elapsed() -> Iterator[list[float]]:
    """`with elapsed() as took:` — `took[0]` is the block's wall time in seconds."""
    took = [0.0]
    started = time.monotonic()
    try:
        yield took
    finally:
        took[0] = time.monotonic() - started

"""The baseline: bare `grpc.aio` unary echoes at the gateway run's concurrency.

The gateway run has one connection per sender, and `burst` sending tasks on it, each waiting
for its `Send` before the next; the baseline has as many channels with as many callers on
each (senders x burst calls in flight), each waiting for its echo before the next, for the
same time. The ratio of the two throughputs says what certification, storage and delivery
cost over a round trip through grpc alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc  # noqa: TID251 - the baseline is bare gRPC, outside the gateway's layering

from bench.echo_server import METHOD_PATH
from bench.processes import ChildProcess

ECHO_TIMEOUT: Final = 10.0
"""Seconds one echo call may take."""
CHANNEL_READY_TIMEOUT: Final = 10.0
"""Seconds a caller's channel may take to connect."""
REPO_ROOT: Final = Path(__file__).resolve().parent.parent
"""The directory `python -m bench.echo_server` runs in, so `bench` imports."""


@dataclass(slots=True)
class EchoTally:
    """What the callers did in the timed window."""

    calls: int = 0
    failures: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True, slots=True, kw_only=True)
class EchoOutcome:
    """The baseline's throughput and what went wrong on the way."""

    calls_per_second: float
    calls: int
    elapsed: float
    failures: Mapping[str, int]
    server_problems: tuple[str, ...]
    server_problem_count: int


def _is_ready(entry: Mapping[str, Any]) -> bool:
    return entry.get("msg") == "ready" and isinstance(entry.get("listen"), str)


async def measure_echo(
    *, channels: int, callers_per_channel: int, seconds: float, payload: bytes
) -> EchoOutcome:
    """Start the echo server, drive `callers_per_channel` sequential callers on each of
    `channels` channels for `seconds`, stop it."""
    argv = [sys.executable, "-m", "bench.echo_server"]
    async with ChildProcess.run(
        "echo server", argv, ready_on="stdout", is_ready=_is_ready, cwd=REPO_ROOT
    ) as server:
        target = str(server.ready_line["listen"])
        opened = [grpc.aio.insecure_channel(target) for _ in range(channels)]
        try:
            echoes: list[grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]] = [
                channel.unary_unary(METHOD_PATH) for channel in opened
            ]
            async with asyncio.timeout(CHANNEL_READY_TIMEOUT):
                await asyncio.gather(*(channel.channel_ready() for channel in opened))
            # One echo each before the clock starts: connections and call paths are warm.
            await asyncio.gather(*(echo(payload, timeout=ECHO_TIMEOUT) for echo in echoes))
            tally = EchoTally()
            started = time.perf_counter()
            stop_at = started + seconds
            async with asyncio.TaskGroup() as group:
                for echo in echoes:
                    for _ in range(callers_per_channel):
                        group.create_task(_caller(echo, payload, stop_at, tally))
            elapsed = time.perf_counter() - started
        finally:
            for channel in opened:
                with contextlib.suppress(Exception):
                    await channel.close()
    return EchoOutcome(
        calls_per_second=tally.calls / elapsed if elapsed > 0 else 0.0,
        calls=tally.calls,
        elapsed=elapsed,
        failures=dict(tally.failures),
        server_problems=tuple(server.problems.kept),
        server_problem_count=server.problems.count,
    )


async def _caller(
    echo: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes],
    payload: bytes,
    stop_at: float,
    tally: EchoTally,
) -> None:
    while time.perf_counter() < stop_at:
        try:
            answer = await echo(payload, timeout=ECHO_TIMEOUT)
        except grpc.aio.AioRpcError as error:
            tally.failures[error.code().name] += 1
            continue
        if answer == payload:
            tally.calls += 1
        else:
            tally.failures["wrong-answer"] += 1

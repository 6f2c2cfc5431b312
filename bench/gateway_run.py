"""The gateway run: K agent pairs sending direct multicasts through a real daemon process.

`harness-gateway serve` starts on 127.0.0.1:0 in a temporary data directory, with metrics on
a free port. Each pair is a sender and a receiver agent, each on its own connection. The
receivers listen for the whole run and acknowledge every delivery; after one warm-up message
per pair (streams attached, conversations started), every sender sends to its receiver in a
loop, one `Send` at a time, for the timed window. A message's text is JSON `{"t": <sender's
perf_counter_ns>, "phase": ...}`, so its receiver measures send-to-delivery. Afterwards the
receivers get a bounded time to see every certified post, and the daemon is always stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from harness_client import (
    DirectMessage,
    Endpoint,
    HarnessClientError,
    InboundDelivery,
    MessageInput,
    MulticastItem,
    TextPart,
    connect,
    connect_management,
)

from bench.metrics import CommitCounters, free_port, scrape_commit_counters
from bench.processes import ChildProcess

SEND_DEADLINE: Final = 30.0
"""Seconds one `Send` may take before the bench counts it as failed."""
WARMUP_TIMEOUT: Final = 60.0
"""Seconds for every pair's warm-up message to be certified and delivered."""
DRAIN_TIMEOUT: Final = 30.0
"""Seconds the receivers get, after the timed window, to see every certified post."""
ACK_SETTLE_TIMEOUT: Final = 15.0
"""Seconds the receivers' acknowledgments get to finish before the receivers stop."""
ACKS_IN_FLIGHT: Final = 256
"""Acknowledgments a receiver has pending before it stops reading (the stream window)."""
SHUTDOWN_GRACE: Final = "5s"
"""The gateway's `--shutdown-grace`: nothing is in flight when the bench stops it."""
WARMUP: Final = "warmup"
"""The phase of a pair's first message, sent before the clock starts and never measured."""
TIMED: Final = "timed"
"""The phase of every message sent in the timed window."""


class RunFailed(Exception):
    """The run could not be measured (the warm-up never completed)."""


def stamp_text(phase: str) -> str:
    """The text of one bench message: its phase and the sender's clock, JSON."""
    return json.dumps({"t": time.perf_counter_ns(), "phase": phase})


def read_stamp(text: str) -> tuple[str, int] | None:
    """`(phase, sent_ns)` of a bench message's text, or None when it is not one."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    phase, sent = value.get("phase"), value.get("t")
    if not isinstance(phase, str) or not isinstance(sent, int) or isinstance(sent, bool):
        return None
    return phase, sent


@dataclass(slots=True)
class Pair:
    """One sender and its receiver, and what each measured."""

    index: int
    sender: Endpoint
    receiver: Endpoint
    receiver_address: str
    changed: asyncio.Event
    """Set whenever a receiver's counts change; shared by every pair."""
    warmed: asyncio.Event = field(default_factory=asyncio.Event)
    sent: int = 0
    send_latencies_ns: list[int] = field(default_factory=list)
    send_failures: Counter[str] = field(default_factory=Counter)
    received: int = 0
    delivery_latencies_ns: list[int] = field(default_factory=list)
    strangers: int = 0
    acks_pending: int = 0
    ack_failures: Counter[str] = field(default_factory=Counter)
    receiver_error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayOutcome:
    """The gateway run's measurements and everything that went wrong in it."""

    posts: int
    elapsed: float
    send_latencies_ns: list[int]
    delivery_latencies_ns: list[int]
    commits_per_second: float | None
    mean_commit_batch_size: float | None
    undelivered: int
    send_failures: Mapping[str, int]
    ack_failures: Mapping[str, int]
    receiver_errors: tuple[str, ...]
    strangers: int
    gateway_problems: tuple[str, ...]
    gateway_problem_count: int
    gateway_exit_code: int | None
    measured_over: float
    """Seconds from the start of the timed window to the end of the drain."""
    gateway_cpu_seconds: float | None
    """CPU the gateway used over `measured_over` (Linux /proc), a diagnostic for stderr."""
    bench_cpu_seconds: float
    """CPU this process used over `measured_over`."""


def _is_ready(entry: Mapping[str, Any]) -> bool:
    return (
        entry.get("msg") == "ready"
        and isinstance(entry.get("listen"), str)
        and isinstance(entry.get("admin_token_file"), str)
    )


def _describe(error: HarnessClientError) -> str:
    return f"{type(error).__name__}:{error.reason}"


async def measure_gateway(*, gateway_bin: str, pairs: int, seconds: float) -> GatewayOutcome:
    """Run the daemon, drive `pairs` pairs for `seconds`, stop the daemon, report."""
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as scratch:
        metrics_address = f"127.0.0.1:{free_port()}"
        argv = [
            gateway_bin,
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            metrics_address,
            "--data-dir",
            str(Path(scratch) / "data"),
            "--log-format",
            "json",
            "--shutdown-grace",
            SHUTDOWN_GRACE,
        ]
        gateway: ChildProcess | None = None
        try:
            async with ChildProcess.run(
                "gateway", argv, ready_on="stderr", is_ready=_is_ready
            ) as gateway:
                target = str(gateway.ready_line["listen"])
                # A gateway that names its bound metrics address is the authority on it.
                named = gateway.ready_line.get("metrics")
                if isinstance(named, str) and named not in ("", "off"):
                    metrics_address = named
                token_file = Path(str(gateway.ready_line["admin_token_file"]))
                admin_token = (await asyncio.to_thread(token_file.read_text, "utf-8")).strip()
                measured = await _drive(
                    target, admin_token, metrics_address, pairs, seconds, gateway.cpu_seconds
                )
        except BaseException as failure:
            if gateway is not None:
                failure.add_note(_problems_note(gateway))
            raise
        return _outcome(measured, gateway)


def _problems_note(gateway: ChildProcess) -> str:
    lines = [f"gateway exit code {gateway.exit_code}; {gateway.problems.count} trouble line(s):"]
    lines.extend(gateway.problems.kept)
    return "\n".join(lines)


@dataclass(slots=True, kw_only=True)
class _Measured:
    pairs: list[Pair]
    elapsed: float
    before: CommitCounters | None
    after: CommitCounters | None
    scraped_over: float
    undelivered: int
    gateway_cpu_seconds: float | None
    bench_cpu_seconds: float


async def _drive(
    target: str,
    admin_token: str,
    metrics_address: str,
    count: int,
    seconds: float,
    gateway_cpu: Callable[[], float | None],
) -> _Measured:
    async with contextlib.AsyncExitStack() as stack:
        management = await connect_management(target, admin_token=admin_token)
        stack.push_async_callback(management.close)
        pairs: list[Pair] = []
        changed = asyncio.Event()
        for index in range(count):
            sender_agent = await management.register_agent(f"bench-sender-{index}")
            receiver_agent = await management.register_agent(f"bench-receiver-{index}")
            sender = await connect(target, token=sender_agent.token)
            stack.push_async_callback(sender.close)
            receiver = await connect(target, token=receiver_agent.token)
            stack.push_async_callback(receiver.close)
            pairs.append(Pair(index, sender, receiver, receiver_agent.address, changed))
        receivers = _Receivers(pairs, changed)
        # Pushed after the endpoints, so the receivers stop before their endpoints close.
        stack.push_async_callback(receivers.stop)
        receivers.start()

        try:
            async with asyncio.timeout(WARMUP_TIMEOUT):
                for pair in pairs:
                    await pair.sender.send(
                        MessageInput(to=pair.receiver_address, text=stamp_text(WARMUP)),
                        deadline=SEND_DEADLINE,
                    )
                await asyncio.gather(*(pair.warmed.wait() for pair in pairs))
        except TimeoutError:
            cold = [pair.index for pair in pairs if not pair.warmed.is_set()]
            raise RunFailed(
                f"warm-up messages of pairs {cold} not delivered within {WARMUP_TIMEOUT:g} s"
            ) from None

        before = await scrape_commit_counters(metrics_address)
        gateway_cpu_before = gateway_cpu()
        bench_cpu_before = time.process_time()
        scrape_started = time.perf_counter()
        started = time.perf_counter()
        stop_at = started + seconds
        async with asyncio.TaskGroup() as senders:
            for pair in pairs:
                senders.create_task(_send_loop(pair, stop_at), name=f"sender-{pair.index}")
        elapsed = time.perf_counter() - started

        undelivered = await _wait_delivered(pairs, changed)
        after = await scrape_commit_counters(metrics_address)
        scraped_over = time.perf_counter() - scrape_started
        bench_cpu = time.process_time() - bench_cpu_before
        gateway_cpu_after = gateway_cpu()
        await receivers.settle()
        return _Measured(
            pairs=pairs,
            elapsed=elapsed,
            before=before,
            after=after,
            scraped_over=scraped_over,
            undelivered=undelivered,
            gateway_cpu_seconds=(
                None
                if gateway_cpu_before is None or gateway_cpu_after is None
                else gateway_cpu_after - gateway_cpu_before
            ),
            bench_cpu_seconds=bench_cpu,
        )


async def _send_loop(pair: Pair, stop_at: float) -> None:
    while time.perf_counter() < stop_at:
        started = time.perf_counter_ns()
        message = MessageInput(
            to=pair.receiver_address, text=json.dumps({"t": started, "phase": TIMED})
        )
        try:
            await pair.sender.send(message, deadline=SEND_DEADLINE)
        except HarnessClientError as error:
            pair.send_failures[_describe(error)] += 1
            continue
        pair.send_latencies_ns.append(time.perf_counter_ns() - started)
        pair.sent += 1


async def _wait_until(condition: Callable[[], bool], changed: asyncio.Event, within: float) -> bool:
    """Wait until `condition()` holds, re-checking it each time `changed` is set; False when
    `within` seconds passed first."""
    try:
        async with asyncio.timeout(within):
            while not condition():
                # No await between the check and the clear: a change cannot slip past.
                changed.clear()
                await changed.wait()
    except TimeoutError:
        return condition()
    return True


def _missing(pairs: list[Pair]) -> int:
    return sum(max(0, pair.sent - pair.received) for pair in pairs)


async def _wait_delivered(pairs: list[Pair], changed: asyncio.Event) -> int:
    """Wait (bounded) until each receiver saw as many timed posts as its sender certified,
    or a receiver failed; returns how many are still missing."""
    await _wait_until(
        lambda: _missing(pairs) == 0 or any(pair.receiver_error for pair in pairs),
        changed,
        DRAIN_TIMEOUT,
    )
    return _missing(pairs)


class _Receivers:
    """The receivers' tasks: started once, stopped (cancelled and awaited) once."""

    def __init__(self, pairs: list[Pair], changed: asyncio.Event) -> None:
        self._pairs = pairs
        self._changed = changed
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(_receive_loop(pair), name=f"receiver-{pair.index}")
            for pair in self._pairs
        ]

    async def settle(self) -> None:
        """Wait (bounded) for the acknowledgments in flight."""
        await _wait_until(
            lambda: not any(pair.acks_pending for pair in self._pairs),
            self._changed,
            ACK_SETTLE_TIMEOUT,
        )

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []


async def _receive_loop(pair: Pair) -> None:
    in_flight = asyncio.Semaphore(ACKS_IN_FLIGHT)
    try:
        async with (
            asyncio.TaskGroup() as acks,
            contextlib.aclosing(pair.receiver.messages()) as deliveries,
        ):
            async for delivery in deliveries:
                arrived = time.perf_counter_ns()
                _note_delivery(pair, delivery, arrived)
                await in_flight.acquire()
                pair.acks_pending += 1
                acks.create_task(_acknowledge(pair, delivery, in_flight))
    except* HarnessClientError as failures:
        # The stream gave up (`ListenError`) or the endpoint closed under it.
        pair.receiver_error = ", ".join(
            _describe(error) if isinstance(error, HarnessClientError) else repr(error)
            for error in failures.exceptions
        )
    finally:
        pair.changed.set()


def _note_delivery(pair: Pair, delivery: InboundDelivery, arrived_ns: int) -> None:
    match delivery.item:
        case MulticastItem(message=DirectMessage(content=content)):
            text = "\n".join(part.text for part in content if isinstance(part, TextPart))
            stamp = read_stamp(text)
        case _:
            stamp = None
    if stamp is None:
        pair.strangers += 1
        return
    phase, sent_ns = stamp
    pair.changed.set()
    if phase == WARMUP:
        pair.warmed.set()
    elif phase == TIMED:
        pair.received += 1
        pair.delivery_latencies_ns.append(arrived_ns - sent_ns)
    else:
        pair.strangers += 1


async def _acknowledge(pair: Pair, delivery: InboundDelivery, in_flight: asyncio.Semaphore) -> None:
    try:
        await delivery.acknowledge()
    except HarnessClientError as error:
        pair.ack_failures[_describe(error)] += 1
    finally:
        pair.acks_pending -= 1
        in_flight.release()
        pair.changed.set()


def _outcome(measured: _Measured, gw: ChildProcess) -> GatewayOutcome:
    pairs = measured.pairs
    commits_per_second: float | None = None
    mean_batch: float | None = None
    if measured.before is not None and measured.after is not None:
        commits = measured.after.commits - measured.before.commits
        writes = measured.after.writes - measured.before.writes
        if measured.scraped_over > 0:
            commits_per_second = round(commits / measured.scraped_over, 1)
        if commits > 0:
            mean_batch = round(writes / commits, 2)
    send_failures: Counter[str] = Counter()
    ack_failures: Counter[str] = Counter()
    for pair in pairs:
        send_failures.update(pair.send_failures)
        ack_failures.update(pair.ack_failures)
    return GatewayOutcome(
        posts=sum(pair.sent for pair in pairs),
        elapsed=measured.elapsed,
        send_latencies_ns=[sample for pair in pairs for sample in pair.send_latencies_ns],
        delivery_latencies_ns=[sample for pair in pairs for sample in pair.delivery_latencies_ns],
        commits_per_second=commits_per_second,
        mean_commit_batch_size=mean_batch,
        undelivered=measured.undelivered,
        send_failures=dict(send_failures),
        ack_failures=dict(ack_failures),
        receiver_errors=tuple(
            f"receiver {pair.index}: {pair.receiver_error}"
            for pair in pairs
            if pair.receiver_error is not None
        ),
        strangers=sum(pair.strangers for pair in pairs),
        gateway_problems=tuple(gw.problems.kept),
        gateway_problem_count=gw.problems.count,
        gateway_exit_code=gw.exit_code,
        measured_over=measured.scraped_over,
        gateway_cpu_seconds=measured.gateway_cpu_seconds,
        bench_cpu_seconds=measured.bench_cpu_seconds,
    )

"""`python -m bench` (`make bench`): certified direct multicasts against a bare gRPC echo.

Starts a real `harness-gateway serve` process, drives K agent pairs through it for a fixed
time, then drives a bare `grpc.aio` unary echo server (its own process) with as many callers
for as long, and prints ONE JSON line on stdout. Progress and any trouble go to stderr.
See bench/README.md for what each field means.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from bench.result import BenchResult, Percentiles, rate, ratio, result_line, this_machine

if TYPE_CHECKING:
    from bench.baseline import EchoOutcome
    from bench.gateway_run import GatewayOutcome

DEFAULT_PAIRS: Final = 8
"""Agent pairs (concurrent senders) of a full run."""
DEFAULT_SECONDS: Final = 10.0
"""Seconds of a full run's timed window (and of the baseline's)."""
QUICK_PAIRS: Final = 2
"""Agent pairs of a `--quick` run."""
QUICK_SECONDS: Final = 2.0
"""Seconds of a `--quick` run's timed window."""
MAX_PAIRS: Final = 256
"""Most pairs accepted: each pair holds two gRPC connections in this one process."""
MAX_SECONDS: Final = 3600.0
"""Longest timed window accepted, in seconds: an hour is past any useful run."""
EXIT_FAILED: Final = 1
"""Exit code when the run could not be measured (the gateway or the echo server failed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig:
    """What to run."""

    pairs: int
    seconds: float
    gateway_bin: str


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= MAX_PAIRS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_PAIRS}, not {value}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be above 0 and at most {MAX_SECONDS:g}, not {value:g}"
        )
    return value


def _default_gateway_bin() -> str:
    beside = Path(sys.executable).parent / "harness-gateway"
    if beside.exists():
        return str(beside)
    return shutil.which("harness-gateway") or "harness-gateway"


def build_parser() -> argparse.ArgumentParser:
    """The `python -m bench` argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=(
            "Measure certified direct multicasts through a real harness-gateway process "
            "against a bare grpc.aio unary echo at the same concurrency; print one JSON line."
        ),
    )
    parser.add_argument(
        "--pairs",
        type=_positive_int,
        default=None,
        help=f"sender/receiver agent pairs, one concurrent sender each (default {DEFAULT_PAIRS}; "
        f"{QUICK_PAIRS} with --quick)",
    )
    parser.add_argument(
        "--seconds",
        type=_positive_seconds,
        default=None,
        help=f"length of each timed window (default {DEFAULT_SECONDS:g}; "
        f"{QUICK_SECONDS:g} with --quick)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a short smoke run: {QUICK_PAIRS} pairs for {QUICK_SECONDS:g} s unless "
        "--pairs or --seconds say otherwise",
    )
    parser.add_argument(
        "--gateway-bin",
        default=None,
        help="the harness-gateway executable (default: the one beside this Python)",
    )
    return parser


def parse_config(argv: Sequence[str] | None = None) -> BenchConfig:
    """The run `argv` asks for; exits 2 on invalid flags (argparse)."""
    args = build_parser().parse_args(argv)
    pairs = args.pairs if args.pairs is not None else (QUICK_PAIRS if args.quick else DEFAULT_PAIRS)
    seconds = (
        args.seconds
        if args.seconds is not None
        else (QUICK_SECONDS if args.quick else DEFAULT_SECONDS)
    )
    return BenchConfig(
        pairs=pairs,
        seconds=seconds,
        gateway_bin=args.gateway_bin or _default_gateway_bin(),
    )


def _say(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def _report_counts(title: str, counts: Mapping[str, int]) -> None:
    if counts:
        details = ", ".join(f"{name} x{count}" for name, count in sorted(counts.items()))
        _say(f"{title}: {details}")


async def run(config: BenchConfig) -> BenchResult:
    """Both measurements, one after the other (never competing for the CPUs)."""
    # Imported here: `--help` and the unit tests need neither grpc nor the client.
    from bench.baseline import measure_echo
    from bench.gateway_run import TIMED, measure_gateway, stamp_text

    _say(f"gateway run: {config.pairs} pairs for {config.seconds:g} s ({config.gateway_bin})")
    started = time.perf_counter()
    gateway = await measure_gateway(
        gateway_bin=config.gateway_bin, pairs=config.pairs, seconds=config.seconds
    )
    _say(
        f"gateway run done in {time.perf_counter() - started:.1f} s: {gateway.posts} posts "
        f"in {gateway.elapsed:.2f} s, gateway exit code {gateway.gateway_exit_code}"
    )
    _say(_cpu_summary(gateway))
    _report_counts("send failures", gateway.send_failures)
    _report_counts("acknowledge failures", gateway.ack_failures)
    for line in gateway.receiver_errors:
        _say(line)
    if gateway.undelivered:
        _say(f"{gateway.undelivered} certified post(s) not delivered within the drain bound")
    if gateway.strangers:
        _say(f"{gateway.strangers} delivery(ies) that were not bench messages")
    if gateway.gateway_problem_count:
        _say(f"gateway logged {gateway.gateway_problem_count} warning/error/non-JSON line(s):")
        for line in gateway.gateway_problems:
            print(f"  {line}", file=sys.stderr)
    if gateway.commits_per_second is None:
        _say("no harness_store_commit_batch_size on --metrics-listen: store fields are null")

    _say(f"baseline run: {config.pairs} concurrent unary echo callers for {config.seconds:g} s")
    payload = stamp_text(TIMED).encode()
    echo = await measure_echo(callers=config.pairs, seconds=config.seconds, payload=payload)
    _say(f"baseline run done: {echo.calls} echoes in {echo.elapsed:.2f} s")
    _report_counts("echo failures", echo.failures)
    if echo.server_problem_count:
        _say(f"echo server logged {echo.server_problem_count} trouble line(s):")
        for line in echo.server_problems:
            print(f"  {line}", file=sys.stderr)
    return assemble(config, gateway, echo)


def _cpu_summary(gateway: GatewayOutcome) -> str:
    span = f"over {gateway.measured_over:.2f} s (timed window and drain)"
    bench = f"bench client {gateway.bench_cpu_seconds:.2f} CPU-s"
    if gateway.gateway_cpu_seconds is None:
        return f"CPU {span}: {bench}; gateway unknown (no /proc)"
    per_post = (
        f", {1000 * gateway.gateway_cpu_seconds / gateway.posts:.1f} gateway CPU-ms per post"
        if gateway.posts
        else ""
    )
    return f"CPU {span}: gateway {gateway.gateway_cpu_seconds:.2f} CPU-s, {bench}{per_post}"


def assemble(config: BenchConfig, gateway: GatewayOutcome, echo: EchoOutcome) -> BenchResult:
    """The result line's values from the two measurements."""
    posts_per_second = rate(gateway.posts, gateway.elapsed)
    echo_per_second = rate(echo.calls, echo.elapsed)
    return BenchResult(
        machine=this_machine(),
        pairs=config.pairs,
        seconds=config.seconds,
        certified_posts_per_second=posts_per_second,
        send_latency_ms=Percentiles.of_ns(gateway.send_latencies_ns),
        send_to_delivery_ms=Percentiles.of_ns(gateway.delivery_latencies_ns),
        store_commits_per_second=gateway.commits_per_second,
        mean_commit_batch_size=gateway.mean_commit_batch_size,
        baseline_unary_echo_per_second=echo_per_second,
        ratio_to_baseline=ratio(posts_per_second, echo_per_second),
    )


class Interrupted(Exception):
    """SIGTERM or SIGINT stopped the run (its children were still stopped)."""


async def _run_until_signalled(config: BenchConfig) -> BenchResult:
    """`run`, cancelled by the first SIGTERM or SIGINT so that every `finally` (which stops
    the children) runs; later signals are ignored, the stop being bounded anyway."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    received: list[signal.Signals] = []

    def on_signal(signum: signal.Signals) -> None:
        if not received:
            received.append(signum)
            task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        return await run(config)
    except asyncio.CancelledError:
        if received:
            raise Interrupted(received[0].name) from None
        raise
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bench and print its line; returns the exit code."""
    config = parse_config(argv)
    from bench.processes import ChildFailed, quiet_grpc_fork_handlers

    quiet_grpc_fork_handlers()  # before anything imports grpc
    # uvloop in the bench's own process, as the gateway and the echo server use it.
    import uvloop
    from harness_client import HarnessClientError

    from bench.gateway_run import RunFailed

    try:
        result = uvloop.run(_run_until_signalled(config))
    except (ChildFailed, RunFailed, HarnessClientError) as failure:
        _say(f"failed: {type(failure).__name__}: {failure}")
        for note in getattr(failure, "__notes__", ()):
            print(note, file=sys.stderr)
        return EXIT_FAILED
    except Interrupted as signalled:
        _say(f"interrupted by {signalled}; children stopped")
        return EXIT_FAILED
    print(result_line(result), flush=True)
    return 0

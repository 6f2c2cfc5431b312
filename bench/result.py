"""The one JSON line `python -m bench` prints, and the arithmetic behind its fields.

Two lines exist: a run's (`BenchResult`) and, with `--firewall-cost`, the comparison of
gateway runs without and with a firewall file (`FirewallCostResult`). Pure code (no I/O but
reading the machine's description), so a unit test can check each line's shape on a fake
result without starting a process.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

RESULT_KEYS: tuple[str, ...] = (
    "machine",
    "pairs",
    "seconds",
    "mode",
    "firewall",
    "certified_posts_per_second",
    "send_latency_ms",
    "send_to_delivery_ms",
    "store_commits_per_second",
    "mean_commit_batch_size",
    "gateway_cpu_ms_per_post",
    "baseline_unary_echo_per_second",
    "ratio_to_baseline",
    "per_daemon",
    "servers",
    "cpu_ms_per_post",
    "router_path",
)
"""The top-level keys of the result line, in the order they are printed (the scale-out
fields last, after the ones scripts read from before they existed, and the cluster's
comparison after them)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Machine:
    """Where the numbers came from."""

    cpu_count: int | None
    platform: str
    python: str

    def to_json(self) -> dict[str, Any]:
        """`{cpu_count, platform, python}`."""
        return {"cpu_count": self.cpu_count, "platform": self.platform, "python": self.python}


def this_machine() -> Machine:
    """The machine this process runs on."""
    return Machine(
        cpu_count=os.cpu_count(),
        platform=platform.platform(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunMode:
    """The shape of the load: how many sends each sender keeps in flight, how many agents
    each conversation has, how many daemons host them, what joins them and where they
    store."""

    burst: int
    group_size: int
    """2 for direct pairs; 3..32 for group conversations (the sender included)."""
    daemons: int
    router: str
    """`inprocess`, `grpc` or `nats` (`bench.plan.RouterKind`)."""
    store: str
    """`sqlite` or `postgresql` (`bench.plan.StoreKind`)."""
    nats_nodes: int | None
    """JetStream nodes with the NATS Router (1, or 3 for an R3 stream); None otherwise."""
    hub: bool = False
    """`--hub`: one agent, with the lowest AgentId, sends in every conversation."""

    def to_json(self) -> dict[str, Any]:
        """`{burst, group_size, daemons, router, store, nats_nodes, hub}`."""
        return {
            "burst": self.burst,
            "group_size": self.group_size,
            "daemons": self.daemons,
            "router": self.router,
            "store": self.store,
            "nats_nodes": self.nats_nodes,
            "hub": self.hub,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Percentiles:
    """The median and the 99th percentile of a sample, in milliseconds; None when empty."""

    p50: float | None
    p99: float | None

    @classmethod
    def of_ns(cls, samples_ns: Sequence[int]) -> Percentiles:
        """Percentiles of durations measured in nanoseconds, reported in milliseconds."""
        ordered = sorted(samples_ns)
        return cls(
            p50=_ms(percentile(ordered, 50.0)),
            p99=_ms(percentile(ordered, 99.0)),
        )

    def to_json(self) -> dict[str, Any]:
        """`{p50, p99}`."""
        return {"p50": self.p50, "p99": self.p99}


def percentile(ordered: Sequence[float], rank: float) -> float | None:
    """The `rank`-th percentile (0..100) of an ascending sample, interpolating linearly
    between the two nearest values; None for an empty sample."""
    if not ordered:
        return None
    if not 0.0 <= rank <= 100.0:
        raise ValueError(f"percentile rank {rank} is outside 0..100")
    position = (len(ordered) - 1) * rank / 100.0
    low = math.floor(position)
    high = math.ceil(position)
    fraction = position - low
    return float(ordered[low]) + (float(ordered[high]) - float(ordered[low])) * fraction


def _ms(value_ns: float | None) -> float | None:
    return None if value_ns is None else round(value_ns / 1e6, 3)


def rate(count: float, seconds: float) -> float | None:
    """`count / seconds` rounded to 0.1, or None when no time passed."""
    return round(count / seconds, 1) if seconds > 0 else None


def per_post_ms(cpu_seconds: float | None, posts: int) -> float | None:
    """CPU milliseconds per post rounded to 0.01, or None when the CPU time is unknown or no
    post was certified (a cost per nothing is not a number)."""
    if cpu_seconds is None or posts <= 0:
        return None
    return round(1000.0 * cpu_seconds / posts, 2)


def ratio(ours: float | None, baseline: float | None) -> float | None:
    """`ours / baseline` rounded to 4 places, or None when either is unknown or the
    baseline is 0."""
    if ours is None or baseline is None or baseline <= 0:
        return None
    return round(ours / baseline, 4)


@dataclass(frozen=True, slots=True, kw_only=True)
class DaemonFigures:
    """One daemon's share of a run."""

    name: str
    posts: int
    """Posts certified for the senders it hosts."""
    posts_per_second: float | None
    """`posts` over the timed window (the same span as `certified_posts_per_second`)."""
    cpu_ms_per_post: float | None
    """Its CPU over the window and the drain per post of `posts`. With the round-robin
    layout it also delivers about as many posts as it sends, so this is the daemon side's
    whole cost of one post, comparable across daemon counts."""

    def to_json(self) -> dict[str, Any]:
        """`{name, posts, posts_per_second, cpu_ms_per_post}`."""
        return {
            "name": self.name,
            "posts": self.posts,
            "posts_per_second": self.posts_per_second,
            "cpu_ms_per_post": self.cpu_ms_per_post,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerFigures:
    """One NATS or PostgreSQL server's cost per post (all posts of the run)."""

    name: str
    cpu_ms_per_post: float | None

    def to_json(self) -> dict[str, Any]:
        """`{name, cpu_ms_per_post}`."""
        return {"name": self.name, "cpu_ms_per_post": self.cpu_ms_per_post}


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuPerPost:
    """What one certified post cost in CPU milliseconds, split by who spent it."""

    gateway: float | None
    """Every gateway process (daemons, Router, Registry): `gateway_cpu_ms_per_post`."""
    servers: float | None
    """The NATS and PostgreSQL servers together; None when the run started none, or any
    one is unreadable."""

    def to_json(self) -> dict[str, Any]:
        """`{gateway, servers}`."""
        return {"gateway": self.gateway, "servers": self.servers}


@dataclass(frozen=True, slots=True, kw_only=True)
class RouterPathFigures:
    """`--compare-router`: the Router-path run measured in the same invocation, right after
    the cluster's (N daemons, NATS, PostgreSQL): the figures the two are compared on."""

    mode: RunMode
    certified_posts_per_second: float | None
    send_latency_ms: Percentiles
    cpu_ms_per_post: CpuPerPost

    def to_json(self) -> dict[str, Any]:
        """`{mode, certified_posts_per_second, send_latency_ms, cpu_ms_per_post}`."""
        return {
            "mode": self.mode.to_json(),
            "certified_posts_per_second": self.certified_posts_per_second,
            "send_latency_ms": self.send_latency_ms.to_json(),
            "cpu_ms_per_post": self.cpu_ms_per_post.to_json(),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchResult:
    """What one `python -m bench` run measured. None means "not measured", never 0."""

    machine: Machine
    pairs: int
    seconds: float
    mode: RunMode
    firewall: str | None
    """The name of the `--firewall-config` file every daemon ran with; None: no firewall."""
    certified_posts_per_second: float | None
    send_latency_ms: Percentiles
    send_to_delivery_ms: Percentiles
    store_commits_per_second: float | None
    mean_commit_batch_size: float | None
    gateway_cpu_ms_per_post: float | None
    baseline_unary_echo_per_second: float | None
    ratio_to_baseline: float | None
    per_daemon: tuple[DaemonFigures, ...]
    """Every daemon, in daemon index order."""
    servers: tuple[ServerFigures, ...]
    """The servers the run started (none for SQLite with the in-process or gRPC Router)."""
    cpu_ms_per_post: CpuPerPost
    router_path: RouterPathFigures | None = None
    """`--compare-router`'s run; None without it."""

    def to_json(self) -> dict[str, Any]:
        """The result object, keys in `RESULT_KEYS` order."""
        return {
            "machine": self.machine.to_json(),
            "pairs": self.pairs,
            "seconds": self.seconds,
            "mode": self.mode.to_json(),
            "firewall": self.firewall,
            "certified_posts_per_second": self.certified_posts_per_second,
            "send_latency_ms": self.send_latency_ms.to_json(),
            "send_to_delivery_ms": self.send_to_delivery_ms.to_json(),
            "store_commits_per_second": self.store_commits_per_second,
            "mean_commit_batch_size": self.mean_commit_batch_size,
            "gateway_cpu_ms_per_post": self.gateway_cpu_ms_per_post,
            "baseline_unary_echo_per_second": self.baseline_unary_echo_per_second,
            "ratio_to_baseline": self.ratio_to_baseline,
            "per_daemon": [daemon.to_json() for daemon in self.per_daemon],
            "servers": [server.to_json() for server in self.servers],
            "cpu_ms_per_post": self.cpu_ms_per_post.to_json(),
            "router_path": None if self.router_path is None else self.router_path.to_json(),
        }


def median(values: Sequence[float | None]) -> float | None:
    """The median of `values` (the mean of the middle two for an even count), or None when
    there are none or any is None: a median over the rounds that happened to be measured
    would pass for all of them."""
    if not values or any(value is None for value in values):
        return None
    return statistics.median(value for value in values if value is not None)


def change_pct(after: float | None, before: float | None) -> float | None:
    """`(after / before - 1) x 100` rounded to 0.1, or None when either is unknown or
    `before` is not above 0."""
    if after is None or before is None or before <= 0:
        return None
    return round((after / before - 1.0) * 100.0, 1)


COST_KEYS: tuple[str, ...] = (
    "machine",
    "pairs",
    "seconds",
    "mode",
    "firewall",
    "rounds",
    "without_firewall",
    "with_firewall",
    "cpu_overhead_pct",
    "throughput_change_pct",
)
"""The top-level keys of the `--firewall-cost` line, in the order they are printed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundValues:
    """What one gateway run of a comparison measured."""

    certified_posts_per_second: float | None
    gateway_cpu_ms_per_post: float | None
    failed_sends: int
    """Sends that did not return success (a firewall refusal among them)."""
    undelivered: int
    """Deliveries of certified posts not seen within the drain bound."""

    def to_json(self) -> dict[str, Any]:
        """`{certified_posts_per_second, gateway_cpu_ms_per_post, failed_sends, undelivered}`."""
        return {
            "certified_posts_per_second": self.certified_posts_per_second,
            "gateway_cpu_ms_per_post": self.gateway_cpu_ms_per_post,
            "failed_sends": self.failed_sends,
            "undelivered": self.undelivered,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class SideSummary:
    """One side of a comparison (without, or with, the firewall): its rounds in run order
    and their medians."""

    rounds: tuple[RoundValues, ...]

    @property
    def certified_posts_per_second(self) -> float | None:
        """The median over the rounds; None when any round lacks it."""
        return median([values.certified_posts_per_second for values in self.rounds])

    @property
    def gateway_cpu_ms_per_post(self) -> float | None:
        """The median over the rounds; None when any round lacks it."""
        return median([values.gateway_cpu_ms_per_post for values in self.rounds])

    def to_json(self) -> dict[str, Any]:
        """`{certified_posts_per_second, gateway_cpu_ms_per_post, per_round: [...]}`, the
        first two the medians."""
        return {
            "certified_posts_per_second": _rounded(self.certified_posts_per_second, 1),
            "gateway_cpu_ms_per_post": _rounded(self.gateway_cpu_ms_per_post, 2),
            "per_round": [values.to_json() for values in self.rounds],
        }


def _rounded(value: float | None, places: int) -> float | None:
    # A median of two rounded values is exact to one more place; print it as its inputs.
    return None if value is None else round(value, places)


@dataclass(frozen=True, slots=True, kw_only=True)
class FirewallCostResult:
    """What `--firewall-cost` measured: gateway runs alternately without and with the file."""

    machine: Machine
    pairs: int
    seconds: float
    mode: RunMode
    firewall: str
    """The name of the firewall file the "with" rounds ran."""
    without_firewall: SideSummary
    with_firewall: SideSummary

    @property
    def rounds(self) -> int:
        """Rounds per side."""
        return len(self.with_firewall.rounds)

    @property
    def cpu_overhead_pct(self) -> float | None:
        """How much more gateway CPU a post costs with the firewall, in percent of the cost
        without (medians); negative when it measured cheaper."""
        return change_pct(
            self.with_firewall.gateway_cpu_ms_per_post,
            self.without_firewall.gateway_cpu_ms_per_post,
        )

    @property
    def throughput_change_pct(self) -> float | None:
        """How certified posts per second changed with the firewall, in percent (medians);
        negative when fewer."""
        return change_pct(
            self.with_firewall.certified_posts_per_second,
            self.without_firewall.certified_posts_per_second,
        )

    def to_json(self) -> dict[str, Any]:
        """The comparison object, keys in `COST_KEYS` order."""
        return {
            "machine": self.machine.to_json(),
            "pairs": self.pairs,
            "seconds": self.seconds,
            "mode": self.mode.to_json(),
            "firewall": self.firewall,
            "rounds": self.rounds,
            "without_firewall": self.without_firewall.to_json(),
            "with_firewall": self.with_firewall.to_json(),
            "cpu_overhead_pct": self.cpu_overhead_pct,
            "throughput_change_pct": self.throughput_change_pct,
        }


def result_line(result: BenchResult | FirewallCostResult) -> str:
    """The result as one line of JSON (no trailing newline)."""
    return json.dumps(result.to_json(), separators=(", ", ": "), allow_nan=False)

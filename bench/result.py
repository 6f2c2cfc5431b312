"""The one JSON line `python -m bench` prints, and the arithmetic behind its fields.

Pure code (no I/O but reading the machine's description), so a unit test can check the
line's shape on a fake result without starting a process.
"""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

RESULT_KEYS: tuple[str, ...] = (
    "machine",
    "pairs",
    "seconds",
    "mode",
    "certified_posts_per_second",
    "send_latency_ms",
    "send_to_delivery_ms",
    "store_commits_per_second",
    "mean_commit_batch_size",
    "gateway_cpu_ms_per_post",
    "baseline_unary_echo_per_second",
    "ratio_to_baseline",
)
"""The top-level keys of the result line, in the order they are printed."""


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
    each conversation has, how many daemons host them."""

    burst: int
    group_size: int
    """2 for direct pairs; 3..32 for group conversations (the sender included)."""
    daemons: int

    def to_json(self) -> dict[str, Any]:
        """`{burst, group_size, daemons}`."""
        return {"burst": self.burst, "group_size": self.group_size, "daemons": self.daemons}


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
class BenchResult:
    """What one `python -m bench` run measured. None means "not measured", never 0."""

    machine: Machine
    pairs: int
    seconds: float
    mode: RunMode
    certified_posts_per_second: float | None
    send_latency_ms: Percentiles
    send_to_delivery_ms: Percentiles
    store_commits_per_second: float | None
    mean_commit_batch_size: float | None
    gateway_cpu_ms_per_post: float | None
    baseline_unary_echo_per_second: float | None
    ratio_to_baseline: float | None

    def to_json(self) -> dict[str, Any]:
        """The result object, keys in `RESULT_KEYS` order."""
        return {
            "machine": self.machine.to_json(),
            "pairs": self.pairs,
            "seconds": self.seconds,
            "mode": self.mode.to_json(),
            "certified_posts_per_second": self.certified_posts_per_second,
            "send_latency_ms": self.send_latency_ms.to_json(),
            "send_to_delivery_ms": self.send_to_delivery_ms.to_json(),
            "store_commits_per_second": self.store_commits_per_second,
            "mean_commit_batch_size": self.mean_commit_batch_size,
            "gateway_cpu_ms_per_post": self.gateway_cpu_ms_per_post,
            "baseline_unary_echo_per_second": self.baseline_unary_echo_per_second,
            "ratio_to_baseline": self.ratio_to_baseline,
        }


def result_line(result: BenchResult) -> str:
    """The result as one line of JSON (no trailing newline)."""
    return json.dumps(result.to_json(), separators=(", ", ": "), allow_nan=False)

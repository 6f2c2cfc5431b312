"""Reading the gateway's group-commit counters from its Prometheus endpoint.

`harness_store_commit_batch_size` (operations.md §2.3) is a histogram of writes per group
commit: its `_count` is the number of commits, its `_sum` the number of writes. A gateway that
does not serve `/metrics` yet, or serves it without that histogram, gives None: the bench
prints null rather than a made-up number.
"""

from __future__ import annotations

import asyncio
import math
import socket
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

SCRAPE_TIMEOUT: Final = 3.0
"""Seconds one `GET /metrics` may take."""
BATCH_METRIC: Final = "harness_store_commit_batch_size"
"""The histogram of writes per group commit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitCounters:
    """Commits and the writes they carried, summed over every `backend` series."""

    commits: float
    writes: float


def sum_counters(scrapes: Sequence[CommitCounters | None]) -> CommitCounters | None:
    """The counters of several daemons added up; None when any daemon gave none, since a sum
    over some of them would pass for the whole deployment's figure."""
    if not scrapes or any(scrape is None for scrape in scrapes):
        return None
    present = [scrape for scrape in scrapes if scrape is not None]
    return CommitCounters(
        commits=sum(scrape.commits for scrape in present),
        writes=sum(scrape.writes for scrape in present),
    )


def commit_rates(
    before: CommitCounters | None, after: CommitCounters | None, seconds: float
) -> tuple[float | None, float | None]:
    """`(commits per second, writes per commit)` between two scrapes `seconds` apart: the
    first None when either scrape is missing or no time passed, the second also when no
    commit happened."""
    if before is None or after is None:
        return None, None
    commits = after.commits - before.commits
    writes = after.writes - before.writes
    per_second = round(commits / seconds, 1) if seconds > 0 else None
    mean_batch = round(writes / commits, 2) if commits > 0 else None
    return per_second, mean_batch


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the gateway binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def parse_commit_counters(text: str) -> CommitCounters | None:
    """The batch histogram's `_count` and `_sum` from Prometheus text, summed over label
    sets; None when either series is absent."""
    commits: float | None = None
    writes: float | None = None
    for line in text.splitlines():
        sample = _sample(line)
        if sample is None:
            continue
        name, value = sample
        if name == f"{BATCH_METRIC}_count":
            commits = (commits or 0.0) + value
        elif name == f"{BATCH_METRIC}_sum":
            writes = (writes or 0.0) + value
    if commits is None or writes is None:
        return None
    return CommitCounters(commits=commits, writes=writes)


def _sample(line: str) -> tuple[str, float] | None:
    """`(name, value)` of one exposition line (`name{labels} value [ts]`), None for comments,
    blanks and lines that do not parse."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    brace = line.find("{")
    space = line.find(" ")
    if brace != -1 and (space == -1 or brace < space):
        # Label values may hold spaces; the value follows the last closing brace.
        name, rest = line[:brace], line[line.rfind("}") + 1 :]
    else:
        name, _, rest = line.partition(" ")
    fields = rest.split()
    if not fields:
        return None
    try:
        value = float(fields[0])
    except ValueError:
        return None
    return (name, value) if math.isfinite(value) else None


def _fetch(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT) as response:
            body: bytes = response.read()
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return body.decode("utf-8", errors="replace")


async def scrape_commit_counters(address: str) -> CommitCounters | None:
    """The commit counters at `http://ADDRESS/metrics`, or None when the endpoint is not
    reachable or lacks the histogram."""
    text = await asyncio.to_thread(_fetch, f"http://{address}/metrics")
    return None if text is None else parse_commit_counters(text)

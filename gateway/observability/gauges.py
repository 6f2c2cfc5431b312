"""The gauges that are read, not counted: backlog, streams, pending intents, open collectives;
and the event loop's lag.

Counters move when something happens; these gauges describe a state, so a `GaugeLoop` reads
a `GaugeReading` from its `GaugeSource` every `GAUGE_INTERVAL` seconds and publishes it. A
reading is keyed by the closed label enums (`Listener`,
`PostKind`, `CollectiveOp`), never by free strings, and always holds every label value, so a
value that dropped to zero is published as zero rather than left at its last level.

`LoopLagMonitor` measures how late the event loop wakes from a `LOOP_LAG_INTERVAL` sleep
(`harness_cluster_loop_lag_seconds`): a cluster replica's lease is kept by beats on that loop,
so lag is what puts the lease at risk (cluster.md §3.1).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from harness_contract.kinds import PostKind
from harness_contract.values import CollectiveOp

from gateway.observability.metrics import Listener, Metrics

logger = logging.getLogger(__name__)

GAUGE_INTERVAL: Final = 5.0
"""Seconds between refreshes of the gauges read from the store and the hosted agents.

Often enough for a 15-second scrape to see a fresh value; rarely enough that summing the
store's unread rows costs nothing noticeable."""


LOOP_LAG_INTERVAL: Final = 0.5
"""Seconds the lag monitor sleeps between two measurements.

A third of the 1.5 s beat interval, so a stall that delays a beat shows in the histogram; two
wake-ups a second cost nothing measurable."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GaugeReading:
    """One reading of every read gauge; each mapping holds every value of its label."""

    unacknowledged: Mapping[Listener, int]
    """`harness_deliveries_unacknowledged`: unread inbox items, by whether a stream is open."""
    oldest_unacked_age: Mapping[Listener, float]
    """`harness_deliveries_oldest_unacked_age_seconds`: the oldest unread item's age."""
    agents_hosted: int
    """Agents this daemon hosts."""
    conversations_set_aside: int
    """Conversations this daemon stopped serving (a stored row failed a check)."""
    streams_active: int
    """Open `Messages` streams."""
    streams_window_full: int
    """Open streams whose window of unacknowledged deliveries is full."""
    post_intents_pending: Mapping[PostKind, int]
    """Bound post intents not certified yet, by conversation kind."""
    collectives_open: Mapping[CollectiveOp, int]
    """Collective operations waiting for answers, by op."""


class GaugeSource(Protocol):
    """What a `GaugeLoop` reads from (the gateway's management queries)."""

    async def read_gauges(self) -> GaugeReading:
        """The current value of every read gauge."""
        ...


def publish(metrics: Metrics, reading: GaugeReading) -> None:
    """Set every read gauge to `reading`."""
    for listener in Listener:
        metrics.set_unacknowledged(listener, reading.unacknowledged[listener])
        metrics.set_oldest_unacked_age(listener, reading.oldest_unacked_age[listener])
    metrics.set_agents_hosted(reading.agents_hosted)
    metrics.set_conversations_set_aside(reading.conversations_set_aside)
    metrics.set_streams_active(reading.streams_active)
    metrics.set_streams_window_full(reading.streams_window_full)
    for kind in PostKind:
        metrics.set_post_intents_pending(kind, reading.post_intents_pending[kind])
    for op in CollectiveOp:
        metrics.set_collectives_open(op, reading.collectives_open[op])


class GaugeLoop:
    """Refreshes the read gauges until closed; it owns its one task."""

    def __init__(
        self, source: GaugeSource, metrics: Metrics, *, interval: float = GAUGE_INTERVAL
    ) -> None:
        self._source = source
        self._metrics = metrics
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start refreshing (the first refresh runs at once); idempotent."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._refresh_loop(), name="gauges")

    async def refresh(self) -> None:
        """Read and publish once."""
        publish(self._metrics, await self._source.read_gauges())

    async def close(self) -> None:
        """Cancel the loop and wait for it; idempotent, and safe before `start`."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _refresh_loop(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:
                # A failed read leaves the gauges at their last values; the next one retries.
                logger.exception("gauge refresh failed")
            await asyncio.sleep(self._interval)


class LoopLagMonitor:
    """Observes how late each `interval` sleep wakes, on the loop it was started on, until
    closed; it owns its one task."""

    def __init__(self, metrics: Metrics, *, interval: float = LOOP_LAG_INTERVAL) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval}")
        self._metrics = metrics
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start measuring; idempotent."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._measure(), name="loop lag")

    async def close(self) -> None:
        """Cancel the task and wait for it; idempotent, and safe before `start`."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _measure(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + self._interval
            await asyncio.sleep(self._interval)
            # A wake-up is never early on the loop's own clock; clamp rounding to 0.
            self._metrics.observe_loop_lag(max(0.0, loop.time() - asked))

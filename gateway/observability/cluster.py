"""What a cluster replica reports to its metrics (cluster.md §10, operations.md §2.3).

The cluster's components never touch `Metrics`: the composition root hands them the hooks of
one `ClusterMetrics` and starts one `ClusterGaugeLoop`:

- `on_forward(method, outcome)`: the `ForwardObserver` of `gateway/rpc/forward.py` calls it
  for every forwarded call (`method` the full gRPC path or its short name). It is total: it
  never raises, since it runs inside the forwarding interceptor after the caller was
  answered; a method outside the agent API counts as `unknown`, an outcome outside the
  vocabulary as `other` with one warning.
- `on_claimed(partitions)`, `on_released(count)`, `on_lost(reason)`: the membership's claim
  callback (its `{partition: epoch}` mapping or a count), a hand-over's release, and the
  lease-loss callback.
- `ClusterGaugeLoop` reads `MembershipStatus` every `CLUSTER_GAUGE_INTERVAL` and sets the
  partition gauges; it also turns the `HintSender`'s running count of dropped hints into
  increments of `harness_cluster_hints_dropped_total`.

`harness_cluster_partition_unowned_seconds` is measured here, from the views: the status
carries how many partitions have no live holder, not since when, so the gauge is the time
since this replica's views first showed an unowned partition without a break. While
partitions go unowned in overlapping waves it counts from the first wave (it may
overstate the longest single gap, never understate it), and it starts when a view first
shows the holder dead, up to one claim interval after the database could judge it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Final

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.cluster.membership import LeaseLoss, MembershipStatus
from gateway.observability.metrics import (
    FORWARD_OUTCOMES,
    ForwardMethod,
    ForwardOutcome,
    Metrics,
)

logger = logging.getLogger(__name__)

CLUSTER_GAUGE_INTERVAL: Final = 2.0
"""Seconds between refreshes of the partition gauges from `MembershipStatus`.

The status is a read of memory (the membership's last view, read every second), so this is
cheap; 2 s keeps `harness_cluster_partition_unowned_seconds` well inside the 30 s alert and
fresh for a 15-second scrape."""

_METHODS: Final[Mapping[str, ForwardMethod]] = {
    method.value: method for method in ForwardMethod if method is not ForwardMethod.UNKNOWN
}


def forward_method(method: str) -> ForwardMethod:
    """The `method` label of a forwarded call: its short name (`Send`) from a full gRPC path
    (`/harness.v1.HarnessEndpointService/Send`) or the name itself; `unknown` otherwise."""
    return _METHODS.get(method.rpartition("/")[2], ForwardMethod.UNKNOWN)


class ClusterMetrics:
    """The hooks a cluster replica's components call; every hook is total (never raises)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._warned: set[str] = set()

    def on_forward(self, method: str, outcome: str) -> None:
        """A forwarded call ended: `ok`, `not-owner`, `unreachable`, `cut` or the gRPC status
        code name the home answered (`ForwardObserver.on_forward`)."""
        label = outcome if outcome in FORWARD_OUTCOMES else ForwardOutcome.OTHER
        if label is ForwardOutcome.OTHER and outcome not in self._warned:
            self._warned.add(outcome)
            logger.warning("harness_cluster_forwards_total: outcome %r counted as other", outcome)
        self._metrics.count_forward(forward_method(method), label)

    def on_claimed(self, partitions: Mapping[int, int] | int) -> None:
        """Partitions were claimed: the membership's `{partition: epoch}` or a count."""
        count = partitions if isinstance(partitions, int) else len(partitions)
        if count > 0:
            self._metrics.count_claims(count)

    def on_released(self, count: int = 1) -> None:
        """`count` partitions were released to another replica (a hand-over)."""
        if count > 0:
            self._metrics.count_handoffs(count)

    def on_lost(self, reason: LeaseLoss) -> None:
        """The lease ended for `reason`."""
        self._metrics.count_lease_lost(reason)


class ClusterGaugeLoop:
    """Refreshes the partition gauges and the dropped-hint count until closed; it owns its
    one task.

    `status` answers the membership's `status()`, or None while there is none (outside a
    cluster, or before the membership started): the partition gauges then read 0.
    `hints_dropped` answers the hint sender's running count of dropped entries."""

    def __init__(
        self,
        metrics: Metrics,
        status: Callable[[], MembershipStatus | None],
        *,
        hints_dropped: Callable[[], int] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        interval: float = CLUSTER_GAUGE_INTERVAL,
    ) -> None:
        self._metrics = metrics
        self._status = status
        self._hints_dropped = hints_dropped
        self._clock = clock
        self._interval = interval
        self._unowned_since: float | None = None
        self._dropped_seen = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start refreshing (the first refresh runs at once); idempotent."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._refresh_loop(), name="cluster gauges"
            )

    def refresh(self) -> None:
        """Read the status and the dropped-hint count once and publish them."""
        status = self._status()
        now = self._clock.monotonic()
        if status is None:
            owned = unowned = 0
        else:
            owned, unowned = status.owned, status.unowned
        if unowned == 0:
            self._unowned_since = None
        elif self._unowned_since is None:
            self._unowned_since = now
        self._metrics.set_partitions_owned(owned)
        self._metrics.set_partitions_unowned(unowned)
        since = self._unowned_since
        self._metrics.set_partition_unowned_seconds(0.0 if since is None else now - since)
        if self._hints_dropped is not None:
            dropped = self._hints_dropped()
            if dropped > self._dropped_seen:
                self._metrics.count_hints_dropped(dropped - self._dropped_seen)
            # A new sender starts again at 0; the counter never goes back.
            self._dropped_seen = dropped

    async def close(self) -> None:
        """Cancel the loop and wait for it; idempotent, and safe before `start`."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _refresh_loop(self) -> None:
        while True:
            try:
                self.refresh()
            except Exception:
                # The gauges keep their last values; the next refresh retries.
                logger.exception("cluster gauge refresh failed")
            await asyncio.sleep(self._interval)


__all__ = [
    "CLUSTER_GAUGE_INTERVAL",
    "ClusterGaugeLoop",
    "ClusterMetrics",
    "forward_method",
]

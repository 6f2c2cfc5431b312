"""The read gauges: a reading is published whole, and the loop owns and ends its task."""

from __future__ import annotations

import asyncio

from harness_contract.kinds import PostKind
from harness_contract.values import CollectiveOp

from gateway.observability.gauges import GaugeLoop, GaugeReading, publish
from gateway.observability.metrics import (
    Listener,
    Metrics,
    Mode,
)
from tests.support import eventually


def reading(*, backlog: int = 0, hosted: int = 0) -> GaugeReading:
    return GaugeReading(
        unacknowledged={Listener.ATTACHED: backlog, Listener.DETACHED: 2 * backlog},
        oldest_unacked_age={Listener.ATTACHED: 1.5, Listener.DETACHED: 0.0},
        agents_hosted=hosted,
        conversations_set_aside=1,
        streams_active=hosted,
        streams_window_full=0,
        post_intents_pending={PostKind.DIRECT: 3, PostKind.GROUP: 4},
        collectives_open={CollectiveOp.GATHER: 5, CollectiveOp.ALL_GATHER: 6},
    )


class Source:
    """A `GaugeSource` that answers the readings a test queues, then the last one again."""

    def __init__(self, *readings: GaugeReading) -> None:
        self.readings = list(readings)
        self.reads = 0

    async def read_gauges(self) -> GaugeReading:
        self.reads += 1
        if len(self.readings) > 1:
            return self.readings.pop(0)
        return self.readings[0]


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_publishing_a_reading_sets_every_gauge_under_its_closed_label():
    metrics = Metrics("1.2.3", Mode.EMBEDDED)
    publish(metrics, reading(backlog=7, hosted=2))
    assert sample(metrics, "harness_deliveries_unacknowledged", listener="attached") == 7
    assert sample(metrics, "harness_deliveries_unacknowledged", listener="detached") == 14
    assert (
        sample(metrics, "harness_deliveries_oldest_unacked_age_seconds", listener="attached") == 1.5
    )
    assert sample(metrics, "harness_agents_hosted") == 2
    assert sample(metrics, "harness_post_intents_pending", kind="group") == 4
    assert sample(metrics, "harness_collectives_open", op="all_gather") == 6


async def test_the_loop_refreshes_at_once_and_again_after_its_interval():
    metrics = Metrics("1.2.3", Mode.EMBEDDED)
    source = Source(reading(backlog=1), reading(backlog=9))
    loop = GaugeLoop(source, metrics, interval=0.01)
    loop.start()
    try:

        async def attached() -> float | None:
            return sample(metrics, "harness_deliveries_unacknowledged", listener="attached")

        await eventually(attached, lambda value: value == 9)
    finally:
        await loop.close()
    assert source.reads >= 2


async def test_a_failed_read_is_logged_and_the_next_refresh_still_runs(caplog):
    metrics = Metrics("1.2.3", Mode.EMBEDDED)
    good = reading(hosted=3)
    calls = 0

    class Flaky:
        async def read_gauges(self) -> GaugeReading:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("store closed")
            return good

    loop = GaugeLoop(Flaky(), metrics, interval=0.01)
    loop.start()
    try:

        async def hosted() -> float | None:
            return sample(metrics, "harness_agents_hosted")

        await eventually(hosted, lambda value: value == 3)
    finally:
        await loop.close()
    assert "gauge refresh failed" in caplog.text


async def test_closing_the_loop_ends_its_task_and_is_safe_before_start_and_twice():
    metrics = Metrics("1.2.3", Mode.EMBEDDED)
    never_started = GaugeLoop(Source(reading()), metrics)
    await never_started.close()
    loop = GaugeLoop(Source(reading()), metrics)
    loop.start()
    await loop.close()
    await loop.close()
    assert not [task for task in asyncio.all_tasks() if task.get_name() == "gauges"]

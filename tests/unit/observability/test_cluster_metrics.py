"""A cluster replica's metrics hooks, its partition gauges and the loop-lag monitor."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.clock import FakeClock
from gateway.cluster.membership import (
    LeaseLoss,
    MembershipState,
    MembershipStatus,
    ReplicaStatus,
)
from gateway.observability.cluster import (
    ClusterGaugeLoop,
    ClusterMetrics,
    forward_method,
)
from gateway.observability.gauges import LoopLagMonitor
from gateway.observability.metrics import ForwardMethod, Metrics, Mode
from tests.support import eventually


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def status(*, owned: int = 0, unowned: int = 0) -> MembershipStatus:
    return MembershipStatus(
        replica_id="r1",
        incarnation=7,
        state=MembershipState.SERVING,
        lease_remaining=4.2,
        claiming=True,
        claim_passes=3,
        partitions=16,
        owned=owned,
        offered=0,
        unowned=unowned,
        replicas=(
            ReplicaStatus(
                replica_id="r1",
                incarnation=7,
                address="10.0.0.1:7770",
                serving=True,
                fenced=False,
                live=True,
                beat_age=0.4,
                partitions=owned,
            ),
        ),
    )


@pytest.fixture
def metrics() -> Metrics:
    return Metrics("1.2.3", Mode.CLUSTER)


def test_every_cluster_series_exists_at_zero_before_anything_happened(metrics: Metrics):
    assert sample(metrics, "harness_cluster_partitions_owned") == 0
    assert sample(metrics, "harness_cluster_partition_unowned_seconds") == 0
    assert sample(metrics, "harness_cluster_claims_total") == 0
    assert sample(metrics, "harness_cluster_leases_lost_total", reason="expired") == 0
    assert sample(metrics, "harness_cluster_forwards_total", method="Send", outcome="cut") == 0
    assert (
        sample(metrics, "harness_cluster_forwards_total", method="Messages", outcome="UNAVAILABLE")
        == 0
    )


@pytest.mark.parametrize(
    ("method", "label"),
    [
        ("/harness.v1.HarnessEndpointService/Send", ForwardMethod.SEND),
        ("/harness.v1.HarnessEndpointService/Messages", ForwardMethod.MESSAGES),
        ("ParseMessageText", ForwardMethod.PARSE_MESSAGE_TEXT),
        ("/harness.v1.ManagementService/RegisterAgent", ForwardMethod.UNKNOWN),
        ("", ForwardMethod.UNKNOWN),
    ],
)
def test_a_forwarded_method_is_labelled_by_its_short_name_or_unknown(
    method: str, label: ForwardMethod
):
    assert forward_method(method) is label


def test_forward_outcomes_count_under_their_method_and_outcome(metrics: Metrics):
    hooks = ClusterMetrics(metrics)
    hooks.on_forward("/harness.v1.HarnessEndpointService/Send", "ok")
    hooks.on_forward("/harness.v1.HarnessEndpointService/Send", "not-owner")
    hooks.on_forward("/harness.v1.HarnessEndpointService/Acknowledge", "unreachable")
    hooks.on_forward("/harness.v1.HarnessEndpointService/Messages", "cut")
    hooks.on_forward("/harness.v1.HarnessEndpointService/ReadSend", "PERMISSION_DENIED")
    hooks.on_forward("/x.Y/Z", "ok")
    forwards = "harness_cluster_forwards_total"
    assert sample(metrics, forwards, method="Send", outcome="ok") == 1
    assert sample(metrics, forwards, method="Send", outcome="not-owner") == 1
    assert sample(metrics, forwards, method="Acknowledge", outcome="unreachable") == 1
    assert sample(metrics, forwards, method="Messages", outcome="cut") == 1
    assert sample(metrics, forwards, method="ReadSend", outcome="PERMISSION_DENIED") == 1
    assert sample(metrics, forwards, method="unknown", outcome="ok") == 1


def test_an_outcome_outside_the_vocabulary_counts_as_other_with_one_warning(
    metrics: Metrics, caplog: pytest.LogCaptureFixture
):
    hooks = ClusterMetrics(metrics)
    with caplog.at_level(logging.WARNING):
        hooks.on_forward("Send", "teapot")
        hooks.on_forward("Send", "teapot")
    assert sample(metrics, "harness_cluster_forwards_total", method="Send", outcome="other") == 2
    assert caplog.text.count("'teapot' counted as other") == 1


def test_claims_handoffs_and_lost_leases_are_counted(metrics: Metrics):
    hooks = ClusterMetrics(metrics)
    hooks.on_claimed({3: 1, 9: 4})
    hooks.on_claimed(5)
    hooks.on_claimed({})
    hooks.on_released(2)
    hooks.on_lost(LeaseLoss.TAKEN)
    assert sample(metrics, "harness_cluster_claims_total") == 7
    assert sample(metrics, "harness_cluster_handoffs_total") == 2
    assert sample(metrics, "harness_cluster_leases_lost_total", reason="taken") == 1
    assert sample(metrics, "harness_cluster_leases_lost_total", reason="expired") == 0


def test_the_gauges_follow_the_status_and_the_unowned_time_runs_from_the_first_view(
    metrics: Metrics,
):
    clock = FakeClock()
    current: list[MembershipStatus | None] = [status(owned=5)]
    loop = ClusterGaugeLoop(metrics, lambda: current[0], clock=clock)
    loop.refresh()
    assert sample(metrics, "harness_cluster_partitions_owned") == 5
    assert sample(metrics, "harness_cluster_partition_unowned_seconds") == 0

    current[0] = status(owned=5, unowned=3)
    clock.advance(10)
    loop.refresh()
    assert sample(metrics, "harness_cluster_partitions_unowned") == 3
    assert sample(metrics, "harness_cluster_partition_unowned_seconds") == 0
    clock.advance(31)
    current[0] = status(owned=6, unowned=1)
    loop.refresh()
    assert sample(metrics, "harness_cluster_partition_unowned_seconds") == 31

    current[0] = status(owned=8)
    clock.advance(2)
    loop.refresh()
    assert sample(metrics, "harness_cluster_partition_unowned_seconds") == 0
    assert sample(metrics, "harness_cluster_partitions_unowned") == 0


def test_without_a_membership_the_partition_gauges_read_zero(metrics: Metrics):
    current: list[MembershipStatus | None] = [status(owned=4, unowned=2)]
    clock = FakeClock()
    loop = ClusterGaugeLoop(metrics, lambda: current[0], clock=clock)
    loop.refresh()
    clock.advance(5)
    current[0] = None
    loop.refresh()
    assert sample(metrics, "harness_cluster_partitions_owned") == 0
    assert sample(metrics, "harness_cluster_partitions_unowned") == 0
    assert sample(metrics, "harness_cluster_partition_unowned_seconds") == 0


def test_dropped_hints_are_counted_once_each_and_a_new_sender_starts_again(metrics: Metrics):
    dropped = [0]
    loop = ClusterGaugeLoop(metrics, lambda: None, hints_dropped=lambda: dropped[0])
    loop.refresh()
    dropped[0] = 4
    loop.refresh()
    loop.refresh()
    assert sample(metrics, "harness_cluster_hints_dropped_total") == 4
    dropped[0] = 1  # a replaced sender counts from 0 again
    loop.refresh()
    dropped[0] = 3
    loop.refresh()
    assert sample(metrics, "harness_cluster_hints_dropped_total") == 6


async def test_the_gauge_loop_refreshes_on_its_own_and_a_failed_read_is_logged(
    metrics: Metrics, caplog: pytest.LogCaptureFixture
):
    calls = 0

    def flaky() -> MembershipStatus:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("no view yet")
        return status(owned=9)

    loop = ClusterGaugeLoop(metrics, flaky, interval=0.01)
    loop.start()
    try:

        async def owned() -> float | None:
            return sample(metrics, "harness_cluster_partitions_owned")

        await eventually(owned, lambda value: value == 9)
    finally:
        await loop.close()
        await loop.close()
    assert "cluster gauge refresh failed" in caplog.text
    assert not [task for task in asyncio.all_tasks() if task.get_name() == "cluster gauges"]


async def test_the_loop_lag_monitor_observes_each_wake_up_until_closed(metrics: Metrics):
    monitor = LoopLagMonitor(metrics, interval=0.01)
    await monitor.close()  # safe before start
    monitor.start()
    try:

        async def wake_ups() -> float | None:
            return sample(metrics, "harness_cluster_loop_lag_seconds_count")

        await eventually(wake_ups, lambda value: value is not None and value >= 2)
    finally:
        await monitor.close()
        await monitor.close()
    assert not [task for task in asyncio.all_tasks() if task.get_name() == "loop lag"]
    lag = sample(metrics, "harness_cluster_loop_lag_seconds_sum")
    assert lag is not None
    assert lag >= 0


def test_a_lag_interval_that_is_not_positive_is_refused(metrics: Metrics):
    with pytest.raises(ValueError, match="interval"):
        LoopLagMonitor(metrics, interval=0)

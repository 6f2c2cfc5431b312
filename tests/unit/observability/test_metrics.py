"""The metrics registry against operations.md §2: names, closed labels, zeros, budget."""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable, Iterable

import pytest
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from harness_contract._gen.harness.v1 import endpoint_pb2, management_pb2, registry_pb2, router_pb2
from harness_contract.errors import (
    CollectiveErrorKind,
    DeliveryAcknowledgeErrorReason,
    FirewallRefusal,
    SendErrorReason,
    StatusCode,
)
from harness_contract.kinds import (
    CollectiveEnd,
    ConsumedKind,
    DeliveryItem,
    MemberOutcomeKind,
    PostKind,
    PostOp,
    SendOp,
)
from harness_contract.values import CollectiveOp
from prometheus_client.parser import text_string_to_metric_families

from gateway.cluster.membership import LeaseLoss
from gateway.endpoint.api import AuthFailure
from gateway.endpoint.idempotency import KeyResolution
from gateway.endpoint.inbox import AckResult, StreamEndReason, StreamOpen
from gateway.engine.network import RouterAttachment, RouterEvent
from gateway.observability.metrics import (
    BATCH_BUCKETS,
    CERT_BUCKETS,
    DAEMON_GRPC_SERVICES,
    FIREWALL_BUCKETS,
    FORWARD_OUTCOMES,
    GRPC_BUCKETS,
    GRPC_CODES,
    GRPC_PRECREATED_CODES,
    GRPC_SERVICE_METHODS,
    LOOP_LAG_BUCKETS,
    SERIES_BUDGET,
    STORE_BUCKETS,
    UNKNOWN_LABEL,
    FirewallDirection,
    FirewallKind,
    FirewallReload,
    FirewallVerdict,
    ForwardMethod,
    GrpcType,
    Listener,
    Metrics,
    Mode,
    RejectedRequestReason,
    SendOutcome,
    StoreBackend,
    StoreMetrics,
)
from gateway.store.observer import StoreObserver

Closed = type[enum.StrEnum]

ForwardOutcomeLabel = enum.StrEnum(  # type: ignore[misc]
    "ForwardOutcomeLabel",
    [(value.replace("-", "_").upper(), value) for value in FORWARD_OUTCOMES],
)
"""`outcome` of `harness_cluster_forwards_total`: `ForwardOutcome` and the non-OK gRPC codes."""

LeaseLossLabel = enum.StrEnum(  # type: ignore[misc]
    "LeaseLossLabel", [(loss.name, loss.value) for loss in LeaseLoss]
)
"""`reason` of `harness_cluster_leases_lost_total`: the `LeaseLoss` values."""

HARNESS_METRICS: dict[str, tuple[str, dict[str, Closed]]] = {
    "harness_certification_seconds": ("histogram", {"op": PostOp, "kind": PostKind}),
    "harness_post_intents_pending": ("gauge", {"kind": PostKind}),
    "harness_post_intents_resumed_total": ("counter", {"kind": PostKind}),
    "harness_sends_total": ("counter", {"op": SendOp, "outcome": SendOutcome}),
    "harness_send_idempotency_total": ("counter", {"result": KeyResolution}),
    "harness_collective_member_outcomes_total": (
        "counter",
        {"op": CollectiveOp, "outcome": MemberOutcomeKind},
    ),
    "harness_collectives_open": ("gauge", {"op": CollectiveOp}),
    "harness_collective_results_total": ("counter", {"op": CollectiveOp, "end": CollectiveEnd}),
    "harness_deliveries_published_total": ("counter", {"item": DeliveryItem}),
    "harness_deliveries_replayed_total": ("counter", {"item": DeliveryItem}),
    "harness_deliveries_acknowledged_total": ("counter", {"item": DeliveryItem}),
    "harness_acknowledge_results_total": ("counter", {"result": AckResult}),
    "harness_records_consumed_total": ("counter", {"kind": ConsumedKind}),
    "harness_deliveries_unacknowledged": ("gauge", {"listener": Listener}),
    "harness_deliveries_oldest_unacked_age_seconds": ("gauge", {"listener": Listener}),
    "harness_streams_active": ("gauge", {}),
    "harness_streams_window_full": ("gauge", {}),
    "harness_stream_opens_total": ("counter", {"result": StreamOpen}),
    "harness_stream_ends_total": ("counter", {"reason": StreamEndReason}),
    "harness_agents_hosted": ("gauge", {}),
    "harness_conversations_set_aside": ("gauge", {}),
    "harness_router_attachments": ("gauge", {"state": RouterAttachment}),
    "harness_router_events_total": ("counter", {"event": RouterEvent}),
    "harness_store_commit_batch_size": ("histogram", {"backend": StoreBackend}),
    "harness_store_commit_seconds": ("histogram", {"backend": StoreBackend}),
    "harness_store_write_wait_seconds": ("histogram", {"backend": StoreBackend}),
    "harness_store_queue_depth": ("gauge", {"backend": StoreBackend}),
    "harness_store_commit_failures_total": ("counter", {"backend": StoreBackend}),
    "harness_firewall_checks_total": (
        "counter",
        {"kind": FirewallKind, "direction": FirewallDirection, "verdict": FirewallVerdict},
    ),
    "harness_firewall_refusals_total": (
        "counter",
        {"kind": FirewallKind, "refusal": FirewallRefusal},
    ),
    "harness_firewall_check_seconds": ("histogram", {"kind": FirewallKind}),
    "harness_firewall_reloads_total": ("counter", {"result": FirewallReload}),
    "harness_auth_failures_total": ("counter", {"reason": AuthFailure}),
    "harness_rejected_requests_total": ("counter", {"reason": RejectedRequestReason}),
    "harness_cluster_partitions_owned": ("gauge", {}),
    "harness_cluster_partitions_unowned": ("gauge", {}),
    "harness_cluster_partition_unowned_seconds": ("gauge", {}),
    "harness_cluster_forwards_total": (
        "counter",
        {"method": ForwardMethod, "outcome": ForwardOutcomeLabel},
    ),
    "harness_cluster_handoffs_total": ("counter", {}),
    "harness_cluster_hints_dropped_total": ("counter", {}),
    "harness_cluster_claims_total": ("counter", {}),
    "harness_cluster_leases_lost_total": ("counter", {"reason": LeaseLossLabel}),
    "harness_cluster_loop_lag_seconds": ("histogram", {}),
}
"""operations.md §2.3, restated: every harness_* metric (except build info), its type, and
its labels with their closed values (plus `harness_rejected_requests_total`, documented in
the metrics module)."""

GRPC_METRICS = {
    "grpc_server_started_total": "counter",
    "grpc_server_handled_total": "counter",
    "grpc_server_msg_received_total": "counter",
    "grpc_server_msg_sent_total": "counter",
    "grpc_server_handling_seconds": "histogram",
}
"""operations.md §2.2."""

SUFFIXES = ("_bucket", "_sum", "_count", "_created")


def samples(metrics: Metrics) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of the rendered registry: name, labels, value."""
    return [
        (sample.name, dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(metrics.render())
        for sample in family.samples
    ]


def base_name(sample_name: str) -> str:
    """The metric a sample belongs to (`_total` kept, as the metric tables name them)."""
    for suffix in SUFFIXES:
        if sample_name.endswith(suffix):
            stem = sample_name.removesuffix(suffix)
            if suffix == "_created" and f"{stem}_total" in {*HARNESS_METRICS, *GRPC_METRICS}:
                return f"{stem}_total"
            return stem
    return sample_name


def values(closed: Closed) -> list[str]:
    return [member.value for member in closed]


@pytest.fixture
def metrics() -> Metrics:
    return Metrics("1.2.3", Mode.EMBEDDED)


def test_the_registry_exports_exactly_the_metrics_of_operations_md(metrics: Metrics):
    exported = {
        base_name(name)
        for name, _, _ in samples(metrics)
        if name.startswith(("harness_", "grpc_server_"))
    }
    assert exported == {*HARNESS_METRICS, *GRPC_METRICS, "harness_build_info"}


def test_the_registry_also_carries_the_process_and_python_collectors(metrics: Metrics):
    names = {name for name, _, _ in samples(metrics)}
    assert "process_cpu_seconds_total" in names
    assert "python_info" in names
    assert "python_gc_collections_total" in names


def test_every_harness_series_carries_only_its_closed_labels_and_values(metrics: Metrics):
    checked = 0
    for name, labels, _ in samples(metrics):
        if not name.startswith("harness_") or name.startswith("harness_build_info"):
            continue
        _, closed = HARNESS_METRICS[base_name(name)]
        labels.pop("le", None)
        assert set(labels) == set(closed), name
        for label, value in labels.items():
            assert value in values(closed[label]), f"{name}{{{label}={value!r}}}"
        checked += 1
    assert checked > 0


def test_every_grpc_series_carries_only_closed_labels_and_values():
    metrics = Metrics("1.2.3", Mode.ROUTER, grpc_services=list(GRPC_SERVICE_METHODS))
    known = {
        (grpc_type.value, service, method)
        for service, methods in GRPC_SERVICE_METHODS.items()
        for method, grpc_type in methods
    } | {(grpc_type.value, UNKNOWN_LABEL, UNKNOWN_LABEL) for grpc_type in GrpcType}
    for name, labels, _ in samples(metrics):
        if not name.startswith("grpc_server_"):
            continue
        assert (labels["grpc_type"], labels["grpc_service"], labels["grpc_method"]) in known
        if base_name(name) == "grpc_server_handled_total":
            assert labels["grpc_code"] in GRPC_CODES


def test_every_series_of_a_closed_label_set_exists_at_zero_from_the_start(metrics: Metrics):
    exported = {
        (name, tuple(sorted(labels.items()))): value for name, labels, value in samples(metrics)
    }
    for metric, (kind, closed) in HARNESS_METRICS.items():
        sample_name = f"{metric}_count" if kind == "histogram" else metric
        for combo in itertools.product(*(values(c) for c in closed.values())):
            key = (sample_name, tuple(sorted(zip(closed, combo, strict=True))))
            assert exported.get(key) == 0.0, key


def test_every_served_grpc_method_and_common_code_exists_at_zero_from_the_start(
    metrics: Metrics,
):
    exported = {
        (name, tuple(sorted(labels.items()))): value for name, labels, value in samples(metrics)
    }
    rows = [
        (grpc_type.value, service, method)
        for service in DAEMON_GRPC_SERVICES
        for method, grpc_type in GRPC_SERVICE_METHODS[service]
    ] + [(grpc_type.value, UNKNOWN_LABEL, UNKNOWN_LABEL) for grpc_type in GrpcType]
    for grpc_type, service, method in rows:
        labels = {"grpc_type": grpc_type, "grpc_service": service, "grpc_method": method}
        for name in (
            "grpc_server_started_total",
            "grpc_server_msg_received_total",
            "grpc_server_msg_sent_total",
            "grpc_server_handling_seconds_count",
        ):
            assert exported.get((name, tuple(sorted(labels.items())))) == 0.0, (name, labels)
        for code in GRPC_PRECREATED_CODES:
            key = (
                "grpc_server_handled_total",
                tuple(sorted({**labels, "grpc_code": code}.items())),
            )
            assert exported.get(key) == 0.0, key


def test_the_common_codes_are_ok_and_those_of_the_status_table():
    status_table = {
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "FAILED_PRECONDITION",
        "ALREADY_EXISTS",
        "UNAVAILABLE",
        "DEADLINE_EXCEEDED",
        "UNKNOWN",
        "PERMISSION_DENIED",
        "UNAUTHENTICATED",
    }
    assert set(GRPC_PRECREATED_CODES) == {"OK", "CANCELLED", "INTERNAL"} | status_table
    assert set(GRPC_CODES) == {code.name for code in StatusCode}


def test_the_series_budget_holds_with_every_service_and_every_status_code_seen():
    metrics = Metrics("1.2.3", Mode.EMBEDDED, grpc_services=list(GRPC_SERVICE_METHODS))
    for service, methods in GRPC_SERVICE_METHODS.items():
        for method, grpc_type in methods:
            row = metrics.grpc_method(grpc_type, service, method)
            for code in GRPC_CODES:
                row.handled(code)
    for grpc_type in GrpcType:
        for code in GRPC_CODES:
            metrics.grpc_method(grpc_type, UNKNOWN_LABEL, UNKNOWN_LABEL).handled(code)
    assert len(samples(metrics)) <= SERIES_BUDGET


def test_the_buckets_are_those_of_operations_md():
    cert = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 45]
    assert list(CERT_BUCKETS) == [*cert, math.inf]
    assert list(GRPC_BUCKETS) == [*cert, 60, math.inf]
    assert list(STORE_BUCKETS) == [
        *(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
        math.inf,
    ]
    assert list(BATCH_BUCKETS) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, math.inf]
    assert list(FIREWALL_BUCKETS) == [
        *(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
        math.inf,
    ]
    assert list(LOOP_LAG_BUCKETS) == [
        *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        math.inf,
    ]


@pytest.mark.parametrize(
    ("metric", "buckets"),
    [
        ("harness_certification_seconds", CERT_BUCKETS),
        ("grpc_server_handling_seconds", GRPC_BUCKETS),
        ("harness_store_commit_seconds", STORE_BUCKETS),
        ("harness_store_write_wait_seconds", STORE_BUCKETS),
        ("harness_store_commit_batch_size", BATCH_BUCKETS),
        ("harness_firewall_check_seconds", FIREWALL_BUCKETS),
        ("harness_cluster_loop_lag_seconds", LOOP_LAG_BUCKETS),
    ],
)
def test_each_histogram_exports_its_bucket_list(
    metrics: Metrics, metric: str, buckets: tuple[float, ...]
):
    bounds = {
        float(labels["le"]) for name, labels, _ in samples(metrics) if name == f"{metric}_bucket"
    }
    assert bounds == set(buckets)


def test_build_info_is_one_with_the_version_and_mode(metrics: Metrics):
    assert (
        metrics.registry.get_sample_value(
            "harness_build_info", {"version": "1.2.3", "mode": "embedded"}
        )
        == 1.0
    )


def test_an_unknown_mode_or_an_empty_version_is_refused():
    with pytest.raises(ValueError, match="Mode"):
        Metrics("1.2.3", "standalone")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="version"):
        Metrics("", Mode.JOINED)
    with pytest.raises(ValueError, match="method table"):
        Metrics("1.2.3", Mode.JOINED, grpc_services=["harness.v1.FirewallMiddlewareService"])


def test_two_metrics_objects_keep_separate_registries():
    first, second = Metrics("1", Mode.EMBEDDED), Metrics("1", Mode.EMBEDDED)
    first.count_send(SendOp.MULTICAST, SendOutcome.OK)
    labels = {"op": "multicast", "outcome": "ok"}
    assert first.registry.get_sample_value("harness_sends_total", labels) == 1.0
    assert second.registry.get_sample_value("harness_sends_total", labels) == 0.0


BAD_CALLS: list[tuple[str, Callable[[Metrics], object]]] = [
    ("an agent address as an outcome", lambda m: m.count_send("multicast", "agent:alice")),  # type: ignore[arg-type]
    ("an unknown op", lambda m: m.count_send("broadcast", "ok")),  # type: ignore[arg-type]
    ("close is not a send op", lambda m: m.count_send("close", "ok")),  # type: ignore[arg-type]
    ("an unknown certification kind", lambda m: m.observe_certification("multicast", "x", 1)),  # type: ignore[arg-type]
    ("multicast is not collective", lambda m: m.count_member_outcome("multicast", "answered")),  # type: ignore[arg-type]
    ("an unknown stream end", lambda m: m.count_stream_end("timeout")),  # type: ignore[arg-type]
    ("an unknown router state", lambda m: m.set_router_attachments("gone", 1)),  # type: ignore[arg-type]
    ("an unknown item", lambda m: m.count_published("collective_request")),  # type: ignore[arg-type]
    ("an unknown listener", lambda m: m.set_unacknowledged("agent:bob", 3)),  # type: ignore[arg-type]
    ("an unknown auth reason", lambda m: m.count_auth_failure("expired")),  # type: ignore[arg-type]
    ("an unknown firewall kind", lambda m: m.count_firewall_refusal("my-middleware", "x")),  # type: ignore[arg-type]
    ("an unknown verdict", lambda m: m.observe_firewall_check("external", "send", "ok", 0.1)),  # type: ignore[arg-type]
    ("a non-string value", lambda m: m.count_router_event(3)),  # type: ignore[arg-type]
    ("an unknown grpc type", lambda m: m.grpc_method("duplex", "x.Y", "Z")),
    ("an unknown forward method", lambda m: m.count_forward("Register", "ok")),  # type: ignore[arg-type]
    ("OK is counted as ok", lambda m: m.count_forward(ForwardMethod.SEND, "OK")),
    ("an unknown lease loss", lambda m: m.count_lease_lost("stolen")),  # type: ignore[arg-type]
    ("an unknown status code", lambda m: m.grpc_method("unary", "", "").handled("TEAPOT")),
]


@pytest.mark.parametrize(("case", "call"), BAD_CALLS, ids=[case for case, _ in BAD_CALLS])
def test_a_helper_refuses_a_label_value_outside_its_closed_set(
    metrics: Metrics, case: str, call: Callable[[Metrics], object]
):
    before = metrics.render()
    with pytest.raises(ValueError, match=r"closed label values|not a"):
        call(metrics)
    assert _without_gc(metrics.render()) == _without_gc(before), case


def _without_gc(text: str) -> list[str]:
    """The exposition minus the lines that change by themselves (process and gc)."""
    return [line for line in text.splitlines() if not line.startswith(("process_", "python_gc_"))]


def test_the_helpers_count_into_their_own_series(metrics: Metrics):
    metrics.observe_certification(PostOp.CLOSE, PostKind.GROUP, 0.003)
    metrics.count_send(SendOp.ALL_GATHER, SendOutcome(SendErrorReason.OUTCOME_UNKNOWN.value))
    metrics.count_send(SendOp.ANSWER, SendOutcome(CollectiveErrorKind.REQUEST_EXPIRED.value))
    metrics.count_member_outcome(CollectiveOp.GATHER, MemberOutcomeKind.NO_ANSWER, 3)
    metrics.set_collectives_open(CollectiveOp.ALL_GATHER, 4)
    metrics.count_collective_result(CollectiveOp.GATHER, CollectiveEnd.DEADLINE)
    metrics.count_published(DeliveryItem.COLLECTIVE_REQUEST)
    metrics.count_replayed(DeliveryItem.MULTICAST)
    metrics.count_acknowledged(DeliveryItem.OPERATION_FAILED)
    metrics.count_acknowledge_result(AckResult.UNKNOWN_DELIVERY, 2)
    metrics.count_consumed(ConsumedKind.ANSWER)
    metrics.set_unacknowledged(Listener.DETACHED, 7)
    metrics.set_oldest_unacked_age(Listener.ATTACHED, 12.5)
    metrics.set_streams_active(2)
    metrics.set_streams_window_full(1)
    metrics.count_stream_open(StreamOpen.TAKEOVER)
    metrics.count_stream_end(StreamEndReason.TAKEN_OVER)
    metrics.set_agents_hosted(5)
    metrics.set_router_attachments(RouterAttachment.DETACHED, 5)
    metrics.count_router_event(RouterEvent.FEED_GAP)
    metrics.count_auth_failure(AuthFailure.WRONG_ROLE)
    metrics.set_post_intents_pending(PostKind.DIRECT, 6)
    metrics.count_intents_resumed(PostKind.GROUP)
    metrics.count_idempotency(KeyResolution.JOINED)
    metrics.observe_firewall_check(
        FirewallKind.RATE_LIMIT, FirewallDirection.SEND, FirewallVerdict.REFUSED, 0.0002
    )
    metrics.count_firewall_refusal(FirewallKind.RATE_LIMIT, FirewallRefusal.RATE_LIMITED)
    metrics.count_firewall_reload(FirewallReload.INVALID)
    metrics.set_partitions_owned(12)
    metrics.set_partitions_unowned(3)
    metrics.set_partition_unowned_seconds(7.5)
    metrics.count_forward(ForwardMethod.READ_SEND, "DEADLINE_EXCEEDED")
    metrics.count_handoffs(4)
    metrics.count_hints_dropped(2)
    metrics.count_claims(5)
    metrics.count_lease_lost(LeaseLoss.FENCED)
    metrics.observe_loop_lag(0.02)
    get = metrics.registry.get_sample_value
    assert get("harness_certification_seconds_count", {"op": "close", "kind": "group"}) == 1
    assert get("harness_sends_total", {"op": "all_gather", "outcome": "outcome-unknown"}) == 1
    assert get("harness_sends_total", {"op": "answer", "outcome": "request-expired"}) == 1
    assert (
        get("harness_collective_member_outcomes_total", {"op": "gather", "outcome": "no-answer"})
        == 3
    )
    assert get("harness_collectives_open", {"op": "all_gather"}) == 4
    assert get("harness_collective_results_total", {"op": "gather", "end": "deadline"}) == 1
    assert get("harness_deliveries_published_total", {"item": "collectiveRequest"}) == 1
    assert get("harness_deliveries_replayed_total", {"item": "multicast"}) == 1
    assert get("harness_deliveries_acknowledged_total", {"item": "operationFailed"}) == 1
    assert get("harness_acknowledge_results_total", {"result": "unknown-delivery"}) == 2
    assert get("harness_records_consumed_total", {"kind": "answer"}) == 1
    assert get("harness_deliveries_unacknowledged", {"listener": "detached"}) == 7
    assert get("harness_deliveries_oldest_unacked_age_seconds", {"listener": "attached"}) == 12.5
    assert get("harness_streams_active", {}) == 2
    assert get("harness_streams_window_full", {}) == 1
    assert get("harness_stream_opens_total", {"result": "takeover"}) == 1
    assert get("harness_stream_ends_total", {"reason": "taken-over"}) == 1
    assert get("harness_agents_hosted", {}) == 5
    assert get("harness_router_attachments", {"state": "detached"}) == 5
    assert get("harness_router_events_total", {"event": "feed-gap"}) == 1
    assert get("harness_auth_failures_total", {"reason": "wrong-role"}) == 1
    assert get("harness_post_intents_pending", {"kind": "direct"}) == 6
    assert get("harness_post_intents_resumed_total", {"kind": "group"}) == 1
    assert get("harness_send_idempotency_total", {"result": "joined"}) == 1
    assert (
        get(
            "harness_firewall_checks_total",
            {"kind": "rate-limit", "direction": "send", "verdict": "refused"},
        )
        == 1
    )
    assert get("harness_firewall_check_seconds_count", {"kind": "rate-limit"}) == 1
    assert (
        get("harness_firewall_refusals_total", {"kind": "rate-limit", "refusal": "rate-limited"})
        == 1
    )
    assert get("harness_firewall_reloads_total", {"result": "invalid"}) == 1
    assert get("harness_cluster_partitions_owned", {}) == 12
    assert get("harness_cluster_partitions_unowned", {}) == 3
    assert get("harness_cluster_partition_unowned_seconds", {}) == 7.5
    assert (
        get(
            "harness_cluster_forwards_total", {"method": "ReadSend", "outcome": "DEADLINE_EXCEEDED"}
        )
        == 1
    )
    assert get("harness_cluster_handoffs_total", {}) == 4
    assert get("harness_cluster_hints_dropped_total", {}) == 2
    assert get("harness_cluster_claims_total", {}) == 5
    assert get("harness_cluster_leases_lost_total", {"reason": "fenced"}) == 1
    assert get("harness_cluster_loop_lag_seconds_count", {}) == 1


def test_store_metrics_feeds_the_store_family_of_its_backend(metrics: Metrics):
    observer: StoreObserver = StoreMetrics(metrics)
    observer.on_commit(3, 0.002)
    observer.on_write_done(0.004)
    observer.on_write_done(0.0001)
    observer.on_queue_depth(9)
    observer.on_commit_failure()
    get = metrics.registry.get_sample_value
    sqlite = {"backend": "sqlite"}
    assert get("harness_store_commit_batch_size_count", sqlite) == 1
    assert get("harness_store_commit_batch_size_sum", sqlite) == 3
    assert get("harness_store_commit_seconds_bucket", {**sqlite, "le": "0.0025"}) == 1
    assert get("harness_store_write_wait_seconds_count", sqlite) == 2
    assert get("harness_store_queue_depth", sqlite) == 9
    assert get("harness_store_commit_failures_total", sqlite) == 1
    assert get("harness_store_commit_failures_total", {"backend": "postgresql"}) == 0


def test_store_metrics_refuses_an_unknown_backend_when_built(metrics: Metrics):
    with pytest.raises(ValueError, match="StoreBackend"):
        StoreMetrics(metrics, "mysql")


def _same(closed: Closed, expected: Iterable[str]) -> bool:
    return set(values(closed)) == set(expected)


def test_the_label_enums_carry_the_values_of_the_components_own_enums():
    assert _same(StreamEndReason, StreamEndReason)
    assert _same(RouterAttachment, RouterAttachment)
    assert _same(AuthFailure, AuthFailure)
    # transport-failed is the client library's own reason; the server never answers it.
    server_side = set(DeliveryAcknowledgeErrorReason) - {"transport-failed"}
    assert _same(AckResult, {"ok", *server_side})
    assert _same(
        SendOutcome,
        {
            "ok",
            *SendErrorReason,
            "idempotency-conflict",
            "invalid-idempotency-key",
            *CollectiveErrorKind,
            "firewall-refused",
            "other",
        },
    )
    assert set(values(SendOp)) < set(values(PostOp))
    assert set(values(CollectiveOp)) < set(values(SendOp))


def _descriptor_methods() -> dict[str, tuple[tuple[str, GrpcType], ...]]:
    files = (endpoint_pb2, management_pb2, router_pb2, registry_pb2, health_pb2, reflection_pb2)
    table: dict[str, tuple[tuple[str, GrpcType], ...]] = {}
    for module in files:
        for service in module.DESCRIPTOR.services_by_name.values():
            table[service.full_name] = tuple(
                (method.name, _shape(method.client_streaming, method.server_streaming))
                for method in service.methods
            )
    return table


def _shape(client_streaming: bool, server_streaming: bool) -> GrpcType:
    match (client_streaming, server_streaming):
        case (False, False):
            return GrpcType.UNARY
        case (True, False):
            return GrpcType.CLIENT_STREAM
        case (False, True):
            return GrpcType.SERVER_STREAM
        case _:
            return GrpcType.BIDI_STREAM


def test_the_grpc_method_table_matches_the_served_protos():
    assert dict(GRPC_SERVICE_METHODS) == _descriptor_methods()


def test_an_unserved_method_falls_into_the_unknown_row_of_its_type(metrics: Metrics):
    row = metrics.grpc_method(GrpcType.SERVER_STREAM, "harness.v1.RouterService", "Subscribe")
    assert not row.known
    assert row.grpc_type is GrpcType.SERVER_STREAM
    served = metrics.grpc_method(GrpcType.UNARY, "harness.v1.HarnessEndpointService", "Send")
    assert served.known

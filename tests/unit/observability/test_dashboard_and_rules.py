"""The Grafana dashboard and the alert rules against operations.md §2.5 and §9, and against
the metrics that `gateway/observability/metrics.py` really exports.

Every query is read as a PromQL syntax tree (`promql_support`: Grafana's variables
substituted as Grafana would, then `promql_parser`), so the checks see which metric each
selector names, which labels it matches on, and which labels each aggregation groups by;
`tests/integration/observability/test_dashboard_live.py` checks the same queries against a
scrape of a gateway after real traffic."""

from __future__ import annotations

import shutil
import subprocess

import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.metrics import GRPC_SERVICE_METHODS, Metrics, Mode
from tests.unit.observability.promql_support import (
    DASHBOARD,
    GRAFANA_VALUES,
    INSTANCE_REGEX,
    INSTANCE_VALUE,
    NAMESPACE_VALUE,
    ROOT,
    RULES,
    UnknownVariable,
    all_queries,
    counter_samples,
    load_dashboard,
    load_rules,
    missing_labels,
    panel_queries,
    panels,
    quantiles,
    read_query,
    rule_queries,
    series_labels,
    substitute,
    unknown_metrics,
    variable_queries,
)

PROVIDER = ROOT / "deploy/grafana/provisioning/dashboards/harness.yaml"
CONFIGMAP = ROOT / "deploy/kubernetes/grafana-dashboard-configmap.yaml"

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

ROWS = {
    "Traffic": {"grpc_server_handled_total", "harness_sends_total"},
    "Certification": {"harness_certification_seconds_bucket"},
    "Send outcomes": {"harness_sends_total", "harness_collective_member_outcomes_total"},
    "Deliveries": {
        "harness_deliveries_published_total",
        "harness_deliveries_replayed_total",
        "harness_deliveries_acknowledged_total",
        "harness_deliveries_unacknowledged",
        "harness_deliveries_oldest_unacked_age_seconds",
    },
    "Streams": {
        "harness_streams_active",
        "harness_streams_window_full",
        "harness_stream_ends_total",
        "harness_router_attachments",
    },
    "Store": {
        "harness_store_commit_batch_size_count",
        "harness_store_commit_batch_size_bucket",
        "harness_store_commit_seconds_bucket",
        "harness_store_write_wait_seconds_bucket",
    },
    "Firewall": {"harness_firewall_checks_total", "harness_firewall_refusals_total"},
    "Cluster": {
        "harness_cluster_partitions_owned",
        "harness_cluster_partitions_unowned",
        "harness_cluster_partition_unowned_seconds",
        "harness_cluster_forwards_total",
        "harness_cluster_leases_lost_total",
        "harness_cluster_claims_total",
        "harness_cluster_handoffs_total",
        "harness_cluster_hints_dropped_total",
        "harness_cluster_loop_lag_seconds_bucket",
    },
}
"""operations.md §9's rows, in order, each with the metrics its listed panels need."""

ALERTS = {
    "HarnessGatewayDown": ("2m", "critical"),
    "HarnessRouterDetached": ("5m", "critical"),
    "HarnessStoreCommitFailing": ("0m", "critical"),
    "HarnessCertificationSlow": ("15m", "warning"),
    "HarnessSendFailuresHigh": ("10m", "warning"),
    "HarnessOutcomeUnknown": ("0m", "warning"),
    "HarnessBacklogStale": ("10m", "warning"),
    "HarnessStoreCommitSlow": ("10m", "warning"),
    "HarnessGrpcServerErrors": ("10m", "warning"),
    "HarnessConversationsSetAside": ("0m", "warning"),
    "HarnessPartitionsUnowned": ("0m", "critical"),
}
"""operations.md §2.5: each alert's `for` and severity, and the set-aside alert of local
order (engine.md §5.10: "reported once (agent status, metric)") and the cluster's unowned
partitions (cluster.md §10)."""


def registry_exposition() -> str:
    """A fully served process's exposition: every gRPC service's rows, every closed series."""
    return Metrics("1.2.3", Mode.EMBEDDED, grpc_services=list(GRPC_SERVICE_METHODS)).render()


def histograms() -> set[str]:
    metrics = Metrics("1.2.3", Mode.EMBEDDED)
    return {
        family.name
        for family in text_string_to_metric_families(metrics.render())
        if family.type == "histogram"
    }


def test_the_dashboard_has_its_fixed_uid_and_no_inputs():
    dashboard = load_dashboard()
    assert dashboard["uid"] == "harness-gateway"
    assert "__inputs" not in dashboard
    assert dashboard["id"] is None


def test_every_panel_and_every_query_uses_the_datasource_variable():
    for panel in panels():
        assert panel["datasource"] == DATASOURCE, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]


def test_every_panel_is_a_timeseries():
    assert panels()
    assert {panel["type"] for panel in panels()} == {"timeseries"}


def test_the_dashboard_has_datasource_namespace_and_instance_variables():
    variables = {v["name"]: v for v in load_dashboard()["templating"]["list"]}
    assert set(variables) == {"datasource", "namespace", "instance"}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "instance"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"] == DATASOURCE


# --- every query parses, after Grafana's substitution -------------------------------------------


def test_grafana_variables_are_substituted_in_each_of_their_forms():
    assert substitute('rate(x{namespace=~"$namespace"}[$__rate_interval])') == (
        f'rate(x{{namespace=~"{NAMESPACE_VALUE}"}}[1m])'
    )
    assert substitute('x{instance=~"${instance}"}[${__range}]') == (
        f'x{{instance=~"{INSTANCE_VALUE}"}}[21600s]'
    )
    assert substitute('x{instance=~"${instance:regex}"}[[[__interval]]]') == (
        f'x{{instance=~"{INSTANCE_VALUE}"}}[30s]'
    )
    # Grafana's doubled backslash reaches Prometheus as one: a regex-escaped dot.
    matcher = read_query("t", 'up{instance=~"$instance"}').selectors[0].matchers[0]
    assert matcher.value == INSTANCE_REGEX == r"(10\.0\.0\.7:9464|10\.0\.0\.8:9464)"


@pytest.mark.parametrize(
    "query",
    [
        'x{namespace=~"$namspace"}',  # a typo would reach Prometheus as a literal string
        "rate(x[${__rate_intervall}])",
        'x{pod="[[pod]]"}',
    ],
)
def test_a_variable_the_dashboard_does_not_define_is_refused(query: str):
    with pytest.raises(UnknownVariable):
        substitute(query)


def test_every_panel_query_parses_after_substitution():
    failures = []
    for panel in panels():
        for target in panel["targets"]:
            try:
                promql_parser.parse(substitute(target["expr"]))
            except ValueError as error:  # UnknownVariable or a syntax error
                failures.append((panel["title"], target["refId"], str(error)))
    assert failures == []
    assert len(panel_queries(panels()[0])) == len(panels()[0]["targets"])


def test_every_variable_query_and_every_alert_expression_parses():
    assert len(variable_queries()) == 2
    failures = []
    for rule in load_rules():
        try:
            # Prometheus substitutes nothing in an alert's expr: no variable may appear.
            promql_parser.parse(substitute(rule["expr"], {}))
        except ValueError as error:
            failures.append((rule["alert"], str(error)))
    assert failures == []
    assert len(rule_queries()) == len(ALERTS)


def test_the_substituted_values_are_every_variable_the_dashboard_uses():
    # Each substituted value is used somewhere (the table holds no stale entries) ...
    texts = [query.text for query in all_queries()]
    used = {name for name in GRAFANA_VALUES if any(name in text for text in texts)}
    assert used == {"__rate_interval", "namespace", "instance"}
    # ... and no variable is defined on the dashboard that the table cannot substitute.
    defined = {v["name"] for v in load_dashboard()["templating"]["list"]} - {"datasource"}
    assert defined <= set(GRAFANA_VALUES)


# --- what the queries select -------------------------------------------------------------------


def test_every_query_filters_by_namespace_and_instance():
    for panel in panels():
        for query in panel_queries(panel):
            assert query.selectors, query.where
            for selector in query.selectors:
                namespace, instance = selector.matcher("namespace"), selector.matcher("instance")
                # The substituted value proves the matcher was `=~"$namespace"` as written.
                assert namespace is not None, (query.where, selector)
                assert namespace.op == promql_parser.MatchOp.Re, query.where
                assert namespace.value == NAMESPACE_VALUE, query.where
                assert instance is not None, (query.where, selector)
                assert instance.op == promql_parser.MatchOp.Re, query.where
                assert instance.value == INSTANCE_REGEX, query.where


def test_the_rows_are_those_of_operations_md_with_their_metrics():
    rows: list[tuple[str, set[str]]] = []
    for panel in load_dashboard()["panels"]:
        if panel["type"] == "row":
            rows.append((panel["title"], set()))
        else:
            for query in panel_queries(panel):
                rows[-1][1].update(query.metrics)
    assert [title for title, _ in rows] == list(ROWS)
    for title, names in rows:
        assert ROWS[title] <= names, (title, ROWS[title] - names)


def test_the_certification_row_plots_p50_and_p99_by_op_and_kind():
    found = {
        (q, by)
        for panel in panels()
        for query in panel_queries(panel)
        for q, by, metrics in quantiles(query.expr)
        if metrics == {"harness_certification_seconds_bucket"}
    }
    by_op_and_kind = frozenset({"le", "op", "kind"})
    assert found == {(0.5, by_op_and_kind), (0.99, by_op_and_kind)}


def test_every_histogram_quantile_groups_by_le():
    for query in all_queries():
        for q, by, metrics in quantiles(query.expr):
            assert 0 < q < 1, query.where
            assert "le" in by, query.where
            assert metrics, query.where
            assert all(metric.endswith("_bucket") for metric in metrics), query.where


def test_every_metric_the_dashboard_and_the_rules_query_exists_in_the_registry():
    assert unknown_metrics(all_queries(), series_labels(registry_exposition())) == []


def test_a_metric_outside_the_registry_is_reported():
    queries = [read_query("t", "rate(harness_sent_total[5m]) + up"), read_query("t", '{a="b"}')]
    assert unknown_metrics(queries, series_labels(registry_exposition())) == [
        ("t", "harness_sent_total"),
        ("t", '<no name: {a="b"}>'),
    ]


def test_every_label_a_query_matches_or_groups_by_is_a_label_of_its_metric():
    assert missing_labels(all_queries(), series_labels(registry_exposition())) == []


def test_a_label_the_metric_does_not_have_is_reported():
    labels = series_labels(registry_exposition())
    queries = [
        read_query("by", "sum by (agent) (rate(harness_sends_total[5m]))"),
        read_query("match", 'harness_streams_active{state="open"}'),
        read_query("on", "harness_sends_total / on (op, reason) harness_auth_failures_total"),
        read_query("le", "histogram_quantile(0.5, sum by (le) (harness_sends_total))"),
        read_query("scrape", 'sum by (job, instance) (up{namespace="n"})'),
    ]
    assert missing_labels(queries, labels) == [
        ("by", "harness_sends_total", "agent", "groups by"),
        ("match", "harness_streams_active", "state", "matches"),
        ("on", "harness_sends_total", "reason", "joins on"),
        ("on", "harness_auth_failures_total", "op", "joins on"),
        ("le", "harness_sends_total", "le", "groups by"),
    ]


def test_rate_and_increase_read_only_counters_and_histogram_series():
    counters = counter_samples(registry_exposition())
    ranged = {
        (query.where, function, metric)
        for query in all_queries()
        for function, metric in query.ranged
    }
    assert ranged
    assert {entry for entry in ranged if entry[2] not in counters} == set()
    assert "harness_streams_active" not in counters
    assert "harness_certification_seconds_bucket" in counters


def test_histograms_are_queried_only_through_their_buckets_sums_and_counts():
    histogram_names = histograms()
    for query in all_queries():
        assert not (query.metrics & histogram_names), query.where


def test_the_configmap_embeds_the_dashboard_verbatim_with_the_sidecar_label():
    configmap = yaml.safe_load(CONFIGMAP.read_text(encoding="utf-8"))
    assert configmap["kind"] == "ConfigMap"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["data"] == {"harness-gateway.json": DASHBOARD.read_text(encoding="utf-8")}


def test_the_provisioning_provider_loads_dashboards_from_files():
    provider = yaml.safe_load(PROVIDER.read_text(encoding="utf-8"))
    assert provider["apiVersion"] == 1
    [entry] = provider["providers"]
    assert entry["type"] == "file"
    assert entry["options"]["path"]


def test_the_rules_hold_the_alerts_of_operations_md():
    rules = load_rules()
    assert [rule["alert"] for rule in rules] == list(ALERTS)
    for rule in rules:
        duration, severity = ALERTS[rule["alert"]]
        assert rule["for"] == duration, rule["alert"]
        assert rule["labels"] == {"severity": severity}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert rule["annotations"]["description"], rule["alert"]


def test_the_alert_expressions_are_those_of_operations_md():
    by_name = {rule["alert"]: " ".join(rule["expr"].split()) for rule in load_rules()}
    assert by_name["HarnessGatewayDown"] == 'up{job="harness-gateway"} == 0'
    assert by_name["HarnessRouterDetached"] == 'harness_router_attachments{state="detached"} > 0'
    assert (
        by_name["HarnessStoreCommitFailing"]
        == "increase(harness_store_commit_failures_total[5m]) > 0"
    )
    assert by_name["HarnessCertificationSlow"] == (
        "histogram_quantile(0.99, sum by (le, op) "
        "(rate(harness_certification_seconds_bucket[5m]))) > 5"
    )
    assert (
        by_name["HarnessOutcomeUnknown"]
        == 'increase(harness_sends_total{outcome="outcome-unknown"}[15m]) > 0'
    )
    assert by_name["HarnessBacklogStale"] == (
        'max(harness_deliveries_oldest_unacked_age_seconds{listener="attached"}) > 900'
    )
    failures = by_name["HarnessSendFailuresHigh"]
    for outcome in (
        "certification-unavailable",
        "persistence-failed",
        "network-unavailable",
        "delivery-pending",
        "outcome-unknown",
    ):
        assert outcome in failures
    assert failures.endswith("> 0.05")
    assert "harness_store_commit_seconds_bucket" in by_name["HarnessStoreCommitSlow"]
    assert by_name["HarnessStoreCommitSlow"].startswith("histogram_quantile(0.99,")
    assert by_name["HarnessStoreCommitSlow"].endswith("> 0.25")
    assert 'grpc_code=~"INTERNAL|UNKNOWN|DATA_LOSS"' in by_name["HarnessGrpcServerErrors"]
    assert by_name["HarnessGrpcServerErrors"].endswith("> 0.01")
    assert by_name["HarnessPartitionsUnowned"] == (
        "max(harness_cluster_partition_unowned_seconds) > 30"
    )


def test_the_cluster_row_plots_partitions_per_replica_and_loop_lag_p99_by_replica():
    cluster = [panel for panel in panels() if "harness_cluster" in str(panel["targets"])]
    by_title = {panel["title"]: panel_queries(panel) for panel in cluster}
    [owned] = by_title["Partitions owned by replica"]
    assert owned.metrics == {"harness_cluster_partitions_owned"}
    grouped = {use.label for use in owned.label_uses if use.how == "groups by"}
    assert grouped == {"instance"}
    lag = {
        (q, by)
        for query in by_title["Event-loop lag p99 by replica"]
        for q, by, _ in quantiles(query.expr)
    }
    assert lag == {(0.99, frozenset({"le", "instance"}))}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not on PATH (CI installs Debian's `prometheus` package)")
    return path


def test_promtool_accepts_the_rules():
    result = subprocess.run(
        [promtool(), "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout


def test_promtool_finds_no_problem_in_the_rendered_metrics():
    rendered = Metrics("1.2.3", Mode.EMBEDDED).render()
    result = subprocess.run(
        [promtool(), "check", "metrics"],
        input=rendered,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""

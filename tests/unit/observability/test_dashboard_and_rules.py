"""The Grafana dashboard and the alert rules against operations.md §2.5 and §9, and against
the metrics that `gateway/observability/metrics.py` really exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.metrics import GRPC_SERVICE_METHODS, Metrics, Mode

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "deploy/grafana/dashboards/harness-gateway.json"
PROVIDER = ROOT / "deploy/grafana/provisioning/dashboards/harness.yaml"
CONFIGMAP = ROOT / "deploy/kubernetes/grafana-dashboard-configmap.yaml"
RULES = ROOT / "deploy/prometheus/harness-gateway.rules.yaml"

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
METRIC_NAME = re.compile(r"\b(?:harness|grpc_server|process|python)_[a-z0-9_]+\b|\bup\b")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

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
}
"""operations.md §2.5: each alert's `for` and severity, and the set-aside alert of local
order (engine.md §5.10: "reported once (agent status, metric)")."""


def load_dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def load_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    groups = document["groups"]
    assert len(groups) == 1
    rules: list[dict[str, Any]] = groups[0]["rules"]
    return rules


def panels() -> list[dict[str, Any]]:
    return [panel for panel in load_dashboard()["panels"] if panel["type"] != "row"]


def exprs(panel: dict[str, Any]) -> list[str]:
    return [target["expr"] for target in panel["targets"]]


def exported_samples() -> set[str]:
    """Every sample name a fully served process exports (`_bucket`, `_total`, ... included)."""
    metrics = Metrics("1.2.3", Mode.EMBEDDED, grpc_services=list(GRPC_SERVICE_METHODS))
    return {
        sample.name
        for family in text_string_to_metric_families(metrics.render())
        for sample in family.samples
    }


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


def test_every_query_filters_by_namespace_and_instance():
    for panel in panels():
        for expr in exprs(panel):
            for selector in re.findall(r"\{([^}]*)\}", expr):
                assert 'namespace=~"$namespace"' in selector, (panel["title"], expr)
                assert 'instance=~"$instance"' in selector, (panel["title"], expr)


def test_the_rows_are_those_of_operations_md_with_their_metrics():
    rows: list[tuple[str, set[str]]] = []
    for panel in load_dashboard()["panels"]:
        if panel["type"] == "row":
            rows.append((panel["title"], set()))
        else:
            for expr in exprs(panel):
                rows[-1][1].update(METRIC_NAME.findall(expr))
    assert [title for title, _ in rows] == list(ROWS)
    for title, names in rows:
        assert ROWS[title] <= names, (title, ROWS[title] - names)


def test_the_certification_row_plots_p50_and_p99_by_op_and_kind():
    quantiles = {
        expr.split(",")[0]
        for panel in panels()
        for expr in exprs(panel)
        if "harness_certification_seconds_bucket" in expr and "by (le, op, kind)" in expr
    }
    assert quantiles == {"histogram_quantile(0.5", "histogram_quantile(0.99"}


def queried_names() -> dict[str, set[str]]:
    """Every metric name the dashboard and the rules query, by where it is queried."""
    found: dict[str, set[str]] = {}
    for panel in panels():
        for expr in exprs(panel):
            for name in METRIC_NAME.findall(expr):
                found.setdefault(name, set()).add(f"dashboard: {panel['title']}")
    for variable in load_dashboard()["templating"]["list"]:
        for name in METRIC_NAME.findall(json.dumps(variable.get("definition", ""))):
            found.setdefault(name, set()).add(f"variable: {variable['name']}")
    for rule in load_rules():
        for name in METRIC_NAME.findall(rule["expr"]):
            found.setdefault(name, set()).add(f"alert: {rule['alert']}")
    return found


def test_every_metric_the_dashboard_and_the_rules_query_exists_in_the_registry():
    samples, histogram_names = exported_samples(), histograms()
    missing = []
    for name, where in sorted(queried_names().items()):
        if name == "up" or name in samples:
            continue
        stem = next((name.removesuffix(s) for s in HISTOGRAM_SUFFIXES if name.endswith(s)), None)
        if stem is not None and stem in histogram_names:
            continue
        missing.append((name, sorted(where)))
    assert missing == []


def test_histograms_are_queried_only_through_their_buckets_sums_and_counts():
    histogram_names = histograms()
    for name, where in queried_names().items():
        assert name not in histogram_names, (name, where)


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

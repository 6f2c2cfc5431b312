"""The chart's monitoring objects come from one source: the PrometheusRule is
`deploy/prometheus/harness-gateway.rules.yaml` and the dashboard ConfigMap is
`deploy/grafana/dashboards/harness-gateway.json`, byte for byte; and a Prometheus Operator
object asked for on a cluster without its CRDs fails the render, saying which API is missing."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.unit.deploy.chart_support import (
    API_VERSIONS,
    FULLNAME,
    REPO_ROOT,
    ci_file,
    labels_of,
    of_kind,
    one,
    render,
    render_error,
)

RULES = REPO_ROOT / "deploy/prometheus/harness-gateway.rules.yaml"
DASHBOARD = REPO_ROOT / "deploy/grafana/dashboards/harness-gateway.json"
MONITORING_API = "monitoring.coreos.com/v1"
WITHOUT_MONITORING = tuple(api for api in API_VERSIONS if api != MONITORING_API)


def test_the_prometheusrule_holds_the_deploy_alert_rules() -> None:
    (rule,) = of_kind(render([ci_file("monitoring")]), "PrometheusRule")
    source = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert rule["spec"]["groups"] == source["groups"]
    assert labels_of(rule).get("release") == "kube-prometheus-stack", "ci labels reach it"


def test_the_dashboard_configmap_holds_the_deploy_dashboard_byte_for_byte() -> None:
    dashboard = one(render([ci_file("monitoring")]), "ConfigMap", f"{FULLNAME}-dashboard")
    assert labels_of(dashboard).get("grafana_dashboard") == "1"
    (text,) = dashboard["data"].values()
    assert text == DASHBOARD.read_text(encoding="utf-8")
    assert json.loads(text)["uid"] == "harness-gateway"


def test_no_monitoring_object_is_rendered_by_default() -> None:
    objects = render()
    assert of_kind(objects, "ServiceMonitor", "PrometheusRule") == []
    assert [obj for obj in objects if labels_of(obj).get("grafana_dashboard")] == []


@pytest.mark.parametrize(
    "enabled", ["metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true"]
)
def test_a_monitoring_object_without_the_operator_api_fails_naming_it(enabled: str) -> None:
    error = render_error(set_values=[enabled], api_versions=WITHOUT_MONITORING)
    assert MONITORING_API in error


def test_the_monitoring_file_without_the_operator_api_fails_naming_it() -> None:
    error = render_error([ci_file("monitoring")], api_versions=WITHOUT_MONITORING)
    assert MONITORING_API in error


def test_the_dashboard_alone_needs_no_operator_api() -> None:
    """A ConfigMap for Grafana's sidecar is plain Kubernetes."""
    objects = render(set_values=["metrics.dashboard.enabled=true"], api_versions=())
    one(objects, "ConfigMap", f"{FULLNAME}-dashboard")

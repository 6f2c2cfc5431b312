"""The plain manifests in deploy/kubernetes/: a fresh render of the chart, valid, complete.

They are committed for operators without Helm (`kubectl apply -k deploy/kubernetes`), so they
must never drift from the chart they are rendered from (deploy/kubernetes/render.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
HERE = ROOT / "deploy/kubernetes"
RENDER = HERE / "render.py"
TOOLS = Path(sys.executable).parent


def test_the_committed_manifests_equal_a_fresh_render_of_the_chart():
    result = subprocess.run(
        [sys.executable, str(RENDER), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_manifests_validate_strictly_at_the_charts_floor_and_the_newest_kubernetes():
    files = [str(HERE / "harness-gateway.yaml"), str(HERE / "grafana-dashboard-configmap.yaml")]
    for version in ("1.27.0", "1.37.0"):
        result = subprocess.run(
            [str(TOOLS / "kubernetes-validate"), "--strict", "-k", version, "--quiet", *files],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.strip() == "", result.stdout


def test_the_kustomization_lists_every_rendered_file_and_only_those():
    kustomization = yaml.safe_load((HERE / "kustomization.yaml").read_text(encoding="utf-8"))
    rendered = {
        path.name
        for path in HERE.glob("*.yaml")
        if path.name not in {"kustomization.yaml", "values.yaml"}
    }
    assert set(kustomization["resources"]) == rendered
    assert kustomization["namespace"] == "harness"


def objects() -> list[dict[str, object]]:
    text = (HERE / "harness-gateway.yaml").read_text(encoding="utf-8")
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_the_manifests_are_the_embedded_gateway_with_the_admin_token_from_a_secret_you_create():
    kinds = sorted(str(obj["kind"]) for obj in objects())
    assert kinds == ["ConfigMap", "Service", "Service", "Service", "ServiceAccount", "StatefulSet"]
    [statefulset] = [obj for obj in objects() if obj["kind"] == "StatefulSet"]
    spec = statefulset["spec"]
    assert isinstance(spec, dict)
    assert spec["replicas"] == 1
    [tokens] = [v for v in spec["template"]["spec"]["volumes"] if v["name"] == "tokens"]
    [source] = tokens["projected"]["sources"]
    assert source["secret"]["name"] == "harness-gateway-tokens"
    comments = (HERE / "kustomization.yaml").read_text(encoding="utf-8")
    assert "create secret generic harness-gateway-tokens" in comments

"""Renders the plain manifests in deploy/kubernetes/ from the Helm chart (operations.md §9).

`python deploy/kubernetes/render.py` first copies the alert rules and the dashboard from
deploy/ into the chart's files/ (helm reads only files inside the chart; deploy/ is their
source), then writes the manifests; `--check` exits 1, naming each file that differs from a
fresh copy or render (`make check-generated` and tests/unit/deploy/test_manifests.py run
it). The chart is the one source: these files are for operators without Helm (`kubectl apply
-k deploy/kubernetes`), rendered with `values.yaml` beside this script.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
CHART: Final = ROOT / "helm/harness-gateway"
HERE: Final = ROOT / "deploy/kubernetes"
VALUES: Final = HERE / "values.yaml"
RELEASE: Final = "harness-gateway"
NAMESPACE: Final = "harness"
KUBE_VERSION: Final = "1.27.0"
"""The chart's floor (`kubeVersion` in Chart.yaml): what renders there applies everywhere."""

CHART_COPIES: Final = {
    CHART / "files/harness-gateway.rules.yaml": ROOT
    / "deploy/prometheus/harness-gateway.rules.yaml",
    CHART / "files/harness-gateway.json": ROOT / "deploy/grafana/dashboards/harness-gateway.json",
}
"""Each chart file and its source in deploy/, copied byte for byte."""

DASHBOARD_TEMPLATE: Final = "templates/dashboard-configmap.yaml"
"""The dashboard ConfigMap gets a file of its own (grafana-dashboard-configmap.yaml)."""

HEADER: Final = """\
# Rendered from helm/harness-gateway with deploy/kubernetes/values.yaml by `make manifests`
# (deploy/kubernetes/render.py); do not edit: a test fails when this file differs from a fresh
# render. Change the chart or values.yaml and render again.
"""


def helm() -> Path:
    """The helm binary of the dev extras (`helm-binary`), next to this interpreter."""
    path = Path(sys.executable).parent / "helm"
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `make install` (helm-binary is a dev extra)")
    return path


def _template(*show_only: str) -> str:
    command = [
        str(helm()),
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        KUBE_VERSION,
        "-f",
        str(VALUES),
    ]
    for template in show_only:
        command += ["--show-only", template]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"helm template failed:\n{result.stderr}")
    return result.stdout


def render() -> dict[str, str]:
    """Each output file's name and its fresh content."""
    everything = _template()
    # --show-only fails on a template that renders nothing, so the main file is the full
    # render with the dashboard's document taken out.
    documents = everything.split("\n---\n")
    kept = [
        doc for doc in documents if f"# Source: harness-gateway/{DASHBOARD_TEMPLATE}" not in doc
    ]
    main = "\n---\n".join(kept).lstrip("-\n")
    return {
        "harness-gateway.yaml": HEADER + "---\n" + main,
        "grafana-dashboard-configmap.yaml": HEADER + _template(DASHBOARD_TEMPLATE),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a file is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = [
            copy
            for copy, source in CHART_COPIES.items()
            if copy.read_bytes() != source.read_bytes()
        ]
        stale += [
            HERE / name
            for name, text in render().items()
            if not (HERE / name).exists() or (HERE / name).read_text(encoding="utf-8") != text
        ]
        for path in stale:
            print(f"{path.relative_to(ROOT)} is stale: run `make manifests`")
        return 1 if stale else 0
    for copy, source in CHART_COPIES.items():
        copy.write_bytes(source.read_bytes())
    for name, text in render().items():
        (HERE / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

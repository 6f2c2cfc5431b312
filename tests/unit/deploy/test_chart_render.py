"""The chart lints, renders every ci value file at the oldest and newest Kubernetes it supports,
and every rendered object validates strictly: the built-in kinds with kubernetes-validate's
bundled schemas, the custom resources (Prometheus Operator, cert-manager) with our own strict
schemas in `schemas/`, since no CRD schema is on this machine (issue 14, item 5)."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy.chart_support import (
    CHART,
    CI_VALUES,
    CUSTOM_RESOURCES,
    EXPECTED_CI,
    KUBE_VERSIONS,
    LATEST,
    REPO_ROOT,
    SCHEMAS,
    Manifest,
    ci_name,
    custom_resource_errors,
    is_custom_resource,
    render,
    render_error,
    run_helm,
    schema_errors,
    tool,
)

VALIDATE_TIMEOUT = 120.0
"""Seconds one kubernetes-validate run over every render of a version may take (about one)."""


def _renders(kube_version: str) -> dict[str, list[Manifest]]:
    """Every ci render (and the defaults) at one Kubernetes version, by ci name."""
    renders = {"defaults": render(kube_version=kube_version)}
    renders.update({ci_name(path): render([path], kube_version=kube_version) for path in CI_VALUES})
    return renders


def test_the_ci_value_files_the_conventions_name_exist() -> None:
    present = {ci_name(path) for path in CI_VALUES}
    assert set(EXPECTED_CI) <= present, f"missing ci files: {sorted(set(EXPECTED_CI) - present)}"


def test_the_chart_lints_strictly_with_its_defaults() -> None:
    result = run_helm("lint", "--strict", "--kube-version", LATEST, str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("values_file", CI_VALUES, ids=ci_name)
def test_the_chart_lints_strictly_with_each_ci_value_file(values_file: Path) -> None:
    result = run_helm(
        "lint", "--strict", "--kube-version", LATEST, str(CHART), "-f", str(values_file)
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values_file", CI_VALUES, ids=ci_name)
def test_each_ci_value_file_renders(values_file: Path, kube_version: str) -> None:
    objects = render([values_file], kube_version=kube_version)
    assert objects, "the render is empty"
    for obj in objects:
        assert {"apiVersion", "kind", "metadata"} <= obj.keys(), obj


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_built_in_object_validates_strictly_against_the_kubernetes_schemas(
    kube_version: str, tmp_path: Path
) -> None:
    """One kubernetes-validate run over every render of this version: each object must be
    found and pass (`INFO ... passed`); a schema that is not found is a failure too, since
    only the custom resources (validated below) have none."""
    files: list[str] = []
    expected = 0
    for name, objects in _renders(kube_version).items():
        built_in = [obj for obj in objects if not is_custom_resource(obj)]
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump_all(built_in, sort_keys=False), encoding="utf-8")
        files.append(str(path))
        expected += len(built_in)
    result = subprocess.run(
        [str(tool("kubernetes-validate")), "--strict", "-k", kube_version, *files],
        capture_output=True,
        text=True,
        timeout=VALIDATE_TIMEOUT,
        check=False,
    )
    lines = (result.stdout + result.stderr).splitlines()
    problems = [line for line in lines if not line.startswith("INFO ")]
    assert not problems, "\n".join(problems)
    assert result.returncode == 0, result.stdout + result.stderr
    passed = [line for line in lines if " passed for resource " in line]
    assert len(passed) == expected, f"{len(passed)} of {expected} objects validated"


def test_our_custom_resource_schemas_are_valid_json_schemas() -> None:
    for path in sorted(SCHEMAS.glob("*.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        assert schema_errors(schema) == [], path.name


@pytest.mark.parametrize("values_file", CI_VALUES, ids=ci_name)
def test_every_custom_resource_validates_strictly_against_our_schema(values_file: Path) -> None:
    objects = render([values_file])
    problems = [
        problem
        for obj in objects
        if is_custom_resource(obj)
        for problem in custom_resource_errors(obj)
    ]
    assert problems == []


def test_the_ci_value_files_render_every_custom_resource_kind_we_have_a_schema_for() -> None:
    """Otherwise a schema would check nothing."""
    rendered = {(obj["apiVersion"], obj["kind"]) for path in CI_VALUES for obj in render([path])}
    assert set(CUSTOM_RESOURCES) <= rendered, sorted(set(CUSTOM_RESOURCES) - rendered)


def _first_custom_resource(kind: str) -> Manifest:
    for path in CI_VALUES:
        for obj in render([path]):
            if obj["kind"] == kind and is_custom_resource(obj):
                return obj
    pytest.fail(f"no ci value file renders a {kind}", pytrace=False)


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("ServiceMonitor", ("spec", "endpoints", 0)),
        ("ServiceMonitor", ("spec",)),
        ("PrometheusRule", ("spec", "groups", 0, "rules", 0)),
        ("PrometheusRule", ("spec",)),
        ("Certificate", ("spec",)),
        ("Certificate", ("spec", "issuerRef")),
    ],
)
def test_our_schemas_refuse_a_misspelt_field(kind: str, path: tuple[str | int, ...]) -> None:
    """The schemas are strict: a field the API does not have fails, as in the real CRDs."""
    obj = copy.deepcopy(_first_custom_resource(kind))
    assert custom_resource_errors(obj) == []
    target: Any = obj
    for part in path:
        target = target[part]
    target["intervall"] = "30s"
    assert any("intervall" in problem for problem in custom_resource_errors(obj))


def test_the_chart_files_are_byte_copies_of_the_deploy_files() -> None:
    """One source: `make check` keeps `files/` equal to `deploy/` (operations.md §9)."""
    pairs = {
        "harness-gateway.json": REPO_ROOT / "deploy/grafana/dashboards/harness-gateway.json",
        "harness-gateway.rules.yaml": REPO_ROOT / "deploy/prometheus/harness-gateway.rules.yaml",
    }
    for name, source in pairs.items():
        copy_path = CHART / "files" / name
        assert copy_path.read_bytes() == source.read_bytes(), f"{copy_path} differs from {source}"


@pytest.mark.parametrize(
    ("assignment", "named"),
    [
        ("gateway.logLevl=debug", "logLevl"),
        ("mode=federation", "mode"),
        ("persistence.sise=1Gi", "sise"),
    ],
)
def test_the_values_schema_refuses_a_misspelt_or_unknown_value(assignment: str, named: str) -> None:
    """values.schema.json: a typo fails `helm install` instead of being ignored."""
    assert named in render_error(set_values=[assignment])

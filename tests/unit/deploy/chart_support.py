"""Render the Helm chart with the real `helm` and read the objects it makes, for the chart tests.

The chart is proven offline (issue 14): `helm lint`, `helm template` over the value files in
`helm/harness-gateway/ci/`, schema validation, and tests of what schemas cannot see. Every
render is a subprocess, so each distinct (values, `--set`, Kubernetes version, API versions)
render runs once per session (`functools.cache`) and callers get a deep copy they may change.

The tools (`helm`, `kubernetes-validate`) are dev extras installed next to the interpreter;
a missing one fails the test that needs it, never skips it.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Final, TypeAlias

import jsonschema  # type: ignore[import-untyped]  # no py.typed and no stubs installed
import pytest
import yaml
from referencing import Registry, Resource

Manifest: TypeAlias = dict[str, Any]
"""One rendered Kubernetes object, as parsed YAML."""

REPO_ROOT: Final = Path(__file__).resolve().parents[3]
CHART: Final = REPO_ROOT / "helm" / "harness-gateway"
RELEASE: Final = "hg"
NAMESPACE: Final = "harness"
FULLNAME: Final = "hg-harness-gateway"
"""The chart's fullname for release `hg`: the prefix of every object's name."""

KUBE_VERSIONS: Final = ("1.27.0", "1.37.0")
"""The chart's floor (`kubeVersion: >=1.27.0-0`) and the newest schemas kubernetes-validate has."""
LATEST: Final = KUBE_VERSIONS[-1]

API_VERSIONS: Final = ("monitoring.coreos.com/v1", "cert-manager.io/v1")
"""The CRD groups a cluster with the Prometheus Operator and cert-manager advertises."""

CI_VALUES: Final = tuple(sorted(CHART.glob("ci/*-values.yaml")))
"""The value files every check renders (`helm/harness-gateway/ci/*-values.yaml`)."""

EXPECTED_CI: Final = (
    "embedded",
    "network",
    "tls",
    "network-tls",
    "monitoring",
    "existing-secrets",
    "firewall",
    "network-nats-postgresql",
    "network-nats-tls",
    "network-postgresql",
    "cluster",
)
"""The ci value files the chart's conventions promise (more may appear)."""

WORKLOAD_KINDS: Final = ("StatefulSet", "Deployment", "DaemonSet", "Job", "Pod")
"""Kinds that carry a pod spec."""

LISTEN_FLAGS: Final = {
    "grpc": "--listen",
    "metrics": "--metrics-listen",
    "health": "--health-listen",
}
"""Container port name → the flag whose address binds it."""

HELM_TIMEOUT: Final = 60.0
"""Seconds one helm call may take; a render takes well under one."""

SCHEMAS: Final = Path(__file__).resolve().parent / "schemas"
"""Our own strict JSON schemas of the custom resources the chart may render."""

CUSTOM_RESOURCES: Final = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring.coreos.com-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-monitoring.coreos.com-v1.json",
    ("cert-manager.io/v1", "Certificate"): "certificate-cert-manager.io-v1.json",
}
"""(apiVersion, kind) → its schema in SCHEMAS: no CRD schema ships with kubernetes-validate."""


def tool(name: str) -> Path:
    """The dev-extra executable `name` beside the running interpreter; fails when missing."""
    path = Path(sys.executable).parent / name
    if not path.is_file():
        pytest.fail(
            f"{path} is missing: install the dev extras (pip install -e '.[dev]')", pytrace=False
        )
    return path


def ci_name(values_file: Path) -> str:
    """`network-tls` for `ci/network-tls-values.yaml`: the id of a parametrized test."""
    return values_file.name.removesuffix("-values.yaml")


def ci_file(name: str) -> Path:
    """The ci value file called `name` (`embedded`, `network`, ...); fails when absent."""
    path = CHART / "ci" / f"{name}-values.yaml"
    if not path.is_file():
        pytest.fail(f"{path.relative_to(REPO_ROOT)} is missing", pytrace=False)
    return path


def every_render() -> list[Any]:
    """pytest params (a tuple of value files each): the defaults, then each ci value file."""
    return [pytest.param((), id="defaults")] + [
        pytest.param((path,), id=ci_name(path)) for path in CI_VALUES
    ]


def network_renders() -> list[Any]:
    """pytest params of the ci value files in network mode."""
    return [
        pytest.param((path,), id=ci_name(path))
        for path in CI_VALUES
        if chart_values([path]).get("mode") == "network"
    ]


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `helm ARGS` from the repository root; the caller reads the exit code."""
    return subprocess.run(  # the arguments are the tests' own, never a shell string
        [str(tool("helm")), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=HELM_TIMEOUT,
        check=False,
    )


def _template_args(
    values_files: tuple[str, ...],
    set_values: tuple[str, ...],
    kube_version: str,
    api_versions: tuple[str, ...],
) -> list[str]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    args += ["--kube-version", kube_version]
    for api_version in api_versions:
        args += ["--api-versions", api_version]
    for values_file in values_files:
        args += ["-f", values_file]
    for assignment in set_values:
        args += ["--set", assignment]
    return args


def _key(
    values_files: Sequence[Path | str], set_values: Mapping[str, object] | Sequence[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    files = tuple(str(Path(path).resolve()) for path in values_files)
    if isinstance(set_values, Mapping):
        assignments = tuple(f"{name}={value}" for name, value in sorted(set_values.items()))
    else:
        assignments = tuple(set_values)
    return files, assignments


@functools.cache
def _template(
    values_files: tuple[str, ...],
    set_values: tuple[str, ...],
    kube_version: str,
    api_versions: tuple[str, ...],
) -> subprocess.CompletedProcess[str]:
    return run_helm(*_template_args(values_files, set_values, kube_version, api_versions))


def _describe(values_files: tuple[str, ...], set_values: tuple[str, ...], version: str) -> str:
    files = ", ".join(Path(path).name for path in values_files) or "defaults"
    sets = "".join(f" --set {assignment}" for assignment in set_values)
    return f"helm template ({files}{sets}, Kubernetes {version})"


def parse_stream(text: str) -> list[Manifest]:
    """The objects of a YAML stream, empty documents skipped."""
    objects: list[Manifest] = []
    for document in yaml.load_all(text, Loader=yaml.CSafeLoader):
        if document is None:
            continue
        assert isinstance(document, dict), f"a rendered document is not a mapping: {document!r}"
        objects.append(document)
    return objects


@functools.cache
def _parsed(
    values_files: tuple[str, ...],
    set_values: tuple[str, ...],
    kube_version: str,
    api_versions: tuple[str, ...],
) -> tuple[Manifest, ...]:
    result = _template(values_files, set_values, kube_version, api_versions)
    if result.returncode != 0:
        pytest.fail(
            f"{_describe(values_files, set_values, kube_version)} failed:\n{result.stderr}",
            pytrace=False,
        )
    return tuple(parse_stream(result.stdout))


def render(
    values_files: Sequence[Path | str] = (),
    *,
    set_values: Mapping[str, object] | Sequence[str] = (),
    kube_version: str = LATEST,
    api_versions: Sequence[str] = API_VERSIONS,
) -> list[Manifest]:
    """The objects `helm template hg CHART -n harness` renders; fails the test if helm fails.

    `set_values` is `{"gateway.logLevel": "debug"}` or `["gateway.logLevel=debug"]`. Cached
    per session; the result is a copy."""
    files, assignments = _key(values_files, set_values)
    return copy.deepcopy(list(_parsed(files, assignments, kube_version, tuple(api_versions))))


def render_fresh(
    values_files: Sequence[Path | str] = (),
    *,
    set_values: Mapping[str, object] | Sequence[str] = (),
) -> list[Manifest]:
    """A new render, never cached: for values the chart generates at random."""
    files, assignments = _key(values_files, set_values)
    result = run_helm(*_template_args(files, assignments, LATEST, API_VERSIONS))
    assert result.returncode == 0, result.stderr
    return parse_stream(result.stdout)


def render_error(
    values_files: Sequence[Path | str] = (),
    *,
    set_values: Mapping[str, object] | Sequence[str] = (),
    kube_version: str = LATEST,
    api_versions: Sequence[str] = API_VERSIONS,
) -> str:
    """helm's error output for a render that must fail; fails the test if it succeeds."""
    files, assignments = _key(values_files, set_values)
    result = _template(files, assignments, kube_version, tuple(api_versions))
    if result.returncode == 0:
        pytest.fail(
            f"{_describe(files, assignments, kube_version)} succeeded; it should have failed",
            pytrace=False,
        )
    return result.stderr


def chart_values(values_files: Sequence[Path | str] = ()) -> dict[str, Any]:
    """`values.yaml` with the value files merged over it, as helm merges them (maps deeply,
    everything else replaced; a null deletes the key)."""
    merged: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    for path in values_files:
        overlay = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        merged = _merge(merged, overlay)
    return merged


def _merge(base: dict[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    result = dict(base)
    for name, value in overlay.items():
        if value is None:
            result.pop(name, None)
        elif isinstance(value, Mapping) and isinstance(result.get(name), dict):
            result[name] = _merge(result[name], value)
        else:
            result[name] = value
    return result


# Custom resources


def is_custom_resource(obj: Manifest) -> bool:
    return (obj["apiVersion"], obj["kind"]) in CUSTOM_RESOURCES


@functools.cache
def _schema_registry() -> Registry[Any]:
    resources = []
    for path in sorted(SCHEMAS.glob("*.json")):
        contents = json.loads(path.read_text(encoding="utf-8"))
        resources.append((contents["$id"], Resource.from_contents(contents)))
    return Registry().with_resources(resources)


def schema_of(api_version: str, kind: str) -> dict[str, Any]:
    """Our JSON schema of a custom resource kind."""
    schema: dict[str, Any] = json.loads(
        (SCHEMAS / CUSTOM_RESOURCES[(api_version, kind)]).read_text(encoding="utf-8")
    )
    return schema


def schema_errors(schema: Mapping[str, Any]) -> list[str]:
    """Problems of a schema itself against the JSON Schema 2020-12 metaschema."""
    validator = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)
    return [str(error.message) for error in validator.iter_errors(schema)]


def custom_resource_errors(obj: Manifest) -> list[str]:
    """Where a rendered custom resource breaks our schema of its kind, one line each."""
    schema = schema_of(obj["apiVersion"], obj["kind"])
    validator = jsonschema.Draft202012Validator(schema, registry=_schema_registry())
    return [
        f"{ref(obj)}: {'.'.join(str(part) for part in error.absolute_path) or '(root)'}: "
        f"{error.message}"
        for error in validator.iter_errors(obj)
    ]


# Objects


def name_of(obj: Manifest) -> str:
    name = obj["metadata"]["name"]
    assert isinstance(name, str)
    return name


def ref(obj: Manifest) -> str:
    """`StatefulSet/hg-harness-gateway`: an object in a failure message."""
    return f"{obj['kind']}/{name_of(obj)}"


def of_kind(objects: Iterable[Manifest], *kinds: str) -> list[Manifest]:
    return [obj for obj in objects if obj["kind"] in kinds]


def find(objects: Iterable[Manifest], kind: str, name: str) -> Manifest | None:
    """The object of `kind` called `name`, or None; two of them fail."""
    found = [obj for obj in of_kind(objects, kind) if name_of(obj) == name]
    assert len(found) <= 1, f"{kind}/{name} is rendered {len(found)} times"
    return found[0] if found else None


def one(objects: Iterable[Manifest], kind: str, name: str) -> Manifest:
    """The object of `kind` called `name`; fails, naming what was rendered, when absent."""
    objects = list(objects)
    found = find(objects, kind, name)
    if found is None:
        rendered = ", ".join(sorted(ref(obj) for obj in objects))
        pytest.fail(f"{kind}/{name} is not rendered; rendered: {rendered}", pytrace=False)
    return found


def labels_of(obj: Manifest) -> dict[str, str]:
    return dict(obj["metadata"].get("labels") or {})


def annotations_of(obj: Manifest) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


def component(obj: Manifest) -> str | None:
    """The `app.kubernetes.io/component` label: gateway, registry, router, ..."""
    return labels_of(obj).get("app.kubernetes.io/component")


def hooks_of(obj: Manifest) -> list[str]:
    """The `helm.sh/hook` events `obj` runs at (`pre-install`, `test`, ...); none for an
    object of the release itself."""
    hooks = annotations_of(obj).get("helm.sh/hook", "")
    return [hook.strip() for hook in hooks.split(",") if hook.strip()]


def is_hook(obj: Manifest) -> bool:
    """Whether `obj` is a Helm hook (a `helm test` pod, the migration Job): it runs to
    completion at an event, and is not one of the release's long-running objects."""
    return bool(hooks_of(obj))


def is_helm_test(obj: Manifest) -> bool:
    """Whether `obj` is a `helm test` hook (run on demand, not part of the release)."""
    return "test" in hooks_of(obj)


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether an equality selector (a Service's, `matchLabels`) selects `labels`."""
    return bool(selector) and all(labels.get(name) == value for name, value in selector.items())


# Pods and containers


def workloads(objects: Iterable[Manifest], *, hooks: bool = True) -> list[Manifest]:
    """Every object with a pod spec; `hooks=False` leaves out hooks (`helm test` pods, the
    migration Job): what remains is the release's long-running workloads."""
    return [obj for obj in of_kind(objects, *WORKLOAD_KINDS) if hooks or not is_hook(obj)]


def hook_jobs(objects: Iterable[Manifest]) -> list[Manifest]:
    """The Jobs that run at install or upgrade (the migration Job), not `helm test`."""
    return [obj for obj in of_kind(objects, "Job") if is_hook(obj) and not is_helm_test(obj)]


def pod_template(workload: Manifest) -> Manifest:
    """The pod a workload runs: `{"metadata": ..., "spec": ...}` (a Pod is its own)."""
    if workload["kind"] == "Pod":
        return workload
    template = workload["spec"]["template"]
    assert isinstance(template, dict), ref(workload)
    return template


def pod_spec(workload: Manifest) -> Manifest:
    spec = pod_template(workload)["spec"]
    assert isinstance(spec, dict), ref(workload)
    return spec


def pod_labels(workload: Manifest) -> dict[str, str]:
    return dict(pod_template(workload).get("metadata", {}).get("labels") or {})


def pod_annotations(workload: Manifest) -> dict[str, str]:
    return dict(pod_template(workload).get("metadata", {}).get("annotations") or {})


def containers(workload: Manifest, *, init: bool = True) -> list[Manifest]:
    """The containers of a workload's pod, init containers first when `init`."""
    spec = pod_spec(workload)
    found = list(spec.get("initContainers") or []) if init else []
    return found + list(spec.get("containers") or [])


def long_running(objects: Iterable[Manifest]) -> Iterator[tuple[Manifest, Manifest]]:
    """(workload, container) for every main container of a release workload: the daemons,
    the Router and the Registry (not init containers, not hooks)."""
    for workload in workloads(objects, hooks=False):
        for container in containers(workload, init=False):
            yield workload, container


def command_line(container: Manifest) -> list[str]:
    """The container's `command` then `args`, as strings."""
    return [str(word) for word in (container.get("command") or []) + (container.get("args") or [])]


def flag_values(container: Manifest, flag: str) -> list[str]:
    """Every value given to `flag` (`--flag VALUE` or `--flag=VALUE`) in the command line."""
    words = command_line(container)
    values: list[str] = []
    for index, word in enumerate(words):
        if word == flag:
            assert index + 1 < len(words), f"{flag} ends the command line without a value"
            values.append(words[index + 1])
        elif word.startswith(flag + "="):
            values.append(word.removeprefix(flag + "="))
    return values


def flag(container: Manifest, name: str) -> str | None:
    """The one value of flag `name`, None when absent; given twice fails."""
    values = flag_values(container, name)
    assert len(values) <= 1, f"container {container['name']} passes {name} {len(values)} times"
    return values[0] if values else None


def port_of(address: str) -> int:
    """7770 for `0.0.0.0:7770` or `[::]:7770`."""
    host, separator, port = address.rpartition(":")
    assert separator, f"not a HOST:PORT address: {address!r}"
    assert host, f"no host in {address!r}"
    assert port.isdigit(), f"no port number in {address!r}"
    return int(port)


def host_of(address: str) -> str:
    return address.rpartition(":")[0]


def container_ports(container: Manifest) -> dict[str, int]:
    """Port name → containerPort; an unnamed port is listed under its number."""
    ports: dict[str, int] = {}
    for port in container.get("ports") or []:
        name = str(port.get("name", port["containerPort"]))
        assert name not in ports, f"container {container['name']} declares port {name} twice"
        ports[name] = int(port["containerPort"])
    return ports


def configmap_data(objects: Iterable[Manifest], name: str) -> dict[str, str] | None:
    """The data of the rendered ConfigMap `name`, None when not rendered."""
    found = find(objects, "ConfigMap", name)
    return None if found is None else {k: str(v) for k, v in (found.get("data") or {}).items()}


def environment(container: Manifest, objects: Iterable[Manifest]) -> dict[str, str]:
    """The variables the container sees from the chart: `envFrom` ConfigMaps rendered here,
    then `env` values (which win, as in Kubernetes). Secret values are not resolved."""
    objects = list(objects)
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        reference = source.get("configMapRef")
        if reference is not None:
            prefix = str(source.get("prefix", ""))
            data = configmap_data(objects, reference["name"]) or {}
            env.update({prefix + key: value for key, value in data.items()})
    for variable in container.get("env") or []:
        if "value" in variable:
            env[variable["name"]] = str(variable["value"])
    return env


def value_from(container: Manifest, name: str) -> Manifest | None:
    """The `valueFrom` of the container's variable `name` (`secretKeyRef`, `fieldRef`...),
    None when it has none or the variable is not set."""
    for variable in container.get("env") or []:
        if variable["name"] == name:
            source = variable.get("valueFrom")
            return None if source is None else dict(source)
    return None


FLAG_NAMES: Final = {
    "tls_cert_file": "--tls-cert",
    "tls_key_file": "--tls-key",
    "tls_client_ca_file": "--tls-client-ca",
    "peer_tls_ca_file": "--peer-tls-ca",
    "peer_tls_cert_file": "--peer-tls-cert",
    "peer_tls_key_file": "--peer-tls-key",
    "nats_creds_file": "--nats-creds",
    "nats_tls_ca_file": "--nats-tls-ca",
    "nats_tls_cert_file": "--nats-tls-cert",
    "nats_tls_key_file": "--nats-tls-key",
}
"""Settings whose flag is not `--` + the field with dashes (gateway/cli.py's `dest=`)."""


def setting(container: Manifest, objects: Iterable[Manifest], name: str) -> str | None:
    """A gateway setting as the process reads it: its flag over `HARNESS_NAME`.

    `name` is the settings field: `shutdown_grace` for `--shutdown-grace`, `tls_cert_file`
    for `--tls-cert`."""
    value = flag(container, FLAG_NAMES.get(name, "--" + name.replace("_", "-")))
    if value is not None:
        return value
    return environment(container, objects).get("HARNESS_" + name.upper())


def volumes(workload: Manifest) -> dict[str, Manifest]:
    """Volume name → volume of the workload's pod."""
    return {volume["name"]: volume for volume in pod_spec(workload).get("volumes") or []}


def mounts(container: Manifest) -> dict[str, str]:
    """mountPath → volume name of a container (subPath mounts included by their path)."""
    return {mount["mountPath"]: mount["name"] for mount in container.get("volumeMounts") or []}


def secret_data(secret: Manifest) -> dict[str, str]:
    """A Secret's values, `data` decoded from base64 and `stringData` as written."""
    values = {
        key: base64.b64decode(str(value)).decode("utf-8")
        for key, value in (secret.get("data") or {}).items()
    }
    values.update({key: str(value) for key, value in (secret.get("stringData") or {}).items()})
    return values


def file_source(workload: Manifest, container: Manifest, path: str) -> tuple[str, str, str] | None:
    """(kind, name, key) of the Secret or ConfigMap behind a file the container reads, None
    when no such volume holds it: the deepest mount above `path`, its `secret`, `configMap`
    or `projected` volume, and the item (or the key of the same name) for the file."""
    file = PurePosixPath(path)
    candidates = [
        (PurePosixPath(mount_path), volume)
        for mount_path, volume in mounts(container).items()
        if file.is_relative_to(mount_path)
    ]
    if not candidates:
        return None
    mount_path, volume_name = max(candidates, key=lambda candidate: len(candidate[0].parts))
    relative = str(file.relative_to(mount_path))
    volume = volumes(workload)[volume_name]
    sources: list[tuple[str, Manifest]] = []
    if "secret" in volume:
        sources.append(("Secret", {"name": volume["secret"]["secretName"], **volume["secret"]}))
    if "configMap" in volume:
        sources.append(("ConfigMap", volume["configMap"]))
    for source in (volume.get("projected") or {}).get("sources") or []:
        sources += [(kind, source[field]) for kind, field in _PROJECTED if field in source]
    for kind, source in sources:
        if not source.get("items"):
            return kind, str(source["name"]), relative  # the whole object: key = file name
        for item in source["items"]:
            if item["path"] == relative:
                return kind, str(source["name"]), str(item["key"])
    return None


_PROJECTED: Final = (("Secret", "secret"), ("ConfigMap", "configMap"))


def secret_file_source(
    workload: Manifest, container: Manifest, path: str
) -> tuple[str, str] | None:
    """(Secret name, key) behind a file the container reads, None when no Secret holds it."""
    source = file_source(workload, container, path)
    if source is None or source[0] != "Secret":
        return None
    return source[1], source[2]


def token_secret(values_files: Sequence[Path | str], token: str) -> tuple[str, str]:
    """(Secret name, key) the chart should read `token` (`adminToken`, `peerToken`) from:
    its existingSecret, else the Secret the chart generates."""
    auth = chart_values(values_files)["auth"][token]
    return (auth["existingSecret"] or f"{FULLNAME}-tokens", auth["key"])

"""What schemas cannot see in the chart's pods: probes on the health port the args name, ports
that match the listen flags, no container that can run as root, every Secret and ConfigMap a
pod reads rendered or declared existing, a grace period that covers the whole shutdown, and the
embedded default of one replica on its own volume (issue 14, items 2 and 5)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, Final

import pytest

from gateway.cli import _build_parser
from gateway.firewall.config import FirewallConfigError, load_firewall
from gateway.settings import Settings, SettingsError, load_settings, parse_duration
from tests.unit.deploy.chart_support import (
    FULLNAME,
    LISTEN_FLAGS,
    Manifest,
    chart_values,
    ci_file,
    command_line,
    component,
    container_ports,
    containers,
    environment,
    every_render,
    file_source,
    find,
    flag,
    host_of,
    is_helm_test,
    long_running,
    mounts,
    name_of,
    of_kind,
    one,
    pod_spec,
    port_of,
    ref,
    render,
    setting,
    volumes,
    workloads,
)

READINESS_SERVICE: Final = {
    "gateway": "harness.v1.HarnessEndpointService",
    "router": "",
    "registry": "",
}
"""The health service each component's readiness probe asks for (the chart's conventions)."""

PROBES: Final = ("startupProbe", "readinessProbe", "livenessProbe")
RUN_AS: Final = 10001
"""The image's user and group (deploy/Dockerfile)."""

DATA_DIRS: Final = {"gateway": "/var/lib/harness-gateway", "registry": "/var/lib/harness-registry"}
"""Where each component with a volume keeps its data (the chart's conventions)."""

ROLES: Final = {"gateway": "serve", "router": "router", "registry": "registry"}
"""The harness-gateway subcommand each component runs."""

CERT_MANAGER_KEYS: Final = ("tls.crt", "tls.key", "ca.crt")
"""The keys cert-manager writes into a Certificate's Secret."""

FILE_SETTINGS: Final = (
    "admin_token_file",
    "peer_token_file",
    "tls_cert_file",
    "tls_key_file",
    "tls_client_ca_file",
    "peer_tls_ca_file",
    "peer_tls_cert_file",
    "peer_tls_key_file",
    "firewall_config",
    "nats_creds_file",
    "nats_tls_ca_file",
    "nats_tls_cert_file",
    "nats_tls_key_file",
    "registry_key_file",
)
"""Settings naming a file the process reads, which must come from a mounted volume."""

DECLARING_KEYS: Final = frozenset({"existingSecret", "existingConfigMap", "secretName"})
"""Value keys that name a Secret or ConfigMap made outside the chart."""

SETTINGS_DEFAULTS: Final = Settings()


def _where(workload: Manifest, container: Manifest) -> str:
    return f"{ref(workload)} container {container['name']}"


@pytest.mark.parametrize("files", every_render())
def test_every_probe_is_a_grpc_probe_on_the_health_port_the_args_name(
    files: tuple[Path, ...],
) -> None:
    objects = render(files)
    problems: list[str] = []
    checked = 0
    for workload, container in long_running(objects):
        where = _where(workload, container)
        health = flag(container, "--health-listen")
        ports = container_ports(container)
        if health is None or "health" not in ports:
            problems.append(f"{where}: needs --health-listen and a port named health")
            continue
        if ports["health"] != port_of(health):
            problems.append(
                f"{where}: port health {ports['health']} is not --health-listen {health}"
            )
        readiness = READINESS_SERVICE.get(component(workload) or "")
        for probe_name in PROBES:
            probe = container.get(probe_name)
            if probe is None:
                problems.append(f"{where}: no {probe_name}")
                continue
            handlers = {"grpc", "httpGet", "tcpSocket", "exec"} & probe.keys()
            grpc = probe.get("grpc") or {}
            if handlers != {"grpc"}:
                problems.append(f"{where}: {probe_name} uses {sorted(handlers)}, not grpc alone")
            elif grpc.get("port") != port_of(health) or not isinstance(grpc.get("port"), int):
                problems.append(f"{where}: {probe_name} port {grpc.get('port')!r} is not {health}")
            elif not isinstance(grpc.get("service"), str):
                problems.append(f"{where}: {probe_name} names no service")
            expected = readiness if probe_name == "readinessProbe" else "liveness"
            if expected is not None and grpc.get("service") != expected:
                problems.append(
                    f"{where}: {probe_name} asks for {grpc.get('service')!r}, not {expected!r}"
                )
            checked += 1
    assert problems == []
    assert checked >= len(PROBES), "no probe was checked"


@pytest.mark.parametrize("files", every_render())
def test_container_ports_are_the_ports_of_the_listen_flags(files: tuple[Path, ...]) -> None:
    problems: list[str] = []
    for workload, container in long_running(render(files)):
        where = _where(workload, container)
        ports = container_ports(container)
        if set(ports) != set(LISTEN_FLAGS):
            problems.append(f"{where}: ports {sorted(ports)}, expected {sorted(LISTEN_FLAGS)}")
        for port_name, listen_flag in LISTEN_FLAGS.items():
            address = flag(container, listen_flag)
            if address is None:
                problems.append(f"{where}: no {listen_flag}")
                continue
            if host_of(address) != "0.0.0.0":
                problems.append(f"{where}: {listen_flag} {address} does not listen on 0.0.0.0")
            if ports.get(port_name) != port_of(address):
                problems.append(
                    f"{where}: port {port_name} {ports.get(port_name)} is not {listen_flag} {address}"
                )
    assert problems == []


def _security_problems(workload: Manifest) -> Iterator[str]:
    spec = pod_spec(workload)
    pod = spec.get("securityContext") or {}
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(host) is True:
            yield f"{ref(workload)}: {host} is on"
    for container in containers(workload):
        where = _where(workload, container)
        own = container.get("securityContext") or {}
        effective = {**pod, **own}  # a container's field overrides the pod's
        if effective.get("runAsNonRoot") is not True:
            yield f"{where}: runAsNonRoot is not true"
        user = effective.get("runAsUser")
        if not isinstance(user, int) or user == 0:
            yield f"{where}: runAsUser is {user!r}, not a non-zero uid"
        if own.get("allowPrivilegeEscalation") is not False:
            yield f"{where}: allowPrivilegeEscalation is not false"
        if own.get("privileged") is True:
            yield f"{where}: privileged"
        if own.get("readOnlyRootFilesystem") is not True:
            yield f"{where}: readOnlyRootFilesystem is not true"
        capabilities = own.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            yield f"{where}: capabilities do not drop ALL"
        if capabilities.get("add"):
            yield f"{where}: adds capabilities {capabilities['add']}"
        seccomp = effective.get("seccompProfile") or {}
        if seccomp.get("type") != "RuntimeDefault":
            yield f"{where}: seccompProfile is {seccomp!r}, not RuntimeDefault"


@pytest.mark.parametrize("files", every_render())
def test_no_pod_or_container_can_run_as_root(files: tuple[Path, ...]) -> None:
    """Test pods and init containers included: the restricted Pod Security Standard."""
    objects = render(files)
    assert workloads(objects)
    assert [problem for obj in workloads(objects) for problem in _security_problems(obj)] == []


@pytest.mark.parametrize("files", every_render())
def test_every_pod_runs_as_the_image_user_and_every_container_has_resources(
    files: tuple[Path, ...],
) -> None:
    problems: list[str] = []
    for workload in workloads(render(files)):
        pod = pod_spec(workload).get("securityContext") or {}
        problems.extend(
            f"{ref(workload)}: pod {field} is {pod.get(field)!r}"
            for field in ("runAsUser", "runAsGroup", "fsGroup")
            if pod.get(field) != RUN_AS
        )
        for container in containers(workload):
            requests = (container.get("resources") or {}).get("requests") or {}
            if not {"cpu", "memory"} <= requests.keys():
                problems.append(f"{_where(workload, container)}: requests {requests!r}")
    assert problems == []


def test_the_helm_test_pod_is_a_test_hook() -> None:
    tests = [obj for obj in render() if is_helm_test(obj)]
    assert [obj["kind"] for obj in tests] == ["Pod"]


# Secrets and ConfigMaps


def _references(workload: Manifest) -> Iterator[tuple[str, str, str | None]]:
    """(kind, name, key or None) of every Secret and ConfigMap the pod reads."""
    for volume in volumes(workload).values():
        if "secret" in volume:
            secret = volume["secret"]
            yield from _items("Secret", secret["secretName"], secret.get("items"))
        if "configMap" in volume:
            config = volume["configMap"]
            yield from _items("ConfigMap", config["name"], config.get("items"))
        for source in (volume.get("projected") or {}).get("sources") or []:
            if "secret" in source:
                yield from _items("Secret", source["secret"]["name"], source["secret"].get("items"))
            if "configMap" in source:
                config = source["configMap"]
                yield from _items("ConfigMap", config["name"], config.get("items"))
    for container in containers(workload):
        for env_from in container.get("envFrom") or []:
            if "secretRef" in env_from:
                yield "Secret", env_from["secretRef"]["name"], None
            if "configMapRef" in env_from:
                yield "ConfigMap", env_from["configMapRef"]["name"], None
        for variable in container.get("env") or []:
            source = variable.get("valueFrom") or {}
            if "secretKeyRef" in source:
                yield "Secret", source["secretKeyRef"]["name"], source["secretKeyRef"]["key"]
            if "configMapKeyRef" in source:
                selector = source["configMapKeyRef"]
                yield "ConfigMap", selector["name"], selector["key"]


def _items(
    kind: str, name: str, items: list[dict[str, str]] | None
) -> Iterator[tuple[str, str, str | None]]:
    if not items:
        yield kind, name, None
    for item in items or []:
        yield kind, name, item["key"]


def _declared(values: Any) -> set[str]:
    """Every name under an existingSecret, existingConfigMap or secretName value."""
    found: set[str] = set()
    if isinstance(values, dict):
        for key, value in values.items():
            if key in DECLARING_KEYS and isinstance(value, str) and value:
                found.add(value)
            else:
                found |= _declared(value)
    elif isinstance(values, list):
        for value in values:
            found |= _declared(value)
    return found


def _available(
    objects: list[Manifest], files: tuple[Path, ...]
) -> tuple[dict[tuple[str, str], set[str]], set[str]]:
    """The (kind, name) → keys of every Secret and ConfigMap the render makes (a cert-manager
    Certificate's Secret included), and the names the values declare existing."""
    rendered: dict[tuple[str, str], set[str]] = {}
    for obj in of_kind(objects, "Secret", "ConfigMap"):
        keys = set(obj.get("data") or {}) | set(obj.get("stringData") or {})
        rendered[(obj["kind"], name_of(obj))] = keys
    for certificate in of_kind(objects, "Certificate"):
        rendered[("Secret", certificate["spec"]["secretName"])] = set(CERT_MANAGER_KEYS)
    return rendered, _declared(chart_values(files))


@pytest.mark.parametrize("files", every_render())
def test_every_secret_and_configmap_a_pod_reads_is_rendered_or_declared_existing(
    files: tuple[Path, ...],
) -> None:
    objects = render(files)
    rendered, declared = _available(objects, files)
    problems: list[str] = []
    for workload in workloads(objects):
        for kind, name, key in _references(workload):
            if (kind, name) in rendered:
                if key is not None and key not in rendered[(kind, name)]:
                    problems.append(f"{ref(workload)} reads key {key} of {kind}/{name}: absent")
            elif name not in declared:
                problems.append(f"{ref(workload)} reads {kind}/{name}: not rendered nor declared")
    assert problems == []


@pytest.mark.parametrize("files", every_render())
def test_every_file_a_process_is_told_to_read_is_mounted_from_a_secret_or_configmap(
    files: tuple[Path, ...],
) -> None:
    """Token, TLS and firewall files: each flag or HARNESS_* path lies in a volume whose
    Secret or ConfigMap holds that key (or is declared existing)."""
    objects = render(files)
    rendered, declared = _available(objects, files)
    problems: list[str] = []
    checked = 0
    for workload, container in long_running(objects):
        for name in FILE_SETTINGS:
            path = setting(container, objects, name)
            if path is None:
                continue
            checked += 1
            source = file_source(workload, container, path)
            where = f"{_where(workload, container)} {name} {path}"
            if source is None:
                problems.append(f"{where}: no Secret or ConfigMap volume holds it")
            elif (source[0], source[1]) in rendered:
                if source[2] not in rendered[(source[0], source[1])]:
                    problems.append(f"{where}: {source[0]}/{source[1]} has no key {source[2]}")
            elif source[1] not in declared:
                problems.append(f"{where}: {source[0]}/{source[1]} is not rendered nor declared")
    assert problems == []
    assert checked, "no file setting was checked"


@pytest.mark.parametrize("files", every_render())
def test_every_command_line_and_variable_is_accepted_by_the_gateway(
    files: tuple[Path, ...],
) -> None:
    """The image's entrypoint is `harness-gateway`: the args are its subcommand and flags,
    parsed by the gateway's own parser, then loaded with the HARNESS_* variables the pod
    sees, as `main` does; a flag or a value the gateway refuses would crash-loop the pod."""
    objects = render(files)
    for workload, container in long_running(objects):
        where = _where(workload, container)
        words = command_line(container)
        if words and PurePosixPath(words[0]).name == "harness-gateway":
            words = words[1:]  # the image's entrypoint, spelt out
        role = words[0] if words else ""
        assert role == ROLES.get(component(workload) or ""), f"{where} runs {role}"
        try:
            # The parser gateway/cli.py builds: the one definition of each command's flags.
            arguments = _build_parser().parse_args(words)
        except SystemExit:
            pytest.fail(f"{where}: harness-gateway refuses {words}", pytrace=False)
        flags = {key: value for key, value in vars(arguments).items() if key != "command"}
        env = environment(container, objects)
        defaults = {} if role == "serve" else {"role": role}
        try:
            load_settings(env=env, flags=flags, defaults=defaults)
        except SettingsError as error:
            pytest.fail(f"{where}: {error.errors}", pytrace=False)


def test_the_rendered_firewall_file_is_one_the_gateway_accepts(tmp_path: Path) -> None:
    config = one(render([ci_file("firewall")]), "ConfigMap", f"{FULLNAME}-firewall")
    ((key, text),) = config["data"].items()
    path = tmp_path / key
    path.write_text(text, encoding="utf-8")
    try:
        spec = load_firewall(path)
    except FirewallConfigError as error:
        pytest.fail(f"the rendered firewall file is refused: {error.problems}", pytrace=False)
    assert [middleware.id for middleware in spec.middlewares] == ["tenants"]


@pytest.mark.parametrize("files", every_render())
def test_every_secret_volume_is_owner_and_group_read_only(files: tuple[Path, ...]) -> None:
    """Mode 0440 (the chart's conventions): nobody writes a token, others read none."""
    problems: list[str] = []
    for workload in workloads(render(files)):
        for volume in volumes(workload).values():
            source = volume.get("secret") or volume.get("projected")
            if source is None:
                continue
            if "projected" in volume and not any(
                "secret" in part for part in source.get("sources") or []
            ):
                continue
            if source.get("defaultMode") != 0o440:
                problems.append(
                    f"{ref(workload)} volume {volume['name']}: {source.get('defaultMode')}"
                )
    assert problems == []


# Shutdown


def _seconds(container: Manifest, objects: list[Manifest], name: str) -> float:
    text = setting(container, objects, name)
    default = getattr(SETTINGS_DEFAULTS, name)
    assert isinstance(default, float)
    return default if text is None else parse_duration(text)


@pytest.mark.parametrize("files", every_render())
def test_the_grace_period_covers_the_prestop_sleep_the_shutdown_delay_and_grace(
    files: tuple[Path, ...],
) -> None:
    objects = render(files)
    problems: list[str] = []
    for workload, container in long_running(objects):
        where = _where(workload, container)
        pre_stop = ((container.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}
        command = [str(word) for word in pre_stop.get("command") or []]
        if not command:
            if component(workload) == "gateway":
                problems.append(f"{where}: no preStop sleep")
            sleep = 0.0
        elif PurePosixPath(command[0]).name != "sleep" or len(command) != 2:
            problems.append(f"{where}: preStop {command} is not [sleep, N]")
            continue
        else:
            sleep = float(command[1])
        needed = sleep + _seconds(container, objects, "shutdown_delay")
        needed += _seconds(container, objects, "shutdown_grace")
        grace = pod_spec(workload).get("terminationGracePeriodSeconds", 30)
        if grace < needed:
            problems.append(f"{where}: terminationGracePeriodSeconds {grace} < {needed}")
    assert problems == []


# Volumes


@pytest.mark.parametrize("files", every_render())
def test_every_process_writes_only_to_tmp_and_its_data_volume(files: tuple[Path, ...]) -> None:
    """A read-only root filesystem: /tmp is an emptyDir, the data directory a claim of the
    StatefulSet's volumeClaimTemplates (or, for a process whose store is in PostgreSQL and
    so keeps only its lock there, an emptyDir), and the process is told to use it."""
    objects = render(files)
    problems: list[str] = []
    for workload, container in long_running(objects):
        where = _where(workload, container)
        pod_volumes = volumes(workload)
        container_mounts = mounts(container)
        if "emptyDir" not in pod_volumes.get(container_mounts.get("/tmp", ""), {}):
            problems.append(f"{where}: /tmp is not an emptyDir")
        data_dir = DATA_DIRS.get(component(workload) or "")
        if data_dir is None:
            continue
        claims = {
            claim["metadata"]["name"]
            for claim in workload["spec"].get("volumeClaimTemplates") or []
        }
        volume = container_mounts.get(data_dir)
        in_postgresql = setting(container, objects, "store") is not None
        if in_postgresql and "emptyDir" in pod_volumes.get(volume or "", {}):
            pass  # nothing on it outlives the pod, by design
        elif workload["kind"] != "StatefulSet" or volume not in claims:
            problems.append(f"{where}: {data_dir} is not a volumeClaimTemplate")
        # The data directory may be the volume or a directory inside it.
        configured = setting(container, objects, "data_dir")
        if configured is None or not PurePosixPath(configured).is_relative_to(data_dir):
            problems.append(f"{where}: the data directory {configured} is not in {data_dir}")
    assert problems == []


def test_the_default_render_is_one_embedded_daemon_with_its_own_volume() -> None:
    objects = render()
    assert [ref(obj) for obj in workloads(objects, hooks=False)] == [f"StatefulSet/{FULLNAME}"]
    statefulset = find(objects, "StatefulSet", FULLNAME)
    assert statefulset is not None
    assert statefulset["spec"].get("replicas", 1) == 1
    claims = statefulset["spec"].get("volumeClaimTemplates") or []
    assert [claim["metadata"]["name"] for claim in claims] == ["data"]
    (container,) = containers(statefulset, init=False)
    assert flag(container, "--router") is None
    assert flag(container, "--registry") is None
    assert not [obj for obj in objects if component(obj) in ("router", "registry")]

"""Network mode on an existing NATS JetStream and an existing PostgreSQL (issue: Helm values
for the network mode pointing at them): with `network.router.backend: nats` no Router runs and
every daemon joins the servers the values list, with the NATS files from the Secrets they
name; with `network.postgresql` every process that opens the store gets the one URL, never a
password in it, and its password from a Secret; the Registry may then have more replicas,
all signing with one key from one Secret; and the migration hook Job runs `harness-gateway
migrate` with command lines the gateway's own parser accepts, before anything of the release
exists. Half configurations fail the render, naming the value."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from harness_contract.ids import unb64

from gateway.cli import _build_parser, _role_defaults
from gateway.registry.postgres import read_signing_seed
from gateway.settings import SettingsError, load_settings
from tests.unit.deploy.chart_support import (
    CI_VALUES,
    FULLNAME,
    Manifest,
    annotations_of,
    chart_values,
    ci_file,
    ci_name,
    command_line,
    component,
    containers,
    environment,
    file_source,
    find,
    flag,
    hook_jobs,
    hooks_of,
    long_running,
    name_of,
    network_renders,
    of_kind,
    one,
    pod_spec,
    ref,
    render,
    render_error,
    render_fresh,
    secret_data,
    secret_file_source,
    setting,
    value_from,
    volumes,
    workloads,
)

SEED_BYTES: Final = 32
"""An Ed25519 seed: what `--registry-key-file` holds, as b64 (43 characters)."""

URL_WITH_PASSWORD: Final = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s@:]+:[^/\s@]*@", re.IGNORECASE)
"""A URL whose userinfo carries a password (`scheme://user:secret@host`)."""

PASSWORD_PARAMETER: Final = re.compile(r"[?&]password=", re.IGNORECASE)

MIGRATION_HOOKS: Final = {"pre-install", "pre-upgrade"}
"""The migration runs before a release's pods are created and before they are replaced."""

DELETE_POLICY: Final = {"before-hook-creation", "hook-succeeded"}


def _network(files: tuple[Path, ...]) -> dict[str, Any]:
    network = chart_values(files)["network"]
    assert isinstance(network, dict)
    return network


def _uses_nats(files: tuple[Path, ...]) -> bool:
    return bool(_network(files)["router"]["backend"] == "nats")


def _uses_postgresql(files: tuple[Path, ...]) -> bool:
    return bool(_network(files)["postgresql"]["enabled"])


def postgresql_renders() -> list[Any]:
    return [param for param in network_renders() if _uses_postgresql(param.values[0])]


def nats_renders() -> list[Any]:
    return [param for param in network_renders() if _uses_nats(param.values[0])]


def _gateways(objects: list[Manifest]) -> list[tuple[Manifest, Manifest]]:
    found = [(w, c) for w, c in long_running(objects) if component(w) == "gateway"]
    assert found, "no gateway is rendered"
    return found


def _every_container(objects: list[Manifest]) -> Iterator[tuple[Manifest, Manifest]]:
    """(workload, container) of every container of every workload, hooks and init included."""
    for workload in workloads(objects):
        for container in containers(workload):
            yield workload, container


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


# NATS JetStream as the Router


@pytest.mark.parametrize("files", nats_renders())
def test_with_nats_no_router_runs_and_every_daemon_joins_the_configured_servers(
    files: tuple[Path, ...],
) -> None:
    objects = render(files)
    router_objects = [ref(obj) for obj in objects if component(obj) == "router"]
    assert router_objects == [], "backend nats renders no Router"
    for certificate in of_kind(objects, "Certificate"):
        assert not [name for name in certificate["spec"]["dnsNames"] if "-router" in name]
    servers = ",".join(_network(files)["nats"]["servers"])
    for workload, container in _gateways(objects):
        assert setting(container, objects, "router") == servers, ref(workload)
    for workload, container in long_running(objects):
        if component(workload) != "gateway":
            assert setting(container, objects, "router") is None, ref(workload)


@pytest.mark.parametrize("files", nats_renders())
def test_every_daemon_reads_the_nats_files_from_the_secrets_the_values_name(
    files: tuple[Path, ...],
) -> None:
    nats = _network(files)["nats"]
    expected: dict[str, tuple[str, str] | None] = {
        "nats_creds_file": (
            (nats["creds"]["secretName"], nats["creds"]["key"])
            if nats["creds"]["secretName"]
            else None
        ),
        "nats_tls_ca_file": (nats["tls"]["secretName"], "ca.crt")
        if nats["tls"]["secretName"]
        else None,
    }
    client = nats["tls"].get("clientCertificate", False)
    expected["nats_tls_cert_file"] = (nats["tls"]["secretName"], "tls.crt") if client else None
    expected["nats_tls_key_file"] = (nats["tls"]["secretName"], "tls.key") if client else None
    objects = render(files)
    for workload, container in _gateways(objects):
        for name, source in expected.items():
            path = setting(container, objects, name)
            found = None if path is None else secret_file_source(workload, container, path)
            assert found == source, f"{ref(workload)} {name} {path}"


@pytest.mark.parametrize("files", nats_renders())
def test_every_daemon_passes_the_same_stream_settings(files: tuple[Path, ...]) -> None:
    """The daemons share one stream: each states its limits, and all state the same ones."""
    objects = render(files)
    names = (
        "nats_subject_prefix",
        "nats_replicas",
        "nats_max_age",
        "nats_duplicate_window",
        "ring_max_entries",
        "ring_max_bytes",
    )
    network = _network(files)
    wanted = {
        "nats_subject_prefix": str(network["nats"]["subjectPrefix"]),
        "nats_replicas": str(network["nats"]["replicas"]),
        "nats_max_age": str(network["nats"]["maxAge"]),
        "nats_duplicate_window": str(network["nats"]["duplicateWindow"]),
        "ring_max_entries": str(network["router"]["ringMaxEntries"]),
        "ring_max_bytes": str(network["router"]["ringMaxBytes"]),
    }
    for workload, container in _gateways(objects):
        assert {name: setting(container, objects, name) for name in names} == wanted, ref(workload)


# PostgreSQL as the store


@pytest.mark.parametrize("files", network_renders())
def test_the_store_url_reaches_the_daemons_the_registry_and_the_migration_only(
    files: tuple[Path, ...],
) -> None:
    objects = render(files)
    postgresql = _network(files)["postgresql"]
    url = postgresql["url"] if postgresql["enabled"] else None
    for workload, container in _every_container(objects):
        store = setting(container, objects, "store")
        if component(workload) in ("gateway", "registry", "migrate"):
            assert store == url, f"{ref(workload)} container {container['name']}"
        else:
            assert store is None, f"{ref(workload)} container {container['name']}"


@pytest.mark.parametrize("files", postgresql_renders())
def test_every_process_on_postgresql_takes_its_password_and_tls_from_secrets(
    files: tuple[Path, ...],
) -> None:
    objects = render(files)
    postgresql = _network(files)["postgresql"]
    password = postgresql["password"]
    root_cert = postgresql["sslRootCert"]
    checked = 0
    for workload, container in _every_container(objects):
        if setting(container, objects, "store") is None:
            continue
        checked += 1
        where = f"{ref(workload)} container {container['name']}"
        env = environment(container, objects)
        assert "PGPASSWORD" not in env, f"{where}: a password in the pod spec"
        wanted_password = (
            {"secretKeyRef": {"name": password["secretName"], "key": password["key"]}}
            if password["secretName"]
            else None
        )
        assert value_from(container, "PGPASSWORD") == wanted_password, where
        assert env.get("PGSSLMODE") == (postgresql["sslMode"] or None), where
        ca_path = env.get("PGSSLROOTCERT")
        if root_cert["secretName"]:
            assert ca_path is not None, where
            source = secret_file_source(workload, container, ca_path)
            assert source == (root_cert["secretName"], root_cert["key"]), where
        else:
            assert ca_path is None, where
    assert checked >= 2, "the daemons and the Registry open the store"


@pytest.mark.parametrize("files", postgresql_renders())
def test_each_daemon_keeps_its_agents_under_its_own_pod_name(files: tuple[Path, ...]) -> None:
    """The owner a daemon's agents are kept under (and leased): the pod's name, one per
    replica and the same across restarts."""
    objects = render(files)
    for workload, container in _gateways(objects):
        assert flag(container, "--store-owner") is None, ref(workload)
        owner = value_from(container, "HARNESS_STORE_OWNER")
        assert owner == {"fieldRef": {"fieldPath": "metadata.name"}}, ref(workload)


@pytest.mark.parametrize("files", [pytest.param((), id="defaults"), *network_renders()])
def test_no_password_is_in_any_url_or_plain_value_the_chart_renders(
    files: tuple[Path, ...],
) -> None:
    """Secrets' data aside, nothing rendered carries a password: no `user:secret@` URL, no
    `password=` parameter, no PGPASSWORD given as a value."""
    objects = render(files)
    problems = [
        f"{ref(obj)}: {text}"
        for obj in objects
        if obj["kind"] != "Secret"
        for text in _strings(obj)
        if URL_WITH_PASSWORD.search(text) or PASSWORD_PARAMETER.search(text)
    ]
    problems += [
        f"{ref(workload)} container {container['name']}: PGPASSWORD as a value"
        for workload, container in _every_container(objects)
        for variable in container.get("env") or []
        if variable["name"] == "PGPASSWORD" and "value" in variable
    ]
    assert problems == []


# The Registry on PostgreSQL


@pytest.mark.parametrize("files", network_renders())
def test_the_registry_has_more_than_one_replica_only_on_postgresql(
    files: tuple[Path, ...],
) -> None:
    objects = render(files)
    registry = one(objects, "StatefulSet", f"{FULLNAME}-registry")
    replicas = registry["spec"]["replicas"]
    assert replicas == _network(files)["registry"]["replicas"]
    (container,) = containers(registry, init=False)
    if replicas > 1:
        assert setting(container, objects, "store") is not None
        assert setting(container, objects, "registry_key_file") is not None


@pytest.mark.parametrize("files", postgresql_renders())
def test_every_registry_replica_signs_with_the_one_key_of_the_signing_key_secret(
    files: tuple[Path, ...],
) -> None:
    objects = render(files)
    signing = _network(files)["registry"]["signingKey"]
    secret_name = signing["existingSecret"] or f"{FULLNAME}-registry-key"
    registry = one(objects, "StatefulSet", f"{FULLNAME}-registry")
    (container,) = containers(registry, init=False)
    path = setting(container, objects, "registry_key_file")
    assert path is not None
    assert secret_file_source(registry, container, path) == (secret_name, signing["key"])
    # No replica keeps anything of its own: no claim, the data directory an emptyDir.
    assert not registry["spec"].get("volumeClaimTemplates")
    generated = find(objects, "Secret", f"{FULLNAME}-registry-key")
    assert (generated is None) == bool(signing["existingSecret"])


def test_the_generated_signing_key_is_b64_of_32_random_bytes_the_registry_reads_and_kept(
    tmp_path: Path,
) -> None:
    """The form `harness-gateway registry --registry-key-file` reads (checked by its own
    reader), new at each offline render, and left behind on uninstall like the tokens."""
    files = (ci_file("network-nats-postgresql"),)
    secrets = [one(render_fresh(files), "Secret", f"{FULLNAME}-registry-key") for _ in range(2)]
    keys = [secret_data(secret)["registry-key"] for secret in secrets]
    assert keys[0] != keys[1], "the key is a constant of the chart"
    for secret, key in zip(secrets, keys, strict=True):
        assert annotations_of(secret).get("helm.sh/resource-policy") == "keep"
        seed = unb64(key)
        assert seed is not None, key
        assert len(seed) == SEED_BYTES
        path = tmp_path / "registry-key"
        path.write_text(key, encoding="utf-8")
        path.chmod(0o600)
        assert read_signing_seed(path) == seed


# The migration hook Job


def _migration_jobs(objects: list[Manifest]) -> list[Manifest]:
    return [job for job in hook_jobs(objects) if component(job) == "migrate"]


@pytest.mark.parametrize("files", [pytest.param((path,), id=ci_name(path)) for path in CI_VALUES])
def test_the_migration_job_is_rendered_exactly_when_postgresql_and_the_toggle_are_on(
    files: tuple[Path, ...],
) -> None:
    postgresql = _network(files)["postgresql"]
    wanted = (
        chart_values(files)["mode"] in ("network", "cluster")
        and postgresql["enabled"]
        and postgresql["migration"]["enabled"]
    )
    assert len(_migration_jobs(render(files))) == (1 if wanted else 0)


def _migration_renders() -> list[Any]:
    return [
        param
        for param in postgresql_renders()
        if _network(param.values[0])["postgresql"]["migration"]["enabled"]
    ]


@pytest.mark.parametrize("files", _migration_renders())
def test_the_migration_job_runs_before_install_and_upgrade_and_is_replaced_each_time(
    files: tuple[Path, ...],
) -> None:
    (job,) = _migration_jobs(render(files))
    assert set(hooks_of(job)) == MIGRATION_HOOKS
    policy = annotations_of(job).get("helm.sh/hook-delete-policy", "")
    assert {part.strip() for part in policy.split(",")} == DELETE_POLICY
    spec = pod_spec(job)
    assert spec["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] == _network(files)["postgresql"]["migration"]["backoffLimit"]
    assert spec.get("automountServiceAccountToken") is False


@pytest.mark.parametrize("files", _migration_renders())
def test_the_migration_job_migrates_the_store_then_the_registry_with_commands_that_parse(
    files: tuple[Path, ...],
) -> None:
    """The init container migrates the daemons' store tables, the container the Registry's;
    each command line is parsed by the gateway's parser and loaded as `main` loads it."""
    objects = render(files)
    (job,) = _migration_jobs(objects)
    init, main = pod_spec(job)["initContainers"], pod_spec(job)["containers"]
    assert (len(init), len(main)) == (1, 1)
    targets = []
    for container in (*init, *main):
        words = command_line(container)
        where = f"{ref(job)} container {container['name']}"
        try:
            arguments = _build_parser().parse_args(words)
        except SystemExit:
            pytest.fail(f"{where}: harness-gateway refuses {words}", pytrace=False)
        assert arguments.command == "migrate", where
        options = vars(arguments)
        registry = bool(options.pop("migrate_registry"))
        assert options.pop("migrate_check") is False, f"{where}: --check changes nothing"
        flags = {key: value for key, value in options.items() if key != "command"}
        try:
            settings = load_settings(
                env=environment(container, objects),
                flags=flags,
                defaults=_role_defaults("registry" if registry else "migrate"),
            )
        except SettingsError as error:
            pytest.fail(f"{where}: {error.errors}", pytrace=False)
        assert settings.store == _network(files)["postgresql"]["url"], where
        targets.append("registry" if registry else "store")
    assert targets == ["store", "registry"]


@pytest.mark.parametrize("files", _migration_renders())
def test_the_migration_job_reads_nothing_the_release_has_not_created_yet(
    files: tuple[Path, ...],
) -> None:
    """A pre-install hook runs before the chart's own objects exist: it may read only
    Secrets made outside the chart, no ConfigMap of the chart, and no ServiceAccount the
    chart creates."""
    objects = render(files)
    (job,) = _migration_jobs(objects)
    rendered = {(obj["kind"], name_of(obj)) for obj in objects if not hooks_of(obj)}
    spec = pod_spec(job)
    problems = []
    if chart_values(files)["serviceAccount"]["create"] and "serviceAccountName" in spec:
        problems.append(f"ServiceAccount {spec['serviceAccountName']} is the chart's")
    for volume in volumes(job).values():
        secret = (volume.get("secret") or {}).get("secretName")
        if secret is not None and ("Secret", secret) in rendered:
            problems.append(f"volume {volume['name']} reads the chart's Secret {secret}")
        assert "configMap" not in volume, volume
        assert "projected" not in volume, volume
    for container in containers(job):
        problems += [
            f"{container['name']} envFrom {source}" for source in container.get("envFrom") or []
        ]
        for variable in container.get("env") or []:
            reference = (variable.get("valueFrom") or {}).get("secretKeyRef")
            if reference is not None and ("Secret", reference["name"]) in rendered:
                problems.append(f"{container['name']} {variable['name']} reads the chart's")
        for path in (environment(container, objects).get("PGSSLROOTCERT"),):
            if path is not None:
                assert file_source(job, container, path) is not None, path
    assert problems == []


def test_the_migration_job_runs_under_the_named_service_account_when_the_chart_makes_none() -> None:
    objects = render([ci_file("network-postgresql")])
    (job,) = _migration_jobs(objects)
    assert pod_spec(job)["serviceAccountName"] == "harness"


# NetworkPolicy


@pytest.mark.parametrize(
    "files",
    [
        param
        for param in network_renders()
        if chart_values(param.values[0])["networkPolicy"]["enabled"]
    ],
)
def test_network_policies_restrict_ingress_only_so_nats_and_postgresql_stay_reachable(
    files: tuple[Path, ...],
) -> None:
    """The chart's policies name no egress: the daemons, the Registry and the migration Job
    reach NATS and PostgreSQL wherever they run (docs/deploy.md)."""
    objects = render(files)
    policies = of_kind(objects, "NetworkPolicy")
    assert policies
    for policy in policies:
        assert policy["spec"]["policyTypes"] == ["Ingress"], ref(policy)
        assert "egress" not in policy["spec"], ref(policy)
    if _uses_nats(files):
        assert find(objects, "NetworkPolicy", f"{FULLNAME}-router") is None


# Volumes


def test_persistence_off_leaves_no_claim_and_an_emptydir_data_directory() -> None:
    objects = render([ci_file("network-nats-postgresql")])
    for statefulset in of_kind(objects, "StatefulSet"):
        assert not statefulset["spec"].get("volumeClaimTemplates"), ref(statefulset)
        assert "emptyDir" in volumes(statefulset)["data"], ref(statefulset)


# Half configurations


@pytest.mark.parametrize(
    ("values", "named"),
    [
        pytest.param(
            {"mode": "network", "network": {"registry": {"replicas": 2}}},
            "network.registry.replicas 2 needs network.postgresql.enabled",
            id="registry-replicas-without-postgresql",
        ),
        pytest.param(
            {"mode": "network", "network": {"router": {"backend": "nats"}}},
            "needs network.nats.servers",
            id="nats-without-servers",
        ),
        pytest.param(
            {
                "mode": "network",
                "network": {
                    "router": {"backend": "nats"},
                    "nats": {"servers": ["nats://a.example:4222", "tls://b.example:4222"]},
                },
            },
            "mixes nats:// and tls://",
            id="mixed-nats-schemes",
        ),
        pytest.param(
            {"mode": "network", "network": {"nats": {"servers": ["nats://a.example:4222"]}}},
            "network.router.backend is not nats",
            id="nats-servers-with-the-standalone-router",
        ),
        pytest.param(
            {
                "mode": "network",
                "network": {
                    "router": {"backend": "nats"},
                    "nats": {
                        "servers": ["tls://a.example:4222"],
                        "tls": {"clientCertificate": True},
                    },
                },
            },
            "network.nats.tls.clientCertificate needs network.nats.tls.secretName",
            id="nats-client-certificate-without-secret",
        ),
        pytest.param(
            {"network": {"router": {"backend": "nats"}}},
            "needs mode: network",
            id="nats-in-embedded-mode",
        ),
        pytest.param(
            {"network": {"postgresql": {"enabled": True, "url": "postgresql://u@h/d"}}},
            "network.postgresql.enabled needs mode: network",
            id="postgresql-in-embedded-mode",
        ),
        pytest.param(
            {"mode": "network", "network": {"postgresql": {"enabled": True}}},
            "needs network.postgresql.url",
            id="postgresql-without-url",
        ),
        pytest.param(
            {"mode": "network", "persistence": {"enabled": False}},
            "persistence.enabled: false needs network.postgresql.enabled",
            id="no-volumes-without-postgresql",
        ),
        pytest.param(
            {
                "mode": "network",
                "network": {
                    "postgresql": {"enabled": True, "url": "postgresql://harness:hunter2@h/db"}
                },
            },
            "url",
            id="password-in-the-url",
        ),
        pytest.param(
            {
                "mode": "network",
                "network": {
                    "postgresql": {
                        "enabled": True,
                        "url": "postgresql://harness@h/db?sslmode=require&password=hunter2",
                    }
                },
            },
            "url",
            id="password-parameter-in-the-url",
        ),
        pytest.param(
            {
                "mode": "network",
                "network": {"postgresql": {"enabled": True, "url": "mysql://harness@h/db"}},
            },
            "url",
            id="not-a-postgresql-url",
        ),
        pytest.param(
            {
                "mode": "network",
                "network": {
                    "router": {"backend": "nats"},
                    "nats": {"servers": ["nats://user:secret@a.example:4222"]},
                },
            },
            "servers",
            id="credentials-in-a-nats-server",
        ),
    ],
)
def test_a_half_or_unsafe_configuration_fails_the_render_naming_the_value(
    values: dict[str, Any], named: str, tmp_path: Path
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    error = render_error([path])
    assert named in error, error
    assert "hunter2" not in error.replace(str(path), ""), "helm echoes the password"


# Upgrades


OLDER_CHART_VALUES: Final = (
    "persistence.enabled=null",
    "network.registry.replicas=null",
    "network.registry.signingKey=null",
    "network.router.backend=null",
    "network.nats=null",
    "network.postgresql=null",
    "cluster=null",
)
"""The values this chart added: `helm upgrade --reuse-values` from a release of the chart
before them reuses that chart's values, where none of these keys exists."""


def _without_generated_data(objects: list[Manifest]) -> list[Manifest]:
    """The objects with each Secret's data left out: generated tokens differ per render."""
    for obj in objects:
        if obj["kind"] == "Secret":
            obj.pop("data", None)
    return objects


@pytest.mark.parametrize("name", ["embedded", "network", "network-tls"])
def test_values_of_the_chart_before_nats_and_postgresql_render_as_before(name: str) -> None:
    objects = render([ci_file(name)])
    older = render([ci_file(name)], set_values=OLDER_CHART_VALUES)
    assert _without_generated_data(older) == _without_generated_data(objects)

"""The chart's `mode: cluster` (issue 25 item 8; docs/design/cluster.md §9.3, §11): a
Deployment of interchangeable replicas behind the one Service, each named by its pod and
advertising its pod IP, on the one PostgreSQL of `network.postgresql`, with the seed key,
Registry key and tokens from Secrets; a PodDisruptionBudget, an optional autoscaler whose
scale-down is stabilised, a grace sized for the hand-over, a surge-only rolling update, and
the migration hook Job running `migrate --cluster` without a replica's settings. Half
configurations fail the render, naming the value."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from gateway.cli import _build_parser, _role_defaults
from gateway.settings import Mode, Settings, SettingsError, load_settings
from tests.unit.deploy.chart_support import (
    FULLNAME,
    Manifest,
    chart_values,
    ci_file,
    command_line,
    component,
    containers,
    environment,
    find,
    flag,
    hook_jobs,
    one,
    pod_labels,
    pod_spec,
    ref,
    render,
    render_error,
    secret_file_source,
    selects,
    setting,
    token_secret,
    value_from,
    volumes,
    workloads,
)

CLUSTER_GRACE: Final = 57
"""preStop 5 + shutdown delay 2 + hand-over 10 + shutdown grace 30 + margin 10 (cluster.md §9.3)."""

POD_IP: Final = "10.1.2.3"
"""What the downward API would give a pod as `status.podIP`, for loading its settings."""

POD_NAME: Final = f"{FULLNAME}-7d9f8b6c5-x2x4q"
"""What the downward API would give a Deployment's pod as `metadata.name`."""

REPLICA_SETTINGS: Final = ("replica_id", "advertise_address")
"""A replica's own settings: `migrate --cluster` refuses them."""

_REFERENCE: Final = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
"""A `$(NAME)` reference to an earlier variable in a container's `env` (Kubernetes expands it)."""


def _cluster(*, autoscaling: bool = True) -> list[Manifest]:
    """The cluster ci render; `autoscaling=False` turns the autoscaler off."""
    sets = [] if autoscaling else ["cluster.autoscaling.enabled=false"]
    return render([ci_file("cluster")], set_values=sets)


def _replicas(objects: list[Manifest]) -> tuple[Manifest, Manifest]:
    """(the Deployment, its one container)."""
    deployment = one(objects, "Deployment", FULLNAME)
    (container,) = containers(deployment, init=False)
    return deployment, container


def _pod_environment(container: Manifest) -> dict[str, str]:
    """The container's variables as the kubelet would set them on a pod named POD_NAME with
    POD_IP: each `fieldRef` resolved, then `$(NAME)` expanded from the variables before it
    (a later one is not expanded, as in Kubernetes)."""
    fields = {"metadata.name": POD_NAME, "status.podIP": POD_IP}
    env: dict[str, str] = {}
    for variable in container.get("env") or []:
        if "value" in variable:
            value = str(variable["value"])
            env[variable["name"]] = _REFERENCE.sub(
                lambda match: env.get(match.group(1), match.group(0)), value
            )
        elif "fieldRef" in (variable.get("valueFrom") or {}):
            env[variable["name"]] = fields[variable["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def _settings(container: Manifest, objects: list[Manifest]) -> Settings:
    """The replica's settings as `main` loads them from its args and the pod's variables."""
    arguments = _build_parser().parse_args(command_line(container))
    flags = {key: value for key, value in vars(arguments).items() if key != "command"}
    env = environment(container, objects) | _pod_environment(container)
    try:
        return load_settings(env=env, flags=flags, defaults={})
    except SettingsError as error:
        pytest.fail(f"the replica's settings are refused: {error.errors}", pytrace=False)


# The replicas


def test_cluster_mode_runs_one_deployment_of_replicas_and_no_router_registry_or_statefulset() -> (
    None
):
    objects = _cluster(autoscaling=False)
    assert [ref(obj) for obj in workloads(objects, hooks=False)] == [f"Deployment/{FULLNAME}"]
    deployment, _ = _replicas(objects)
    assert deployment["spec"]["replicas"] == chart_values()["cluster"]["replicas"] == 3
    assert not [obj for obj in objects if component(obj) in ("router", "registry")]


def test_each_replica_is_named_by_its_pod_and_advertises_its_pod_ip_on_the_grpc_port() -> None:
    objects = _cluster()
    _, container = _replicas(objects)
    assert value_from(container, "HARNESS_REPLICA_ID") == {
        "fieldRef": {"fieldPath": "metadata.name"}
    }
    settings = _settings(container, objects)
    assert settings.mode is Mode.CLUSTER
    assert settings.replica == POD_NAME
    grpc_port = chart_values([ci_file("cluster")])["service"]["grpcPort"]
    assert settings.advertised == f"{POD_IP}:{grpc_port}"


def test_every_replica_opens_the_one_postgresql_database_of_the_values() -> None:
    objects = _cluster()
    _, container = _replicas(objects)
    url = chart_values([ci_file("cluster")])["network"]["postgresql"]["url"]
    assert setting(container, objects, "store") == url
    assert setting(container, objects, "cluster") == "true"
    assert flag(container, "--store-owner") is None
    assert value_from(container, "HARNESS_STORE_OWNER") is None


def test_the_seed_key_registry_key_and_tokens_come_from_their_secrets() -> None:
    files = (ci_file("cluster"),)
    objects = render(files)
    deployment, container = _replicas(objects)
    cluster = chart_values(files)["cluster"]
    wanted = {
        "seed_key_file": (cluster["seedKey"]["existingSecret"], cluster["seedKey"]["key"]),
        "registry_key_file": (f"{FULLNAME}-registry-key", cluster["registryKey"]["key"]),
        "admin_token_file": token_secret(files, "adminToken"),
        "peer_token_file": token_secret(files, "peerToken"),
    }
    found = {}
    for name in wanted:
        path = setting(container, objects, name)
        assert path is not None, f"{ref(deployment)} names no {name}"
        found[name] = secret_file_source(deployment, container, path)
    assert found == wanted
    # The chart generates the Registry key (kept like the tokens), never the seed key.
    assert find(objects, "Secret", f"{FULLNAME}-registry-key") is not None
    assert find(objects, "Secret", cluster["seedKey"]["existingSecret"]) is None


def test_an_existing_registry_key_secret_replaces_the_generated_one() -> None:
    objects = render(
        [ci_file("cluster")], set_values=["cluster.registryKey.existingSecret=harness-cards"]
    )
    deployment, container = _replicas(objects)
    path = setting(container, objects, "registry_key_file")
    assert path is not None
    assert secret_file_source(deployment, container, path) == ("harness-cards", "registry-key")
    assert find(objects, "Secret", f"{FULLNAME}-registry-key") is None


def test_no_replica_keeps_a_volume_of_its_own() -> None:
    deployment, _ = _replicas(_cluster())
    assert "volumeClaimTemplates" not in deployment["spec"]
    assert "emptyDir" in volumes(deployment)["data"]
    assert not [v for v in volumes(deployment).values() if "persistentVolumeClaim" in v]


def test_the_replicas_are_ready_on_the_grpc_health_port_as_the_endpoint_service() -> None:
    objects = _cluster()
    _, container = _replicas(objects)
    health = setting(container, objects, "health_listen")
    assert health is not None
    probe = container["readinessProbe"]["grpc"]
    assert probe == {
        "port": int(health.rpartition(":")[2]),
        "service": "harness.v1.HarnessEndpointService",
    }


# Rolling upgrades and disruptions


def test_a_rolling_update_adds_a_replica_before_it_stops_one() -> None:
    deployment, _ = _replicas(_cluster())
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }


def test_the_grace_covers_the_prestop_the_delay_the_hand_over_the_grace_and_a_margin() -> None:
    deployment, container = _replicas(_cluster())
    assert pod_spec(deployment)["terminationGracePeriodSeconds"] == CLUSTER_GRACE
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "5"]


def test_a_grace_too_short_for_the_hand_over_fails_the_render_naming_it() -> None:
    """47 s suffices for a daemon of network mode; a replica also hands over (10 s)."""
    error = render_error([ci_file("cluster")], set_values=["terminationGracePeriodSeconds=47"])
    assert "cluster.handoverSeconds" in error, error


def test_a_disruption_budget_lets_one_replica_go_at_a_time() -> None:
    """Rendered in cluster mode whatever podDisruptionBudget.enabled says."""
    objects = _cluster()
    assert chart_values([ci_file("cluster")])["podDisruptionBudget"]["enabled"] is False
    budget = one(objects, "PodDisruptionBudget", FULLNAME)
    assert budget["spec"]["maxUnavailable"] == 1
    deployment, _ = _replicas(objects)
    assert selects(budget["spec"]["selector"]["matchLabels"], pod_labels(deployment))


def test_replicas_reach_each_others_grpc_port_when_the_network_policy_narrows_it() -> None:
    """A replica forwards calls to the agent's home replica (cluster.md §4.1): the policy
    that admits only `grpcFrom` must still admit the release's own pods."""
    objects = render(
        [ci_file("cluster")],
        set_values=["networkPolicy.grpcFrom[0].podSelector.matchLabels.role=agent"],
    )
    deployment, _ = _replicas(objects)
    labels = pod_labels(deployment)
    policy = one(objects, "NetworkPolicy", FULLNAME)
    assert selects(policy["spec"]["podSelector"]["matchLabels"], labels)
    grpc_rules = [
        rule
        for rule in policy["spec"]["ingress"]
        if any(port.get("port") == "grpc" for port in rule.get("ports") or [])
    ]
    assert grpc_rules
    admitted = [
        peer
        for rule in grpc_rules
        for peer in rule.get("from") or []
        if "podSelector" in peer
        and "namespaceSelector" not in peer
        and selects(peer["podSelector"].get("matchLabels") or {}, labels)
    ]
    assert admitted, "the replicas cannot forward to each other"


# Autoscaling


def test_the_autoscaler_scales_the_deployment_on_cpu_and_scales_down_slowly() -> None:
    objects = _cluster()
    values = chart_values([ci_file("cluster")])["cluster"]["autoscaling"]
    autoscaler = one(objects, "HorizontalPodAutoscaler", FULLNAME)
    spec = autoscaler["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": FULLNAME,
    }
    assert (spec["minReplicas"], spec["maxReplicas"]) == (
        values["minReplicas"],
        values["maxReplicas"],
    )
    (metric,) = spec["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"] == {
        "type": "Utilization",
        "averageUtilization": values["targetCPUUtilizationPercentage"],
    }
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300
    # The autoscaler owns the count: an upgrade must not reset it to cluster.replicas.
    deployment, _ = _replicas(objects)
    assert "replicas" not in deployment["spec"]


def test_without_autoscaling_no_autoscaler_is_rendered() -> None:
    assert find(_cluster(autoscaling=False), "HorizontalPodAutoscaler", FULLNAME) is None
    assert find(render(), "HorizontalPodAutoscaler", FULLNAME) is None


def test_a_scale_down_stabilisation_under_five_minutes_is_refused() -> None:
    error = render_error(
        [ci_file("cluster")],
        set_values=["cluster.autoscaling.scaleDownStabilizationSeconds=60"],
    )
    assert "scaleDownStabilizationSeconds" in error, error


# The migration Job


def _migration(objects: list[Manifest]) -> Manifest:
    (job,) = [job for job in hook_jobs(objects) if component(job) == "migrate"]
    return job


def test_the_migration_job_sets_the_database_up_for_the_cluster_then_the_registry() -> None:
    objects = _cluster()
    job = _migration(objects)
    (init,) = pod_spec(job)["initContainers"]
    (main,) = pod_spec(job)["containers"]
    arguments = _build_parser().parse_args(command_line(init))
    assert arguments.command == "migrate"
    assert not arguments.migrate_registry
    flags = {key: value for key, value in vars(arguments).items() if key != "command"}
    flags.pop("migrate_registry")
    flags.pop("migrate_check")
    try:
        settings = load_settings(
            env=environment(init, objects), flags=flags, defaults=_role_defaults("migrate")
        )
    except SettingsError as error:
        pytest.fail(f"migrate --cluster is refused: {error.errors}", pytrace=False)
    assert settings.cluster
    assert settings.store == chart_values([ci_file("cluster")])["network"]["postgresql"]["url"]
    assert settings.seed_key_file is not None
    seed = chart_values([ci_file("cluster")])["cluster"]["seedKey"]
    source = secret_file_source(job, init, str(settings.seed_key_file))
    assert source == (seed["existingSecret"], seed["key"])
    assert "--registry" in command_line(main)
    assert "--cluster" not in command_line(main)


def test_the_migration_job_carries_no_replica_setting_which_migrate_refuses() -> None:
    objects = _cluster()
    job = _migration(objects)
    for container in containers(job):
        for name in REPLICA_SETTINGS:
            assert setting(container, objects, name) is None, f"{container['name']} {name}"
            variable = "HARNESS_" + name.upper()
            assert value_from(container, variable) is None, f"{container['name']} {variable}"


# Half configurations


@pytest.mark.parametrize(
    ("values", "named"),
    [
        pytest.param(
            {"mode": "cluster", "cluster": {"seedKey": {"existingSecret": "seed"}}},
            "mode: cluster needs an existing PostgreSQL",
            id="without-postgresql",
        ),
        pytest.param(
            {
                "mode": "cluster",
                "network": {"postgresql": {"enabled": True, "url": "postgresql://u@h/d"}},
            },
            "cluster.seedKey.existingSecret",
            id="without-a-seed-key",
        ),
        pytest.param(
            {
                "mode": "cluster",
                "cluster": {"seedKey": {"existingSecret": "seed"}},
                "network": {"postgresql": {"enabled": True, "url": "postgresql://u@h/d"}},
                "tls": {"enabled": True, "secretName": "tls"},
            },
            "mode: cluster does not take tls.enabled",
            id="with-tls",
        ),
        pytest.param(
            {
                "mode": "cluster",
                "cluster": {"seedKey": {"existingSecret": "seed"}},
                "network": {"postgresql": {"enabled": True, "url": "postgresql://u@h/d"}},
                "tls": {"clientCA": {"enabled": True, "secretName": "ca"}},
            },
            "nor tls.clientCA",
            id="with-client-certificates",
        ),
        pytest.param(
            {
                "mode": "cluster",
                "cluster": {
                    "seedKey": {"existingSecret": "seed"},
                    "autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 3},
                },
                "network": {"postgresql": {"enabled": True, "url": "postgresql://u@h/d"}},
            },
            "cluster.autoscaling.minReplicas 5 is above maxReplicas 3",
            id="autoscaling-min-above-max",
        ),
    ],
)
def test_a_half_cluster_configuration_fails_the_render_naming_the_value(
    values: dict[str, Any], named: str, tmp_path: Path
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    error = render_error([path])
    assert named in error, error

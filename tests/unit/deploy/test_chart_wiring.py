"""How the chart's objects find each other, which no schema checks: Services reach named
container ports of pods they select, ServiceMonitors name Service ports, network-mode daemons
dial the Router and Registry Services that exist, with the peer token every pod mounts, and
the tokens and the config checksum behave as the chart's conventions say (issue 14)."""

from __future__ import annotations

from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import pytest
from harness_client._cli.parser import build_parser

from tests.unit.deploy.chart_support import (
    CI_VALUES,
    FULLNAME,
    NAMESPACE,
    Manifest,
    annotations_of,
    chart_values,
    ci_file,
    ci_name,
    command_line,
    component,
    container_ports,
    containers,
    every_render,
    find,
    flag,
    is_helm_test,
    labels_of,
    long_running,
    name_of,
    network_renders,
    of_kind,
    one,
    pod_annotations,
    pod_labels,
    ref,
    render,
    render_fresh,
    secret_data,
    secret_file_source,
    selects,
    setting,
    token_secret,
    workloads,
)

MIN_TOKEN_LENGTH: Final = 32
"""gateway/secret_file.py refuses a shorter admin or peer token."""

CHECKSUM: Final = "checksum/config"


def _selected(service: Manifest, objects: list[Manifest]) -> list[Manifest]:
    selector = service["spec"].get("selector") or {}
    return [obj for obj in workloads(objects) if selects(selector, pod_labels(obj))]


def _port_names(workload: Manifest) -> set[str]:
    return {name for container in containers(workload) for name in container_ports(container)}


# Services


@pytest.mark.parametrize("files", every_render())
def test_every_service_reaches_a_named_port_of_every_pod_it_selects(
    files: tuple[Path, ...],
) -> None:
    objects = render(files)
    problems: list[str] = []
    for service in of_kind(objects, "Service"):
        selected = _selected(service, objects)
        if not selected:
            problems.append(f"{ref(service)} selects no rendered workload")
        problems += [
            f"{ref(service)} selects the test {ref(obj)}"
            for obj in selected
            if obj["kind"] == "Pod"
        ]
        for port in service["spec"]["ports"]:
            target = port.get("targetPort")
            if not isinstance(target, str):
                problems.append(
                    f"{ref(service)} port {port.get('name')}: targetPort {target!r} is no name"
                )
                continue
            problems += [
                f"{ref(service)} port {port.get('name')}: {ref(obj)} has no port {target}"
                for obj in selected
                if target not in _port_names(obj)
            ]
    assert problems == []


def _gateway_workload(objects: list[Manifest]) -> Manifest:
    """The gateways' workload: the StatefulSet, or in cluster mode the Deployment."""
    found = [
        obj for obj in of_kind(objects, "StatefulSet", "Deployment") if name_of(obj) == FULLNAME
    ]
    assert len(found) == 1, [ref(obj) for obj in found]
    return found[0]


@pytest.mark.parametrize("files", every_render())
def test_the_gateway_services_are_named_as_the_conventions_say(files: tuple[Path, ...]) -> None:
    """A cluster's replicas have no stable names to publish: its agents use the one
    Service and the replicas forward to each other's pod IP (docs/design/cluster.md §11)."""
    objects = render(files)
    cluster = chart_values(files)["mode"] == "cluster"
    names = [FULLNAME, f"{FULLNAME}-metrics"] + ([] if cluster else [f"{FULLNAME}-headless"])
    ports = {
        name: {port["name"] for port in one(objects, "Service", name)["spec"]["ports"]}
        for name in names
    }
    assert ports[FULLNAME] == {"grpc", "health"}
    assert ports[f"{FULLNAME}-metrics"] == {"metrics"}
    gateway = _gateway_workload(objects)
    if cluster:
        assert gateway["kind"] == "Deployment"
        assert find(objects, "Service", f"{FULLNAME}-headless") is None
        return
    assert one(objects, "Service", f"{FULLNAME}-headless")["spec"].get("clusterIP") == "None"
    assert gateway["kind"] == "StatefulSet"
    assert gateway["spec"]["serviceName"] == f"{FULLNAME}-headless"


@pytest.mark.parametrize("files", every_render())
def test_every_statefulset_is_governed_by_a_service_that_selects_it(
    files: tuple[Path, ...],
) -> None:
    objects = render(files)
    for statefulset in of_kind(objects, "StatefulSet"):
        service = one(objects, "Service", statefulset["spec"]["serviceName"])
        assert statefulset in _selected(service, objects), ref(statefulset)


@pytest.mark.parametrize("files", every_render())
def test_every_workload_selector_matches_its_own_pods_only(files: tuple[Path, ...]) -> None:
    objects = render(files)
    for workload in workloads(objects, hooks=False):
        if workload["kind"] == "Pod":
            continue
        selector = workload["spec"]["selector"]["matchLabels"]
        matched = [ref(obj) for obj in workloads(objects) if selects(selector, pod_labels(obj))]
        assert matched == [ref(workload)]


# Prometheus Operator


@pytest.mark.parametrize("files", every_render())
def test_every_servicemonitor_endpoint_names_a_port_of_the_services_it_selects(
    files: tuple[Path, ...],
) -> None:
    objects = render(files)
    services = of_kind(objects, "Service")
    for monitor in of_kind(objects, "ServiceMonitor"):
        spec = monitor["spec"]
        assert spec.get("namespaceSelector", {}).get("matchNames", [NAMESPACE]) == [NAMESPACE]
        selector = spec["selector"].get("matchLabels") or {}
        assert not spec["selector"].get("matchExpressions"), "only matchLabels is checked here"
        selected = [service for service in services if selects(selector, labels_of(service))]
        assert selected, f"{ref(monitor)} selects no Service"
        for endpoint in spec["endpoints"]:
            for service in selected:
                names = {port.get("name") for port in service["spec"]["ports"]}
                assert endpoint["port"] in names, f"{ref(service)} has no port {endpoint['port']}"
        scraped = {name_of(service) for service in selected}
        metrics = {
            name_of(service)
            for service in services
            if any(port.get("name") == "metrics" for port in service["spec"]["ports"])
        }
        assert scraped == metrics, "every metrics Service, and only those, is scraped"


# Network mode


def _peer(container: Manifest, name: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a `--router`/`--registry` URL."""
    value = flag(container, name)
    assert value is not None, f"container {container['name']} has no {name}"
    url = urlsplit(value)
    assert url.hostname is not None, value
    assert url.port is not None, value
    return url.scheme, url.hostname, url.port


def _router_backend(files: tuple[Path, ...]) -> str:
    """`standalone` (the chart's Router Deployment) or `nats` (no Router process)."""
    backend = chart_values(files)["network"]["router"]["backend"]
    assert isinstance(backend, str)
    return backend


def _serves_tls(workload: Manifest, objects: list[Manifest]) -> bool:
    (container,) = containers(workload, init=False)
    return setting(container, objects, "tls_cert_file") is not None


@pytest.mark.parametrize("files", network_renders())
def test_network_processes_dial_the_router_and_registry_services_by_name_and_port(
    files: tuple[Path, ...],
) -> None:
    """With `network.router.backend: nats` there is no Router to dial: the daemons' NATS
    servers are checked in test_chart_network_backends.py."""
    objects = render(files)
    peers = {
        "--registry": (
            one(objects, "Service", f"{FULLNAME}-registry"),
            one(objects, "StatefulSet", f"{FULLNAME}-registry"),
        ),
    }
    standalone_router = _router_backend(files) == "standalone"
    if standalone_router:
        peers["--router"] = (
            one(objects, "Service", f"{FULLNAME}-router"),
            one(objects, "Deployment", f"{FULLNAME}-router"),
        )
    dialers = [
        (workload, container, peer_flag)
        for workload, container in long_running(objects)
        for peer_flag in peers
        if component(workload) == "gateway"
        or (component(workload), peer_flag) == ("router", "--registry")
    ]
    expected = {"gateway", "router"} if standalone_router else {"gateway"}
    assert {component(workload) for workload, _, _ in dialers} == expected
    for workload, container, peer_flag in dialers:
        service, server = peers[peer_flag]
        scheme, host, port = _peer(container, peer_flag)
        labels = host.split(".")
        assert labels[0] == name_of(service), f"{ref(workload)} {peer_flag} {host}"
        assert labels[1:] in (
            [],
            [NAMESPACE],
            [NAMESPACE, "svc"],
            [NAMESPACE, "svc", "cluster", "local"],
        )
        grpc = [p for p in service["spec"]["ports"] if p["targetPort"] == "grpc"]
        assert [p["port"] for p in grpc] == [port], f"{ref(workload)} {peer_flag} port {port}"
        assert scheme == ("grpcs" if _serves_tls(server, objects) else "grpc"), ref(workload)


@pytest.mark.parametrize("files", network_renders())
def test_every_network_pod_mounts_the_peer_token(files: tuple[Path, ...]) -> None:
    objects = render(files)
    pods = list(long_running(objects))
    expected = {"gateway", "registry"} | (
        {"router"} if _router_backend(files) == "standalone" else set()
    )
    assert {component(workload) for workload, _ in pods} == expected
    for workload, container in pods:
        path = setting(container, objects, "peer_token_file")
        assert path is not None, f"{ref(workload)} names no peer token file"
        assert secret_file_source(workload, container, path) == token_secret(files, "peerToken"), (
            ref(workload)
        )


@pytest.mark.parametrize("files", every_render())
def test_every_gateway_reads_the_admin_token_from_its_secret(files: tuple[Path, ...]) -> None:
    objects = render(files)
    gateways = [(w, c) for w, c in long_running(objects) if component(w) == "gateway"]
    assert gateways
    for workload, container in gateways:
        path = setting(container, objects, "admin_token_file")
        assert path is not None, f"{ref(workload)} names no admin token file"
        assert secret_file_source(workload, container, path) == token_secret(files, "adminToken")


@pytest.mark.parametrize("files", every_render())
def test_the_chart_generates_exactly_the_tokens_no_existing_secret_provides(
    files: tuple[Path, ...],
) -> None:
    values = chart_values(files)
    peers = values["mode"] in ("network", "cluster")
    wanted = {"adminToken"} | ({"peerToken"} if peers else set())
    generated = {
        values["auth"][token]["key"]
        for token in wanted
        if not values["auth"][token]["existingSecret"]
    }
    secret = find(render(files), "Secret", f"{FULLNAME}-tokens")
    if not generated:
        assert secret is None, "every token comes from an existing Secret"
        assert of_kind(render(files), "Secret") == []
    else:
        assert secret is not None
        assert set(secret_data(secret)) == generated


def test_the_existing_secrets_file_renders_no_secret() -> None:
    objects = render([ci_file("existing-secrets")])
    assert of_kind(objects, "Secret") == []


@pytest.mark.parametrize("files", [(), (ci_file("network"),)], ids=["embedded", "network"])
def test_generated_tokens_are_long_random_and_kept_on_uninstall(files: tuple[Path, ...]) -> None:
    """Two renders (no cluster to look up): each Secret is kept by helm, each token long enough
    for the gateway and different each time, so none is a constant in the chart."""
    first, second = (
        secret_data(one(render_fresh(files), "Secret", f"{FULLNAME}-tokens")) for _ in range(2)
    )
    keep = annotations_of(one(render_fresh(files), "Secret", f"{FULLNAME}-tokens"))
    assert keep.get("helm.sh/resource-policy") == "keep"
    assert first
    assert set(first) == set(second)
    for key, token in first.items():
        assert len(token) >= MIN_TOKEN_LENGTH, key
        assert not any(char.isspace() for char in token), key
        assert token != second[key], f"{key} is the same in two renders"
    assert len(set(first.values())) == len(first), "the admin and peer tokens are one"


# The config checksum


def _checksums(objects: list[Manifest]) -> dict[str, str]:
    """Workload → its pod's checksum/config (every release workload must carry one)."""
    checksums: dict[str, str] = {}
    for workload in workloads(objects, hooks=False):
        annotation = pod_annotations(workload).get(CHECKSUM)
        assert annotation, f"{ref(workload)} has no {CHECKSUM} annotation"
        checksums[ref(workload)] = annotation
    return checksums


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("embedded", "gateway.logLevel=debug"),
        ("embedded", "gateway.streamWindow=512"),
        ("network", "gateway.logLevel=warning"),
        ("firewall", "firewall.config.content_logging=true"),
    ],
)
def test_the_config_checksum_changes_when_a_config_value_changes(name: str, change: str) -> None:
    base = _checksums(render([ci_file(name)]))
    changed = _checksums(render([ci_file(name)], set_values=[change]))
    assert base.keys() == changed.keys()
    assert [workload for workload in base if base[workload] == changed[workload]] == []


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("embedded", "resources.limits.memory=3Gi"),
        ("embedded", "podAnnotations.team=agents"),
        ("firewall", "resources.requests.cpu=2"),
    ],
)
def test_the_config_checksum_stays_when_nothing_in_the_config_changes(
    name: str, change: str
) -> None:
    base = render([ci_file(name)])
    changed = render([ci_file(name)], set_values=[change])
    assert base != changed, f"--set {change} changed nothing"
    assert _checksums(base) == _checksums(changed)


# The helm test pod


def _test_pod(objects: list[Manifest]) -> Manifest | None:
    tests = [obj for obj in workloads(objects) if is_helm_test(obj)]
    assert len(tests) <= 1
    return tests[0] if tests else None


@pytest.mark.parametrize("files", every_render())
def test_the_helm_test_pod_runs_harness_status_against_the_gateway_service(
    files: tuple[Path, ...],
) -> None:
    objects = render(files)
    pod = _test_pod(objects)
    if pod is None:
        assert chart_values(files)["tls"]["clientCA"]["enabled"], "only mTLS leaves it out"
        return
    (container,) = containers(pod)
    words = command_line(container)
    assert words[0] == "harness"
    arguments = build_parser({}).parse_args(words[1:])
    assert arguments.command == "status"
    url = urlsplit(arguments.url)
    service = one(objects, "Service", FULLNAME)
    assert url.hostname is not None
    assert url.hostname.split(".")[0] == name_of(service)
    (grpc,) = [port["port"] for port in service["spec"]["ports"] if port["name"] == "grpc"]
    assert url.port == grpc
    gateway = _gateway_workload(objects)
    assert url.scheme == ("grpcs" if _serves_tls(gateway, objects) else "grpc")
    assert (arguments.tls_ca is not None) == (url.scheme == "grpcs")
    source = secret_file_source(pod, container, arguments.admin_token_file)
    assert source == token_secret(files, "adminToken")


# NetworkPolicy and PodDisruptionBudget


def _peer_matches(peer: Manifest, labels: dict[str, str]) -> bool:
    """Whether a NetworkPolicyPeer admits a pod of this release's namespace with `labels`."""
    if "ipBlock" in peer:
        return False
    # An empty or absent namespaceSelector is every namespace, or this one.
    namespaces = (peer.get("namespaceSelector") or {}).get("matchLabels") or {}
    if namespaces and not selects(namespaces, {"kubernetes.io/metadata.name": NAMESPACE}):
        return False
    pods = peer.get("podSelector")
    if pods is None:
        return True
    return not pods.get("matchLabels") or selects(pods["matchLabels"], labels)


def _allows(policy: Manifest, labels: dict[str, str], port: str) -> bool:
    """Whether an ingress policy lets a pod with `labels` (same namespace) reach `port`."""
    for rule in policy["spec"].get("ingress") or []:
        ports = rule.get("ports")
        if ports and not any(entry.get("port") == port for entry in ports):
            continue
        peers = rule.get("from")
        if not peers or any(_peer_matches(peer, labels) for peer in peers):
            return True
    return False


def _policies_of(workload: Manifest, objects: list[Manifest]) -> list[Manifest]:
    return [
        policy
        for policy in of_kind(objects, "NetworkPolicy")
        if selects(policy["spec"]["podSelector"].get("matchLabels") or {}, pod_labels(workload))
        and "Ingress" in policy["spec"].get("policyTypes", ["Ingress"])
    ]


def _reachable(source: Manifest, target: Manifest, objects: list[Manifest]) -> bool:
    policies = _policies_of(target, objects)
    return not policies or any(_allows(policy, pod_labels(source), "grpc") for policy in policies)


def with_network_policy() -> list[object]:
    return [
        pytest.param((path,), id=ci_name(path))
        for path in CI_VALUES
        if chart_values([path])["networkPolicy"]["enabled"]
    ]


@pytest.mark.parametrize("files", with_network_policy())
def test_network_policies_let_every_process_reach_the_grpc_port_it_dials(
    files: tuple[Path, ...],
) -> None:
    """The daemons dial the Router and the Registry, the Router dials the Registry, and the
    helm test pod dials the gateways: a policy that drops one of them breaks the release."""
    objects = render(files)
    by_component = {component(obj): obj for obj in workloads(objects)}
    calls = [
        ("gateway", "router"),
        ("gateway", "registry"),
        ("router", "registry"),
        ("test", "gateway"),
    ]
    problems = [
        f"{ref(by_component[source])} cannot reach {ref(by_component[target])} on grpc"
        for source, target in calls
        if source in by_component
        and target in by_component
        and not _reachable(by_component[source], by_component[target], objects)
    ]
    assert problems == []


@pytest.mark.parametrize("files", with_network_policy())
def test_every_release_pod_is_covered_by_a_network_policy_on_its_own_ports(
    files: tuple[Path, ...],
) -> None:
    objects = render(files)
    for workload in workloads(objects, hooks=False):
        policies = _policies_of(workload, objects)
        assert policies, f"{ref(workload)} has no NetworkPolicy"
        names = _port_names(workload)
        for policy in policies:
            for rule in policy["spec"].get("ingress") or []:
                for entry in rule.get("ports") or []:
                    assert entry.get("port") in names, f"{ref(policy)} port {entry.get('port')}"


@pytest.mark.parametrize("files", every_render())
def test_every_disruption_budget_selects_release_pods(files: tuple[Path, ...]) -> None:
    objects = render(files)
    for budget in of_kind(objects, "PodDisruptionBudget"):
        selector = budget["spec"]["selector"]["matchLabels"]
        assert [
            obj for obj in workloads(objects, hooks=False) if selects(selector, pod_labels(obj))
        ]


# Labels


CHART_LABELS: Final = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)


@pytest.mark.parametrize("files", every_render())
def test_every_object_carries_the_chart_labels_in_the_release_namespace(
    files: tuple[Path, ...],
) -> None:
    for obj in render(files):
        labels = labels_of(obj)
        assert [label for label in CHART_LABELS if not labels.get(label)] == [], ref(obj)
        assert labels["app.kubernetes.io/name"] == "harness-gateway"
        assert labels["app.kubernetes.io/instance"] == "hg"
        assert obj["metadata"].get("namespace") == NAMESPACE, ref(obj)


# TLS


def _covers(names: list[str], host: str) -> bool:
    """Whether a certificate's DNS names cover `host` (a `*.` wildcard covers one label)."""
    return any(
        name == host or (name.startswith("*.") and host.partition(".")[2] == name[2:])
        for name in names
    )


def _dialed_hosts(objects: list[Manifest]) -> list[str]:
    """Every TLS host a process of the release dials: peers, and the helm test's gateway."""
    hosts = []
    for _, container in long_running(objects):
        for peer_flag in ("--router", "--registry"):
            value = flag(container, peer_flag)
            if value is not None and value.startswith("grpcs://"):
                hosts.append(str(urlsplit(value).hostname))
    pod = _test_pod(objects)
    if pod is not None:
        url = build_parser({}).parse_args(command_line(containers(pod)[0])[1:]).url
        if url.startswith("grpcs://"):
            hosts.append(str(urlsplit(url).hostname))
    return hosts


@pytest.mark.parametrize("files", every_render())
def test_the_certificate_covers_every_name_dialed_and_is_the_one_served(
    files: tuple[Path, ...],
) -> None:
    objects = render(files)
    certificates = of_kind(objects, "Certificate")
    if not certificates:
        return
    (certificate,) = certificates
    names = certificate["spec"]["dnsNames"]
    hosts = _dialed_hosts(objects)
    assert hosts, "TLS is on, yet nothing dials with grpcs://"
    assert [host for host in hosts if not _covers(names, host)] == []
    # The per-daemon names agents of network mode connect to: <pod>.<headless>.<ns>.svc.
    assert _covers(names, f"{FULLNAME}-0.{FULLNAME}-headless.{NAMESPACE}.svc")
    for workload, container in long_running(objects):
        path = setting(container, objects, "tls_cert_file")
        assert path is not None, f"{ref(workload)} serves no TLS"
        source = secret_file_source(workload, container, path)
        assert source == (certificate["spec"]["secretName"], "tls.crt"), ref(workload)

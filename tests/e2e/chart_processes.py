"""Running the Helm chart's rendered containers as local processes (issue 14): what the chart
tests share (`tests/e2e/test_chart_commands.py`, `tests/integration/deploy/test_cluster_chart_processes.py`).

Schemas and render checks see the chart's text; only running it shows that the daemons,
the Router and the Registry start from exactly the `args`, `env` and ConfigMaps the chart
gives them, that the probes name services the health listener answers, that the tokens
the Secret holds are accepted, and that SIGTERM ends each of them inside the pod's grace.
No cluster exists here, so every long-running container of a `helm template` render runs
as a local process (`harness-gateway`, the image's ENTRYPOINT, plus the container's args),
with only what a pod has and a local process has not rewritten:

- a listen address `0.0.0.0:<port>` becomes `127.0.0.1:0` (the bound address comes back
  in the process's `ready` line, so a probe or a Service port aimed at `<port>` reaches
  the listener that flag opened);
- a path under one of the container's volume mounts moves into a local directory that
  holds what the volume would: the rendered Secret's or ConfigMap's items as files (mode
  0600, owner-only, as `gateway/secret_file.py` requires of a file this user owns), an
  empty directory for a PersistentVolumeClaim or an emptyDir. A path outside every mount
  fails the test: no pod would find it either;
- a peer URL `grpc://<service>.harness.svc:<port>` becomes the address of the process
  behind that Service's port (its selector, its targetPort, the flag that opened it);
- a variable from a `secretKeyRef` gets that key of the Secret, rendered or one the test
  makes as the operator would (the PostgreSQL password), and a `fieldRef` to
  `metadata.name` gets the pod's name.

Servers outside the release (NATS, PostgreSQL) are the test's own: a values file over the
ci file points the chart at them, as an operator's values point at theirs. Hook Jobs (the
migration) run first, to completion, init containers before containers, as Helm runs a
pre-install hook before the release's objects. The processes then start in dependency
order (a process starts once every Service its args name has a running backend: the
Registry, then the Router, then the daemons) and stop in the reverse order, daemons first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, cast, get_args

import grpc
import harness_client
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness_client import MessageInput, MulticastItem, TextPart

from gateway.settings import parse_duration
from gateway.testing import GatewayProcess, Role, hermetic_environment
from tests.support import eventually
from tests.unit.deploy.chart_support import (
    FULLNAME,
    NAMESPACE,
    REPO_ROOT,
    Manifest,
    ci_file,
    component,
    configmap_data,
    container_ports,
    environment,
    find,
    flag,
    hook_jobs,
    is_helm_test,
    long_running,
    name_of,
    one,
    pod_labels,
    pod_spec,
    ref,
    render,
    secret_data,
    selects,
    volumes,
    workloads,
)

pytestmark = pytest.mark.e2e

KUBE_VERSION: Final = "1.27.0"
"""The chart's floor (`kubeVersion: >=1.27.0-0`): the render the processes run from."""

DOCKERFILE: Final = REPO_ROOT / "deploy" / "Dockerfile"

LOCAL_LISTEN: Final = "127.0.0.1:0"
"""What every `0.0.0.0:<port>` listen address of a pod becomes: loopback, any free port."""

POD_LISTEN: Final = re.compile(r"0\.0\.0\.0:(\d+)")

READY_KEYS: Final = {
    "--listen": "listen",
    "--metrics-listen": "metrics",
    "--health-listen": "health",
}
"""A listen flag → the key of its bound address in the process's `ready` line."""

PEER_URL: Final = re.compile(rf"(grpcs?)://([a-z0-9-]+)\.{NAMESPACE}\.svc:(\d+)")
"""An in-cluster address of a Service of the release, as the chart's args name peers."""

MIN_TOKEN_CHARS: Final = 40
"""Shortest token the chart's Secret may hold (the gateway accepts 32; the chart makes more)."""

LOCAL_FILE_MODE: Final = 0o600
"""Mode of a volume's file here: the kubelet's 0440 root-owned file is owner-only locally."""

DELIVERY_BOUND: Final = 30.0
"""Seconds a direct message across two daemons may take to reach its recipient: the first
certification includes Registry lookups and the Router's checks."""

COMMAND_TIMEOUT: Final = 30.0
"""Seconds a one-shot command (`harness status`, `check-config`) may take."""

HEALTH_TIMEOUT: Final = 2.0
"""Seconds one health check may take (the chart's probes allow 2 to 5)."""

SERVING: Final = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING: Final = health_pb2.HealthCheckResponse.NOT_SERVING


# --- the local pods ---------------------------------------------------------------------------


def entrypoint() -> list[str]:
    """The image's ENTRYPOINT (exec form, from the Dockerfile), found in this venv's bin."""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if line.startswith("ENTRYPOINT "):
            words = json.loads(line.removeprefix("ENTRYPOINT "))
            assert isinstance(words, list), f"ENTRYPOINT is not exec form: {line}"
            assert words, f"ENTRYPOINT is empty: {line}"
            executable = Path(sys.executable).with_name(str(words[0]))
            assert executable.is_file(), f"{executable} is missing: install the project"
            return [str(executable), *(str(word) for word in words[1:])]
    pytest.fail(f"{DOCKERFILE} has no ENTRYPOINT", pytrace=False)


class PodProcess(GatewayProcess):
    """A `harness-gateway` process run from a container's (rewritten) args and env."""

    def __init__(self, name: str, args: Sequence[str], env: Mapping[str, str]) -> None:
        role = args[0] if args else ""
        assert role in get_args(Role), f"{name}: the args start with {role!r}, not a role"
        super().__init__(cast(Role, role), name, data_dir=None, args=args[1:])
        self.env = dict(env)

    def command(self) -> list[str]:
        """The container's command line alone (none of the helper's fixed test flags).

        `GatewayProcess.start` runs every process in `hermetic_environment()` (no HARNESS_*
        variable); `env NAME=VALUE ...` adds the container's variables over it, as the
        kubelet adds a container's env to the image's, and then execs the gateway."""
        assert shutil.which("env") is not None
        variables = [f"{name}={value}" for name, value in self.env.items()]
        return ["env", *variables, *entrypoint(), self.role, *self.args]


@dataclass(slots=True, kw_only=True)
class LocalPod:
    """One replica of a rendered workload, its volumes made as local directories."""

    workload: Manifest
    container: Manifest
    name: str
    """The pod's name: `hg-harness-gateway-0` for a StatefulSet, the workload's otherwise."""
    mounts: dict[str, Path]
    """The container's mountPath → the local directory holding that volume."""
    listens: dict[int, str] = field(default_factory=dict)
    """A pod port its args (or env) listen on → the `ready` line key of the bound address."""
    process: PodProcess | None = None

    @property
    def running(self) -> PodProcess:
        assert self.process is not None, f"{self.name} was never started"
        assert self.process.running, f"{self.name} is not running"
        return self.process

    def bound(self, port: int) -> str:
        """The local address that answers what the pod serves on `port`."""
        assert port in self.listens, f"{self.name} listens on no flag for port {port}"
        address = str(self.running.ready_line[self.listens[port]])
        assert address != "off", f"{self.name}'s listener for port {port} is off"
        return address

    def local_path(self, path: str) -> Path:
        """A path inside one of the container's mounts, moved to that mount's directory."""
        for mount_path in sorted(self.mounts, key=len, reverse=True):
            if path == mount_path or path.startswith(mount_path.rstrip("/") + "/"):
                return self.mounts[mount_path] / path.removeprefix(mount_path).lstrip("/")
        pytest.fail(f"{self.name} names {path}, which no volume mount provides", pytrace=False)


def replicas(workload: Manifest) -> int:
    return 1 if workload["kind"] == "Pod" else int(workload["spec"].get("replicas", 1))


def make_pods(objects: list[Manifest], root: Path, *, most_replicas: int) -> list[LocalPod]:
    """A LocalPod per replica (at most `most_replicas` of a workload) of every long-running
    container, its volumes made under `root`."""
    pods: list[LocalPod] = []
    for workload, container in long_running(objects):
        count = min(replicas(workload), most_replicas)
        for ordinal in range(count):
            if workload["kind"] == "StatefulSet" or count > 1:
                name = f"{name_of(workload)}-{ordinal}"
            else:
                name = name_of(workload)
            assert "command" not in container, f"{ref(workload)} overrides the ENTRYPOINT"
            pods.append(make_pod(objects, workload, container, root / name, name))
    return pods


def make_pod(
    objects: list[Manifest], workload: Manifest, container: Manifest, home: Path, name: str
) -> LocalPod:
    """The container's volumes as directories under `home` (mode 0700, files 0600)."""
    declared = volumes(workload)
    claims = {
        template["metadata"]["name"]
        for template in workload.get("spec", {}).get("volumeClaimTemplates") or []
    }
    mounts: dict[str, Path] = {}
    for mount in container.get("volumeMounts") or []:
        assert "subPath" not in mount, f"{ref(workload)}: subPath mounts are not modelled"
        directory = home / mount["name"]
        directory.mkdir(parents=True, mode=0o700)
        if mount["name"] in declared:
            for file_name, content in volume_files(objects, declared[mount["name"]]).items():
                path = directory / file_name
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                path.write_text(content, encoding="utf-8")
                path.chmod(LOCAL_FILE_MODE)
        else:
            assert mount["name"] in claims, f"{ref(workload)} mounts undeclared {mount['name']}"
        mounts[mount["mountPath"]] = directory
    return LocalPod(workload=workload, container=container, name=name, mounts=mounts)


def volume_files(objects: list[Manifest], volume: Manifest) -> dict[str, str]:
    """The files a volume holds (path inside the volume → content); none for an emptyDir or
    a claim. A Secret or ConfigMap the render does not make fails the test."""
    if "secret" in volume:
        return source_files(objects, "Secret", volume["secret"]["secretName"], volume["secret"])
    if "configMap" in volume:
        return source_files(objects, "ConfigMap", volume["configMap"]["name"], volume["configMap"])
    if "projected" in volume:
        files: dict[str, str] = {}
        for source in volume["projected"]["sources"]:
            for kind, key in (("Secret", "secret"), ("ConfigMap", "configMap")):
                if key in source:
                    files.update(source_files(objects, kind, source[key]["name"], source[key]))
            assert source.keys() <= {"secret", "configMap"}, f"unmodelled source {source}"
        return files
    assert volume.keys() & {"emptyDir", "persistentVolumeClaim"}, f"unmodelled volume {volume}"
    return {}


def source_files(objects: list[Manifest], kind: str, name: str, source: Manifest) -> dict[str, str]:
    found = find(objects, kind, name)
    if found is None:
        pytest.fail(f"a volume reads {kind}/{name}, which this render does not make", pytrace=False)
    data = secret_data(found) if kind == "Secret" else configmap_data(objects, name) or {}
    items = source.get("items")
    if items is None:
        return dict(data)
    missing = [item["key"] for item in items if item["key"] not in data]
    assert not missing, f"{kind}/{name} has no keys {missing}"
    return {item["path"]: data[item["key"]] for item in items}


def peer_services(pod: LocalPod, objects: list[Manifest]) -> set[str]:
    """The Services of the release the container's args and environment name by URL."""
    words = [str(word) for word in pod.container.get("args") or []]
    words += environment(pod.container, objects).values()
    return {match.group(2) for word in words for match in [PEER_URL.fullmatch(word)] if match}


def service_address(
    objects: list[Manifest], pods: Iterable[LocalPod], service_name: str, port: int | str
) -> str:
    """The local address behind `service_name`'s `port` (number or name): its selector's
    first running pod, its targetPort as that container names it, the flag that bound it."""
    service = one(objects, "Service", service_name)
    entries = [p for p in service["spec"]["ports"] if port in (p["port"], p.get("name"))]
    assert len(entries) == 1, f"Service/{service_name} has no port {port}"
    selector = service["spec"]["selector"]
    backends = [
        pod
        for pod in pods
        if selects(selector, pod_labels(pod.workload)) and pod.process and pod.process.running
    ]
    assert backends, f"Service/{service_name} selects no running pod"
    backend = backends[0]
    target = entries[0].get("targetPort", entries[0]["port"])
    if isinstance(target, str):
        declared = container_ports(backend.container)
        assert target in declared, f"{backend.name} declares no port {target}"
        target = declared[target]
    return backend.bound(int(target))


def flag_of_variable(name: str) -> str:
    """`--metrics-listen` for `HARNESS_METRICS_LISTEN`: the flag a variable stands in for."""
    return "--" + name.removeprefix("HARNESS_").lower().replace("_", "-")


def local_word(
    pod: LocalPod, word: str, flag_name: str, objects: list[Manifest], pods: list[LocalPod]
) -> str:
    """One word of the args (or an env value) as the local process needs it; `flag_name`
    is the flag the word is the value of (the word before it, or the variable's flag)."""
    listen = POD_LISTEN.fullmatch(word)
    if listen is not None:
        assert flag_name in READY_KEYS, f"{pod.name}: {word} is given to {flag_name!r}"
        pod.listens[int(listen.group(1))] = READY_KEYS[flag_name]
        return LOCAL_LISTEN
    peer = PEER_URL.fullmatch(word)
    if peer is not None:
        scheme, service, port = peer.groups()
        return f"{scheme}://{service_address(objects, pods, service, int(port))}"
    if word.startswith("/"):
        return str(pod.local_path(word))
    return word


def local_command(
    pod: LocalPod, objects: list[Manifest], pods: list[LocalPod]
) -> tuple[list[str], dict[str, str]]:
    """The container's args and environment (envFrom ConfigMaps, then env) rewritten."""
    args = [str(word) for word in pod.container.get("args") or []]
    local_args = [
        local_word(pod, word, args[index - 1] if index else "", objects, pods)
        for index, word in enumerate(args)
    ]
    env = {
        name: local_word(pod, value, flag_of_variable(name), objects, pods)
        for name, value in environment(pod.container, objects).items()
    }
    for variable in pod.container.get("env") or []:
        if "valueFrom" in variable:
            env[variable["name"]] = value_from(pod, variable["valueFrom"], objects)
    return local_args, env


def value_from(pod: LocalPod, source: Manifest, objects: list[Manifest]) -> str:
    """What the kubelet puts in a variable from `source`: a Secret's key or the pod's name."""
    if "secretKeyRef" in source:
        reference = source["secretKeyRef"]
        secret = find(objects, "Secret", reference["name"])
        assert secret is not None, f"{pod.name} reads Secret/{reference['name']}: not made"
        data = secret_data(secret)
        assert reference["key"] in data, f"Secret/{reference['name']} has no {reference['key']}"
        return data[reference["key"]]
    if source.get("fieldRef", {}).get("fieldPath") == "metadata.name":
        return pod.name
    pytest.fail(f"{pod.name}: a variable from {source} is not modelled", pytrace=False)


def existing_secret(name: str, data: Mapping[str, str]) -> Manifest:
    """A Secret the operator makes before installing (the values name it), as the test's."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data}


def error_lines(process: GatewayProcess) -> list[str]:
    """stderr lines that are not JSON log entries (the chart sets HARNESS_LOG_FORMAT=json)
    or are entries at error level or above."""
    found: list[str] = []
    for line in process.log:
        try:
            entry = json.loads(line)
        except ValueError:
            found.append(line)
            continue
        if not isinstance(entry, dict) or entry.get("level") in ("error", "critical"):
            found.append(line)
    return found


@dataclass(slots=True, kw_only=True)
class Release:
    """A render and the local pods of its long-running containers."""

    objects: list[Manifest]
    pods: list[LocalPod]
    root: Path
    started: list[list[LocalPod]] = field(default_factory=list)
    """The pods in start batches: a batch starts once the Services it names have backends."""
    hooks: list[tuple[str, str]] = field(default_factory=list)
    """(container, stdout) of every hook Job container that ran, in order."""

    def of(self, name: str) -> list[LocalPod]:
        """The pods of component `name` (gateway, registry, router)."""
        return [pod for pod in self.pods if component(pod.workload) == name]

    def address(self, service_name: str, port: int | str) -> str:
        return service_address(self.objects, self.pods, service_name, port)

    async def start(self) -> None:
        pending = list(self.pods)
        while pending:
            running = {
                name_of(service)
                for service in self.objects
                if service["kind"] == "Service"
                and any(
                    selects(service["spec"].get("selector") or {}, pod_labels(pod.workload))
                    for batch in self.started
                    for pod in batch
                )
            }
            batch = [pod for pod in pending if peer_services(pod, self.objects) <= running]
            waiting = {pod.name: peer_services(pod, self.objects) for pod in pending}
            assert batch, f"no pod can start; each waits for Services: {waiting}"
            for pod in batch:
                args, env = local_command(pod, self.objects, self.pods)
                pod.process = PodProcess(pod.name, args, env)
            self.started.append(batch)
            pending = [pod for pod in pending if pod not in batch]
            results = await asyncio.gather(
                *(pod.process.start() for pod in batch if pod.process is not None),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result

    async def stop(self) -> dict[str, int]:
        """SIGTERM every batch in reverse start order (daemons first); exit status by pod."""
        codes: dict[str, int] = {}
        for batch in reversed(self.started):
            running = [pod for pod in batch if pod.process is not None and pod.process.running]
            results = await asyncio.gather(*(pod.running.terminate() for pod in running))
            codes.update({pod.name: code for pod, code in zip(running, results, strict=True)})
        return codes

    def logs(self) -> str:
        return "\n".join(
            f"--- {pod.name} stderr ---\n{pod.process.stderr}"
            for pod in self.pods
            if pod.process is not None
        )


@contextlib.asynccontextmanager
async def run_release(
    ci: str,
    *,
    most_replicas: int = 1,
    values: Sequence[Path] = (),
    existing: Sequence[Manifest] = (),
) -> AsyncIterator[Release]:
    """The long-running containers of `helm template` with ci/<ci>-values.yaml (then
    `values` over it), as started local processes, after its hook Jobs ran to completion;
    `existing` are the Secrets made outside the chart. Every process is stopped when the
    block ends, whether it raised or not."""
    objects = render([ci_file(ci), *values], kube_version=KUBE_VERSION) + list(existing)
    with tempfile.TemporaryDirectory(prefix="harness-chart-") as directory:
        root = Path(directory)
        release = Release(
            objects=objects, pods=make_pods(objects, root, most_replicas=most_replicas), root=root
        )
        try:
            for job in hook_jobs(objects):
                release.hooks += await run_job(release, job)
            await release.start()
            yield release
        except BaseException:
            print(release.logs(), file=sys.stderr)  # pytest shows it with the failure
            raise
        finally:
            try:
                for batch in reversed(release.started):
                    await asyncio.gather(
                        *(pod.process.close() for pod in batch if pod.process is not None),
                        return_exceptions=True,
                    )
            finally:
                for pod in release.pods:
                    if pod.process is not None:
                        pod.process.kill_now()


# --- probes, scrapes and one-shot commands ----------------------------------------------------


async def health(address: str, service: str) -> int | None:
    """The grpc.health.v1 status of `service` at `address`; None when nothing answers."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            request = health_pb2.HealthCheckRequest(service=service)
            response = await stub.Check(request, timeout=HEALTH_TIMEOUT)
        except grpc.aio.AioRpcError:
            return None
        return int(response.status)


def probe_target(pod: LocalPod, probe: str) -> tuple[str, str]:
    """(local address, service name) of one of the container's native gRPC probes."""
    check = pod.container[probe]["grpc"]
    return pod.bound(int(check["port"])), str(check.get("service", ""))


async def assert_probes_pass(pod: LocalPod) -> None:
    """The startup, readiness and liveness probes, as the kubelet sends them, get SERVING."""
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        address, service = probe_target(pod, probe)
        status = await health(address, service)
        assert status == SERVING, f"{pod.name} {probe} (service {service!r}): {status}"


def scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=HEALTH_TIMEOUT) as response:
        assert response.status == 200
        body: bytes = response.read()
        return body.decode("utf-8")


@dataclass(frozen=True, slots=True)
class Shutdown:
    """What a pod spec allows a container's shutdown."""

    grace: float
    """terminationGracePeriodSeconds: the kubelet's whole countdown, preStop included."""
    pre_stop: float
    """The preStop sleep, which runs before SIGTERM inside that countdown."""
    delay: float
    """--shutdown-delay: health NOT_SERVING while the process serves on."""
    in_flight: float
    """--shutdown-grace: in-flight calls' time after the delay."""


def shutdown_of(pod: LocalPod) -> Shutdown:
    pre_stop = pod.container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep", f"{pod.name}'s preStop is {pre_stop}, not a sleep"
    delay, in_flight = (
        flag(pod.container, "--shutdown-delay"),
        flag(pod.container, "--shutdown-grace"),
    )
    assert delay is not None, f"{pod.name} has no --shutdown-delay"
    assert in_flight is not None, f"{pod.name} has no --shutdown-grace"
    return Shutdown(
        grace=float(pod_spec(pod.workload)["terminationGracePeriodSeconds"]),
        pre_stop=float(pre_stop[1]),
        delay=parse_duration(delay),
        in_flight=parse_duration(in_flight),
    )


async def run_helm_test(release: Release) -> tuple[int, str, str]:
    """The chart's `helm test` pod (`harness status` with the admin token) as a local
    command: (exit status, stdout, stderr)."""
    (test_pod,) = [w for w in workloads(release.objects) if is_helm_test(w)]
    (container,) = pod_spec(test_pod)["containers"]
    pod = make_pod(
        release.objects, test_pod, container, release.root / name_of(test_pod), name_of(test_pod)
    )
    args, env = local_command(pod, release.objects, release.pods)
    executable = Path(sys.executable).with_name(str(container["command"][0]))
    process = await asyncio.create_subprocess_exec(
        str(executable),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**hermetic_environment(), **env},
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), COMMAND_TIMEOUT)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def run_job(release: Release, job: Manifest) -> list[tuple[str, str]]:
    """A hook Job's pod as local commands: its init containers, then its containers, one
    after another (the Job's containers are one here), each of which must exit 0, as the
    Job must succeed for Helm to go on. Returns (container, stdout) of each."""
    spec = pod_spec(job)
    ran: list[tuple[str, str]] = []
    for container in [*(spec.get("initContainers") or []), *spec["containers"]]:
        assert "command" not in container, f"{ref(job)} overrides the ENTRYPOINT"
        name = f"{name_of(job)}-{container['name']}"
        pod = make_pod(release.objects, job, container, release.root / name, name_of(job))
        args, env = local_command(pod, release.objects, release.pods)
        process = await asyncio.create_subprocess_exec(
            *entrypoint(),
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**hermetic_environment(), **env},
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), COMMAND_TIMEOUT)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert process.returncode == 0, f"{ref(job)} {container['name']}: {err.decode()}"
        ran.append((container["name"], out.decode()))
    return ran


async def carry_direct_message(release: Release, first: LocalPod, second: LocalPod) -> None:
    """Register alice on `first` and bob on `second` with each daemon's admin token (the
    chart's Secret's), send alice → bob, and see bob receive, acknowledge and drain it."""
    tokens = secret_data(one(release.objects, "Secret", f"{FULLNAME}-tokens"))
    names = {"alice": first, "bob": second}
    registered: dict[str, str] = {}
    for name, pod in names.items():
        process = pod.running
        assert process.admin_token == tokens["admin-token"]
        async with await harness_client.connect_management(
            process.address, admin_token=process.admin_token
        ) as operator:
            registered[name] = (await operator.register_agent(name)).token

    alice = await harness_client.connect(first.running.address, token=registered["alice"])
    bob = await harness_client.connect(second.running.address, token=registered["bob"])
    async with alice, bob:
        stream = bob.messages()
        try:
            await asyncio.wait_for(
                alice.send(MessageInput(to="agent:bob", text="hello from alice")),
                DELIVERY_BOUND,
            )
            delivery = await asyncio.wait_for(anext(stream), DELIVERY_BOUND)
            assert isinstance(delivery.item, MulticastItem), delivery.item
            assert delivery.item.message.content == (TextPart(text="hello from alice"),)
            await delivery.acknowledge()
        finally:
            await stream.aclose()
        async with await harness_client.connect_management(
            second.running.address, admin_token=second.running.admin_token
        ) as operator:
            await eventually(
                lambda: operator.agent_status("bob"), lambda status: status.backlog == 0
            )


async def assert_stopped_cleanly(release: Release) -> None:
    """SIGTERM in reverse start order: every process exits 0 having logged no error."""
    codes = await release.stop()
    assert codes == {pod.name: 0 for pod in release.pods}, release.logs()
    for pod in release.pods:
        assert pod.process is not None
        assert not error_lines(pod.process), "\n".join(error_lines(pod.process))


async def terminate_timed(pod: LocalPod) -> tuple[int, float]:
    """SIGTERM the pod's process and wait: (exit status, seconds it took)."""
    started = time.monotonic()
    code = await pod.running.terminate()
    return code, time.monotonic() - started


# --- the tests --------------------------------------------------------------------------------

"""The chart's `mode: cluster` commands run as three local replicas (issue 25 item 8).

`helm template` with `ci/cluster-values.yaml`, pointed at the test's PostgreSQL, runs as
`tests/e2e/test_chart_commands.py` runs the other modes (its module docstring says what is
rewritten and why): the migration hook Job first (`migrate --cluster` with the seed key from
the Secret the operator made, then `migrate --registry`), then every replica of the
Deployment as a `harness-gateway` process from the container's args and environment, and a
round-robin TCP proxy (`gateway/testing_proxy.py`) standing for the one Service.

What a pod has and a local process has not, beyond that module's rewriting:

- the downward API: `metadata.name` is the pod's name (the replica id) and `status.podIP`
  is 127.0.0.1, and a `$(NAME)` in a variable's value expands from the variables before it,
  as the kubelet expands it;
- the pod's gRPC port: every replica listens on a port of its own, chosen here before the
  start, so the address the chart advertises (`$(POD_IP):<grpc port>`) names the listener
  that port's flag opened on this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Final

import harness_client
import pytest
import yaml
from harness_client import MessageInput, MulticastItem, TextPart

from gateway.cluster.seeds import SeedKey
from gateway.testing_proxy import RoundRobinProxy
from tests.e2e.chart_processes import (
    LOCAL_LISTEN,
    POD_LISTEN,
    LocalPod,
    PodProcess,
    Release,
    assert_probes_pass,
    error_lines,
    existing_secret,
    flag_of_variable,
    local_word,
    make_pods,
    run_helm_test,
    run_job,
)
from tests.servers import PostgresServer
from tests.support import eventually
from tests.unit.deploy.chart_support import (
    FULLNAME,
    Manifest,
    chart_values,
    ci_file,
    environment,
    hook_jobs,
    one,
    render,
    secret_data,
)

pytestmark = pytest.mark.e2e

KUBE_VERSION: Final = "1.27.0"
"""The chart's floor: the render the processes run from."""

REPLICAS: Final = 3

POD_IP: Final = "127.0.0.1"
"""What `status.podIP` is for a local replica."""

CLAIM_BOUND: Final = 60.0
"""Seconds until every partition is held: a replica claims only after one lease TTL (6 s) of
fresh beats, and three processes start on a shared 2-core machine."""

DELIVERY_BOUND: Final = 30.0
"""Seconds a direct message between replicas may take to reach its recipient."""

OWN_CONNECTION: Final = (("grpc.use_local_subchannel_pool", 1),)
"""Each client its own connection, so the proxy spreads them over the replicas."""

REFERENCE: Final = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def free_port() -> int:
    """A port nothing listens on now; the replica binds it a moment later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((POD_IP, 0))
        port: int = probe.getsockname()[1]
        return port


def pod_variable(pod: LocalPod, source: Manifest, objects: list[Manifest]) -> str:
    """A variable's `valueFrom` as the kubelet resolves it for this pod."""
    if "secretKeyRef" in source:
        reference = source["secretKeyRef"]
        secret = one(objects, "Secret", reference["name"])
        return secret_data(secret)[reference["key"]]
    field_path = source.get("fieldRef", {}).get("fieldPath")
    if field_path == "metadata.name":
        return pod.name
    if field_path == "status.podIP":
        return POD_IP
    pytest.fail(f"{pod.name}: a variable from {source} is not modelled", pytrace=False)


def replica_command(
    pod: LocalPod, objects: list[Manifest], grpc_port: int, local_port: int
) -> tuple[list[str], dict[str, str]]:
    """The replica's args and environment, rewritten: its `--listen` on `local_port`, its
    variables resolved and expanded in order, and `<pod IP>:<grpc port>` (the advertised
    address) moved to that listener."""
    args = [str(word) for word in pod.container.get("args") or []]
    local_args = []
    for index, word in enumerate(args):
        flag_name = args[index - 1] if index else ""
        local = local_word(pod, word, flag_name, objects, [])
        if flag_name == "--listen" and POD_LISTEN.fullmatch(word):
            assert local == LOCAL_LISTEN
            local = f"{POD_IP}:{local_port}"
        local_args.append(local)
    env = dict(environment(pod.container, objects))
    defined: dict[str, str] = {}  # what a `$(NAME)` may name: the variables before it
    for variable in pod.container.get("env") or []:
        name = variable["name"]
        if "valueFrom" in variable:
            env[name] = pod_variable(pod, variable["valueFrom"], objects)
        else:
            expanded = REFERENCE.sub(
                lambda match: defined.get(match.group(1), match.group(0)), env[name]
            )
            env[name] = local_word(pod, expanded, flag_of_variable(name), objects, [])
        defined[name] = env[name]
    pod_address = f"{POD_IP}:{grpc_port}"
    return local_args, {
        name: f"{POD_IP}:{local_port}" if value == pod_address else value
        for name, value in env.items()
    }


@contextlib.asynccontextmanager
async def run_cluster(
    values: Path, existing: list[Manifest]
) -> AsyncIterator[tuple[Release, RoundRobinProxy]]:
    """The hook Job run to completion, then every replica started at once, and the proxy over
    their gRPC listeners; every process stopped when the block ends."""
    objects = render([ci_file("cluster"), values], kube_version=KUBE_VERSION) + existing
    grpc_port = int(chart_values([ci_file("cluster"), values])["service"]["grpcPort"])
    with tempfile.TemporaryDirectory(prefix="harness-cluster-chart-") as directory:
        root = Path(directory)
        release = Release(
            objects=objects, pods=make_pods(objects, root, most_replicas=REPLICAS), root=root
        )
        try:
            for job in hook_jobs(objects):
                release.hooks += await run_job(release, job)
            for pod in release.pods:
                args, env = replica_command(pod, objects, grpc_port, free_port())
                pod.process = PodProcess(pod.name, args, env)
            release.started.append(list(release.pods))
            results = await asyncio.gather(
                *(pod.process.start() for pod in release.pods if pod.process is not None),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result
            addresses = [pod.bound(grpc_port) for pod in release.pods]
            async with RoundRobinProxy(addresses) as proxy:
                yield release, proxy
        except BaseException:
            print(release.logs(), file=sys.stderr)  # pytest shows it with the failure
            raise
        finally:
            try:
                await asyncio.gather(
                    *(pod.process.close() for pod in release.pods if pod.process is not None),
                    return_exceptions=True,
                )
            finally:
                for pod in release.pods:
                    if pod.process is not None:
                        pod.process.kill_now()


def held_by_replica(postgres_server: PostgresServer, database: str) -> dict[str, int]:
    """Partitions each replica holds, and "" for those nobody holds (cluster.md §3.2)."""
    rows = postgres_server.sql(
        "SELECT coalesce(holder, ''), count(*) FROM partitions GROUP BY 1 ORDER BY 1", database
    )
    held: dict[str, int] = {}
    for row in rows.splitlines():
        holder, _, count = row.rpartition("|")
        held[holder] = int(count)
    return held


def servers_values(path: Path, dsn: str) -> Path:
    """The test's PostgreSQL (no TLS) and a fixed replica count (the autoscaler off)."""
    path.write_text(
        yaml.safe_dump(
            {
                "cluster": {"autoscaling": {"enabled": False}, "replicas": REPLICAS},
                "network": {
                    "postgresql": {
                        "url": dsn,
                        "sslMode": "",
                        "sslRootCert": {"secretName": ""},
                    }
                },
            }
        ),
        encoding="utf-8",
    )
    return path


async def register_through(address: str, admin_token: str, names: Sequence[str]) -> dict[str, str]:
    """Each agent registered through `address` (any replica answers); name → its token."""
    async with await harness_client.connect_management(
        address, admin_token=admin_token
    ) as operator:
        return {name: (await operator.register_agent(name)).token for name in names}


@pytest.mark.timeout(240)
async def test_three_rendered_replicas_behind_one_service_carry_a_message_between_agents(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """ci/cluster-values.yaml on the test's PostgreSQL: the Job sets the database up for the
    cluster with the operator's seed key, three replicas named by their pods share the
    partitions, and two agents registered and connected through the proxy exchange a message
    whichever replicas they are homed on."""
    dsn = postgres_server.create_database("chart_cluster")
    values = servers_values(tmp_path / "servers-values.yaml", dsn)
    seed_name = chart_values([ci_file("cluster")])["cluster"]["seedKey"]["existingSecret"]
    seed_file = tmp_path / "seed-key"
    SeedKey.generate().write(seed_file)
    existing = [
        existing_secret(seed_name, {"seed-key": seed_file.read_text(encoding="utf-8")}),
        # The test's PostgreSQL trusts loopback: the password is carried, not checked.
        existing_secret("harness-postgresql", {"password": "chart-cluster-password"}),
    ]
    async with run_cluster(values, existing) as (release, proxy):
        assert [name for name, _ in release.hooks] == ["migrate-store", "migrate-registry"]
        reports = [json.loads(out.strip().splitlines()[-1]) for _, out in release.hooks]
        assert [report["component"] for report in reports] == ["cluster", "registry"]
        replicas = release.pods
        assert [pod.name for pod in replicas] == [f"{FULLNAME}-{i}" for i in range(REPLICAS)]
        database = dsn.rpartition("/")[2]
        names = [pod.name for pod in replicas]
        await eventually(
            lambda: asyncio.to_thread(held_by_replica, postgres_server, database),
            lambda held: sorted(held) == names and all(held.values()),
            within=CLAIM_BOUND,
        )
        for pod in replicas:
            await assert_probes_pass(pod)

        code, out, err = await run_helm_test(release)
        assert code == 0, err
        assert "mode: cluster" in out, out

        tokens = secret_data(one(release.objects, "Secret", f"{FULLNAME}-tokens"))
        agents = await register_through(proxy.address, tokens["admin-token"], ["alice", "bob"])
        alice = await harness_client.connect(
            proxy.address, token=agents["alice"], options=OWN_CONNECTION
        )
        bob = await harness_client.connect(
            proxy.address, token=agents["bob"], options=OWN_CONNECTION
        )
        async with alice, bob:
            stream = bob.messages()
            try:
                await asyncio.wait_for(
                    alice.send(MessageInput(to="agent:bob", text="hello across replicas")),
                    DELIVERY_BOUND,
                )
                delivery = await asyncio.wait_for(anext(stream), DELIVERY_BOUND)
                assert isinstance(delivery.item, MulticastItem), delivery.item
                assert delivery.item.message.content == (TextPart(text="hello across replicas"),)
                await delivery.acknowledge()
            finally:
                await stream.aclose()

        rows = postgres_server.sql("SELECT replica_id FROM replicas ORDER BY replica_id", database)
        assert rows.split() == [pod.name for pod in replicas]
        codes = await release.stop()
        assert codes == {pod.name: 0 for pod in replicas}, release.logs()
        for pod in replicas:
            assert pod.process is not None
            assert not error_lines(pod.process), "\n".join(error_lines(pod.process))

"""The command lines the Helm chart renders really run the gateway (issue 14).

How the chart's containers run as local processes is `tests/e2e/chart_processes.py`'s docstring.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
import yaml

from gateway.testing import hermetic_environment
from tests.e2e.chart_processes import (
    COMMAND_TIMEOUT,
    MIN_TOKEN_CHARS,
    NOT_SERVING,
    SERVING,
    assert_probes_pass,
    assert_stopped_cleanly,
    carry_direct_message,
    entrypoint,
    error_lines,
    existing_secret,
    health,
    probe_target,
    run_helm_test,
    run_release,
    scrape,
    shutdown_of,
    terminate_timed,
)
from tests.servers import NatsCluster, PostgresServer
from tests.support import eventually
from tests.unit.deploy.chart_support import FULLNAME, configmap_data, environment, one, secret_data


async def test_the_embedded_gateway_runs_from_its_rendered_command_and_stops_inside_its_grace():
    async with run_release("embedded") as release:
        (gateway,) = release.pods
        await assert_probes_pass(gateway)
        assert "liveness" in {
            probe_target(gateway, p)[1] for p in ("startupProbe", "livenessProbe")
        }

        metrics = await asyncio.to_thread(scrape, release.address(f"{FULLNAME}-metrics", "metrics"))
        assert "harness_build_info{" in metrics

        # The daemon read the admin token from the file HARNESS_ADMIN_TOKEN_FILE names (the
        # Secret's key, mounted), and the helm test pod's `harness status` is let in with it.
        tokens = secret_data(one(release.objects, "Secret", f"{FULLNAME}-tokens"))
        assert len(tokens["admin-token"]) >= MIN_TOKEN_CHARS
        process = gateway.running
        assert process.admin_token_file == gateway.local_path(
            environment(gateway.container, release.objects)["HARNESS_ADMIN_TOKEN_FILE"]
        )
        assert process.admin_token == tokens["admin-token"]
        code, out, err = await run_helm_test(release)
        assert code == 0, f"harness status exited {code}: {err}"
        assert "mode: embedded" in out, out

        # SIGTERM: readiness turns NOT_SERVING while liveness stays SERVING for the delay,
        # then the process exits 0 well inside what the kubelet leaves after preStop.
        shutdown = shutdown_of(gateway)
        assert shutdown.grace >= shutdown.pre_stop + shutdown.delay + shutdown.in_flight
        readiness, liveness = (
            probe_target(gateway, "readinessProbe"),
            probe_target(gateway, "livenessProbe"),
        )
        stopping = asyncio.create_task(terminate_timed(gateway))
        try:
            await eventually(
                lambda: health(*readiness), lambda s: s == NOT_SERVING, within=shutdown.delay
            )
            assert await health(*liveness) == SERVING
        finally:
            code, took = await stopping
        assert code == 0, process.stderr
        assert shutdown.delay <= took <= shutdown.grace - shutdown.pre_stop, took
        assert not error_lines(process), "\n".join(error_lines(process))


@pytest.mark.timeout(120)
async def test_the_network_release_carries_a_direct_message_between_two_rendered_daemons():
    async with run_release("network", most_replicas=3) as release:
        assert [pod.name for pod in release.started[0]] == [f"{FULLNAME}-registry-0"]
        assert [pod.name for pod in release.started[1]] == [f"{FULLNAME}-router"]
        daemons = release.of("gateway")
        assert release.started[2] == daemons
        assert len(daemons) == 3, "ci/network-values.yaml renders three daemons"
        for pod in release.pods:
            await assert_probes_pass(pod)

        tokens = secret_data(one(release.objects, "Secret", f"{FULLNAME}-tokens"))
        assert len(tokens["peer-token"]) >= MIN_TOKEN_CHARS
        await carry_direct_message(release, daemons[0], daemons[1])
        await assert_stopped_cleanly(release)


@pytest.mark.timeout(180)
async def test_the_nats_and_postgresql_release_migrates_then_carries_a_message_between_daemons(
    nats_server: NatsCluster, postgres_server: PostgresServer, tmp_path: Path
):
    """ci/network-nats-postgresql-values.yaml pointed at the test's JetStream and PostgreSQL:
    the migration Job creates both schemas, two Registry replicas share the database and the
    generated signing key, no Router process runs, and two daemons keep their stores in the
    database under their pod names while a message goes from one to the other."""
    dsn = postgres_server.create_database("chart")
    servers = tmp_path / "servers-values.yaml"
    servers.write_text(
        yaml.safe_dump(
            {
                "network": {
                    "nats": {
                        "servers": nats_server.urls,
                        # The test's JetStream has no accounts: no credentials file.
                        "creds": {"secretName": ""},
                        # The session's server is shared: a prefix of this test's own.
                        "subjectPrefix": f"chart{os.getpid()}",
                    },
                    "postgresql": {"url": dsn},
                }
            }
        ),
        encoding="utf-8",
    )
    # The password Secret the values name, made by the operator; the test's PostgreSQL
    # trusts loopback, so it is carried (as PGPASSWORD) but not checked.
    password = existing_secret("harness-postgresql", {"password": "chart-e2e-password"})
    async with run_release(
        "network-nats-postgresql", most_replicas=2, values=[servers], existing=[password]
    ) as release:
        reports = [json.loads(out) for _, out in release.hooks]
        assert [(r["component"], r["backend"], r["state"]) for r in reports] == [
            ("store", "postgresql", "created"),
            ("registry", "postgresql", "created"),
        ]
        assert release.of("router") == []
        registries, daemons = release.of("registry"), release.of("gateway")
        assert [pod.name for pod in release.started[0]] == [pod.name for pod in registries]
        assert release.started[1] == daemons
        assert len(registries) == len(daemons) == 2
        for pod in release.pods:
            await assert_probes_pass(pod)
            assert pod.running.env["PGPASSWORD"] == "chart-e2e-password"
        keys = {pod.running.ready_line["registry_public_key"] for pod in registries}
        assert len(keys) == 1, f"the replicas sign with different keys: {keys}"

        await carry_direct_message(release, daemons[0], daemons[1])
        database = dsn.rpartition("/")[2]
        owners = postgres_server.sql("SELECT owner FROM leases ORDER BY owner", database)
        assert owners.split() == [pod.name for pod in daemons]
        await assert_stopped_cleanly(release)


async def test_the_rendered_firewall_file_passes_check_config_and_the_daemon_starts_with_it():
    async with run_release("firewall") as release:
        (gateway,) = release.pods
        await assert_probes_pass(gateway)
        process = gateway.running
        rendered = configmap_data(release.objects, f"{FULLNAME}-firewall")
        assert rendered is not None
        (content,) = rendered.values()
        firewall_file = Path(process.env["HARNESS_FIREWALL_CONFIG"])
        assert await asyncio.to_thread(firewall_file.read_text, "utf-8") == content

        # check-config takes serve's flags: the daemon's own args after the subcommand.
        assert process.role == "serve"
        checking = await asyncio.create_subprocess_exec(
            *entrypoint(),
            "check-config",
            *process.args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**hermetic_environment(), **process.env},
        )
        out, err = await asyncio.wait_for(checking.communicate(), COMMAND_TIMEOUT)
        assert checking.returncode == 0, err.decode()
        described = json.loads(out)
        assert described["firewall_config"] == str(firewall_file)
        assert described["firewall_middlewares"] == ["tenants (recipient-policy)"]
        # The ConfigMap's and extraEnv's settings reached the process too.
        assert described["log_level"] == "debug"
        assert described["commit_delay"] == pytest.approx(0.002)

        codes = await release.stop()
        assert codes == {gateway.name: 0}, release.logs()

"""`make bench ARGS="--cluster 2 --hub"` for real (cluster.md §13): the bench's own PostgreSQL,
the cluster's database set up by `migrate --cluster` and `migrate --registry`, two
`harness-gateway serve --cluster` replicas, the partitions settled, a hub with the run's
lowest AgentId sending to receivers whose clients dial random replicas; every post certified
and delivered, both replicas charged, PostgreSQL measured, every replica exiting 0."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from bench.gateway_run import measure_gateway
from bench.plan import cluster_topology, plan_cluster_groups

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

GATEWAY_BIN = str(Path(sys.executable).parent / "harness-gateway")


async def test_a_hub_run_on_two_replicas_certifies_and_delivers_every_post():
    topology = cluster_topology(2)
    outcome = await measure_gateway(
        gateway_bin=GATEWAY_BIN,
        plans=plan_cluster_groups(3, group_size=2, replicas=2, hub=True, rng=random.Random(2)),
        topology=topology,
        burst=1,
        seconds=1.0,
        hub=True,
    )
    problems = {report.name: report.problems for report in outcome.processes}
    assert outcome.posts > 0
    assert outcome.send_failures == {}
    assert outcome.undelivered == 0
    assert outcome.receiver_errors == ()
    assert outcome.strangers == 0
    assert {report.name: report.exit_code for report in outcome.processes} == {
        "replica-a": 0,
        "replica-b": 0,
    }, problems
    assert all(report.problem_count == 0 for report in outcome.processes), problems
    # Any replica may carry any part of a post: each is charged over all of them.
    assert [(load.name, load.posts) for load in outcome.daemon_loads] == [
        ("replica-a", outcome.posts),
        ("replica-b", outcome.posts),
    ]
    assert [server.name for server in outcome.servers] == ["postgresql"]
    assert outcome.server_cpu_seconds is not None
    assert outcome.gateway_cpu_seconds is not None

"""Every client scenario (`clients/scenarios.txt`), Python client, through a 3-replica cluster.

The scenarios are the bodies `tests/integration/clients/test_client_scenarios.py` runs
(`client_scenarios.py`'s `scenario_*`), collected here as `test_*` with this module's `setting`: three in-process replicas on one real
PostgreSQL behind a `RoundRobinProxy` (the Service), alice, bob and carol registered before
the test and homed on three different replicas (`homes_support.homed_cluster`), each endpoint
on its own connection, and the operator's management client dialling the proxy too. So every
post certifies across replicas, every delivery crosses one, and every call may be forwarded
(cluster.md §4–§7); the client follows the home hints as it would in Kubernetes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import harness_client
import pytest
from harness_client import Endpoint

from gateway.testing import RunningGateway
from tests.integration.clients import client_scenarios as scenarios
from tests.integration.cluster.homes_support import (
    OWN_CONNECTION,
    HomedCluster,
    homed_cluster,
)
from tests.servers import PostgresServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

NAMES: Final = ("alice", "bob", "carol")
"""Every agent a scenario connects as: registered before it, on three homes."""

for _name, _scenario in vars(scenarios).items():
    if _name.startswith("scenario_"):
        globals()["test_" + _name.removeprefix("scenario_")] = _scenario


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSetting(scenarios.Setting):
    """A scenario's setting on the cluster: clients dial the proxy, agents are the ones
    registered before the test (so the scenario's own registrations are not needed)."""

    cluster: HomedCluster

    @property
    def address(self) -> str:
        return self.cluster.address

    async def agent(self, name: str) -> Endpoint:
        return await self.stack.enter_async_context(
            await harness_client.connect(
                self.cluster.address, token=self.cluster.tokens[name], options=OWN_CONNECTION
            )
        )


@pytest.fixture
async def setting(
    postgres_server: PostgresServer, tmp_path: Path
) -> AsyncIterator[scenarios.Setting]:
    async with (
        homed_cluster(postgres_server, tmp_path, NAMES) as cluster,
        AsyncExitStack() as stack,
    ):
        homes = {cluster.home(name).address for name in NAMES}
        partitions = {cluster.partition(name) for name in NAMES}
        assert len(homes) == len(partitions), "the agents should be homed on three replicas"
        management = await stack.enter_async_context(
            await harness_client.connect_management(
                cluster.address, admin_token=cluster.files.admin()
            )
        )
        first = cluster.replicas[0]
        yield ClusterSetting(
            gateway=RunningGateway(
                gateway=first, data_dir=first.settings.data_dir, settings=first.settings
            ),
            management=management,
            stack=stack,
            cluster=cluster,
        )


def test_every_scenario_runs_here() -> None:
    listed = [
        line.split()[0]
        for line in (Path(__file__).parents[3] / "clients" / "scenarios.txt")
        .read_text(encoding="utf-8")
        .splitlines()
        if line.strip() and not line.startswith("#")
    ]
    collected = {name for name in globals() if name.startswith("test_")}
    assert {f"test_{scenario.replace('-', '_')}" for scenario in listed} <= collected

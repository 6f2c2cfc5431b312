"""Every client scenario (`clients/scenarios.txt`), TypeScript client, through a 3-replica cluster.

For each scenario this starts the cluster `test_cluster_scenarios.py` uses (three in-process
replicas on a real PostgreSQL behind a `RoundRobinProxy`, alice, bob and carol registered
before the test and homed on three different replicas), writes the proxy's address, the admin
token and the agents' tokens to a file, and runs that one scenario of the client's own suite
(`clients/node/test/scenarios.test.ts`, built to `build/test/`) under node with
`HARNESS_SCENARIO_GATEWAY` naming the file: its setting then connects there, a fresh client
(its own connection) per agent, instead of starting a gateway. The build comes from
`npm ci` and `npx tsc -p tsconfig.test.json` in `clients/node` (`npm test` does both); the
test fails, never skips, when it or `node` is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Final

import pytest

from tests.integration.cluster.homes_support import homed_cluster
from tests.servers import PostgresServer

pytestmark = [pytest.mark.slow, pytest.mark.node, pytest.mark.timeout(180)]

REPO: Final = Path(__file__).parents[3]
SUITE: Final = REPO / "clients" / "node" / "build" / "test" / "scenarios.test.js"
SCENARIOS: Final = [
    line.split()[0]
    for line in (REPO / "clients" / "scenarios.txt").read_text(encoding="utf-8").splitlines()
    if line.strip() and not line.startswith("#")
]
NAMES: Final = ("alice", "bob", "carol")
"""Every agent a scenario connects as: registered before it, on three homes."""

NODE_BOUND: Final = 120.0
"""Seconds one scenario's node process may take: its own waits are bounded at 20 s each."""


def node() -> str:
    found = shutil.which("node")
    assert found is not None, "node is not on PATH (Node 20 is part of the machine image)"
    assert SUITE.exists(), (
        f"{SUITE} is missing: run `npm ci` in the repository root, then "
        "`npx tsc -p tsconfig.test.json` in clients/node (or `make test-node`)"
    )
    return found


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_the_typescript_client_passes_the_scenario_through_a_cluster(
    scenario: str, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    command = node()
    async with homed_cluster(postgres_server, tmp_path, NAMES) as cluster:
        assert len({cluster.home(name).address for name in NAMES}) == len(
            {cluster.partition(name) for name in NAMES}
        ), "the agents should be homed on three replicas"
        given = tmp_path / "gateway.json"
        given.write_text(
            json.dumps(
                {
                    "address": cluster.address,
                    "adminToken": cluster.files.admin(),
                    "tokens": cluster.tokens,
                }
            ),
            encoding="utf-8",
        )
        process = await asyncio.create_subprocess_exec(
            command,
            "--test",
            "--test-reporter=tap",
            f"--test-name-pattern=^{scenario}$",
            str(SUITE),
            cwd=SUITE.parents[2],
            env={**os.environ, "HARNESS_SCENARIO_GATEWAY": str(given)},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            output, _ = await asyncio.wait_for(process.communicate(), NODE_BOUND)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    report = output.decode("utf-8", errors="replace")
    assert process.returncode == 0, report
    # The pattern matched exactly the one scenario (a typo would pass nothing).
    assert "# pass 1\n" in report, report
    assert "# fail 0\n" in report, report

"""A Node agent and a Python agent hold a gather on one real daemon.

The Node agent is the example `clients/examples/node_agent.mjs` (on the TypeScript client,
`@harness-gateway/client`) as a subprocess; the Python agent asks it a gather through
`harness_client`, and the Node agent's answer, fitted to the form, must arrive in the
Python agent's `collectiveResult`. The Node packages come from the repository's `npm ci`
and the client's build (`make node-build`); the test fails, never skips, when they or `node`
are missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Final

import harness_client
import pytest
from harness_client import (
    Answered,
    AskOperation,
    CollectiveOp,
    CollectiveResultItem,
    JsonValue,
    MemberResult,
    MessageInput,
)

from gateway.testing import run_daemon
from tests.e2e import support

pytestmark = [pytest.mark.e2e, pytest.mark.node]

REPO: Final = Path(__file__).resolve().parents[2]
AGENT: Final = REPO / "clients" / "examples" / "node_agent.mjs"
CLIENT_BUILD: Final = REPO / "node_modules" / "@harness-gateway" / "client" / "dist" / "index.js"

BOUND: Final = 30.0
"""Seconds any single wait may take (a gather's result, the Node agent's exit)."""

QUESTION: Final = "Which day works for the review?"
SCHEMA: Final[dict[str, JsonValue]] = {
    "type": "object",
    "properties": {
        "slot": {"type": "string", "enum": ["mon", "tue"]},
        "seats": {"type": "integer", "minimum": 2, "maximum": 9},
        "remote": {"type": "boolean"},
    },
    "required": ["slot", "seats"],
}
"""A form of three field shapes; the Node agent fits each with its first admissible value."""


def node() -> str:
    found = shutil.which("node")
    assert found is not None, "node is not on PATH (Node 20 is part of the machine image)"
    return found


def require_client() -> None:
    assert CLIENT_BUILD.is_file(), (
        f"{CLIENT_BUILD} is missing: run `npm ci` in the repository root and build the "
        "client (`npm run build --workspace clients/node`, or `make node-build`)"
    )


@contextlib.asynccontextmanager
async def node_agent(address: str, token: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """The example Node agent as `token`'s agent; stopped with SIGTERM at the end, and it
    must exit 0 within the bound."""
    process = await asyncio.create_subprocess_exec(
        node(),
        str(AGENT),
        cwd=REPO,
        env={**os.environ, "HARNESS_ADDRESS": address, "HARNESS_TOKEN": token},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), BOUND)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise AssertionError(f"{AGENT.name} ignored SIGTERM for {BOUND:g} s") from None


async def stderr(process: asyncio.subprocess.Process) -> str:
    """What the agent wrote on stderr (read once it exited)."""
    assert process.stderr is not None
    return (await process.stderr.read()).decode()


async def events(process: asyncio.subprocess.Process) -> list[dict[str, object]]:
    """The JSON lines the agent printed (read once it exited)."""
    assert process.stdout is not None
    return [json.loads(line) for line in (await process.stdout.read()).decode().splitlines()]


async def test_a_node_agent_answers_a_python_agents_gather() -> None:
    require_client()
    async with run_daemon() as daemon:
        agents = await support.register(daemon, "alice", "bob")
        async with (
            node_agent(daemon.address, agents["bob"].token) as bob,
            await harness_client.connect(daemon.address, token=agents["alice"].token) as alice,
            aclosing(alice.messages()) as alice_stream,
        ):
            asked = await alice.send(
                MessageInput(
                    to="agent:bob",
                    text=QUESTION,
                    collective=AskOperation(
                        op=CollectiveOp.GATHER, deadline=120, requested_schema=SCHEMA
                    ),
                )
            )
            delivery = await asyncio.wait_for(anext(alice_stream), BOUND)
            await delivery.acknowledge()

        assert bob.returncode == 0, f"{AGENT.name} exited {bob.returncode}: {await stderr(bob)}"
        printed = await events(bob)

    assert asked.operation_id is not None
    assert delivery.item == CollectiveResultItem(
        op=CollectiveOp.GATHER,
        id=asked.operation_id,
        to="agent:bob",
        question=QUESTION,
        outcomes=(
            MemberResult(
                member="agent:bob",
                outcome=Answered(content={"slot": "mon", "seats": 2, "remote": True}),
            ),
        ),
    )
    assert [event["event"] for event in printed] == ["listening", "received", "answered"]
    assert printed[2]["id"] == asked.operation_id

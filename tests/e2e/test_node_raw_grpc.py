"""A Node program with only `@grpc/grpc-js`, `@grpc/proto-loader` and `proto/` decodes a
`SendError` from a real daemon's status (`clients/examples/node_raw_send_error.mjs`).

The packages come from the repository's `npm ci` (the root `package.json` workspace); the
test fails, never skips, when they or `node` are missing: the example is part of what the
repository promises Node developers.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Final

import pytest

from gateway.testing import run_daemon
from tests.e2e import support

pytestmark = [pytest.mark.e2e, pytest.mark.node]

REPO: Final = Path(__file__).resolve().parents[2]
SCRIPT: Final = REPO / "clients" / "examples" / "node_raw_send_error.mjs"
PACKAGES: Final = ("@grpc/grpc-js", "@grpc/proto-loader")
"""The only packages the example may import."""

NODE_TIMEOUT: Final = 30.0
"""Seconds the script may take (it sets a 10 s deadline on its one call)."""

IMPORT: Final = re.compile(r"""^\s*import\b[^"']*["']([^"']+)["']""", re.MULTILINE)


def node() -> str:
    found = shutil.which("node")
    assert found is not None, "node is not on PATH (Node 20 is part of the machine image)"
    return found


def require_packages() -> None:
    missing = [name for name in PACKAGES if not (REPO / "node_modules" / name).is_dir()]
    assert not missing, (
        f"{', '.join(missing)} missing from {REPO / 'node_modules'}: run `npm ci` "
        "in the repository root"
    )


async def run_script(address: str, token: str, to: str) -> dict[str, Any]:
    """Run the example against `address` as `token`, sending to `to`; its one JSON line."""
    process = await asyncio.create_subprocess_exec(
        node(),
        str(SCRIPT),
        to,
        cwd=REPO,
        env={**os.environ, "HARNESS_URL": address, "HARNESS_TOKEN": token},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), NODE_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"{SCRIPT.name} did not finish within {NODE_TIMEOUT:g} s") from None
    assert process.returncode == 0, f"{SCRIPT.name} exited {process.returncode}: {stderr.decode()}"
    lines = stdout.decode().splitlines()
    assert len(lines) == 1, f"expected one JSON line, got {lines!r}"
    value = json.loads(lines[0])
    assert isinstance(value, dict)
    return value


def test_the_example_imports_only_grpc_js_proto_loader_and_node_builtins() -> None:
    imported = IMPORT.findall(SCRIPT.read_text(encoding="utf-8"))
    assert sorted(name for name in imported if not name.startswith("node:")) == sorted(PACKAGES)


async def test_the_raw_grpc_js_example_decodes_send_error_reasons_from_a_daemon() -> None:
    require_packages()
    async with run_daemon() as daemon:
        agents = await support.register(daemon, "alice", "bob")
        token = agents["alice"].token

        unknown = await run_script(daemon.address, token, "agent:nobody")
        invalid = await run_script(daemon.address, token, "bob")

    assert unknown == {
        "code": 5,
        "status": "NOT_FOUND",
        "reason": "unknown-agent",
        "detail": "agent:nobody is not registered with the gateway",
        "message": "send failed: agent:nobody is not registered with the gateway",
        "errorInfo": {"domain": "harness.v1", "reason": "UNKNOWN_AGENT"},
    }
    assert invalid == {
        "code": 3,
        "status": "INVALID_ARGUMENT",
        "reason": "invalid-address",
        "detail": None,
        "message": "send failed: the address must be agent:<name> or group:<name>,<name>,...",
        "errorInfo": {"domain": "harness.v1", "reason": "INVALID_ADDRESS"},
    }

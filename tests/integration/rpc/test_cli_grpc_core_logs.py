"""gRPC's C core never writes on the `harness` CLI's stderr unless the user asks for it.

The C core logs through absl straight to stderr (`I1201 12:33:05.510358 16791
ssl_transport_security.cc:2563] Handshake failed ...`), past Python logging. The CLI runs
with `GRPC_VERBOSITY=NONE` unless `GRPC_VERBOSITY` or `GRPC_TRACE` is set. A TLS client
against a plaintext gateway makes the C core log a failed handshake every attempt.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Final

import pytest

from gateway.testing import run_gateway

CORE_LINE: Final = re.compile(r"^[EWIF]\d{4} ", re.MULTILINE)
"""The start of a C-core log line: severity, then month and day."""
CLI_TIMEOUT: Final = "1"
"""`--timeout` of the CLI: long enough for a few handshakes."""
BOUND: Final = 30.0
"""Seconds the CLI process may take in all."""


SCRIPT: Final = Path(sys.executable).with_name("harness")
"""The `harness` console script of this interpreter's environment."""


async def run_cli(command: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run the CLI against a plaintext gateway as a TLS client: exit code and stderr."""
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        _, stderr = await asyncio.wait_for(process.communicate(), BOUND)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, stderr.decode("utf-8", errors="replace")


def send_over_tls(address: str) -> list[str]:
    """`send` arguments that make the CLI speak TLS to a plaintext `address`."""
    return [
        *("--url", f"grpcs://{address}", "--token", "hat_x", "--timeout", CLI_TIMEOUT),
        *("send", "agent:bob", "hi"),
    ]


def environment(**extra: str) -> dict[str, str]:
    """The caller's environment without `HARNESS_*` or `GRPC_*` variables, plus `extra`."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("HARNESS_", "GRPC_"))
    }
    return {**kept, **extra}


@pytest.mark.parametrize(
    "program",
    [[str(SCRIPT)], [sys.executable, "-m", "harness_cli"]],
    ids=["script", "python-m"],
)
async def test_a_failing_tls_handshake_leaves_no_c_core_line_on_the_cli_stderr(
    program: list[str],
):
    async with run_gateway() as gw:
        code, stderr = await run_cli([*program, *send_over_tls(gw.address)], environment())
    assert code == 3, stderr
    assert "transport-failed" in stderr
    assert CORE_LINE.findall(stderr) == [], stderr


async def test_the_user_s_grpc_verbosity_still_shows_the_c_core_lines():
    # The control of the test above: the same failure does make the C core log.
    async with run_gateway() as gw:
        code, stderr = await run_cli(
            [str(SCRIPT), *send_over_tls(gw.address)], environment(GRPC_VERBOSITY="INFO")
        )
    assert code == 3, stderr
    assert CORE_LINE.search(stderr), stderr

"""The image's command line, run against the local install (issue 14, item 1).

No container engine is reachable here, so the test runs what deploy/Dockerfile says the
image runs: its final stage's ENTRYPOINT + CMD, with its ENV, where this interpreter's bin
directory plays /opt/harness/bin (first on PATH) and a temporary directory plays the data
volume. An operator's settings come on top, as `docker run -e` would give them: the three
listeners on 127.0.0.1:0. The daemon must log a JSON `ready` line (the image sets
HARNESS_LOG_FORMAT=json), answer health and /metrics, and exit 0 on SIGTERM without an
error line. The default listen address (the image sets no HARNESS_LISTEN) is read through
`check-config` with the image's environment, since port 7770 itself may be taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from gateway import __version__
from gateway.testing import _ready_entry, hermetic_environment
from tests.unit.deploy.dockerfile_support import Stage, final_stage, substitute

pytestmark = pytest.mark.e2e

IMAGE_BIN: Final = "/opt/harness/bin"
"""Where the image's virtual environment keeps its commands (deploy/Dockerfile)."""

BOUND: Final = 20.0
"""Seconds any one wait of these tests may take: the ready line, a call, the exit."""

CALL_TIMEOUT: Final = 5.0
"""Seconds one health call or scrape may take."""

OPERATOR_LISTENERS: Final = {
    "HARNESS_LISTEN": "127.0.0.1:0",
    "HARNESS_METRICS_LISTEN": "127.0.0.1:0",
    "HARNESS_HEALTH_LISTEN": "127.0.0.1:0",
}
"""What an operator sets with `docker run -e`, here on free loopback ports."""

HEALTH_SERVICES: Final = ("", "liveness", "harness.v1.HarnessEndpointService")
"""The services the chart's probes ask for (startup/liveness and readiness)."""


def image_command(stage: Stage) -> list[str]:
    """ENTRYPOINT + CMD of the stage, both exec form."""
    entrypoint = stage.last("ENTRYPOINT").exec_form
    cmd = stage.last("CMD").exec_form
    assert entrypoint is not None, "ENTRYPOINT is not exec form"
    assert cmd is not None, "CMD is not exec form"
    return [*entrypoint, *cmd]


def image_environment(
    stage: Stage, *, data_dir: Path, operator: Mapping[str, str] = OPERATOR_LISTENERS
) -> dict[str, str]:
    """This machine's environment without HARNESS_*, then the stage's ENV in order (the venv
    bin directory for /opt/harness/bin, `$PATH` expanded), the data volume, `operator`."""
    bin_dir = Path(sys.executable).parent
    environment = hermetic_environment()
    image_env = stage.env()
    for key, value in image_env:
        if key == "PATH":
            assert value.startswith(IMAGE_BIN + ":"), value
            value = str(bin_dir) + value.removeprefix(IMAGE_BIN)
        environment[key] = substitute(value, environment)
    assert "HARNESS_DATA_DIR" in dict(image_env), "the image names no data directory"
    environment["HARNESS_DATA_DIR"] = str(data_dir)
    environment.update(operator)
    resolved = shutil.which(image_command(stage)[0], path=environment["PATH"])
    assert resolved == str(bin_dir / image_command(stage)[0]), resolved
    return environment


@dataclass
class ImageProcess:
    """The image's process and everything it wrote."""

    process: asyncio.subprocess.Process
    stderr: list[str] = field(default_factory=list)
    stdout: list[str] = field(default_factory=list)

    def output(self) -> str:
        return "\n".join(["--- stderr ---", *self.stderr, "--- stdout ---", *self.stdout])


async def _pump(
    stream: asyncio.StreamReader,
    lines: list[str],
    ready: asyncio.Future[dict[str, object] | None] | None,
) -> None:
    """Keep every line (the pipe never fills); resolve `ready` with the `ready` entry, or
    None at end-of-file without one."""
    try:
        while raw := await stream.readline():
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            lines.append(line)
            if ready is not None and not ready.done():
                entry = _ready_entry(line)
                if entry is not None:
                    ready.set_result(entry)
    finally:
        if ready is not None and not ready.done():
            ready.set_result(None)


@contextlib.asynccontextmanager
async def run_image_command(
    command: list[str], environment: dict[str, str]
) -> AsyncIterator[tuple[ImageProcess, dict[str, object]]]:
    """Start `command` as the image would (cwd /, its environment) and yield it with its
    `ready` entry; SIGKILL whatever still runs at the end."""
    process = await asyncio.create_subprocess_exec(
        *command,
        env=environment,
        cwd="/",  # the final stage sets no WORKDIR
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    image = ImageProcess(process)
    assert process.stderr is not None
    assert process.stdout is not None
    ready: asyncio.Future[dict[str, object] | None] = asyncio.get_running_loop().create_future()
    async with asyncio.TaskGroup() as readers:
        readers.create_task(_pump(process.stderr, image.stderr, ready))
        readers.create_task(_pump(process.stdout, image.stdout, None))
        try:
            try:
                entry = await asyncio.wait_for(ready, BOUND)
            except TimeoutError:
                entry = None
            assert entry is not None, f"no ready line within {BOUND:g} s\n{image.output()}"
            yield image, entry
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def health(address: str, service: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = await stub.Check(
            health_pb2.HealthCheckRequest(service=service), timeout=CALL_TIMEOUT
        )
    return int(response.status)


def scrape(address: str) -> dict[str, list[Any]]:
    """The families of one /metrics scrape, by name."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=CALL_TIMEOUT) as response:
        assert response.status == 200
        text = response.read().decode("utf-8")
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


GRPC_CORE_ERROR: Final = re.compile(r"E\d{4} ")
"""The start of an ERROR line of gRPC's C core (`E1201 18:30:00.000000 ...`)."""


def _error_lines(lines: list[str]) -> list[str]:
    """Lines that report an error: a JSON entry at error level or above, or any other line
    (gRPC's C core, a traceback) naming one."""
    found = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if isinstance(entry, dict):
            if str(entry.get("level", "")).lower() in {"error", "critical"}:
                found.append(line)
        elif GRPC_CORE_ERROR.match(line) or "ERROR" in line.upper() or "Traceback" in line:
            found.append(line)
    return found


async def test_the_images_command_serves_health_and_metrics_and_exits_0_on_sigterm(
    tmp_path: Path,
) -> None:
    stage = final_stage()
    data_dir = tmp_path / "volume"
    data_dir.mkdir(mode=0o700)  # as the image makes /var/lib/harness-gateway
    environment = image_environment(stage, data_dir=data_dir)
    async with run_image_command(image_command(stage), environment) as (image, ready):
        assert ready["role"] == "serve"
        assert ready["data_dir"] == str(data_dir)
        assert ready["admin_token_file"] == str(data_dir / "admin-token")
        addresses = {name: str(ready[name]) for name in ("listen", "metrics", "health")}
        for name, address in addresses.items():
            host, _, port = address.rpartition(":")
            assert host == "127.0.0.1", f"{name}: {address}"
            assert port.isdigit(), f"{name}: {address}"
            assert port != "0", f"{name}: {address}"
        assert len(set(addresses.values())) == 3, addresses

        serving = health_pb2.HealthCheckResponse.SERVING
        for service in HEALTH_SERVICES:
            assert await health(addresses["health"], service) == serving, service
        families = await asyncio.to_thread(scrape, addresses["metrics"])
        [build_info] = families["harness_build_info"]
        assert build_info.labels["version"] == __version__
        assert build_info.value == 1

        image.process.send_signal(signal.SIGTERM)
        returncode = await asyncio.wait_for(image.process.wait(), BOUND)
    assert returncode == 0, image.output()
    assert _error_lines(image.stderr + image.stdout) == [], image.output()
    assert (data_dir / "admin-token").exists()


def check_config(stage: Stage, environment: dict[str, str]) -> dict[str, Any]:
    """`docker run IMAGE check-config`: the ENTRYPOINT with `check-config` for CMD."""
    entrypoint = stage.last("ENTRYPOINT").exec_form
    assert entrypoint is not None
    completed = subprocess.run(
        [*entrypoint, "check-config"],
        env=environment,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    settings: dict[str, Any] = json.loads(completed.stdout)
    return settings


def test_the_image_listens_on_loopback_unless_harness_listen_says_otherwise(
    tmp_path: Path,
) -> None:
    stage = final_stage()
    data_dir = tmp_path / "volume"

    default = check_config(stage, image_environment(stage, data_dir=data_dir, operator={}))
    assert default["listen"] == "127.0.0.1:7770"
    assert default["metrics_listen"] == "127.0.0.1:9770"
    assert default["health_listen"] is None
    assert default["data_dir"] == str(data_dir)
    assert default["log_format"] == "json"

    told = {
        "HARNESS_LISTEN": "0.0.0.0:7770",
        "HARNESS_METRICS_LISTEN": "0.0.0.0:9770",
        "HARNESS_HEALTH_LISTEN": "0.0.0.0:7779",
    }
    exposed = check_config(stage, image_environment(stage, data_dir=data_dir, operator=told))
    assert exposed["listen"] == "0.0.0.0:7770"
    assert exposed["metrics_listen"] == "0.0.0.0:9770"
    assert exposed["health_listen"] == "0.0.0.0:7779"

"""Start real gateways for tests and examples (house style 22).

`async with run_gateway() as gw:` starts a real `Gateway` in this process on 127.0.0.1:0
with a temporary data directory and yields a handle with its `address`, `admin_token` and
`await gw.register("alice")` (the agent's token). Nothing is mocked: real gRPC, real SQLite
files, the real certification protocol.

`async with run_daemon() as daemon:` starts a real `harness-gateway serve` process the same
way (127.0.0.1:0, a temporary data directory), waits for its `ready` line, and yields its
`address`, `admin_token` and `process`, with `kill()` (SIGKILL), `terminate()` (SIGTERM) and
`restart()` (same data directory, new port). The process never outlives the block.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from gateway.app import Gateway
from gateway.endpoint.api import RegisteredAgent
from gateway.settings import DEFAULT_METRICS_LISTEN, Settings

logger = logging.getLogger(__name__)


@dataclass
class RunningGateway:
    """A gateway started by `run_gateway`."""

    gateway: Gateway
    data_dir: Path
    settings: Settings
    agents: dict[str, RegisteredAgent] = field(default_factory=dict)

    @property
    def address(self) -> str:
        """`127.0.0.1:PORT`."""
        return self.gateway.address

    @property
    def admin_token(self) -> str:
        """The operator token."""
        assert self.gateway.admin_token_path is not None
        return self.gateway.admin_token_path.read_text(encoding="utf-8").strip()

    async def register(self, name: str) -> str:
        """Register an agent through the core and return its API token."""
        registered = await self.gateway.register_agent(name)
        self.agents[name] = registered
        return registered.token

    async def restart(self) -> None:
        """Shut down and start again on the same data directory (a Router restart too)."""
        await self.gateway.shutdown(skip_waits=True)
        await self.restart_stopped()

    async def restart_stopped(self) -> None:
        """Start again after `gateway.shutdown` (a test may change the store meanwhile)."""
        self.gateway = await Gateway.start(self.settings)


@contextlib.asynccontextmanager
async def run_gateway(
    settings: Settings | None = None, *, data_dir: Path | None = None
) -> AsyncIterator[RunningGateway]:
    """A real gateway on 127.0.0.1:0 with a temporary (or given) data directory."""
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="harness-")))
        base = settings or Settings()
        effective = replace(
            base,
            listen="127.0.0.1:0",
            # Metrics only where a test asks for them, and never on the fixed default port.
            metrics_listen=None
            if base.metrics_listen in (None, DEFAULT_METRICS_LISTEN)
            else base.metrics_listen,
            data_dir=data_dir,
            shutdown_grace=min(base.shutdown_grace, 2.0),
        )
        running = RunningGateway(
            gateway=await Gateway.start(effective), data_dir=data_dir, settings=effective
        )
        try:
            yield running
        finally:
            await running.gateway.shutdown(skip_waits=True)


# --- daemon processes ------------------------------------------------------------------------

DAEMON_READY_TIMEOUT: Final = 30.0
"""Seconds a `harness-gateway serve` process may take to log its `ready` line.

Start-up opens SQLite, rebuilds every hosted agent and recovers its conversations; on a
loaded CI machine that takes seconds, never tens of them."""

DAEMON_STOP_TIMEOUT: Final = 30.0
"""Seconds a daemon may take to exit after SIGTERM (or SIGKILL) before the helper gives up
on the ordered stop and kills it (shutdown grace is capped at 2 s by `run_daemon`)."""

DAEMON_PIPE_DRAIN_TIMEOUT: Final = 5.0
"""Seconds the stderr reader may take to reach end-of-file once the process has exited."""

DAEMON_LOG_LINES: Final = 5_000
"""Most stderr lines a `RunningDaemon` keeps for diagnostics (the oldest are dropped)."""

DAEMON_LINE_LIMIT: Final = 1 << 20
"""Longest stderr line read whole, in bytes (a logged traceback is one JSON line)."""

DAEMON_SHUTDOWN_GRACE: Final = "2s"
"""`--shutdown-grace` of test daemons: in-flight calls get little time at SIGTERM."""


class DaemonFailed(Exception):
    """A daemon process exited, or stayed silent past the bound, before its `ready` line.

    `returncode` is the exit status (None if the process had to be killed for taking too
    long) and `stderr` what it wrote."""

    def __init__(self, message: str, *, returncode: int | None, stderr: str) -> None:
        super().__init__(f"{message}\n--- daemon stderr ---\n{stderr}")
        self.returncode = returncode
        self.stderr = stderr


def gateway_command() -> list[str]:
    """The `harness-gateway` command of this interpreter's environment."""
    script = Path(sys.executable).with_name("harness-gateway")
    if script.exists():
        return [str(script)]
    found = shutil.which("harness-gateway")
    if found is not None:
        return [found]
    return [sys.executable, "-m", "gateway.cli"]


def hermetic_environment() -> dict[str, str]:
    """The caller's environment without `HARNESS_*` settings: flags alone decide."""
    return {name: value for name, value in os.environ.items() if not name.startswith("HARNESS_")}


class RunningDaemon:
    """A `harness-gateway serve` process started by `run_daemon`.

    `address`, `admin_token` and `process` describe the current process; `kill()`,
    `terminate()` and `restart()` change it. `run_daemon` stops whatever runs when it ends."""

    def __init__(self, data_dir: Path, extra_args: Sequence[str]) -> None:
        self.data_dir = data_dir
        self.extra_args = tuple(extra_args)
        self.address = ""
        self.admin_token = ""
        self.log: collections.deque[str] = collections.deque(maxlen=DAEMON_LOG_LINES)
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def process(self) -> asyncio.subprocess.Process:
        """The current (or last) process."""
        assert self._process is not None, "the daemon was never started"
        return self._process

    @property
    def running(self) -> bool:
        """True while the current process has not exited."""
        return self._process is not None and self._process.returncode is None

    @property
    def stderr(self) -> str:
        """What the daemon processes wrote on stderr (the last `DAEMON_LOG_LINES` lines)."""
        return "\n".join(self.log)

    def command(self) -> list[str]:
        """The full command line of the next start."""
        return [
            *gateway_command(),
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
            "--data-dir",
            str(self.data_dir),
            "--log-format",
            "json",
            "--shutdown-grace",
            DAEMON_SHUTDOWN_GRACE,
            *self.extra_args,
        ]

    async def start(self) -> None:
        """Start a process and wait (bounded) for its `ready` line.

        Raises `DaemonFailed` when it exits first or stays silent past the bound (it is
        killed then)."""
        assert not self.running, "the daemon is already running"
        await self._close_reader()
        self.address = ""
        self.admin_token = ""
        self._process = await asyncio.create_subprocess_exec(
            *self.command(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=hermetic_environment(),
            limit=DAEMON_LINE_LIMIT,
        )
        ready: asyncio.Future[dict[str, object] | None] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(
            self._read_stderr(self._process, ready), name="harness-daemon-stderr"
        )
        try:
            line = await asyncio.wait_for(ready, DAEMON_READY_TIMEOUT)
        except TimeoutError:
            returncode = await self._stop(signal.SIGKILL)
            raise DaemonFailed(
                f"the daemon logged no ready line within {DAEMON_READY_TIMEOUT} s",
                returncode=returncode,
                stderr=self.stderr,
            ) from None
        if line is None:
            returncode = await self._wait()
            await self._close_reader()
            raise DaemonFailed(
                f"the daemon exited with status {returncode} before it was ready",
                returncode=returncode,
                stderr=self.stderr,
            )
        self.address = str(line["listen"])
        token_file = Path(str(line["admin_token_file"]))
        self.admin_token = (await asyncio.to_thread(token_file.read_text, "utf-8")).strip()

    async def kill(self) -> int:
        """SIGKILL the process and wait for it; returns its status (-9)."""
        return await self._stop(signal.SIGKILL)

    async def terminate(self) -> int:
        """SIGTERM the process (ordered shutdown) and wait for it; returns its status.

        A process still running after `DAEMON_STOP_TIMEOUT` is killed and AssertionError
        raised: an ordered stop that hangs is a defect."""
        returncode = await self._stop(signal.SIGTERM)
        if returncode == -signal.SIGKILL:
            raise AssertionError(
                f"the daemon did not stop within {DAEMON_STOP_TIMEOUT} s of SIGTERM\n"
                f"--- daemon stderr ---\n{self.stderr}"
            )
        return returncode

    async def restart(self) -> None:
        """Start again on the same data directory (on a new port). A process still running
        is stopped first with SIGTERM."""
        if self.running:
            await self.terminate()
        await self.start()

    async def close(self) -> None:
        """Stop whatever runs (SIGTERM, then SIGKILL past the bound) and the stderr reader;
        idempotent."""
        if self.running:
            await self._stop(signal.SIGTERM)
        await self._close_reader()

    async def _stop(self, signum: signal.Signals) -> int:
        process = self.process
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)
            try:
                await asyncio.wait_for(process.wait(), DAEMON_STOP_TIMEOUT)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
        returncode = await self._wait()
        await self._close_reader()
        return returncode

    async def _wait(self) -> int:
        # SIGKILL cannot be ignored, so this wait ends; the bound only guards against a
        # kernel that never reports the exit.
        return await asyncio.wait_for(self.process.wait(), DAEMON_STOP_TIMEOUT)

    async def _close_reader(self) -> None:
        """Await the stderr reader, which ends at end-of-file once the process exited."""
        reader, self._reader = self._reader, None
        if reader is None:
            return
        try:
            await asyncio.wait_for(reader, DAEMON_PIPE_DRAIN_TIMEOUT)
        except TimeoutError:
            # Something else (a grandchild) holds the pipe open; wait_for cancelled the
            # reader, which is all this helper owns.
            logger.warning("daemon stderr stayed open after the process exited")

    async def _read_stderr(
        self,
        process: asyncio.subprocess.Process,
        ready: asyncio.Future[dict[str, object] | None],
    ) -> None:
        await pump_stderr(process, self.log, ready, line_limit=DAEMON_LINE_LIMIT)


async def pump_stderr(
    process: asyncio.subprocess.Process,
    log: collections.deque[str],
    ready: asyncio.Future[dict[str, object] | None],
    *,
    line_limit: int,
) -> None:
    """Keep every stderr line of a process (bounded by `log`) so the pipe never fills, and
    resolve `ready` with the `ready` log entry, or None at end-of-file without one."""
    stream = process.stderr
    assert stream is not None
    try:
        while True:
            try:
                raw = await stream.readline()
            except ValueError:
                log.append(f"<a stderr line longer than {line_limit} bytes>")
                continue
            if not raw:
                return
            text = raw.decode("utf-8", errors="replace").rstrip("\n")
            log.append(text)
            if not ready.done():
                entry = ready_entry(text)
                if entry is not None:
                    ready.set_result(entry)
    finally:
        if not ready.done():
            ready.set_result(None)


def ready_entry(line: str) -> dict[str, object] | None:
    """The `ready` log entry, if `line` is it."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if isinstance(entry, dict) and entry.get("msg") == "ready" and "listen" in entry:
        return entry
    return None


@contextlib.asynccontextmanager
async def run_daemon(
    data_dir: Path | None = None, extra_args: Sequence[str] = ()
) -> AsyncIterator[RunningDaemon]:
    """A real `harness-gateway serve` process on 127.0.0.1:0 with a temporary (or given)
    data directory, once it logged `ready`.

    The process is always stopped when the block ends (SIGTERM, SIGKILL past the bound),
    whether the block raised or not; a temporary data directory is removed after that."""
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="harness-")))
        daemon = RunningDaemon(data_dir, extra_args)
        try:
            await daemon.start()
            yield daemon
        finally:
            await daemon.close()

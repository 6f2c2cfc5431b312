"""Start real gateways for tests and examples: real servers on port 0, never fakes of them.

`async with run_gateway() as gw:` starts a real `Gateway` in this process on 127.0.0.1:0
with a temporary data directory and yields a handle with its `address`, `admin_token` and
`await gw.register("alice")` (the agent's token). Nothing is mocked: real gRPC, real SQLite
files, the real certification protocol.

`async with run_daemon() as daemon:` starts a real `harness-gateway serve` process the same
way (127.0.0.1:0, a temporary data directory), waits for its `ready` line, and yields its
`address`, `admin_token` and `process`, with `kill()` (SIGKILL), `terminate()` (SIGTERM) and
`restart()` (same data directory, new port). The process never outlives the block.

`GatewayProcess` is the one supervisor of a `harness-gateway` process (the command line, the
bounded wait for `ready`, the ordered and the forced stop, the kept stderr) behind both
`run_daemon` and `gateway.testing_network.run_network`.
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
from typing import Final, Literal, TypeAlias

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
        registered = await self.gateway.components.agents.register(name)
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


# --- processes -------------------------------------------------------------------------------

PROCESS_READY_TIMEOUT: Final = 30.0
"""Seconds a `harness-gateway` process may take to log its `ready` line before it is killed
and its start fails.

Start-up opens SQLite and, for a daemon, rebuilds every hosted agent and recovers its
conversations; on a loaded CI machine that takes seconds, never tens of them."""

PROCESS_STOP_TIMEOUT: Final = 30.0
"""Seconds a process may take to exit after SIGTERM (or SIGKILL) before the helper gives up
on the ordered stop and kills it (its shutdown grace is `PROCESS_SHUTDOWN_GRACE`)."""

PROCESS_PIPE_DRAIN_TIMEOUT: Final = 5.0
"""Seconds the stderr reader may take to reach end-of-file once its process has exited."""

PROCESS_LOG_LINES: Final = 5_000
"""Most stderr lines kept per process for diagnostics (the oldest are dropped)."""

PROCESS_LINE_LIMIT: Final = 1 << 20
"""Longest stderr line read whole, in bytes (a logged traceback is one JSON line)."""

PROCESS_SHUTDOWN_GRACE: Final = "2s"
"""`--shutdown-grace` of every test process: in-flight calls get little time at SIGTERM."""

Role: TypeAlias = Literal["registry", "router", "serve"]
"""The `harness-gateway` subcommand a process runs."""


class ProcessFailed(Exception):
    """A process exited, or stayed silent past `PROCESS_READY_TIMEOUT`, before its `ready`
    line.

    `returncode` is its exit status (None if it had to be killed for taking too long) and
    `stderr` what it wrote."""

    def __init__(self, message: str, *, name: str, returncode: int | None, stderr: str) -> None:
        super().__init__(f"{message}\n--- {name} stderr ---\n{stderr}")
        self.returncode = returncode
        self.stderr = stderr


DaemonFailed: TypeAlias = ProcessFailed
"""The name `run_daemon`'s callers know `ProcessFailed` by."""


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


class GatewayProcess:
    """One `harness-gateway <role>` process, supervised for a test.

    `address`, `admin_token` and `process` describe the current (or last) process;
    `start()`, `terminate()`, `kill()` and `restart()` change it, and `close()` stops
    whatever runs. Every stderr line is kept (the last `PROCESS_LOG_LINES`), so the pipe
    never fills and a failure can show what the process said."""

    def __init__(
        self,
        role: Role,
        name: str,
        *,
        data_dir: Path | None,
        args: Sequence[str],
        listen: str = "127.0.0.1:0",
    ) -> None:
        """Nothing starts until `start()`. `listen` is the first start's `--listen`; a
        Router and a Registry then keep the port they bound."""
        self.role: Final = role
        self.name: Final = name
        """What messages call the process (`daemon`, `router`, `daemon-2`...)."""
        self.data_dir: Path | None = data_dir
        """The data directory (None for a Router, which keeps nothing)."""
        self.args = list(args)
        """Flags after `--listen` and the fixed ones; tests may change them between starts."""
        self.address = ""
        """The bound `HOST:PORT` of the running process (a daemon's is empty while stopped)."""
        self.admin_token_file: Path | None = None
        """A daemon's operator token file (from its `ready` line)."""
        self.admin_token = ""
        """A daemon's operator token."""
        self.ready_line: dict[str, object] = {}
        """The last `ready` entry, as logged."""
        self.log: collections.deque[str] = collections.deque(maxlen=PROCESS_LOG_LINES)
        self._listen = listen
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def process(self) -> asyncio.subprocess.Process:
        """The current (or last) process."""
        assert self._process is not None, f"{self.name} was never started"
        return self._process

    @property
    def running(self) -> bool:
        """True while the current process has not exited."""
        return self._process is not None and self._process.returncode is None

    @property
    def stderr(self) -> str:
        """What this process (and the ones before it) wrote on stderr, the last
        `PROCESS_LOG_LINES` lines."""
        return "\n".join(self.log)

    @property
    def target(self) -> str:
        """`grpc://HOST:PORT` of the running process, for `--router` / `--registry`."""
        return f"grpc://{self.address}"

    def command(self) -> list[str]:
        """The full command line of the next start."""
        fixed = [
            "--listen",
            self._listen,
            "--metrics-listen",
            "off",
            "--log-format",
            "json",
            "--shutdown-grace",
            PROCESS_SHUTDOWN_GRACE,
        ]
        if self.data_dir is not None:
            fixed += ["--data-dir", str(self.data_dir)]
        return [*gateway_command(), self.role, *fixed, *self.args]

    async def start(self) -> None:
        """Start a process and wait (bounded) for its `ready` line.

        Raises `ProcessFailed` when it exits first or stays silent past
        `PROCESS_READY_TIMEOUT` (it is killed then)."""
        assert not self.running, f"{self.name} is already running"
        await self._close_reader()
        self.address = ""
        self.admin_token = ""
        self._process = await asyncio.create_subprocess_exec(
            *self.command(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=hermetic_environment(),
            limit=PROCESS_LINE_LIMIT,
        )
        ready: asyncio.Future[dict[str, object] | None] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(
            _pump_stderr(self._process, self.log, ready), name=f"harness-{self.name}-stderr"
        )
        try:
            entry = await asyncio.wait_for(ready, PROCESS_READY_TIMEOUT)
        except TimeoutError:
            returncode = await self._signal_and_wait(signal.SIGKILL)
            raise self._failed(
                f"{self.name} logged no ready line within {PROCESS_READY_TIMEOUT:g} s", returncode
            ) from None
        if entry is None:
            returncode = await self._wait()
            await self._close_reader()
            raise self._failed(
                f"{self.name} exited with status {returncode} before it was ready", returncode
            )
        self.ready_line = entry
        self.address = str(entry["listen"])
        if self.role != "serve":
            # Daemons name the Router and Registry by address: keep it across restarts.
            self._listen = self.address
        token_file = entry.get("admin_token_file")
        if isinstance(token_file, str):
            self.admin_token_file = Path(token_file)
            self.admin_token = (
                await asyncio.to_thread(self.admin_token_file.read_text, "utf-8")
            ).strip()

    async def terminate(self) -> int:
        """SIGTERM the process (ordered shutdown) and wait for it; returns its status.

        A process still running after `PROCESS_STOP_TIMEOUT` is killed and AssertionError
        raised: an ordered stop that hangs is a defect."""
        returncode = await self._signal_and_wait(signal.SIGTERM)
        if returncode == -signal.SIGKILL:
            raise AssertionError(
                f"{self.name} did not stop within {PROCESS_STOP_TIMEOUT:g} s of SIGTERM\n"
                f"--- {self.name} stderr ---\n{self.stderr}"
            )
        return returncode

    async def kill(self) -> int:
        """SIGKILL the process and wait for it; returns its status (-9)."""
        return await self._signal_and_wait(signal.SIGKILL)

    def kill_now(self) -> None:
        """SIGKILL the current process without waiting (the last resort of a cleanup that
        was itself cancelled); nothing when it already exited."""
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()

    async def restart(self) -> None:
        """Start again on the same data directory (a daemon on a new port). A process still
        running is stopped first with SIGTERM (`terminate()`)."""
        if self.running:
            await self.terminate()
        await self.start()

    async def close(self) -> None:
        """Stop whatever runs (SIGTERM, then SIGKILL past the bound) and the stderr reader;
        idempotent."""
        if self.running:
            await self._signal_and_wait(signal.SIGTERM)
        await self._close_reader()

    def _failed(self, message: str, returncode: int | None) -> ProcessFailed:
        return ProcessFailed(message, name=self.name, returncode=returncode, stderr=self.stderr)

    async def _signal_and_wait(self, signum: signal.Signals) -> int:
        process = self.process
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)
            try:
                await asyncio.wait_for(process.wait(), PROCESS_STOP_TIMEOUT)
            except TimeoutError:
                logger.warning("%s ignored signal %s; killing it", self.name, signum.name)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
        returncode = await self._wait()
        await self._close_reader()
        if self.role == "serve":
            # A daemon comes back on another port: never leave a stale one to dial.
            self.address = ""
        return returncode

    async def _wait(self) -> int:
        # SIGKILL cannot be ignored, so this wait ends; the bound only guards against a
        # kernel that never reports the exit.
        return await asyncio.wait_for(self.process.wait(), PROCESS_STOP_TIMEOUT)

    async def _close_reader(self) -> None:
        """Await the stderr reader, which ends at end-of-file once the process exited."""
        reader, self._reader = self._reader, None
        if reader is None:
            return
        try:
            await asyncio.wait_for(reader, PROCESS_PIPE_DRAIN_TIMEOUT)
        except TimeoutError:
            # Something else (a grandchild) holds the pipe open; wait_for cancelled the
            # reader, which is all this helper owns.
            logger.warning("%s stderr stayed open after the process exited", self.name)


async def _pump_stderr(
    process: asyncio.subprocess.Process,
    log: collections.deque[str],
    ready: asyncio.Future[dict[str, object] | None],
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
                log.append(f"<a stderr line longer than {PROCESS_LINE_LIMIT} bytes>")
                continue
            if not raw:
                return
            text = raw.decode("utf-8", errors="replace").rstrip("\n")
            log.append(text)
            if not ready.done():
                entry = _ready_entry(text)
                if entry is not None:
                    ready.set_result(entry)
    finally:
        if not ready.done():
            ready.set_result(None)


def _ready_entry(line: str) -> dict[str, object] | None:
    """The `ready` log entry, if `line` is it."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if isinstance(entry, dict) and entry.get("msg") == "ready" and "listen" in entry:
        return entry
    return None


class RunningDaemon(GatewayProcess):
    """A `harness-gateway serve` process started by `run_daemon` (`daemon` in messages)."""

    data_dir: Path
    """The daemon's data directory: a daemon always has one."""

    def __init__(self, data_dir: Path, extra_args: Sequence[str] = ()) -> None:
        """A daemon on `data_dir` with `extra_args` after the fixed flags."""
        super().__init__("serve", "daemon", data_dir=data_dir, args=extra_args)


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

"""A network of real `harness-gateway` processes for end-to-end tests (house style 22).

    async with run_network(daemons=2) as network:
        first, second = network.daemons
        ...  # first.address, first.admin_token, first.data_dir, first.process
        await network.router.stop()   # SIGTERM and wait
        await network.router.start()  # again, on the same address (a new instance)
        await second.kill()           # SIGKILL and wait
        await second.start()          # again, on its data directory

`run_network(n)` starts one `harness-gateway registry`, one `harness-gateway router`
(joined to that Registry) and `n` daemons `harness-gateway serve --router ... --registry
...`, each on 127.0.0.1:0 with its own temporary data directory, `--metrics-listen off` and
JSON logs, and waits (at most `READY_TIMEOUT` each) for every `ready` line. The Registry
creates the peer token on its first start (`<data-dir>/peer-token`, as in a deployment) and
the Router and every daemon join with that file (`--peer-token-file`). Every process is stopped when the block ends, whether it raised or not
(SIGTERM, then SIGKILL past `STOP_TIMEOUT`), and the temporary directories are removed.

The Router and the Registry keep their first port across `start()`s, because daemons name
them by address; a daemon may come back on another port (`address` then says which).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import signal
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from gateway.rpc.peer import PEER_TOKEN_FILE
from gateway.testing import gateway_command, hermetic_environment, pump_stderr

logger = logging.getLogger(__name__)

READY_TIMEOUT: Final = 30.0
"""Seconds a process may take to log its `ready` line before it is killed and the start
fails: start-up opens SQLite and, for a daemon, recovers every hosted agent."""

STOP_TIMEOUT: Final = 30.0
"""Seconds a process may take to exit after SIGTERM (or SIGKILL) before it is killed."""

PIPE_DRAIN_TIMEOUT: Final = 5.0
"""Seconds the stderr reader may take to reach end-of-file once its process exited."""

LOG_LINES: Final = 5_000
"""Most stderr lines kept per process for diagnostics (the oldest are dropped)."""

LINE_LIMIT: Final = 1 << 20
"""Longest stderr line read whole, in bytes (a logged traceback is one JSON line)."""

SHUTDOWN_GRACE: Final = "2s"
"""`--shutdown-grace` of every test process: in-flight calls get little time at SIGTERM."""


Role = Literal["registry", "router", "serve"]


class ProcessFailed(Exception):
    """A process exited, or stayed silent past `READY_TIMEOUT`, before its `ready` line.

    `returncode` is its exit status and `stderr` what it wrote."""

    def __init__(self, message: str, *, returncode: int | None, stderr: str) -> None:
        super().__init__(f"{message}\n--- stderr ---\n{stderr}")
        self.returncode = returncode
        self.stderr = stderr


class NetworkProcess:
    """One process of a test network: a Registry, a Router or a daemon.

    `address`, `admin_token` and `process` describe the current (or last) process;
    `start()`, `stop()` and `kill()` change it. `run_network` stops whatever runs when it
    ends."""

    def __init__(
        self,
        role: Role,
        name: str,
        *,
        data_dir: Path | None,
        args: Sequence[str],
        listen: str = "127.0.0.1:0",
    ) -> None:
        """Nothing starts until `start()`. `listen` is the first start's `--listen`; the
        Router and the Registry then keep the port they bound."""
        self.role: Final = role
        self.name: Final = name
        """`registry`, `router`, or `daemon-<n>` (numbered from 1), for messages."""
        self.data_dir: Final = data_dir
        """The data directory (None for the Router, which keeps nothing)."""
        self.args = list(args)
        """Flags after `--listen` and the fixed ones; tests may change them between starts."""
        self.address = ""
        """The bound `HOST:PORT` of the running process (empty while stopped)."""
        self.admin_token_file: Path | None = None
        """A daemon's operator token file (from its `ready` line)."""
        self.admin_token = ""
        """A daemon's operator token."""
        self.ready_line: dict[str, object] = {}
        """The last `ready` entry, as logged."""
        self.log: collections.deque[str] = collections.deque(maxlen=LOG_LINES)
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
        """What this role's processes wrote on stderr (the last `LOG_LINES` lines)."""
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
            SHUTDOWN_GRACE,
        ]
        if self.data_dir is not None:
            fixed += ["--data-dir", str(self.data_dir)]
        return [*gateway_command(), self.role, *fixed, *self.args]

    async def start(self) -> None:
        """Start a process and wait (bounded) for its `ready` line.

        Raises `ProcessFailed` when it exits first or stays silent past `READY_TIMEOUT`
        (it is killed then)."""
        assert not self.running, f"{self.name} is already running"
        await self._close_reader()
        self.address = ""
        self._process = await asyncio.create_subprocess_exec(
            *self.command(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=hermetic_environment(),
            limit=LINE_LIMIT,
        )
        ready: asyncio.Future[dict[str, object] | None] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(
            self._read_stderr(self._process, ready), name=f"harness-{self.name}-stderr"
        )
        try:
            entry = await asyncio.wait_for(ready, READY_TIMEOUT)
        except TimeoutError:
            returncode = await self._signal_and_wait(signal.SIGKILL)
            raise ProcessFailed(
                f"{self.name} logged no ready line within {READY_TIMEOUT:g} s",
                returncode=returncode,
                stderr=self.stderr,
            ) from None
        if entry is None:
            returncode = await self._wait()
            await self._close_reader()
            raise ProcessFailed(
                f"{self.name} exited with status {returncode} before it was ready",
                returncode=returncode,
                stderr=self.stderr,
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

    async def stop(self) -> int:
        """SIGTERM (ordered shutdown) and wait; returns the exit status.

        A process still running after `STOP_TIMEOUT` is killed and AssertionError raised:
        an ordered stop that hangs is a defect."""
        returncode = await self._signal_and_wait(signal.SIGTERM)
        if returncode == -signal.SIGKILL:
            raise AssertionError(
                f"{self.name} did not stop within {STOP_TIMEOUT:g} s of SIGTERM\n"
                f"--- stderr ---\n{self.stderr}"
            )
        return returncode

    async def kill(self) -> int:
        """SIGKILL and wait; returns the exit status (-9)."""
        return await self._signal_and_wait(signal.SIGKILL)

    def kill_now(self) -> None:
        """SIGKILL the current process without waiting (the last resort of a cleanup that
        was itself cancelled); nothing when it already exited."""
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()

    async def restart(self) -> None:
        """`stop()` if running, then `start()` on the same data directory."""
        if self.running:
            await self.stop()
        await self.start()

    async def close(self) -> None:
        """Stop whatever runs (SIGTERM, SIGKILL past the bound) and the stderr reader;
        idempotent, never raises for a process that misbehaves."""
        if self._process is not None and self.running:
            await self._signal_and_wait(signal.SIGTERM)
        await self._close_reader()

    async def _signal_and_wait(self, signum: signal.Signals) -> int:
        process = self.process
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
            except TimeoutError:
                logger.warning("%s ignored signal %s; killing it", self.name, signum.name)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
        returncode = await self._wait()
        await self._close_reader()
        self.address = "" if self.role == "serve" else self.address
        return returncode

    async def _wait(self) -> int:
        # SIGKILL cannot be ignored, so this wait ends; the bound guards against a kernel
        # that never reports the exit.
        return await asyncio.wait_for(self.process.wait(), STOP_TIMEOUT)

    async def _close_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is None:
            return
        try:
            await asyncio.wait_for(reader, PIPE_DRAIN_TIMEOUT)
        except TimeoutError:
            # A grandchild holds the pipe open; wait_for cancelled the reader, which is all
            # this helper owns.
            logger.warning("%s stderr stayed open after the process exited", self.name)

    async def _read_stderr(
        self,
        process: asyncio.subprocess.Process,
        ready: asyncio.Future[dict[str, object] | None],
    ) -> None:
        await pump_stderr(process, self.log, ready, line_limit=LINE_LIMIT)


@dataclass(slots=True, kw_only=True)
class RunningNetwork:
    """The processes `run_network` started, in start order."""

    registry: NetworkProcess
    router: NetworkProcess
    daemons: list[NetworkProcess]
    root: Path
    """The temporary directory holding every data directory (removed at the end)."""
    peer_token_file: Path
    """The peer token's file, created by the Registry in its data directory."""
    daemon_args: list[str] = field(default_factory=list)
    """Extra flags every daemon started (also by `add_daemon`)."""

    @property
    def processes(self) -> list[NetworkProcess]:
        """Every process, daemons first: the order they are stopped in."""
        return [*self.daemons, self.router, self.registry]

    def logs(self) -> str:
        """Every process's stderr, each under its name: for a failure message."""
        return "\n".join(
            f"--- {process.name} stderr ---\n{process.stderr}" for process in self.processes
        )

    async def add_daemon(self, extra_args: Sequence[str] = ()) -> NetworkProcess:
        """Start one more daemon joined to this network (it is stopped with the rest)."""
        daemon = self._daemon(len(self.daemons) + 1, extra_args)
        self.daemons.append(daemon)
        await daemon.start()
        return daemon

    def _daemon(self, number: int, extra_args: Sequence[str]) -> NetworkProcess:
        data_dir = self.root / f"daemon-{number}"
        data_dir.mkdir(mode=0o700)
        args = ["--router", self.router.target, "--registry", self.registry.target]
        args += ["--peer-token-file", str(self.peer_token_file)]
        return NetworkProcess(
            "serve",
            f"daemon-{number}",
            data_dir=data_dir,
            args=[*args, *self.daemon_args, *extra_args],
        )


async def _start_all(processes: Sequence[NetworkProcess]) -> None:
    """Start processes concurrently; every start finishes before the first error is raised,
    so no start is left running unowned."""
    results = await asyncio.gather(
        *(process.start() for process in processes), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result


@contextlib.asynccontextmanager
async def run_network(
    daemons: int,
    *,
    daemon_args: Sequence[str] = (),
    router_args: Sequence[str] = (),
) -> AsyncIterator[RunningNetwork]:
    """A Registry, a Router and `daemons` joined daemons, each a real process on
    127.0.0.1:0, once every one logged `ready`.

    `daemon_args` are extra `serve` flags for every daemon, `router_args` extra `router`
    flags. Every process is always stopped
    when the block ends (daemons first, SIGTERM then SIGKILL past the bound), whether the
    block raised or not, and the temporary directories are removed afterwards."""
    if daemons < 0:
        raise ValueError("a network has zero or more daemons")
    with tempfile.TemporaryDirectory(prefix="harness-network-") as directory:
        root = Path(directory)
        registry_dir = root / "registry"
        registry_dir.mkdir(mode=0o700)
        token_file = registry_dir / PEER_TOKEN_FILE
        registry = NetworkProcess("registry", "registry", data_dir=registry_dir, args=[])
        router = NetworkProcess("router", "router", data_dir=None, args=list(router_args))
        network = RunningNetwork(
            registry=registry,
            router=router,
            daemons=[],
            root=root,
            peer_token_file=token_file,
            daemon_args=list(daemon_args),
        )
        try:
            await registry.start()
            router.args = ["--registry", registry.target, "--peer-token-file", str(token_file)]
            await router.start()
            network.daemons.extend(network._daemon(n, ()) for n in range(1, daemons + 1))
            await _start_all(network.daemons)
            yield network
        finally:
            try:
                # Daemons first, so none spends its stop retrying a Router already gone.
                await asyncio.gather(
                    *(daemon.close() for daemon in network.daemons), return_exceptions=True
                )
                for process in (router, registry):
                    try:
                        await process.close()
                    except Exception:
                        logger.exception("stopping %s failed", process.name)
            finally:
                # Cancelled in the middle of the ordered stop: no process outlives the block.
                for process in network.processes:
                    process.kill_now()

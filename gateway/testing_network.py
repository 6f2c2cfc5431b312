"""A network of real `harness-gateway` processes for end-to-end tests.

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
JSON logs, and waits (at most `PROCESS_READY_TIMEOUT` each) for every `ready` line. The
Registry creates the peer token on its first start (`<data-dir>/peer-token`, as in a
deployment) and the Router and every daemon join with that file (`--peer-token-file`).
Every process is stopped when the block ends, whether it raised or not (SIGTERM, then
SIGKILL past `PROCESS_STOP_TIMEOUT`), and the temporary directories are removed. Each
process is a `gateway.testing.GatewayProcess`, the same supervisor `run_daemon` uses.

The Router and the Registry keep their first port across `start()`s, because daemons name
them by address; a daemon may come back on another port (`address` then says which).

On existing engines (docs/scale-out.md): `run_network(3, nats=cluster.url, store=dsn)` starts
no Router process (every daemon joins `--router <nats>`) and keeps the Registry's cards and
every daemon's store in the PostgreSQL database `store` names, daemon `daemon-<n>` under
`--store-owner daemon-<n>`. The servers themselves are the caller's (tests/servers.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gateway.rpc.peer import PEER_TOKEN_FILE
from gateway.testing import GatewayProcess, ProcessFailed

logger = logging.getLogger(__name__)

__all__ = ["NetworkProcess", "ProcessFailed", "RunningNetwork", "run_network"]


class NetworkProcess(GatewayProcess):
    """One process of a test network: a Registry, a Router or a daemon (`name` is
    `registry`, `router`, or `daemon-<n>` numbered from 1).

    `run_network` stops whatever runs when it ends."""

    async def stop(self) -> int:
        """`terminate()`: SIGTERM (ordered shutdown) and wait; returns the exit status."""
        return await self.terminate()


@dataclass(slots=True, kw_only=True)
class RunningNetwork:
    """The processes `run_network` started, in start order."""

    registry: NetworkProcess
    router_process: NetworkProcess | None
    """The standalone Router, or None when the daemons join NATS JetStream."""
    router_target: str
    """What every daemon passes as `--router`."""
    daemons: list[NetworkProcess]
    root: Path
    """The temporary directory holding every data directory (removed at the end)."""
    peer_token_file: Path
    """The peer token's file, created by the Registry in its data directory."""
    daemon_args: list[str] = field(default_factory=list)
    """Extra flags every daemon started (also by `add_daemon`)."""
    store: str | None = None
    """The PostgreSQL store every daemon and the Registry keep their rows in, or None."""

    @property
    def router(self) -> NetworkProcess:
        """The standalone Router process (absent when the Router is NATS JetStream)."""
        if self.router_process is None:
            raise AttributeError(f"this network's Router is {self.router_target}, not a process")
        return self.router_process

    @property
    def processes(self) -> list[NetworkProcess]:
        """Every process, daemons first: the order they are stopped in."""
        router = [] if self.router_process is None else [self.router_process]
        return [*self.daemons, *router, self.registry]

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
        args = ["--router", self.router_target, "--registry", self.registry.target]
        args += ["--peer-token-file", str(self.peer_token_file)]
        if self.store is not None:
            args += ["--store", self.store, "--store-owner", f"daemon-{number}"]
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
    nats: str | None = None,
    store: str | None = None,
) -> AsyncIterator[RunningNetwork]:
    """A Registry, a Router and `daemons` joined daemons, each a real process on
    127.0.0.1:0, once every one logged `ready`.

    `daemon_args` are extra `serve` flags for every daemon, `router_args` extra `router`
    flags. `nats` (a `nats://` server list) replaces the Router process; `store` (a
    PostgreSQL URL) keeps the Registry's and the daemons' rows there. Every process is
    always stopped
    when the block ends (daemons first, SIGTERM then SIGKILL past the bound), whether the
    block raised or not, and the temporary directories are removed afterwards."""
    if daemons < 0:
        raise ValueError("a network has zero or more daemons")
    with tempfile.TemporaryDirectory(prefix="harness-network-") as directory:
        root = Path(directory)
        registry_dir = root / "registry"
        registry_dir.mkdir(mode=0o700)
        token_file = registry_dir / PEER_TOKEN_FILE
        registry_args = [] if store is None else ["--store", store]
        registry = NetworkProcess("registry", "registry", data_dir=registry_dir, args=registry_args)
        router = (
            None
            if nats is not None
            else NetworkProcess("router", "router", data_dir=None, args=list(router_args))
        )
        network = RunningNetwork(
            registry=registry,
            router_process=router,
            router_target=nats or "",
            daemons=[],
            root=root,
            peer_token_file=token_file,
            daemon_args=list(daemon_args),
            store=store,
        )
        try:
            await registry.start()
            if router is not None:
                router.args = [
                    "--registry",
                    registry.target,
                    "--peer-token-file",
                    str(token_file),
                ]
                await router.start()
                network.router_target = router.target
            network.daemons.extend(network._daemon(n, ()) for n in range(1, daemons + 1))
            await _start_all(network.daemons)
            yield network
        finally:
            try:
                # Daemons first, so none spends its stop retrying a Router already gone.
                await asyncio.gather(
                    *(daemon.close() for daemon in network.daemons), return_exceptions=True
                )
                for process in (*([] if router is None else [router]), registry):
                    try:
                        await process.close()
                    except Exception:
                        logger.exception("stopping %s failed", process.name)
            finally:
                # Cancelled in the middle of the ordered stop: no process outlives the block.
                for process in network.processes:
                    process.kill_now()

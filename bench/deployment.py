"""The gateway side of a run: the processes that certify, store and deliver, always stopped.

With one daemon it is a single `harness-gateway serve` with its embedded Router and
Registry. With two it is a standalone `harness-gateway registry`, a `harness-gateway router`
joined to it and two `harness-gateway serve --router ... --registry ...` daemons, as README.md
"Several daemons" lays out (and `gateway/testing_network.py` starts for the e2e tests), all
sharing a generated `--peer-token-file` so peer authentication is part of what is measured,
as it is in any deployment beyond loopback. Every process listens on 127.0.0.1:0 in the run's
scratch directory; each daemon serves `/metrics` on a free port, the Router and the Registry
serve none (they have no store commits to report). With a firewall file every daemon runs
it (`--firewall-config`): the firewall is a daemon's, the Router and the Registry have none.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.metrics import free_port
from bench.plan import MAX_DAEMONS
from bench.processes import ChildProcess, ReadyCheck

SHUTDOWN_GRACE: Final = "5s"
"""Every process's `--shutdown-grace`: nothing is in flight when the bench stops it."""
PEER_TOKEN_FILE: Final = "peer-token"
"""The shared peer token's file in the scratch directory (mode 0600)."""
DAEMON_NAMES: Final = ("daemon-a", "daemon-b")
"""Process names of the daemons of a several-daemon run, for messages."""
SINGLE_NAME: Final = "gateway"
"""Process name of the one daemon of a single-daemon run (the name its messages always had)."""


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
    processes: tuple[ChildProcess, ...]
    """Every gateway-side process (daemons, Router, Registry), daemons first: a post's
    CPU cost is theirs together."""

    def cpu_seconds(self) -> dict[str, float | None]:
        """CPU time used so far by each process, by name (None where /proc has none)."""
        return {child.name: child.cpu_seconds() for child in self.processes}


def _is_listening(entry: Mapping[str, Any]) -> bool:
    return entry.get("msg") == "ready" and isinstance(entry.get("listen"), str)


def _is_daemon_ready(entry: Mapping[str, Any]) -> bool:
    return _is_listening(entry) and isinstance(entry.get("admin_token_file"), str)


def _common_flags(metrics: str) -> list[str]:
    return [
        "--listen",
        "127.0.0.1:0",
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
        self._gateway_bin = gateway_bin
        self._firewall = [] if firewall is None else ["--firewall-config", str(firewall)]

    async def start(self, name: str, args: Sequence[str], is_ready: ReadyCheck) -> ChildProcess:
        child = await self._stack.enter_async_context(
            ChildProcess.run(name, [self._gateway_bin, *args], ready_on="stderr", is_ready=is_ready)
        )
        self.started.append(child)
        return child

    async def daemon(self, name: str, data_dir: Path, extra: Sequence[str]) -> Daemon:
        metrics_address = f"127.0.0.1:{free_port()}"
        args = [
            "serve",
            *_common_flags(metrics_address),
            "--data-dir",
            str(data_dir),
            *self._firewall,
            *extra,
        ]
        child = await self.start(name, args, _is_daemon_ready)
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


@contextlib.asynccontextmanager
async def deploy(
    *, gateway_bin: str, daemons: int, scratch: Path, firewall: Path | None = None
) -> AsyncIterator[Deployment]:
    """Start the gateway side for `daemons` daemons (1 or 2) under `scratch`, every daemon
    with the firewall file `firewall` when one is named, yield it once
    every process printed its ready line, and stop every process on the way out. A failure,
    whether starting or in the block, carries each started process's trouble lines as notes
    (added once they stopped, so their exit codes are known)."""
    if not 1 <= daemons <= MAX_DAEMONS:
        raise ValueError(f"daemons must be 1..{MAX_DAEMONS}, not {daemons}")
    starter: _Starter | None = None
    try:
        async with contextlib.AsyncExitStack() as stack:
            starter = _Starter(stack, gateway_bin, firewall)
            if daemons == 1:
                single = await starter.daemon(SINGLE_NAME, scratch / "data", ())
                deployment = Deployment(daemons=(single,), processes=(single.child,))
            else:
                deployment = await _start_network(starter, daemons, scratch)
            yield deployment
    except BaseException as failure:
        for child in starter.started if starter is not None else ():
            failure.add_note(problems_note(child))
        raise


async def _start_network(starter: _Starter, daemons: int, scratch: Path) -> Deployment:
    peer = ["--peer-token-file", str(_write_peer_token(scratch))]
    registry_dir = scratch / "registry"
    registry_dir.mkdir(mode=0o700)
    registry = await starter.start(
        "registry",
        ["registry", *_common_flags("off"), "--data-dir", str(registry_dir), *peer],
        _is_listening,
    )
    registry_target = f"grpc://{registry.ready_line['listen']}"
    router = await starter.start(
        "router",
        ["router", *_common_flags("off"), "--registry", registry_target, *peer],
        _is_listening,
    )
    join = ["--router", f"grpc://{router.ready_line['listen']}", "--registry", registry_target]
    members = [
        await starter.daemon(name, scratch / name, [*join, *peer])
        for name in DAEMON_NAMES[:daemons]
    ]
    return Deployment(
        daemons=tuple(members),
        processes=(*(member.child for member in members), router, registry),
    )

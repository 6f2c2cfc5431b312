"""`ChildProcess`: a subprocess that announces itself with a JSON `ready` line.

Both the gateway and the baseline echo server run this way. Every wait is bounded: the ready
line (`READY_TIMEOUT`), the stop after SIGTERM (`STOP_TIMEOUT`, then SIGKILL), and the end of
the output readers. Both output streams are read for the child's whole life, so a chatty child
never blocks on a full pipe; lines that look like trouble are kept for the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

READY_TIMEOUT: Final = 30.0
"""Seconds a child may take to print its ready line (the gateway opens its store first)."""
STOP_TIMEOUT: Final = 20.0
"""Seconds a child may take to exit after SIGTERM before it is killed."""
READER_TIMEOUT: Final = 5.0
"""Seconds the output readers may take to reach end of file once the child exited."""
LINE_LIMIT: Final = 1 << 20
"""Longest output line read whole, in bytes (a traceback in one JSON field can be long)."""
KEPT_PROBLEMS: Final = 20
"""Trouble lines kept verbatim for the report; the rest are only counted."""
KEPT_PROBLEM_CHARS: Final = 600
"""Characters kept of each trouble line."""
PROBLEM_LEVELS: Final = frozenset({"warning", "error", "critical"})
"""Log levels (`level` of a JSON log line) that count as trouble."""

_PARENT_ONLY_ENV: set[str] = set()
"""Variables the bench set for its own process only; children get the environment without
them, so the gateway runs as it would outside the bench."""


def quiet_grpc_fork_handlers() -> None:
    """Turn off grpc's fork handlers in this process, unless the caller chose a setting.

    Must run before grpc is imported. The bench starts children while its grpc threads are
    busy, and grpc would log "skipping fork() handlers" on stderr for each; the children
    exec at once, so the handlers have nothing to do."""
    name = "GRPC_ENABLE_FORK_SUPPORT"
    if name not in os.environ:
        os.environ[name] = "0"
        _PARENT_ONLY_ENV.add(name)


def child_environment() -> dict[str, str]:
    """This process's environment less the variables set for the bench alone."""
    return {key: value for key, value in os.environ.items() if key not in _PARENT_ONLY_ENV}


ReadyCheck = Callable[[Mapping[str, Any]], bool]
"""Whether a decoded JSON output line is the child's ready line."""


class ChildFailed(Exception):
    """The child exited, or did not get ready in time; `problems` holds its trouble lines."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message if not problems else "\n".join([message, *problems]))
        self.problems = tuple(problems)


@dataclass(slots=True)
class OutputLog:
    """Trouble seen in a child's output: warnings, errors and lines that are not JSON."""

    kept: list[str] = field(default_factory=list)
    count: int = 0

    def note(self, line: str) -> None:
        """Remember a trouble line (the first `KEPT_PROBLEMS` verbatim, then a count)."""
        self.count += 1
        if len(self.kept) < KEPT_PROBLEMS:
            self.kept.append(line[:KEPT_PROBLEM_CHARS])


def is_trouble(line: str) -> bool:
    """A JSON log line at warning level or above, or any line that is not a JSON object."""
    try:
        entry = json.loads(line)
    except ValueError:
        return True
    if not isinstance(entry, dict):
        return True
    return str(entry.get("level", "")).lower() in PROBLEM_LEVELS


class ChildProcess:
    """A running child; use `ChildProcess.run(...)`, which always stops it."""

    def __init__(self, name: str, process: asyncio.subprocess.Process) -> None:
        self.name = name
        self.problems = OutputLog()
        self.ready_line: dict[str, Any] = {}
        self.exit_code: int | None = None
        self._process = process
        self._ready = asyncio.Event()
        self._readers: list[asyncio.Task[None]] = []

    @classmethod
    @contextlib.asynccontextmanager
    async def run(
        cls,
        name: str,
        argv: Sequence[str],
        *,
        ready_on: str,
        is_ready: ReadyCheck,
        cwd: Path | None = None,
        ready_timeout: float = READY_TIMEOUT,
        env: Mapping[str, str] | None = None,
    ) -> AsyncIterator[ChildProcess]:
        """Start `argv` (with `env` added to the environment), wait for its ready line on
        `ready_on` (`stdout` or `stderr`), yield the child, and stop it on the way out
        whatever happened."""
        if ready_on not in ("stdout", "stderr"):
            raise ValueError(f"ready_on must be stdout or stderr, not {ready_on!r}")
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env={**child_environment(), **(env or {})},
                limit=LINE_LIMIT,
            )
        except OSError as error:
            raise ChildFailed(f"cannot start {name} ({argv[0]}): {error}") from error
        child = cls(name, process)
        try:
            assert process.stdout is not None
            assert process.stderr is not None
            child._readers = [
                asyncio.create_task(
                    child._read_loop(process.stdout, is_ready if ready_on == "stdout" else None),
                    name=f"{name}-stdout",
                ),
                asyncio.create_task(
                    child._read_loop(process.stderr, is_ready if ready_on == "stderr" else None),
                    name=f"{name}-stderr",
                ),
            ]
            try:
                await child._wait_ready(ready_timeout)
            except ChildFailed as failure:
                await child._stop()  # so the readers saw all the child said
                raise ChildFailed(str(failure), child.problems.kept) from None
            yield child
        finally:
            await child._stop()

    def cpu_seconds(self) -> float | None:
        """User plus system CPU time the child used so far, from /proc (Linux); None where
        that cannot be read or once the child exited."""
        if self._process.returncode is not None:
            return None
        return process_cpu_seconds(self._process.pid)

    async def _read_loop(self, stream: asyncio.StreamReader, is_ready: ReadyCheck | None) -> None:
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # a line over LINE_LIMIT: note it, keep reading
                self.problems.note(f"({self.name}: an output line over {LINE_LIMIT} bytes)")
                continue
            if not raw:
                return
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            if not line:
                continue
            if is_ready is not None and not self._ready.is_set():
                entry = _json_object(line)
                if entry is not None and is_ready(entry):
                    self.ready_line = entry
                    self._ready.set()
                    continue
            if is_trouble(line):
                self.problems.note(line)

    async def _wait_ready(self, within: float) -> None:
        ready = asyncio.create_task(self._ready.wait(), name=f"{self.name}-ready")
        exited = asyncio.create_task(self._process.wait(), name=f"{self.name}-exit")
        try:
            await asyncio.wait({ready, exited}, timeout=within, return_when="FIRST_COMPLETED")
        finally:
            for task in (ready, exited):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._ready.is_set():
            return
        if self._process.returncode is not None:
            raise ChildFailed(
                f"{self.name} exited with code {self._process.returncode} before it was ready"
            )
        raise ChildFailed(f"{self.name} printed no ready line within {within:g} s")

    async def _stop(self) -> None:
        """SIGTERM, wait `STOP_TIMEOUT`, then SIGKILL; then let the readers finish.
        Idempotent."""
        process = self._process
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
            except TimeoutError:
                print(
                    f"bench: {self.name} did not exit {STOP_TIMEOUT:g} s after SIGTERM; killing it",
                    file=sys.stderr,
                )
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        self.exit_code = process.returncode
        if self._readers:
            _, pending = await asyncio.wait(self._readers, timeout=READER_TIMEOUT)
            for task in pending:
                task.cancel()
            await asyncio.gather(*self._readers, return_exceptions=True)
            self._readers = []


def process_cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of process `pid` from `/proc/PID/stat`, or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            text = stat.read()
        ticks_per_second = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    # The command name (field 2) may hold spaces; utime and stime are fields 14 and 15.
    fields = text.rpartition(")")[2].split()
    try:
        return (int(fields[11]) + int(fields[12])) / ticks_per_second
    except (IndexError, ValueError):
        return None


PROC: Final = Path("/proc")
"""Where Linux shows each process's `stat`."""
_GONE_STATES: Final = frozenset({"Z", "X", "x"})
"""`stat` states of a process that exited (a zombie, or dead): its CPU is no longer read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Stat:
    parent: int
    state: str
    own: float
    """utime + stime, in clock ticks."""
    reaped: float
    """cutime + cstime, in clock ticks: children that exited and were waited for."""


def _read_stat(path: Path) -> _Stat | None:
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; what follows the last
    # ")" is field 3 (state) onwards: ppid is field 4, utime..cstime fields 14..17.
    fields = text.rpartition(")")[2].split()
    try:
        return _Stat(
            parent=int(fields[1]),
            state=fields[0],
            own=float(int(fields[11]) + int(fields[12])),
            reaped=float(int(fields[13]) + int(fields[14])),
        )
    except (IndexError, ValueError):
        return None


def process_tree_cpu_seconds(pid: int, *, proc: Path = PROC) -> float | None:
    """User plus system CPU seconds of process `pid` and every live descendant, each with
    the children it reaped; None when `pid` is unreadable or has exited.

    A server that forks workers (PostgreSQL: a backend per connection, its checkpointer and
    WAL writer) spends most of its CPU outside the first process. A worker that exits moves
    its time into its parent's reaped share, so the sum grows steadily across the change."""
    try:
        ticks_per_second = os.sysconf("SC_CLK_TCK")
        entries = [entry for entry in proc.iterdir() if entry.name.isdigit()]
    except (OSError, ValueError):
        return None
    stats = {int(entry.name): _read_stat(entry / "stat") for entry in entries}
    root = stats.get(pid)
    if root is None or root.state in _GONE_STATES:
        return None
    children: dict[int, list[int]] = {}
    for child, stat in stats.items():
        if stat is not None:
            children.setdefault(stat.parent, []).append(child)
    total = 0.0
    pending = [pid]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        stat = stats.get(current)
        if stat is None:
            continue
        total += stat.own + stat.reaped
        pending.extend(children.get(current, ()))
    return total / ticks_per_second


def cpu_between(
    before: Mapping[str, float | None], after: Mapping[str, float | None]
) -> dict[str, float | None]:
    """CPU seconds each process (by name) used between two readings; None for a process
    unreadable at either (or missing from `after`)."""
    spent: dict[str, float | None] = {}
    for name, start in before.items():
        end = after.get(name)
        spent[name] = None if start is None or end is None else max(0.0, end - start)
    return spent


def total_cpu(spent: Mapping[str, float | None]) -> float | None:
    """The CPU seconds of all the processes together; None when there are none or any one's
    share is unknown, since a sum over some of them would understate the cost."""
    if not spent or any(value is None for value in spent.values()):
        return None
    return sum(value for value in spent.values() if value is not None)


def _json_object(line: str) -> dict[str, Any] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None

"""The README's command blocks, run as written against real processes.

"Try it": the section's fenced `sh` blocks are what a newcomer pastes: `make serve` in one
terminal, every other line in a second one. The test starts what `make serve` starts,
`harness-gateway serve` on the embedded default data directory (`run_daemon` on
`$XDG_STATE_HOME/harness-gateway`), then runs every other command of the section, in order, in
one `bash`, as the second terminal would: the shell variables one command sets are there for
the next. Only two things differ from the newcomer's machine, both through variables the
README names: `HARNESS_URL` (the daemon listens on a free port, not 7770) and
`XDG_STATE_HOME` (a temporary directory, where the daemon writes the admin token the CLI
reads). `.venv/bin/harness` is this interpreter's `harness`.

"Several daemons": a command whose line ends in a `# terminal N` comment is a process that
runs in a terminal of its own; the test starts each, in order, waits for its `ready` line, and
runs the other commands in one `bash` as in "Try it". `HOME` is a temporary directory (the
README's `~/harness-demo`), each `127.0.0.1:PORT` of the section is rewritten to a free port
(the same port for the same number everywhere); a port the README leaves to a default is
bound for real, so two processes left on the same default fail as they would by hand.

Each command must exit 0 and print on stdout what the `#` lines right under it show: each
line whole, `…` standing for any run of characters (ids, tokens, times), and a `# …` line
alone for any further lines. A command with no `#` lines under it prints nothing.

The first block (`make serve`, `make test`) and the Commands table name make targets: each
must be one the Makefile has (`make -n` plans it); running `make test` inside the suite
would run the suite again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import re
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from gateway.testing import hermetic_environment, run_daemon
from gateway.testing_servers import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

REPOSITORY: Final = Path(__file__).resolve().parents[2]
"""The checkout whose README.md and Makefile are read."""
SECTION: Final = "## Try it"
"""The README heading of the section run with `make serve`."""
SEVERAL: Final = "## Several daemons"
"""The README heading of the section that starts its own processes."""
TERMINAL: Final = re.compile(r"\s+#\s*terminal \d+\b.*$")
"""The comment that ends a command run in a terminal of its own (a long-running process)."""
ADDRESS: Final = re.compile(r"127\.0\.0\.1:(\d+)")
"""A loopback address in a command; "Several daemons" has each rewritten to a free port."""
READY_TIMEOUT: Final = 30.0
"""Seconds a "Several daemons" process may take to log `ready` (a loaded 2-core machine)."""
STOP_TIMEOUT: Final = 15.0
"""Seconds a "Several daemons" process may take to stop on SIGTERM before it is killed."""
LOG_LINES: Final = 200
"""stderr lines kept per started process, shown when the test fails."""
SERVE: Final = "make serve"
"""The first command: the daemon, which the test starts itself."""
ANY: Final = "…"
"""In an expected line, any run of characters; alone, any further lines."""
MARK: Final = "\x1e"
"""Starts the line the shell prints after each command: its exit status."""
BOUND: Final = 120.0
"""Seconds the whole section may take (about twenty CLI processes, a few seconds each at
most on a loaded machine)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """One command of the section, continuation lines kept, and what it prints."""

    text: str
    expected: tuple[str, ...]


def try_it_commands(readme: str, heading: str = SECTION) -> list[Command]:
    """The commands of a README section (Try it by default), in order, with their `#`
    lines."""
    start = readme.index(f"\n{heading}\n")
    end = readme.find("\n## ", start + 1)
    section = readme[start : None if end < 0 else end]
    commands: list[Command] = []
    for block in re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL):
        lines = block.splitlines()
        index = 0
        while index < len(lines):
            line = lines[index]
            index += 1
            if not line.strip():
                continue
            assert not line.startswith("#"), f"a # line under no command: {line!r}"
            text = [line]
            while text[-1].endswith("\\"):
                text.append(lines[index])
                index += 1
            expected = []
            while index < len(lines) and lines[index].startswith("#"):
                expected.append(lines[index].removeprefix("#").removeprefix(" "))
                index += 1
            commands.append(Command(text="\n".join(text), expected=tuple(expected)))
    return commands


def line_matches(pattern: str, line: str) -> bool:
    """`line` is `pattern` whole, each `…` standing for any run of characters."""
    regex = ".*".join(re.escape(part) for part in pattern.split(ANY))
    return re.fullmatch(regex, line) is not None


def output_matches(expected: tuple[str, ...], lines: list[str]) -> bool:
    """`lines` are the `expected` ones, a lone `…` standing for any number of lines."""
    if not expected:
        return not lines
    head, rest = expected[0], expected[1:]
    if head == ANY:
        return any(output_matches(rest, lines[skip:]) for skip in range(len(lines) + 1))
    return bool(lines) and line_matches(head, lines[0]) and output_matches(rest, lines[1:])


def without_comment(command: str) -> str:
    """The command without a trailing `# ...` comment."""
    return command.split(" #", 1)[0].strip()


def script_of(commands: list[Command]) -> str:
    """The commands as one `bash` script printing each command's status after its output."""
    return "".join(f"{command.text}\nprintf '\\n{MARK}%s\\n' \"$?\"\n" for command in commands)


def outputs_of(stdout: str) -> list[tuple[int, list[str]]]:
    """(status, stdout lines) of each command, split at the status lines."""
    results: list[tuple[int, list[str]]] = []
    lines: list[str] = []
    # Not splitlines(): it splits at the record separator too.
    for line in stdout.split("\n"):
        if line.startswith(MARK):
            if lines and lines[-1] == "":
                lines.pop()  # the newline printed before the status, for unended output
            results.append((int(line.removeprefix(MARK)), lines))
            lines = []
        else:
            lines.append(line)
    return results


def test_the_readme_parser_reads_commands_continuations_and_expected_lines():
    readme = (
        "# x\n\n## Try it\n\n```sh\nmake serve   # terminal 1\n```\n\ntext\n\n```sh\n"
        "A=$(harness x)\nharness y \\\n  --z\n# one\n#   two\n# …\n```\n\n## Next\n\n"
        "```sh\nnot this\n```\n"
    )
    assert try_it_commands(readme) == [
        Command(text="make serve   # terminal 1", expected=()),
        Command(text="A=$(harness x)", expected=()),
        Command(text="harness y \\\n  --z", expected=("one", "  two", "…")),
    ]
    assert output_matches(("a…c", "…"), ["abc", "d", "e"])
    assert output_matches(("a", "…", "z"), ["a", "z"])
    assert not output_matches(("a…c",), ["abd"])
    assert not output_matches(("a",), ["a", "b"])
    assert not output_matches((), ["a"])


def is_terminal(command: Command) -> bool:
    """The command runs in a terminal of its own (its last line ends in `# terminal N`)."""
    return TERMINAL.search(command.text.splitlines()[-1]) is not None


def with_free_ports(commands: list[Command]) -> list[Command]:
    """The commands with each `127.0.0.1:PORT` on a free port, one per distinct PORT."""
    ports: dict[str, int] = {}

    def rewrite(match: re.Match[str]) -> str:
        port = ports.setdefault(match[1], free_port())
        return f"127.0.0.1:{port}"

    return [
        Command(text=ADDRESS.sub(rewrite, command.text), expected=command.expected)
        for command in commands
    ]


async def run_script(
    commands: list[Command], *, cwd: Path, environment: dict[str, str]
) -> tuple[str, str]:
    """Run the commands in one `bash`, bounded by `BOUND`; its stdout and stderr."""
    shell = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        script_of(commands),
        cwd=cwd,
        env=environment,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(shell.communicate(), BOUND)
    finally:
        if shell.returncode is None:
            shell.kill()
            await shell.wait()
    return stdout.decode(), stderr.decode()


def assert_printed_as_written(commands: list[Command], stdout: str, said: str) -> None:
    """Each command exited 0 and printed what the README shows under it."""
    results = outputs_of(stdout)
    assert len(results) == len(commands), f"the shell stopped early\n{said}"
    for command, (status, lines) in zip(commands, results, strict=True):
        shown = "\n".join(lines)
        assert status == 0, f"{command.text}\nexited {status}:\n{shown}\n{said}"
        assert output_matches(command.expected, lines), (
            f"{command.text}\nprinted:\n{shown}\nthe README says:\n" + "\n".join(command.expected)
        )


def readme_environment(**overrides: str) -> dict[str, str]:
    """The test's environment without `HARNESS_*` or `GRPC_*` settings, plus `overrides`."""
    environment = {
        name: value
        for name, value in hermetic_environment().items()
        if not name.startswith("GRPC_")
    }
    return environment | overrides


@dataclass(slots=True)
class Terminal:
    """A command running in a terminal of its own, with what it wrote to stderr."""

    command: Command
    process: asyncio.subprocess.Process
    log: collections.deque[str]

    def said(self) -> str:
        return f"--- {without_comment(self.command.text)} ---\n" + "\n".join(self.log)


async def _until_ready(terminal: Terminal) -> bool:
    """Read the process's stderr into its log until its `ready` line (True) or its end."""
    assert terminal.process.stderr is not None
    while line := await terminal.process.stderr.readline():
        text = line.decode(errors="replace").rstrip("\n")
        terminal.log.append(text)
        with contextlib.suppress(ValueError):
            entry = json.loads(text)
            if isinstance(entry, dict) and entry.get("msg") == "ready":
                return True
    return False


async def _drain(terminal: Terminal) -> None:
    """Keep reading stderr after `ready`, so the pipe never fills."""
    assert terminal.process.stderr is not None
    while line := await terminal.process.stderr.readline():
        terminal.log.append(line.decode(errors="replace").rstrip("\n"))


@contextlib.asynccontextmanager
async def terminals(
    commands: list[Command], *, cwd: Path, environment: dict[str, str]
) -> AsyncIterator[list[Terminal]]:
    """Start each command as its own process, in order, each ready before the next starts;
    on exit SIGTERM them in reverse order (SIGKILL past `STOP_TIMEOUT`)."""
    started: list[Terminal] = []
    readers: list[asyncio.Task[None]] = []
    try:
        for command in commands:
            process = await asyncio.create_subprocess_exec(
                "bash",
                "-c",
                f"exec {without_comment(command.text)}",
                cwd=cwd,
                env=environment,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            terminal = Terminal(
                command=command, process=process, log=collections.deque(maxlen=LOG_LINES)
            )
            started.append(terminal)
            ready = await asyncio.wait_for(_until_ready(terminal), READY_TIMEOUT)
            assert ready, f"exited {await process.wait()} before ready\n{terminal.said()}"
            readers.append(asyncio.create_task(_drain(terminal)))
        yield started
    finally:
        for terminal in reversed(started):
            if terminal.process.returncode is None:
                terminal.process.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(terminal.process.wait(), STOP_TIMEOUT)
                except TimeoutError:
                    terminal.process.kill()
                    await terminal.process.wait()
        # Each reader ends at its process's end of stderr.
        await asyncio.gather(*readers)


async def test_the_readme_try_it_runs_as_written():
    commands = try_it_commands((REPOSITORY / "README.md").read_text(encoding="utf-8"))
    first, *rest = commands
    assert without_comment(first.text) == SERVE, "the section starts the daemon first"
    assert all(SERVE not in command.text for command in rest)
    # What `make serve` runs, which `run_daemon` stands in for.
    makefile = (REPOSITORY / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^serve:.*\n\t\$\(BIN\)/harness-gateway serve \$\(ARGS\)$", makefile, re.M)
    harness = Path(sys.prefix) / "bin" / "harness"
    assert harness.exists(), f"{harness} is missing: install the client (make install)"

    with tempfile.TemporaryDirectory(prefix="harness-readme-") as name:
        home = Path(name)
        (home / ".venv").symlink_to(sys.prefix)
        state = home / "state"
        data_dir = state / "harness-gateway"
        data_dir.mkdir(parents=True)
        async with run_daemon(data_dir=data_dir) as daemon:
            assert daemon.admin_token_file == data_dir / "admin-token"
            environment = readme_environment(HARNESS_URL=daemon.address, XDG_STATE_HOME=str(state))
            stdout, stderr = await run_script(rest, cwd=home, environment=environment)
            log = daemon.stderr

    said = f"--- stderr ---\n{stderr}\n--- daemon ---\n{log[-4000:]}"
    assert_printed_as_written(rest, stdout, said)


async def test_the_readme_several_daemons_run_as_written():
    readme = (REPOSITORY / "README.md").read_text(encoding="utf-8")
    commands = with_free_ports(try_it_commands(readme, SEVERAL))
    started = [command for command in commands if is_terminal(command)]
    rest = [command for command in commands if not is_terminal(command)]
    assert [without_comment(c.text).split()[1] for c in started] == [
        "registry",
        "router",
        "serve",
        "serve",
    ], "the section starts a Registry, a Router and two daemons, in that order"
    assert all(not command.expected for command in started)
    assert commands[: len(started)] == started, "the processes start before any other command"
    with tempfile.TemporaryDirectory(prefix="harness-readme-") as name:
        home = Path(name)
        (home / ".venv").symlink_to(sys.prefix)
        environment = readme_environment(HOME=str(home))
        async with terminals(started, cwd=home, environment=environment) as running:
            stdout, stderr = await run_script(rest, cwd=home, environment=environment)
            logs = "\n".join(terminal.said()[-3000:] for terminal in running)
    assert_printed_as_written(rest, stdout, f"--- stderr ---\n{stderr}\n{logs}")


def test_the_make_targets_the_readme_names_are_the_makefiles():
    readme = (REPOSITORY / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```sh\n(.*?)```", readme, flags=re.DOTALL)
    assert first_block is not None
    named = set(re.findall(r"^make ([a-z-]+)", first_block[1], flags=re.MULTILINE))
    table = readme[readme.index("\n## Commands\n") :]
    named |= set(re.findall(r"^\| `make ([a-z-]+)`", table, flags=re.MULTILINE))
    assert {"serve", "test", "install", "check", "bench"} <= named
    makefile = (REPOSITORY / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z-]+):", makefile, flags=re.MULTILINE))
    assert named <= targets, f"the README names make targets the Makefile lacks: {named - targets}"

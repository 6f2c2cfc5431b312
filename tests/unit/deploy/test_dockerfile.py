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

import posixpath
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from gateway.settings import DEFAULT_LISTEN, DEFAULT_METRICS_LISTEN
from tests.unit.deploy.dockerfile_support import (
    BASE_ENVIRONMENT,
    BASE_IMAGE,
    DOCKERFILE,
    HADOLINT,
    HADOLINT_TIMEOUT,
    HEALTH_PORT,
    IMAGE_USER,
    ROOT,
    context_files,
    copy_sources,
    dockerfile_stages,
    dockerignore,
    final_stage,
    is_excluded,
    parse_dockerfile,
    read_dockerignore,
    stages_of,
    substitute,
    variables_in,
)

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
    assert labels["org.opencontainers.image.licenses"] == project["license"]
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

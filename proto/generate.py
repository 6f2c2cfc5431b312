"""Generate the Python code of the `harness.v1` API from proto/harness/v1/*.proto.

`python proto/generate.py` runs the pinned grpcio-tools protoc (with mypy-protobuf's
plugins for the `.pyi` stubs) into a temporary directory, rewrites the generated imports
from `harness.v1` to the package the code lives in, and writes one tree:
`contract/src/harness_contract/_gen/harness/v1/` (imported as
`harness_contract._gen.harness.v1`), shipped by the `harness-contract` distribution that the
gateway and the Python client both depend on.

Files in that tree that generation no longer produces are deleted. The output is
deterministic (no timestamps, sorted inputs), so the committed trees must equal a fresh
generation byte for byte: `python proto/generate.py --check` generates into a temporary
directory and exits 1, listing every missing, differing and extra file, when they do not.
Nothing here uses the network.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from google.protobuf import descriptor_pb2

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
"""The repository root (this file lives in `<root>/proto/`)."""

PROTO_ROOT: Final = REPO_ROOT / "proto"
"""The protoc include root: proto files are named `harness/v1/<name>.proto` under it."""

PROTO_PACKAGE_DIR: Final = PROTO_ROOT / "harness" / "v1"
"""Where the `harness.v1` proto files live."""

GENERATED_PACKAGE: Final = "harness.v1"
"""The Python package protoc names in the imports it generates (the proto package)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """One committed copy of the generated code."""

    package: str
    """The Python package the copy is imported as, e.g. `gateway._gen`."""

    directory: Path
    """The directory holding that package."""


TARGETS: Final = (
    Target(
        package="harness_contract._gen",
        directory=REPO_ROOT / "contract" / "src" / "harness_contract" / "_gen",
    ),
)
"""The tree generation writes (one, since the gateway and the client share it)."""

IGNORED_NAMES: Final = frozenset({"__pycache__"})
"""Directory names in a target that generation neither writes, deletes nor compares."""

IGNORED_SUFFIXES: Final = frozenset({".pyc", ".pyo"})
"""File suffixes in a target that generation neither writes, deletes nor compares."""

_MODULE_REFERENCE: Final = re.compile(
    r"(?<![\w.])" + re.escape(GENERATED_PACKAGE) + r"(?=\s+import\b|\.\w+_pb2(?:_grpc)?\b)"
)
"""A reference to a generated module's package: `from harness.v1 import x_pb2`,
`import harness.v1.x_pb2`, `harness.v1.x_pb2.Name`, or the module name protoc passes to
its builder (`'harness.v1.x_pb2'`). Proto names in comments (`harness.v1.SendError`) and
RPC paths (`/harness.v1.HarnessEndpointService/Send`) do not match."""

_INIT_TEXT: Final = '"""Generated from proto/harness/v1 by proto/generate.py. Do not edit."""\n'
"""The text of every `__init__.py` generation writes."""


class GenerationError(Exception):
    """protoc or one of its plugins failed, or is not installed."""


def proto_files() -> list[str]:
    """Names of the `harness.v1` proto files relative to `PROTO_ROOT`, sorted."""
    return sorted(
        path.relative_to(PROTO_ROOT).as_posix() for path in PROTO_PACKAGE_DIR.glob("*.proto")
    )


def _well_known_include() -> Path:
    """The directory of the `google/protobuf/*.proto` files bundled with grpcio-tools."""
    spec = importlib.util.find_spec("grpc_tools")
    if spec is None or not spec.submodule_search_locations:
        raise GenerationError("grpcio-tools is not installed (run `make install`)")
    return Path(next(iter(spec.submodule_search_locations))) / "_proto"


def _plugin(name: str) -> Path:
    """The path of a protoc plugin installed beside this interpreter (or on PATH)."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return beside
    found = shutil.which(name)
    if found is None:
        raise GenerationError(f"{name} is not installed (mypy-protobuf; run `make install`)")
    return Path(found)


def run_protoc(output: Path, *, descriptor_set: Path, include_source_info: bool = False) -> None:
    """Run protoc with the Python, gRPC and mypy generators over every proto file.

    Args:
        output: The directory to write `harness/v1/*` into; it must exist.
        descriptor_set: Where to write the `FileDescriptorSet` of the proto files.
        include_source_info: Whether the descriptor set keeps comments and locations.

    Raises:
        GenerationError: protoc failed; its output is in the message.
    """
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"--proto_path={PROTO_ROOT}",
        f"--proto_path={_well_known_include()}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={output}",
        f"--grpc_python_out={output}",
        f"--mypy_out={output}",
        f"--mypy_grpc_out={output}",
        f"--descriptor_set_out={descriptor_set}",
        *(["--include_source_info"] if include_source_info else []),
        *proto_files(),
    ]
    result = subprocess.run(command, cwd=PROTO_ROOT, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise GenerationError(
            f"protoc failed ({result.returncode}):\n{result.stdout}{result.stderr}"
        )


def load_descriptor_set(*, include_source_info: bool = False) -> descriptor_pb2.FileDescriptorSet:
    """Compile the proto files and return their descriptors (comments included on request)."""
    with tempfile.TemporaryDirectory(prefix="harness-proto-") as scratch:
        root = Path(scratch)
        (root / "out").mkdir()
        run_protoc(
            root / "out", descriptor_set=root / "set.pb", include_source_info=include_source_info
        )
        return descriptor_pb2.FileDescriptorSet.FromString((root / "set.pb").read_bytes())


def _rewrite(text: str, package: str) -> str:
    """Point every generated module reference at `<package>.harness.v1`."""
    return _MODULE_REFERENCE.sub(f"{package}.{GENERATED_PACKAGE}", text)


def generate() -> dict[str, dict[str, bytes]]:
    """Generate every target's tree in memory.

    Returns:
        For each target directory (as a string), its files: path relative to the target
        directory (POSIX form) to exact bytes.
    """
    with tempfile.TemporaryDirectory(prefix="harness-proto-") as scratch:
        root = Path(scratch)
        output = root / "out"
        output.mkdir()
        run_protoc(output, descriptor_set=root / "set.pb")
        files = descriptor_pb2.FileDescriptorSet.FromString((root / "set.pb").read_bytes()).file
        # protoc writes a `_pb2_grpc` module for every file; only those with services
        # hold anything (the others are a bare version check), so they are left out.
        without_services = {
            Path(file.name).stem + "_pb2_grpc" for file in files if not file.service
        }
        generated = {
            path.relative_to(output).as_posix(): path.read_text(encoding="utf-8")
            for path in sorted(output.rglob("*"))
            if path.is_file() and path.name.split(".")[0] not in without_services
        }
    trees: dict[str, dict[str, bytes]] = {}
    for target in TARGETS:
        # Every directory from the target down to each module is a regular package.
        tree = {"__init__.py": _INIT_TEXT.encode()}
        for name in generated:
            parents = PurePosixPath(name).parent.parts
            for depth in range(1, len(parents) + 1):
                tree[PurePosixPath(*parents[:depth], "__init__.py").as_posix()] = (
                    _INIT_TEXT.encode()
                )
        for name, text in generated.items():
            tree[name] = _rewrite(text, target.package).encode("utf-8")
        trees[str(target.directory)] = dict(sorted(tree.items()))
    return trees


def _is_ignored(relative: Path) -> bool:
    """Whether generation leaves a path in a target alone (bytecode caches)."""
    return (
        any(part in IGNORED_NAMES for part in relative.parts) or relative.suffix in IGNORED_SUFFIXES
    )


def _shown(path: Path) -> str:
    """A path as messages show it: relative to the repository root when inside it."""
    return path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else str(path)


def _existing_files(directory: Path) -> dict[str, Path]:
    """The files in a target directory that generation owns, by relative POSIX path."""
    if not directory.is_dir():
        return {}
    return {
        path.relative_to(directory).as_posix(): path
        for path in sorted(directory.rglob("*"))
        if path.is_file() and not _is_ignored(path.relative_to(directory))
    }


def find_drift(trees: dict[str, dict[str, bytes]] | None = None) -> list[str]:
    """Compare the trees on disk with a generation.

    Args:
        trees: The generation to compare with, as `generate` returns it; None generates one.

    Returns:
        One line per problem, `missing <path>`, `differs <path>` or `extra <path>` (paths
        relative to the repository root), sorted; empty when the trees on disk match.
    """
    trees = generate() if trees is None else trees
    problems: list[str] = []
    for directory, tree in trees.items():
        existing = _existing_files(Path(directory))
        for name, content in tree.items():
            if name not in existing:
                problems.append(f"missing {_shown(Path(directory) / name)}")
            elif existing[name].read_bytes() != content:
                problems.append(f"differs {_shown(existing[name])}")
        problems.extend(
            f"extra {_shown(path)}" for name, path in existing.items() if name not in tree
        )
    return sorted(problems)


def write(trees: dict[str, dict[str, bytes]]) -> list[str]:
    """Write generated trees, deleting the files generation no longer produces.

    Args:
        trees: The generation to write, as `generate` returns it.

    Returns:
        One line per change, `wrote <path>` or `deleted <path>`, sorted by path.
    """
    changes: list[tuple[str, str]] = []
    for directory, tree in trees.items():
        target = Path(directory)
        for name, path in _existing_files(target).items():
            if name not in tree:
                path.unlink()
                changes.append((_shown(path), "deleted"))
        for name, content in tree.items():
            path = target / name
            if path.is_file() and path.read_bytes() == content:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            changes.append((_shown(path), "wrote"))
        # Directories emptied by the deletions go too, deepest first.
        for path in sorted(target.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if (
                path.is_dir()
                and not _is_ignored(path.relative_to(target))
                and not any(path.iterdir())
            ):
                path.rmdir()
    return [f"{verb} {shown}" for shown, verb in sorted(changes)]


def main(argv: list[str] | None = None) -> int:
    """Generate (or with `--check`, verify) the committed code; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 listing every difference if the committed code is not what generation produces",
    )
    arguments = parser.parse_args(argv)
    try:
        trees = generate()
    except GenerationError as error:
        print(error, file=sys.stderr)
        return 2
    if arguments.check:
        problems = find_drift(trees)
        if problems:
            print("generated code is out of date; run `make generate`:", file=sys.stderr)
            for problem in problems:
                print(f"  {problem}", file=sys.stderr)
            return 1
        return 0
    for change in write(trees):
        print(change)
    return 0


if __name__ == "__main__":
    sys.exit(main())

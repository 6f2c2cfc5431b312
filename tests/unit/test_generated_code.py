"""The committed generated code is exactly what `proto/generate.py` produces.

Generated code changes only through `make generate`, so a reviewer reads the proto's diff
and never hand edits; these tests are the drift check `make check-generated` runs, plus the checker's own
behaviour and an import of the committed tree.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
GENERATE_SCRIPT = REPO_ROOT / "proto" / "generate.py"
GENERATED_PACKAGES = ("harness_contract._gen.harness.v1",)


@pytest.fixture(scope="module")
def generate_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("harness_proto_generate", GENERATE_SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: its dataclasses look their module up in sys.modules.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generation(generate_script) -> dict[str, dict[str, bytes]]:
    trees: dict[str, dict[str, bytes]] = generate_script.generate()
    return trees


def test_the_committed_generated_code_is_what_generation_produces(generate_script, generation):
    problems = generate_script.find_drift(generation)
    assert problems == [], "generated code is out of date; run `make generate`:\n" + "\n".join(
        problems
    )


def test_the_check_command_exits_zero_on_the_committed_tree():
    result = subprocess.run(
        [sys.executable, str(GENERATE_SCRIPT), "--check"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_generation_is_deterministic(generate_script, generation):
    assert generate_script.generate() == generation


def test_generation_writes_one_tree_in_the_shared_contract_distribution(generation):
    # One copy, imported by the gateway's rpc layer and by the Python client alike.
    (tree_root,) = generation
    assert tree_root == str(REPO_ROOT / "contract" / "src" / "harness_contract" / "_gen")
    tree = generation[tree_root]
    for name in (
        "harness/v1/endpoint_pb2.py",
        "harness/v1/endpoint_pb2.pyi",
        "harness/v1/endpoint_pb2_grpc.py",
        "harness/v1/endpoint_pb2_grpc.pyi",
        "harness/v1/__init__.py",
    ):
        assert name in tree
    assert all(
        b"harness_contract._gen.harness.v1" in tree[name]
        for name in tree
        if name.endswith("_pb2.py")
    )


def test_no_generated_module_imports_the_bare_harness_v1_package(generation):
    bare_import = re.compile(rb"^\s*(from harness\.v1 import|import harness\.v1\b)", re.MULTILINE)
    for tree in generation.values():
        for name, content in tree.items():
            assert not bare_import.search(content), name


def test_the_drift_check_names_missing_differing_and_extra_files(generate_script, tmp_path):
    target = tmp_path / "_gen"
    (target / "pkg").mkdir(parents=True)
    (target / "same.py").write_bytes(b"same\n")
    (target / "pkg" / "changed.py").write_bytes(b"old\n")
    (target / "stale.py").write_bytes(b"stale\n")
    (target / "__pycache__").mkdir()
    (target / "__pycache__" / "same.cpython-311.pyc").write_bytes(b"\0")
    tree = {"same.py": b"same\n", "pkg/changed.py": b"new\n", "pkg/new.py": b"new\n"}

    problems = generate_script.find_drift({str(target): tree})

    assert problems == [
        f"differs {target / 'pkg' / 'changed.py'}",
        f"extra {target / 'stale.py'}",
        f"missing {target / 'pkg' / 'new.py'}",
    ]


def test_writing_a_tree_replaces_changed_files_and_deletes_stale_ones(generate_script, tmp_path):
    target = tmp_path / "_gen"
    (target / "old").mkdir(parents=True)
    (target / "old" / "gone.py").write_bytes(b"gone\n")
    (target / "kept.py").write_bytes(b"old\n")
    tree = {"kept.py": b"new\n", "pkg/added.py": b"added\n"}

    generate_script.write({str(target): tree})

    assert generate_script.find_drift({str(target): tree}) == []
    assert not (target / "old").exists()


@pytest.mark.parametrize("package", GENERATED_PACKAGES)
def test_every_module_of_each_generated_tree_imports(package):
    root = importlib.import_module(package)
    names = sorted(info.name for info in pkgutil.iter_modules(root.__path__))
    assert "endpoint_pb2" in names
    assert "endpoint_pb2_grpc" in names
    for name in names:
        module = importlib.import_module(f"{package}.{name}")
        if name.endswith("_pb2"):
            assert module.DESCRIPTOR.package == "harness.v1"
    endpoint_grpc = importlib.import_module(f"{package}.endpoint_pb2_grpc")
    assert hasattr(endpoint_grpc, "HarnessEndpointServiceStub")
    assert hasattr(endpoint_grpc, "add_HarnessEndpointServiceServicer_to_server")

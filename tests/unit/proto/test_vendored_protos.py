"""The vendored `google/rpc` protos under `proto/` stay the pinned wheel's, byte for byte.

`proto/google/rpc/status.proto` and `error_details.proto` are copied from
googleapis-common-protos so that `proto/` alone decodes a status (`proto/README.md`).
Python never generates code for them: it imports `google.rpc.*_pb2` from that same wheel,
so the default descriptor pool holds one definition. These tests fail when the copy and
the installed wheel drift, when a pyproject pins another version than the copy's, or when
generation starts emitting `google.rpc` modules.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path
from typing import Final

import harness_contract._gen as generated
from google.protobuf import descriptor_pool
from google.rpc import error_details_pb2, status_pb2

REPO_ROOT: Final = Path(__file__).resolve().parents[3]
VENDORED: Final = REPO_ROOT / "proto" / "google" / "rpc"
DISTRIBUTION: Final = "googleapis-common-protos"
VENDORED_FILES: Final = ("error_details.proto", "status.proto")
PYPROJECTS: Final = (
    REPO_ROOT / "pyproject.toml",
    REPO_ROOT / "clients" / "python" / "pyproject.toml",
    REPO_ROOT / "contract" / "pyproject.toml",
)


def installed_proto(name: str) -> bytes:
    """The bytes of `google/rpc/<name>` as the installed wheel ships it."""
    distribution = importlib.metadata.distribution(DISTRIBUTION)
    (entry,) = [file for file in distribution.files or () if str(file) == f"google/rpc/{name}"]
    return Path(str(distribution.locate_file(entry))).read_bytes()


def pinned_version(pyproject: Path) -> str | None:
    """The exact version a pyproject's dependencies pin the wheel at, or None."""
    dependencies = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    for requirement in dependencies:
        found = re.fullmatch(rf"{re.escape(DISTRIBUTION)}\s*==\s*([\w.]+)", requirement.strip())
        if found:
            return found.group(1)
    return None


def test_proto_google_rpc_holds_exactly_the_two_vendored_files():
    assert sorted(path.name for path in VENDORED.iterdir()) == list(VENDORED_FILES)


def test_each_vendored_file_is_byte_equal_to_the_installed_wheels_copy():
    for name in VENDORED_FILES:
        assert (VENDORED / name).read_bytes() == installed_proto(name), (
            f"proto/google/rpc/{name} differs from {DISTRIBUTION} "
            f"{importlib.metadata.version(DISTRIBUTION)}: copy the wheel's file again "
            "and update the pins and proto/README.md"
        )


def test_every_distribution_pins_the_version_the_copy_came_from():
    installed = importlib.metadata.version(DISTRIBUTION)
    assert {str(path.relative_to(REPO_ROOT)): pinned_version(path) for path in PYPROJECTS} == {
        str(path.relative_to(REPO_ROOT)): installed for path in PYPROJECTS
    }
    assert f"{DISTRIBUTION} {installed}" in (REPO_ROOT / "proto" / "README.md").read_text(
        encoding="utf-8"
    )


def test_python_uses_the_wheels_google_rpc_and_generates_none_of_its_own():
    generated_root = Path(next(iter(generated.__path__)))
    assert not (generated_root / "google").exists()
    pool = descriptor_pool.Default()
    assert pool.FindFileByName("google/rpc/status.proto") is status_pb2.DESCRIPTOR
    assert pool.FindFileByName("google/rpc/error_details.proto") is error_details_pb2.DESCRIPTOR

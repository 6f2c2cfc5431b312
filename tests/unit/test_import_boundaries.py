"""House style 3: only gateway/rpc/ imports grpc or the generated code."""

from __future__ import annotations

import ast
from pathlib import Path

import gateway

PACKAGE_ROOT = Path(gateway.__file__).parent
BANNED_ROOTS = ("grpc", "grpc_health", "grpc_reflection", "grpc_status", "gateway._gen")
ALLOWED = ("rpc", "_gen")
ALLOWED_FILES = ("testing.py",)


def imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def is_banned(module: str) -> bool:
    return any(module == root or module.startswith(root + ".") for root in BANNED_ROOTS)


def test_only_the_rpc_package_imports_grpc_or_generated_code():
    offenders: list[str] = []
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        relative = path.relative_to(PACKAGE_ROOT)
        if relative.parts[0] in ALLOWED or relative.as_posix() in ALLOWED_FILES:
            continue
        offenders.extend(
            f"{relative}: {module}" for module in imported_modules(path) if is_banned(module)
        )
    assert offenders == []


def test_the_contract_core_does_no_io_and_imports_only_the_core_and_the_standard_library():
    allowed_third_party = {"rfc8785"}
    for path in sorted((PACKAGE_ROOT / "contract").rglob("*.py")):
        for module in imported_modules(path):
            root = module.split(".")[0]
            if root in {"gateway"}:
                assert module.startswith("gateway.contract"), f"{path.name} imports {module}"
            elif root not in allowed_third_party:
                assert root in _stdlib(), f"{path.name} imports {module}"


def _stdlib() -> frozenset[str]:
    import sys

    return frozenset(sys.stdlib_module_names) | {"__future__"}

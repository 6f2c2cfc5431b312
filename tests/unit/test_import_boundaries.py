"""Only gateway/rpc/ imports grpc or the generated code, so the core stays testable without it."""

from __future__ import annotations

import ast
from pathlib import Path

import harness_contract

import gateway

PACKAGE_ROOT = Path(gateway.__file__).parent
BANNED_ROOTS = (
    "grpc",
    "grpc_health",
    "grpc_reflection",
    "grpc_status",
    "harness_contract._gen",
    "harness_contract.wire",
)
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


def imported_targets(path: Path, package: str) -> list[str]:
    """Every dotted name a module imports: `from m import n` counts as `m.n`, and a relative
    import is resolved against `package`, so no spelling of an import slips past."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    targets: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            targets.extend(f"{module}.{alias.name}" for alias in node.names)
    return targets


def reaches_the_endpoint_past_its_api(target: str) -> bool:
    endpoint, api = "gateway.endpoint", "gateway.endpoint.api"
    inside = target == endpoint or target.startswith(endpoint + ".")
    return inside and not (target == api or target.startswith(api + "."))


def test_the_rpc_package_reaches_the_endpoint_only_through_its_api_module():
    offenders: list[str] = []
    for path in sorted((PACKAGE_ROOT / "rpc").rglob("*.py")):
        relative = path.relative_to(PACKAGE_ROOT)
        package = ".".join(("gateway", *relative.parent.parts))
        offenders.extend(
            f"{relative}: {target}"
            for target in imported_targets(path, package)
            if reaches_the_endpoint_past_its_api(target)
        )
    assert offenders == []


def test_the_endpoint_check_sees_every_spelling_of_an_import_past_the_api(tmp_path: Path):
    module = tmp_path / "module.py"
    module.write_text(
        "import gateway.endpoint.inbox\n"
        "from gateway import endpoint\n"
        "from gateway.endpoint.inbox import AgentInbox\n"
        "from ..endpoint import runtime\n"
        "from gateway.endpoint import api\n"
        "from gateway.endpoint.api import Endpoint\n"
        "from ..endpoint.api import GatewayCore\n",
        encoding="utf-8",
    )
    targets = imported_targets(module, "gateway.rpc")
    assert [target for target in targets if reaches_the_endpoint_past_its_api(target)] == [
        "gateway.endpoint.inbox",
        "gateway.endpoint",
        "gateway.endpoint.inbox.AgentInbox",
        "gateway.endpoint.runtime",
    ]


CONTRACT_ROOT = Path(harness_contract.__file__).parent
WIRE_PACKAGES = frozenset({"_gen", "wire"})
"""The contract's protobuf side: the generated code and the one mapping onto it."""


def test_the_contract_core_does_no_io_and_imports_only_the_core_and_the_standard_library():
    # Pure encoders with no I/O, declared in contract/pyproject.toml: rfc8785 the reference
    # for canonical JSON, orjson its fast path for the values it provably spells the same.
    allowed_third_party = {"rfc8785", "orjson"}
    checked = 0
    for path in sorted(CONTRACT_ROOT.rglob("*.py")):
        if path.relative_to(CONTRACT_ROOT).parts[0].removesuffix(".py") in WIRE_PACKAGES:
            continue
        checked += 1
        for module in imported_modules(path):
            root = module.split(".")[0]
            if root == "harness_contract":
                assert not module.startswith(("harness_contract._gen", "harness_contract.wire")), (
                    f"{path.name} imports {module}"
                )
            elif root not in allowed_third_party:
                assert root in _stdlib(), f"{path.name} imports {module}"
    assert checked >= 10


def test_the_contract_distribution_imports_neither_the_gateway_nor_the_client():
    # It installs on its own: the client depends on it without the gateway.
    for path in sorted(CONTRACT_ROOT.rglob("*.py")):
        for module in imported_modules(path):
            assert module.split(".")[0] not in {"gateway", "harness_client"}, (
                f"{path.relative_to(CONTRACT_ROOT)} imports {module}"
            )


def _stdlib() -> frozenset[str]:
    import sys

    return frozenset(sys.stdlib_module_names) | {"__future__"}

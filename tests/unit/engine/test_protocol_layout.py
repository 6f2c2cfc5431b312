"""The protocol package is split by job into small modules layered in one order.

The package docstring lists the modules top to bottom; a module imports only the ones above it,
so none can be read only together with one below it, and each stays small enough to read whole.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gateway.engine.protocol as protocol

PACKAGE = Path(protocol.__file__).parent
LAYERS = (
    "conversation",
    "evidence",
    "certificates",
    "packets",
    "hashes",
    "builders",
    "signatures",
    "rules",
    "envelopes",
)
MOST_LINES = 500


def imported_siblings(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    prefix = "gateway.engine.protocol."
    return {
        node.module.removeprefix(prefix)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(prefix)
    }


def test_the_package_has_exactly_the_modules_of_its_layering():
    modules = {path.stem for path in PACKAGE.glob("*.py")} - {"__init__"}
    assert modules == set(LAYERS)


def test_each_protocol_module_imports_only_the_modules_above_it():
    for index, module in enumerate(LAYERS):
        below = imported_siblings(module) - set(LAYERS[:index])
        assert below == set(), f"{module} imports {sorted(below)} from below it"


def test_the_package_docstring_lists_the_modules_in_their_layering_order():
    doc = protocol.__doc__ or ""
    positions = [doc.index(f"\n    {module} ") for module in LAYERS]
    assert positions == sorted(positions)


def test_no_protocol_module_is_over_500_lines():
    long = {
        module: lines
        for module in LAYERS
        if (lines := (PACKAGE / f"{module}.py").read_text(encoding="utf-8").count("\n"))
        > MOST_LINES
    }
    assert long == {}

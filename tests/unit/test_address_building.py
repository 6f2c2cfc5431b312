"""Addresses are built by `harness_contract.addresses`, never by gluing strings together.

`agent_address()` and `group_address()` hold the canonical form (the prefix, the sorted member
list); a hand-built `"group:" + ",".join(...)` once skipped the sort. This scans the gateway,
the contract and the Python client for f-strings and concatenations that start with an
address prefix.
"""

from __future__ import annotations

import ast
from pathlib import Path

import harness_client
import harness_contract

import gateway

ROOTS = (
    Path(gateway.__file__).parent,
    Path(harness_contract.__file__).parent,
    Path(harness_client.__file__).parent,
)
"""The gateway's, the contract's and the Python client's packages."""
PREFIXES = ("agent:", "group:")
OWNERS = frozenset({"harness_contract/addresses.py"})
"""The module whose job is building addresses (relative to its package's parent)."""


def glued_addresses(tree: ast.AST) -> list[int]:
    """Lines where an address prefix starts an f-string or a `+` concatenation."""
    lines = []
    for node in ast.walk(tree):
        match node:
            case ast.JoinedStr(values=[ast.Constant(value=str() as head), *_]) if head.startswith(
                PREFIXES
            ):
                lines.append(node.lineno)
            case ast.BinOp(op=ast.Add(), left=ast.Constant(value=str() as head)) if (
                head in PREFIXES
            ):
                lines.append(node.lineno)
    return lines


def scanned_modules() -> list[tuple[str, Path]]:
    """Every module of the scanned packages but the generated code, named from its package."""
    return [
        (path.relative_to(root.parent).as_posix(), path)
        for root in ROOTS
        for path in sorted(root.rglob("*.py"))
        if "_gen" not in path.parts
    ]


def test_the_scan_covers_the_gateway_the_contract_and_the_python_client():
    names = {name for name, _ in scanned_modules()}
    assert {"gateway/app.py", "harness_client/_cli/commands.py"} <= names
    assert names >= OWNERS
    assert not any("/_gen/" in name for name in names)


def test_no_module_builds_an_address_by_hand():
    found = [
        f"{name}:{line}"
        for name, path in scanned_modules()
        if name not in OWNERS
        for line in glued_addresses(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert found == []


def test_the_scan_finds_both_ways_of_gluing_an_address():
    tree = ast.parse('a = f"agent:{name}"\nb = "group:" + ",".join(names)\nc = f"x {y}"\n')
    assert glued_addresses(tree) == [1, 2]

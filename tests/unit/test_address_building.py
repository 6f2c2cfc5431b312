"""Addresses are built by `harness_contract.addresses`, never by gluing strings together.

`agent_address()` and `group_address()` hold the canonical form (the prefix, the sorted member
list); a hand-built `"group:" + ",".join(...)` once skipped the sort. This scans the gateway
for f-strings and concatenations that start with an address prefix.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gateway

ROOT = Path(gateway.__file__).parent
PREFIXES = ("agent:", "group:")
OWNERS = frozenset({"contract/addresses.py"})
"""The module whose job is building addresses."""


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


def test_no_module_builds_an_address_by_hand():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted(ROOT.rglob("*.py"))
        if "_gen" not in path.parts and path.relative_to(ROOT).as_posix() not in OWNERS
        for line in glued_addresses(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert found == []


def test_the_scan_finds_both_ways_of_gluing_an_address():
    tree = ast.parse('a = f"agent:{name}"\nb = "group:" + ",".join(names)\nc = f"x {y}"\n')
    assert glued_addresses(tree) == [1, 2]

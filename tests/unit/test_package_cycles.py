"""The gateway's packages form a layering: no package imports, even indirectly, one of its importers.

A cycle means neither side can be understood, tested or replaced without the other; the
registry and the engine once imported each other through keys and cards, which now live in
the leaf `gateway.identity`. Each top-level package or module of `gateway/` is one node; an
edge is any import (also one inside a function) of another node.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Mapping
from pathlib import Path

import gateway

PACKAGE_ROOT = Path(gateway.__file__).parent
SKIPPED = frozenset({"_gen", "__init__"})


def node_of(relative: Path) -> str:
    return relative.parts[0].removesuffix(".py")


def package_edges() -> dict[str, dict[str, str]]:
    """For each node, the nodes it imports, each with one file that does so (the witness)."""
    edges: dict[str, dict[str, str]] = {}
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        relative = path.relative_to(PACKAGE_ROOT)
        source = node_of(relative)
        if source in SKIPPED:
            continue
        targets = edges.setdefault(source, {})
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            modules: list[str] = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
                if node.module == "gateway":
                    modules = [f"gateway.{alias.name}" for alias in node.names]
            for module in modules:
                parts = module.split(".")
                if parts[0] != "gateway" or len(parts) < 2:
                    continue
                target = parts[1]
                if target not in SKIPPED and target != source:
                    targets.setdefault(target, relative.as_posix())
    return edges


def find_cycle(edges: Mapping[str, Mapping[str, str]]) -> list[str] | None:
    """One cycle as a path of nodes (first == last), or None for an acyclic graph."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(edges.get(node, {})):
            cycle = visit(target)
            if cycle is not None:
                return cycle
        path.pop()
        done.add(node)
        return None

    for start in sorted(edges):
        cycle = visit(start)
        if cycle is not None:
            return cycle
    return None


def test_no_package_of_the_gateway_imports_one_of_its_importers():
    edges = package_edges()
    cycle = find_cycle(edges)
    witnesses = (
        []
        if cycle is None
        else [f"{a} -> {b} ({edges[a][b]})" for a, b in itertools.pairwise(cycle)]
    )
    assert cycle is None, "package import cycle: " + "; ".join(witnesses)


def test_the_identity_leaf_imports_only_the_contract():
    edges = package_edges()
    assert set(edges["identity"]) <= {"contract"}, edges["identity"]


def test_the_firewall_imports_only_the_contract():
    # Its one network dependency, the external middleware's gRPC client, is a port that
    # gateway/rpc/ implements and the composition root hands in.
    edges = package_edges()
    assert set(edges["firewall"]) <= {"contract"}, edges["firewall"]


def test_the_engine_does_not_import_the_registry_it_is_verified_against():
    assert "registry" not in package_edges()["engine"]


def test_the_cycle_finder_finds_a_cycle_and_names_it():
    edges = {"a": {"b": "a.py"}, "b": {"c": "b.py"}, "c": {"a": "c.py"}, "d": {"a": "d.py"}}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": "a.py"}, "b": {}}) is None

"""The gateway's packages, the contract's modules and both clients' modules form layerings.

No node imports, even indirectly, one of its importers. A cycle means neither side can be
understood, tested or replaced without the other; the registry and the engine once imported
each other through keys and cards, which now live in the leaf `gateway.identity`, and the
contract's `errors` and `guidance` once did through `FirewallRefusal` (now in the leaf
`guidance`). An edge is any import, also one inside a function or under `TYPE_CHECKING`.

- The gateway: each top-level package or module of `gateway/` is one node.
- The contract (`harness_contract`) and the Python client (`harness_client`): each module
  is one node (a package's `__init__` is the package's node), `_gen` left out.
- The TypeScript client: each `clients/node/src/*.ts` file is one node and an edge is an
  `import` or `export ... from` of a sibling, also `import type` (`src/gen/` left out).
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import harness_client
import harness_contract

import gateway

PACKAGE_ROOT = Path(gateway.__file__).parent
SKIPPED = frozenset({"_gen", "__init__"})
NODE_SRC = Path(__file__).resolve().parents[2] / "clients" / "node" / "src"

TS_IMPORT = re.compile(
    r"""^\s*(?:import|export)\b[^;]*?\bfrom\s*["'](\./[^"']+)["']|^\s*import\s*["'](\./[^"']+)["']""",
    re.MULTILINE,
)
"""A relative `import ... from "./x.js"`, `export ... from "./x.js"` or `import "./x.js"`."""


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


def module_edges(package: ModuleType) -> dict[str, dict[str, str]]:
    """For each module of `package` (`_gen` left out), the modules of it it imports.

    A node is a dotted name relative to the package (`_cli.commands`; `""` is the
    package's `__init__`). `from p import name` is an edge to `p.name` when that is a
    module, else to `p`; relative imports are resolved against the importing module.
    """
    root = Path(package.__file__ or "").parent
    name = package.__name__
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if "_gen" in parts:
            continue
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def local(dotted: str) -> str | None:
        if dotted == name:
            return ""
        if dotted.startswith(name + "."):
            return dotted.removeprefix(name + ".")
        return None

    edges: dict[str, dict[str, str]] = {}
    for source, path in modules.items():
        targets = edges.setdefault(source, {})
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            imported: list[str] = []
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = [name, *source.split(".")] if source else [name]
                    base = base[: len(base) - node.level + (1 if is_package else 0)]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                # `from p import m` imports the module `p.m` if it is one, else a name of `p`.
                imported = [
                    f"{module}.{alias.name}"
                    if local(f"{module}.{alias.name}") in modules
                    else module
                    for alias in node.names
                ]
            for dotted in imported:
                target = local(dotted)
                if target is not None and target in modules and target != source:
                    targets.setdefault(target, path.relative_to(root).as_posix())
    return edges


def ts_module_edges(source_root: Path = NODE_SRC) -> dict[str, dict[str, str]]:
    """For each `*.ts` file of the TypeScript client's `src/` (not `gen/`), the files it imports."""
    edges: dict[str, dict[str, str]] = {}
    for path in sorted(source_root.glob("*.ts")):
        targets = edges.setdefault(path.stem, {})
        for match in TS_IMPORT.finditer(path.read_text(encoding="utf-8")):
            specifier = match.group(1) or match.group(2)
            target = specifier.removeprefix("./").removesuffix(".js").removesuffix(".ts")
            if "/" not in target and target != path.stem:
                targets.setdefault(target, path.name)
    return edges


def assert_acyclic(edges: Mapping[str, Mapping[str, str]], what: str) -> None:
    cycle = find_cycle(edges)
    witnesses = (
        []
        if cycle is None
        else [
            f"{a or '__init__'} -> {b or '__init__'} ({edges[a][b]})"
            for a, b in itertools.pairwise(cycle)
        ]
    )
    assert cycle is None, f"{what} import cycle: " + "; ".join(witnesses)


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
    assert_acyclic(package_edges(), "package")


def test_no_module_of_the_contract_imports_one_of_its_importers():
    edges = module_edges(harness_contract)
    assert {"errors", "guidance", "values", "wire", "codec"} <= set(edges)
    assert_acyclic(edges, "contract module")


def test_the_contract_guidance_values_are_a_leaf_the_errors_stand_on():
    edges = module_edges(harness_contract)
    assert "guidance" in edges["errors"]
    assert set(edges["guidance"]) == set(), edges["guidance"]


def test_no_module_of_the_python_client_imports_one_of_its_importers():
    edges = module_edges(harness_client)
    assert {"", "_endpoint", "cli", "_cli.commands", "_cli.parser"} <= set(edges)
    assert "_cli.commands" in edges["_cli.parser"]
    assert_acyclic(edges, "Python client module")


def test_no_module_of_the_typescript_client_imports_one_of_its_importers():
    edges = ts_module_edges()
    assert {"errors", "values", "endpoint", "index"} <= set(edges)
    assert "errors" in edges["endpoint"]
    assert "gen" not in {target for targets in edges.values() for target in targets}
    assert_acyclic(edges, "TypeScript client module")


def test_the_typescript_import_reader_sees_type_imports_and_re_exports(tmp_path):
    (tmp_path / "a.ts").write_text(
        'import type { B } from "./b.js";\nexport { c } from "./c.js";\n'
        'import {\n  x,\n  y,\n} from "./d.js";\nimport * as pb from "./gen/x_pb.js";\n',
        encoding="utf-8",
    )
    (tmp_path / "b.ts").write_text('export type * from "./a.js";\n', encoding="utf-8")
    edges = ts_module_edges(tmp_path)
    assert edges["a"] == {"b": "a.ts", "c": "a.ts", "d": "a.ts"}
    assert find_cycle(edges) == ["a", "b", "a"]


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


def test_the_module_reader_resolves_from_imports_relative_imports_and_type_checking_ones(tmp_path):
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("from pkg.a import A\n", encoding="utf-8")
    (root / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub import b\nA = 1\n",
        encoding="utf-8",
    )
    (root / "sub" / "__init__.py").write_text("", encoding="utf-8")
    (root / "sub" / "b.py").write_text("from .. import A\nfrom . import c\n", encoding="utf-8")
    (root / "sub" / "c.py").write_text("from pkg.sub.b import x\n", encoding="utf-8")
    package = ModuleType("pkg")
    package.__file__ = str(root / "__init__.py")
    edges = module_edges(package)
    assert edges == {
        "": {"a": "__init__.py"},
        "a": {"sub.b": "a.py"},
        "sub": {},
        "sub.b": {"": "sub/b.py", "sub.c": "sub/b.py"},
        "sub.c": {"sub.b": "sub/c.py"},
    }
    # The TYPE_CHECKING import closes a circle through the package facade.
    assert find_cycle(edges) == ["", "a", "sub.b", ""]


def test_the_cycle_finder_finds_a_cycle_and_names_it():
    edges = {"a": {"b": "a.py"}, "b": {"c": "b.py"}, "c": {"a": "c.py"}, "d": {"a": "d.py"}}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": "a.py"}, "b": {}}) is None

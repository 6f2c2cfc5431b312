"""`docs/clients.md`'s code is written against the clients' real public APIs.

The guide's examples are read, never run (they would need a gateway): each ```python block
must compile, and every name it takes from `harness_client` (`from harness_client import X`,
`harness_client.X`) must be one the package exports, as must every method it calls on an
`endpoint`. Each ```ts block may import from `@harness-gateway/client` only what
`clients/node/src/index.ts` exports, by name or through an `export type * from` of a module
that declares it, and may call on an `endpoint` only the methods `Endpoint` declares.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Final

import harness_client
import pytest

REPO: Final = Path(__file__).resolve().parents[2]
GUIDE: Final = REPO / "docs" / "clients.md"
NODE_SRC: Final = REPO / "clients" / "node" / "src"

FENCE: Final = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
"""A fenced block: its language and its text."""

TS_IMPORT: Final = re.compile(
    r"""import\s+(?:type\s+)?\{([^}]*)\}\s*from\s*["']@harness-gateway/client["']"""
)
"""`import { a, b } from "@harness-gateway/client"` (or `import type`): the braces."""

NAMED_EXPORT: Final = re.compile(r"export\s+(?:type\s+)?\{([^}]*)\}\s*from", re.DOTALL)
"""`export { a, b } from "./x.js"` or `export type { ... } from`: the braces."""

STAR_EXPORT: Final = re.compile(r"""export\s+(?:type\s+)?\*\s+from\s+["']\./(\w+)\.js["']""")
"""`export type * from "./values.js"`: the module re-exported whole."""

DECLARED_EXPORT: Final = re.compile(
    r"^export\s+(?:declare\s+)?(?:abstract\s+)?"
    r"(?:interface|type|class|function|const|enum)\s+(\w+)",
    re.MULTILINE,
)
"""A declaration a module exports (`export interface JsonObject`, `export type X = ...`)."""

ENDPOINT_CALL: Final = re.compile(r"\bendpoint\.(\w+)\(")
"""A method called on a variable named `endpoint`."""


def blocks(language: str) -> list[str]:
    """The guide's fenced blocks of `language`, in order."""
    text = GUIDE.read_text(encoding="utf-8")
    return [body for lang, body in FENCE.findall(text) if lang == language]


def names_in_braces(braces: str) -> set[str]:
    """`a, type b, c as d` -> {a, b, c}: the exported names, not the local aliases."""
    names = set()
    for entry in braces.split(","):
        words = entry.split()
        if words and words[0] == "type":
            words = words[1:]
        if words:
            names.add(words[0])
    return names


def node_exports() -> set[str]:
    """Every name `clients/node/src/index.ts` exports, values and types."""
    index = (NODE_SRC / "index.ts").read_text(encoding="utf-8")
    exported: set[str] = set()
    for braces in NAMED_EXPORT.findall(index):
        exported |= names_in_braces(braces)
    for module in STAR_EXPORT.findall(index):
        exported |= set(DECLARED_EXPORT.findall((NODE_SRC / f"{module}.ts").read_text("utf-8")))
    return exported


def endpoint_methods() -> set[str]:
    """The methods of the TypeScript `Endpoint` class (its public ones and the rest)."""
    source = (NODE_SRC / "endpoint.ts").read_text(encoding="utf-8")
    body = source[source.index("export class Endpoint") :]
    return set(re.findall(r"^  (?:async\s+)?(\w+)\(", body, re.MULTILINE))


def harness_client_names(tree: ast.AST) -> set[str]:
    """What a block takes from `harness_client`: imported names and attributes."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "harness_client":
            names |= {alias.name for alias in node.names}
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "harness_client"
        ):
            names.add(node.attr)
    return names


def endpoint_attributes(tree: ast.AST) -> set[str]:
    """The attributes a block uses on a variable named `endpoint`."""
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "endpoint"
    }


PYTHON_BLOCKS: Final = blocks("python")
TS_BLOCKS: Final = blocks("ts")


def test_the_guide_has_examples_in_both_languages() -> None:
    # A renamed fence (```py) would otherwise silently drop a block from every check.
    assert len(PYTHON_BLOCKS) >= 3
    assert len(TS_BLOCKS) >= 3
    # `text` holds the message-text forms: what a model writes, not code to check.
    assert {lang for lang, _ in FENCE.findall(GUIDE.read_text("utf-8"))} <= {
        "python",
        "ts",
        "sh",
        "text",
    }


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_blocks_compile_against_harness_client(index: int) -> None:
    source = PYTHON_BLOCKS[index]
    compile(source, f"docs/clients.md python block {index}", "exec")
    tree = ast.parse(source)
    used = harness_client_names(tree)
    missing = sorted(name for name in used if name not in harness_client.__all__)
    assert not missing, f"block {index} uses names harness_client does not export: {missing}"
    unknown = sorted(
        name for name in endpoint_attributes(tree) if not hasattr(harness_client.Endpoint, name)
    )
    assert not unknown, f"block {index} calls what Endpoint lacks: {unknown}"


def test_python_blocks_use_harness_client() -> None:
    # The checks above pass vacuously on a block that names nothing from the client.
    assert all(harness_client_names(ast.parse(block)) for block in PYTHON_BLOCKS)


@pytest.mark.parametrize("index", range(len(TS_BLOCKS)))
def test_ts_blocks_import_only_exported_names(index: int) -> None:
    source = TS_BLOCKS[index]
    imported: set[str] = set()
    for braces in TS_IMPORT.findall(source):
        imported |= names_in_braces(braces)
    assert imported, f"block {index} imports nothing from @harness-gateway/client"
    missing = sorted(imported - node_exports())
    assert not missing, f"block {index} imports names index.ts does not export: {missing}"
    unknown = sorted(set(ENDPOINT_CALL.findall(source)) - endpoint_methods())
    assert not unknown, f"block {index} calls what Endpoint lacks: {unknown}"


def test_node_exports_are_read() -> None:
    # The regexes find what index.ts exports by name and through `export type *`.
    exported = node_exports()
    assert {"connect", "SendError", "HarnessConnectError", "ConnectOptions"} <= exported
    assert {"JsonObject", "MessageInput", "InboundDelivery"} <= exported
    assert {"send", "messages", "readSend", "close"} <= endpoint_methods()

"""Every client runs exactly the scenarios `clients/scenarios.txt` lists.

The Python side is `tests/integration/clients/test_client_scenarios.py`, one
`test_<id with - replaced by _>` each; the TypeScript side is
`clients/node/test/scenarios.test.ts`, one `test("<id>", ...)` each. Both files are read,
never imported or run: a scenario one client lacks, runs twice, adds or skips fails here,
before either suite runs. A missing file fails too (a client without its scenarios has not
passed them).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[2]
SCENARIOS: Final = REPO / "clients" / "scenarios.txt"
PYTHON_SCENARIOS: Final = REPO / "tests" / "integration" / "clients" / "test_client_scenarios.py"
NODE_SCENARIOS: Final = REPO / "clients" / "node" / "test" / "scenarios.test.ts"

SCENARIO_ID: Final = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
"""A scenario id: kebab-case, so that it maps one-to-one onto a Python test name."""

NODE_TEST: Final = re.compile(r"""\btest\(\s*(["'`])(.*?)\1""")
"""`test("<id>"` (node:test's `test`), with any quote."""

NODE_NOT_RUN: Final = re.compile(
    r"""\.(?:skip|todo)\(|\.only\b|\btest\(\s*(["'`]).*?\1\s*,\s*\{[^}]*\b(?:skip|todo)\b"""
)
"""What lets a node:test scenario pass without running: `test.skip(`, `t.skip(`,
`describe.todo(`, a `{skip: ...}` or `{todo: ...}` option, or an `.only`, which stops the
others running."""


def scenario_ids() -> list[str]:
    """The ids in `clients/scenarios.txt`, in file order: the first word of each line that
    is neither blank nor a `#` comment."""
    ids = []
    for line in SCENARIOS.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            ids.append(stripped.split()[0])
    return ids


def python_test_name(scenario: str) -> str:
    return "test_" + scenario.replace("-", "_")


def python_tests(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every test pytest would collect from the module: top-level `test_*` functions and
    the `test_*` methods of `Test*` classes."""
    found: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            found.append(node)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found.extend(
                member
                for member in node.body
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef)
                and member.name.startswith("test")
            )
    return found


def mentions_skipping(node: ast.AST) -> bool:
    """Whether an expression names `skip`, `skipif` or `xfail` (a mark that lets a scenario
    pass without running it)."""
    return any(
        (isinstance(part, ast.Attribute) and part.attr in {"skip", "skipif", "xfail"})
        or (isinstance(part, ast.Name) and part.id in {"skip", "skipif", "xfail"})
        for part in ast.walk(node)
    )


def test_the_scenario_list_names_each_scenario_once_in_kebab_case() -> None:
    ids = scenario_ids()
    assert ids, f"{SCENARIOS} lists no scenario"
    assert [scenario for scenario, count in Counter(ids).items() if count > 1] == []
    assert [scenario for scenario in ids if not SCENARIO_ID.fullmatch(scenario)] == []


def test_the_python_client_defines_one_test_per_scenario_and_no_other() -> None:
    assert PYTHON_SCENARIOS.is_file(), f"{PYTHON_SCENARIOS} is missing"
    tree = ast.parse(PYTHON_SCENARIOS.read_text(encoding="utf-8"), str(PYTHON_SCENARIOS))
    defined = Counter(test.name for test in python_tests(tree))
    expected = Counter(python_test_name(scenario) for scenario in scenario_ids())
    assert {"missing": sorted(expected - defined), "extra": sorted(defined - expected)} == {
        "missing": [],
        "extra": [],
    }


def test_no_python_scenario_is_skipped() -> None:
    tree = ast.parse(PYTHON_SCENARIOS.read_text(encoding="utf-8"), str(PYTHON_SCENARIOS))
    skipped = [
        test.name
        for test in python_tests(tree)
        if any(mentions_skipping(decorator) for decorator in test.decorator_list)
        or any(mentions_skipping(statement) for statement in test.body)
    ]
    module_marks = [
        node
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(
            isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets
        )
    ]
    assert skipped == []
    assert [ast.unparse(node) for node in module_marks if mentions_skipping(node)] == []


def test_the_typescript_client_declares_one_test_per_scenario_and_no_other() -> None:
    assert NODE_SCENARIOS.is_file(), (
        f"{NODE_SCENARIOS.relative_to(REPO)} is missing: the TypeScript client must run "
        f"every scenario of {SCENARIOS.relative_to(REPO)}"
    )
    declared = Counter(
        match.group(2) for match in NODE_TEST.finditer(NODE_SCENARIOS.read_text(encoding="utf-8"))
    )
    expected = Counter(scenario_ids())
    assert {"missing": sorted(expected - declared), "extra": sorted(declared - expected)} == {
        "missing": [],
        "extra": [],
    }


def test_no_typescript_scenario_is_skipped() -> None:
    assert NODE_SCENARIOS.is_file(), f"{NODE_SCENARIOS.relative_to(REPO)} is missing"
    source = NODE_SCENARIOS.read_text(encoding="utf-8")
    assert [match.group(0) for match in NODE_NOT_RUN.finditer(source)] == []

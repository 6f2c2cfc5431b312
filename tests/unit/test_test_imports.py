"""A test module imports helpers from support modules, never from another test module.

Importing a test module runs its module-level code and drags its tests along (a star import
collects them twice, a named one re-runs them under another name); what tests share lives in
`tests/support.py`, a package's `support.py` or `conftest.py`, or a `*_suite.py` contract suite
that each backend's test module star-imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported_test_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """The (line, module) of every import of a `test_*` module, also one inside a function."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [
            (node.lineno, module)
            for module in modules
            if module.startswith("tests.") and module.rsplit(".", 1)[-1].startswith("test_")
        ]
    return found


def test_the_reader_finds_a_named_a_star_and_a_module_import_of_a_test_module():
    tree = ast.parse(
        "from tests.unit.x.test_y import helper\n"
        "from tests.unit.x import test_y\n"
        "import tests.unit.x.test_y\n"
        "def f():\n    from tests.unit.x.test_y import *\n"
        "from tests.unit.x.support import helper\n"
        "from tests.unit.x import support\n"
    )
    assert [line for line, _ in imported_test_modules(tree)] == [1, 2, 3, 5]


def test_no_test_module_is_imported_by_another_module_of_the_suite():
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{line}: {module}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, module in imported_test_modules(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert offenders == []

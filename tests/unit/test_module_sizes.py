"""A module over 800 lines says in its opening docstring why it is one module.

Long modules are where a newcomer has to read the most to change one thing; the few that are
long on purpose (one closed vocabulary, one state machine, one mapping) say so and why, in a
paragraph that begins "The module is long". The check covers the gateway, the contract
(`harness_contract`) and the Python client (`harness_client`), generated code aside.
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
MOST_LINES = 800
REASON = "The module is long"


def unexplained_long_modules(root: Path) -> list[str]:
    """The modules under `root` (`_gen` aside) over `MOST_LINES` lines that do not say why."""
    unexplained = []
    for path in sorted(root.rglob("*.py")):
        if "_gen" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MOST_LINES and REASON not in (
            ast.get_docstring(ast.parse(text)) or ""
        ):
            unexplained.append(f"{path.relative_to(root.parent)}: {text.count(chr(10))} lines")
    return unexplained


def test_every_module_over_800_lines_says_why_it_is_one_module():
    assert [module for root in ROOTS for module in unexplained_long_modules(root)] == []


def test_the_check_names_a_long_module_without_a_reason_and_passes_one_with(tmp_path):
    package = tmp_path / "pkg"
    (package / "_gen").mkdir(parents=True)
    body = "x = 1\n" * (MOST_LINES + 1)
    (package / "long.py").write_text('"""Many things."""\n' + body, encoding="utf-8")
    (package / "why.py").write_text(f'"""One table.\n\n{REASON}: one table."""\n' + body)
    (package / "_gen" / "made.py").write_text(body, encoding="utf-8")
    (package / "short.py").write_text("x = 1\n", encoding="utf-8")
    assert unexplained_long_modules(package) == [f"pkg/long.py: {MOST_LINES + 2} lines"]

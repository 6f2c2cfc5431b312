"""Every design reference in the repository resolves in `docs/design/`.

Code, protos, tests, docs and deployment files cite the design as `engine.md §5.10`: a
design file's name and a section number. Those files live in `docs/design/` (its
`README.md` is the index), and a reference resolves when the file exists and has a heading
whose number is the section (`### 5.4.1 ...`, `## 8a. ...`). A bare `§N` resolves in one of
the design files the same source file names (a design file's own bare references, in
itself); in another Markdown file it may also be one of that file's own numbered headings
(a user guide's cross-reference). Section signs of other documents are not design references: `RFC 7235 §2.1`, and a
user guide's `docs/firewall.md §3` (the contract is cited by quoted section title, never by
`§`). Nothing may point at the design notes that used to live outside the repository.

The check reads files only: no process, no socket.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
"""The repository root."""

DESIGN_DIR: Final = ROOT / "docs" / "design"
"""Where the design of record lives."""

DESIGN_NAMES: Final = (
    "architecture",
    "engine",
    "collectives",
    "cluster",
    "firewall",
    "operations",
    "house-style",
)
"""The design files a reference may name (`<name>.md`)."""

SCANNED: Final = (
    "gateway",
    "contract",
    "clients",
    "proto",
    "tests",
    "docs",
    "helm",
    "deploy",
    "bench",
    "README.md",
    "AGENTS.md",
    "Makefile",
    "pyproject.toml",
)
"""The files and trees, relative to the root, whose references are checked."""

SKIPPED_DIRS: Final = frozenset(
    {"node_modules", "_gen", "gen", "__pycache__", "build", "dist", ".venv", ".git"}
)
"""Directories never read: dependencies, generated code and build output."""

TEXT_SUFFIXES: Final = frozenset(
    {
        ".py",
        ".pyi",
        ".proto",
        ".md",
        ".txt",
        ".yaml",
        ".yml",
        ".json",
        ".toml",
        ".ts",
        ".mts",
        ".js",
        ".mjs",
        ".tpl",
        ".cfg",
        ".ini",
        ".sh",
    }
)
"""Suffixes of the files read; files without a suffix are read when named in `TEXT_NAMES`."""

TEXT_NAMES: Final = frozenset({"Dockerfile", "Makefile", "NOTES.txt"})
"""Text files without a telling suffix."""

THIS_FILE: Final = Path(__file__).resolve()
"""This test names the patterns it looks for, so it does not read itself."""

_NAME: Final = "|".join(re.escape(name) for name in DESIGN_NAMES)
_SECTION: Final = r"(?P<section>\d+(?:\.\d+)*[a-z]?)"

NAMED: Final = re.compile(
    rf"(?P<prefix>[\w./-]*?)(?<![\w-])(?P<name>{_NAME})\.md"
    rf"(?:`|\]\([^)\s]*\))?[ \t]?§[ \t]?{_SECTION}"
)
"""`engine.md §5.10`, `` `engine.md` §5.10 ``, `[engine.md](engine.md) §5.10`."""

SIGN: Final = re.compile(rf"§[ \t]?{_SECTION}")
"""Any section sign followed by a number."""

OTHER_DOCUMENT: Final = re.compile(r"RFC[ \t]?\d+[ \t]*$")
"""Text just before a `§` that makes it another document's section (an RFC)."""

MENTION: Final = re.compile(rf"(?<![\w-])(?P<name>{_NAME})\.md\b")
"""A design file named anywhere in a file, with or without a section."""

HEADING: Final = re.compile(r"^#{1,6}[ \t]+(?P<number>\d+(?:\.\d+)*[a-z]?)\.?(?:[ \t]|$)")
"""A numbered Markdown heading: `## 3.`, `### 2.1 Endpoint`, `## 8a. One store`."""

OUTSIDE_DESIGN: Final = re.compile(r"shared/(?:design|spec)\b")
"""The old home of the design notes and the contract, beside the repository."""


@dataclass(frozen=True, slots=True)
class Reference:
    """One section reference: where it is, what it names (None: bare) and its section."""

    path: Path
    line: int
    name: str | None
    section: str

    def __str__(self) -> str:
        cited = f"{self.name}.md §{self.section}" if self.name else f"§{self.section}"
        return f"{self.path.relative_to(ROOT)}:{self.line}: {cited}"


def scanned_files() -> Iterator[Path]:
    """Every text file under `SCANNED`, generated and dependency trees left out."""
    for entry in SCANNED:
        path = ROOT / entry
        if path.is_file():
            yield path
            continue
        for directory, subdirectories, files in os.walk(path):
            subdirectories[:] = sorted(d for d in subdirectories if d not in SKIPPED_DIRS)
            for file in sorted(files):
                candidate = Path(directory) / file
                if candidate.resolve() == THIS_FILE:
                    continue
                if candidate.suffix in TEXT_SUFFIXES or file in TEXT_NAMES:
                    yield candidate


def references(path: Path, text: str) -> list[Reference]:
    """The design references of one file, named and bare, in order."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        named_at = {}
        for match in NAMED.finditer(line):
            # `docs/firewall.md §3` is the user guide, not the design; `docs/design/...` is.
            prefix = match.group("prefix")
            user_guide = prefix.endswith("docs/") and not prefix.endswith("design/")
            named_at[match.end()] = None if user_guide else match.group("name")
        for match in SIGN.finditer(line):
            if match.end() in named_at:
                name = named_at[match.end()]
                if name is not None:
                    found.append(Reference(path, number, name, match.group("section")))
                continue
            if OTHER_DOCUMENT.search(line[: match.start()]):
                continue
            found.append(Reference(path, number, None, match.group("section")))
    return found


def mentioned_designs(path: Path, text: str) -> set[str]:
    """The design files a file names (a design file also counts as naming itself)."""
    if path.parent == DESIGN_DIR and path.stem in DESIGN_NAMES:
        return {path.stem}
    return {match.group("name") for match in MENTION.finditer(text)}


def headings(text: str) -> set[str]:
    """The numbers of a Markdown text's numbered headings."""
    return {m.group("number") for m in map(HEADING.match, text.splitlines()) if m}


def design_sections() -> dict[str, set[str]]:
    """Each existing design file's numbered headings."""
    return {
        name: headings(path.read_text(encoding="utf-8"))
        for name in DESIGN_NAMES
        if (path := DESIGN_DIR / f"{name}.md").is_file()
    }


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


@functools.cache
def unresolved() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(named references that do not resolve, bare ones that do not), as `path:line: ref`;
    read once for both tests that report them."""
    sections = design_sections()
    named_problems, bare_problems = [], []
    for path in scanned_files():
        text = _read(path)
        if text is None or "§" not in text:
            continue
        designs = mentioned_designs(path, text)
        own = headings(text) if path.suffix == ".md" and path.parent != DESIGN_DIR else set()
        for reference in references(path, text):
            if reference.name is not None:
                if reference.name not in sections:
                    named_problems.append(f"{reference} (no docs/design/{reference.name}.md)")
                elif reference.section not in sections[reference.name]:
                    named_problems.append(f"{reference} (no such heading)")
            elif reference.section in own:
                continue
            elif not designs:
                bare_problems.append(f"{reference} (the file names no design file)")
            elif not any(reference.section in sections.get(name, ()) for name in designs):
                cited = ", ".join(f"{name}.md" for name in sorted(designs))
                bare_problems.append(f"{reference} (not a heading of {cited})")
    return tuple(named_problems), tuple(bare_problems)


def test_every_design_reference_names_a_design_file_with_that_numbered_heading():
    named_problems, _ = unresolved()
    assert not named_problems, "design references that do not resolve:\n" + "\n".join(
        named_problems
    )


def test_every_bare_section_reference_resolves_in_a_design_file_its_source_names():
    _, bare_problems = unresolved()
    assert not bare_problems, "bare § references that do not resolve:\n" + "\n".join(bare_problems)


def test_no_file_points_at_the_design_notes_outside_the_repository():
    pointers = []
    for path in scanned_files():
        text = _read(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if OUTSIDE_DESIGN.search(line):
                pointers.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not pointers, "pointers outside the repository (use docs/design/):\n" + "\n".join(
        pointers
    )


def test_the_design_index_names_every_design_file_and_each_one_exists():
    index = (DESIGN_DIR / "README.md").read_text(encoding="utf-8")
    listed = {match.group("name") for match in MENTION.finditer(index)}
    assert listed == set(DESIGN_NAMES)
    assert (DESIGN_DIR / "harness-endpoint-contract.txt").is_file()
    assert "harness-endpoint-contract.txt" in index


def test_the_finder_tells_named_bare_and_other_documents_sections_apart(tmp_path):
    text = (
        "engine.md §5.10 and `operations.md` §8a. then §2.1, see RFC 7235 §2.1\n"
        "[firewall.md](firewall.md) §4.1 but docs/firewall.md §3 is the guide; "
        "docs/design/collectives.md §4.7\n"
    )
    found = [(r.line, r.name, r.section) for r in references(tmp_path / "x.py", text)]
    assert found == [
        (1, "engine", "5.10"),
        (1, "operations", "8a"),
        (1, None, "2.1"),
        (2, "firewall", "4.1"),
        (2, "collectives", "4.7"),
    ]
    assert mentioned_designs(tmp_path / "x.py", text) == {
        "engine",
        "operations",
        "firewall",
        "collectives",
    }


def test_a_numbered_heading_gives_its_section_and_an_unnumbered_one_none():
    numbers = [
        m.group("number") if (m := HEADING.match(line)) else None
        for line in ("## 1. What", "### 5.4.1 Step", "## 8a. One store", "## Errors", "#5 no")
    ]
    assert numbers == ["1", "5.4.1", "8a", None, None]


def test_operations_names_every_setting_with_its_variable_and_every_exported_metric():
    # Imported here: the reference checks above need nothing of the gateway.
    from gateway import __version__
    from gateway.observability.metrics import Metrics
    from gateway.settings import Settings, env_name

    operations = (DESIGN_DIR / "operations.md").read_text(encoding="utf-8")
    settings = [field.name for field in dataclasses.fields(Settings) if field.name != "role"]
    missing = [
        f"setting {name} ({env_name(name)})"
        for name in settings
        if f"`{env_name(name)}`" not in operations
    ]
    exposition = Metrics(__version__, Settings().mode).render()
    families = {
        line.split()[2]
        for line in exposition.splitlines()
        if line.startswith("# TYPE ") and not line.split()[2].endswith("_created")
    }
    missing += [
        f"metric {name}"
        for name in sorted(families)
        if not name.startswith(("process_", "python_")) and f"`{name}`" not in operations
    ]
    assert not missing, "operations.md does not name:\n" + "\n".join(missing)
    # And the other way: a metric row of its tables names a metric that is exported.
    rows = re.findall(r"^\| `((?:harness|grpc_server)_\w+)` \|", operations, re.MULTILINE)
    stale = [name for name in rows if name not in families]
    assert rows
    assert not stale, "operations.md lists metrics nothing exports: " + ", ".join(stale)

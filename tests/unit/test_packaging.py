"""A fresh `make install` is quiet: the three distributions build without a setuptools
warning, and pip prints nothing but errors.

The first `make serve` on a fresh clone runs `make install`; it printed about 150 lines of
setuptools deprecation warnings (`project.license` as a TOML table) before the gateway's
first line. The license is an SPDX expression string (setuptools 77 or later reads it), and
pip runs with `-qq`: setuptools' notice about editable installs and a machine's own pip
configuration warnings are not the newcomer's business, while errors still print.
"""

from __future__ import annotations

import re
import tomllib
import warnings
from pathlib import Path
from typing import Final

import pytest
from setuptools.config.pyprojecttoml import apply_configuration  # type: ignore[import-untyped]
from setuptools.dist import Distribution  # type: ignore[import-untyped]

REPOSITORY: Final = Path(__file__).resolve().parents[2]
"""The checkout."""
DISTRIBUTIONS: Final = (Path("."), Path("contract"), Path("clients/python"))
"""The directories of the three `pyproject.toml` files `make install` installs."""
LICENSE: Final = "Apache-2.0"
"""The SPDX expression every distribution declares."""


@pytest.mark.parametrize("directory", DISTRIBUTIONS, ids=str)
def test_each_distribution_declares_its_license_as_an_spdx_string(directory: Path) -> None:
    project = tomllib.loads((REPOSITORY / directory / "pyproject.toml").read_text("utf-8"))
    assert project["project"]["license"] == LICENSE
    # setuptools reads an SPDX `license` string from version 77 on.
    assert project["build-system"]["requires"] == ["setuptools>=77"]


@pytest.mark.parametrize("directory", DISTRIBUTIONS, ids=str)
def test_setuptools_reads_each_pyproject_without_a_warning(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # setuptools resolves `readme` and the package search against the working directory.
    monkeypatch.chdir(REPOSITORY / directory)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        distribution = apply_configuration(Distribution(), Path("pyproject.toml"))
    assert [str(warning.message).splitlines()[0] for warning in caught] == []
    assert distribution.metadata.license_expression == LICENSE


def test_make_install_runs_pip_quietly() -> None:
    makefile = (REPOSITORY / "Makefile").read_text("utf-8")
    installs = re.findall(r"^\t\$\(BIN\)/python -m pip install (.*)$", makefile, re.MULTILINE)
    assert len(installs) == 2, "make install upgrades pip, then installs the three"
    for flags in installs:
        assert flags.startswith("-qq "), flags

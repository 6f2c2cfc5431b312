"""`harness-gateway` quiets the gRPC C core to ERROR unless the operator chose otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gateway import cli


def test_importing_the_entry_point_does_not_import_grpc():
    # The C core reads GRPC_VERBOSITY when grpc is imported, so `main` can set it only if
    # nothing before it imported grpc.
    probe = "import sys, gateway.cli; print('grpc' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"


def without_grpc_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset both variables; setting them first makes monkeypatch restore them after."""
    for name in ("GRPC_VERBOSITY", "GRPC_TRACE"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_the_daemon_defaults_grpc_verbosity_to_error(monkeypatch: pytest.MonkeyPatch, capsys):
    without_grpc_variables(monkeypatch)
    assert cli.main(["version"]) == 0
    assert os.environ["GRPC_VERBOSITY"] == "ERROR"


@pytest.mark.parametrize(
    ("name", "value"), [("GRPC_VERBOSITY", "DEBUG"), ("GRPC_TRACE", "http_keepalive")]
)
def test_the_operator_s_grpc_verbosity_or_trace_wins(
    monkeypatch: pytest.MonkeyPatch, capsys, name: str, value: str
):
    without_grpc_variables(monkeypatch)
    monkeypatch.setenv(name, value)
    assert cli.main(["version"]) == 0
    assert os.environ.get("GRPC_VERBOSITY") == (value if name == "GRPC_VERBOSITY" else None)

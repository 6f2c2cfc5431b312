"""Token files: owner-only or refused, created 0600 once, never shown in an error."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gateway.secret_file import SecretFileError, ensure_secret, read_secret

TOKEN = "t" * 40


def _write(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    os.chmod(path, mode)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o666])
def test_a_token_file_others_can_read_or_write_is_refused_naming_the_file_and_the_fix(
    tmp_path: Path, mode: int
) -> None:
    path = _write(tmp_path / "admin-token", TOKEN, mode)
    with pytest.raises(SecretFileError) as refused:
        read_secret(path, what="admin token")
    text = str(refused.value)
    assert str(path) in text
    assert f"{mode:04o}" in text
    assert f"chmod 600 {path}" in text
    assert TOKEN not in text


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_an_owner_only_token_file_is_read_without_surrounding_whitespace(
    tmp_path: Path, mode: int
) -> None:
    path = _write(tmp_path / "peer-token", f"  {TOKEN}\n", mode)
    assert read_secret(path, what="peer token") == TOKEN


def test_the_mode_that_counts_is_the_files_behind_a_symlink(tmp_path: Path) -> None:
    # A Kubernetes Secret volume mounts each key as a symlink into a hidden directory.
    target = _write(tmp_path / "..data-token", TOKEN, 0o644)
    link = tmp_path / "peer-token"
    link.symlink_to(target)
    with pytest.raises(SecretFileError):
        read_secret(link, what="peer token")
    os.chmod(target, 0o400)
    assert read_secret(link, what="peer token") == TOKEN


@pytest.mark.parametrize("text", ["q8Zx3", "t" * 20 + " " + "t" * 20, "", "\n"])
def test_a_short_or_spaced_token_is_refused_without_showing_it(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path / "token", text, 0o600)
    with pytest.raises(SecretFileError) as refused:
        read_secret(path, what="peer token")
    assert "at least 32 characters" in str(refused.value)
    if text.strip():
        assert text.strip() not in str(refused.value)


def test_a_missing_or_undecodable_file_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(SecretFileError, match="cannot read the peer token file"):
        read_secret(tmp_path / "absent", what="peer token")
    path = tmp_path / "binary"
    path.write_bytes(b"\xff" * 40)
    os.chmod(path, 0o600)
    with pytest.raises(SecretFileError, match="not UTF-8"):
        read_secret(path, what="peer token")


def test_ensure_creates_the_file_once_owner_only_and_then_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "peer-token"
    token, created = ensure_secret(path, what="peer token", prefix="hpeer_")
    assert created
    assert token.startswith("hpeer_")
    assert len(token) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == token + "\n"
    assert ensure_secret(path, what="peer token", prefix="hpeer_") == (token, False)


def test_ensure_refuses_an_existing_file_that_others_can_read(tmp_path: Path) -> None:
    path = _write(tmp_path / "admin-token", TOKEN, 0o644)
    with pytest.raises(SecretFileError, match="readable or writable by others"):
        ensure_secret(path, what="admin token", prefix="hadm_")

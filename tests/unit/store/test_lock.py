from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gateway.store import DataDirLock, DataDirLocked, StoreError


def test_acquire_creates_the_data_directory_private_and_writes_the_pid(tmp_path: Path) -> None:
    directory = tmp_path / "state" / "harness"
    with DataDirLock.acquire(directory) as lock:
        assert lock.held
        assert lock.directory == directory
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert (directory / "LOCK").read_text() == f"{os.getpid()}\n"


def test_a_second_open_is_refused_naming_the_directory_and_the_holders_pid(
    tmp_path: Path,
) -> None:
    first = DataDirLock.acquire(tmp_path)
    try:
        with pytest.raises(DataDirLocked) as refused:
            DataDirLock.acquire(tmp_path)
        assert refused.value.directory == tmp_path
        assert refused.value.holder_pid == os.getpid()
        assert str(refused.value) == (
            f"another harness-gateway process (pid {os.getpid()}) holds the lock on "
            f"{tmp_path}: a data directory runs in one daemon at a time"
        )
        assert isinstance(refused.value, StoreError)
        # The refused attempt closed its own descriptor without touching the first lock.
        with pytest.raises(DataDirLocked):
            DataDirLock.acquire(str(tmp_path))
    finally:
        first.release()


def test_release_is_idempotent_and_lets_the_next_holder_in(tmp_path: Path) -> None:
    lock = DataDirLock.acquire(tmp_path)
    lock.release()
    lock.release()
    assert not lock.held
    with DataDirLock.acquire(tmp_path) as again:
        assert again.held
    assert not again.held


def test_an_owner_only_directory_keeps_its_mode(tmp_path: Path) -> None:
    directory = tmp_path / "data"
    directory.mkdir(mode=0o500)
    os.chmod(directory, 0o700)
    with DataDirLock.acquire(directory):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700


@pytest.mark.parametrize("loose", [0o777, 0o750, 0o705])
def test_a_directory_others_can_open_is_made_0700_with_a_warning(
    tmp_path: Path, loose: int, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "data"
    directory.mkdir()
    os.chmod(directory, loose)
    with DataDirLock.acquire(directory):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    warnings = [record for record in caplog.records if record.levelname == "WARNING"]
    assert [f"{loose:04o}" in record.getMessage() for record in warnings] == [True]


def test_a_lock_file_without_a_pid_names_no_holder(tmp_path: Path) -> None:
    first = DataDirLock.acquire(tmp_path)
    try:
        (tmp_path / "LOCK").write_text("not a pid\n")
        with pytest.raises(DataDirLocked) as refused:
            DataDirLock.acquire(tmp_path)
        assert refused.value.holder_pid is None
        assert "(pid" not in str(refused.value)
    finally:
        first.release()


def test_a_group_open_directory_of_another_user_is_refused_naming_a_directory_inside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Kubernetes volume's root: root-owned, mode 2775 by fsGroup; chmod by a non-owner fails.
    tmp_path.chmod(0o2775)

    def not_the_owner(path: object, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted", str(path))

    monkeypatch.setattr(os, "chmod", not_the_owner)
    with pytest.raises(PermissionError) as refused:
        DataDirLock.acquire(tmp_path)
    assert str(refused.value) == (
        f"data directory {tmp_path} is mode 2775 and owned by another user, so it cannot be "
        f"made owner-only; use a directory inside it, e.g. --data-dir {tmp_path / 'data'}"
    )
    assert not (tmp_path / "LOCK").exists()

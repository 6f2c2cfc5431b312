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


def test_a_second_open_in_the_same_process_is_refused_naming_the_directory(
    tmp_path: Path,
) -> None:
    first = DataDirLock.acquire(tmp_path)
    try:
        with pytest.raises(DataDirLocked) as refused:
            DataDirLock.acquire(tmp_path)
        assert refused.value.directory == tmp_path
        assert str(refused.value) == f"another harness-gateway process holds the lock on {tmp_path}"
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


def test_an_existing_directory_keeps_its_mode(tmp_path: Path) -> None:
    directory = tmp_path / "data"
    directory.mkdir(mode=0o750)
    os.chmod(directory, 0o750)
    with DataDirLock.acquire(directory):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o750

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.store import DataDirLock, DataDirLocked

PROCESS_TIMEOUT = 30.0
"""Seconds a helper process may take to start or exit before the test fails."""

HOLD_LOCK = """
import sys
from gateway.store import DataDirLock
lock = DataDirLock.acquire(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()
lock.release()
"""

TRY_LOCK = """
import sys
from gateway.store import DataDirLock, DataDirLocked
try:
    DataDirLock.acquire(sys.argv[1])
except DataDirLocked as refused:
    print(refused, flush=True)
    sys.exit(3)
"""


def start_holder(directory: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == "locked\n"
    return holder


def test_a_lock_held_by_another_process_refuses_us_until_it_exits(tmp_path: Path) -> None:
    with start_holder(tmp_path) as holder:
        with pytest.raises(DataDirLocked) as refused:
            DataDirLock.acquire(tmp_path)
        assert str(tmp_path) in str(refused.value)
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(PROCESS_TIMEOUT) == 0

    with DataDirLock.acquire(tmp_path) as lock:
        assert lock.held


def test_the_kernel_releases_the_lock_of_a_killed_process(tmp_path: Path) -> None:
    with start_holder(tmp_path) as holder:
        holder.send_signal(signal.SIGKILL)
        assert holder.wait(PROCESS_TIMEOUT) == -signal.SIGKILL

    with DataDirLock.acquire(tmp_path) as lock:
        assert lock.held


def test_another_process_is_refused_while_we_hold_the_lock_and_told_our_pid(
    tmp_path: Path,
) -> None:
    with DataDirLock.acquire(tmp_path):
        refused = subprocess.run(
            [sys.executable, "-c", TRY_LOCK, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=PROCESS_TIMEOUT,
            check=False,
        )
    assert refused.returncode == 3
    assert refused.stdout == (
        f"another harness-gateway process (pid {os.getpid()}) holds the lock on {tmp_path}: "
        "a data directory runs in one daemon at a time\n"
    )

"""Exclusive ownership of a data directory (engine.md §8, architecture.md §3 decision 5).

`DataDirLock.acquire(directory)` creates the directory if needed (mode 0700) and takes
`fcntl.flock(LOCK_EX | LOCK_NB)` on `<directory>/LOCK`, or raises `DataDirLocked` naming
the directory and the holder's pid. Callers may rely on:

- the directory is owner-only (0700) once `acquire` returns: one that others could read or
  enter (a pre-existing 0777 directory, say) is tightened, with a warning, since it holds
  agents' private keys and the admin and peer tokens;
- the lock is held until `release()` or until the process exits (the kernel drops it then,
  even on SIGKILL), so a supervisor can restart the daemon at once;
- a second holder is refused whether it is another process or another `acquire` in this
  process (`flock` locks belong to an open file description, not to a process);
- the descriptor is close-on-exec, so child processes never inherit the lock; a forked
  child without exec shares it, so the gateway does not fork;
- `LOCK` holds the holder's pid as text, for operators; it is never deleted, since
  removing a lock file while another process waits on it would let two processes in.
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from gateway.store.errors import DataDirLocked

logger = logging.getLogger(__name__)

LOCK_FILE_NAME: Final = "LOCK"
"""The lock file's name inside the data directory (engine.md §8)."""

DATA_DIR_MODE: Final = 0o700
"""Mode of a data directory we create: it holds agent keys and the admin token."""

LOCK_FILE_MODE: Final = 0o600
"""Mode of a lock file we create: only the owner needs it."""


class DataDirLock:
    """The exclusive lock on one data directory, held for the process's lifetime.

    Obtain one with `acquire()`; a sync context manager that releases on exit.
    """

    def __init__(self, directory: Path, fd: int) -> None:
        """Wrap an already locked descriptor; use `DataDirLock.acquire` instead."""
        self._directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path | str) -> DataDirLock:
        """Create `directory` if needed and lock `<directory>/LOCK`.

        Raises:
            DataDirLocked: another open file description holds the lock.
            OSError: the directory or the lock file cannot be created or opened.
        """
        path = Path(directory)
        path.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
        _make_owner_only(path)
        fd = os.open(path / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, LOCK_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_pid(fd)
            os.close(fd)
            raise DataDirLocked(path, holder) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        except OSError:
            # The pid is a courtesy to operators; the lock itself is already held.
            logger.warning("could not write the pid into the lock file of %s", path)
        logger.debug("data directory locked dir=%s", path)
        return cls(path, fd)

    @property
    def directory(self) -> Path:
        """The locked data directory."""
        return self._directory

    @property
    def held(self) -> bool:
        """True until `release()`."""
        return self._fd is not None

    def release(self) -> None:
        """Release the lock and close the descriptor; idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        logger.debug("data directory unlocked dir=%s", self._directory)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def _make_owner_only(path: Path) -> None:
    """Tighten `path` to 0700 when its group or others have any access, with a warning."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        try:
            os.chmod(path, DATA_DIR_MODE)
        except PermissionError:
            # Another user owns it: a volume's root, which the kubelet or a bind mount gives
            # root ownership and group access. The daemon's data belongs in a directory of its
            # own inside it, which it creates 0700 (the Helm chart uses <volume>/data).
            raise PermissionError(
                f"data directory {path} is mode {mode:04o} and owned by another user, so it "
                "cannot be made owner-only; use a directory inside it, e.g. "
                f"--data-dir {path / 'data'}"
            ) from None
        logger.warning(
            "data directory %s was mode %04o; made it 0700 (it holds agent keys and tokens)",
            path,
            mode,
        )


def _holder_pid(fd: int) -> int | None:
    """The pid the lock's holder wrote, or None when it is absent or not a number."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None

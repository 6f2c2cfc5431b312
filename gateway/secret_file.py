"""Token files: the admin token and the peer token (operations.md §4, docs/security.md).

Both tokens live in files, never in flags or variables, so they stay out of `ps` output,
shell history and `check-config`. Callers may rely on:

- `read_secret` refuses a file that someone other than this process may read or replace,
  by PostgreSQL's rule for its key file (`ssl_key_file`), decided by `too_open_bits`:
  - a file owned by this process's user (or by anyone but root) must have no group or
    other read or write bit (mode & 0o066): a token another local user can read is already
    disclosed, and one they can write lets them choose it;
  - a file owned by root, read by a process that is not root, may also be group-readable
    (0440, 0640), never group-writable nor open to others. That is a Kubernetes Secret
    volume with `fsGroup` set: the kubelet makes each file root-owned with the pod's group
    and adds group read, and the root-owned file is one the process itself cannot change.
  The error names the file, its mode and the fix (`chmod 600`, or `chmod 440` for the
  root-owned file); it never shows the token. Symlinks are followed (a Kubernetes Secret
  volume is a chain of them), so the mode and owner that count are the file's own;
- `ensure_secret` creates a missing file with `O_EXCL` and mode 0600 (never overwriting a
  file another process wrote meanwhile), else reads it as `read_secret` does;
- a token is at least `MIN_TOKEN_LENGTH` characters without whitespace after the file's
  surrounding whitespace is stripped.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from pathlib import Path
from typing import Final

logger = logging.getLogger(__name__)

MIN_TOKEN_LENGTH: Final = 32
"""Shortest admin or peer token accepted, in characters."""

SECRET_FILE_MODE: Final = 0o600
"""Mode of a token file this process creates."""

ROOT_UID: Final = 0
"""The superuser: a token file it owns may be group-readable to a process that is not root."""

_LOOSE_BITS: Final = stat.S_IRGRP | stat.S_IWGRP | stat.S_IROTH | stat.S_IWOTH
"""Mode bits that let someone other than the owner read or replace a token file."""

_ROOT_OWNED_LOOSE_BITS: Final = stat.S_IWGRP | stat.S_IROTH | stat.S_IWOTH
"""The loose bits of a root-owned file read by a process that is not root: its group may
read it (a Kubernetes Secret volume with `fsGroup`), no more."""


class SecretFileError(ValueError):
    """A token file is unreadable, too open, or holds no usable token. `str()` names the
    file and the problem, never the token."""


def too_open_bits(mode: int, *, file_uid: int, euid: int) -> int:
    """The bits of `mode` that make a token file too open, 0 when it is acceptable.

    `file_uid` owns the file and `euid` is the reading process's effective uid. Group
    read is allowed only when root owns the file and the process is not root; group
    write and any access by others never are; execute bits are ignored (they grant no
    read)."""
    if _group_may_read(file_uid=file_uid, euid=euid):
        return mode & _ROOT_OWNED_LOOSE_BITS
    return mode & _LOOSE_BITS


def _group_may_read(*, file_uid: int, euid: int) -> bool:
    """Whether the file's group may read it: root owns it, so this process (not root)
    cannot have chosen the mode, and the group is how it is let read the file at all."""
    return file_uid == ROOT_UID and euid != ROOT_UID


def _too_open_message(path: Path, *, what: str, mode: int, group_may_read: bool) -> str:
    """What `read_secret` says about a file `too_open_bits` refused: the file, its mode and
    the `chmod` that fixes it."""
    fix = (
        f"a root-owned token file may be readable by its group and no more: "
        f"`chmod 440 {path}` (on Kubernetes, a Secret volume's defaultMode 0440)"
        if group_may_read
        else f"make it owner-only with `chmod 600 {path}`"
    )
    return (
        f"the {what} file {path} is readable or writable by others "
        f"(mode {stat.S_IMODE(mode):04o}); {fix}, and replace the token if others may have "
        "read it"
    )


def read_secret(path: Path, *, what: str) -> str:
    """The token in `path`, after the permission and shape checks above.

    `what` names the token in errors ("admin token", "peer token")."""
    try:
        status = path.stat()
        file_uid, euid = status.st_uid, os.geteuid()
        if too_open_bits(status.st_mode, file_uid=file_uid, euid=euid):
            group_may_read = _group_may_read(file_uid=file_uid, euid=euid)
            raise SecretFileError(
                _too_open_message(
                    path, what=what, mode=status.st_mode, group_may_read=group_may_read
                )
            )
        token = path.read_text(encoding="utf-8").strip()
    except OSError as error:
        raise SecretFileError(f"cannot read the {what} file {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise SecretFileError(f"the {what} file {path} is not UTF-8 text") from None
    if len(token) < MIN_TOKEN_LENGTH or any(char.isspace() for char in token):
        raise SecretFileError(
            f"the {what} in {path} must be at least {MIN_TOKEN_LENGTH} characters without "
            "whitespace"
        )
    return token


def ensure_secret(path: Path, *, what: str, prefix: str) -> tuple[str, bool]:
    """The token in `path`, creating it (`prefix` + 32 random bytes, base64url, mode 0600)
    when missing. Returns the token and whether this call created the file."""
    token = prefix + secrets.token_urlsafe(32)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, SECRET_FILE_MODE)
    except FileExistsError:
        return read_secret(path, what=what), False
    except OSError as error:
        raise SecretFileError(f"cannot create the {what} file {path}: {error.strerror}") from None
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(token + "\n")
    logger.info("%s created path=%s", what, path)
    return token, True

"""Token files: the admin token and the peer token (operations.md §4, docs/security.md).

Both tokens live in files, never in flags or variables, so they stay out of `ps` output,
shell history and `check-config`. Callers may rely on:

- `read_secret` refuses a file that its group or others can read or write (mode & 0o066):
  a token another local user can read is already disclosed, and one they can write lets
  them choose it. The error names the file and the fix (`chmod 600`); it never shows the
  token. Symlinks are followed (a Kubernetes Secret volume is a chain of them), so the mode
  that counts is the file's own;
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

_LOOSE_BITS: Final = stat.S_IRGRP | stat.S_IWGRP | stat.S_IROTH | stat.S_IWOTH
"""Mode bits that let someone other than the owner read or replace a token file."""


class SecretFileError(ValueError):
    """A token file is unreadable, too open, or holds no usable token. `str()` names the
    file and the problem, never the token."""


def read_secret(path: Path, *, what: str) -> str:
    """The token in `path`, after the permission and shape checks above.

    `what` names the token in errors ("admin token", "peer token")."""
    try:
        mode = path.stat().st_mode
        if mode & _LOOSE_BITS:
            raise SecretFileError(
                f"the {what} file {path} is readable or writable by others "
                f"(mode {stat.S_IMODE(mode):04o}); make it owner-only with "
                f"`chmod 600 {path}`, and replace the token if others may have read it"
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

"""Who owns a token file decides how open it may be: PostgreSQL's rule for its key file.

A file of this process's user (or of anyone but root) is owner-only; a root-owned file read
by a process that is not root may also be group-readable (a Kubernetes Secret volume with
`fsGroup`: root:fsGroup, 0440), never group-writable nor open to others. The pure decision,
`too_open_bits`, is checked over every mode; `read_secret`'s use of it, with the process
made to look non-root (tests/integration/security/test_token_file_as_non_root.py reads as a
real uid 10001 when the suite runs as root)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gateway import secret_file
from gateway.secret_file import SecretFileError, read_secret, too_open_bits

TOKEN = "k" * 40

DAEMON_UID = 10001
"""The image's user (deploy/Dockerfile)."""

OTHER_UID = 10002
"""Some other local user."""

ALL_MODES = range(0o10000)
"""Every permission, set-id and sticky combination `stat.S_IMODE` can return."""


def _refused_bits(mode: int, *, group_may_read: bool) -> int:
    """The rule in words, bit by bit: others may neither read nor write; the group may never
    write, and may read only when `group_may_read`; owner, execute and special bits do not
    count."""
    refused = 0
    for bit in (stat.S_IROTH, stat.S_IWOTH, stat.S_IWGRP):
        if mode & bit:
            refused |= bit
    if mode & stat.S_IRGRP and not group_may_read:
        refused |= stat.S_IRGRP
    return refused


@pytest.mark.parametrize(
    ("file_uid", "euid", "group_may_read"),
    [
        pytest.param(DAEMON_UID, DAEMON_UID, False, id="own-file-non-root"),
        pytest.param(0, DAEMON_UID, True, id="root-owned-non-root"),
        pytest.param(0, 0, False, id="own-file-root"),
        pytest.param(OTHER_UID, DAEMON_UID, False, id="another-users-file-non-root"),
        pytest.param(DAEMON_UID, 0, False, id="another-users-file-root"),
    ],
)
def test_too_open_bits_follows_the_owner_rule_for_every_mode(
    file_uid: int, euid: int, group_may_read: bool
) -> None:
    for mode in ALL_MODES:
        expected = _refused_bits(mode, group_may_read=group_may_read)
        assert too_open_bits(mode, file_uid=file_uid, euid=euid) == expected, f"{mode:04o}"
        # The file-type bits of a real st_mode change nothing.
        full = stat.S_IFREG | mode
        assert too_open_bits(full, file_uid=file_uid, euid=euid) == expected, f"{mode:04o}"


@pytest.mark.parametrize("mode", [0o440, 0o640, 0o400, 0o600, 0o450, 0o550])
def test_a_root_owned_secret_volume_mode_is_accepted_for_a_non_root_process(mode: int) -> None:
    assert too_open_bits(mode, file_uid=0, euid=DAEMON_UID) == 0


@pytest.mark.parametrize("mode", [0o440, 0o640])
def test_the_same_group_readable_mode_is_refused_on_a_file_the_process_owns(mode: int) -> None:
    # The process could have chmod-ed its own file owner-only; root's file it cannot.
    assert too_open_bits(mode, file_uid=DAEMON_UID, euid=DAEMON_UID) == stat.S_IRGRP
    assert too_open_bits(mode, file_uid=0, euid=0) == stat.S_IRGRP


@pytest.fixture
def as_non_root_reading_root_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `read_secret` see this test's files as root-owned and itself as not root,
    whoever runs the suite: the files' owner plays root, and the process another uid."""
    owner = os.geteuid()
    monkeypatch.setattr(secret_file, "ROOT_UID", owner)
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)


def _write(path: Path, mode: int) -> Path:
    path.write_text(TOKEN + "\n")
    os.chmod(path, mode)
    return path


@pytest.mark.usefixtures("as_non_root_reading_root_files")
@pytest.mark.parametrize("mode", [0o440, 0o640])
def test_read_secret_reads_a_group_readable_root_owned_file(tmp_path: Path, mode: int) -> None:
    assert read_secret(_write(tmp_path / "peer-token", mode), what="peer token") == TOKEN


@pytest.mark.usefixtures("as_non_root_reading_root_files")
@pytest.mark.parametrize("mode", [0o444, 0o460, 0o442, 0o604])
def test_read_secret_refuses_a_root_owned_file_others_can_read_or_its_group_can_write(
    tmp_path: Path, mode: int
) -> None:
    path = _write(tmp_path / "admin-token", mode)
    with pytest.raises(SecretFileError) as refused:
        read_secret(path, what="admin token")
    text = str(refused.value)
    assert f"the admin token file {path} is readable or writable by others" in text
    assert f"(mode {mode:04o})" in text
    assert f"`chmod 440 {path}`" in text
    assert "defaultMode 0440" in text
    assert TOKEN not in text


def test_read_secret_offers_chmod_600_for_a_file_the_process_owns(tmp_path: Path) -> None:
    path = _write(tmp_path / "admin-token", 0o440)
    with pytest.raises(SecretFileError) as refused:
        read_secret(path, what="admin token")
    assert f"`chmod 600 {path}`" in str(refused.value)
    assert "chmod 440" not in str(refused.value)

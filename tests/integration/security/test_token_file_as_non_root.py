"""A token file mounted from a Kubernetes Secret, read as the image's user.

With `fsGroup: 10001` the kubelet makes each Secret file root-owned, of group 10001, mode
0440; the daemon runs as uid/gid 10001 (deploy/Dockerfile). A child process that really
is 10001 reads such a file through `read_secret`, and refuses one that others can read or
its group can write. It needs root to make root-owned files and to become 10001, so it is
skipped otherwise (CI runs as root)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

DAEMON_UID: Final = 10001
DAEMON_GID: Final = 10001
"""The image's user and group (deploy/Dockerfile; the chart's runAsUser and fsGroup)."""

CHILD_TIMEOUT: Final = 30.0
"""Seconds the child may take to import the module and read a few files."""

TOKEN: Final = "hpeer_" + "s" * 43

# The child imports `gateway.secret_file` as root and only then becomes 10001 (groups
# dropped first, then the gid, then the uid): the interpreter and the checkout may sit where
# 10001 cannot read (/root is 0700), while every check of `read_secret` runs as 10001.
CHILD: Final = """
import json, os, sys
from pathlib import Path
from gateway.secret_file import SecretFileError, read_secret
uid, gid = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
results = {}
for name in sys.argv[3:]:
    try:
        results[name] = {"token": read_secret(Path(name), what="peer token")}
    except SecretFileError as error:
        results[name] = {"error": str(error)}
print(json.dumps({"ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()],
                  "results": results}))
"""

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: to make root-owned files and to become uid 10001"
)


@pytest.fixture
def secret_volume() -> Iterator[Path]:
    """A directory 10001 may traverse (not list), like a Secret volume's mount point; the
    test's own tmp_path sits under a 0700 directory of root."""
    directory = Path(tempfile.mkdtemp(prefix="harness-secret-"))
    try:
        os.chmod(directory, 0o711)
        yield directory
    finally:
        shutil.rmtree(directory)


def _secret_file(directory: Path, name: str, mode: int) -> Path:
    path = directory / name
    path.write_text(TOKEN + "\n")
    os.chown(path, 0, DAEMON_GID)
    os.chmod(path, mode)
    return path


def _read_as_daemon_user(*paths: Path) -> dict[str, dict[str, str]]:
    """What `read_secret` said about each path in a process running as 10001:10001."""
    completed = subprocess.run(
        [sys.executable, "-c", CHILD, str(DAEMON_UID), str(DAEMON_GID), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert completed.returncode == 0, completed.stderr
    answer = json.loads(completed.stdout)
    assert answer["ids"] == [DAEMON_UID, DAEMON_UID, DAEMON_GID, DAEMON_GID, []]
    results: dict[str, dict[str, str]] = answer["results"]
    return results


def test_the_daemon_user_reads_a_root_owned_group_readable_secret_and_refuses_open_ones(
    secret_volume: Path,
) -> None:
    kubelet = _secret_file(secret_volume, "peer-token", 0o440)
    group_read_write = _secret_file(secret_volume, "group-read-write", 0o640)
    world_readable = _secret_file(secret_volume, "world-readable", 0o444)
    group_writable = _secret_file(secret_volume, "group-writable", 0o460)
    owner_only = _secret_file(secret_volume, "owner-only", 0o400)

    results = _read_as_daemon_user(
        kubelet, group_read_write, world_readable, group_writable, owner_only
    )

    assert results[str(kubelet)] == {"token": TOKEN}
    assert results[str(group_read_write)] == {"token": TOKEN}
    for refused, mode in ((world_readable, "0444"), (group_writable, "0460")):
        text = results[str(refused)]["error"]
        assert f"the peer token file {refused} is readable or writable by others" in text
        assert f"(mode {mode})" in text
        assert f"`chmod 440 {refused}`" in text
        assert TOKEN not in text
    # Root's own 0400 file passes the mode rule, and the kernel still keeps 10001 out.
    assert results[str(owner_only)] == {
        "error": f"cannot read the peer token file {owner_only}: Permission denied"
    }

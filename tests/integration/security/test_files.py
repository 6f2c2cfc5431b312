"""Files of a daemon: an owner-only data directory, token files nobody else can read, and
a lock error that names who holds the directory."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.secret_file import SecretFileError
from gateway.settings import Settings
from gateway.store import DataDirLocked
from gateway.testing import run_gateway


def _settings(data_dir: Path, **changes: Any) -> Settings:
    return replace(
        Settings(), listen="127.0.0.1:0", metrics_listen=None, data_dir=data_dir, **changes
    )


async def test_a_world_open_data_directory_is_made_owner_only_at_start(tmp_path, caplog):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    os.chmod(data_dir, 0o777)
    async with run_gateway(data_dir=data_dir) as gateway:
        await gateway.register("alice")
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert any("was mode 0777; made it 0700" in record.getMessage() for record in caplog.records)


async def test_a_world_readable_admin_token_file_refuses_to_start_naming_it(tmp_path):
    token_file = tmp_path / "admin-token"
    token_file.write_text("hadm_" + "a" * 43 + "\n")
    os.chmod(token_file, 0o644)
    with pytest.raises(SecretFileError, match=f"admin token file {token_file} is readable"):
        await Gateway.start(_settings(tmp_path / "data", admin_token_file=token_file))
    os.chmod(token_file, 0o600)
    gateway = await Gateway.start(_settings(tmp_path / "data", admin_token_file=token_file))
    await gateway.shutdown(skip_waits=True)


async def test_the_generated_admin_token_is_refused_once_others_can_read_it(tmp_path):
    data_dir = tmp_path / "data"
    async with run_gateway(data_dir=data_dir):
        pass
    os.chmod(data_dir / "admin-token", 0o640)
    with pytest.raises(SecretFileError, match="chmod 600"):
        await Gateway.start(_settings(data_dir))


async def test_a_group_readable_peer_token_file_refuses_to_start(tmp_path):
    token_file = tmp_path / "peer-token"
    token_file.write_text("hpeer_" + "p" * 43 + "\n")
    os.chmod(token_file, 0o640)
    with pytest.raises(SecretFileError, match="peer token file"):
        await Gateway.start(
            _settings(tmp_path / "data", expose_network=True, peer_token_file=token_file)
        )


async def test_a_second_daemon_on_the_same_directory_is_told_the_holders_pid(tmp_path):
    async with run_gateway(data_dir=tmp_path / "data"):
        with pytest.raises(DataDirLocked) as refused:
            await Gateway.start(_settings(tmp_path / "data"))
    assert f"(pid {os.getpid()})" in str(refused.value)

"""`harness-gateway migrate` on real stores: SQLite files under a data directory and
PostgreSQL databases, for a daemon's store and a Registry's cards (engine.md §8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.store import DataDirLock
from gateway.store.postgres import SCHEMA_VERSION as PG_SCHEMA_VERSION
from gateway.store.sqlite_store import SCHEMA, STORE_FILE
from tests.integration.store.postgres_support import database_sql
from tests.servers import PostgresServer


def migrate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, object], str]:
    code = main(["migrate", *args])
    out, err = capsys.readouterr()
    report = json.loads(out) if out.strip() else {}
    return code, report, err


def test_a_postgresql_store_is_created_then_current_and_check_changes_nothing(
    postgres_server: PostgresServer, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = postgres_server.create_database()
    code, report, _ = migrate(capsys, "--store", dsn, "--check")
    assert (code, report["state"], report["found"]) == (1, "empty", None)
    assert (
        database_sql(
            postgres_server, dsn, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ).strip()
        == "0"
    )
    code, report, _ = migrate(capsys, "--store", dsn)
    assert (code, report["state"], report["component"], report["backend"]) == (
        0,
        "created",
        "store",
        "postgresql",
    )
    for extra in ((), ("--check",)):
        code, report, _ = migrate(capsys, "--store", dsn, *extra)
        assert (code, report["state"], report["found"], report["now"]) == (
            0,
            "current",
            PG_SCHEMA_VERSION,
            PG_SCHEMA_VERSION,
        )


def test_the_registrys_tables_migrate_beside_the_stores_in_one_database(
    postgres_server: PostgresServer, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = postgres_server.create_database()
    assert migrate(capsys, "--store", dsn)[0] == 0
    code, report, _ = migrate(capsys, "--store", dsn, "--registry", "--check")
    assert (code, report["component"], report["state"]) == (1, "registry", "empty")
    code, report, _ = migrate(capsys, "--store", dsn, "--registry")
    assert (code, report["state"]) == (0, "created")
    code, report, _ = migrate(capsys, "--store", dsn, "--registry", "--check")
    assert (code, report["state"]) == (0, "current")
    # The store is still current beside the Registry's tables.
    assert migrate(capsys, "--store", dsn, "--check")[1]["state"] == "current"


def test_a_newer_postgresql_schema_is_refused_and_left_untouched(
    postgres_server: PostgresServer, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = postgres_server.create_database()
    assert migrate(capsys, "--store", dsn)[0] == 0
    database_sql(
        postgres_server, dsn, "UPDATE harness_meta SET value = '999' WHERE key = 'schema_version'"
    )
    for extra in ((), ("--check",)):
        code, report, err = migrate(capsys, "--store", dsn, *extra)
        assert (code, report) == (1, {})
        assert "999" in err
    stored = "SELECT value FROM harness_meta WHERE key = 'schema_version'"
    assert database_sql(postgres_server, dsn, stored).strip() == "999"


def test_an_unreachable_server_fails_with_the_password_redacted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, report, err = migrate(
        capsys, "--store", "postgresql://someone:hunter2@127.0.0.1:1/db?connect_timeout=2"
    )
    assert (code, report) == (1, {})
    assert "hunter2" not in err
    assert "cannot connect" in err


def test_a_sqlite_store_is_created_then_current(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    code, report, _ = migrate(capsys, "--data-dir", str(data_dir), "--check")
    assert (code, report["state"], report["backend"]) == (1, "empty", "sqlite")
    assert not (data_dir / STORE_FILE).exists()
    code, report, _ = migrate(capsys, "--data-dir", str(data_dir))
    assert (code, report["state"], report["now"]) == (0, "created", SCHEMA.version)
    assert (data_dir / STORE_FILE).stat().st_mode & 0o077 == 0
    code, report, _ = migrate(capsys, "--data-dir", str(data_dir), "--check")
    assert (code, report["state"]) == (0, "current")


def test_a_sqlite_store_of_a_running_daemon_is_not_migrated_beneath_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    lock = DataDirLock.acquire(data_dir)
    try:
        code, report, err = migrate(capsys, "--data-dir", str(data_dir))
    finally:
        lock.release()
    assert (code, report) == (1, {})
    assert str(data_dir) in err
    assert not (data_dir / STORE_FILE).exists()

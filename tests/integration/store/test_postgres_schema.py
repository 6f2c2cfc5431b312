"""Schema versions of the PostgreSQL store, checked at every open (engine.md §8
Rehydration: unknown → fail closed, untouched) and applied by `harness-gateway migrate`;
DSN hygiene; and `migrate_sqlite`, the SQLite store's entry point for the same command."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.store import tables as sqlite_tables
from gateway.store.errors import (
    DatabaseSchemaMismatch,
    SchemaVersionMismatch,
    StoreDsnInvalid,
    StoreUnavailable,
)
from gateway.store.migrate import migrate_sqlite
from gateway.store.postgres import (
    SCHEMA_VERSION,
    PostgresStore,
    SchemaState,
    migrate,
    redact_dsn,
    schema_status,
)
from gateway.store.postgres import schema as pg_schema
from gateway.store.records import BindSend, PutSend, SendRow
from gateway.store.sqlite_store import SqliteStore
from tests.integration.store.postgres_support import (
    as_version_2,
    database_sql,
    identity,
    opened,
)
from tests.integration.store.support import as_version_1
from tests.servers import PostgresServer

A = "agt_AAAAAAAAAAAAAAAAAAAAAA"


def tables_of(server: PostgresServer, dsn: str) -> list[str]:
    out = database_sql(
        server, dsn, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
    )
    return out.split()


async def test_an_empty_database_gets_the_schema_at_first_open(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    assert (await schema_status(dsn)).state is SchemaState.EMPTY
    async with opened(dsn) as store:
        await store.apply([identity(A, "alice")])
    status = await schema_status(dsn)
    assert status.state is SchemaState.CURRENT
    assert status.found == SCHEMA_VERSION
    meta = database_sql(postgres_server, dsn, "SELECT key || '=' || value FROM harness_meta")
    assert sorted(meta.split()) == [
        "protocol_version=harness/1",
        f"schema_version={SCHEMA_VERSION}",
    ]


async def test_a_newer_schema_version_is_refused_and_left_untouched(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    await migrate(dsn)
    database_sql(
        postgres_server, dsn, "UPDATE harness_meta SET value = '999' WHERE key = 'schema_version'"
    )
    with pytest.raises(DatabaseSchemaMismatch, match="schema_version 999") as refused:
        await PostgresStore.open(dsn, owner="daemon-a")
    assert isinstance(refused.value, SchemaVersionMismatch)
    assert "newer harness-gateway" in str(refused.value)
    assert database_sql(postgres_server, dsn, "SELECT count(*) FROM leases").strip() == "0"
    assert (await schema_status(dsn)).state is SchemaState.REFUSED
    with pytest.raises(DatabaseSchemaMismatch):
        await migrate(dsn)


async def test_a_foreign_table_of_one_of_our_names_without_harness_meta_is_refused_and_left_untouched(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    database_sql(postgres_server, dsn, "CREATE TABLE identities (id int)")
    with pytest.raises(DatabaseSchemaMismatch, match="no schema_version") as refused:
        await PostgresStore.open(dsn, owner="daemon-a")
    assert "not a harness-gateway store" in str(refused.value)
    assert tables_of(postgres_server, dsn) == ["identities"]
    with pytest.raises(DatabaseSchemaMismatch):
        await migrate(dsn)
    assert tables_of(postgres_server, dsn) == ["identities"]


async def test_the_registrys_tables_and_others_may_share_the_database(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    database_sql(postgres_server, dsn, "CREATE TABLE registry_cards (id int)")
    database_sql(postgres_server, dsn, "CREATE TABLE invoices (id int)")
    store = await PostgresStore.open(dsn, owner="daemon-a")
    await store.close()
    assert {"registry_cards", "invoices", "identities"} <= set(tables_of(postgres_server, dsn))


async def test_an_older_schema_is_refused_naming_the_migrate_command_which_then_brings_it_here(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A made-up step from the version before stands for the step every version ships (the
    # real 1 → 2 is tested below).
    step = pg_schema.Migration(
        from_version=SCHEMA_VERSION - 1,
        statements=("CREATE TABLE migrated_marker (done BOOLEAN)",),
    )
    monkeypatch.setattr(pg_schema, "MIGRATIONS", (step,))
    dsn = postgres_server.create_database()
    await migrate(dsn)
    database_sql(
        postgres_server,
        dsn,
        f"UPDATE harness_meta SET value = '{SCHEMA_VERSION - 1}' WHERE key = 'schema_version'",
    )
    secret = dsn.replace("postgres@", "postgres:hunter2@")
    with pytest.raises(DatabaseSchemaMismatch) as refused:
        await PostgresStore.open(secret, owner="daemon-a")
    message = str(refused.value)
    assert f"run `harness-gateway migrate --store {dsn}`" in message
    assert "hunter2" not in message
    assert (await schema_status(dsn)).state is SchemaState.OLDER
    assert await migrate(dsn) == (SCHEMA_VERSION - 1, SCHEMA_VERSION)
    assert "migrated_marker" in tables_of(postgres_server, dsn)
    async with opened(dsn) as store:
        assert await store.identities() == []


async def test_a_version_1_database_is_migrated_to_2_and_its_send_rows_stay_not_resumable(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    await migrate(dsn)
    async with opened(dsn) as store:
        await store.apply(
            [
                identity(A, "alice"),
                PutSend(agent_id=A, key="cut", request=b"{}", run_id="run-0", outcome=None),
            ]
        )
    # Version 1's `sends` (engine.md §8.5): no `bound`, no `resumable`.
    as_version_2(postgres_server, dsn)
    for statement in (
        "ALTER TABLE sends DROP COLUMN bound",
        "ALTER TABLE sends DROP COLUMN resumable",
        "UPDATE harness_meta SET value = '1' WHERE key = 'schema_version'",
    ):
        database_sql(postgres_server, dsn, statement)
    with pytest.raises(DatabaseSchemaMismatch):
        await PostgresStore.open(dsn, owner="daemon-a")

    assert await migrate(dsn) == (1, SCHEMA_VERSION)

    async with opened(dsn) as store:
        # A row version 1 reserved recorded no binding: it can never be resumed (§9.1).
        assert await store.send_row(A, "cut") == SendRow(
            key="cut", request=b"{}", run_id="run-0", outcome=None, bound=None, resumable=False
        )
        await store.apply(
            [
                PutSend(
                    agent_id=A,
                    key="new",
                    request=b"{}",
                    run_id="run-1",
                    outcome=None,
                    resumable=True,
                ),
                BindSend(agent_id=A, key="new", bound=b"{}"),
            ]
        )
        new = await store.send_row(A, "new")
        assert new is not None
        assert (new.bound, new.resumable) == (b"{}", True)


async def test_migrate_creates_an_empty_database_and_is_idempotent(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    assert await migrate(dsn) == (None, SCHEMA_VERSION)
    assert await migrate(dsn) == (SCHEMA_VERSION, SCHEMA_VERSION)
    assert (await schema_status(dsn)).state is SchemaState.CURRENT


async def test_two_owners_opening_a_fresh_database_at_once_both_succeed(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    first, second = await asyncio.gather(
        PostgresStore.open(dsn, owner="daemon-a"), PostgresStore.open(dsn, owner="daemon-b")
    )
    try:
        await first.apply([identity(A, "alice")])
        assert await second.identities() == []
    finally:
        await first.close()
        await second.close()


async def test_concurrent_migrate_commands_serialise(postgres_server: PostgresServer) -> None:
    dsn = postgres_server.create_database()
    results = await asyncio.gather(*(migrate(dsn) for _ in range(3)))
    assert sorted(results, key=str) == sorted(
        [
            (None, SCHEMA_VERSION),
            (SCHEMA_VERSION, SCHEMA_VERSION),
            (SCHEMA_VERSION, SCHEMA_VERSION),
        ],
        key=str,
    )


# --- DSN hygiene -------------------------------------------------------------------------


def test_redact_dsn_drops_the_password_of_every_form() -> None:
    assert redact_dsn("postgresql://u:s3cret@db:5432/harness") == "postgresql://u@db:5432/harness"
    assert redact_dsn("postgres://:s3cret@db/harness") == "postgres://db/harness"
    assert (
        redact_dsn("postgresql://u@h1,h2/x?sslmode=require&password=s3cret")
        == "postgresql://u@h1,h2/x?sslmode=require"
    )
    assert redact_dsn("host=db password=s3cret dbname=x") == "host=db dbname=x"
    assert redact_dsn("host=db password='s3 cret' dbname=x") == "host=db dbname=x"
    assert redact_dsn("postgresql://u@db/x") == "postgresql://u@db/x"


async def test_an_invalid_dsn_is_a_typed_error_that_never_shows_the_password() -> None:
    for dsn in ("postgresql://u:p%zzs3cret@db/x", "host=db password=s3cret junk", "  "):
        with pytest.raises(StoreDsnInvalid) as refused:
            await PostgresStore.open(dsn, owner="daemon-a")
        assert "s3cret" not in str(refused.value)
        assert isinstance(refused.value, ValueError)


async def test_an_unreachable_server_is_store_unavailable_without_the_password(
    postgres_server: PostgresServer,
) -> None:
    dsn = f"postgresql://postgres:s3cret@127.0.0.1:{postgres_server.port + 1}/nowhere"
    with pytest.raises(StoreUnavailable) as refused:
        await PostgresStore.open(dsn, owner="daemon-a", connect_timeout=2)
    assert "s3cret" not in str(refused.value)
    assert "postgresql://postgres@127.0.0.1" in str(refused.value)


# --- SQLite --------------------------------------------------------------------------------


async def test_migrate_sqlite_creates_a_new_file_and_reports_no_previous_version(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gateway.sqlite3"
    assert await migrate_sqlite(path) == (None, sqlite_tables.SCHEMA_VERSION)
    assert path.stat().st_mode & 0o777 == 0o600
    assert await migrate_sqlite(path) == (sqlite_tables.SCHEMA_VERSION,) * 2
    store = await SqliteStore.open(path)
    await store.close()


async def test_migrate_sqlite_brings_a_version_1_file_to_this_version(tmp_path: Path) -> None:
    path = tmp_path / "gateway.sqlite3"
    await migrate_sqlite(path)
    as_version_1(path)
    assert await migrate_sqlite(path) == (1, sqlite_tables.SCHEMA_VERSION)
    with sqlite3.connect(path) as db:
        (version,) = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == sqlite_tables.SCHEMA_VERSION


async def test_migrate_sqlite_refuses_an_unknown_version_and_leaves_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gateway.sqlite3"
    await migrate_sqlite(path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = 999 WHERE key = 'schema_version'")
    with pytest.raises(SchemaVersionMismatch):
        await migrate_sqlite(path)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            999,
        )


def test_the_store_package_and_the_sqlite_migration_do_not_load_psycopg() -> None:
    # Embedded daemons import gateway.store only; the PostgreSQL backend is opt-in.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, gateway.store, gateway.store.migrate; sys.exit('psycopg' in sys.modules)",
        ],
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()

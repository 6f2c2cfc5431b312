"""Schema version 3 of the PostgreSQL store and a cluster's set-up (cluster.md §3.6, §12.1;
engine.md §8.5): the migration from 2 and a fresh schema agree, `setup_cluster` makes an
empty database a cluster's once, and each mode refuses the other's database."""

from __future__ import annotations

import asyncio

import pytest

from gateway.store.errors import ClusterModeMismatch, DatabaseSchemaMismatch
from gateway.store.postgres import SCHEMA_VERSION, PostgresStore, migrate
from gateway.store.postgres.schema import (
    CLUSTER_OWNER,
    ClusterMeta,
    setup_cluster,
)
from tests.integration.store.postgres_support import (
    as_version_2,
    database_sql,
    identity,
    opened,
)
from tests.servers import PostgresServer

A = "agt_AAAAAAAAAAAAAAAAAAAAAA"

CATALOG = (
    "SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' "
    "|| is_nullable || ' ' || coalesce(column_default, '-') "
    "FROM information_schema.columns WHERE table_schema = 'public' "
    "UNION ALL SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public' "
    "UNION ALL SELECT 'sequence ' || sequencename FROM pg_sequences "
    "WHERE schemaname = 'public' "
    "UNION ALL SELECT 'constraint ' || conrelid::regclass || ' ' || pg_get_constraintdef(oid) "
    "FROM pg_constraint WHERE connamespace = 'public'::regnamespace "
    "ORDER BY 1"
)


def catalog(server: PostgresServer, dsn: str) -> list[str]:
    return database_sql(server, dsn, CATALOG).splitlines()


def meta(server: PostgresServer, dsn: str) -> dict[str, str]:
    out = database_sql(server, dsn, "SELECT key || '=' || value FROM harness_meta")
    return dict(line.split("=", 1) for line in out.split())


async def test_a_version_2_database_migrated_to_3_has_exactly_the_fresh_schema(
    postgres_server: PostgresServer,
) -> None:
    fresh = postgres_server.create_database()
    await migrate(fresh)
    old = postgres_server.create_database()
    await migrate(old)
    async with opened(old) as store:
        await store.apply([identity(A, "alice")])
    as_version_2(postgres_server, old)
    assert catalog(postgres_server, old) != catalog(postgres_server, fresh)

    assert await migrate(old) == (2, SCHEMA_VERSION)

    assert SCHEMA_VERSION == 3
    assert catalog(postgres_server, old) == catalog(postgres_server, fresh)
    # A network-mode row keeps NULL partition columns: no partial index holds it.
    assert database_sql(
        postgres_server, old, "SELECT coalesce(home_partition::text, 'null') FROM identities"
    ).split() == ["null"]
    async with opened(old) as store:
        assert [row.agent_id for row in await store.identities()] == [A]


async def test_setting_up_an_empty_database_makes_it_a_cluster_once(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    made = await setup_cluster(dsn, partitions=8, key_check="check-1")
    assert made.partitions == 8
    assert made.key_check == "check-1"
    stored = meta(postgres_server, dsn)
    assert stored["mode"] == "cluster"
    assert stored["partitions"] == "8"
    assert stored["seed_key_check"] == "check-1"
    assert stored["schema_version"] == str(SCHEMA_VERSION)
    assert database_sql(
        postgres_server,
        dsn,
        f"SELECT value FROM owner_meta WHERE owner = '{CLUSTER_OWNER}' "
        "AND key = 'local_instance_id'",
    ).split() == [made.local_instance_id]
    assert database_sql(
        postgres_server, dsn, "SELECT count(*), min(partition), max(partition) FROM partitions"
    ).strip().split("|") == ["8", "0", "7"]

    # Set up again, with another P and key check: the stored cluster, unchanged.
    again = await setup_cluster(dsn, partitions=1024, key_check="check-2")
    assert again == made
    assert meta(postgres_server, dsn) == stored


async def test_two_set_ups_at_once_make_one_cluster(postgres_server: PostgresServer) -> None:
    dsn = postgres_server.create_database()
    first, second = await asyncio.gather(
        setup_cluster(dsn, partitions=4, key_check="k"),
        setup_cluster(dsn, partitions=4, key_check="k"),
    )
    assert first == second
    assert isinstance(first, ClusterMeta)


async def test_a_migrated_database_no_daemon_used_may_become_a_cluster(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    await migrate(dsn)
    made = await setup_cluster(dsn, partitions=2, key_check="k")
    assert made.partitions == 2


async def test_a_network_mode_database_is_refused_by_set_up_and_left_untouched(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    async with opened(dsn) as store:
        await store.apply([identity(A, "alice")])
    before = meta(postgres_server, dsn)
    with pytest.raises(
        ClusterModeMismatch, match="run `harness-gateway migrate --cluster` to move it"
    ):
        await setup_cluster(dsn, partitions=8, key_check="k")
    assert meta(postgres_server, dsn) == before
    assert database_sql(postgres_server, dsn, "SELECT count(*) FROM partitions").strip() == "0"


async def test_an_older_schema_is_refused_by_set_up_naming_the_migrate_command(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    await migrate(dsn)
    as_version_2(postgres_server, dsn)
    secret = dsn.replace("postgres@", "postgres:hunter2@")
    with pytest.raises(ClusterModeMismatch) as refused:
        await setup_cluster(secret, partitions=8, key_check="k")
    assert f"harness-gateway migrate --store {dsn}" in str(refused.value)
    assert "hunter2" not in str(refused.value)
    assert meta(postgres_server, dsn)["schema_version"] == "2"


async def test_a_newer_schema_is_refused_by_set_up(postgres_server: PostgresServer) -> None:
    dsn = postgres_server.create_database()
    await migrate(dsn)
    database_sql(
        postgres_server, dsn, "UPDATE harness_meta SET value = '999' WHERE key = 'schema_version'"
    )
    with pytest.raises(DatabaseSchemaMismatch):
        await setup_cluster(dsn, partitions=8, key_check="k")
    assert "mode" not in meta(postgres_server, dsn)


async def test_a_network_daemon_refuses_a_clusters_database_naming_the_cluster_flag(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    await setup_cluster(dsn, partitions=8, key_check="k")
    with pytest.raises(ClusterModeMismatch, match="--cluster"):
        await PostgresStore.open(dsn, owner="daemon-a")
    assert database_sql(postgres_server, dsn, "SELECT count(*) FROM leases").strip() == "0"


async def test_set_up_refuses_a_partition_count_out_of_range(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.create_database()
    with pytest.raises(ValueError, match="partitions"):
        await setup_cluster(dsn, partitions=0, key_check="k")

"""The test servers themselves: each starts, answers, and comes back after a stop."""

from __future__ import annotations

import nats
import psycopg
import pytest

from tests.servers import NatsCluster, PostgresServer


async def test_postgres_gives_each_test_a_database_and_survives_a_restart(
    postgres_server: PostgresServer,
):
    dsn = postgres_server.create_database()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("CREATE TABLE t (x int)")
        await conn.execute("INSERT INTO t VALUES (1)")
    postgres_server.stop()
    with pytest.raises(psycopg.OperationalError):
        await psycopg.AsyncConnection.connect(dsn, connect_timeout=2)
    postgres_server.start_again()
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cursor = await conn.execute("SELECT x FROM t")
        assert await cursor.fetchall() == [(1,)]


async def test_a_nats_node_has_jetstream(nats_server: NatsCluster):
    client = await nats.connect(nats_server.urls)
    try:
        info = await client.jetstream().account_info()
        assert info.limits is not None
    finally:
        await client.close()


async def test_a_three_node_cluster_replicates_a_stream(nats_cluster: NatsCluster):
    client = await nats.connect(nats_cluster.urls)
    try:
        js = client.jetstream()
        await js.add_stream(name="servers_probe", subjects=["servers.probe"], num_replicas=3)
        ack = await js.publish("servers.probe", b"x")
        assert ack.seq == 1
        info = await js.stream_info("servers_probe")
        assert info.cluster is not None
        assert len(info.cluster.replicas or []) == 2
        await js.delete_stream("servers_probe")
    finally:
        await client.close()

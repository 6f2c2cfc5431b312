"""A send admitted before its partition's hand-over whose unit reaches the writer after the
release unit (cluster.md §3.2): the store seam refuses the unit, nothing of it is written, and
the call answers UNAVAILABLE `NOT_OWNER` (retried at the new home), never INTERNAL.

One real in-process replica on a real PostgreSQL; the send is held inside its bind's read of
the members' identity rows by a table lock the test takes, while the replica shuts down and
hands every partition over (§9.3)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import harness_client
import psycopg
import pytest
from harness_contract import wire
from harness_contract._gen.harness.v1 import endpoint_pb2, endpoint_pb2_grpc
from harness_contract.errors import UnavailableError, UnavailableReason
from harness_contract.values import MessageInput

from gateway.testing_cluster import ClusterFiles, random_name, run_replicas
from tests.servers import PostgresServer
from tests.support import eventually

BOUND = 30.0
"""Seconds a step may take: claims wait one lease TTL of fresh beats first."""


@contextlib.asynccontextmanager
async def endpoint(address: str) -> AsyncIterator[endpoint_pb2_grpc.HarnessEndpointServiceStub]:
    """A plain stub: the status the replica answers, with no client retrying it."""
    channel = grpc.aio.insecure_channel(address)
    try:
        yield endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
    finally:
        await channel.close()


def send(to: str, text: str) -> endpoint_pb2.SendRequest:
    return endpoint_pb2.SendRequest(input=wire.send_input_to_proto(MessageInput(to=to, text=text)))


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def blocked_on_identities(dsn: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        cursor = await connection.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'identities'::regclass"
        )
        row = await cursor.fetchone()
        return 0 if row is None else int(row[0])


async def test_a_send_whose_unit_follows_its_partitions_release_answers_not_owner(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    files = ClusterFiles.create(tmp_path / "cluster")
    dsn = postgres_server.create_database("cluster")
    async with run_replicas(files, dsn, 1) as [replica]:
        cluster = replica.components.cluster
        assert cluster is not None
        partitions = cluster.meta.partitions

        async def owned() -> int:
            return len(cluster.membership.owned())

        await eventually(owned, lambda held: held == partitions, within=BOUND)
        alice, bob, carol = (random_name(name) for name in ("alice", "bob", "carol"))
        registered = await replica.components.agents.register(alice)
        token = registered.token
        await replica.components.agents.register(bob)
        await replica.components.agents.register(carol)
        async with endpoint(replica.address) as stub:
            # Alice's token and key are remembered now; carol's key is read at her first bind.
            await asyncio.wait_for(
                stub.Send(send(f"agent:{bob}", "before"), metadata=bearer(token)),  # type: ignore[arg-type]
                BOUND,
            )
            async with await psycopg.AsyncConnection.connect(dsn) as locker:
                await locker.execute("LOCK TABLE identities IN ACCESS EXCLUSIVE MODE")
                call = stub.Send(
                    send(f"agent:{carol}", "during the hand-over"), metadata=bearer(token)
                )
                sent = asyncio.ensure_future(call)  # type: ignore[call-overload]
                await eventually(lambda: blocked_on_identities(dsn), bool, within=BOUND)
                stopping = asyncio.ensure_future(replica.shutdown())
                await eventually(owned, lambda held: held == 0, within=BOUND)
                await locker.rollback()
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await asyncio.wait_for(sent, BOUND)
            await asyncio.wait_for(stopping, BOUND)
        failure = harness_client.decode_status(raised.value)
        assert isinstance(failure, UnavailableError), failure
        assert failure.reason == UnavailableReason.NOT_OWNER
        # Nothing of the refused bind was written: alice's only intent is the first send's.
        async with await psycopg.AsyncConnection.connect(dsn) as reader:
            cursor = await reader.execute(
                "SELECT count(*) FROM post_intents WHERE agent_id = %s", (registered.agent_id,)
            )
            assert await cursor.fetchone() == (1,)

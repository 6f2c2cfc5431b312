"""The sequencer's backstops and set-aside as rows, with real replicas on one PostgreSQL
(cluster.md §5.2, §5.4).

Two in-process replicas, agents homed one on each, the author on the replica that does not
sequence their conversation (so its posts are handed off and certified by the other): a head
moved under the sequencer makes its unit stale and the conversation is rebuilt from rows; a
conversation the sequencer sets aside is so in every member's row, its open intents are
refused, binds to it are refused, and it stays set aside at the replica that takes its
sequencing partition over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import harness_client
import pytest
from harness_client import MessageInput
from harness_contract.errors import SendError, SendErrorReason
from harness_contract.ids import RandomId, agent_id_order_key

from gateway.app import Gateway
from gateway.cluster.partitions import home_partition, sequencing_partition
from gateway.testing_cluster import ClusterFiles, random_name, run_replicas
from tests.servers import PostgresServer
from tests.support import eventually

BOUND = 30.0
"""Seconds a step may take: claims wait one lease TTL of fresh beats first."""

pytestmark = pytest.mark.slow


@dataclass(frozen=True, slots=True, kw_only=True)
class Pair:
    """Two replicas, the author homed on the one not sequencing the pair's conversation."""

    replicas: list[Gateway]
    database: str
    author: tuple[str, str, str]
    """(name, token, AgentId)."""
    recipient: tuple[str, str, str]
    sequencer: Gateway
    partitions: int


@contextlib.asynccontextmanager
async def pair(postgres_server: PostgresServer, tmp_path: Path) -> AsyncIterator[Pair]:
    files = ClusterFiles.create(tmp_path / "cluster")
    dsn = postgres_server.create_database("cluster")
    async with run_replicas(files, dsn, 2) as replicas:
        cluster = replicas[0].components.cluster
        assert cluster is not None
        partitions = cluster.meta.partitions

        def owned(replica: Gateway) -> set[int]:
            parts = replica.components.cluster
            assert parts is not None
            return set(parts.membership.owned())

        async def spread() -> list[int]:
            return [len(owned(r)) for r in replicas]

        await eventually(spread, lambda held: sum(held) == partitions and all(held), within=BOUND)
        homed: dict[int, tuple[str, str, str]] = {}
        while len(homed) < 2:
            name = random_name("member")
            registered = await replicas[0].components.agents.register(name)
            home = 0 if home_partition(registered.agent_id, partitions) in owned(replicas[0]) else 1
            homed.setdefault(home, (name, registered.token, registered.agent_id))
        members = [homed[0][2], homed[1][2]]
        partition = sequencing_partition(members, partitions)
        sequencer = 0 if partition in owned(replicas[0]) else 1
        first = min(members, key=agent_id_order_key)
        assert homed[sequencer][2] == first  # the lower AgentId's home sequences
        yield Pair(
            replicas=replicas,
            database=dsn.rsplit("/", 1)[1],
            author=homed[1 - sequencer],
            recipient=homed[sequencer],
            sequencer=replicas[sequencer],
            partitions=partitions,
        )


def sql(server: PostgresServer, setup: Pair, statement: str) -> list[str]:
    return server.sql(statement, database=setup.database).split()


REFUSED_DEADLINE = 2.0
"""Seconds a send expected to be refused may take: `certification-unavailable` is an
UNAVAILABLE status, which the client sends again until its deadline (operations.md §10)."""


async def send(setup: Pair, text: str, *, deadline: float = BOUND) -> None:
    author = setup.replicas[0] if setup.sequencer is setup.replicas[1] else setup.replicas[1]
    async with await harness_client.connect(author.address, token=setup.author[1]) as client:
        message = MessageInput(to=f"agent:{setup.recipient[0]}", text=text)
        await asyncio.wait_for(client.send(message, deadline=deadline), BOUND)


async def conversation_of(setup: Pair) -> str:
    snapshot = await setup.sequencer.components.store.snapshot(setup.recipient[2])
    (conversation_id,) = {row.conversation_id for row in snapshot.conversations}
    return conversation_id


async def test_a_head_moved_by_someone_else_makes_the_unit_stale_and_it_is_rebuilt_from_rows(
    postgres_server: PostgresServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.engine.cluster_order")
    async with pair(postgres_server, tmp_path) as setup:
        await send(setup, "one")
        conversation_id = await conversation_of(setup)
        # Another writer moved every member's head: the sequencer's memory is older than rows.
        sql(
            postgres_server,
            setup,
            f"UPDATE conversations SET depth = depth + 1 WHERE conversation_id = '{conversation_id}'",
        )
        await send(setup, "two")
        depths = sql(
            postgres_server,
            setup,
            f"SELECT depth FROM conversations WHERE conversation_id = '{conversation_id}'",
        )
        assert depths == ["3", "3"]  # built on the moved head, not over it
        assert any("stale local unit" in record.message for record in caplog.records)
        copies = sql(
            postgres_server,
            setup,
            "SELECT count(*), count(DISTINCT post_id) FROM certified_records "
            f"WHERE conversation_id = '{conversation_id}'",
        )
        assert copies == ["4|2"]  # two posts, once at each member: nothing certified twice


async def test_a_set_aside_conversation_is_in_every_members_row_and_stays_so_after_a_hand_over(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    async with pair(postgres_server, tmp_path) as setup:
        await send(setup, "one")
        conversation_id = await conversation_of(setup)
        partition = sequencing_partition([setup.author[2], setup.recipient[2]], setup.partitions)
        # An open intent whose bytes do not decode: the sequencer sets the conversation aside.
        broken = RandomId.POST.mint()
        sql(
            postgres_server,
            setup,
            "INSERT INTO post_intents (agent_id, post_id, conversation_id, bind_seq, intent, "
            "state, record_hash, bound_at, seq_partition, descriptor) "
            f"SELECT '{setup.author[2]}', '{broken}', '{conversation_id}', 1000000, "
            f"'\\x00'::bytea, 'open', NULL, 0, {partition}, descriptor FROM conversations "
            f"WHERE conversation_id = '{conversation_id}' LIMIT 1",
        )

        async def set_aside() -> list[str]:
            return sql(
                postgres_server,
                setup,
                "SELECT count(*) FROM conversations "
                f"WHERE conversation_id = '{conversation_id}' AND set_aside IS NOT NULL",
            )

        await eventually(set_aside, lambda count: count == ["2"], within=BOUND, interval=0.2)
        state = sql(
            postgres_server, setup, f"SELECT state FROM post_intents WHERE post_id = '{broken}'"
        )
        assert state == ["refused"]

        async def refused() -> bool:
            try:
                await send(setup, "after", deadline=REFUSED_DEADLINE)
            except SendError as error:
                return error.reason is SendErrorReason.CERTIFICATION_UNAVAILABLE
            return False

        await eventually(
            refused, within=BOUND, interval=0.2
        )  # the home's view of the row is ≤ 1 s old
        # The sequencer leaves: the other replica takes the partition and loads the rows.
        await setup.sequencer.shutdown(skip_waits=True)
        survivor = setup.replicas[0] if setup.sequencer is setup.replicas[1] else setup.replicas[1]
        parts = survivor.components.cluster
        assert parts is not None

        async def taken() -> bool:
            return partition in parts.membership.owned()

        await eventually(taken, within=BOUND)
        with pytest.raises(SendError) as caught:
            await send(setup, "later", deadline=REFUSED_DEADLINE)
        assert caught.value.reason is SendErrorReason.CERTIFICATION_UNAVAILABLE
        open_after = sql(
            postgres_server,
            setup,
            "SELECT count(*) FROM post_intents "
            f"WHERE conversation_id = '{conversation_id}' AND state = 'open'",
        )
        assert open_after == ["0"]

"""`harness-gateway migrate --cluster` moves a network-mode PostgreSQL database into a cluster
(cluster.md §12.2).

The network-mode database is built the real way: a Registry, a Router and daemons as real
processes keeping their rows in one PostgreSQL database, agents registered on two owners and
posting to each other through the Router and within one owner. The daemons stop, the real
`harness-gateway migrate --cluster` runs, and two in-process cluster replicas start on the
database: old tokens, old history, sends across agents and the chains all carry on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import harness_client
import psycopg
import pytest
from harness_client import InboundDelivery, MessageInput, TextPart

from gateway.app import Gateway
from gateway.engine import protocol as p
from gateway.settings import Settings
from gateway.standalone import REGISTRY_KEY_FILE
from gateway.store.layout import RECORD_COLUMNS, RECORD_FROM, record_row
from gateway.testing import gateway_command
from gateway.testing_cluster import ClusterFiles, run_replicas
from gateway.testing_network import NetworkProcess, run_network
from tests.e2e.network_support import register
from tests.integration.network.support import message_of
from tests.servers import PostgresServer
from tests.support import eventually

BOUND: Final = 30.0
"""Seconds one step may take (a first certification across processes included)."""

PARTITIONS: Final = 16


async def migrate_cluster(dsn: str, seed_key: Path) -> tuple[int, dict[str, object], str]:
    """The real command, as an operator runs it: (exit status, its JSON line, its stderr)."""
    process = await asyncio.create_subprocess_exec(
        *gateway_command(),
        "migrate",
        "--cluster",
        "--store",
        dsn,
        "--seed-key-file",
        str(seed_key),
        "--partitions",
        str(PARTITIONS),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    text = out.decode().strip()
    return process.returncode, (json.loads(text) if text else {}), err.decode()


async def query(
    dsn: str, sql: str, parameters: tuple[object, ...] = ()
) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        cursor = await connection.execute(sql, parameters)
        return list(await cursor.fetchall())


async def fingerprint(dsn: str) -> list[tuple[object, ...]]:
    """What a second run must leave as it is."""
    return await query(
        dsn,
        "SELECT (SELECT md5(string_agg(i::text, ',' ORDER BY agent_id)) FROM identities i), "
        "(SELECT md5(string_agg(c::text, ',' ORDER BY agent_id, conversation_id)) "
        "FROM conversations c), "
        "(SELECT md5(string_agg(m::text, ',' ORDER BY key)) FROM harness_meta m), "
        "(SELECT md5(string_agg(l::text, ',' ORDER BY owner)) FROM leases l), "
        "(SELECT md5(string_agg(r::text, ',' ORDER BY agent_id, record_hash)) "
        "FROM certified_records r)",
    )


async def delivered(endpoint: harness_client.Endpoint, count: int) -> list[InboundDelivery]:
    """The first `count` deliveries of a new Messages stream (unacknowledged ones replay)."""
    items: list[InboundDelivery] = []
    stream = endpoint.messages()
    try:
        while len(items) < count:
            items.append(await asyncio.wait_for(anext(stream), BOUND))
    finally:
        with contextlib.suppress(Exception):
            await stream.aclose()
    return items


def texts(items: list[InboundDelivery]) -> list[str]:
    return [
        part.text
        for item in items
        for part in message_of(item).content
        if isinstance(part, TextPart)
    ]


@contextlib.asynccontextmanager
async def connected(address: str, token: str) -> AsyncIterator[harness_client.Endpoint]:
    endpoint = await harness_client.connect(address, token=token)
    try:
        yield endpoint
    finally:
        await endpoint.close()


async def send(endpoint: harness_client.Endpoint, to: str, text: str) -> None:
    await asyncio.wait_for(endpoint.send(MessageInput(to=f"agent:{to}", text=text)), BOUND)


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_network_mode_database_moves_into_a_cluster_with_its_tokens_history_and_chains(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    dsn = postgres_server.create_database("network")
    files = ClusterFiles.create(tmp_path / "cluster")
    tokens: dict[str, str] = {}
    # A send waits 2 s for its certification, then answers delivery-pending, still bound.
    async with run_network(
        daemons=2, store=dsn, daemon_args=["--send-certify-timeout", "2s"]
    ) as network:
        first, second = network.daemons
        # A daemon on its own (SQLite) store: its agent has a card but no identity row here.
        outside_dir = tmp_path / "outside"
        outside_dir.mkdir(mode=0o700)
        outside = NetworkProcess(
            "serve",
            "outside",
            data_dir=outside_dir,
            args=[
                "--router",
                network.router_target,
                "--registry",
                network.registry.target,
                "--peer-token-file",
                str(network.peer_token_file),
            ],
        )
        await outside.start()
        try:
            tokens["alice"] = await register(first, "alice")
            tokens["carol"] = await register(first, "carol")
            tokens["bob"] = await register(second, "bob")
            tokens["erin"] = await register(second, "erin")
            dave = await register(outside, "dave")
            async with (
                connected(first.address, tokens["alice"]) as alice,
                connected(first.address, tokens["carol"]) as carol,
                connected(second.address, tokens["bob"]) as bob,
                connected(second.address, tokens["erin"]) as erin,
                connected(outside.address, dave) as _,
            ):
                await send(alice, "bob", "alice to bob, via the Router")
                await send(bob, "alice", "bob to alice, via the Router")
                await send(alice, "carol", "alice to carol, locally")
                await send(bob, "erin", "bob to erin, locally")
                await send(alice, "dave", "alice to dave, outside")
                # Received (and left unacknowledged: the cluster must replay them).
                assert texts(await delivered(bob, 1)) == ["alice to bob, via the Router"]
                assert texts(await delivered(carol, 1)) == ["alice to carol, locally"]
                assert texts(await delivered(erin, 1)) == ["bob to erin, locally"]
                # bob's daemon stops: alice's next post to him stays bound, not certified.
                await second.stop()
                with pytest.raises(harness_client.SendError) as pending:
                    await send(alice, "bob", "alice to bob, while bob's daemon is down")
                assert pending.value.reason == "delivery-pending", pending.value
        finally:
            await outside.close()
        # The cluster's Registry signs with the network Registry's key (cluster.md §1).
        shutil.copyfile(network.registry.data_dir / REGISTRY_KEY_FILE, files.registry_key)  # type: ignore[operator]
    owners = await query(dsn, "SELECT owner, fence FROM leases ORDER BY owner")
    assert [owner for owner, _ in owners] == ["daemon-1", "daemon-2"]
    [(alice_id,)] = await query(dsn, "SELECT agent_id FROM identities WHERE agent_name = 'alice'")
    [(bob_id,)] = await query(dsn, "SELECT agent_id FROM identities WHERE agent_name = 'bob'")
    heads = {
        row[0]: row[1]
        for row in await query(
            dsn,
            "SELECT c.conversation_id, c.head FROM conversations c "
            "JOIN conversations a USING (conversation_id) "
            "WHERE c.agent_id = %s AND a.agent_id = %s AND c.depth > 0",
            (bob_id, alice_id),
        )
    }
    assert len(heads) == 1  # alice and bob's one conversation, on the Router path
    [(conversation_id, old_head)] = heads.items()
    open_intent = (
        "SELECT seq_partition IS NOT NULL FROM post_intents WHERE agent_id = %s "
        "AND conversation_id = %s AND state = 'open'"
    )
    assert await query(dsn, open_intent, (alice_id, conversation_id)) == [(False,)]

    code, report, err = await migrate_cluster(dsn, files.seed_key)
    assert code == 0, err
    assert report["state"] == "migrated"
    assert report["owners"] == ["daemon-1", "daemon-2"]
    assert report["identities"] == 4
    # alice-bob from the Router, bob-erin from daemon-2's local instance; alice-carol stays
    # on daemon-1's, which the cluster keeps (daemon-1 has the most agents, a tie by name).
    assert report["conversations_moved"] == 2
    set_aside = report["set_aside"]
    assert isinstance(set_aside, list)
    [aside] = set_aside
    assert isinstance(aside, dict)
    assert "members outside the cluster" in aside["reason"]
    assert "moving 4 identities of 2 owners" in err
    # The open intent waits at its sequencer (cluster.md §5.1); the Router's outbox is gone.
    assert await query(dsn, open_intent, (alice_id, conversation_id)) == [(True,)]
    assert await query(
        dsn, "SELECT count(*) FROM outbox WHERE conversation_id = %s", (conversation_id,)
    ) == [(0,)]
    # Set aside as a cluster's sequencer sets a conversation aside (cluster.md §5.4).
    assert await query(
        dsn,
        "SELECT agent_id, set_aside IS NOT NULL FROM conversations WHERE conversation_id = %s",
        (aside["conversation_id"],),
    ) == [(alice_id, True)]
    assert await query(dsn, "SELECT owner, fence FROM leases ORDER BY owner") == [
        (owner, int(str(fence)) + 1) for owner, fence in owners
    ]
    rows = await query(dsn, "SELECT owner, length(seed), home_partition FROM identities")
    assert {(owner, size) for owner, size, _ in rows} == {("cluster", 61)}
    assert all(home is not None for *_, home in rows)

    before = await fingerprint(dsn)
    code, report, err = await migrate_cluster(dsn, files.seed_key)
    assert (code, report["state"]) == (0, "current"), err
    assert "nothing to change" in err
    assert await fingerprint(dsn) == before

    async with run_replicas(files, dsn, 2) as replicas:

        async def owned() -> list[int]:
            return [len(r.components.cluster.membership.owned()) for r in replicas]  # type: ignore[union-attr]

        await eventually(owned, lambda held: sum(held) == PARTITIONS and all(held), within=BOUND)
        for replica in replicas:
            for name in ("alice", "bob", "carol", "erin"):
                async with connected(replica.address, tokens[name]) as endpoint:
                    state = await asyncio.wait_for(endpoint.read_send("no-such-key"), BOUND)
                    assert state is not None
        address = replicas[0].address
        async with (
            connected(address, tokens["alice"]) as alice,
            connected(replicas[1].address, tokens["bob"]) as bob,
            connected(address, tokens["carol"]) as carol,
            connected(replicas[1].address, tokens["erin"]) as erin,
        ):
            # The old history replays: the unacknowledged items of network mode.
            # The post bound in network mode certifies in the cluster.
            assert texts(await delivered(bob, 2)) == [
                "alice to bob, via the Router",
                "alice to bob, while bob's daemon is down",
            ]
            assert texts(await delivered(carol, 1)) == ["alice to carol, locally"]
            await send(alice, "bob", "alice to bob, in the cluster")
            await send(bob, "alice", "bob to alice, in the cluster")
            assert texts(await delivered(bob, 3)) == [
                "alice to bob, via the Router",
                "alice to bob, while bob's daemon is down",
                "alice to bob, in the cluster",
            ]
            assert "bob to alice, in the cluster" in texts(await delivered(alice, 2))
            await send(carol, "alice", "carol to alice, in the cluster")
            assert "carol to alice, in the cluster" in texts(await delivered(alice, 3))
            await send(erin, "bob", "erin to bob, in the cluster")
            assert "erin to bob, in the cluster" in texts(await delivered(bob, 4))
            # The conversation with an agent outside the cluster stays set aside.
            # (refused with no effect, so the client tries again until its deadline)
            with pytest.raises(harness_client.SendError) as refused:
                await alice.send(
                    MessageInput(to="agent:dave", text="alice to dave, from the cluster"),
                    deadline=3.0,
                )
            assert refused.value.reason == "certification-unavailable", refused.value
            await send(alice, "erin", "alice to erin, a new conversation")
            assert texts(await delivered(erin, 2))[1] == "alice to erin, a new conversation"
    # The chain continues: the cluster's first post in alice and bob's conversation follows
    # the head network mode left, under the anchor the move completed.
    depth_rows = await query(
        dsn,
        f"SELECT {RECORD_COLUMNS} FROM {RECORD_FROM} "
        "WHERE r.agent_id = %s AND r.conversation_id = %s ORDER BY r.depth",
        (bob_id, conversation_id),
    )
    assert len(depth_rows) == 5
    after_move = p.decode(record_row(depth_rows[2]).record, p.CertifiedRecord)
    action = after_move.action_certified_record.record_core.action
    assert action.previous_record_hash == old_head
    [(anchor,)] = await query(
        dsn,
        "SELECT anchor FROM conversations WHERE agent_id = %s AND conversation_id = %s",
        (alice_id, conversation_id),
    )
    assert isinstance(anchor, bytes)
    assert isinstance(p.decode(anchor, p.CompletedReanchor), p.CompletedReanchor)


async def network_daemon(tmp_path: Path, dsn: str, owner: str) -> Gateway:
    """An embedded network-mode daemon (its own SQLite Registry) on the shared store."""
    data_dir = tmp_path / owner
    data_dir.mkdir(mode=0o700)
    settings = Settings(
        listen="127.0.0.1:0",
        metrics_listen=None,
        data_dir=data_dir,
        store=dsn,
        store_owner=owner,
        shutdown_grace=1.0,
    )
    return await Gateway.start(settings)


async def test_the_move_is_refused_while_a_network_daemon_holds_its_lease(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    dsn = postgres_server.create_database("leased")
    files = ClusterFiles.create(tmp_path / "cluster")
    daemon = await network_daemon(tmp_path, dsn, "daemon-a")
    try:
        await daemon.components.agents.register("alice")
        code, report, err = await migrate_cluster(dsn, files.seed_key)
        assert (code, report) == (1, {})
        assert "network daemons are running (the lease of owner daemon-a is held)" in err
        assert "stop every daemon" in err
        assert await query(dsn, "SELECT value FROM harness_meta WHERE key = 'mode'") == []
    finally:
        await daemon.shutdown(skip_waits=True)
    # Stopped, it is no longer the lease that refuses.
    code, _, err = await migrate_cluster(dsn, files.seed_key)
    assert code == 1
    assert "is held" not in err


async def test_the_move_is_refused_listing_agent_names_two_owners_use(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    dsn = postgres_server.create_database("clash")
    files = ClusterFiles.create(tmp_path / "cluster")
    for owner in ("daemon-a", "daemon-b"):
        daemon = await network_daemon(tmp_path, dsn, owner)
        try:
            await daemon.components.agents.register("alice")
            await daemon.components.agents.register(f"only-{owner}")
        finally:
            await daemon.shutdown(skip_waits=True)
    code, report, err = await migrate_cluster(dsn, files.seed_key)
    assert (code, report) == (1, {})
    assert "agent names are used by more than one owner: alice (owners daemon-a, daemon-b)" in err
    assert "only-daemon" not in err
    assert await query(dsn, "SELECT DISTINCT owner FROM identities ORDER BY owner") == [
        ("daemon-a",),
        ("daemon-b",),
    ]


async def test_the_move_is_refused_naming_agents_whose_cards_are_not_in_the_database(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    dsn = postgres_server.create_database("cards")
    files = ClusterFiles.create(tmp_path / "cluster")
    # An embedded daemon keeps its Registry in its own SQLite file, not in this database.
    daemon = await network_daemon(tmp_path, dsn, "daemon-a")
    try:
        await daemon.components.agents.register("alice")
    finally:
        await daemon.shutdown(skip_waits=True)
    code, report, err = await migrate_cluster(dsn, files.seed_key)
    assert (code, report) == (1, {})
    assert "the Registry tables of this database hold no card for alice" in err
    assert await query(dsn, "SELECT owner, length(seed) FROM identities") == [("daemon-a", 32)]

"""Local order (engine.md §5.10, §10 vector 17): conversations whose members are all hosted
by one daemon are certified by that daemon, with the same artefacts and no Router traffic."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import harness_client
from harness_client import MessageInput

from gateway.engine import protocol as p
from gateway.router import InProcessRouter
from gateway.store.sqlite_store import STORE_FILE
from gateway.testing import RunningGateway, run_gateway
from tests.support import eventually

BOUND = 20.0
ACK_CHUNK = 32


def _count(data_dir: Path, sql: str) -> int:
    with sqlite3.connect(data_dir / STORE_FILE) as db:
        return int(db.execute(sql).fetchone()[0])


def _router_tail(gw: RunningGateway) -> int:
    router = gw.gateway.components.router
    assert isinstance(router, InProcessRouter)  # the embedded ring
    return router.status().tail


def _commits(gw: RunningGateway) -> float:
    value = gw.gateway.metrics.registry.get_sample_value(
        "harness_store_commit_batch_size_count", {"backend": "sqlite"}
    )
    return value or 0.0


async def _receive(
    gw: RunningGateway, token: str, count: int, *, within: float = BOUND
) -> list[str]:
    texts: list[str] = []
    async with await harness_client.connect(gw.address, token=token) as client:
        tokens: list[str] = []
        async with asyncio.timeout(within):
            async for delivery in client.messages():
                texts.append(delivery.item.message.content[0].text)  # type: ignore[union-attr]
                tokens.append(delivery.token)
                if len(texts) == count:
                    break
                if len(tokens) == ACK_CHUNK:  # inside the stream's window
                    assert await client.acknowledge(tokens) == [None] * len(tokens)
                    tokens = []
        assert await client.acknowledge(tokens) == [None] * len(tokens)
    return texts


async def _verify_copies(gw: RunningGateway, names: list[str], address_of: dict[str, str]) -> int:
    """Every member's copy holds the same record bytes in one order, and each verifies
    against the cards in its membership."""
    copies = [
        await gw.gateway.components.management.history(
            name, address_of[name], after_record_hash=None, limit=50
        )
        for name in names
    ]
    first = copies[0]
    for copy in copies[1:]:
        assert [r.certified_record for r in copy] == [r.certified_record for r in first]
    previous = None
    for stored in first:
        record = p.decode(stored.certified_record, p.CertifiedRecord)
        membership = record.action_certified_record.record_core.membership
        p.verify_membership(membership, gw.gateway.registry_public_key)
        p.check_certified_record(record, membership=membership)
        action = record.action_certified_record.record_core.action
        assert action.previous_record_hash == previous
        previous = stored.record_hash
    return len(first)


async def test_a_local_conversation_certifies_without_envelopes_and_every_copy_verifies():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob", "carol")}
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            for index in range(3):
                await asyncio.wait_for(
                    alice.send(MessageInput(to="agent:bob", text=f"direct {index}")), BOUND
                )
            await asyncio.wait_for(
                alice.send(MessageInput(to="group:bob,carol", text="group")), BOUND
            )
        assert await _receive(gw, tokens["bob"], 4) == ["direct 0", "direct 1", "direct 2", "group"]
        assert _router_tail(gw) == 0
        assert _count(gw.data_dir, "SELECT COUNT(*) FROM outbox") == 0
        for table in ("proposal_locks", "staged_records", "evidence"):
            assert _count(gw.data_dir, f"SELECT COUNT(*) FROM {table}") == 0
        direct = {"alice": "agent:bob", "bob": "agent:alice"}
        assert await _verify_copies(gw, ["alice", "bob"], direct) == 3
        group = dict.fromkeys(("alice", "bob", "carol"), "group:alice,bob,carol")
        assert await _verify_copies(gw, ["alice", "bob", "carol"], group) == 1


async def test_a_burst_in_one_conversation_chains_in_order_and_survives_a_restart():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob")}
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            await asyncio.wait_for(
                asyncio.gather(
                    *(alice.send(MessageInput(to="agent:bob", text=f"{i}")) for i in range(64))
                ),
                BOUND,
            )
        texts = await _receive(gw, tokens["bob"], 64)
        assert sorted(texts, key=int) == [str(i) for i in range(64)]
        await gw.restart()
        async with await harness_client.connect(gw.address, token=tokens["bob"]) as bob:
            await asyncio.wait_for(bob.send(MessageInput(to="agent:alice", text="after")), BOUND)
        copies = {"alice": "agent:bob", "bob": "agent:alice"}
        assert await _verify_copies(gw, ["alice", "bob"], copies) == 50  # one page
        records = await gw.gateway.components.management.history(
            "alice", "agent:bob", after_record_hash=None, limit=50
        )
        assert [r.depth for r in records] == list(range(1, 51))
        assert _count(gw.data_dir, "SELECT MAX(depth) FROM certified_records") == 65


async def test_texts_of_brackets_certify_deliver_and_survive_restarts():
    texts = ["[" * 60, "[" * 10_000, '{"a": ' + "[" * 5_000, "]" * 100 + '"' + "{" * 100]
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob")}
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            for text in texts:
                await asyncio.wait_for(alice.send(MessageInput(to="agent:bob", text=text)), BOUND)
        await gw.restart()
        assert await _receive(gw, tokens["bob"], len(texts)) == texts
        await gw.restart()
        async with await harness_client.connect(gw.address, token=tokens["bob"]) as bob:
            await asyncio.wait_for(bob.send(MessageInput(to="agent:alice", text="[" * 60)), BOUND)
        assert await _receive(gw, tokens["alice"], 1) == ["[" * 60]


async def test_a_corrupted_stored_row_sets_one_conversation_aside_and_the_rest_is_served():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob", "carol")}
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            await asyncio.wait_for(alice.send(MessageInput(to="agent:bob", text="one")), BOUND)
            await asyncio.wait_for(alice.send(MessageInput(to="agent:carol", text="two")), BOUND)
        bob_id = gw.agents["bob"].agent_id
        await gw.gateway.shutdown(skip_waits=True)
        with sqlite3.connect(gw.data_dir / STORE_FILE) as db:
            conversation_id = db.execute(
                "SELECT conversation_id FROM conversations WHERE agent_id = ?", (bob_id,)
            ).fetchone()[0]
            db.execute(
                "UPDATE conversations SET anchor = ? WHERE agent_id = ? AND conversation_id = ?",
                (b'{"kind":"genesis_anchor"', bob_id, conversation_id),
            )
        await gw.restart_stopped()
        status = await gw.gateway.components.management.agent_status("bob")
        assert [item.conversation_id for item in status.set_aside] == [conversation_id]
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            await asyncio.wait_for(alice.send(MessageInput(to="agent:carol", text="three")), BOUND)
            try:
                # A short deadline: the client sends a refused (UNAVAILABLE) send again until it.
                await asyncio.wait_for(
                    alice.send(MessageInput(to="agent:bob", text="x"), deadline=3.0), BOUND
                )
            except harness_client.SendError as error:
                assert error.reason == "certification-unavailable"
            else:
                raise AssertionError("a send to a set-aside conversation succeeded")
        assert await _receive(gw, tokens["carol"], 2) == ["two", "three"]


RESTART_LOOP_MESSAGES = 5_000
RESTART_LOOP_ROUNDS = 10


async def test_restarts_of_an_idle_daemon_write_nothing_and_keep_the_store_flat():
    # Once: six idle restarts grew the outbox from 26,000 to 148,708 rows and the seventh
    # start died. Now: every start succeeds, no table grows, an idle daemon writes nothing.
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob")}
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            for start in range(0, RESTART_LOOP_MESSAGES, 100):
                await asyncio.wait_for(
                    asyncio.gather(
                        *(
                            alice.send(MessageInput(to="agent:bob", text="x" * 1000))
                            for _ in range(start, start + 100)
                        )
                    ),
                    BOUND,
                )
        received = await _receive(gw, tokens["bob"], RESTART_LOOP_MESSAGES, within=120.0)
        assert len(received) == RESTART_LOOP_MESSAGES
        tables = (
            "certified_records",
            "record_bodies",
            "outbox",
            "evidence",
            "proposal_locks",
            "inbox",
            "pending_deliveries",
            "reanchors",
        )

        def counts() -> dict[str, int]:
            return {t: _count(gw.data_dir, f"SELECT COUNT(*) FROM {t}") for t in tables}

        def size() -> int:
            return (gw.data_dir / STORE_FILE).stat().st_size

        await gw.restart()  # the first start after traffic checkpoints the WAL into the file
        before, size_before = counts(), size()
        assert before["outbox"] == before["evidence"] == before["proposal_locks"] == 0
        for _ in range(RESTART_LOOP_ROUNDS):
            await gw.restart()
            writes = _commits(gw)
            await asyncio.sleep(0.5)  # idle: nothing may be written meanwhile
            assert _commits(gw) == writes
            assert counts() == before
            assert abs(size() - size_before) <= size_before * 0.02
        async with await harness_client.connect(gw.address, token=tokens["bob"]) as bob:
            await asyncio.wait_for(bob.send(MessageInput(to="agent:alice", text="alive")), BOUND)
        expected = 2 * (RESTART_LOOP_MESSAGES + 1)
        await eventually(
            lambda: asyncio.sleep(0, counts()["certified_records"]), lambda n: n == expected
        )

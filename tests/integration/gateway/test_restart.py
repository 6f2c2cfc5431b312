"""A restart of the embedded gateway is also a Router restart: conversations re-anchor and
go on, empty ones swap their genesis anchor (engine.md §5.9, §10 vector 13)."""

from __future__ import annotations

import asyncio

import harness_client
from harness_client import MessageInput

from gateway.testing import run_gateway

BOUND = 20.0


async def test_a_conversation_with_records_reanchors_and_keeps_certifying_after_a_restart():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob", "carol", "dave")}
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            await alice.send(MessageInput(to="agent:bob", text="before"))
            await alice.send(MessageInput(to="group:bob,carol,dave", text="group before"))
        await gw.restart()
        async with (
            await harness_client.connect(gw.address, token=tokens["alice"]) as alice,
            await harness_client.connect(gw.address, token=tokens["bob"]) as bob,
        ):
            await asyncio.wait_for(alice.send(MessageInput(to="agent:bob", text="after")), BOUND)
            await asyncio.wait_for(
                bob.send(MessageInput(to="group:alice,carol,dave", text="group after")), BOUND
            )
        direct = await gw.gateway.components.management.history(
            "bob", "agent:alice", after_record_hash=None, limit=50
        )
        assert [record.depth for record in direct] == [1, 2]
        group = await gw.gateway.components.management.history(
            "dave", "group:alice,bob,carol,dave", after_record_hash=None, limit=50
        )
        assert len(group) == 2


async def test_two_restarts_in_a_row_keep_the_chain_going():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob")}
        for round_ in range(3):
            async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
                await asyncio.wait_for(
                    alice.send(MessageInput(to="agent:bob", text=f"round {round_}")), BOUND
                )
            await gw.restart()
        records = await gw.gateway.components.management.history(
            "alice", "agent:bob", after_record_hash=None, limit=50
        )
        assert [record.depth for record in records] == [1, 2, 3]

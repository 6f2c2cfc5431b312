"""Classified at certification (engine.md §5.10, §7.2): a plain multicast between hosted
agents is written as its receivers' inbox items in the unit that certifies it, with no
pending delivery and no classification commit; a post the classifier must see (a collective
part, an inbound firewall check) still goes through a pending delivery. Real gateways, real
gRPC, real SQLite files, restarts."""

from __future__ import annotations

import asyncio
import sqlite3
import textwrap
from pathlib import Path
from typing import Any

import harness_client
from harness_client import AskOperation, CollectiveOp, CollectiveRequestItem, MessageInput

from gateway.settings import Settings
from gateway.store.sqlite_store import STORE_FILE
from gateway.testing import RunningGateway, run_gateway

BOUND = 20.0
FORM: dict[str, Any] = {"type": "object", "properties": {"slot": {"type": "string"}}}


def _count(data_dir: Path, sql: str) -> int:
    with sqlite3.connect(data_dir / STORE_FILE) as db:
        return int(db.execute(sql).fetchone()[0])


async def _texts(gw: RunningGateway, token: str, count: int) -> list[str]:
    """The next `count` deliveries' texts, acknowledged."""
    texts: list[str] = []
    async with await harness_client.connect(gw.address, token=token) as client:
        async with asyncio.timeout(BOUND):
            async for delivery in client.messages():
                texts.append(delivery.item.message.content[0].text)  # type: ignore[union-attr]
                await delivery.acknowledge()
                if len(texts) == count:
                    break
    return texts


async def test_plain_multicasts_become_items_in_the_certifying_unit_without_a_pending_delivery():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob", "carol")}
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            await asyncio.wait_for(alice.send(MessageInput(to="agent:bob", text="direct")), BOUND)
            await asyncio.wait_for(
                alice.send(MessageInput(to="group:bob,carol", text="group")), BOUND
            )
        # Durable with their records: nothing pending, every receiver's item unread.
        assert _count(gw.data_dir, "SELECT COUNT(*) FROM pending_deliveries") == 0
        assert _count(gw.data_dir, "SELECT COUNT(*) FROM inbox WHERE state = 'unread'") == 3

        await gw.restart()

        assert await _texts(gw, tokens["bob"], 2) == ["direct", "group"]
        assert await _texts(gw, tokens["carol"], 1) == ["group"]
        assert _count(gw.data_dir, "SELECT COUNT(*) FROM inbox WHERE state = 'unread'") == 0


async def test_a_gather_goes_through_the_classifier_and_reaches_its_member():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob")}
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            ask = AskOperation(op=CollectiveOp.GATHER, deadline=3600, requested_schema=FORM)
            await asyncio.wait_for(
                alice.send(MessageInput(to="agent:bob", text="Which slot?", collective=ask)),
                BOUND,
            )
        async with await harness_client.connect(gw.address, token=tokens["bob"]) as bob:
            delivery = await asyncio.wait_for(bob.messages().__anext__(), BOUND)
        assert isinstance(delivery.item, CollectiveRequestItem)
        # Its delivery was pending and then classified, as the classifier records it.
        assert (
            _count(
                gw.data_dir, "SELECT COUNT(*) FROM pending_deliveries WHERE state = 'classified'"
            )
            == 1
        )


async def test_with_an_inbound_firewall_check_a_multicast_is_classified_and_screened(
    tmp_path: Path,
):
    config = tmp_path / "firewall.yaml"
    config.write_text(
        textwrap.dedent(
            """
            version: 1
            middlewares:
              - id: secrets
                kind: content-pattern
                direction: in
                rules:
                  - id: key
                    pattern: "sk-[a-z]+"
                    action: drop
                    instruction: "no keys"
            """
        ),
        encoding="utf-8",
    )
    async with run_gateway(Settings(firewall_config=config)) as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob")}
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            await asyncio.wait_for(alice.send(MessageInput(to="agent:bob", text="sk-abc")), BOUND)
            await asyncio.wait_for(alice.send(MessageInput(to="agent:bob", text="fine")), BOUND)
        assert await _texts(gw, tokens["bob"], 1) == ["fine"]
        assert _count(gw.data_dir, "SELECT COUNT(*) FROM pending_deliveries") == 2

"""Direct and group multicasts through a real gateway: real gRPC, real SQLite, real
certification."""

from __future__ import annotations

import asyncio

import harness_client
import pytest
from harness_client import DirectMessage, MessageInput, MulticastItem, SendError, TextPart

from gateway.engine import protocol as p
from gateway.testing import run_gateway
from tests.support import eventually

BOUND = 20.0


async def next_delivery(iterator):
    return await asyncio.wait_for(iterator.__anext__(), BOUND)


async def test_two_agents_exchange_direct_multicasts_projected_from_certified_records():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        bob_token = await gw.register("bob")
        async with (
            await harness_client.connect(gw.address, token=alice_token) as alice,
            await harness_client.connect(gw.address, token=bob_token) as bob,
        ):
            result = await alice.send(MessageInput(to="agent:bob", text="hello bob"))
            assert result.operation_id is None
            stream = bob.messages()
            delivery = await next_delivery(stream)
            item = delivery.item
            assert isinstance(item, MulticastItem)
            assert isinstance(item.message, DirectMessage)
            message = item.message
            assert message.sender == "agent:alice"
            assert message.address == "agent:alice"
            assert message.content == (TextPart(text="hello bob"),)
            await delivery.acknowledge()
            await bob.send(MessageInput(to="agent:alice", text="hi alice"))
            reply = await next_delivery(alice.messages())
            assert reply.item.message.sender == "agent:bob"
            await stream.aclose()


async def test_three_agents_exchange_group_multicasts_with_complete_membership():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob", "carol")}
        async with (
            await harness_client.connect(gw.address, token=tokens["alice"]) as alice,
            await harness_client.connect(gw.address, token=tokens["carol"]) as carol,
        ):
            await alice.send(MessageInput(to="group:carol,bob", text="hi all"))
            delivery = await next_delivery(carol.messages())
            message = delivery.item.message
            assert message.address == "group:alice,bob,carol"
            assert message.sender == "agent:alice"
            assert message.members == ("agent:alice", "agent:bob", "agent:carol")


async def test_two_sends_with_identical_input_are_two_posts_with_different_post_ids():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        bob_token = await gw.register("bob")
        async with (
            await harness_client.connect(gw.address, token=alice_token) as alice,
            await harness_client.connect(gw.address, token=bob_token) as bob,
        ):
            await alice.send(MessageInput(to="agent:bob", text="same"))
            await alice.send(MessageInput(to="agent:bob", text="same"))
            stream = bob.messages()
            first = await next_delivery(stream)
            second = await next_delivery(stream)
            assert first.item.message.post_id != second.item.message.post_id
            assert first.token != second.token


async def test_the_author_is_never_delivered_its_own_post():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob", "carol")}
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            await alice.send(MessageInput(to="group:bob,carol", text="mine"))
            await alice.send(MessageInput(to="agent:bob", text="mine too"))
            bob = await eventually(
                lambda: gw.gateway.components.management.agent_status("bob"),
                lambda status: status.backlog == 2,
            )
            assert bob.backlog == 2
            carol = await eventually(
                lambda: gw.gateway.components.management.agent_status("carol"),
                lambda status: status.backlog == 1,
            )
            assert carol.backlog == 1
            assert (await gw.gateway.components.management.agent_status("alice")).backlog == 0


@pytest.mark.parametrize(
    ("to", "reason"),
    [
        ("bob", "invalid-address"),
        ("agent:alice", "membership-invalid"),
        ("group:bob", "membership-invalid"),
        ("agent:nobody", "unknown-agent"),
    ],
)
async def test_malformed_addresses_fail_with_their_closed_reason(to, reason):
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        await gw.register("bob")
        async with await harness_client.connect(gw.address, token=alice_token) as alice:
            with pytest.raises(SendError) as raised:
                await alice.send(MessageInput(to=to, text="x"))
            assert raised.value.reason == reason


async def test_every_members_copy_has_the_same_record_hashes_and_signatures_verify():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob", "carol")}
        async with (
            await harness_client.connect(gw.address, token=tokens["alice"]) as alice,
            await harness_client.connect(gw.address, token=tokens["bob"]) as bob,
        ):
            for index in range(3):
                await alice.send(MessageInput(to="group:bob,carol", text=f"a{index}"))
                await bob.send(MessageInput(to="group:alice,carol", text=f"b{index}"))
        copies = {}
        for name in ("alice", "bob", "carol"):
            copies[name] = await gw.gateway.components.management.history(
                name, "group:alice,bob,carol", after_record_hash=None, limit=50
            )
        hashes = {name: [record.record_hash for record in rows] for name, rows in copies.items()}
        assert len(hashes["alice"]) == 6
        assert hashes["alice"] == hashes["bob"]
        assert hashes["alice"] == hashes["carol"]
        registry_key = gw.gateway.registry_public_key
        for record in copies["carol"]:
            certified = p.decode(record.certified_record, p.CertifiedRecord)
            membership = certified.action_certified_record.record_core.membership
            p.verify_membership(membership, registry_key)
            p.check_certified_record(certified, membership=membership)

"""The operator API end to end, with the real `ManagementClient`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import harness_client
import pytest
from harness_client import (
    AuthenticationError,
    ManagementClient,
    ManagementError,
    PermissionDeniedError,
    to_json,
)
from harness_contract.values import TextPart

from gateway.endpoint.api import ConversationRecord, ConversationSummary
from tests.integration.rpc.conftest import Served

BOUND = 10.0


@pytest.fixture
async def admin(served: Served) -> AsyncIterator[ManagementClient]:
    client = await harness_client.connect_management(served.address, admin_token=served.admin_token)
    async with client:
        yield client


async def test_registering_an_agent_returns_its_address_and_a_working_token(served, admin):
    registered = await admin.register_agent("alice")
    assert registered.address == "agent:alice"
    assert registered.token.startswith("hat_")
    assert to_json(registered) == {
        "address": "agent:alice",
        "agentId": registered.agent_id,
        "token": registered.token,
    }
    async with await harness_client.connect(served.address, token=registered.token):
        pass


@pytest.mark.parametrize(
    ("name", "reason"), [("Not A Name", "invalid-name"), ("alice", "name-taken")]
)
async def test_a_bad_or_taken_name_is_a_management_error(admin, name, reason):
    await admin.register_agent("alice")
    with pytest.raises(ManagementError) as raised:
        await admin.register_agent(name)
    assert raised.value.reason == reason


async def test_an_unknown_agent_is_not_found(admin):
    with pytest.raises(ManagementError) as raised:
        await admin.agent_status("nobody")
    assert raised.value.reason == "not-found"


async def test_agent_status_shows_the_stream_and_the_backlog(served, admin):
    token = (await admin.register_agent("alice")).token
    await served.core.deliver("alice", _item())
    status = await admin.agent_status("alice")
    assert status.name == "alice"
    assert status.backlog == 1
    assert not status.stream_attached
    async with await harness_client.connect(served.address, token=token) as alice:
        deliveries = alice.messages()
        await asyncio.wait_for(anext(deliveries), BOUND)
        assert (await admin.agent_status("alice")).stream_attached
        await deliveries.aclose()


async def test_agents_list_in_name_order_page_by_page_and_by_prefix(admin):
    for name in ("carol", "alice", "bob", "alfred"):
        await admin.register_agent(name)
    first, token = await admin.list_agents(page_size=2)
    assert [agent.name for agent in first] == ["alfred", "alice"]
    second, token = await admin.list_agents(page_size=2, page_token=token)
    assert [agent.name for agent in second] == ["bob", "carol"]
    assert token == ""
    assert [agent.name async for agent in admin.all_agents(prefix="al")] == ["alfred", "alice"]


async def test_rotating_a_token_refuses_the_old_one(served, admin):
    old = (await admin.register_agent("alice")).token
    new = await admin.rotate_token("alice")
    assert new != old
    with pytest.raises(harness_client.ConnectError) as raised:
        await harness_client.connect(served.address, token=old)
    assert isinstance(raised.value.__cause__, AuthenticationError)
    assert raised.value.__cause__.reason == "revoked"
    async with await harness_client.connect(served.address, token=new):
        pass


async def test_revoking_every_token_leaves_none_that_works(served, admin):
    token = (await admin.register_agent("alice")).token
    await admin.revoke_token("alice")
    with pytest.raises(harness_client.ConnectError):
        await harness_client.connect(served.address, token=token)


async def test_conversations_page_by_address(served, admin):
    await admin.register_agent("alice")
    served.core.conversation_list = [
        ConversationSummary(
            address=f"agent:peer{n}",
            kind="direct",
            members=("agent:alice", f"agent:peer{n}"),
            head_record_hash=None if n == 0 else f"rch_{n}",
            depth=n,
        )
        for n in (2, 0, 1)
    ]
    page, more = await admin.conversations("alice", page_size=2)
    assert [summary.address for summary in page] == ["agent:peer0", "agent:peer1"]
    assert more
    page, more = await admin.conversations("alice", after_address="agent:peer1")
    assert [summary.address for summary in page] == ["agent:peer2"]
    assert not more
    assert page[0].head_record_hash == "rch_2"


async def test_history_reads_records_in_pages_of_at_most_fifty(served, admin):
    await admin.register_agent("alice")
    served.core.records = [
        ConversationRecord(
            record_hash=f"rch_{n:03}",
            post_id=f"pst_{n}",
            author="agent:bob",
            depth=n + 1,
            content=(TextPart(text=f"message {n}"),),
            certified_record=b"{}",
        )
        for n in range(60)
    ]
    page, more = await admin.history("alice", "agent:bob")
    assert len(page) == 50
    assert more
    rest, more = await admin.history("alice", "agent:bob", after_record_hash=page[-1].record_hash)
    assert [record.depth for record in rest] == list(range(51, 61))
    assert not more
    assert rest[0].content == (harness_client.TextPart(text="message 50"),)
    with pytest.raises(harness_client.InvalidRequestError):
        await admin.history("alice", "agent:bob", page_size=51)


async def test_gateway_status(served, admin):
    await admin.register_agent("alice")
    status = await admin.status()
    assert to_json(status) == {
        "version": "0.1.0",
        "mode": "embedded",
        "hostedAgents": 1,
        "routerState": "active",
    }


async def test_an_agent_token_on_the_management_api_is_permission_denied(served):
    token = await served.register("alice")
    async with await harness_client.connect_management(served.address, admin_token=token) as client:
        with pytest.raises(PermissionDeniedError) as raised:
            await client.status()
    assert raised.value.reason == "wrong-role"


async def test_an_unknown_admin_token_is_unauthenticated(served):
    async with await harness_client.connect_management(
        served.address, admin_token="nope"
    ) as client:
        with pytest.raises(AuthenticationError) as raised:
            await client.status()
    assert raised.value.reason == "unknown"


def _item():
    from tests.integration.rpc.fake_core import text_item

    return text_item("waiting")

"""The operator API of a real gateway over real gRPC: the management queries and their
closed errors, each on the status code of its reason."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import grpc
import harness_client
import pytest
from harness_client import ManagementError, ManagementErrorReason, MessageInput
from harness_client._errors import status_of_call
from harness_contract import wire
from harness_contract._gen.harness.v1 import management_pb2, management_pb2_grpc

from gateway.testing import run_gateway
from tests.support import eventually

BOUND = 20.0
"""Seconds any single wait in these tests may take before it fails."""


@pytest.mark.parametrize(
    "address",
    [
        "bob",  # no prefix: not an address at all
        "agent:Bob",  # not an agent name
        "group:bob",  # a group of two: the membership is invalid
        "agent:alice",  # the agent itself
    ],
)
async def test_history_of_a_malformed_address_is_invalid_argument_invalid_address(address):
    async with run_gateway() as gw:
        await gw.register("alice")
        channel = grpc.aio.insecure_channel(gw.address)
        try:
            stub = management_pb2_grpc.ManagementServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await asyncio.wait_for(
                    stub.ReadConversation(
                        management_pb2.ReadConversationRequest(agent_name="alice", address=address),
                        metadata=(("authorization", f"Bearer {gw.admin_token}"),),
                    ),
                    BOUND,
                )
        finally:
            await channel.close()
        assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        status = status_of_call(raised.value)
        assert wire.error_of_status(status) == ManagementError(
            ManagementErrorReason.INVALID_ADDRESS, status.message
        )
        async with await harness_client.connect_management(
            gw.address, admin_token=gw.admin_token
        ) as admin:
            with pytest.raises(ManagementError) as typed:
                await admin.history("alice", address)
        assert typed.value.reason == "invalid-address"
        assert typed.value.message == status.message


async def test_agent_status_counts_the_unread_backlog_and_conversations_name_the_group():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        for name in ("bob", "carol"):
            await gw.register(name)
        async with await harness_client.connect(gw.address, token=alice_token) as alice:
            for index in range(3):
                await asyncio.wait_for(
                    alice.send(MessageInput(to="agent:bob", text=f"m{index}")), BOUND
                )
            await asyncio.wait_for(
                alice.send(MessageInput(to="group:carol,bob", text="all")), BOUND
            )
        status = await eventually(
            lambda: gw.gateway.components.management.agent_status("bob"),
            lambda status: status.backlog == 4,
            within=BOUND,
        )
        assert status.stream_attached is False
        summaries = sorted(
            await gw.gateway.components.management.conversations("alice"), key=lambda s: s.address
        )
        assert [(s.address, s.kind) for s in summaries] == [
            ("agent:bob", "direct"),
            ("group:alice,bob,carol", "group"),
        ]
        assert summaries[1].members == ("agent:alice", "agent:bob", "agent:carol")


async def test_an_agent_not_hosted_here_is_not_found_for_every_query():
    async with (
        run_gateway() as gw,
        await harness_client.connect_management(gw.address, admin_token=gw.admin_token) as admin,
    ):
        queries: list[Callable[[], Awaitable[object]]] = [
            lambda: admin.agent_status("nobody"),
            lambda: admin.conversations("nobody"),
            lambda: admin.history("nobody", "agent:bob"),
            lambda: admin.rotate_token("nobody"),
            lambda: admin.revoke_token("nobody"),
        ]
        for query in queries:
            with pytest.raises(ManagementError) as raised:
                await query()
            assert raised.value.reason == "not-found"

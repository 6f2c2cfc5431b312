"""The bound on an agent's open collective operations over real gRPC, SQLite and a restart
(`--max-open-operations`): past it a gather or all_gather fails `too-many-operations`
(RESOURCE_EXHAUSTED, decoded by the client) with no post made, even under
`failureDelivery: "inbound"`; a completed operation frees its slot, and operations loaded
back at a restart still count."""

from __future__ import annotations

import asyncio
from typing import Any

import harness_client
import pytest
from harness_client import (
    Accept,
    AskOperation,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    FailureDelivery,
    MessageInput,
    ResponseInput,
    SendError,
    SendErrorReason,
)

from gateway.settings import Settings
from gateway.testing import RunningGateway, run_gateway

pytestmark = pytest.mark.timeout(120)

FORM: dict[str, Any] = {
    "type": "object",
    "properties": {"slot": {"type": "string"}},
    "required": ["slot"],
}
WAIT = 20.0
"""Seconds any one delivery may take before the test fails."""
THIRTY_DAYS = 2_592_000


def gather(to: str, *, op: CollectiveOp = CollectiveOp.GATHER) -> MessageInput:
    return MessageInput(
        to=to,
        text="Which slot?",
        collective=AskOperation(op=op, deadline=THIRTY_DAYS, requested_schema=FORM),
    )


async def records(gw: RunningGateway, agent: str, address: str) -> int:
    async with await harness_client.connect_management(
        gw.address, admin_token=gw.admin_token
    ) as admin:
        try:
            found, _ = await admin.history(agent, address)
        except harness_client.ManagementError:
            return 0
    return len(found)


async def next_item(endpoint: harness_client.Endpoint) -> Any:
    stream = endpoint.messages()
    try:
        delivery = await asyncio.wait_for(anext(stream), WAIT)
        await delivery.acknowledge()
        return delivery.item
    finally:
        await stream.aclose()


async def test_past_the_bound_an_ask_fails_too_many_operations_until_one_completes():
    async with run_gateway(Settings(max_open_operations=2)) as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob", "carol", "dave")}
        async with (
            await harness_client.connect(gw.address, token=tokens["alice"]) as alice,
            await harness_client.connect(gw.address, token=tokens["bob"]) as bob,
        ):
            await alice.send(gather("agent:bob"))
            await alice.send(gather("agent:carol"))

            for failure_delivery in (FailureDelivery.RESULT, FailureDelivery.INBOUND):
                with pytest.raises(SendError) as refused:
                    await alice.send(gather("agent:dave"), failure_delivery=failure_delivery)
                assert refused.value.reason is SendErrorReason.TOO_MANY_OPERATIONS
                assert refused.value.status_code.name == "RESOURCE_EXHAUSTED"
                assert "2 gather and all_gather operations open" in refused.value.message
            with pytest.raises(SendError):
                await alice.send(gather("group:bob,carol", op=CollectiveOp.ALL_GATHER))
            # No post was made to dave; no operationFailed item either (alice's next item
            # below is the result).
            assert await records(gw, "alice", "agent:dave") == 0

            request = await next_item(bob)
            assert isinstance(request, CollectiveRequestItem)
            await bob.send(ResponseInput(to=request.to, response=Accept(content={"slot": "mon"})))
            result = await next_item(alice)
            assert isinstance(result, CollectiveResultItem)
            await alice.send(gather("agent:dave"))
            with pytest.raises(SendError):
                await alice.send(gather("agent:bob"))

        await gw.restart()
        # The two operations still open were loaded back: they hold the bound.
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            with pytest.raises(SendError) as refused:
                await alice.send(gather("agent:bob"))
            assert refused.value.reason is SendErrorReason.TOO_MANY_OPERATIONS

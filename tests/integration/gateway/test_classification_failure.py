"""A classification commit the store could not take after the collectives took a request
into memory (engine.md §7.2): the gateway stops through its fatal path rather than leave
memory and disk apart, and after the restart the request is delivered once and is
answerable."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import harness_client
import pytest
from harness_client import (
    Accept,
    Answered,
    AskOperation,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    MessageInput,
    ResponseInput,
)

from gateway.store.errors import StoreUnavailable
from gateway.store.records import SetDeliveryState, Write
from gateway.testing import RunningGateway, run_gateway

pytestmark = pytest.mark.timeout(120)

S: dict[str, Any] = {
    "type": "object",
    "properties": {"slot": {"type": "string", "enum": ["mon", "tue"]}},
    "required": ["slot"],
}
BOUND = 20.0


async def take(gw: RunningGateway, token: str) -> Any:
    """The agent's next item, acknowledged."""
    async with await harness_client.connect(gw.address, token=token) as endpoint:
        stream = endpoint.messages()
        delivery = await asyncio.wait_for(stream.__anext__(), BOUND)
        await delivery.acknowledge()
        await stream.aclose()
    return delivery.item


async def send(gw: RunningGateway, token: str, message: Any) -> Any:
    async with await harness_client.connect(gw.address, token=token) as endpoint:
        return await endpoint.send(message)


async def test_a_request_whose_classification_commit_failed_is_answerable_after_the_restart():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob")}
        store = gw.gateway.components.store
        real_apply = store.apply
        asked = asyncio.Event()

        async def apply(writes: Sequence[Write]) -> None:
            # The classification commit waits until alice's send has returned, then the
            # store cannot take it (a network store's outage: nothing written).
            if any(isinstance(write, SetDeliveryState) for write in writes):
                await asked.wait()
                raise StoreUnavailable("forced by the test")
            await real_apply(writes)

        store.apply = apply  # type: ignore[method-assign]
        result = await send(
            gw,
            tokens["alice"],
            MessageInput(
                to="agent:bob",
                text="Which day?",
                collective=AskOperation(op=CollectiveOp.GATHER, deadline=60, requested_schema=S),
            ),
        )
        asked.set()

        await asyncio.wait_for(gw.gateway.wait_stopped(), BOUND)
        assert gw.gateway.exit_code == 1
        await gw.restart_stopped()

        request = await take(gw, tokens["bob"])
        assert isinstance(request, CollectiveRequestItem)
        assert request.id == result.operation_id
        await send(
            gw,
            tokens["bob"],
            ResponseInput(to="agent:alice", response=Accept(content={"slot": "tue"})),
        )
        item = await take(gw, tokens["alice"])
        assert isinstance(item, CollectiveResultItem)
        assert [o.outcome for o in item.outcomes] == [Answered(content={"slot": "tue"})]

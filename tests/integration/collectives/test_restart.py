"""Collectives survive a restart (collectives.md §4.7): an operation open at the restart
still ends in exactly one result, and answers given before and after it count."""

from __future__ import annotations

import asyncio
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
    Decline,
    Declined,
    MessageInput,
    ResponseInput,
    to_json,
)

from gateway.testing import RunningGateway, run_gateway

pytestmark = pytest.mark.timeout(120)

S: dict[str, Any] = {
    "type": "object",
    "properties": {"slot": {"type": "string", "enum": ["mon", "tue"]}},
    "required": ["slot"],
}
BOUND = 20.0


async def take(gw: RunningGateway, token: str, count: int = 1) -> list[Any]:
    """The next `count` items of an agent, acknowledged."""
    items = []
    async with await harness_client.connect(gw.address, token=token) as endpoint:
        stream = endpoint.messages()
        for _ in range(count):
            delivery = await asyncio.wait_for(stream.__anext__(), BOUND)
            await delivery.acknowledge()
            items.append(delivery.item)
        await stream.aclose()
    return items


async def send(gw: RunningGateway, token: str, message: Any) -> Any:
    async with await harness_client.connect(gw.address, token=token) as endpoint:
        return await endpoint.send(message)


async def test_a_gather_open_at_a_restart_ends_in_one_result_counting_answers_from_both_sides():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob", "carol")}
        result = await send(
            gw,
            tokens["alice"],
            MessageInput(
                to="group:bob,carol",
                text="Which day?",
                collective=AskOperation(op=CollectiveOp.GATHER, deadline=60, requested_schema=S),
            ),
        )
        [request] = await take(gw, tokens["bob"])
        assert isinstance(request, CollectiveRequestItem)
        await send(
            gw,
            tokens["bob"],
            ResponseInput(to="agent:alice", response=Accept(content={"slot": "mon"})),
        )
        await gw.restart()
        # carol's request was unread at the restart: it is still answerable.
        [request_c] = await take(gw, tokens["carol"])
        assert isinstance(request_c, CollectiveRequestItem)
        await send(gw, tokens["carol"], ResponseInput(to="agent:alice", response=Decline()))
        [item] = await take(gw, tokens["alice"])
        assert isinstance(item, CollectiveResultItem)
        assert item.id == result.operation_id
        assert [o.outcome for o in item.outcomes] == [Answered(content={"slot": "mon"}), Declined()]
        runtime = gw.gateway.components.hosted.runtime("alice")
        assert runtime.collectives.open_counts() == {"gather": 0, "all_gather": 0}


async def test_an_all_gather_open_at_a_restart_gives_every_party_the_same_one_result():
    group = "group:alice,bob,carol,dave"
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob", "carol", "dave")}
        result = await send(
            gw,
            tokens["alice"],
            MessageInput(
                to=group,
                text="Which day?",
                collective=AskOperation(
                    op=CollectiveOp.ALL_GATHER, deadline=60, requested_schema=S
                ),
            ),
        )
        for name in ("bob", "carol", "dave"):
            [request] = await take(gw, tokens[name])
            assert isinstance(request, CollectiveRequestItem)
        await send(
            gw, tokens["bob"], ResponseInput(to=group, response=Accept(content={"slot": "tue"}))
        )
        await gw.restart()
        await send(
            gw, tokens["carol"], ResponseInput(to=group, response=Accept(content={"slot": "mon"}))
        )
        await send(gw, tokens["dave"], ResponseInput(to=group, response=Decline()))
        [expected] = await take(gw, tokens["alice"])
        assert isinstance(expected, CollectiveResultItem)
        assert expected.id == result.operation_id
        assert [o.outcome for o in expected.outcomes] == [
            Answered(content={"slot": "tue"}),
            Answered(content={"slot": "mon"}),
            Declined(),
        ]
        for name in ("bob", "carol", "dave"):
            [item] = await take(gw, tokens[name])
            assert item == expected


async def test_a_deadline_that_passes_across_a_restart_completes_with_what_was_counted():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob", "carol")}
        await send(
            gw,
            tokens["alice"],
            MessageInput(
                to="group:bob,carol",
                text="Quick?",
                collective=AskOperation(op=CollectiveOp.GATHER, deadline=2, requested_schema=S),
            ),
        )
        await take(gw, tokens["bob"])
        await send(gw, tokens["bob"], ResponseInput(to="agent:alice", response=Decline()))
        await gw.restart()
        [item] = await take(gw, tokens["alice"])
        assert isinstance(item, CollectiveResultItem)
        assert [to_json(o.outcome)["kind"] for o in item.outcomes] == ["declined", "no-answer"]

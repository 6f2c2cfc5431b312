"""A gateway killed with SIGKILL in the middle of a gather and an all_gather restarts and
both still end in exactly one result each, with answers from before and after counted
(collectives.md §4.7)."""

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
)

from gateway.testing import RunningDaemon, run_daemon

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

S: dict[str, Any] = {
    "type": "object",
    "properties": {"slot": {"type": "string", "enum": ["mon", "tue"]}},
    "required": ["slot"],
}
GROUP = "group:alice,bob,carol,dave"
BOUND = 30.0


async def register(daemon: RunningDaemon, *names: str) -> dict[str, str]:
    async with await harness_client.connect_management(
        daemon.address, admin_token=daemon.admin_token
    ) as client:
        return {name: (await client.register_agent(name)).token for name in names}


async def send(daemon: RunningDaemon, token: str, message: Any) -> Any:
    async with await harness_client.connect(daemon.address, token=token) as endpoint:
        return await endpoint.send(message)


async def items(daemon: RunningDaemon, token: str, count: int) -> list[Any]:
    async with await harness_client.connect(daemon.address, token=token) as endpoint:
        stream = endpoint.messages()
        taken = []
        for _ in range(count):
            delivery = await asyncio.wait_for(stream.__anext__(), BOUND)
            await delivery.acknowledge()
            taken.append(delivery.item)
        await stream.aclose()
        return taken


async def nothing_more(daemon: RunningDaemon, token: str, seconds: float) -> bool:
    async with await harness_client.connect(daemon.address, token=token) as endpoint:
        stream = endpoint.messages()
        try:
            await asyncio.wait_for(stream.__anext__(), seconds)
        except TimeoutError:
            return True
        finally:
            await stream.aclose()
        return False


def ask(op: CollectiveOp, to: str) -> MessageInput:
    return MessageInput(
        to=to,
        text="Which day?",
        collective=AskOperation(op=op, deadline=120, requested_schema=S),
    )


async def test_a_gather_and_an_all_gather_cut_by_sigkill_each_end_in_exactly_one_result():
    async with run_daemon() as daemon:
        tokens = await register(daemon, "alice", "bob", "carol", "dave")
        gather = await send(daemon, tokens["alice"], ask(CollectiveOp.GATHER, "group:bob,carol"))
        all_gather = await send(daemon, tokens["alice"], ask(CollectiveOp.ALL_GATHER, GROUP))
        for name in ("bob", "carol"):
            received = await items(daemon, tokens[name], 2)
            assert all(isinstance(item, CollectiveRequestItem) for item in received)
        [dave_request] = await items(daemon, tokens["dave"], 1)
        assert isinstance(dave_request, CollectiveRequestItem)
        await send(
            daemon,
            tokens["bob"],
            ResponseInput(to="agent:alice", response=Accept(content={"slot": "mon"})),
        )
        await send(
            daemon, tokens["bob"], ResponseInput(to=GROUP, response=Accept(content={"slot": "tue"}))
        )

        await daemon.kill()
        await daemon.restart()

        await send(daemon, tokens["carol"], ResponseInput(to="agent:alice", response=Decline()))
        await send(
            daemon,
            tokens["carol"],
            ResponseInput(to=GROUP, response=Accept(content={"slot": "mon"})),
        )
        await send(daemon, tokens["dave"], ResponseInput(to=GROUP, response=Decline()))

        results = {item.id: item for item in await items(daemon, tokens["alice"], 2)}
        assert set(results) == {gather.operation_id, all_gather.operation_id}
        gather_result = results[gather.operation_id]
        assert isinstance(gather_result, CollectiveResultItem)
        assert [o.outcome for o in gather_result.outcomes] == [
            Answered(content={"slot": "mon"}),
            Declined(),
        ]
        expected = results[all_gather.operation_id]
        assert isinstance(expected, CollectiveResultItem)
        assert [o.outcome for o in expected.outcomes] == [
            Answered(content={"slot": "tue"}),
            Answered(content={"slot": "mon"}),
            Declined(),
        ]
        for name in ("bob", "carol", "dave"):
            assert await items(daemon, tokens[name], 1) == [expected]
        assert await nothing_more(daemon, tokens["alice"], 3)

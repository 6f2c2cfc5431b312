"""The collectives.md §8 scenarios that one gateway can host, over real gRPC.

Deadlines are a few seconds; waits poll with a bound."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import harness_client
import pytest
from harness_client import (
    Accept,
    Answered,
    AskOperation,
    CollectiveError,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    Decline,
    Declined,
    FailureDelivery,
    MessageInput,
    MulticastItem,
    NoAnswer,
    OperationFailedItem,
    ResponseInput,
)

from gateway.testing import RunningGateway, run_gateway

pytestmark = pytest.mark.timeout(120)

S: dict[str, Any] = {
    "type": "object",
    "properties": {"slot": {"type": "string", "enum": ["mon", "tue"]}},
    "required": ["slot"],
}
QUESTION = "Which day works for the review?"
BOUND = 20.0


class Party:
    def __init__(self, name: str, endpoint: harness_client.Endpoint) -> None:
        self.name = name
        self.endpoint = endpoint
        self.stream = endpoint.messages()

    async def next_item(self, within: float = BOUND):
        delivery = await asyncio.wait_for(self.stream.__anext__(), within)
        await delivery.acknowledge()
        return delivery.item

    async def nothing_within(self, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self.stream.__anext__(), seconds)
        except TimeoutError:
            return True
        return False


@asynccontextmanager
async def parties(*names: str) -> AsyncIterator[tuple[RunningGateway, dict[str, Party]]]:
    async with run_gateway() as gw, AsyncExitStack() as stack:
        result = {}
        for name in names:
            token = await gw.register(name)
            endpoint = await stack.enter_async_context(
                await harness_client.connect(gw.address, token=token)
            )
            result[name] = Party(name, endpoint)
        try:
            yield gw, result
        finally:
            for party in result.values():
                await party.stream.aclose()


def gather(to: str, deadline: int, op: CollectiveOp = CollectiveOp.GATHER) -> MessageInput:
    return MessageInput(
        to=to,
        text=QUESTION,
        collective=AskOperation(op=op, deadline=deadline, requested_schema=S),
    )


async def test_g1_gather_refuses_an_unknown_member_before_any_post_then_counts_answers():
    async with parties("gather-requester", "gather-member-a", "gather-member-b") as (_, p):
        requester, a, b = p["gather-requester"], p["gather-member-a"], p["gather-member-b"]
        with pytest.raises(CollectiveError) as raised:
            await requester.endpoint.send(
                gather("group:gather-member-a,gather-nobody,gather-requester", 60)
            )
        assert raised.value.reason == "members-unreachable"
        assert str(raised.value) == "send failed: agent:gather-nobody is not a known agent"
        started = time.time() * 1000
        result = await requester.endpoint.send(
            gather("group:gather-requester,gather-member-a,gather-member-b", 240)
        )
        returned = time.time() * 1000
        operation_id = result.operation_id
        assert operation_id is not None
        assert operation_id.startswith("col_")
        first_a = await a.next_item()
        first_b = await b.next_item()
        for item in (first_a, first_b):
            assert isinstance(item, CollectiveRequestItem)
            assert item.op is CollectiveOp.GATHER
            assert item.id == operation_id
            assert item.sender == "agent:gather-requester"
            assert item.to == "agent:gather-requester"
            assert item.question == QUESTION
            assert started + 240_000 - 1000 <= item.deadline_at <= returned + 240_000
        assert first_a.post_id != first_b.post_id
        with pytest.raises(CollectiveError) as invalid:
            await a.endpoint.send(
                ResponseInput(to="agent:gather-requester", response=Accept(content={"slot": "sun"}))
            )
        assert invalid.value.reason == "answer-invalid"
        assert str(invalid.value) == (
            'reply failed: field "slot" is invalid (enum: must be one of the allowed values)'
        )
        answered = await a.endpoint.send(
            ResponseInput(to="agent:gather-requester", response=Accept(content={"slot": "tue"}))
        )
        assert answered.operation_id == operation_id
        declined = await b.endpoint.send(
            ResponseInput(to="agent:gather-requester", response=Decline())
        )
        assert declined.operation_id == operation_id
        with pytest.raises(CollectiveError) as again:
            await a.endpoint.send(ResponseInput(to="agent:gather-requester", response=Decline()))
        assert again.value.reason == "request-answered"
        result_item = await requester.next_item()
        assert isinstance(result_item, CollectiveResultItem)
        assert result_item.id == operation_id
        assert result_item.to == "group:gather-member-a,gather-member-b,gather-requester"
        assert result_item.question == QUESTION
        assert [(o.member, o.outcome) for o in result_item.outcomes] == [
            ("agent:gather-member-a", Answered(content={"slot": "tue"})),
            ("agent:gather-member-b", Declined()),
        ]


async def test_g2_a_silent_member_is_no_answer_at_the_deadline_and_its_late_answer_expires():
    async with parties("gather-requester", "gather-member-a", "gather-member-b") as (_, p):
        requester, a, b = p["gather-requester"], p["gather-member-a"], p["gather-member-b"]
        result = await requester.endpoint.send(gather("group:gather-member-a,gather-member-b", 3))
        request_a = await a.next_item()
        request_b = await b.next_item()
        assert isinstance(request_b, CollectiveRequestItem)
        await a.endpoint.send(
            ResponseInput(to="agent:gather-requester", response=Accept(content={"slot": "mon"}))
        )
        item = await requester.next_item()
        assert isinstance(item, CollectiveResultItem)
        assert time.time() * 1000 >= request_a.deadline_at - 100
        assert item.id == result.operation_id
        assert [o.outcome for o in item.outcomes] == [
            Answered(content={"slot": "mon"}),
            NoAnswer(),
        ]
        with pytest.raises(CollectiveError) as late:
            await b.endpoint.send(ResponseInput(to="agent:gather-requester", response=Decline()))
        assert late.value.reason == "request-expired"
        assert str(late.value) == "reply failed: the question's deadline has passed"


async def test_a1_every_party_of_an_all_gather_receives_deep_equal_results():
    names = (
        "all-gather-requester",
        "all-gather-member-a",
        "all-gather-member-b",
        "all-gather-member-c",
    )
    group = "group:all-gather-member-a,all-gather-member-b,all-gather-member-c,all-gather-requester"
    async with parties(*names) as (_, p):
        requester = p["all-gather-requester"]
        a, b, c = p["all-gather-member-a"], p["all-gather-member-b"], p["all-gather-member-c"]
        with pytest.raises(CollectiveError) as raised:
            await requester.endpoint.send(
                gather(
                    "group:all-gather-member-a,all-gather-nobody,all-gather-requester",
                    60,
                    CollectiveOp.ALL_GATHER,
                )
            )
        assert raised.value.reason == "members-unreachable"
        result = await requester.endpoint.send(gather(group, 300, CollectiveOp.ALL_GATHER))
        requests = [await party.next_item() for party in (a, b, c)]
        assert requests[0] == requests[1] == requests[2]
        assert isinstance(requests[0], CollectiveRequestItem)
        assert requests[0].to == group
        assert requests[0].id == result.operation_id
        await a.endpoint.send(ResponseInput(to=group, response=Accept(content={"slot": "tue"})))
        await b.endpoint.send(ResponseInput(to=group, response=Accept(content={"slot": "mon"})))
        await c.endpoint.send(ResponseInput(to=group, response=Decline()))
        expected = await requester.next_item()
        assert isinstance(expected, CollectiveResultItem)
        assert [(o.member, o.outcome) for o in expected.outcomes] == [
            ("agent:all-gather-member-a", Answered(content={"slot": "tue"})),
            ("agent:all-gather-member-b", Answered(content={"slot": "mon"})),
            ("agent:all-gather-member-c", Declined()),
        ]
        for party in (a, b, c):
            assert await party.next_item() == expected


async def test_a2_an_all_gather_with_a_silent_member_reports_it_as_no_answer_everywhere():
    names = (
        "all-gather-requester",
        "all-gather-member-a",
        "all-gather-member-b",
        "all-gather-member-c",
    )
    group = "group:all-gather-member-a,all-gather-member-b,all-gather-member-c,all-gather-requester"
    async with parties(*names) as (_, p):
        requester = p["all-gather-requester"]
        a, b, c = p["all-gather-member-a"], p["all-gather-member-b"], p["all-gather-member-c"]
        await requester.endpoint.send(gather(group, 4, CollectiveOp.ALL_GATHER))
        for party in (a, b, c):
            assert isinstance(await party.next_item(), CollectiveRequestItem)
        await a.endpoint.send(ResponseInput(to=group, response=Accept(content={"slot": "mon"})))
        await b.endpoint.send(ResponseInput(to=group, response=Accept(content={"slot": "mon"})))
        expected = await requester.next_item()
        assert isinstance(expected, CollectiveResultItem)
        assert [o.outcome for o in expected.outcomes] == [
            Answered(content={"slot": "mon"}),
            Answered(content={"slot": "mon"}),
            NoAnswer(),
        ]
        for party in (a, b, c):
            assert await party.next_item() == expected
        with pytest.raises(CollectiveError) as late:
            await c.endpoint.send(ResponseInput(to=group, response=Decline()))
        assert late.value.reason == "request-expired"


async def test_an_answer_with_none_open_or_several_open_is_refused_and_nothing_is_sent():
    async with parties("alice", "bob", "carol") as (gw, p):
        alice, bob = p["alice"], p["bob"]
        with pytest.raises(CollectiveError) as none:
            await bob.endpoint.send(ResponseInput(to="agent:alice", response=Decline()))
        assert none.value.reason == "request-none"
        await alice.endpoint.send(gather("agent:bob", 60))
        await alice.endpoint.send(gather("agent:bob", 60))
        await bob.next_item()
        await bob.next_item()
        with pytest.raises(CollectiveError) as several:
            await bob.endpoint.send(ResponseInput(to="agent:alice", response=Decline()))
        assert several.value.reason == "request-ambiguous"
        history = await gw.gateway.components.management.history(
            "bob", "agent:alice", after_record_hash=None, limit=50
        )
        assert all(record.author == "agent:alice" for record in history)


async def test_consumed_records_are_never_delivered_and_multicasts_still_are():
    names = ("all-gather-requester", "all-gather-member-a", "all-gather-member-b")
    group = "group:all-gather-member-a,all-gather-member-b,all-gather-requester"
    async with parties(*names) as (_, p):
        requester = p["all-gather-requester"]
        a, b = p["all-gather-member-a"], p["all-gather-member-b"]
        await requester.endpoint.send(gather(group, 300, CollectiveOp.ALL_GATHER))
        await a.next_item()
        await b.next_item()
        await a.endpoint.send(ResponseInput(to=group, response=Accept(content={"slot": "mon"})))
        await a.endpoint.send(MessageInput(to=group, text="after my answer"))
        # b never sees a's answer: its next item is a's multicast.
        item = await b.next_item()
        assert isinstance(item, MulticastItem)
        assert item.message.sender == "agent:all-gather-member-a"


async def test_a_refused_gather_with_inbound_failure_delivery_arrives_as_operation_failed():
    async with parties("alice", "bob") as (_, p):
        alice = p["alice"]
        result = await alice.endpoint.send(
            gather("agent:nobody-here", 60), failure_delivery=FailureDelivery.INBOUND
        )
        assert result.operation_id is not None
        item = await alice.next_item()
        assert isinstance(item, OperationFailedItem)
        assert item.id == result.operation_id
        assert item.to == "agent:nobody-here"
        assert item.error == "send failed: agent:nobody-here is not a known agent"


async def test_the_first_answer_counts_and_a_second_is_refused():
    async with parties("alice", "bob", "carol") as (_, p):
        alice, bob = p["alice"], p["bob"]
        await alice.endpoint.send(gather("group:bob,carol", 3))
        await bob.next_item()
        await bob.endpoint.send(
            ResponseInput(to="agent:alice", response=Accept(content={"slot": "mon"}))
        )
        with pytest.raises(CollectiveError) as second:
            await bob.endpoint.send(
                ResponseInput(to="agent:alice", response=Accept(content={"slot": "tue"}))
            )
        assert second.value.reason == "request-answered"
        result = await alice.next_item()
        assert isinstance(result, CollectiveResultItem)
        assert result.outcomes[0].outcome == Answered(content={"slot": "mon"})

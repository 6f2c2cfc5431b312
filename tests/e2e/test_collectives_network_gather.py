"""collectives.md §8.2: gather on three real daemons (`gather-requester`, `gather-member-a`,
`gather-member-b`, one agent per `harness-gateway serve` process, joined to a standalone
Router and Registry), so every request and answer crosses processes."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest
from harness_client import (
    Accept,
    CollectiveError,
    CollectiveRequestItem,
    CollectiveResultItem,
    Decline,
    ResponseInput,
    to_json,
)

from tests.e2e.network_support import (
    BOUND,
    QUESTION,
    SEND_WAIT,
    S,
    ask,
    elapsed,
    measure_deadline,
    network_parties,
    now_ms,
    seconds_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

NAMES = ("gather-requester", "gather-member-a", "gather-member-b")
REQUESTER = "agent:gather-requester"
THREE = "group:gather-member-a,gather-member-b,gather-requester"
OPERATION_ID = re.compile(r"^col_[A-Za-z0-9_-]{43}$")

RESULT_SLACK = 15.0
"""Seconds past `deadlineAt` a deadline result may take to reach the requester's stream."""


def expected_result(operation_id: str, a: Mapping[str, object], b: Mapping[str, object]) -> object:
    return {
        "kind": "collectiveResult",
        "op": "gather",
        "id": operation_id,
        "to": THREE,
        "question": QUESTION,
        "outcomes": [
            {"member": "agent:gather-member-a", "outcome": a},
            {"member": "agent:gather-member-b", "outcome": b},
        ],
    }


async def test_g1_an_unknown_member_is_refused_before_any_post_then_every_answer_counts():
    async with network_parties(NAMES) as (_, p):
        requester, a, b = (p[name] for name in NAMES)

        # 1. An unknown member refuses the whole send before anything is posted.
        with pytest.raises(CollectiveError) as refused:
            await requester.endpoint.send(
                ask("group:gather-member-a,gather-nobody,gather-requester", 60)
            )
        assert refused.value.reason == "members-unreachable"
        assert to_json(refused.value)["members"] == [
            {"member": "agent:gather-nobody", "reason": "unknown-agent"}
        ]
        assert str(refused.value) == "send failed: agent:gather-nobody is not a known agent"

        # 2. The gather to the three, in a non-canonical input order.
        started = now_ms()
        sent = await requester.endpoint.send(
            ask("group:gather-requester,gather-member-a,gather-member-b", 240)
        )
        returned = now_ms()
        operation_id = sent.operation_id
        assert operation_id is not None
        assert OPERATION_ID.match(operation_id), operation_id

        # 3. The members' first items are the requests (so step 1 posted nothing).
        first_a = await a.next_item()
        first_b = await b.next_item()
        for item in (first_a, first_b):
            assert isinstance(item, CollectiveRequestItem), item
            assert to_json(item) == {
                "kind": "collectiveRequest",
                "op": "gather",
                "id": operation_id,
                "postId": item.post_id,
                "from": REQUESTER,
                "to": REQUESTER,
                "question": QUESTION,
                "requestedSchema": S,
                "deadlineAt": item.deadline_at,
            }
            assert started + 240_000 <= item.deadline_at <= returned + 240_000
        assert isinstance(first_a, CollectiveRequestItem)
        assert isinstance(first_b, CollectiveRequestItem)
        assert first_a.post_id != first_b.post_id

        # 4. An answer outside the form is refused and nothing is sent.
        with pytest.raises(CollectiveError) as invalid:
            await a.endpoint.send(
                ResponseInput(to=REQUESTER, response=Accept(content={"slot": "sun"}))
            )
        assert invalid.value.reason == "answer-invalid"
        assert invalid.value.id == operation_id
        assert to_json(invalid.value)["fields"] == [
            {
                "field": "slot",
                "reason": "invalid",
                "detail": "enum: must be one of the allowed values",
            }
        ]

        # 5. A valid answer, a decline, and a second answer refused.
        answered = await a.endpoint.send(
            ResponseInput(to=REQUESTER, response=Accept(content={"slot": "tue"}))
        )
        assert answered.operation_id == operation_id
        declined = await b.endpoint.send(ResponseInput(to=REQUESTER, response=Decline()))
        assert declined.operation_id == operation_id
        with pytest.raises(CollectiveError) as again:
            await a.endpoint.send(ResponseInput(to=REQUESTER, response=Decline()))
        assert again.value.reason == "request-answered"
        assert str(again.value) == "reply failed: the question was already answered"

        # 6. The result, well before the deadline, with the canonical group address.
        result = await requester.next_item(within=BOUND)
        assert isinstance(result, CollectiveResultItem), result
        assert to_json(result) == expected_result(
            operation_id, {"kind": "answered", "content": {"slot": "tue"}}, {"kind": "declined"}
        )
        assert now_ms() < first_a.deadline_at - 120_000


async def test_g2_a_silent_member_is_no_answer_at_the_deadline_and_its_late_decline_expires():
    async with network_parties(NAMES) as (_, p):
        requester, a, b = (p[name] for name in NAMES)
        deadline = await measure_deadline(requester, [a, b])
        sent = await requester.endpoint.send(ask(THREE, deadline))
        operation_id = sent.operation_id
        assert operation_id is not None
        request_a = await a.next_item()
        request_b = await b.next_item()
        assert isinstance(request_a, CollectiveRequestItem), request_a
        assert isinstance(request_b, CollectiveRequestItem), request_b
        assert request_a.id == request_b.id == operation_id
        answered = await a.endpoint.send(
            ResponseInput(to=REQUESTER, response=Accept(content={"slot": "mon"}))
        )
        assert answered.operation_id == operation_id

        result = await requester.next_item(
            within=seconds_until(request_a.deadline_at) + RESULT_SLACK
        )
        assert now_ms() >= request_a.deadline_at - 100
        assert isinstance(result, CollectiveResultItem), result
        assert to_json(result) == expected_result(
            operation_id, {"kind": "answered", "content": {"slot": "mon"}}, {"kind": "no-answer"}
        )

        with pytest.raises(CollectiveError) as late:
            await b.endpoint.send(ResponseInput(to=REQUESTER, response=Decline()))
        assert late.value.reason == "request-expired"
        assert str(late.value) == "reply failed: the question's deadline has passed"


async def test_g3_a_stopped_member_keeps_its_post_pending_and_is_no_answer_at_the_deadline():
    async with network_parties(NAMES) as (_, p):
        requester, a, b = (p[name] for name in NAMES)
        deadline = max(await measure_deadline(requester, [a, b]), 45)
        await b.close()
        await b.daemon.stop()
        assert not b.daemon.running

        started = now_ms()
        with elapsed() as took:
            sent = await requester.endpoint.send(ask(THREE, deadline))
        assert SEND_WAIT - 0.5 <= took[0] <= 30.0, took[0]
        operation_id = sent.operation_id
        assert operation_id is not None
        assert OPERATION_ID.match(operation_id), operation_id

        request_a = await a.next_item()
        assert isinstance(request_a, CollectiveRequestItem), request_a
        assert request_a.id == operation_id
        assert started + deadline * 1000 <= request_a.deadline_at
        answered = await a.endpoint.send(
            ResponseInput(to=REQUESTER, response=Accept(content={"slot": "tue"}))
        )
        assert answered.operation_id == operation_id

        result = await requester.next_item(
            within=seconds_until(request_a.deadline_at) + RESULT_SLACK
        )
        assert now_ms() >= request_a.deadline_at - 100
        assert isinstance(result, CollectiveResultItem), result
        assert to_json(result) == expected_result(
            operation_id, {"kind": "answered", "content": {"slot": "tue"}}, {"kind": "no-answer"}
        )

"""collectives.md §8.3: all_gather on four real daemons (`all-gather-requester`,
`all-gather-member-a|b|c`, one agent per `harness-gateway serve` process, joined to a
standalone Router and Registry), so every request, answer and close crosses processes."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Final

import pytest
from harness_client import (
    Accept,
    CollectiveError,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    Decline,
    FailureDelivery,
    OperationFailedItem,
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

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

NAMES = (
    "all-gather-requester",
    "all-gather-member-a",
    "all-gather-member-b",
    "all-gather-member-c",
)
REQUESTER = "agent:all-gather-requester"
G = "group:all-gather-member-a,all-gather-member-b,all-gather-member-c,all-gather-requester"
MEMBERS = ("agent:all-gather-member-a", "agent:all-gather-member-b", "agent:all-gather-member-c")
OPERATION_ID = re.compile(r"^col_[A-Za-z0-9_-]{43}$")
ALL_GATHER = CollectiveOp.ALL_GATHER

RESULT_SLACK = 15.0
"""Seconds past `deadlineAt` a deadline result may take to reach the requester's stream
(the close must certify across processes first)."""

QUIET_WINDOW = 10.0

COLD_GROUP_REFUSAL = "send failed: " + "; ".join(
    f"{member} could not be reached: the gateway is unavailable (certification unavailable)"
    for member in MEMBERS
)
"""collectives.md §8.3 A3: the message of a cold all_gather with a stopped member."""

ANSWERED_MON: Final[Mapping[str, object]] = {"kind": "answered", "content": {"slot": "mon"}}
NO_ANSWER: Final[Mapping[str, object]] = {"kind": "no-answer"}


def expected_result(operation_id: str, *outcomes: Mapping[str, object]) -> object:
    return {
        "kind": "collectiveResult",
        "op": "all_gather",
        "id": operation_id,
        "to": G,
        "question": QUESTION,
        "outcomes": [
            {"member": member, "outcome": outcome}
            for member, outcome in zip(MEMBERS, outcomes, strict=True)
        ],
    }


async def test_a1_the_requester_and_every_member_receive_identical_results():
    async with network_parties(NAMES) as (_, p):
        requester, a, b, c = (p[name] for name in NAMES)

        # 1. An unknown member refuses the whole send before anything is posted.
        with pytest.raises(CollectiveError) as refused:
            await requester.endpoint.send(
                ask(
                    "group:all-gather-member-a,all-gather-nobody,all-gather-requester",
                    60,
                    ALL_GATHER,
                )
            )
        assert refused.value.reason == "members-unreachable"
        assert to_json(refused.value)["members"] == [
            {"member": "agent:all-gather-nobody", "reason": "unknown-agent"}
        ]
        assert str(refused.value) == "send failed: agent:all-gather-nobody is not a known agent"

        # 2. The all_gather to G.
        started = now_ms()
        sent = await requester.endpoint.send(ask(G, 300, ALL_GATHER))
        returned = now_ms()
        operation_id = sent.operation_id
        assert operation_id is not None
        assert OPERATION_ID.match(operation_id), operation_id

        # 3. One post: every member's first item is the same request.
        requests = [await party.next_item() for party in (a, b, c)]
        first = requests[0]
        assert isinstance(first, CollectiveRequestItem), first
        assert to_json(first) == {
            "kind": "collectiveRequest",
            "op": "all_gather",
            "id": operation_id,
            "postId": first.post_id,
            "from": REQUESTER,
            "to": G,
            "question": QUESTION,
            "requestedSchema": S,
            "deadlineAt": first.deadline_at,
        }
        assert started + 300_000 <= first.deadline_at <= returned + 300_000
        assert requests[1] == first
        assert requests[2] == first

        # 4. Two accepts and a decline, each to the group.
        for party, response in (
            (a, Accept(content={"slot": "tue"})),
            (b, Accept(content={"slot": "mon"})),
            (c, Decline()),
        ):
            answered = await party.endpoint.send(ResponseInput(to=G, response=response))
            assert answered.operation_id == operation_id

        # 5. The requester's result (every member answered: well before the deadline).
        result = await requester.next_item(within=BOUND)
        assert isinstance(result, CollectiveResultItem), result
        assert to_json(result) == expected_result(
            operation_id,
            {"kind": "answered", "content": {"slot": "tue"}},
            ANSWERED_MON,
            {"kind": "declined"},
        )

        # 6. Every member's next item is that result, never a peer's answer.
        for party in (a, b, c):
            assert await party.next_item(within=BOUND) == result
        assert now_ms() < first.deadline_at - 200_000


async def test_a2_a_silent_member_is_no_answer_in_every_party_s_identical_result():
    async with network_parties(NAMES) as (_, p):
        requester, a, b, c = (p[name] for name in NAMES)
        deadline = await measure_deadline(requester, [a, b, c])
        sent = await requester.endpoint.send(ask(G, deadline, ALL_GATHER))
        operation_id = sent.operation_id
        assert operation_id is not None
        requests = [await party.next_item() for party in (a, b, c)]
        first = requests[0]
        assert isinstance(first, CollectiveRequestItem), first
        assert first.id == operation_id
        assert requests[1] == requests[2] == first
        for party in (a, b):
            answered = await party.endpoint.send(
                ResponseInput(to=G, response=Accept(content={"slot": "mon"}))
            )
            assert answered.operation_id == operation_id

        result = await requester.next_item(within=seconds_until(first.deadline_at) + RESULT_SLACK)
        assert now_ms() >= first.deadline_at - 100
        assert isinstance(result, CollectiveResultItem), result
        assert to_json(result) == expected_result(
            operation_id, ANSWERED_MON, ANSWERED_MON, NO_ANSWER
        )
        for party in (a, b, c):
            assert await party.next_item(within=BOUND) == result

        with pytest.raises(CollectiveError) as late:
            await c.endpoint.send(ResponseInput(to=G, response=Decline()))
        assert late.value.reason == "request-expired"
        assert str(late.value) == "reply failed: the question's deadline has passed"


async def cold_group_with_a_stopped_member(failure_delivery: FailureDelivery) -> None:
    """A3 on its own fresh daemons: G never used, C's daemon stopped, one all_gather."""
    label = f"A3 failureDelivery={failure_delivery.value}"
    async with network_parties(NAMES, label=label) as (_, p):
        requester, a, b, c = (p[name] for name in NAMES)
        await c.close()
        await c.daemon.stop()
        assert not c.daemon.running

        if failure_delivery is FailureDelivery.RESULT:
            with elapsed() as took, pytest.raises(CollectiveError) as refused:
                await requester.endpoint.send(ask(G, 120, ALL_GATHER))
            assert SEND_WAIT - 0.5 <= took[0] <= 30.0, took[0]
            assert refused.value.reason == "members-unreachable"
            assert OPERATION_ID.match(refused.value.id), refused.value.id
            assert to_json(refused.value)["members"] == [
                {"member": member, "reason": "certification-unavailable"} for member in MEMBERS
            ]
            assert str(refused.value) == COLD_GROUP_REFUSAL
        else:
            with elapsed() as took:
                sent = await requester.endpoint.send(
                    ask(G, 120, ALL_GATHER), failure_delivery=FailureDelivery.INBOUND
                )
            assert SEND_WAIT - 0.5 <= took[0] <= 30.0, took[0]
            operation_id = sent.operation_id
            assert operation_id is not None
            assert OPERATION_ID.match(operation_id), operation_id
            failed = await requester.next_item(within=BOUND)
            assert isinstance(failed, OperationFailedItem), failed
            assert to_json(failed) == {
                "kind": "operationFailed",
                "id": operation_id,
                "to": G,
                "error": COLD_GROUP_REFUSAL,
            }

        # Nothing reached the members that are up, and the requester got nothing more.
        quiet = await asyncio.gather(
            *(party.nothing_within(QUIET_WINDOW) for party in (a, b, requester))
        )
        assert quiet == [None, None, None], quiet


async def test_a3_a_cold_group_with_a_stopped_member_fails_members_unreachable():
    # The returned refusal and its inbound repeat each run on fresh daemons (the scenario's
    # "G never used"), side by side: the 20 s send wait is spent once.
    async with asyncio.TaskGroup() as scenarios:
        scenarios.create_task(cold_group_with_a_stopped_member(FailureDelivery.RESULT))
        scenarios.create_task(cold_group_with_a_stopped_member(FailureDelivery.INBOUND))


async def test_a4_a_warm_group_with_a_stopped_member_still_gathers_with_it_no_answer():
    async with network_parties(NAMES) as (_, p):
        requester, a, b, c = (p[name] for name in NAMES)
        deadline = await measure_deadline(requester, [a, b, c])
        await c.close()
        await c.daemon.stop()
        assert not c.daemon.running

        with elapsed() as took:
            sent = await requester.endpoint.send(ask(G, deadline, ALL_GATHER))
        operation_id = sent.operation_id
        assert operation_id is not None
        assert took[0] < SEND_WAIT, took[0]
        requests = [await party.next_item() for party in (a, b)]
        first = requests[0]
        assert isinstance(first, CollectiveRequestItem), first
        assert first.id == operation_id
        assert requests[1] == first
        for party, slot in ((a, "tue"), (b, "mon")):
            answered = await party.endpoint.send(
                ResponseInput(to=G, response=Accept(content={"slot": slot}))
            )
            assert answered.operation_id == operation_id

        result = await requester.next_item(within=seconds_until(first.deadline_at) + RESULT_SLACK)
        assert now_ms() >= first.deadline_at - 100
        assert isinstance(result, CollectiveResultItem), result
        assert to_json(result) == expected_result(
            operation_id,
            {"kind": "answered", "content": {"slot": "tue"}},
            ANSWERED_MON,
            NO_ANSWER,
        )
        for party in (a, b):
            assert await party.next_item(within=BOUND) == result

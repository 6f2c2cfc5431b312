"""gather and all_gather across a 3-replica cluster (cluster.md §7, collectives.md §1.3–§1.6, §4).

Three in-process replicas on a real PostgreSQL behind a `RoundRobinProxy`; the requester
alice and the members bob and carol are homed on three different replicas
(`homes_support.homed_cluster`) and talk only through the project's Python client dialling the
proxy, each on its own connection. So the operation's row, its deadline timer and the
all_gather close run at alice's home, each member answers at its own home, and every request,
answer and close post is certified and delivered across replicas.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import harness_client
import pytest
from harness_client import (
    Accept,
    Answered,
    AskOperation,
    CollectiveError,
    CollectiveErrorKind,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    Decline,
    Declined,
    Endpoint,
    InboundDelivery,
    InboundItem,
    JsonValue,
    MemberResult,
    MessageInput,
    NoAnswer,
    ResponseInput,
)

from tests.integration.cluster.homes_support import (
    OWN_CONNECTION,
    HomedCluster,
    homed_cluster,
)
from tests.servers import PostgresServer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
]

BOUND: Final = 30.0
"""Seconds any single wait may take before the test fails (a deadline below is 4 s)."""

SHORT_DEADLINE: Final = 4
"""Seconds a collective that a member leaves unanswered waits: long enough for its requests
to certify across replicas first (a handful of round trips), short enough to wait out."""

LONG_DEADLINE: Final = 120
"""Seconds a collective every member answers may wait: it completes on the last answer."""

QUESTION: Final = "Which day works for the review?"
SCHEMA: Final[dict[str, JsonValue]] = {
    "type": "object",
    "properties": {"slot": {"type": "string", "enum": ["mon", "tue"]}},
    "required": ["slot"],
}
GROUP: Final = "group:alice,bob,carol"
NAMES: Final = ("alice", "bob", "carol")

Stream = AsyncGenerator[InboundDelivery, None]


@dataclass(frozen=True, slots=True)
class Party:
    """One agent's endpoint and its open stream."""

    endpoint: Endpoint
    stream: Stream

    async def next_item(self) -> InboundItem:
        """The next item, acknowledged."""
        delivery = await asyncio.wait_for(anext(self.stream), BOUND)
        await delivery.acknowledge()
        return delivery.item

    async def request(self) -> CollectiveRequestItem:
        item = await self.next_item()
        assert isinstance(item, CollectiveRequestItem), f"expected a request, got {item!r}"
        return item

    async def send(self, send_input: MessageInput | ResponseInput) -> harness_client.SendResult:
        return await asyncio.wait_for(self.endpoint.send(send_input), BOUND)


@dataclass(frozen=True, slots=True)
class Parties:
    cluster: HomedCluster
    alice: Party
    bob: Party
    carol: Party


@pytest.fixture
async def parties(postgres_server: PostgresServer, tmp_path: Path) -> AsyncIterator[Parties]:
    async with (
        homed_cluster(postgres_server, tmp_path, NAMES) as cluster,
        AsyncExitStack() as stack,
    ):
        homes = {cluster.home(name).address for name in NAMES}
        assert len(homes) == len({cluster.partition(name) for name in NAMES})
        opened: list[Party] = []
        for name in NAMES:
            endpoint = await stack.enter_async_context(
                await harness_client.connect(
                    cluster.address, token=cluster.tokens[name], options=OWN_CONNECTION
                )
            )
            stream = await stack.enter_async_context(aclosing(endpoint.messages()))
            opened.append(Party(endpoint, stream))
        yield Parties(cluster, *opened)


def ask(to: str, op: CollectiveOp, deadline: int) -> MessageInput:
    return MessageInput(
        to=to,
        text=QUESTION,
        collective=AskOperation(op=op, deadline=deadline, requested_schema=SCHEMA),
    )


async def test_a_gather_asked_on_one_replica_collects_answers_given_on_two_others(
    parties: Parties,
) -> None:
    asked = await parties.alice.send(ask(GROUP, CollectiveOp.GATHER, LONG_DEADLINE))

    assert asked.operation_id is not None
    to_bob, to_carol = await parties.bob.request(), await parties.carol.request()
    # A gather asks each member in its direct conversation with the requester.
    assert (to_bob.id, to_bob.to, to_bob.op) == (
        asked.operation_id,
        "agent:alice",
        CollectiveOp.GATHER,
    )
    assert (to_carol.id, to_carol.to) == (asked.operation_id, "agent:alice")
    answered = await parties.carol.send(ResponseInput(to=to_carol.to, response=Decline()))
    await parties.bob.send(ResponseInput(to=to_bob.to, response=Accept(content={"slot": "tue"})))

    assert answered.operation_id == asked.operation_id
    assert await parties.alice.next_item() == CollectiveResultItem(
        op=CollectiveOp.GATHER,
        id=asked.operation_id,
        to=GROUP,
        question=QUESTION,
        outcomes=(
            MemberResult(member="agent:bob", outcome=Answered(content={"slot": "tue"})),
            MemberResult(member="agent:carol", outcome=Declined()),
        ),
    )


async def test_a_gather_completes_at_its_deadline_at_the_requesters_home_with_no_answer_for_the_silent(
    parties: Parties,
) -> None:
    asked = await parties.alice.send(ask(GROUP, CollectiveOp.GATHER, SHORT_DEADLINE))
    to_bob, to_carol = await parties.bob.request(), await parties.carol.request()
    await parties.bob.send(ResponseInput(to=to_bob.to, response=Accept(content={"slot": "mon"})))

    # carol stays silent: the requester's home completes the gather at the deadline.
    assert await parties.alice.next_item() == CollectiveResultItem(
        op=CollectiveOp.GATHER,
        id=asked.operation_id or "",
        to=GROUP,
        question=QUESTION,
        outcomes=(
            MemberResult(member="agent:bob", outcome=Answered(content={"slot": "mon"})),
            MemberResult(member="agent:carol", outcome=NoAnswer()),
        ),
    )
    # carol's home judges her late answer by the request's own deadline.
    with pytest.raises(CollectiveError) as late:
        await parties.carol.send(ResponseInput(to=to_carol.to, response=Decline()))
    assert late.value.kind is CollectiveErrorKind.REQUEST_EXPIRED


async def test_an_all_gather_every_member_answers_gives_every_party_the_same_result(
    parties: Parties,
) -> None:
    asked = await parties.alice.send(ask(GROUP, CollectiveOp.ALL_GATHER, LONG_DEADLINE))
    to_bob, to_carol = await parties.bob.request(), await parties.carol.request()
    assert to_bob == to_carol
    assert (to_bob.id, to_bob.to, to_bob.op) == (asked.operation_id, GROUP, CollectiveOp.ALL_GATHER)

    await parties.bob.send(ResponseInput(to=GROUP, response=Accept(content={"slot": "tue"})))
    await parties.carol.send(ResponseInput(to=GROUP, response=Accept(content={"slot": "mon"})))

    expected = CollectiveResultItem(
        op=CollectiveOp.ALL_GATHER,
        id=asked.operation_id or "",
        to=GROUP,
        question=QUESTION,
        outcomes=(
            MemberResult(member="agent:bob", outcome=Answered(content={"slot": "tue"})),
            MemberResult(member="agent:carol", outcome=Answered(content={"slot": "mon"})),
        ),
    )
    # The requester's close crossed to both members' homes, each judged the same answers.
    for party in (parties.alice, parties.bob, parties.carol):
        assert await party.next_item() == expected


async def test_an_all_gather_closed_at_its_deadline_gives_every_party_no_answer_for_the_silent(
    parties: Parties,
) -> None:
    asked = await parties.alice.send(ask(GROUP, CollectiveOp.ALL_GATHER, SHORT_DEADLINE))
    await parties.bob.request()
    request = await parties.carol.request()
    await parties.bob.send(ResponseInput(to=GROUP, response=Decline()))

    expected = CollectiveResultItem(
        op=CollectiveOp.ALL_GATHER,
        id=asked.operation_id or "",
        to=GROUP,
        question=QUESTION,
        outcomes=(
            MemberResult(member="agent:bob", outcome=Declined()),
            MemberResult(member="agent:carol", outcome=NoAnswer()),
        ),
    )
    # The deadline fires at alice's home; its close lists bob's answer alone, and every
    # member's home applies it, the silent carol's too.
    for party in (parties.alice, parties.bob, parties.carol):
        assert await party.next_item() == expected
    with pytest.raises(CollectiveError) as late:
        await parties.carol.send(ResponseInput(to=request.to, response=Decline()))
    assert late.value.kind is CollectiveErrorKind.REQUEST_EXPIRED

"""An answer whose send gave up still settles (collectives.md §1.5): two daemons on one
in-process Router, the requester's daemon holding its commits back past the answer's
certification bound, so the answer's send answers `delivery-pending` and its post certifies
later, through the real `Network`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
from harness_contract.errors import SendError, SendErrorReason
from harness_contract.values import (
    Accept,
    Answered,
    AskOperation,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    MessageInput,
    ResponseInput,
)

from gateway.collectives.state import Request, RequestState
from gateway.store.memory import MemoryStore
from gateway.store.records import Write
from tests.support import eventually
from tests.unit.collectives.fakes import SCHEMA
from tests.unit.endpoint.support import QUICK, Daemon, daemon


class GatedStore(MemoryStore):
    """A `MemoryStore` whose commits wait while `gate` is an unset event: a daemon whose
    store holds its work back (its votes are not written, so they are not sent)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None

    async def apply(self, writes: Sequence[Write]) -> None:
        if self.gate is not None:
            await self.gate.wait()
        await super().apply(writes)


@pytest.fixture
async def two() -> AsyncIterator[tuple[Daemon, Daemon]]:
    async with daemon(GatedStore()) as first, daemon(beside=first) as second:
        yield first, second


async def requests_of(world: Daemon, agent_id: str) -> list[Request]:
    snapshot = await world.store.snapshot(agent_id)
    return [Request.from_row(row) for row in snapshot.received_requests]


async def test_an_answer_that_went_delivery_pending_is_answered_once_its_post_certifies(two):
    asking, asked = two
    alice = await asking.host("alice")
    bob = await asked.host("bob", timeouts=QUICK)
    await asking.start()
    await asked.start()
    asked_op = await alice.send(
        MessageInput(
            to="agent:bob",
            text="when?",
            collective=AskOperation(op=CollectiveOp.GATHER, deadline=60, requested_schema=SCHEMA),
        )
    )
    [request] = await eventually(lambda: asked.items(bob), lambda items: len(items) == 1)
    assert isinstance(request, CollectiveRequestItem)
    store = asking.store
    assert isinstance(store, GatedStore)
    store.gate = asyncio.Event()  # alice's daemon stops writing: her vote is held back

    with pytest.raises(SendError) as pending:
        await bob.send(ResponseInput(to="agent:alice", response=Accept(content={"slot": "tue"})))
    assert pending.value.send_reason is SendErrorReason.DELIVERY_PENDING
    [sending] = await requests_of(asked, bob.agent_id)
    assert sending.state is RequestState.SENDING
    store.gate.set()

    # The post certifies after the send gave up: the request is answered, durably.
    [answered] = await eventually(
        lambda: requests_of(asked, bob.agent_id),
        lambda requests: requests[0].state is RequestState.ANSWERED,
    )
    assert answered.id == asked_op.operation_id
    [result] = await eventually(lambda: asking.items(alice), lambda items: len(items) == 1)
    assert isinstance(result, CollectiveResultItem)
    assert [member.outcome for member in result.outcomes] == [Answered(content={"slot": "tue"})]

"""The stream slot's handover (`AgentInbox.open_stream`): a stream opened without `takeover`
while one is open waits, at most `handover_wait`, for it to end, and gets the slot when it
does; a stream that stays open still refuses the new one with `already-listening`."""

from __future__ import annotations

import asyncio

import pytest
from harness_contract.errors import ListenError, ListenErrorReason

from gateway.endpoint.inbox import AgentInbox, StreamEnded, StreamEndReason
from gateway.endpoint.inbox.coordinator import HANDOVER_WAIT
from gateway.store.memory import MemoryStore
from tests.unit.endpoint.inbox.support import (
    AGENT,
    Recorded,
    item,
    let_ready_tasks_run,
    within_bound,
)

SHORT_WAIT = 0.05
"""Seconds of handover in the tests of the refusal itself (the refusal waits this long)."""


def make_inbox(recorded: Recorded, *, handover_wait: float = HANDOVER_WAIT) -> AgentInbox:
    return AgentInbox(
        agent_id=AGENT,
        store=MemoryStore(),
        next_seq=1,
        window=4,
        observer=recorded.observer(),
        handover_wait=handover_wait,
    )


async def test_a_stream_opened_before_the_old_ones_cancellation_arrives_gets_the_slot():
    recorded = Recorded()
    inbox = make_inbox(recorded)
    old = await inbox.open_stream(takeover=False)
    token = await inbox.publish(item("unacknowledged"))
    assert (await within_bound(anext(old))).token == token

    reopening = asyncio.create_task(inbox.open_stream(takeover=False))
    await let_ready_tasks_run()
    assert not reopening.done(), "the new stream waits while the old one is open"
    old.close()  # the old call's cancellation, arriving after the new call
    new = await within_bound(reopening)

    assert inbox.listening
    replayed = await within_bound(anext(new))
    assert replayed.token == token
    assert recorded.opens == ["ok", "ok"]
    assert recorded.ends == [StreamEndReason.CLIENT_CLOSED]


async def test_a_stream_that_stays_open_refuses_the_new_one_after_the_wait():
    recorded = Recorded()
    inbox = make_inbox(recorded, handover_wait=SHORT_WAIT)
    first = await inbox.open_stream(takeover=False)

    with pytest.raises(ListenError) as raised:
        await within_bound(inbox.open_stream(takeover=False))

    assert raised.value.reason == ListenErrorReason.ALREADY_LISTENING
    assert first.ended is None
    token = await inbox.publish(item("still the first's"))
    assert (await within_bound(anext(first))).token == token
    assert recorded.opens == ["ok", "already-listening"]
    assert recorded.ends == []


async def test_a_take_over_during_the_wait_refuses_the_waiting_stream():
    recorded = Recorded()
    inbox = make_inbox(recorded, handover_wait=SHORT_WAIT)
    first = await inbox.open_stream(takeover=False)
    waiting = asyncio.create_task(inbox.open_stream(takeover=False))
    await let_ready_tasks_run()

    taker = await inbox.open_stream(takeover=True)

    with pytest.raises(ListenError) as raised:
        await within_bound(waiting)
    assert raised.value.reason == ListenErrorReason.ALREADY_LISTENING
    assert first.ended is StreamEndReason.TAKEN_OVER
    assert taker.ended is None
    assert inbox.listening
    assert recorded.opens == ["ok", "takeover", "already-listening"]


@pytest.mark.parametrize("reason", [StreamEndReason.SHUTDOWN, StreamEndReason.REVOKED])
async def test_the_gateway_ending_the_open_stream_refuses_the_waiting_one_for_the_same_reason(
    reason: StreamEndReason,
):
    recorded = Recorded()
    inbox = make_inbox(recorded)
    await inbox.open_stream(takeover=False)
    waiting = asyncio.create_task(inbox.open_stream(takeover=False))
    await let_ready_tasks_run()

    inbox.end_stream(reason)

    with pytest.raises(StreamEnded) as raised:
        await within_bound(waiting)
    assert raised.value.reason is reason
    assert not inbox.listening


async def test_a_cancelled_waiting_open_takes_no_slot():
    recorded = Recorded()
    inbox = make_inbox(recorded)
    first = await inbox.open_stream(takeover=False)
    waiting = asyncio.create_task(inbox.open_stream(takeover=False))
    await let_ready_tasks_run()

    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    first.close()

    assert not inbox.listening
    assert recorded.opens == ["ok"]


async def test_of_two_waiting_streams_the_first_gets_the_slot_and_the_other_waits_on():
    recorded = Recorded()
    inbox = make_inbox(recorded, handover_wait=SHORT_WAIT)
    old = await inbox.open_stream(takeover=False)
    one = asyncio.create_task(inbox.open_stream(takeover=False))
    await let_ready_tasks_run()
    other = asyncio.create_task(inbox.open_stream(takeover=False))
    await let_ready_tasks_run()

    old.close()

    winner = await within_bound(one)
    with pytest.raises(ListenError):
        await within_bound(other)
    assert winner.ended is None
    assert inbox.listening
    assert recorded.opens == ["ok", "ok", "already-listening"]


async def test_with_no_stream_open_a_stream_opens_at_once():
    recorded = Recorded()
    # A handover that could never end in time: opening must not wait for it.
    inbox = make_inbox(recorded, handover_wait=0)
    stream = await inbox.open_stream(takeover=False)
    stream.close()
    await inbox.open_stream(takeover=False)
    assert recorded.opens == ["ok", "ok"]

from __future__ import annotations

import asyncio

import pytest
from harness_contract.errors import DeliveryAcknowledgeErrorReason, ListenError
from harness_contract.values import InboundItem

from gateway.endpoint.inbox import AgentInbox, StreamEnded, StreamEndReason
from gateway.store.memory import MemoryStore
from tests.unit.endpoint.inbox.support import (
    AGENT,
    OTHER_AGENT,
    Recorded,
    item,
    let_ready_tasks_run,
    within_bound,
)


def make_inbox(window: int = 4, recorded: Recorded | None = None) -> tuple[AgentInbox, MemoryStore]:
    store = MemoryStore()
    observer = (recorded or Recorded()).observer()
    return AgentInbox(
        agent_id=AGENT, store=store, next_seq=1, window=window, observer=observer
    ), store


async def test_a_published_item_is_streamed_with_its_token():
    inbox, _ = make_inbox()
    token = await inbox.publish(item("one"))
    stream = await inbox.open_stream(takeover=False)
    delivery = await within_bound(anext(stream))
    assert delivery.token == token
    assert delivery.item == item("one")


async def test_a_waiting_stream_wakes_when_an_item_is_published():
    inbox, _ = make_inbox()
    stream = await inbox.open_stream(takeover=False)
    waiter = asyncio.create_task(within_bound(anext(stream)))
    await let_ready_tasks_run()
    assert not waiter.done()
    token = await inbox.publish(item("late"))
    assert (await waiter).token == token


async def test_a_prepared_item_reaches_the_stream_once_committed():
    inbox, _ = make_inbox()
    stream = await inbox.open_stream(takeover=False)
    waiter = asyncio.create_task(within_bound(anext(stream)))
    token, write = inbox.prepare(item("batched"))
    await inbox.commit([write])
    assert (await waiter).token == token


async def test_commit_assigns_sequences_in_commit_order_and_keeps_a_given_token():
    inbox, store = make_inbox()
    _, first = inbox.prepare(item("one"))
    token, second = inbox.prepare(item("two"), token="dlv_kept")
    assert token == second.token == "dlv_kept"
    # Prepared first, committed last: the sequence follows the commit, so a stream that
    # reads past its last sequence never skips an item committed late.
    await inbox.commit([second])
    await inbox.commit([first])
    rows = await store.unread(AGENT, 0, 10)
    assert [(row.seq, row.token) for row in rows] == [(1, "dlv_kept"), (2, first.token)]


def test_prepare_stamps_the_item_with_the_injected_clock():
    inbox = AgentInbox(
        agent_id=AGENT, store=MemoryStore(), next_seq=1, window=4, clock=lambda: 1_700_000_000.5
    )
    _, write = inbox.prepare(item("one"))
    assert write.created_at == 1_700_000_000.5


async def test_unacknowledged_items_replay_with_the_same_token_on_the_next_stream():
    recorded = Recorded()
    inbox, _ = make_inbox(recorded=recorded)
    first_token = await inbox.publish(item("one"))
    stream = await inbox.open_stream(takeover=False)
    first = await within_bound(anext(stream))
    stream.close()
    replay = await inbox.open_stream(takeover=False)
    again = await within_bound(anext(replay))
    assert again == first
    assert again.token == first_token
    assert recorded.replayed == ["multicast"]


async def test_the_offer_hook_set_on_the_inbox_sees_every_offer():
    inbox, _ = make_inbox()
    seen: list[tuple[int, InboundItem]] = []
    inbox.on_offer = lambda seq, offered: seen.append((seq, offered))
    assert inbox.on_offer is not None
    await inbox.publish(item("one"))
    stream = await inbox.open_stream(takeover=False)
    await within_bound(anext(stream))
    stream.close()
    await within_bound(anext(await inbox.open_stream(takeover=False)))
    assert seen == [(1, item("one")), (1, item("one"))]


async def test_an_acknowledged_item_never_comes_back():
    inbox, _ = make_inbox()
    await inbox.publish(item("one"))
    second = await inbox.publish(item("two"))
    stream = await inbox.open_stream(takeover=False)
    first = await within_bound(anext(stream))
    [result] = await inbox.acknowledge([first.token])
    assert result.error is None
    stream.close()
    replay = await inbox.open_stream(takeover=False)
    assert (await within_bound(anext(replay))).token == second


async def test_acknowledging_twice_is_not_an_error_and_unknown_tokens_are_reported():
    inbox, _ = make_inbox()
    token = await inbox.publish(item("one"))
    results = await inbox.acknowledge([token, token, "dlv_" + "B" * 43])
    assert [result.error for result in results] == [
        None,
        None,
        DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY,
    ]
    [again] = await inbox.acknowledge([token])
    assert again.error is None


async def test_another_agents_token_is_unknown_here():
    store = MemoryStore()
    alice = AgentInbox(agent_id=AGENT, store=store, next_seq=1, window=4)
    bob = AgentInbox(agent_id=OTHER_AGENT, store=store, next_seq=1, window=4)
    token = await bob.publish(item("for bob"))
    [result] = await alice.acknowledge([token])
    assert result.error is DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY
    assert (await store.inbox_item(bob.agent_id, token)) is not None


async def test_a_second_stream_is_refused_unless_it_takes_over():
    recorded = Recorded()
    inbox, _ = make_inbox(recorded=recorded)
    first = await inbox.open_stream(takeover=False)
    with pytest.raises(ListenError) as raised:
        await inbox.open_stream(takeover=False)
    assert raised.value.reason == "already-listening"
    second = await inbox.open_stream(takeover=True)
    with pytest.raises(ListenError):
        await within_bound(anext(first))
    token = await inbox.publish(item("x"))
    assert (await within_bound(anext(second))).token == token
    assert recorded.opens == ["ok", "already-listening", "takeover"]
    assert recorded.ends == [StreamEndReason.TAKEN_OVER]


async def test_closing_a_taken_over_stream_leaves_its_successor_listening():
    inbox, _ = make_inbox()
    first = await inbox.open_stream(takeover=False)
    await inbox.open_stream(takeover=True)
    first.close()
    assert inbox.listening


async def test_the_window_holds_the_rest_in_the_store_until_acknowledgments_free_slots():
    inbox, store = make_inbox(window=2)
    tokens = [await inbox.publish(item(str(index))) for index in range(5)]
    stream = await inbox.open_stream(takeover=False)
    got = [await within_bound(anext(stream)), await within_bound(anext(stream))]
    assert [delivery.token for delivery in got] == tokens[:2]
    assert inbox.window_full
    blocked = asyncio.create_task(within_bound(anext(stream)))
    await let_ready_tasks_run()
    assert not blocked.done()
    await inbox.acknowledge([tokens[0]])
    assert (await blocked).token == tokens[2]
    assert len(await store.unread(AGENT, 0, 100)) == 4


async def test_a_failed_acknowledgment_frees_no_slot():
    inbox, _ = make_inbox(window=1)
    await inbox.publish(item("one"))
    stream = await inbox.open_stream(takeover=False)
    await within_bound(anext(stream))
    await inbox.acknowledge(["dlv_" + "B" * 43])
    assert inbox.window_full


async def test_a_stream_ended_for_shutdown_raises_stream_ended():
    inbox, _ = make_inbox()
    stream = await inbox.open_stream(takeover=False)
    waiter = asyncio.create_task(within_bound(anext(stream)))
    await let_ready_tasks_run()
    inbox.end_stream(StreamEndReason.SHUTDOWN)
    with pytest.raises(StreamEnded) as raised:
        await waiter
    assert raised.value.reason is StreamEndReason.SHUTDOWN
    assert not inbox.listening
    assert not inbox.window_full


def test_ending_the_stream_of_an_inbox_that_has_none_does_nothing():
    inbox, _ = make_inbox()
    inbox.end_stream(StreamEndReason.REVOKED)
    assert not inbox.listening

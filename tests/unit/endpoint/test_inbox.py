from __future__ import annotations

import asyncio

import pytest

from gateway.contract.content import multicast_content
from gateway.contract.errors import DeliveryAcknowledgeErrorReason, ListenError
from gateway.contract.values import DirectMessage, MulticastItem
from gateway.endpoint.inbox import AgentInbox, StreamEnded, StreamEndReason
from gateway.store.memory import MemoryStore

AGENT = "agt_AAAAAAAAAAAAAAAAAAAAAA"
BOUND = 5.0


def item(text: str) -> MulticastItem:
    return MulticastItem(
        message=DirectMessage(
            post_id="pst_" + "A" * 43,
            address="agent:bob",
            sender="agent:bob",
            content=multicast_content(text)[:1],
        )
    )


def make_inbox(window: int = 4) -> tuple[AgentInbox, MemoryStore]:
    store = MemoryStore()
    return AgentInbox(agent_id=AGENT, store=store, next_seq=1, window=window), store


async def next_delivery(stream):
    return await asyncio.wait_for(stream.__anext__(), BOUND)


async def test_a_published_item_is_streamed_with_its_token():
    inbox, _ = make_inbox()
    token = await inbox.publish(item("one"))
    stream = inbox.open_stream(takeover=False)
    delivery = await next_delivery(stream)
    assert delivery.token == token
    assert delivery.item == item("one")


async def test_a_waiting_stream_wakes_when_an_item_is_published():
    inbox, _ = make_inbox()
    stream = inbox.open_stream(takeover=False)
    waiter = asyncio.create_task(next_delivery(stream))
    await asyncio.sleep(0)
    token = await inbox.publish(item("late"))
    assert (await waiter).token == token


async def test_unacknowledged_items_replay_with_the_same_token_on_the_next_stream():
    inbox, _ = make_inbox()
    first_token = await inbox.publish(item("one"))
    stream = inbox.open_stream(takeover=False)
    first = await next_delivery(stream)
    stream.close()
    replay = inbox.open_stream(takeover=False)
    again = await next_delivery(replay)
    assert again == first
    assert again.token == first_token


async def test_an_acknowledged_item_never_comes_back():
    inbox, _ = make_inbox()
    await inbox.publish(item("one"))
    second = await inbox.publish(item("two"))
    stream = inbox.open_stream(takeover=False)
    first = await next_delivery(stream)
    [result] = await inbox.acknowledge([first.token])
    assert result.error is None
    stream.close()
    replay = inbox.open_stream(takeover=False)
    assert (await next_delivery(replay)).token == second


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
    bob = AgentInbox(agent_id="agt_f39_f39_f39_f39_f39_fw", store=store, next_seq=1, window=4)
    token = await bob.publish(item("for bob"))
    [result] = await alice.acknowledge([token])
    assert result.error is DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY
    assert (await store.inbox_item(bob.agent_id, token)) is not None


async def test_a_second_stream_is_refused_unless_it_takes_over():
    inbox, _ = make_inbox()
    first = inbox.open_stream(takeover=False)
    with pytest.raises(ListenError) as raised:
        inbox.open_stream(takeover=False)
    assert raised.value.reason == "already-listening"
    second = inbox.open_stream(takeover=True)
    with pytest.raises(ListenError):
        await next_delivery(first)
    token = await inbox.publish(item("x"))
    assert (await next_delivery(second)).token == token


async def test_the_window_holds_the_rest_in_the_store_until_acknowledgments_free_slots():
    inbox, store = make_inbox(window=2)
    tokens = [await inbox.publish(item(str(index))) for index in range(5)]
    stream = inbox.open_stream(takeover=False)
    got = [await next_delivery(stream), await next_delivery(stream)]
    assert [delivery.token for delivery in got] == tokens[:2]
    blocked = asyncio.create_task(next_delivery(stream))
    for _ in range(20):  # let the stream run as far as it can without an acknowledgment
        await asyncio.sleep(0)
    assert not blocked.done()
    await inbox.acknowledge([tokens[0]])
    assert (await blocked).token == tokens[2]
    assert len(await store.unread(AGENT, 0, 100)) == 4


async def test_a_stream_ended_for_shutdown_raises_stream_ended():
    inbox, _ = make_inbox()
    stream = inbox.open_stream(takeover=False)
    waiter = asyncio.create_task(next_delivery(stream))
    await asyncio.sleep(0)
    inbox.end_stream(StreamEndReason.SHUTDOWN)
    with pytest.raises(StreamEnded) as raised:
        await waiter
    assert raised.value.reason is StreamEndReason.SHUTDOWN
    assert not inbox.listening

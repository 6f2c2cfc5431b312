from __future__ import annotations

import asyncio

import pytest
from harness_contract.errors import ListenError, ListenErrorReason

from gateway.endpoint.inbox.coordinator import AgentInbox
from gateway.endpoint.inbox.observer import StreamEndReason
from gateway.endpoint.inbox.offers import OfferTracker
from gateway.endpoint.inbox.reader import InboxReader, store_source
from gateway.endpoint.inbox.signal import InboxSignal
from gateway.endpoint.inbox.stream import MessageStream, StreamEnded
from gateway.endpoint.inbox.window import DeliveryWindow
from gateway.store.memory import MemoryStore
from tests.unit.endpoint.inbox.support import (
    AGENT,
    Recorded,
    item,
    let_ready_tasks_run,
    undecodable_row,
    within_bound,
)


class Parts:
    """A stream built from its parts, with a publisher sharing its store and signal."""

    def __init__(self, *, window: int = 4, next_seq: int = 1) -> None:
        self.store = MemoryStore()
        self.recorded = Recorded()
        self.signal = InboxSignal()
        self.window = DeliveryWindow(window)
        self.detached: list[MessageStream] = []
        self.offers = OfferTracker(self.recorded.observer())
        self.publisher = AgentInbox(agent_id=AGENT, store=self.store, next_seq=next_seq, window=1)
        self.stream = MessageStream(
            window=self.window,
            reader=InboxReader(store_source(self.store, AGENT)),
            signal=self.signal,
            offers=self.offers,
            observer=self.recorded.observer(),
            on_end=self.detached.append,
        )

    async def publish(self, text: str) -> str:
        token, write = self.publisher.prepare(item(text))
        await self.publisher.commit([write])
        self.signal.notify()
        return token


async def test_the_stream_yields_stored_items_in_inbox_order_and_holds_each_token():
    parts = Parts()
    tokens = [await parts.publish(text) for text in ("one", "two")]
    first = await within_bound(anext(parts.stream))
    second = await within_bound(anext(parts.stream))
    assert [first.token, second.token] == tokens
    assert first.item == item("one")
    assert parts.window.free == 2


async def test_a_stream_waiting_for_items_wakes_when_the_signal_moves():
    parts = Parts()
    waiter = asyncio.create_task(within_bound(anext(parts.stream)))
    await let_ready_tasks_run()
    assert not waiter.done()
    token = await parts.publish("late")
    assert (await waiter).token == token


async def test_a_full_window_keeps_the_next_item_in_the_store_until_a_slot_frees():
    parts = Parts(window=1)
    first, second = await parts.publish("one"), await parts.publish("two")
    assert (await within_bound(anext(parts.stream))).token == first
    waiter = asyncio.create_task(within_bound(anext(parts.stream)))
    await let_ready_tasks_run()
    assert not waiter.done()
    parts.window.release(first)
    assert (await waiter).token == second


async def test_a_stream_never_yields_a_token_twice_even_while_it_is_unacknowledged():
    parts = Parts(window=2)
    first = await parts.publish("one")
    assert (await within_bound(anext(parts.stream))).token == first
    waiter = asyncio.create_task(within_bound(anext(parts.stream)))
    await let_ready_tasks_run()
    assert not waiter.done()
    second = await parts.publish("two")
    assert (await waiter).token == second


async def test_a_row_that_does_not_decode_is_passed_over():
    parts = Parts(next_seq=2)
    await parts.store.apply([undecodable_row(1, "dlv_bad")])
    good = await parts.publish("good")
    assert (await within_bound(anext(parts.stream))).token == good
    assert parts.window.free == 3


async def test_every_offer_goes_through_the_offer_tracker():
    parts = Parts()
    seen: list[int] = []
    parts.offers.on_offer = lambda seq, offered: seen.append(seq)
    await parts.publish("one")
    await within_bound(anext(parts.stream))
    assert seen == [1]


async def test_ending_a_waiting_stream_wakes_it_with_stream_ended_and_its_reason():
    parts = Parts()
    waiter = asyncio.create_task(within_bound(anext(parts.stream)))
    await let_ready_tasks_run()
    parts.stream.end(StreamEndReason.SHUTDOWN)
    with pytest.raises(StreamEnded) as raised:
        await waiter
    assert raised.value.reason is StreamEndReason.SHUTDOWN
    assert parts.stream.ended is StreamEndReason.SHUTDOWN


async def test_a_stream_ended_by_a_takeover_raises_already_listening():
    parts = Parts()
    await parts.publish("one")
    parts.stream.end(StreamEndReason.TAKEN_OVER)
    with pytest.raises(ListenError) as raised:
        await within_bound(anext(parts.stream))
    assert raised.value.reason == ListenErrorReason.ALREADY_LISTENING


async def test_a_full_window_does_not_keep_an_ended_stream_waiting():
    parts = Parts(window=1)
    await parts.publish("one")
    await parts.publish("two")
    await within_bound(anext(parts.stream))
    waiter = asyncio.create_task(within_bound(anext(parts.stream)))
    await let_ready_tasks_run()
    parts.stream.close()
    with pytest.raises(StreamEnded) as raised:
        await waiter
    assert raised.value.reason is StreamEndReason.CLIENT_CLOSED


def test_only_the_first_end_is_counted_but_every_end_detaches():
    parts = Parts()
    parts.stream.end(StreamEndReason.REVOKED)
    parts.stream.close()
    assert parts.recorded.ends == [StreamEndReason.REVOKED]
    assert parts.stream.ended is StreamEndReason.REVOKED
    assert parts.detached == [parts.stream, parts.stream]

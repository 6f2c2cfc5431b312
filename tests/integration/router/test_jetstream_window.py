"""`FeedWindow` on its own (no server): what the contract suite cannot make a real stream do
on demand, such as evicting entries this process never read."""

from __future__ import annotations

import asyncio

import pytest

from gateway.router import POLL_HOLD, Batch, Cursor, Entry, FeedGap, RingSettings
from gateway.router.jetstream_window import FeedWindow, StoredEntry, WindowRetired, WindowState
from tests.unit.router.contract_suite import WAKE_BOUND, let_tasks_run
from tests.unit.router.fakes import agent_ids

INSTANCE = "rti_" + "A" * 22


def stored(order: int, recipients: tuple[str, ...], *, at: float = 1_000.0) -> StoredEntry:
    return StoredEntry(
        order=order,
        signed_envelope=f"envelope {order}".encode(),
        recipients=recipients,
        stored_at=at,
        stored_size=100,
    )


def window(start: int = 0, **limits: int) -> FeedWindow:
    return FeedWindow(instance_id=INSTANCE, limits=RingSettings(**limits), start=start)


async def test_a_window_starting_after_evicted_orders_gaps_below_its_start():
    (bob,) = agent_ids(1)
    feed = window(start=4)
    feed.append(stored(5, (bob,)))
    assert await feed.poll(frozenset({bob}), 3, hold=0) == FeedGap(instance_id=INSTANCE)
    batch = await feed.poll(frozenset({bob}), 4, hold=0)
    assert isinstance(batch, Batch)
    assert [entry.order for entry in batch.entries] == [5]
    with pytest.raises(ValueError, match="does not follow"):
        feed.append(stored(7, (bob,)))


async def test_a_blind_eviction_wakes_every_held_poll_with_a_feed_gap():
    alice, bob = agent_ids(2)
    feed = window()
    feed.append(stored(1, (alice,)))
    held = [
        asyncio.create_task(feed.poll(frozenset(recipients), 1, hold=POLL_HOLD))
        for recipients in ({bob}, set())
    ]
    try:
        await let_tasks_run()
        assert not any(task.done() for task in held)
        feed.evict_through(4)  # orders 2-4 left the stream unread: any could be bob's
        outcomes = await asyncio.wait_for(asyncio.gather(*held), WAKE_BOUND)
    finally:
        for task in held:
            task.cancel()
    assert outcomes == [FeedGap(instance_id=INSTANCE)] * 2
    assert (feed.tail, feed.greatest_evicted, len(feed)) == (4, 4, 0)
    feed.append(stored(5, (bob,)))
    batch = await feed.poll(frozenset({bob}), 4, hold=0)
    assert isinstance(batch, Batch)
    assert batch.entries == (Entry(order=5, signed_envelope=b"envelope 5", recipients=(bob,)),)


async def test_evicting_read_entries_passes_a_held_poll_without_a_gap():
    alice, bob = agent_ids(2)
    feed = window()
    feed.append(stored(1, (alice,)))
    feed.append(stored(2, (alice,)))
    held = asyncio.create_task(feed.poll(frozenset({bob}), 2, hold=0.05))
    try:
        await let_tasks_run()
        feed.evict_through(2)  # read entries, none for bob
        outcome = await asyncio.wait_for(held, WAKE_BOUND)
    finally:
        held.cancel()
    assert outcome == Batch(
        instance_id=INSTANCE, cursor=Cursor(instance_id=INSTANCE, order=2), entries=()
    )


async def test_entries_stored_before_the_cutoff_are_evicted_oldest_first():
    (bob,) = agent_ids(1)
    feed = window()
    for order, at in ((1, 10.0), (2, 20.0), (3, 30.0)):
        feed.append(stored(order, (bob,), at=at))
    feed.evict_stored_before(20.0)
    assert (feed.greatest_evicted, len(feed)) == (2, 1)
    assert await feed.poll(frozenset({bob}), 1, hold=0) == FeedGap(instance_id=INSTANCE)


async def test_the_ring_bounds_evict_but_never_the_entry_just_appended():
    (bob,) = agent_ids(1)
    feed = window(max_entries=2, max_bytes=10)
    for order in (1, 2, 3):
        feed.append(stored(order, (bob,)))
    assert (feed.greatest_evicted, len(feed)) == (2, 1)


async def test_waiting_for_the_tail_answers_when_it_is_reached_or_the_bound_passes():
    (bob,) = agent_ids(1)
    feed = window()
    waiting = asyncio.create_task(feed.wait_for_tail(2, WAKE_BOUND))
    await let_tasks_run()
    feed.append(stored(1, (bob,)))
    await let_tasks_run()
    assert not waiting.done()
    feed.append(stored(2, (bob,)))
    assert await asyncio.wait_for(waiting, WAKE_BOUND) is True
    assert await feed.wait_for_tail(3, 0.01) is False


@pytest.mark.parametrize("state", [WindowState.RETIRED, WindowState.CLOSED])
async def test_retiring_ends_held_polls_and_waits_with_window_retired(state):
    (bob,) = agent_ids(1)
    feed = window()
    held = asyncio.create_task(feed.poll(frozenset({bob}), 0, hold=POLL_HOLD))
    waiting = asyncio.create_task(feed.wait_for_tail(5, POLL_HOLD))
    try:
        await let_tasks_run()
        feed.retire(state)
        for task in (held, waiting):
            with pytest.raises(WindowRetired) as raised:
                await asyncio.wait_for(task, WAKE_BOUND)
            assert raised.value.state is state
    finally:
        held.cancel()
        waiting.cancel()
    feed.append(stored(1, (bob,)))  # ignored once retired
    assert feed.tail == 0

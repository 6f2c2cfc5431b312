from __future__ import annotations

import asyncio

from gateway.endpoint.inbox.signal import InboxSignal
from tests.unit.endpoint.inbox.support import let_ready_tasks_run, within_bound


def test_each_notify_advances_the_generation_by_one():
    signal = InboxSignal()
    assert signal.generation == 0
    signal.notify()
    signal.notify()
    assert signal.generation == 2


async def test_a_wait_returns_at_once_when_a_notify_came_after_the_generation_was_noted():
    signal = InboxSignal()
    seen = signal.generation
    signal.notify()
    await within_bound(signal.wait_past(seen))


async def test_a_wait_on_the_current_generation_blocks_until_the_next_notify():
    signal = InboxSignal()
    waiter = asyncio.create_task(signal.wait_past(signal.generation))
    await let_ready_tasks_run()
    assert not waiter.done()
    signal.notify()
    await within_bound(waiter)


async def test_one_notify_wakes_every_waiter():
    signal = InboxSignal()
    seen = signal.generation
    waiters = [asyncio.create_task(signal.wait_past(seen)) for _ in range(3)]
    await let_ready_tasks_run()
    signal.notify()
    await within_bound(asyncio.gather(*waiters))

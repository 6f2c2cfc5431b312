from __future__ import annotations

import asyncio

from gateway.endpoint.inbox.window import DeliveryWindow
from tests.unit.endpoint.inbox.support import let_ready_tasks_run, within_bound


def test_a_new_window_has_every_slot_free():
    window = DeliveryWindow(3)
    assert window.free == 3
    assert not window.full


def test_holding_as_many_tokens_as_the_size_fills_the_window():
    window = DeliveryWindow(2)
    window.hold("a")
    assert window.free == 1
    window.hold("b")
    assert window.full
    assert window.free == 0


def test_holding_the_same_token_twice_takes_one_slot():
    window = DeliveryWindow(2)
    window.hold("a")
    window.hold("a")
    assert window.free == 1


def test_releasing_a_token_the_window_does_not_hold_frees_nothing():
    window = DeliveryWindow(1)
    window.hold("a")
    window.release("b")
    assert window.full


async def test_waiting_for_space_returns_at_once_while_a_slot_is_free():
    window = DeliveryWindow(2)
    window.hold("a")
    await within_bound(window.wait_for_space())


async def test_a_wait_on_a_full_window_resumes_when_a_token_is_released():
    window = DeliveryWindow(1)
    window.hold("a")
    waiter = asyncio.create_task(window.wait_for_space())
    await let_ready_tasks_run()
    assert not waiter.done()
    window.release("a")
    await within_bound(waiter)
    assert window.free == 1


async def test_a_wait_on_a_full_window_ignores_a_release_of_a_token_it_does_not_hold():
    window = DeliveryWindow(1)
    window.hold("a")
    waiter = asyncio.create_task(window.wait_for_space())
    await let_ready_tasks_run()
    window.release("b")
    await let_ready_tasks_run()
    assert not waiter.done()
    window.release("a")
    await within_bound(waiter)

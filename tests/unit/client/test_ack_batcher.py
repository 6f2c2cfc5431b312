from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from harness_client import (
    DeliveryAcknowledgeError,
    DeliveryAcknowledgeErrorReason,
    EndpointClosedError,
)
from harness_client._acks import _AckBatcher

BOUND = 5.0


class Recorder:
    """A fake Acknowledge call: records batches and answers per token."""

    def __init__(self, failing: Sequence[str] = ()) -> None:
        self.batches: list[list[str]] = []
        self.failing = set(failing)
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, tokens: Sequence[str]) -> list[DeliveryAcknowledgeError | None]:
        await self.release.wait()
        self.batches.append(list(tokens))
        return [
            DeliveryAcknowledgeError(DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY)
            if token in self.failing
            else None
            for token in tokens
        ]


async def test_each_waiter_gets_its_own_tokens_result():
    recorder = Recorder(failing=["bad"])
    batcher = _AckBatcher(recorder, max_delay=0.0)
    try:
        good = asyncio.create_task(batcher.acknowledge("good"))
        bad = asyncio.create_task(batcher.acknowledge("bad"))
        await asyncio.wait_for(good, BOUND)
        with pytest.raises(DeliveryAcknowledgeError) as raised:
            await asyncio.wait_for(bad, BOUND)
        assert raised.value.reason is DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY
    finally:
        await batcher.close()


async def test_tokens_queued_together_share_one_call_of_at_most_the_batch_size():
    recorder = Recorder()
    recorder.release.clear()  # hold the first call so the rest queue up behind it
    batcher = _AckBatcher(recorder, max_batch=3, max_delay=0.0)
    try:
        waiters = [asyncio.create_task(batcher.acknowledge(f"t{n}")) for n in range(7)]
        for _ in range(5):
            await asyncio.sleep(0)
        recorder.release.set()
        await asyncio.wait_for(asyncio.gather(*waiters), BOUND)
        assert [token for batch in recorder.batches for token in batch] == [
            f"t{n}" for n in range(7)
        ]
        assert all(len(batch) <= 3 for batch in recorder.batches)
        assert len(recorder.batches) < 7
    finally:
        await batcher.close()


async def test_a_failed_call_fails_every_waiter_of_its_batch_as_transport_failed():
    async def broken(tokens: Sequence[str]) -> list[DeliveryAcknowledgeError | None]:
        raise DeliveryAcknowledgeError(DeliveryAcknowledgeErrorReason.TRANSPORT_FAILED)

    batcher = _AckBatcher(broken, max_delay=0.0)
    try:
        with pytest.raises(DeliveryAcknowledgeError) as raised:
            await asyncio.wait_for(batcher.acknowledge("t"), BOUND)
        assert raised.value.reason is DeliveryAcknowledgeErrorReason.TRANSPORT_FAILED
    finally:
        await batcher.close()


async def test_closing_fails_queued_waiters_and_refuses_new_ones():
    recorder = Recorder()
    recorder.release.clear()
    batcher = _AckBatcher(recorder, max_delay=0.0)
    waiter = asyncio.create_task(batcher.acknowledge("t"))
    await asyncio.sleep(0)
    await batcher.close()
    with pytest.raises(DeliveryAcknowledgeError):
        await asyncio.wait_for(waiter, BOUND)
    with pytest.raises(EndpointClosedError):
        await batcher.acknowledge("u")
    await batcher.close()  # idempotent


async def test_the_queue_is_bounded_and_a_full_queue_makes_the_caller_wait():
    recorder = Recorder()
    recorder.release.clear()
    batcher = _AckBatcher(recorder, max_batch=1, max_delay=0.0, max_queue=1)
    try:
        first = asyncio.create_task(batcher.acknowledge("a"))  # taken by the loop, held in flight
        for _ in range(3):
            await asyncio.sleep(0)
        second = asyncio.create_task(batcher.acknowledge("b"))  # fills the queue
        third = asyncio.create_task(batcher.acknowledge("c"))  # waits for room
        for _ in range(3):
            await asyncio.sleep(0)
        assert batcher._queue.full()
        recorder.release.set()
        await asyncio.wait_for(asyncio.gather(first, second, third), BOUND)
        assert recorder.batches == [["a"], ["b"], ["c"]]
    finally:
        await batcher.close()

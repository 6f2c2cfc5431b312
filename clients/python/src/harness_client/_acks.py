"""`_AckBatcher`: many `delivery.acknowledge()` waiters, few `Acknowledge` calls.

One call per delivery would cap throughput at a few thousand a second (operations.md §10);
the batcher sends up to `ACK_BATCH_MAX` tokens per call, or whatever it has once
`ACK_BATCH_DELAY` passed since the first token of the batch, and resolves each waiter with
its own token's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeAlias

from harness_contract.errors import DeliveryAcknowledgeError, DeliveryAcknowledgeErrorReason

from harness_client._errors import EndpointClosedError

logger = logging.getLogger(__name__)

ACK_BATCH_MAX: Final = 100
"""Most tokens in one `Acknowledge` call from the batcher (the server takes up to 1,000)."""
ACK_BATCH_DELAY: Final = 0.020
"""Seconds the batcher waits after a batch's first token for more, before sending it."""
ACK_QUEUE_MAX: Final = 10_000
"""Tokens waiting to be sent; when full, `acknowledge()` waits for room (backpressure on
the consumer, never an unbounded buffer)."""

SendBatch: TypeAlias = Callable[[Sequence[str]], Awaitable[list[DeliveryAcknowledgeError | None]]]
"""Sends one batch and returns one result per token (None: retired); raises
`DeliveryAcknowledgeError` `transport-failed` for the whole batch."""

_Waiter: TypeAlias = tuple[str, "asyncio.Future[None]"]


class _AckBatcher:
    """Batches acknowledgments; owns its one task, cancelled and awaited by `close()`."""

    def __init__(
        self,
        send_batch: SendBatch,
        *,
        max_batch: int = ACK_BATCH_MAX,
        max_delay: float = ACK_BATCH_DELAY,
        max_queue: int = ACK_QUEUE_MAX,
    ) -> None:
        self._send_batch = send_batch
        self._max_batch = max_batch
        self._max_delay = max_delay
        self._queue: asyncio.Queue[_Waiter] = asyncio.Queue(maxsize=max_queue)
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def acknowledge(self, token: str) -> None:
        """Queue `token` and wait for its result; raises `DeliveryAcknowledgeError`."""
        if self._closed:
            raise EndpointClosedError()
        if self._task is None:
            self._task = asyncio.create_task(self._ack_loop(), name="harness-ack-batcher")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put((token, waiter))
        await waiter

    async def close(self) -> None:
        """Stop the batcher; waiters still queued fail `transport-failed`. Idempotent."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while not self._queue.empty():
            _, waiter = self._queue.get_nowait()
            _fail(waiter)

    async def _ack_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            flush_at = loop.time() + self._max_delay
            while len(batch) < self._max_batch:
                if not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                    continue
                remaining = flush_at - loop.time()
                if remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), remaining))
                except TimeoutError:
                    break
            try:
                await self._flush(batch)
            except asyncio.CancelledError:
                for _, waiter in batch:
                    _fail(waiter)
                raise

    async def _flush(self, batch: list[_Waiter]) -> None:
        try:
            results = await self._send_batch([token for token, _ in batch])
        except DeliveryAcknowledgeError as error:
            for _, waiter in batch:
                if not waiter.done():
                    waiter.set_exception(error)
            return
        except Exception:
            logger.exception("acknowledge batch failed")
            for _, waiter in batch:
                _fail(waiter)
            return
        for (_, waiter), result in zip(batch, results, strict=True):
            if waiter.done():  # the caller stopped waiting
                continue
            if result is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(result)


def _fail(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(
            DeliveryAcknowledgeError(DeliveryAcknowledgeErrorReason.TRANSPORT_FAILED)
        )

"""`MessageStream`: one open `Messages` stream, an async iterator of deliveries in inbox order.

The stream owns its lifetime and coordinates its parts through their own interfaces: it waits
for a slot in its `DeliveryWindow`, has its `InboxReader` read the next page past the window,
waits on the inbox's `InboxSignal` when the store has nothing more, tells the `OfferTracker`
before it yields, and holds the token in the window until an acknowledgment releases it. It
never yields a token twice. Ending it (client gone, takeover, revocation, shutdown) wakes any
wait and makes the next step raise, and wakes a new stream of the agent waiting for this one
to end (`wait_ended`, the coordinator's handover).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from harness_contract.errors import ListenError, ListenErrorReason
from harness_contract.values import Delivery

from gateway.endpoint.inbox.observer import InboxObserver, StreamEndReason
from gateway.endpoint.inbox.offers import OfferTracker
from gateway.endpoint.inbox.reader import DeliverRequest, InboxReader
from gateway.endpoint.inbox.signal import InboxSignal
from gateway.endpoint.inbox.window import DeliveryWindow


class StreamEnded(Exception):
    """Raised from a stream that the gateway ended; `reason` says why."""

    def __init__(self, reason: StreamEndReason) -> None:
        super().__init__(reason.value)
        self.reason = reason


class MessageStream:
    """One open `Messages` stream: an async iterator of deliveries in inbox order."""

    def __init__(
        self,
        *,
        window: DeliveryWindow,
        reader: InboxReader,
        signal: InboxSignal,
        offers: OfferTracker,
        observer: InboxObserver,
        on_end: Callable[[MessageStream], None],
    ) -> None:
        self.window = window
        self._reader = reader
        self._signal = signal
        self._offers = offers
        self._observer = observer
        self._on_end = on_end
        self._ended: StreamEndReason | None = None
        self._end_event = asyncio.Event()
        self._waiting: asyncio.Future[None] | None = None
        """The wait in progress (`_until`), which `end` cancels."""

    @property
    def ended(self) -> StreamEndReason | None:
        """Why the gateway ended this stream, or None while it runs."""
        return self._ended

    def end(self, reason: StreamEndReason) -> None:
        """End the stream; its iterator raises at the next step. Only the first reason counts."""
        if self._ended is None:
            self._ended = reason
            self._end_event.set()
            if self._waiting is not None:
                self._waiting.cancel()
            self._observer.on_stream_end(reason)
        self._on_end(self)

    def close(self) -> None:
        """The client went away: release the agent's stream slot."""
        self.end(StreamEndReason.CLIENT_CLOSED)

    async def wait_ended(self) -> StreamEndReason:
        """Wait until the stream ends (at once if it has) and return why.

        The agent's stream slot is released by then: `end` detaches the stream before
        any waiter runs."""
        await self._end_event.wait()
        assert self._ended is not None
        return self._ended

    def __aiter__(self) -> MessageStream:
        return self

    async def __anext__(self) -> Delivery:
        while True:
            self._raise_if_ended()
            request = self._reader.take()
            if request is None:
                request = await self._read_more()
                if request is None:
                    continue
            self._offers.offer(request.seq, request.delivery.item)
            self.window.hold(request.delivery.token)
            return request.delivery

    async def _read_more(self) -> DeliverRequest | None:
        """Wait for a free slot and read the next page; None after waiting for new items."""
        if self.window.full:  # a wait costs a task: only when there is one to wait for
            await self._until(self.window.wait_for_space())
        self._raise_if_ended()
        # Noted before the read: an item committed while the store reads moves the generation,
        # so the wait below returns instead of missing it.
        generation = self._signal.generation
        if await self._reader.read_page(self.window.free):
            return self._reader.take()
        if self._signal.generation == generation:
            await self._until(self._signal.wait_past(generation))
        return None

    def _raise_if_ended(self) -> None:
        if self._ended is None:
            return
        if self._ended is StreamEndReason.TAKEN_OVER:
            raise ListenError(ListenErrorReason.ALREADY_LISTENING)
        raise StreamEnded(self._ended)

    async def _until(self, awaitable: Awaitable[None]) -> None:
        """Await `awaitable` unless the stream ends first (`end` cancels the wait)."""
        waiter = asyncio.ensure_future(awaitable)
        if self._ended is not None:
            waiter.cancel()
        self._waiting = waiter
        try:
            await waiter
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._ended is None or (current is not None and current.cancelling()):
                raise  # the caller itself was cancelled, not the wait by `end`
        finally:
            self._waiting = None
            if not waiter.done():
                waiter.cancel()

"""The client side of a `Messages` stream: `_StreamLoop` and its `_ReplayFilter`.

The loop keeps one stream open: it reconnects with jittered backoff (0.2 s doubling to 1 s),
each attempt waiting for the channel to connect, so a stream is back within about a second
of the gateway (or a replica) answering again however long it was away. It takes over its
own stream once it has held one (the old one may be half-open on the server), skips replays
of tokens this iterator already yielded, and reports the `ConnectionState`. It never gives up
on its own: `already-listening`, a typed refusal no retry can change (a revoked token), the
endpoint's close, or the caller's bound (`give_up_after`, then `transport-failed`) ends it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from typing import Final, Protocol, TypeAlias

import grpc
from harness_contract._gen.harness.v1 import endpoint_pb2
from harness_contract.errors import HarnessError, ListenError, ListenErrorReason

from harness_client._connection import ConnectionState
from harness_client._errors import EndpointClosedError, decode_status
from harness_client._items import InboundDelivery
from harness_client._retry import Backoff, should_reconnect

logger = logging.getLogger(__name__)

REPLAY_MEMORY: Final = 65_536
"""Tokens a `messages()` iterator remembers having yielded, oldest forgotten first.

The gateway replays only unacknowledged items, at most a stream window (256 by default)
of them, so this bound is far above what a replay can reach."""

STREAM_OPEN_METADATA: Final = ("harness-stream", "open")
"""The initial metadata by which the gateway says the stream holds the agent's slot."""

MessagesCall: TypeAlias = (
    "grpc.aio.UnaryStreamCall[endpoint_pb2.MessagesRequest, endpoint_pb2.MessagesResponse]"
)
"""One `Messages` call."""


class CallRoute(Protocol):
    """What a call reports to the channel it went through (`_channel.Via`)."""

    def observe(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> None:
        """The call was answered with this initial metadata."""

    def failed(self, failure: HarnessError) -> None:
        """The call failed with `failure`."""


OpenCall = Callable[[bool], tuple[MessagesCall, CallRoute]]
"""Opens one `Messages` call, and says which route it took; the argument is `takeover`."""


class _ReplayFilter:
    """The tokens one iterator yielded, bounded by `capacity` (oldest dropped)."""

    def __init__(self, capacity: int = REPLAY_MEMORY) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[str, None] = OrderedDict()

    def first_time(self, token: str) -> bool:
        """Remember `token`; False when it was yielded before (a replay to skip)."""
        if token in self._seen:
            return False
        self._seen[token] = None
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        return True


class _StreamLoop:
    """One `messages()` iterator's lifetime: open, read, report, reconnect."""

    def __init__(
        self,
        *,
        open_call: OpenCall,
        decode: Callable[[endpoint_pb2.MessagesResponse], InboundDelivery],
        takeover: bool,
        is_closed: Callable[[], bool],
        report: Callable[[ConnectionState], None] = lambda state: None,
        give_up_after: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._open_call = open_call
        self._decode = decode
        self._takeover = takeover
        self._is_closed = is_closed
        self._report = report
        self._give_up_after = give_up_after
        self._clock = clock
        self._sleep = sleep
        self._backoff = Backoff()
        self._replay = _ReplayFilter()
        self._held_stream = False

    async def deliveries(self) -> AsyncGenerator[InboundDelivery, None]:
        """Deliveries in inbox order, each token at most once."""
        run = self._run()
        try:
            async for delivery in run:
                yield delivery
        finally:
            # Now, not when the collector finds it: closing `run` cancels the open call, so
            # the gateway frees the agent's stream slot for the next `messages()`.
            await run.aclose()
            # Ended by the caller, a typed refusal or the bound: no stream is open, and the
            # next `messages()` opens one (a close has already reported CLOSED, which stays).
            self._report(ConnectionState.CONNECTING)

    async def _run(self) -> AsyncGenerator[InboundDelivery, None]:
        last_stream = self._clock()
        while True:
            if self._is_closed():
                raise EndpointClosedError()
            call, route = self._open_call(self._takeover or self._held_stream)
            opened = False
            try:
                metadata = await self._headers(call, last_stream)
                route.observe(metadata)
                if STREAM_OPEN_METADATA in tuple(metadata or ()):
                    opened = self._opened()
                async for response in call:
                    if not opened:
                        # A gateway that sends no `harness-stream` header is open once it
                        # delivers.
                        opened = self._opened()
                    delivery = self._decode(response)
                    if self._replay.first_time(delivery.token):
                        yield delivery
            except grpc.aio.AioRpcError as error:
                failure = decode_status(error)
                route.failed(failure)
                if self._is_closed():
                    raise EndpointClosedError() from None
                if not should_reconnect(failure):
                    raise failure from None
                logger.debug("stream lost reason=%s", failure.reason)
            finally:
                call.cancel()
                if opened:
                    last_stream = self._clock()
            if self._held_stream:
                self._report(ConnectionState.RECONNECTING)
            self._check_bound(last_stream)
            await self._sleep(self._backoff.next_delay())

    async def _headers(self, call: MessagesCall, last_stream: float) -> grpc.aio.Metadata | None:
        """The call's initial metadata; it waits for the channel to connect, bounded only by
        the caller's `give_up_after`."""
        if self._give_up_after is None:
            return await call.initial_metadata()
        left = self._give_up_after - (self._clock() - last_stream)
        try:
            return await asyncio.wait_for(call.initial_metadata(), max(0.0, left))
        except TimeoutError:
            raise ListenError(ListenErrorReason.TRANSPORT_FAILED) from None

    def _opened(self) -> bool:
        self._held_stream = True
        self._backoff.reset()
        self._report(ConnectionState.READY)
        logger.debug("stream open")
        return True

    def _check_bound(self, last_stream: float) -> None:
        """`transport-failed` once the caller's bound passed without a stream."""
        if self._give_up_after is None:
            return
        if self._clock() - last_stream > self._give_up_after:
            raise ListenError(ListenErrorReason.TRANSPORT_FAILED)

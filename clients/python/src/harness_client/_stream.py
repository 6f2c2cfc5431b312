"""The client side of a `Messages` stream: `_StreamLoop` and its `_ReplayFilter`.

The loop keeps one stream open: it reconnects with jittered backoff (0.2 s doubling to
10 s), takes over its own stream once it has held one (the old one may be half-open on the
server), and skips replays of tokens this iterator already yielded. `already-listening`, a
typed refusal, or 5 minutes without a stream (`transport-failed`) ends it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable
from typing import Final

import grpc
from harness_contract._gen.harness.v1 import endpoint_pb2
from harness_contract.errors import ListenError, ListenErrorReason

from harness_client._errors import EndpointClosedError, decode_status
from harness_client._items import InboundDelivery
from harness_client._retry import Backoff, should_reconnect

logger = logging.getLogger(__name__)

REPLAY_MEMORY: Final = 65_536
"""Tokens a `messages()` iterator remembers having yielded, oldest forgotten first.

The gateway replays only unacknowledged items, at most a stream window (256 by default)
of them, so this bound is far above what a replay can reach."""

LISTEN_GIVE_UP: Final = 300.0
"""Seconds without an open stream after which `messages()` raises `transport-failed`."""

STREAM_OPEN_METADATA: Final = ("harness-stream", "open")
"""The initial metadata by which the gateway says the stream holds the agent's slot."""

OpenCall = Callable[
    [bool], "grpc.aio.UnaryStreamCall[endpoint_pb2.MessagesRequest, endpoint_pb2.MessagesResponse]"
]
"""Opens one `Messages` call; the argument is `takeover`."""


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
    """One `messages()` iterator's lifetime: open, read, reconnect, give up."""

    def __init__(
        self,
        *,
        open_call: OpenCall,
        decode: Callable[[endpoint_pb2.MessagesResponse], InboundDelivery],
        takeover: bool,
        is_closed: Callable[[], bool],
        give_up_after: float = LISTEN_GIVE_UP,
    ) -> None:
        self._open_call = open_call
        self._decode = decode
        self._takeover = takeover
        self._is_closed = is_closed
        self._give_up_after = give_up_after
        self._backoff = Backoff()
        self._replay = _ReplayFilter()
        self._held_stream = False

    async def deliveries(self) -> AsyncGenerator[InboundDelivery, None]:
        """Deliveries in inbox order, each token at most once."""
        last_stream = time.monotonic()
        while True:
            if self._is_closed():
                raise EndpointClosedError()
            call = self._open_call(self._takeover or self._held_stream)
            opened = False
            try:
                metadata = await call.initial_metadata()
                opened = STREAM_OPEN_METADATA in tuple(metadata or ())
                if opened:
                    self._held_stream = True
                    self._backoff.reset()
                    logger.debug("stream open")
                async for response in call:
                    delivery = self._decode(response)
                    if self._replay.first_time(delivery.token):
                        yield delivery
            except grpc.aio.AioRpcError as error:
                failure = decode_status(error)
                if self._is_closed():
                    raise EndpointClosedError() from None
                if not should_reconnect(failure):
                    raise failure from None
                logger.debug("stream lost reason=%s", failure.reason)
            finally:
                call.cancel()
                if opened:
                    last_stream = time.monotonic()
            if time.monotonic() - last_stream > self._give_up_after:
                raise ListenError(ListenErrorReason.TRANSPORT_FAILED)
            await asyncio.sleep(self._backoff.next_delay())

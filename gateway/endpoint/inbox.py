"""One agent's durable inbox: publishing items, the `Messages` stream, and acknowledgments.

engine.md §7. An item is durable before it is streamed; one stream per agent (a second one
fails `already-listening` unless it takes over, which ends the old one); a stream never
yields a token twice and holds at most `window` unacknowledged items, the rest waiting in
the store, not in memory; every new stream, also after a restart, replays all unacknowledged
items with identical tokens and items. Acknowledge retires items by token, one result each.

The stream is small pieces under one coordinator (house style 7): `MessageStream` owns the
lifetime, its `DeliveryWindow` counts unacknowledged slots, `_read_page` reads past the window
from the store, and `AgentInbox.acknowledge` applies acknowledgments and frees slots.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from gateway.contract.codec import (
    CodecError,
    item_from_json,
    item_to_json,
    local_guidance_from_json,
    local_guidance_to_json,
)
from gateway.contract.errors import (
    DeliveryAcknowledgeErrorReason,
    ListenError,
    ListenErrorReason,
)
from gateway.contract.guidance import LocalGuidance
from gateway.contract.ids import RandomId
from gateway.contract.jsonvalue import JsonValueError, canonical_json, parse_canonical_json
from gateway.contract.values import (
    CollectiveRequestItem,
    CollectiveResultItem,
    Delivery,
    InboundItem,
    MulticastItem,
    OperationFailedItem,
)
from gateway.store.errors import StoreError
from gateway.store.port import Store
from gateway.store.records import (
    AcknowledgeItem,
    InboxRow,
    InboxState,
    PutInboxItem,
    Write,
    inbox_tombstone,
)

logger = logging.getLogger(__name__)

ACKNOWLEDGE_MAX_TOKENS: Final = 1_000
"""Most tokens one `Acknowledge` call may carry (operations.md §3)."""


class StreamEndReason(enum.StrEnum):
    """Why a `Messages` stream ended (the `harness_stream_ends_total` reasons)."""

    CLIENT_CLOSED = "client-closed"
    """The client cancelled the call."""
    TAKEN_OVER = "taken-over"
    """A new stream asked to take over; this one ends with `already-listening`."""
    REVOKED = "revoked"
    """The agent's token was revoked or rotated."""
    SHUTDOWN = "shutdown"
    """The gateway is shutting down; the client reconnects and replays."""
    ERROR = "error"
    """An unexpected failure (logged)."""


class StreamEnded(Exception):
    """Raised from a stream that the gateway ended; `reason` says why."""

    def __init__(self, reason: StreamEndReason) -> None:
        super().__init__(reason.value)
        self.reason = reason


@dataclass(frozen=True, slots=True, kw_only=True)
class AcknowledgeResult:
    """One token's result: `error` is None when the item is (or already was) retired."""

    token: str
    error: DeliveryAcknowledgeErrorReason | None


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxObserver:
    """Metrics hooks of an inbox and its streams."""

    on_stream_open: Callable[[str], None] = lambda result: None
    """`ok`, `takeover` or `already-listening`."""
    on_stream_end: Callable[[StreamEndReason], None] = lambda reason: None
    on_replayed: Callable[[str], None] = lambda item: None
    on_acknowledged: Callable[[str], None] = lambda item: None
    on_acknowledge_result: Callable[[str], None] = lambda result: None


NULL_INBOX_OBSERVER: Final = InboxObserver()


class DeliveryWindow:
    """Tokens a stream yielded and the client has not acknowledged, bounded by `size`."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._outstanding: set[str] = set()
        self._freed = asyncio.Event()

    @property
    def full(self) -> bool:
        """True when the stream must wait for acknowledgments."""
        return len(self._outstanding) >= self.size

    @property
    def free(self) -> int:
        """Slots left."""
        return max(0, self.size - len(self._outstanding))

    def hold(self, token: str) -> None:
        """A token was yielded."""
        self._outstanding.add(token)

    def release(self, token: str) -> None:
        """A token was acknowledged."""
        if token in self._outstanding:
            self._outstanding.discard(token)
            self._freed.set()

    async def wait_for_space(self) -> None:
        """Wait until a slot frees up."""
        while self.full:
            self._freed.clear()
            await self._freed.wait()


class AgentInbox:
    """The inbox of one hosted agent."""

    def __init__(
        self,
        *,
        agent_id: str,
        store: Store,
        next_seq: int,
        window: int,
        observer: InboxObserver = NULL_INBOX_OBSERVER,
    ) -> None:
        self.agent_id = agent_id
        self.observer = observer
        self._offered_seq = 0
        self._store = store
        self._next_seq = next_seq
        self._window = window
        self._generation = 0
        self._changed = asyncio.Event()
        self._stream: MessageStream | None = None
        self.on_offer: Callable[[int, InboundItem], None] | None = None
        """Called with (sequence, item) before an item is offered on a stream."""

    # --- publishing --------------------------------------------------------------------

    def prepare(
        self,
        item: InboundItem,
        guidance: LocalGuidance | None = None,
        *,
        token: str | None = None,
    ) -> tuple[str, PutInboxItem]:
        """Assign the next inbox sequence to an item and return (token, its write).

        The caller commits the write (possibly with others); `notify()` after the commit
        wakes the stream. A token is minted unless the item keeps a delivery's token."""
        token = token or RandomId.DELIVERY.mint()
        write = PutInboxItem(
            agent_id=self.agent_id,
            seq=self._next_seq,
            token=token,
            item=canonical_json(item_to_json(item)),
            guidance=None if guidance is None else canonical_json(local_guidance_to_json(guidance)),
            created_at=time.time(),
        )
        self._next_seq += 1
        return token, write

    async def publish(
        self, item: InboundItem, guidance: LocalGuidance | None = None, *, token: str | None = None
    ) -> str:
        """Make one item durable under a (fresh) token and offer it."""
        token, write = self.prepare(item, guidance, token=token)
        await self._store.apply([write])
        self.notify()
        return token

    def notify(self) -> None:
        """New items are durable: wake the stream."""
        self._generation += 1
        self._changed.set()

    @property
    def listening(self) -> bool:
        """True while a stream is open."""
        return self._stream is not None

    # --- streams -----------------------------------------------------------------------

    def open_stream(self, *, takeover: bool) -> MessageStream:
        """Open the agent's one stream; `takeover` ends an existing one first.

        Raises `ListenError` `already-listening` when a stream is open and `takeover` is
        false."""
        result = "ok"
        if self._stream is not None:
            if not takeover:
                self.observer.on_stream_open("already-listening")
                raise ListenError(ListenErrorReason.ALREADY_LISTENING)
            self._stream.end(StreamEndReason.TAKEN_OVER)
            result = "takeover"
        stream = MessageStream(self, DeliveryWindow(self._window))
        self._stream = stream
        self.observer.on_stream_open(result)
        return stream

    @property
    def window_full(self) -> bool:
        """True while the open stream waits for acknowledgments."""
        return self._stream is not None and self._stream.window.full

    def end_stream(self, reason: StreamEndReason) -> None:
        """End the open stream, if any (shutdown, revocation)."""
        if self._stream is not None:
            self._stream.end(reason)

    def _detach(self, stream: MessageStream) -> None:
        if self._stream is stream:
            self._stream = None

    async def _wait_for_items(self, seen_generation: int) -> None:
        while self._generation == seen_generation:
            self._changed.clear()
            await self._changed.wait()

    # --- acknowledgment ----------------------------------------------------------------

    async def acknowledge(self, tokens: Sequence[str]) -> list[AcknowledgeResult]:
        """Retire items by token, one result per token in order (engine.md §7).

        Unknown tokens (another agent's included) are `unknown-delivery`; a replaced item is
        `delivery-conflict`; acknowledging again succeeds; a store failure is
        `persistence-failed` for every token it touched (the items stay, retry)."""
        rows: dict[str, InboxRow | None] = {}
        try:
            # One read for the whole call (the client batches acknowledgments).
            found = await self._store.inbox_items(self.agent_id, list(dict.fromkeys(tokens)))
            for token in dict.fromkeys(tokens):
                rows[token] = found.get(token)
        except StoreError:
            logger.exception("acknowledge read failed")
            return [
                AcknowledgeResult(
                    token=token, error=DeliveryAcknowledgeErrorReason.PERSISTENCE_FAILED
                )
                for token in tokens
            ]
        writes: list[Write] = [
            AcknowledgeItem(
                agent_id=self.agent_id, token=token, tombstone=inbox_tombstone(row.item)
            )
            for token, row in rows.items()
            if row is not None and row.state is InboxState.UNREAD
        ]
        failed = False
        if writes:
            try:
                await self._store.apply(writes)
            except StoreError:
                logger.exception("acknowledge write failed")
                failed = True
        results = []
        for token in tokens:
            row = rows[token]
            error: DeliveryAcknowledgeErrorReason | None
            if row is None:
                error = DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY
            elif row.state is InboxState.REPLACED:
                error = DeliveryAcknowledgeErrorReason.DELIVERY_CONFLICT
            elif failed and row.state is InboxState.UNREAD:
                error = DeliveryAcknowledgeErrorReason.PERSISTENCE_FAILED
            else:
                error = None
                if self._stream is not None:
                    self._stream.window.release(token)
            if error is None and row is not None and row.state is InboxState.UNREAD:
                self.observer.on_acknowledged(_item_kind(row.item))
                # The same token twice in one call is retired (and counted) once.
                rows[token] = replace(row, state=InboxState.ACKNOWLEDGED)
            self.observer.on_acknowledge_result("ok" if error is None else error.value)
            results.append(AcknowledgeResult(token=token, error=error))
        return results

    def _offer(self, seq: int, item: InboundItem) -> None:
        if seq <= self._offered_seq:
            self.observer.on_replayed(_item_kind_of(item))
        else:
            self._offered_seq = seq
        if self.on_offer is not None:
            self.on_offer(seq, item)


STREAM_PAGE: Final = 64
"""Inbox rows read from the store at a time (never more than the window's free slots)."""


class MessageStream:
    """One open `Messages` stream: an async iterator of deliveries in inbox order."""

    def __init__(self, inbox: AgentInbox, window: DeliveryWindow) -> None:
        self._inbox = inbox
        self.window = window
        self._last_seq = 0
        self._page: list[InboxRow] = []
        self._ended: StreamEndReason | None = None
        self._end_event = asyncio.Event()

    @property
    def ended(self) -> StreamEndReason | None:
        """Why the gateway ended this stream, or None while it runs."""
        return self._ended

    def end(self, reason: StreamEndReason) -> None:
        """End the stream; its iterator raises at the next step."""
        if self._ended is None:
            self._ended = reason
            self._end_event.set()
            self._inbox.observer.on_stream_end(reason)
        self._inbox._detach(self)

    def close(self) -> None:
        """The client went away: release the agent's stream slot."""
        self.end(StreamEndReason.CLIENT_CLOSED)

    def __aiter__(self) -> MessageStream:
        return self

    async def __anext__(self) -> Delivery:
        while True:
            self._raise_if_ended()
            if not self._page:
                await self._until(self.window.wait_for_space())
                self._raise_if_ended()
                generation = self._inbox._generation
                rows = await self._inbox._store.unread(
                    self._inbox.agent_id,
                    self._last_seq,
                    min(STREAM_PAGE, self.window.free),
                )
                if not rows:
                    await self._until(self._inbox._wait_for_items(generation))
                    continue
                self._page = rows
            row = self._page.pop(0)
            self._last_seq = row.seq
            delivery = _decode(row)
            if delivery is None:
                continue
            self._inbox._offer(row.seq, delivery.item)
            self.window.hold(row.token)
            return delivery

    def _raise_if_ended(self) -> None:
        if self._ended is None:
            return
        if self._ended is StreamEndReason.TAKEN_OVER:
            raise ListenError(ListenErrorReason.ALREADY_LISTENING)
        raise StreamEnded(self._ended)

    async def _until(self, awaitable: Awaitable[None]) -> None:
        """Await `awaitable` unless the stream ends first."""
        waiter = asyncio.ensure_future(awaitable)
        ender = asyncio.ensure_future(self._end_event.wait())
        try:
            await asyncio.wait({waiter, ender}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiter, ender):
                if not task.done():
                    task.cancel()
            await asyncio.gather(waiter, ender, return_exceptions=True)


def _item_kind(item: bytes) -> str:
    """The top-level `kind` of a stored item (for metrics)."""
    try:
        value = parse_canonical_json(item)
    except JsonValueError:
        return "multicast"
    kind = value.get("kind") if isinstance(value, dict) else None
    if kind in ("multicast", "collectiveRequest", "collectiveResult", "operationFailed"):
        return str(kind)
    return "multicast"


def _item_kind_of(item: InboundItem) -> str:
    match item:
        case MulticastItem():
            return "multicast"
        case CollectiveRequestItem():
            return "collectiveRequest"
        case CollectiveResultItem():
            return "collectiveResult"
        case OperationFailedItem():
            return "operationFailed"


def _decode(row: InboxRow) -> Delivery | None:
    try:
        item = item_from_json(parse_canonical_json(row.item))
        guidance = (
            None
            if row.guidance is None
            else local_guidance_from_json(parse_canonical_json(row.guidance))
        )
    except (CodecError, JsonValueError):
        # A row this version cannot read is a defect; skipping it keeps the stream alive,
        # and the row stays unread for a fixed version to deliver.
        logger.exception("inbox row does not decode seq=%d", row.seq)
        return None
    return Delivery(token=row.token, item=item, guidance=guidance)

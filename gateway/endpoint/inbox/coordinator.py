"""`AgentInbox`: one hosted agent's inbox, coordinating its publishing, stream and acknowledgments.

engine.md §7. The inbox assigns each item the next inbox sequence when its transaction is
queued (`commit`), so sequences follow commit order even where the local firewall's
inbound check (`InboxScreen`) waits between preparing an item and committing it: a stream
reads past the last sequence it handed out and would otherwise skip an item committed late.
The item is durable before it is streamed. It owns the agent's one stream slot: a second stream fails
`already-listening` unless it takes over, which ends the old one. Each stream gets its own
`DeliveryWindow` and `InboxReader` and shares the inbox's `InboxSignal` and `OfferTracker`;
`AckApplier` retires items and the inbox frees their slots in the open stream's window.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Final

from gateway.contract.codec import item_to_json
from gateway.contract.errors import ListenError, ListenErrorReason
from gateway.contract.ids import RandomId
from gateway.contract.jsonvalue import canonical_json
from gateway.contract.values import InboundItem
from gateway.endpoint.inbox.acks import AckApplier, AcknowledgeResult
from gateway.endpoint.inbox.observer import (
    NULL_INBOX_OBSERVER,
    InboxObserver,
    StreamEndReason,
    StreamOpen,
)
from gateway.endpoint.inbox.offers import OfferTracker
from gateway.endpoint.inbox.reader import InboxReader
from gateway.endpoint.inbox.screen import InboxScreen
from gateway.endpoint.inbox.signal import InboxSignal
from gateway.endpoint.inbox.stream import MessageStream
from gateway.endpoint.inbox.window import DeliveryWindow
from gateway.store.port import Store
from gateway.store.records import PutInboxItem, Write

PREPARED_ITEMS: Final = 1024
"""Prepared, uncommitted items an inbox remembers for its firewall check (entries); a
classification page prepares at most 256, and a commit takes its own."""

UNSEQUENCED: Final = 0
"""The sequence of a prepared item until `commit` gives it its own (sequences start at 1)."""


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
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock` gives the seconds since the epoch stamped on each item (`created_at`)."""
        self.agent_id = agent_id
        self.observer = observer
        self._store = store
        self._next_seq = next_seq
        self._window = window
        self._clock = clock
        self._signal = InboxSignal()
        self._offers = OfferTracker(observer)
        self._prepared: collections.OrderedDict[str, InboundItem] = collections.OrderedDict()
        """Items prepared and not yet committed, by token, for the firewall's check (the
        newest `PREPARED_ITEMS`; an item missing here is decoded from its write)."""
        self.screen: InboxScreen | None = None
        """The firewall's inbound check, set by the agent's runtime when one is configured."""
        self._acks = AckApplier(agent_id=agent_id, store=store, observer=observer)
        self._stream: MessageStream | None = None

    @property
    def on_offer(self) -> Callable[[int, InboundItem], None] | None:
        """Called with (sequence, item) before an item is offered on a stream."""
        return self._offers.on_offer

    @on_offer.setter
    def on_offer(self, hook: Callable[[int, InboundItem], None] | None) -> None:
        self._offers.on_offer = hook

    # --- publishing --------------------------------------------------------------------

    def prepare(self, item: InboundItem, *, token: str | None = None) -> tuple[str, PutInboxItem]:
        """An item's write and its token (minted unless the item keeps a delivery's).

        The caller commits the write, possibly with others, through `commit`, which gives it
        its sequence, checks it with the firewall, and wakes the stream."""
        token = token or RandomId.DELIVERY.mint()
        write = PutInboxItem(
            agent_id=self.agent_id,
            seq=UNSEQUENCED,
            token=token,
            item=canonical_json(item_to_json(item)),
            guidance=None,
            created_at=self._clock(),
        )
        if self.screen is not None and self.screen.active:
            # The check reads the item itself rather than decoding its bytes again.
            self._prepared[token] = item
            if len(self._prepared) > PREPARED_ITEMS:
                self._prepared.popitem(last=False)
        return token, write

    async def commit(self, writes: Sequence[Write]) -> frozenset[str]:
        """Commit writes atomically — the items among them checked by the firewall and
        given their sequences — and wake the stream. Returns the delivery tokens whose
        items the firewall dropped (their deliveries are consumed instead)."""
        dropped: frozenset[str] = frozenset()
        if self.screen is not None and self.screen.active:
            screened = await self.screen.screen(writes, prepared=self._prepared)
            writes, dropped = screened.writes, screened.dropped
        # No await from here until the store has queued the transaction: sequences follow
        # commit order.
        sequenced: list[Write] = []
        for write in writes:
            if isinstance(write, PutInboxItem):
                self._prepared.pop(write.token, None)
                write = dataclasses.replace(write, seq=self._next_seq)
                self._next_seq += 1
            sequenced.append(write)
        await self._store.apply(sequenced)
        self.notify()
        return dropped

    async def publish(self, item: InboundItem, *, token: str | None = None) -> str:
        """Make one item durable under a (fresh) token and offer it."""
        token, write = self.prepare(item, token=token)
        await self.commit([write])
        return token

    def notify(self) -> None:
        """New items are durable: wake the stream."""
        self._signal.notify()

    @property
    def listening(self) -> bool:
        """True while a stream is open."""
        return self._stream is not None

    # --- streams -----------------------------------------------------------------------

    def open_stream(self, *, takeover: bool) -> MessageStream:
        """Open the agent's one stream; `takeover` ends an existing one first.

        Raises `ListenError` `already-listening` when a stream is open and `takeover` is
        false."""
        result = StreamOpen.OK
        if self._stream is not None:
            if not takeover:
                self.observer.on_stream_open(StreamOpen.ALREADY_LISTENING)
                raise ListenError(ListenErrorReason.ALREADY_LISTENING)
            self._stream.end(StreamEndReason.TAKEN_OVER)
            result = StreamOpen.TAKEOVER
        stream = MessageStream(
            window=DeliveryWindow(self._window),
            reader=InboxReader(store=self._store, agent_id=self.agent_id),
            signal=self._signal,
            offers=self._offers,
            observer=self.observer,
            on_end=self._detach,
        )
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
        # An ended stream that was taken over must not release its successor's slot.
        if self._stream is stream:
            self._stream = None

    # --- acknowledgment ----------------------------------------------------------------

    async def acknowledge(self, tokens: Sequence[str]) -> list[AcknowledgeResult]:
        """Retire items by token, one result per token in order (engine.md §7).

        Unknown tokens (another agent's included) are `unknown-delivery`; a replaced item is
        `delivery-conflict`; acknowledging again succeeds; a store failure is
        `persistence-failed` for every token it touched (the items stay, retry). A retired
        token frees its slot in the open stream's window."""
        results = await self._acks.apply(tokens)
        if self._stream is not None:
            for result in results:
                if result.error is None:
                    self._stream.window.release(result.token)
        return results

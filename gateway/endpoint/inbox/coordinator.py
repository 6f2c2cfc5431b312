"""`AgentInbox`: one hosted agent's inbox, coordinating its publishing, stream and acknowledgments.

engine.md §7. The inbox assigns each item the next inbox sequence when its transaction is
queued (`commit`), so sequences follow commit order even where the local firewall's
inbound check (`InboxScreen`) waits between preparing an item and committing it: a stream
reads past the last sequence it handed out and would otherwise skip an item committed late.
The item is durable before it is streamed. It owns the agent's one stream slot: a second stream fails
`already-listening` unless it takes over, which ends the old one. Each stream gets its own
`DeliveryWindow` and `InboxReader` and shares the inbox's `InboxSignal` and `OfferTracker`;
`AckApplier` retires items and the inbox frees their slots in the open stream's window.

The stream slot rule (`open_stream`), which every client may rely on:

- No stream open: the new stream gets the slot at once.
- `takeover`: the open stream ends at once (its call fails `already-listening`) and the new
  one gets the slot.
- Otherwise the new stream waits, at most `HANDOVER_WAIT` seconds, for the open stream to
  end, and gets the slot the moment it does; if it is still open then, the new stream fails
  `already-listening`. This is the handover: an agent that cancels its stream and reopens it
  at once races its own cancellation, since a client may put the new call on the wire
  before the old call's RST_STREAM (grpc-js does) and the gateway learns of a cancellation
  only from that frame. The handover needs no metadata and no `takeover`, so a client in any
  language gets its stream back; a second stream that stays live is still refused, only
  `HANDOVER_WAIT` later. If the gateway ends the open stream meanwhile (shutdown,
  revocation), the waiting stream fails the same way (`StreamEnded`).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Final

from harness_contract.codec import item_to_json
from harness_contract.errors import ListenError, ListenErrorReason
from harness_contract.ids import RandomId
from harness_contract.jsonvalue import canonical_json
from harness_contract.values import AcknowledgeResult, Delivery, InboundItem

from gateway.endpoint.inbox.acks import AckApplier
from gateway.endpoint.inbox.committed import CommittedItems
from gateway.endpoint.inbox.observer import (
    NULL_INBOX_OBSERVER,
    InboxObserver,
    StreamEndReason,
    StreamOpen,
)
from gateway.endpoint.inbox.offers import OfferTracker
from gateway.endpoint.inbox.reader import InboxReader, decode_row
from gateway.endpoint.inbox.screen import InboxScreen
from gateway.endpoint.inbox.signal import InboxSignal
from gateway.endpoint.inbox.stream import MessageStream, StreamEnded
from gateway.endpoint.inbox.window import DeliveryWindow
from gateway.store.errors import CommitAmbiguous, StoreError
from gateway.store.port import Store
from gateway.store.records import InboxRow, PutInboxItem, Write

logger = logging.getLogger(__name__)

HANDOVER_WAIT: Final = 1.0
"""Seconds a stream opened without `takeover` waits for the agent's open stream to end
before it fails `already-listening`.

The wait covers the gap between a client's cancelling its stream and the gateway's reading
that cancellation: the client's own scheduling (grpc-js sends the old call's RST_STREAM about
a millisecond after the new call's HEADERS) and, for a new stream on another connection, the
difference between two paths. Ending sooner than this bound is the normal case, and the wait
returns the moment the old stream ends; a second stream that really is live is refused this
much later than it would be without the wait, which is cheap. A stream whose client vanished
without a cancellation (a dead connection) is not helped: that is what `takeover` is for."""

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
        handover_wait: float = HANDOVER_WAIT,
    ) -> None:
        """`clock` gives the seconds since the epoch stamped on each item (`created_at`);
        `handover_wait` is `HANDOVER_WAIT` except in tests of the refusal itself."""
        self.agent_id = agent_id
        self.observer = observer
        self._store = store
        self._next_seq = next_seq
        self._window = window
        self._clock = clock
        self._handover_wait = handover_wait
        self._signal = InboxSignal()
        self._offers = OfferTracker(observer)
        self._prepared: collections.OrderedDict[str, InboundItem] = collections.OrderedDict()
        """Items prepared and not yet committed, by token, for the firewall's check (the
        newest `PREPARED_ITEMS`; an item missing here is decoded from its write)."""
        self._made: collections.OrderedDict[str, tuple[InboundItem, bytes]] = (
            collections.OrderedDict()
        )
        """Items prepared and not yet committed, with their bytes, by token (the newest
        `PREPARED_ITEMS`): a committed item whose bytes are these is streamed as it is."""
        self.screen: InboxScreen | None = None
        """The firewall's inbound check, set by the agent's runtime when one is configured."""
        self._committed = CommittedItems(next_seq)
        self._acks = AckApplier(
            agent_id=agent_id, store=store, observer=observer, committed=self._committed
        )
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
        # So is the stream once the item is committed, unless the check changed its bytes.
        self._made[token] = (item, write.item)
        if len(self._made) > PREPARED_ITEMS:
            self._made.popitem(last=False)
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
        batch = self.sequencing()
        sequenced = [
            batch.add(write) if isinstance(write, PutInboxItem) else write for write in writes
        ]
        try:
            await self._store.apply(sequenced)
        except BaseException as error:
            batch.settle(error)
            raise
        batch.settle(None)
        return dropped

    def sequencing(self) -> SequencedItems:
        """A batch that gives this inbox's items their sequences as a transaction carrying
        them is queued, and settles them once it answered: `commit`'s own, or a local unit's
        that writes items directly (engine.md §5.10, classified at certification)."""
        return SequencedItems(self)

    def _sequence(
        self, write: PutInboxItem
    ) -> tuple[PutInboxItem, tuple[InboundItem, bytes] | None]:
        """The item with the next sequence, and what `prepare` made of it."""
        self._prepared.pop(write.token, None)
        write = dataclasses.replace(write, seq=self._next_seq)
        self._next_seq += 1
        self._committed.sequenced((write.seq,))
        return write, self._made.pop(write.token, None)

    def _settle(
        self,
        items: Sequence[tuple[PutInboxItem, tuple[InboundItem, bytes] | None]],
        error: BaseException | None,
    ) -> None:
        """The transaction carrying these sequenced items answered (`error` None: it
        committed); the stream wakes either way (a page may wait on an unanswered one)."""
        if error is None:
            self._committed.committed(
                [item.row() for item, _ in items],
                [
                    Delivery(token=item.token, item=kept[0], guidance=None)
                    if kept is not None and kept[1] is item.item and item.guidance is None
                    else None
                    for item, kept in items
                ],
            )
        else:
            # Only a refusal that wrote nothing leaves memory knowing what the store holds.
            written = not isinstance(error, StoreError) or isinstance(error, CommitAmbiguous)
            self._committed.failed([item.seq for item, _ in items], written=written)
        self.notify()

    def _delivery_of(self, row: InboxRow) -> Delivery | None:
        """The delivery of a row: as it was committed when memory still has it, else
        decoded from the row's bytes."""
        return self._committed.delivery(row.seq) or decode_row(row)

    async def unread(self, after_seq: int, limit: int) -> tuple[list[InboxRow], int]:
        """Up to `limit` unread items after `after_seq` in inbox order — from memory when
        it holds them all (`CommittedItems`), else from the store — and the sequence a
        reader may count as read past when none is found."""
        rows = self._committed.after(after_seq, limit)
        if rows is not None:
            return rows, after_seq
        # Every item below both bounds settled before this read began, so the read sees
        # each one that is still unread.
        past = min(self._committed.low, self._committed.frontier) - 1
        rows = await self._store.unread(self.agent_id, after_seq, limit)
        return rows, max(after_seq, past)

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

    async def open_stream(self, *, takeover: bool) -> MessageStream:
        """Open the agent's one stream, by the slot rule in the module docstring.

        `takeover` ends an open stream at once. Without it, an open stream is given
        `HANDOVER_WAIT` seconds to end (the agent's own cancelled stream, whose cancellation
        is still in flight); raises `ListenError` `already-listening` if it has not, and
        `StreamEnded` if the gateway ended it (shutdown, revocation) meanwhile."""
        result = StreamOpen.OK
        if self._stream is not None:
            if takeover:
                self._stream.end(StreamEndReason.TAKEN_OVER)
                result = StreamOpen.TAKEOVER
            else:
                await self._await_handover()
        # No await from the check above to here: the slot is free and this stream takes it.
        stream = MessageStream(
            window=DeliveryWindow(self._window),
            reader=InboxReader(self.unread, decode=self._delivery_of),
            signal=self._signal,
            offers=self._offers,
            observer=self.observer,
            on_end=self._detach,
        )
        self._stream = stream
        self.observer.on_stream_open(result)
        return stream

    async def _await_handover(self) -> None:
        """Return once no stream is open, within `handover_wait` seconds, or refuse."""
        try:
            async with asyncio.timeout(self._handover_wait):
                while (current := self._stream) is not None:
                    match await current.wait_ended():
                        case StreamEndReason.SHUTDOWN | StreamEndReason.REVOKED as reason:
                            # What ended the old stream refuses the new one too.
                            raise StreamEnded(reason)
                        case _:
                            # Closed by its client, or taken over (then the successor holds
                            # the slot and the loop waits for it in turn).
                            pass
        except TimeoutError:
            self.observer.on_stream_open(StreamOpen.ALREADY_LISTENING)
            raise ListenError(ListenErrorReason.ALREADY_LISTENING) from None
        logger.debug("stream handed over: the open stream ended while the new one waited")

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


class SequencedItems:
    """One transaction's items of one inbox: sequenced as it is queued, settled once it
    answered (`AgentInbox.sequencing`)."""

    def __init__(self, inbox: AgentInbox) -> None:
        self._inbox = inbox
        self._items: list[tuple[PutInboxItem, tuple[InboundItem, bytes] | None]] = []

    def __len__(self) -> int:
        return len(self._items)

    def add(self, write: PutInboxItem) -> PutInboxItem:
        """The item with its sequence, to be written in place of `write`."""
        sequenced = self._inbox._sequence(write)
        self._items.append(sequenced)
        return sequenced[0]

    def settle(self, error: BaseException | None) -> None:
        """The transaction answered: committed (`error` None), or failed with `error`."""
        if self._items:
            self._inbox._settle(self._items, error)

"""`OfferTracker`: what the streams of one inbox have offered, so replays are counted.

Every new stream (a reconnect, a takeover) starts again from the first unacknowledged item; an
offer at or below the highest sequence already offered by this inbox is a replay
(`on_replayed`). The `on_offer` hook sees every offer, first or replayed (the history export
uses it).
"""

from __future__ import annotations

from collections.abc import Callable

from harness_contract.kinds import DeliveryItem
from harness_contract.values import (
    CollectiveRequestItem,
    CollectiveResultItem,
    InboundItem,
    MulticastItem,
    OperationFailedItem,
)

from gateway.endpoint.inbox.observer import InboxObserver


class OfferTracker:
    """The highest inbox sequence offered on any stream of one inbox."""

    def __init__(self, observer: InboxObserver) -> None:
        self._observer = observer
        self._offered_seq = 0
        self.on_offer: Callable[[int, InboundItem], None] | None = None
        """Called with (sequence, item) before an item is offered on a stream."""

    def offer(self, seq: int, item: InboundItem) -> None:
        """An item is about to be yielded on a stream."""
        if seq <= self._offered_seq:
            self._observer.on_replayed(_item_kind_of(item))
        else:
            self._offered_seq = seq
        if self.on_offer is not None:
            self.on_offer(seq, item)


def _item_kind_of(item: InboundItem) -> DeliveryItem:
    match item:
        case MulticastItem():
            return DeliveryItem.MULTICAST
        case CollectiveRequestItem():
            return DeliveryItem.COLLECTIVE_REQUEST
        case CollectiveResultItem():
            return DeliveryItem.COLLECTIVE_RESULT
        case OperationFailedItem():
            return DeliveryItem.OPERATION_FAILED

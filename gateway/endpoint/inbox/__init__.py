"""One agent's durable inbox: publishing items, the `Messages` stream, and acknowledgments.

engine.md §7. An item is durable before it is streamed; one stream per agent (a second one
fails `already-listening` unless it takes over, which ends the old one); a stream never
yields a token twice and holds at most `window` unacknowledged items, the rest waiting in
the store, not in memory; every new stream, also after a restart, replays all unacknowledged
items with identical tokens and items. Acknowledge retires items by token, one result each.

The inbox is small parts under one coordinator, each with a narrow interface:

- `AgentInbox` (`coordinator`) assigns sequences, owns the agent's one stream slot and wires
  the parts together.
- `MessageStream` (`stream`) owns one stream's lifetime and yields its deliveries.
- `DeliveryWindow` (`window`) counts the stream's unacknowledged slots.
- `InboxReader` (`reader`) reads unread rows from the store past the window, a page at a time.
- `InboxSignal` (`signal`) is the generation counter that wakes a stream waiting for items.
- `OfferTracker` (`offers`) counts replays across streams and feeds the `on_offer` hook.
- `AckApplier` (`acks`) retires items by token; the inbox frees their window slots.
- `InboxScreen` (`screen`) is the local firewall's inbound check of the items a commit puts.

What other packages may import is listed in `__all__`; the modules behind it are internal.
"""

from __future__ import annotations

from harness_contract.values import AcknowledgeResult

from gateway.endpoint.inbox.acks import ACKNOWLEDGE_MAX_TOKENS
from gateway.endpoint.inbox.coordinator import AgentInbox
from gateway.endpoint.inbox.observer import (
    NULL_INBOX_OBSERVER,
    AckResult,
    InboxObserver,
    StreamEndReason,
    StreamOpen,
)
from gateway.endpoint.inbox.screen import InboxScreen, Screened
from gateway.endpoint.inbox.stream import MessageStream, StreamEnded

__all__ = [
    "ACKNOWLEDGE_MAX_TOKENS",
    "NULL_INBOX_OBSERVER",
    "AckResult",
    "AcknowledgeResult",
    "AgentInbox",
    "InboxObserver",
    "InboxScreen",
    "MessageStream",
    "Screened",
    "StreamEndReason",
    "StreamEnded",
    "StreamOpen",
]

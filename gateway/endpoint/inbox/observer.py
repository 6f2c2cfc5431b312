"""The inbox's metrics hooks (`InboxObserver`) and the closed values they are handed.

Every value handed to a hook is a member of a closed enum (these, and the contract's
`DeliveryItem`), and each is a label of a metric family built from that same enum.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from harness_contract.errors import DeliveryAcknowledgeErrorReason
from harness_contract.kinds import DeliveryItem


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


class StreamOpen(enum.StrEnum):
    """How a `Messages` stream open ended (the `harness_stream_opens_total` results)."""

    OK = "ok"
    """A stream opened with none open before."""
    TAKEOVER = "takeover"
    """A stream opened and took over the open one."""
    ALREADY_LISTENING = "already-listening"
    """Refused: another stream is open."""


class AckResult(enum.StrEnum):
    """What one acknowledged token came to: `ok` or its `DeliveryAcknowledgeErrorReason`."""

    OK = "ok"
    """The item is (or already was) retired."""
    UNKNOWN_DELIVERY = DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY.value
    """No such token for this agent."""
    DELIVERY_CONFLICT = DeliveryAcknowledgeErrorReason.DELIVERY_CONFLICT.value
    """The item was replaced at a restart."""
    PERSISTENCE_FAILED = DeliveryAcknowledgeErrorReason.PERSISTENCE_FAILED.value
    """The store failed; the item stays unacknowledged."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxObserver:
    """Metrics hooks of an inbox and its streams."""

    on_stream_open: Callable[[StreamOpen], None] = lambda result: None
    on_stream_end: Callable[[StreamEndReason], None] = lambda reason: None
    on_replayed: Callable[[DeliveryItem], None] = lambda item: None
    on_acknowledged: Callable[[DeliveryItem], None] = lambda item: None
    on_acknowledge_result: Callable[[AckResult], None] = lambda result: None


NULL_INBOX_OBSERVER: Final = InboxObserver()
"""An observer that records nothing (tests, and inboxes built without metrics)."""

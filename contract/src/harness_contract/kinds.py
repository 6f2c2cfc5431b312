"""The closed kinds the components report: what a post carries, what an inbox item is.

The engine, the endpoint and the collectives pass these members, never strings, to their
observers, and `gateway/observability/metrics.py` builds its label sets from these same
enums: a kind without a series cannot be written, so counting can never fail a send that has
already been answered.
"""

from __future__ import annotations

import enum


class PostOp(enum.StrEnum):
    """The operation a certified post carries (its collective part)."""

    MULTICAST = "multicast"
    """A direct or group message."""
    GATHER = "gather"
    """A gather's request post."""
    ALL_GATHER = "all_gather"
    """An all_gather's request post."""
    ANSWER = "answer"
    """An answer to an open question."""
    CLOSE = "close"
    """The post closing a collective operation."""


class SendOp(enum.StrEnum):
    """What a `Send` asked for."""

    MULTICAST = "multicast"
    """A message."""
    GATHER = "gather"
    """A gather."""
    ALL_GATHER = "all_gather"
    """An all_gather."""
    ANSWER = "answer"
    """An answer."""


class PostKind(enum.StrEnum):
    """Whom a post is to: one agent or a group (the conversation's size)."""

    DIRECT = "direct"
    """Addressed to one other agent."""
    GROUP = "group"
    """Addressed to a group of 3 to 32 agents."""

    @classmethod
    def of_size(cls, members: int) -> PostKind:
        """A conversation of `members` agents: two is direct, more a group."""
        return cls.DIRECT if members == 2 else cls.GROUP


class DeliveryItem(enum.StrEnum):
    """An inbound item's contract kind."""

    MULTICAST = "multicast"
    """A message."""
    COLLECTIVE_REQUEST = "collectiveRequest"
    """A question this agent may answer once."""
    COLLECTIVE_RESULT = "collectiveResult"
    """A collective operation's result, at its requester."""
    OPERATION_FAILED = "operationFailed"
    """A refusal routed with `failureDelivery: inbound`."""


class ConsumedKind(enum.StrEnum):
    """A record the endpoint consumed and acknowledged itself, not delivered as an item."""

    ANSWER = "answer"
    """An answer record, consumed by the requester's endpoint."""
    CLOSE = "close"
    """A close record."""
    OTHER = "other"
    """Any other record the endpoint acknowledges itself."""
    DROPPED = "dropped"
    """A message or request the local firewall dropped (`action: drop`, firewall.md §2.2)."""


class MemberOutcomeKind(enum.StrEnum):
    """How one member ended in a collective result."""

    ANSWERED = "answered"
    """The member answered within the form."""
    DECLINED = "declined"
    """The member declined."""
    INVALID = "invalid"
    """The member answered outside the form."""
    NO_ANSWER = "no-answer"
    """No answer before the deadline."""
    WITHHELD = "withheld"
    """The local firewall withheld the answer."""


class CollectiveEnd(enum.StrEnum):
    """How a collective operation ended at its requester."""

    SETTLED = "settled"
    """Every member had an outcome before the deadline."""
    DEADLINE = "deadline"
    """The deadline came first."""
    FAILED = "failed"
    """The operation failed."""

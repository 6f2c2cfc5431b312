"""The writes only a cluster's sequencer makes (cluster.md §5.2, §5.4), in PostgreSQL.

A cluster's conversations may have been written by another sequencer first (an earlier
holder of the sequencing partition, or memory older than the rows), so its units never
replace rows: a head moves only `WHERE depth = $old` on the same foundation while the
conversation is not set aside, and an intent completes only `WHERE state = 'open'`. A
conditional write that matches no row calls `harness_stale` (schema 3), which fails the unit
alone as a constraint violation: the sequencer rebuilds the conversation from rows. Refusals
and set-aside rows match what they match and never fail. `tables.plan_unit` calls these for
the writes that ask for them (`PutConversation.moved_from`, `PutIntent.from_open`,
`SetAsideRow`, `RefuseIntent`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, TypeAlias

from gateway.store import records

Statement: TypeAlias = tuple[str, Sequence[object] | Mapping[str, object]]

_FOUND: Final = (
    "INSERT INTO conversations (agent_id, conversation_id, descriptor, membership_hash, "
    "anchor, anchor_hash, head, depth) VALUES (%s, %s, %s, %s, %s, %s, NULL, 0) "
    "ON CONFLICT DO NOTHING"
)
"""A foundation at GENESIS (cluster.md §5.2): another sequencer's stays as it is."""

_MOVE_HEAD: Final = (
    "WITH moved AS (UPDATE conversations SET head = %(head)s, depth = %(depth)s "
    "WHERE agent_id = %(agent)s AND conversation_id = %(conversation)s "
    "AND depth = %(old)s AND anchor_hash = %(anchor)s AND membership_hash = %(membership)s "
    "AND set_aside IS NULL RETURNING 1) "
    "SELECT harness_stale('the head moved') WHERE NOT EXISTS (SELECT FROM moved)"
)
"""A cluster's head move (cluster.md §5.2): only from the depth the sequencer built on, on
its foundation, while not set aside; otherwise the unit fails alone (`harness_stale`)."""

_COMPLETE_OPEN: Final = (
    "WITH done AS (UPDATE post_intents SET state = %(state)s, record_hash = %(record)s, "
    "intent = %(intent)s, descriptor = NULL "
    "WHERE agent_id = %(agent)s AND post_id = %(post)s AND state = 'open' RETURNING 1) "
    "SELECT harness_stale('the intent is not open') WHERE NOT EXISTS (SELECT FROM done)"
)
"""A cluster's intent completion (cluster.md §5.2): only `WHERE state = 'open'`."""

_REFUSE_OPEN: Final = (
    "UPDATE post_intents SET state = 'refused', descriptor = NULL "
    "WHERE agent_id = %s AND post_id = %s AND state = 'open'"
)

_SET_ASIDE: Final = (
    "UPDATE conversations SET set_aside = COALESCE(set_aside, %s) "
    "WHERE agent_id = %s AND conversation_id = %s"
)


def conversation(write: records.PutConversation) -> list[Statement]:
    """A sequencer's conversation write (cluster.md §5.2): the foundation `ON CONFLICT DO
    NOTHING` at GENESIS (`moved_from` 0), then, unless it is the foundation alone (a bind
    founding the conversation), the head moved `WHERE depth = moved_from`."""
    statements = [_foundation(write)] if write.moved_from == 0 else []
    if write.head is not None:
        statements.append(_move_head(write))
    return statements


def _foundation(write: records.PutConversation) -> Statement:
    return _FOUND, (
        write.agent_id,
        write.conversation_id,
        write.descriptor,
        write.membership_hash,
        write.anchor,
        write.anchor_hash,
    )


def _move_head(write: records.PutConversation) -> Statement:
    return (
        _MOVE_HEAD,
        {
            "head": write.head,
            "depth": write.depth,
            "agent": write.agent_id,
            "conversation": write.conversation_id,
            "old": write.moved_from,
            "anchor": write.anchor_hash,
            "membership": write.membership_hash,
        },
    )


def complete_open(write: records.PutIntent) -> Statement:
    """The intent of `write` completed where it is still open (cluster.md §5.2)."""
    row = write.row()
    return (
        _COMPLETE_OPEN,
        {
            "state": row.state.value,
            "record": row.record_hash,
            "intent": row.intent,
            "agent": write.agent_id,
            "post": write.post_id,
        },
    )


def refuse_open(write: records.RefuseIntent) -> Statement:
    """The intent refused where it is still open (cluster.md §5.2, §5.4)."""
    return _REFUSE_OPEN, (write.agent_id, write.post_id)


def set_aside(write: records.SetAsideRow) -> list[Statement]:
    """The member's row set aside, its first reason kept, after its foundation when the
    conversation had none yet (cluster.md §5.4)."""
    found = [] if write.foundation is None else [_foundation(write.foundation)]
    return [*found, (_SET_ASIDE, (write.reason, write.agent_id, write.conversation_id))]


__all__ = ["complete_open", "conversation", "refuse_open", "set_aside"]

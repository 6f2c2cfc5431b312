"""The reads only a cluster makes (cluster.md §3.4, §5.2, §5.3, §6), in PostgreSQL.

A replica's sequencer and homes find their work in rows, through the partial indexes of
schema 3 (`schema.py`): open intents bound away from their sequencer by sequencing partition,
pending deliveries by home partition, intents by PostId, identities by home partition. Each
function is one statement on a reader connection; `PostgresStore` bounds it (`READ_TIMEOUT`)
as every other read. Rows come back as `gateway.store.tables` reads them elsewhere: the same
row types, enum members, bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Final

from gateway.store import records
from gateway.store.postgres.connection import Connection
from gateway.store.postgres.tables import _CONVERSATIONS, _IDENTITIES, _INTENTS, rows_of

_OPEN_INTENTS: Final = (
    f"SELECT agent_id, {_INTENTS.columns}, descriptor FROM post_intents "  # noqa: S608 - fixed columns
    "WHERE conversation_id = %s AND state = 'open' AND seq_partition IS NOT NULL "
    "ORDER BY bound_at, bind_seq, agent_id"
)


async def read_conversation_rows(
    connection: Connection, conversation_id: str
) -> dict[str, records.ConversationRow]:
    """Every member's row of a conversation, by AgentId, with the reason it was set aside
    (`StoredConversation`, cluster.md §5.4)."""
    rows = await rows_of(
        connection,
        f"SELECT agent_id, set_aside, {_CONVERSATIONS.columns} FROM conversations "  # noqa: S608 - fixed columns
        "WHERE conversation_id = %s",
        (conversation_id,),
    )
    return {
        str(row[0]): records.StoredConversation(
            **dataclasses.asdict(_CONVERSATIONS.read(row[2:])),
            set_aside=None if row[1] is None else str(row[1]),
        )
        for row in rows
    }


async def read_open_intents_of(
    connection: Connection, conversation_id: str
) -> list[tuple[str, records.IntentRow, bytes]]:
    """(author, row, MembershipDescriptor bytes) of each open intent of a conversation that
    was bound away from its sequencer, in bind order (cluster.md §5.2)."""
    rows = await rows_of(connection, _OPEN_INTENTS, (conversation_id,))
    return [
        (str(row[0]), _INTENTS.read(row[1:-1]), b"" if row[-1] is None else bytes(row[-1]))
        for row in rows
    ]


async def read_open_conversations(connection: Connection, partitions: Collection[int]) -> list[str]:
    """Conversations with open intents sequenced in `partitions` (the sequencer's poll,
    cluster.md §3.4), through `post_intents_sequencing`."""
    rows = await rows_of(
        connection,
        "SELECT DISTINCT conversation_id FROM post_intents "
        "WHERE seq_partition = ANY(%s::integer[]) AND state = 'open' "
        "AND seq_partition IS NOT NULL ORDER BY conversation_id",
        (sorted(partitions),),
    )
    return [str(row[0]) for row in rows]


async def read_agents_with_pending(
    connection: Connection, partitions: Collection[int]
) -> list[str]:
    """Agents homed in `partitions` with pending deliveries (the home's poll, cluster.md
    §3.4), through `pending_deliveries_by_home`."""
    rows = await rows_of(
        connection,
        "SELECT DISTINCT agent_id FROM pending_deliveries "
        "WHERE home_partition = ANY(%s::integer[]) AND state = 'pending' "
        "AND home_partition IS NOT NULL ORDER BY agent_id",
        (sorted(partitions),),
    )
    return [str(row[0]) for row in rows]


async def read_intent_states(
    connection: Connection, post_ids: Collection[str]
) -> list[tuple[str, str, records.IntentState, str | None]]:
    """(author, PostId, state, RecordHash) of the intents of `post_ids` (a send waiting on
    its posts, cluster.md §5.3), through `post_intents_by_post`."""
    if not post_ids:
        return []
    rows = await rows_of(
        connection,
        "SELECT agent_id, post_id, state, record_hash FROM post_intents "
        "WHERE post_id = ANY(%s::text[]) ORDER BY agent_id, post_id",
        (list(post_ids),),
    )
    return [
        (
            str(row[0]),
            str(row[1]),
            records.IntentState(row[2]),
            None if row[3] is None else str(row[3]),
        )
        for row in rows
    ]


async def read_identities_in(
    connection: Connection, owner: str, partitions: Collection[int]
) -> list[records.IdentityRow]:
    """The owner's identities homed in `partitions`, in registration order."""
    rows = await rows_of(
        connection,
        _IDENTITIES.select(
            "WHERE home_partition = ANY(%s::integer[]) AND owner = %s ORDER BY registered"
        ),
        (sorted(partitions), owner),
    )
    return [_IDENTITIES.read(row) for row in rows]


async def read_identity(
    connection: Connection, owner: str, agent_id: str
) -> records.IdentityRow | None:
    """One of the owner's identities, as stored (a cluster's seed sealed)."""
    rows = await rows_of(
        connection, _IDENTITIES.select("WHERE agent_id = %s AND owner = %s"), (agent_id, owner)
    )
    return _IDENTITIES.read(rows[0]) if rows else None

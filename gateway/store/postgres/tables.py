"""The SQL behind each typed write and read, in PostgreSQL (mirrors `gateway.store.tables`).

Writes are planned before they are queued: `plan_unit(owner, writes)` turns one
`Store.apply` call into a `UnitPlan`, the statements the writer sends in that unit's
SAVEPOINT, so the writer's pipeline never runs Python between statements. Semantics are
SQLite's, table for table: upserts where SQLite replaces, `ON CONFLICT DO NOTHING` where it
ignores, the same pruning (settled locks and evidence, finished outbox rows), the same
payload dropping (completed intents, classified deliveries, acknowledged items keep their
tombstone), and record bytes kept once in `record_bodies` with the membership descriptor
elided. Record bodies of a whole group are inserted in one statement, sorted by hash, so
that two daemons sharing the database always lock body rows in the same order.

Reads return exactly what `SqliteStore` returns: bytes (psycopg loads BYTEA as bytes),
ints, floats, enum members. One difference is deliberate: a second intent with an existing
bind sequence is a `ConstraintViolation`, as in `MemoryStore` (SQLite's `INSERT OR REPLACE`
would drop the other intent silently).
"""

from __future__ import annotations

import dataclasses
import enum
import operator
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeAlias, TypeVar, assert_never

from gateway.cluster.partitions import home_partition
from gateway.store import records
from gateway.store.errors import ConstraintViolation
from gateway.store.layout import (
    CERTIFICATION_TABLES,
    LOCAL_INSTANCE_KEY,
    RECORD_COLUMNS,
    RECORD_FROM,
    elide_membership,
    record_row,
)
from gateway.store.postgres import cluster_writes
from gateway.store.postgres.connection import Connection

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

RowT = TypeVar("RowT", bound="DataclassInstance")

Parameters: TypeAlias = Sequence[object] | Mapping[str, object]
Statement: TypeAlias = tuple[str, Parameters]


@dataclass(frozen=True, slots=True, kw_only=True)
class UnitPlan:
    """One `Store.apply` call as SQL: its statements in order, and the record bodies its
    records need (inserted for the whole group before the units run)."""

    statements: tuple[Statement, ...]
    bodies: tuple[tuple[str, bytes], ...]


FENCE_CHECK: Final = "SELECT fence FROM leases WHERE owner = %s FOR SHARE"
"""The first statement of every write transaction: the lease's fence, share-locked so a
claimer's fence bump waits for this transaction (and this one sees a committed bump)."""

INSERT_BODIES: Final = (
    "INSERT INTO record_bodies (record_hash, body) "
    "SELECT h, b FROM unnest(%s::text[], %s::bytea[]) AS u(h, b) ORDER BY h "
    "ON CONFLICT DO NOTHING"
)


def group_bodies(plans: Iterable[UnitPlan]) -> tuple[list[str], list[bytes]]:
    """The record bodies of a group, first one per hash kept (SQLite's `INSERT OR
    IGNORE` order), as the two arrays of `INSERT_BODIES`."""
    bodies: dict[str, bytes] = {}
    for plan in plans:
        for record_hash, body in plan.bodies:
            bodies.setdefault(record_hash, body)
    return list(bodies), list(bodies.values())


# --- row tables ------------------------------------------------------------------------


class _Table(Generic[RowT]):
    """A table whose columns are a row type's fields, behind its key prefix (`agent_id`,
    or `owner` for identities); the PostgreSQL twin of `gateway.store.tables._Table`."""

    __slots__ = (
        "_columns",
        "_conflict",
        "_enums",
        "_expressions",
        "_inserts",
        "_key",
        "_prefix",
        "_row_type",
        "_values_of",
        "columns",
        "name",
    )

    def __init__(
        self,
        name: str,
        row_type: type[RowT],
        *,
        key: tuple[str, ...],
        prefix: str = "agent_id",
        conflict: Literal["fail", "replace", "ignore"] = "replace",
        expressions: Mapping[str, str] | None = None,
    ) -> None:
        """`key` is the primary key (for `replace`); `conflict` is how `put` meets an
        existing key: fail, update the row, or keep the stored one. `expressions` stores a
        column's value through an SQL expression of its one placeholder."""
        self.name: Final = name
        self._row_type: Final = row_type
        self._columns: Final = tuple(field.name for field in dataclasses.fields(row_type))
        self.columns: Final = ", ".join(self._columns)
        """The row's columns in field order, for a SELECT."""
        hints = typing.get_type_hints(row_type)
        self._enums: Final = {
            index: hint
            for index, column in enumerate(self._columns)
            if isinstance(hint := hints[column], type) and issubclass(hint, enum.Enum)
        }
        self._values_of: Final = operator.attrgetter(*self._columns)
        self._key: Final = key
        self._prefix: Final = prefix
        self._conflict: Final = conflict
        self._expressions: Final = dict(expressions or {})
        self._inserts: Final[dict[tuple[str, ...], str]] = {}

    def _insert(self, extra: tuple[str, ...]) -> str:
        """The INSERT of the row's columns and the `extra` ones (built once per set)."""
        sql = self._inserts.get(extra)
        if sql is not None:
            return sql
        all_columns = (self._prefix, *self._columns, *extra)
        marks = ", ".join(self._expressions.get(column, "%s") for column in all_columns)
        sql = f"INSERT INTO {self.name} ({', '.join(all_columns)}) VALUES ({marks})"  # noqa: S608 - fixed names
        match self._conflict:
            case "fail":
                pass
            case "ignore":
                sql += " ON CONFLICT DO NOTHING"
            case "replace":
                updates = ", ".join(
                    f"{c} = excluded.{c}" for c in all_columns if c not in self._key
                )
                sql += f" ON CONFLICT ({', '.join(self._key)}) DO UPDATE SET {updates}"
            case _:
                assert_never(self._conflict)
        self._inserts[extra] = sql
        return sql

    def read(self, values: Sequence[Any]) -> RowT:
        """The row of one result in `columns` order."""
        named = dict(zip(self._columns, values, strict=True))
        for index, kind in self._enums.items():
            column = self._columns[index]
            named[column] = kind(named[column])
        return self._row_type(**named)

    def select(self, clause: str) -> str:
        """`SELECT columns FROM table <clause>`; `clause` is fixed SQL with placeholders."""
        return f"SELECT {self.columns} FROM {self.name} {clause}"  # noqa: S608 - fixed names

    def put(
        self,
        row: RowT,
        *,
        key: str,
        overrides: Mapping[str, object] | None = None,
        extra: Mapping[str, object] | None = None,
    ) -> Statement:
        """The INSERT of `row` under `key` (its agent or owner); `overrides` stores other
        values than the row's in the columns it names; `extra` stores columns the row type
        does not have (a cluster's partition columns), also when an upsert updates."""
        values = self._values_of(row)
        if len(self._columns) == 1:
            values = (values,)
        stored = list(values)
        for index in self._enums:
            stored[index] = stored[index].value
        if overrides:
            for column, value in overrides.items():
                stored[self._columns.index(column)] = value
        if not extra:
            return self._insert(()), (key, *stored)
        return self._insert(tuple(extra)), (key, *stored, *extra.values())


_IDENTITIES: Final = _Table(
    "identities", records.IdentityRow, key=("agent_id",), prefix="owner", conflict="fail"
)
_CONVERSATIONS: Final = _Table(
    "conversations", records.ConversationRow, key=("agent_id", "conversation_id")
)
_INTENTS: Final = _Table("post_intents", records.IntentRow, key=("agent_id", "post_id"))
_LOCKS: Final = _Table(
    "proposal_locks", records.LockRow, key=("agent_id", "conversation_id", "predecessor")
)
_STAGED: Final = _Table("staged_records", records.StagedRow, key=("agent_id", "record_hash"))
_EVIDENCE: Final = _Table("evidence", records.EvidenceRow, key=(), conflict="ignore")
_COMMIT_ORDER: Final = {"commit_seq": "COALESCE(%s::bigint, nextval('harness_commit_order'))"}
"""A record's or delivery's `commit_seq`: the writer's number, or (None, in a cluster) the
database's commit order at insert (cluster.md §5.2)."""
_RECORDS: Final = _Table(
    "certified_records", records.RecordRow, key=(), conflict="fail", expressions=_COMMIT_ORDER
)
_REANCHORS: Final = _Table(
    "reanchors",
    records.ReanchorRow,
    key=("agent_id", "conversation_id", "previous_anchor_hash", "instance_id"),
)
_OUTBOX: Final = _Table("outbox", records.OutboxRow, key=("agent_id", "row_id"))
_DELIVERIES: Final = _Table(
    "pending_deliveries",
    records.DeliveryRow,
    key=(),
    conflict="fail",
    expressions=_COMMIT_ORDER,
)
_INBOX: Final = _Table("inbox", records.InboxRow, key=(), conflict="fail")
_SENDS: Final = _Table("sends", records.SendRow, key=("agent_id", "key"))


def _delete_conversation(
    tables: Iterable[str], agent_id: str, conversation_id: str
) -> list[Statement]:
    return [
        (
            f"DELETE FROM {table} WHERE agent_id = %s AND conversation_id = %s",  # noqa: S608 - fixed table names
            (agent_id, conversation_id),
        )
        for table in tables
    ]


_PRUNE_LOCKS: Final = (
    "DELETE FROM proposal_locks WHERE agent_id = %s AND conversation_id = %s AND predecessor <> %s"
)
_PRUNE_EVIDENCE: Final = """DELETE FROM evidence
    WHERE agent_id = %(agent)s AND conversation_id = %(conversation)s AND (
    (kind = 'action' AND subject NOT IN (SELECT action_hash FROM proposal_locks
        WHERE agent_id = %(agent)s AND conversation_id = %(conversation)s))
    OR (kind = 'durability' AND subject NOT IN (SELECT record_hash FROM staged_records
        WHERE agent_id = %(agent)s AND conversation_id = %(conversation)s))
    OR (kind = 'reanchor' AND subject NOT IN (SELECT anchor_hash FROM reanchors
        WHERE agent_id = %(agent)s AND conversation_id = %(conversation)s
        AND completed IS NULL)))"""


# --- writes ----------------------------------------------------------------------------


def plan_unit(
    owner: str, writes: Sequence[records.Write], partitions: int | None = None
) -> UnitPlan:
    """The statements of one atomic `Store.apply` call, in order.

    `partitions` is a cluster's P (None in network mode): identities and pending deliveries
    then store their agent's home partition (cluster.md §3.6), and `ReleasePartitions` is
    allowed.

    Raises:
        ConstraintViolation: a text value holds a NUL character, which PostgreSQL's TEXT
            cannot store (SQLite can), or `ReleasePartitions` outside a cluster: refused
            before anything is queued.
    """
    statements: list[Statement] = []
    bodies: list[tuple[str, bytes]] = []
    for write in writes:
        _plan(owner, write, statements, bodies, partitions)
    for _, parameters in statements:
        values = parameters.values() if isinstance(parameters, Mapping) else parameters
        if any(isinstance(value, str) and "\x00" in value for value in values):
            raise ConstraintViolation("a text value of this write holds a NUL character")
    return UnitPlan(statements=tuple(statements), bodies=tuple(bodies))


def _home(agent_id: str, partitions: int | None) -> dict[str, object] | None:
    """The `home_partition` column of an agent's row in a cluster (cluster.md §2); None in
    network mode, where the column stays NULL."""
    if partitions is None:
        return None
    try:
        return {"home_partition": home_partition(agent_id, partitions)}
    except ValueError as error:
        raise ConstraintViolation(f"no home partition: {error}") from None


def _intent_columns(write: records.PutIntent) -> dict[str, object] | None:
    """The cluster columns a `PutIntent` stores beside its row: the sequencing partition and
    descriptor of an intent bound away from its sequencer (cluster.md §5.1); a descriptor is
    dropped once the intent is no longer open (only open intents are read again)."""
    open_ = write.state is records.IntentState.OPEN
    if write.seq_partition is not None:
        return {
            "seq_partition": write.seq_partition,
            "descriptor": write.descriptor if open_ else None,
        }
    return None if open_ else {"descriptor": None}


def _plan(
    owner: str,
    write: records.Write,
    out: list[Statement],
    bodies: list[tuple[str, bytes]],
    partitions: int | None,
) -> None:
    match write:
        case records.PutIdentity():
            home = _home(write.agent_id, partitions)
            out.append(_IDENTITIES.put(write.row(), key=owner, extra=home))
        case records.PutToken():
            out.append(
                (
                    "INSERT INTO agent_tokens (token_digest, agent_id, created_at) "
                    "VALUES (%s, %s, %s)",
                    (write.token_digest, write.agent_id, write.created_at),
                )
            )
        case records.RevokeTokens():
            out.append(
                ("UPDATE agent_tokens SET revoked = true WHERE agent_id = %s", (write.agent_id,))
            )
        case records.PutCursor():
            out.append(
                (
                    "INSERT INTO router_cursor (owner, subscription, cursor) VALUES (%s, %s, %s) "
                    "ON CONFLICT (owner, subscription) DO UPDATE SET cursor = excluded.cursor",
                    (owner, write.subscription, write.cursor),
                )
            )
        case records.PutConversation():
            if write.moved_from is None:
                out.append(_CONVERSATIONS.put(write.row(), key=write.agent_id))
            else:
                out.extend(cluster_writes.conversation(write))
        case records.PutIntent():
            if write.from_open:
                out.append(cluster_writes.complete_open(write))
            else:
                extra = _intent_columns(write)
                out.append(_INTENTS.put(write.row(), key=write.agent_id, extra=extra))
        case records.PutLock():
            out.append(_LOCKS.put(write.row(), key=write.agent_id))
        case records.PutStaged():
            out.append(_STAGED.put(write.row(), key=write.agent_id))
        case records.DeleteStaged():
            out.append(
                (
                    "DELETE FROM staged_records WHERE agent_id = %s AND record_hash = %s",
                    (write.agent_id, write.record_hash),
                )
            )
        case records.PutEvidence():
            out.append(_EVIDENCE.put(write.row(), key=write.agent_id))
        case records.PutRecord():
            # The bytes are in record_bodies, once for every member of the conversation.
            out.append(_RECORDS.put(write.row(), key=write.agent_id, overrides={"record": b""}))
            bodies.append((write.record_hash, elide_membership(write.record, write.membership)))
        case records.PutReanchor():
            out.append(_REANCHORS.put(write.row(), key=write.agent_id))
        case records.ResetConversation():
            out.extend(
                _delete_conversation(CERTIFICATION_TABLES, write.agent_id, write.conversation_id)
            )
        case records.PutOutbox():
            out.append(_OUTBOX.put(write.row(), key=write.agent_id))
        case records.SetOutboxState():
            if write.state is records.OutboxState.PENDING:
                out.append(
                    (
                        "UPDATE outbox SET state = %s WHERE agent_id = %s AND row_id = %s",
                        (write.state.value, write.agent_id, write.row_id),
                    )
                )
            else:
                # Accepted or discarded rows are never read again: prune them.
                out.append(
                    (
                        "DELETE FROM outbox WHERE agent_id = %s AND row_id = %s",
                        (write.agent_id, write.row_id),
                    )
                )
        case records.MoveToLocal():
            out.extend(
                _delete_conversation(
                    (*CERTIFICATION_TABLES, _OUTBOX.name), write.agent_id, write.conversation_id
                )
            )
            out.append(
                (
                    "DELETE FROM reanchors WHERE agent_id = %s AND conversation_id = %s "
                    "AND completed IS NULL",
                    (write.agent_id, write.conversation_id),
                )
            )
        case records.PruneSettled():
            out.append((_PRUNE_LOCKS, (write.agent_id, write.conversation_id, write.head or "")))
            out.append(
                (
                    _PRUNE_EVIDENCE,
                    {"agent": write.agent_id, "conversation": write.conversation_id},
                )
            )
        case records.PutDelivery():
            home = _home(write.agent_id, partitions)
            out.append(_DELIVERIES.put(write.row(), key=write.agent_id, extra=home))
        case records.SetDeliveryState():
            # Only pending deliveries are read again: a classified or consumed one keeps no
            # projection (the inbox item, or nothing, is what it became).
            projection = "projection" if write.state is records.DeliveryState.PENDING else "''"
            out.append(
                (
                    f"UPDATE pending_deliveries SET state = %s, projection = {projection} "  # noqa: S608 - fixed SQL
                    "WHERE agent_id = %s AND token = %s",
                    (write.state.value, write.agent_id, write.token),
                )
            )
        case records.PutInboxItem():
            out.append(_INBOX.put(write.row(), key=write.agent_id))
        case records.AcknowledgeItem():
            out.append(
                (
                    "UPDATE inbox SET state = %s, item = coalesce(%s::bytea, item) "
                    "WHERE agent_id = %s AND token = %s AND state = %s",
                    (
                        records.InboxState.ACKNOWLEDGED.value,
                        write.tombstone,
                        write.agent_id,
                        write.token,
                        records.InboxState.UNREAD.value,
                    ),
                )
            )
        case records.PutOperation():
            out.append(
                (
                    "INSERT INTO collective_operations (agent_id, operation_id, open, row) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (agent_id, operation_id) "
                    "DO UPDATE SET open = excluded.open, row = excluded.row",
                    (write.agent_id, write.operation_id, write.open, write.row),
                )
            )
        case records.PutReceivedRequest():
            out.append(
                (
                    "INSERT INTO received_requests (agent_id, operation_id, row) "
                    "VALUES (%s, %s, %s) ON CONFLICT (agent_id, operation_id) "
                    "DO UPDATE SET row = excluded.row",
                    (write.agent_id, write.operation_id, write.row),
                )
            )
        case records.DeleteReceivedRequest():
            out.append(
                (
                    "DELETE FROM received_requests WHERE agent_id = %s AND operation_id = %s",
                    (write.agent_id, write.operation_id),
                )
            )
        case records.PutSend():
            out.append(_SENDS.put(write.row(), key=write.agent_id))
        case records.BindSend():
            out.append(
                (
                    "UPDATE sends SET bound = %s WHERE agent_id = %s AND key = %s",
                    (write.bound, write.agent_id, write.key),
                )
            )
        case records.SetSendOutcome():
            out.append(
                (
                    "UPDATE sends SET outcome = %s WHERE agent_id = %s AND key = %s",
                    (write.outcome, write.agent_id, write.key),
                )
            )
        case records.ReplaceInboxItem():
            out.append(
                (
                    "UPDATE inbox SET state = %s, replacement_token = %s "
                    "WHERE agent_id = %s AND token = %s AND state = %s",
                    (
                        records.InboxState.REPLACED.value,
                        write.replacement_token,
                        write.agent_id,
                        write.token,
                        records.InboxState.UNREAD.value,
                    ),
                )
            )
        case records.SetAsideRow():
            if partitions is None:
                raise ConstraintViolation(records.NOT_A_CLUSTER)
            out.extend(cluster_writes.set_aside(write))
        case records.RefuseIntent():
            if partitions is None:
                raise ConstraintViolation(records.NOT_A_CLUSTER)
            out.append(cluster_writes.refuse_open(write))
        case records.ReleasePartitions():
            if partitions is None:
                raise ConstraintViolation(records.NOT_A_CLUSTER)
            # Imported here: membership's statements are typed with this module's
            # `Statement`, so a module-level import would be circular.
            from gateway.store.postgres.membership import release_statement

            out.extend(
                release_statement(partition, write.replica_id, write.incarnation)
                for partition in write.partitions
            )
        case _:
            assert_never(write)


# --- reads -----------------------------------------------------------------------------


async def _rows(connection: Connection, sql: str, parameters: Parameters) -> list[tuple[Any, ...]]:
    cursor = await connection.execute(sql, parameters)
    return await cursor.fetchall()


rows_of: Final = _rows
"""Every row of one statement (for the cluster's reads in `cluster_reads.py`)."""


async def _one(connection: Connection, sql: str, parameters: Parameters) -> tuple[Any, ...] | None:
    cursor = await connection.execute(sql, parameters)
    return await cursor.fetchone()


async def read_identities(connection: Connection, owner: str) -> list[records.IdentityRow]:
    """The owner's hosted agents, in registration order."""
    rows = await _rows(
        connection, _IDENTITIES.select("WHERE owner = %s ORDER BY registered"), (owner,)
    )
    return [_IDENTITIES.read(row) for row in rows]


async def read_token(
    connection: Connection, owner: str, token_digest: str
) -> tuple[str, bool] | None:
    """(agent_id, revoked) of a token digest of one of the owner's agents, or None."""
    row = await _one(
        connection,
        "SELECT t.agent_id, t.revoked FROM agent_tokens t "
        "JOIN identities i ON i.agent_id = t.agent_id "
        "WHERE t.token_digest = %s AND i.owner = %s",
        (token_digest, owner),
    )
    return None if row is None else (str(row[0]), bool(row[1]))


async def read_cursor(connection: Connection, owner: str, subscription: str) -> bytes | None:
    """The owner's stored cursor of a Router subscription."""
    row = await _one(
        connection,
        "SELECT cursor FROM router_cursor WHERE owner = %s AND subscription = %s",
        (owner, subscription),
    )
    return None if row is None else bytes(row[0])


_PENDING_DELIVERIES: Final = "WHERE agent_id = %s AND state = 'pending' ORDER BY commit_seq"

_SNAPSHOT_COUNTS: Final = """SELECT
    (SELECT MAX(bind_seq) FROM post_intents WHERE agent_id = %(agent)s),
    (SELECT MAX(commit_seq) FROM certified_records WHERE agent_id = %(agent)s),
    (SELECT MAX(seq) FROM inbox WHERE agent_id = %(agent)s),
    (SELECT MAX(row_id) FROM outbox WHERE agent_id = %(agent)s),
    (SELECT COUNT(*) FROM inbox WHERE agent_id = %(agent)s AND state = 'unread')"""


async def read_snapshot(connection: Connection, agent_id: str) -> records.AgentSnapshot:
    """Everything one agent rebuilds from at start, read in one REPEATABLE READ
    transaction (the rows and the maxima agree) and one round trip."""
    key = (agent_id,)
    queries: list[tuple[str, Parameters]] = [
        (_CONVERSATIONS.select("WHERE agent_id = %s ORDER BY conversation_id"), key),
        (_INTENTS.select("WHERE agent_id = %s AND state = 'open' ORDER BY bind_seq"), key),
        (_LOCKS.select("WHERE agent_id = %s"), key),
        (_STAGED.select("WHERE agent_id = %s"), key),
        (_EVIDENCE.select("WHERE agent_id = %s"), key),
        (_REANCHORS.select("WHERE agent_id = %s"), key),
        (_OUTBOX.select("WHERE agent_id = %s AND state = 'pending' ORDER BY row_id"), key),
        (_DELIVERIES.select(_PENDING_DELIVERIES), key),
        ("SELECT row FROM collective_operations WHERE agent_id = %s AND open", key),
        ("SELECT row FROM received_requests WHERE agent_id = %s", key),
        (_SNAPSHOT_COUNTS, {"agent": agent_id}),
    ]
    async with connection.pipeline():
        await connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        cursors = [await connection.execute(sql, parameters) for sql, parameters in queries]
        await connection.execute("COMMIT")
    results = [await cursor.fetchall() for cursor in cursors]
    (
        conversations,
        intents,
        locks,
        staged,
        evidence,
        reanchors,
        outbox,
        deliveries,
        operations,
        requests,
        counts,
    ) = results
    max_bind, max_commit, max_inbox, max_outbox, unread = counts[0]
    return records.AgentSnapshot(
        conversations=tuple(_CONVERSATIONS.read(row) for row in conversations),
        open_intents=tuple(_INTENTS.read(row) for row in intents),
        locks=tuple(_LOCKS.read(row) for row in locks),
        staged=tuple(_STAGED.read(row) for row in staged),
        evidence=tuple(_EVIDENCE.read(row) for row in evidence),
        reanchors=tuple(_REANCHORS.read(row) for row in reanchors),
        pending_outbox=tuple(_OUTBOX.read(row) for row in outbox),
        pending_deliveries=tuple(_DELIVERIES.read(row) for row in deliveries),
        open_operations=tuple(bytes(row[0]) for row in operations),
        received_requests=tuple(bytes(row[0]) for row in requests),
        max_bind_seq=int(max_bind or 0),
        max_commit_seq=int(max_commit or 0),
        max_inbox_seq=int(max_inbox or 0),
        max_outbox_row=int(max_outbox or 0),
        unread=int(unread),
    )


async def read_unread(
    connection: Connection, agent_id: str, after_seq: int, limit: int
) -> list[records.InboxRow]:
    """Unread inbox items after `after_seq`, in inbox order."""
    rows = await _rows(
        connection,
        _INBOX.select(
            "WHERE agent_id = %s AND state = 'unread' AND seq > %s ORDER BY seq LIMIT %s"
        ),
        (agent_id, after_seq, limit),
    )
    return [_INBOX.read(row) for row in rows]


async def read_inbox_by_token(
    connection: Connection, agent_id: str, token: str
) -> records.InboxRow | None:
    """One inbox item by its token, for this agent only."""
    row = await _one(
        connection, _INBOX.select("WHERE agent_id = %s AND token = %s"), (agent_id, token)
    )
    return None if row is None else _INBOX.read(row)


async def read_inbox_by_tokens(
    connection: Connection, agent_id: str, tokens: Sequence[str]
) -> dict[str, records.InboxRow]:
    """This agent's inbox items among `tokens`, by token (one query, an array parameter)."""
    if not tokens:
        return {}
    rows = await _rows(
        connection,
        _INBOX.select("WHERE agent_id = %s AND token = ANY(%s::text[])"),
        (agent_id, list(tokens)),
    )
    items = [_INBOX.read(row) for row in rows]
    return {item.token: item for item in items}


async def read_oldest_unread(connection: Connection, agent_id: str) -> float | None:
    """Creation time of the oldest unread item."""
    row = await _one(
        connection,
        "SELECT MIN(created_at) FROM inbox WHERE agent_id = %s AND state = 'unread'",
        (agent_id,),
    )
    return None if row is None or row[0] is None else float(row[0])


async def read_unread_count(connection: Connection, agent_id: str) -> int:
    """The agent's unread items, counted on the `inbox_unread` index."""
    row = await _one(
        connection,
        "SELECT COUNT(*) FROM inbox WHERE agent_id = %s AND state = 'unread'",
        (agent_id,),
    )
    assert row is not None
    return int(row[0])


async def read_records(
    connection: Connection, agent_id: str, conversation_id: str, after_depth: int, limit: int
) -> list[records.RecordRow]:
    """Certified records of a conversation after a depth, in chain order."""
    rows = await _rows(
        connection,
        f"SELECT {RECORD_COLUMNS} FROM {RECORD_FROM} "  # noqa: S608 - fixed columns
        "WHERE r.agent_id = %s AND r.conversation_id = %s AND r.depth > %s "
        "ORDER BY r.depth LIMIT %s",
        (agent_id, conversation_id, after_depth, limit),
    )
    return [record_row(row) for row in rows]


async def read_record_by_hash(
    connection: Connection, agent_id: str, record_hash: str
) -> records.RecordRow | None:
    """One certified record by its hash."""
    row = await _one(
        connection,
        f"SELECT {RECORD_COLUMNS} FROM {RECORD_FROM} "  # noqa: S608 - fixed columns
        "WHERE r.agent_id = %s AND r.record_hash = %s",
        (agent_id, record_hash),
    )
    return None if row is None else record_row(row)


async def read_intent(
    connection: Connection, agent_id: str, post_id: str
) -> records.IntentRow | None:
    """One post intent by PostId."""
    row = await _one(
        connection, _INTENTS.select("WHERE agent_id = %s AND post_id = %s"), (agent_id, post_id)
    )
    return None if row is None else _INTENTS.read(row)


async def read_conversations(
    connection: Connection, agent_id: str
) -> list[records.ConversationRow]:
    """Every conversation an agent stores, by ConversationId."""
    rows = await _rows(
        connection,
        _CONVERSATIONS.select("WHERE agent_id = %s ORDER BY conversation_id"),
        (agent_id,),
    )
    return [_CONVERSATIONS.read(row) for row in rows]


async def read_completed_reanchor(
    connection: Connection, agent_id: str, conversation_id: str, previous_anchor_hash: str
) -> bytes | None:
    """The completed re-anchor that followed an anchor, if any."""
    row = await _one(
        connection,
        "SELECT completed FROM reanchors WHERE agent_id = %s AND conversation_id = %s "
        "AND previous_anchor_hash = %s AND completed IS NOT NULL LIMIT 1",
        (agent_id, conversation_id, previous_anchor_hash),
    )
    return None if row is None else bytes(row[0])


async def read_pending_deliveries(
    connection: Connection, agent_id: str, limit: int
) -> list[records.DeliveryRow]:
    """Deliveries not classified yet, in commit order."""
    rows = await _rows(
        connection, _DELIVERIES.select(f"{_PENDING_DELIVERIES} LIMIT %s"), (agent_id, limit)
    )
    return [_DELIVERIES.read(row) for row in rows]


async def read_send(connection: Connection, agent_id: str, key: str) -> records.SendRow | None:
    """An idempotency key's row."""
    row = await _one(connection, _SENDS.select("WHERE agent_id = %s AND key = %s"), (agent_id, key))
    return None if row is None else _SENDS.read(row)


async def read_unread_summary(connection: Connection, owner: str) -> dict[str, tuple[int, float]]:
    """Per agent of the owner with unread items: (count, oldest creation time)."""
    rows = await _rows(
        connection,
        "SELECT n.agent_id, COUNT(*), MIN(n.created_at) FROM inbox n "
        "JOIN identities i ON i.agent_id = n.agent_id "
        "WHERE i.owner = %s AND n.state = 'unread' GROUP BY n.agent_id",
        (owner,),
    )
    return {str(row[0]): (int(row[1]), float(row[2])) for row in rows}


async def read_local_instance(connection: Connection, owner: str) -> str | None:
    """The owner's local instance id (engine.md §5.10)."""
    row = await _one(
        connection,
        "SELECT value FROM owner_meta WHERE owner = %s AND key = %s",
        (owner, LOCAL_INSTANCE_KEY),
    )
    return None if row is None else str(row[0])

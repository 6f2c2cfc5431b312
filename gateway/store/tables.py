"""The gateway's tables in SQLite, and the SQL behind each typed write and read.

engine.md §8 fixes the tables; every row is keyed by AgentId first. Writes arrive as the
closed `Write` union of `gateway.store.records` and are applied in order inside one
transaction (a unit of the group-commit writer), so each call to `Store.apply` is atomic.

A table that holds one of the records' row types is a `_Table`: its columns are the row's
fields by name, so the row type is the one definition of what the table holds, and the
row a write puts is the write's own `row()`, the same one `MemoryStore` keeps. What these
tables share with PostgreSQL's beyond the dialect (names, the record-body elision and the
record join) is in `gateway.store.layout`.

The module is long because it is one mapping: the DDL, and beside it the SQL of every `Write`
kind and every read against those tables; split, a column's change would be spread over
modules that must change together.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
import sqlite3
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeVar, assert_never, cast

from gateway.store import records
from gateway.store.errors import ConstraintViolation
from gateway.store.layout import (
    CERTIFICATION_TABLES,
    RECORD_COLUMNS,
    RECORD_FROM,
    elide_membership,
    record_row,
)

# Re-exported: the SQLite store reads its `meta` key as `tables.LOCAL_INSTANCE_KEY`.
from gateway.store.layout import LOCAL_INSTANCE_KEY as LOCAL_INSTANCE_KEY

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

RowT = TypeVar("RowT", bound="DataclassInstance")

SCHEMA_VERSION: Final = 3
"""Bumped with every change to `DDL` or `meta`; an unknown version fails closed at start.

2: `meta.local_instance_id` (engine.md §5.10); settled locks, evidence and finished outbox
rows are pruned (version 1 kept them all); a record's bytes are kept once per store in
`record_bodies`, with its membership descriptor elided (every member of a local
conversation stores the same record, and the descriptor is in `conversations`); completed
intents, classified deliveries and acknowledged items keep no payload.

3: `sends.bound` and `sends.resumable`: a keyed send's bind writes what it bound into its
row, so a reservation a restart cut is resumed (engine.md §9.1)."""

DDL: Final = (
    """CREATE TABLE identities (
        agent_id TEXT PRIMARY KEY,
        agent_name TEXT NOT NULL UNIQUE,
        signed_card BLOB NOT NULL,
        seed BLOB NOT NULL,
        created_at TEXT NOT NULL)""",
    """CREATE TABLE agent_tokens (
        token_digest TEXT PRIMARY KEY,
        agent_id TEXT NOT NULL REFERENCES identities(agent_id),
        revoked INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL)""",
    "CREATE INDEX agent_tokens_by_agent ON agent_tokens(agent_id)",
    """CREATE TABLE router_cursor (
        subscription TEXT PRIMARY KEY,
        cursor BLOB NOT NULL)""",
    """CREATE TABLE conversations (
        agent_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        descriptor BLOB NOT NULL,
        membership_hash TEXT NOT NULL,
        anchor BLOB NOT NULL,
        anchor_hash TEXT NOT NULL,
        head TEXT,
        depth INTEGER NOT NULL,
        PRIMARY KEY (agent_id, conversation_id))""",
    """CREATE TABLE post_intents (
        agent_id TEXT NOT NULL,
        post_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        bind_seq INTEGER NOT NULL,
        intent BLOB NOT NULL,
        state TEXT NOT NULL,
        record_hash TEXT,
        bound_at REAL NOT NULL,
        PRIMARY KEY (agent_id, post_id),
        UNIQUE (agent_id, bind_seq))""",
    "CREATE INDEX post_intents_open ON post_intents(agent_id, state)",
    """CREATE TABLE proposal_locks (
        agent_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        predecessor TEXT NOT NULL,
        action_hash TEXT NOT NULL,
        action BLOB NOT NULL,
        PRIMARY KEY (agent_id, conversation_id, predecessor))""",
    """CREATE TABLE staged_records (
        agent_id TEXT NOT NULL,
        record_hash TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        predecessor TEXT NOT NULL,
        record BLOB NOT NULL,
        PRIMARY KEY (agent_id, record_hash))""",
    """CREATE TABLE evidence (
        agent_id TEXT NOT NULL,
        subject TEXT NOT NULL,
        signer TEXT NOT NULL,
        kind TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        statement BLOB NOT NULL,
        PRIMARY KEY (agent_id, subject, signer, kind))""",
    "CREATE INDEX evidence_by_conversation ON evidence(agent_id, conversation_id)",
    """CREATE TABLE certified_records (
        agent_id TEXT NOT NULL,
        record_hash TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        depth INTEGER NOT NULL,
        author TEXT NOT NULL,
        post_id TEXT NOT NULL,
        record BLOB NOT NULL,
        commit_seq INTEGER NOT NULL,
        PRIMARY KEY (agent_id, record_hash),
        UNIQUE (agent_id, conversation_id, depth))""",
    """CREATE TABLE record_bodies (
        record_hash TEXT PRIMARY KEY,
        body BLOB NOT NULL)""",
    """CREATE TABLE reanchors (
        agent_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        previous_anchor_hash TEXT NOT NULL,
        instance_id TEXT NOT NULL,
        body BLOB NOT NULL,
        anchor_hash TEXT NOT NULL,
        completed BLOB,
        PRIMARY KEY (agent_id, conversation_id, previous_anchor_hash, instance_id))""",
    """CREATE TABLE outbox (
        agent_id TEXT NOT NULL,
        row_id INTEGER NOT NULL,
        conversation_id TEXT NOT NULL,
        post_id TEXT,
        message_id TEXT NOT NULL,
        envelope BLOB NOT NULL,
        state TEXT NOT NULL,
        PRIMARY KEY (agent_id, row_id))""",
    "CREATE INDEX outbox_pending ON outbox(agent_id, state)",
    """CREATE TABLE pending_deliveries (
        agent_id TEXT NOT NULL,
        token TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        record_hash TEXT NOT NULL,
        commit_seq INTEGER NOT NULL,
        projection BLOB NOT NULL,
        state TEXT NOT NULL,
        PRIMARY KEY (agent_id, token))""",
    "CREATE INDEX pending_deliveries_pending ON pending_deliveries(agent_id, state, commit_seq)",
    """CREATE TABLE inbox (
        agent_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        token TEXT NOT NULL,
        item BLOB NOT NULL,
        guidance BLOB,
        state TEXT NOT NULL,
        replacement_token TEXT,
        created_at REAL NOT NULL,
        PRIMARY KEY (agent_id, seq),
        UNIQUE (agent_id, token))""",
    "CREATE INDEX inbox_unread ON inbox(agent_id, state, seq)",
    """CREATE TABLE sends (
        agent_id TEXT NOT NULL,
        key TEXT NOT NULL,
        request BLOB NOT NULL,
        outcome BLOB,
        run_id TEXT NOT NULL,
        bound BLOB,
        resumable INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (agent_id, key))""",
    """CREATE TABLE collective_operations (
        agent_id TEXT NOT NULL,
        operation_id TEXT NOT NULL,
        open INTEGER NOT NULL,
        row BLOB NOT NULL,
        PRIMARY KEY (agent_id, operation_id))""",
    """CREATE TABLE received_requests (
        agent_id TEXT NOT NULL,
        operation_id TEXT NOT NULL,
        row BLOB NOT NULL,
        PRIMARY KEY (agent_id, operation_id))""",
)
"""The tables (version 2 added a `meta` fact, `record_bodies` and pruning; version 3 two
columns of `sends`)."""

_PRUNE_LOCKS: Final = (
    "DELETE FROM proposal_locks WHERE agent_id = ? AND conversation_id = ? AND predecessor != ?"
)
_PRUNE_EVIDENCE: Final = """DELETE FROM evidence WHERE agent_id = ?1 AND conversation_id = ?2 AND (
    (kind = 'action' AND subject NOT IN (SELECT action_hash FROM proposal_locks
        WHERE agent_id = ?1 AND conversation_id = ?2))
    OR (kind = 'durability' AND subject NOT IN (SELECT record_hash FROM staged_records
        WHERE agent_id = ?1 AND conversation_id = ?2))
    OR (kind = 'reanchor' AND subject NOT IN (SELECT anchor_hash FROM reanchors
        WHERE agent_id = ?1 AND conversation_id = ?2 AND completed IS NULL)))"""


def _prune_settled(db: sqlite3.Connection, agent_id: str, conversation_id: str, head: str) -> None:
    db.execute(_PRUNE_LOCKS, (agent_id, conversation_id, head))
    db.execute(_PRUNE_EVIDENCE, (agent_id, conversation_id))


def migrate_1_to_2(db: sqlite3.Connection, *, local_instance_id: str) -> None:
    """Prune what version 1 kept forever, and mint the local instance id."""
    db.execute("DELETE FROM outbox WHERE state != 'pending'")
    conversations = db.execute(
        "SELECT agent_id, conversation_id, coalesce(head, '') FROM conversations"
    ).fetchall()
    for agent_id, conversation_id, head in conversations:
        _prune_settled(db, agent_id, conversation_id, head)
    db.execute("CREATE TABLE record_bodies (record_hash TEXT PRIMARY KEY, body BLOB NOT NULL)")
    rows = db.execute(
        "SELECT r.rowid, r.record_hash, r.record, c.descriptor FROM certified_records r "
        "LEFT JOIN conversations c ON c.agent_id = r.agent_id "
        "AND c.conversation_id = r.conversation_id"
    )
    for rowid, record_hash, record, descriptor in rows.fetchall():
        body = elide_membership(bytes(record), None if descriptor is None else bytes(descriptor))
        db.execute("INSERT OR IGNORE INTO record_bodies VALUES (?, ?)", (record_hash, body))
        db.execute("UPDATE certified_records SET record = x'' WHERE rowid = ?", (rowid,))
    db.execute("UPDATE post_intents SET intent = x'' WHERE state = 'completed'")
    db.execute("UPDATE pending_deliveries SET projection = x'' WHERE state != 'pending'")
    acknowledged = db.execute("SELECT rowid, item FROM inbox WHERE state = 'acknowledged'")
    for rowid, item in acknowledged.fetchall():
        db.execute(
            "UPDATE inbox SET item = ? WHERE rowid = ?",
            (records.inbox_tombstone(bytes(item)), rowid),
        )
    db.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?)", (LOCAL_INSTANCE_KEY, local_instance_id)
    )


_SENDS_3: Final = (
    "ALTER TABLE sends ADD COLUMN bound BLOB",
    "ALTER TABLE sends ADD COLUMN resumable INTEGER NOT NULL DEFAULT 0",
)
"""Version 3's columns of `sends`, as a new file's `DDL` has them (after `run_id`)."""


def migrate_2_to_3(db: sqlite3.Connection) -> None:
    """Give `sends` what a keyed send's bind writes. Rows already there keep `resumable` 0:
    they recorded no binding, so one without an outcome stays indeterminate (§9.1)."""
    for statement in _SENDS_3:
        db.execute(statement)


def read_local_instance(db: sqlite3.Connection) -> str | None:
    """The store's local instance id."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", (LOCAL_INSTANCE_KEY,)).fetchone()
    return None if row is None else str(row[0])


# --- row tables ------------------------------------------------------------------------


def _insert_sql(
    table: str, insert: str, upsert_key: tuple[str, ...], columns: tuple[str, ...]
) -> str:
    """The statement that puts one row of `columns`: an upsert on `upsert_key` when every
    key column is among them, else `insert`."""
    values = f"({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    if not upsert_key or not set(upsert_key) <= set(columns):
        return f"{insert} INTO {table} {values}"
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in upsert_key)
    return f"INSERT INTO {table} {values} ON CONFLICT ({', '.join(upsert_key)}) DO UPDATE SET {updates}"


def _row_maker(
    row_type: type[RowT], columns: Sequence[str], enums: Mapping[str, type[enum.Enum]]
) -> Callable[[Sequence[Any]], RowT]:
    """A function from one result, in `columns` order, to its row.

    Reads build a row per result on the reader threads (issue 26's profile: a visible share
    of their CPU), and the row types are keyword-only dataclasses: so the function is
    generated once per table, as `dataclasses` generates `__init__`, unpacking the result
    and naming each field, with an enum's member found by a dict lookup of its value (an
    unknown value still raises the enum's own ValueError): about half the CPU of building a
    dict, zipping and calling the enum per row (bench/README.md "Start-up on a long
    history", the row micro-benchmark)."""
    names = [f"_{index}" for index in range(len(columns))]
    namespace: dict[str, Any] = {"_row_type": row_type}
    fields: list[str] = []
    for column, name in zip(columns, names, strict=True):
        kind = enums.get(column)
        if kind is None:
            fields.append(f"{column}={name}")
            continue
        namespace[f"_members_{column}"] = {member.value: member for member in kind}
        namespace[f"_enum_{column}"] = kind
        fields.append(
            f"{column}=_members_{column}[{name}] if {name} in _members_{column} "
            f"else _enum_{column}({name})"
        )
    unpack = ", ".join(names) + ("," if len(names) == 1 else "")
    source = (
        f"def make(values):\n    {unpack} = values\n    return _row_type({', '.join(fields)})\n"
    )
    exec(source, namespace)  # noqa: S102 - fixed source from a dataclass's own field names
    maker: Callable[[Sequence[Any]], RowT] = namespace["make"]
    return maker


class _Table(Generic[RowT]):
    """A table whose columns are a row type's fields, named alike (behind the key columns,
    `agent_id`, that a row does not carry); every read and write of it goes through here.

    An enum-typed field is stored as its value and read back as the member."""

    __slots__ = (
        "_columns",
        "_enums",
        "_insert",
        "_make",
        "_row_type",
        "_sql_by_key",
        "_values_of",
        "columns",
        "name",
    )

    def __init__(
        self,
        name: str,
        row_type: type[RowT],
        *,
        insert: Literal["INSERT", "INSERT OR REPLACE", "INSERT OR IGNORE"] = "INSERT OR REPLACE",
        upsert_key: tuple[str, ...] = (),
    ) -> None:
        """`insert` is how `put` meets an existing key: fail, replace the row, or keep it.

        With `upsert_key` (the primary key's columns), a row whose key exists is updated in
        place (`ON CONFLICT DO UPDATE` of every other column) instead of deleted and inserted
        again as `INSERT OR REPLACE` does: the same row results, and the key's index is not
        touched — what a head moving at every post wants."""
        self.name: Final = name
        self._row_type: Final = row_type
        self._columns: Final = tuple(field.name for field in dataclasses.fields(row_type))
        self.columns: Final = ", ".join(self._columns)
        """The row's columns in field order, for a SELECT."""
        hints = typing.get_type_hints(row_type)
        self._enums: Final = {
            column: hint
            for column in self._columns
            if isinstance(hint := hints[column], type) and issubclass(hint, enum.Enum)
        }
        self._insert: Final = insert
        self._make: Final[Callable[[Sequence[Any]], RowT]] = _row_maker(
            row_type, self._columns, self._enums
        )
        # Every group commit writes several rows: the field values are read in one C call
        # and the INSERT is spelled once per key, not per row.
        self._values_of: Final = operator.attrgetter(*self._columns)
        self._sql_by_key: Final = {
            key: _insert_sql(name, insert, upsert_key, (*key, *self._columns))
            for key in ((), ("agent_id",))
        }

    def read(self, values: Sequence[Any]) -> RowT:
        """The row of one result in `columns` order."""
        return self._make(values)

    def select(
        self, db: sqlite3.Connection, clause: str, parameters: Sequence[object] = ()
    ) -> list[RowT]:
        """The rows `SELECT columns FROM table <clause>` finds; `clause` is fixed SQL with
        placeholders for `parameters`."""
        sql = f"SELECT {self.columns} FROM {self.name} {clause}"  # noqa: S608 - fixed names
        return list(map(self._make, db.execute(sql, parameters)))

    def select_one(
        self, db: sqlite3.Connection, clause: str, parameters: Sequence[object]
    ) -> RowT | None:
        """The first row `select` would find, or None."""
        sql = f"SELECT {self.columns} FROM {self.name} {clause}"  # noqa: S608 - fixed names
        values = db.execute(sql, parameters).fetchone()
        return None if values is None else self._make(values)

    def put(
        self,
        db: sqlite3.Connection,
        row: RowT,
        *,
        agent_id: str | None = None,
        overrides: Mapping[str, object] | None = None,
    ) -> None:
        """Insert `row` (under `agent_id` for a per-agent table), as `insert` says;
        `overrides` stores other values than the row's in the columns it names."""
        values = self._values(row, overrides)
        if agent_id is None:
            db.execute(self._sql_by_key[()], values)
        else:
            db.execute(self._sql_by_key[("agent_id",)], (agent_id, *values))

    def put_agents_rows(
        self,
        db: sqlite3.Connection,
        rows: Iterable[tuple[str, RowT]],
        *,
        overrides: Mapping[str, object] | None = None,
    ) -> None:
        """`put` of several (agent_id, row) in one `executemany`."""
        params = [(agent_id, *self._values(row, overrides)) for agent_id, row in rows]
        db.executemany(self._sql_by_key[("agent_id",)], params)

    def _values(self, row: RowT, overrides: Mapping[str, object] | None) -> tuple[object, ...]:
        """The row's column values in order: enums as their values, `overrides` applied."""
        values = self._values_of(row)
        if len(self._columns) == 1:
            values = (values,)
        if not (self._enums or overrides):
            return values
        named = dict(zip(self._columns, values, strict=True))
        for column in self._enums:
            named[column] = named[column].value
        if overrides:
            named.update(overrides)
        return tuple(named.values())


_IDENTITIES: Final = _Table("identities", records.IdentityRow, insert="INSERT")
_CONVERSATIONS: Final = _Table(
    "conversations", records.ConversationRow, upsert_key=("agent_id", "conversation_id")
)
_INTENTS: Final = _Table("post_intents", records.IntentRow, upsert_key=("agent_id", "post_id"))
_LOCKS: Final = _Table("proposal_locks", records.LockRow)
_STAGED: Final = _Table("staged_records", records.StagedRow)
_EVIDENCE: Final = _Table("evidence", records.EvidenceRow, insert="INSERT OR IGNORE")
_RECORDS: Final = _Table("certified_records", records.RecordRow, insert="INSERT")
_REANCHORS: Final = _Table("reanchors", records.ReanchorRow)
_OUTBOX: Final = _Table("outbox", records.OutboxRow)
_DELIVERIES: Final = _Table("pending_deliveries", records.DeliveryRow, insert="INSERT")
_INBOX: Final = _Table("inbox", records.InboxRow, insert="INSERT")
_SENDS: Final = _Table("sends", records.SendRow)

_RowWrite = (
    records.PutRecord
    | records.PutDelivery
    | records.PutConversation
    | records.PutIntent
    | records.PutInboxItem
)

_RUN_TABLES: Final[dict[type, _Table[Any]]] = {
    records.PutRecord: _RECORDS,
    records.PutDelivery: _DELIVERIES,
    records.PutConversation: _CONVERSATIONS,
    records.PutIntent: _INTENTS,
    records.PutInboxItem: _INBOX,
}
"""Write kinds whose runs `apply_writes` puts in one `executemany`: each puts its whole
`row()` under its agent, as `_apply` does one at a time."""


def _delete_conversation(
    db: sqlite3.Connection, tables: Iterable[str], agent_id: str, conversation_id: str
) -> None:
    for table in tables:
        db.execute(
            f"DELETE FROM {table} WHERE agent_id = ? AND conversation_id = ?",  # noqa: S608 - fixed table names
            (agent_id, conversation_id),
        )


# --- writes ----------------------------------------------------------------------------


def apply_writes(db: sqlite3.Connection, writes: Sequence[records.Write]) -> None:
    """Apply writes in order on a connection inside the caller's transaction.

    A run of writes of one kind that only insert or replace whole rows (a local unit's
    records, deliveries, heads) is one `executemany`: each row is still its own statement
    execution, in order, without the per-row Python around it."""
    start = 0
    while start < len(writes):
        kind = type(writes[start])
        table = _RUN_TABLES.get(kind)
        if table is None:
            _apply(db, writes[start])
            start += 1
            continue
        end = start + 1
        while end < len(writes) and type(writes[end]) is kind:
            end += 1
        run = cast("Sequence[_RowWrite]", writes[start:end])
        if kind is records.PutRecord:
            _put_records(db, cast("Sequence[records.PutRecord]", run))
        else:
            table.put_agents_rows(db, ((write.agent_id, write.row()) for write in run))
        start = end


def _put_records(db: sqlite3.Connection, run: Sequence[records.PutRecord]) -> None:
    _RECORDS.put_agents_rows(
        db, ((write.agent_id, write.row()) for write in run), overrides=_NO_RECORD
    )
    # Every member of a local conversation stores the same record: its body is elided and
    # inserted once, not once per member.
    bodies: dict[str, records.PutRecord] = {}
    for write in run:
        bodies.setdefault(write.record_hash, write)
    db.executemany(
        "INSERT OR IGNORE INTO record_bodies VALUES (?, ?)",
        [
            (record_hash, elide_membership(write.record, write.membership))
            for record_hash, write in bodies.items()
        ],
    )


_NO_RECORD: Final = {"record": b""}
"""A certified record's row keeps no bytes: they are in `record_bodies`, once per store."""


def _put_body(db: sqlite3.Connection, write: records.PutRecord) -> None:
    db.execute(
        "INSERT OR IGNORE INTO record_bodies VALUES (?, ?)",
        (write.record_hash, elide_membership(write.record, write.membership)),
    )


def _apply(db: sqlite3.Connection, write: records.Write) -> None:
    match write:
        case records.PutIdentity():
            _IDENTITIES.put(db, write.row())
        case records.PutToken():
            db.execute(
                "INSERT INTO agent_tokens (token_digest, agent_id, created_at) VALUES (?, ?, ?)",
                (write.token_digest, write.agent_id, write.created_at),
            )
        case records.RevokeTokens():
            db.execute("UPDATE agent_tokens SET revoked = 1 WHERE agent_id = ?", (write.agent_id,))
        case records.PutCursor():
            db.execute(
                "INSERT INTO router_cursor VALUES (?, ?) "
                "ON CONFLICT (subscription) DO UPDATE SET cursor = excluded.cursor",
                (write.subscription, write.cursor),
            )
        case records.PutConversation():
            _CONVERSATIONS.put(db, write.row(), agent_id=write.agent_id)
        case records.PutIntent():
            _INTENTS.put(db, write.row(), agent_id=write.agent_id)
        case records.PutLock():
            _LOCKS.put(db, write.row(), agent_id=write.agent_id)
        case records.PutStaged():
            _STAGED.put(db, write.row(), agent_id=write.agent_id)
        case records.DeleteStaged():
            db.execute(
                "DELETE FROM staged_records WHERE agent_id = ? AND record_hash = ?",
                (write.agent_id, write.record_hash),
            )
        case records.PutEvidence():
            _EVIDENCE.put(db, write.row(), agent_id=write.agent_id)
        case records.PutRecord():
            # The bytes are in record_bodies, once for every member of the conversation.
            _RECORDS.put(db, write.row(), agent_id=write.agent_id, overrides=_NO_RECORD)
            _put_body(db, write)
        case records.PutReanchor():
            _REANCHORS.put(db, write.row(), agent_id=write.agent_id)
        case records.ResetConversation():
            _delete_conversation(db, CERTIFICATION_TABLES, write.agent_id, write.conversation_id)
        case records.PutOutbox():
            _OUTBOX.put(db, write.row(), agent_id=write.agent_id)
        case records.SetOutboxState():
            if write.state is records.OutboxState.PENDING:
                db.execute(
                    "UPDATE outbox SET state = ? WHERE agent_id = ? AND row_id = ?",
                    (write.state.value, write.agent_id, write.row_id),
                )
            else:
                # Accepted or discarded rows are never read again: prune them.
                db.execute(
                    "DELETE FROM outbox WHERE agent_id = ? AND row_id = ?",
                    (write.agent_id, write.row_id),
                )
        case records.MoveToLocal():
            _delete_conversation(
                db, (*CERTIFICATION_TABLES, _OUTBOX.name), write.agent_id, write.conversation_id
            )
            db.execute(
                "DELETE FROM reanchors WHERE agent_id = ? AND conversation_id = ? "
                "AND completed IS NULL",
                (write.agent_id, write.conversation_id),
            )
        case records.PruneSettled():
            _prune_settled(db, write.agent_id, write.conversation_id, write.head or "")
        case records.PutDelivery():
            _DELIVERIES.put(db, write.row(), agent_id=write.agent_id)
        case records.SetDeliveryState():
            # Only pending deliveries are read again: a classified or consumed one keeps no
            # projection (the inbox item, or nothing, is what it became).
            db.execute(
                "UPDATE pending_deliveries SET state = ?, projection = CASE WHEN ? = 'pending' "
                "THEN projection ELSE x'' END WHERE agent_id = ? AND token = ?",
                (write.state.value, write.state.value, write.agent_id, write.token),
            )
        case records.PutInboxItem():
            _INBOX.put(db, write.row(), agent_id=write.agent_id)
        case records.AcknowledgeItem():
            db.execute(
                "UPDATE inbox SET state = ?, item = coalesce(?, item) "
                "WHERE agent_id = ? AND token = ? AND state = ?",
                (
                    records.InboxState.ACKNOWLEDGED.value,
                    write.tombstone,
                    write.agent_id,
                    write.token,
                    records.InboxState.UNREAD.value,
                ),
            )
        case records.PutOperation():
            db.execute(
                "INSERT OR REPLACE INTO collective_operations VALUES (?, ?, ?, ?)",
                (write.agent_id, write.operation_id, int(write.open), write.row),
            )
        case records.PutReceivedRequest():
            db.execute(
                "INSERT OR REPLACE INTO received_requests VALUES (?, ?, ?)",
                (write.agent_id, write.operation_id, write.row),
            )
        case records.DeleteReceivedRequest():
            db.execute(
                "DELETE FROM received_requests WHERE agent_id = ? AND operation_id = ?",
                (write.agent_id, write.operation_id),
            )
        case records.PutSend():
            _SENDS.put(db, write.row(), agent_id=write.agent_id)
        case records.BindSend():
            db.execute(
                "UPDATE sends SET bound = ? WHERE agent_id = ? AND key = ?",
                (write.bound, write.agent_id, write.key),
            )
        case records.SetSendOutcome():
            db.execute(
                "UPDATE sends SET outcome = ? WHERE agent_id = ? AND key = ?",
                (write.outcome, write.agent_id, write.key),
            )
        case records.ReplaceInboxItem():
            db.execute(
                "UPDATE inbox SET state = ?, replacement_token = ? "
                "WHERE agent_id = ? AND token = ? AND state = ?",
                (
                    records.InboxState.REPLACED.value,
                    write.replacement_token,
                    write.agent_id,
                    write.token,
                    records.InboxState.UNREAD.value,
                ),
            )
        case records.ReleasePartitions() | records.SetAsideRow() | records.RefuseIntent():
            raise ConstraintViolation(records.NOT_A_CLUSTER)
        case _:
            assert_never(write)


# --- reads -----------------------------------------------------------------------------


def read_identities(db: sqlite3.Connection) -> list[records.IdentityRow]:
    """Every hosted agent's identity, in registration order."""
    return _IDENTITIES.select(db, "ORDER BY rowid")


def read_token(db: sqlite3.Connection, token_digest: str) -> tuple[str, bool] | None:
    """(agent_id, revoked) of a token digest, or None."""
    row = db.execute(
        "SELECT agent_id, revoked FROM agent_tokens WHERE token_digest = ?", (token_digest,)
    ).fetchone()
    return None if row is None else (row[0], bool(row[1]))


def read_cursor(db: sqlite3.Connection, subscription: str) -> bytes | None:
    """The stored cursor of a Router subscription."""
    row = db.execute(
        "SELECT cursor FROM router_cursor WHERE subscription = ?", (subscription,)
    ).fetchone()
    return None if row is None else bytes(row[0])


def _max(db: sqlite3.Connection, sql: str, agent_id: str) -> int:
    row = db.execute(sql, (agent_id,)).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


_PENDING_DELIVERIES: Final = "WHERE agent_id = ? AND state = 'pending' ORDER BY commit_seq"
"""Deliveries not classified yet, in commit order."""


_OPEN_INTENTS: Final = (
    "INDEXED BY post_intents_open WHERE agent_id = ? AND state = 'open' ORDER BY bind_seq"
)
"""An agent's open intents, found through `post_intents_open`.

Without statistics SQLite's planner prefers the `(agent_id, bind_seq)` index for the ORDER
BY and reads every intent the agent ever bound to filter on `state`: a start that grew with
history (issue 26). The open ones are few; sorting them costs nothing."""

_HEADS_MAX_COMMIT_SEQ: Final = (
    "SELECT COUNT(c.head), COUNT(r.record_hash), MAX(r.commit_seq) FROM conversations c "
    "LEFT JOIN certified_records r ON r.agent_id = c.agent_id AND r.record_hash = c.head "
    "WHERE c.agent_id = ?"
)


def _max_commit_seq(db: sqlite3.Connection, agent_id: str) -> int:
    """The agent's highest record `commit_seq`, read from its conversations' heads.

    A member stores a conversation's records in chain order, each with the next commit
    sequence, in the same commit that moves the conversation's head onto it (promotion, a
    local unit, a moved conversation's catch-up), and no record or conversation row is ever
    deleted (a genesis swap resets only an empty conversation): so the highest sequence is
    a head's. One lookup per conversation instead of a read of every record the agent
    stores (issue 26). A head without its record (a damaged store) falls back to that read."""
    heads, found, highest = db.execute(_HEADS_MAX_COMMIT_SEQ, (agent_id,)).fetchone()
    if heads != found:
        return _max(
            db, "SELECT MAX(commit_seq) FROM certified_records WHERE agent_id = ?", agent_id
        )
    return int(highest) if highest is not None else 0


def read_snapshot(db: sqlite3.Connection, agent_id: str) -> records.AgentSnapshot:
    """Everything one agent rebuilds from at start: what has a queue or a timer, and the
    sequence counters, each through an index (nothing here reads the agent's history)."""
    key = (agent_id,)
    return records.AgentSnapshot(
        conversations=tuple(read_conversations(db, agent_id)),
        open_intents=tuple(_INTENTS.select(db, _OPEN_INTENTS, key)),
        locks=tuple(_LOCKS.select(db, "WHERE agent_id = ?", key)),
        staged=tuple(_STAGED.select(db, "WHERE agent_id = ?", key)),
        evidence=tuple(_EVIDENCE.select(db, "WHERE agent_id = ?", key)),
        reanchors=tuple(_REANCHORS.select(db, "WHERE agent_id = ?", key)),
        pending_outbox=tuple(
            _OUTBOX.select(db, "WHERE agent_id = ? AND state = 'pending' ORDER BY row_id", key)
        ),
        pending_deliveries=tuple(_DELIVERIES.select(db, _PENDING_DELIVERIES, key)),
        open_operations=tuple(
            bytes(row[0])
            for row in db.execute(
                "SELECT row FROM collective_operations WHERE agent_id = ? AND open = 1", key
            )
        ),
        received_requests=tuple(
            bytes(row[0])
            for row in db.execute("SELECT row FROM received_requests WHERE agent_id = ?", key)
        ),
        max_bind_seq=_max(
            db, "SELECT MAX(bind_seq) FROM post_intents WHERE agent_id = ?", agent_id
        ),
        max_commit_seq=_max_commit_seq(db, agent_id),
        max_inbox_seq=_max(db, "SELECT MAX(seq) FROM inbox WHERE agent_id = ?", agent_id),
        max_outbox_row=_max(db, "SELECT MAX(row_id) FROM outbox WHERE agent_id = ?", agent_id),
        unread=_max(
            db, "SELECT COUNT(*) FROM inbox WHERE agent_id = ? AND state = 'unread'", agent_id
        ),
    )


def read_unread(
    db: sqlite3.Connection, agent_id: str, after_seq: int, limit: int
) -> list[records.InboxRow]:
    """Unread inbox items after `after_seq`, in inbox order."""
    return _INBOX.select(
        db,
        "WHERE agent_id = ? AND state = 'unread' AND seq > ? ORDER BY seq LIMIT ?",
        (agent_id, after_seq, limit),
    )


def read_inbox_by_token(
    db: sqlite3.Connection, agent_id: str, token: str
) -> records.InboxRow | None:
    """One inbox item by its token, for this agent only."""
    return _INBOX.select_one(db, "WHERE agent_id = ? AND token = ?", (agent_id, token))


TOKENS_PER_QUERY: Final = 500
"""Tokens per `IN (...)` query, below SQLite's host-parameter limit."""


def read_inbox_by_tokens(
    db: sqlite3.Connection, agent_id: str, tokens: Sequence[str]
) -> dict[str, records.InboxRow]:
    """This agent's inbox items among `tokens`, by token."""
    found: dict[str, records.InboxRow] = {}
    for start in range(0, len(tokens), TOKENS_PER_QUERY):
        chunk = list(tokens[start : start + TOKENS_PER_QUERY])
        marks = ",".join("?" * len(chunk))
        for item in _INBOX.select(
            db, f"WHERE agent_id = ? AND token IN ({marks})", (agent_id, *chunk)
        ):
            found[item.token] = item
    return found


def read_oldest_unread(db: sqlite3.Connection, agent_id: str) -> float | None:
    """Creation time of the oldest unread item."""
    row = db.execute(
        "SELECT MIN(created_at) FROM inbox WHERE agent_id = ? AND state = 'unread'", (agent_id,)
    ).fetchone()
    return None if row is None or row[0] is None else float(row[0])


def read_records(
    db: sqlite3.Connection, agent_id: str, conversation_id: str, after_depth: int, limit: int
) -> list[records.RecordRow]:
    """Certified records of a conversation after a depth, in chain order."""
    return [
        record_row(row)
        for row in db.execute(
            f"SELECT {RECORD_COLUMNS} FROM {RECORD_FROM} "  # noqa: S608 - fixed columns
            "WHERE r.agent_id = ? AND r.conversation_id = ? AND r.depth > ? "
            "ORDER BY r.depth LIMIT ?",
            (agent_id, conversation_id, after_depth, limit),
        )
    ]


def read_record_by_hash(
    db: sqlite3.Connection, agent_id: str, record_hash: str
) -> records.RecordRow | None:
    """One certified record by its hash."""
    row = db.execute(
        f"SELECT {RECORD_COLUMNS} FROM {RECORD_FROM} "  # noqa: S608 - fixed columns
        "WHERE r.agent_id = ? AND r.record_hash = ?",
        (agent_id, record_hash),
    ).fetchone()
    return None if row is None else record_row(row)


def read_intent(db: sqlite3.Connection, agent_id: str, post_id: str) -> records.IntentRow | None:
    """One post intent by PostId."""
    return _INTENTS.select_one(db, "WHERE agent_id = ? AND post_id = ?", (agent_id, post_id))


def read_conversations(db: sqlite3.Connection, agent_id: str) -> list[records.ConversationRow]:
    """Every conversation an agent stores, by ConversationId."""
    return _CONVERSATIONS.select(db, "WHERE agent_id = ? ORDER BY conversation_id", (agent_id,))


def read_completed_reanchor(
    db: sqlite3.Connection, agent_id: str, conversation_id: str, previous_anchor_hash: str
) -> bytes | None:
    """The completed re-anchor that followed an anchor, if any."""
    row = db.execute(
        "SELECT completed FROM reanchors WHERE agent_id = ? AND conversation_id = ? "
        "AND previous_anchor_hash = ? AND completed IS NOT NULL",
        (agent_id, conversation_id, previous_anchor_hash),
    ).fetchone()
    return None if row is None else bytes(row[0])


def read_pending_deliveries(
    db: sqlite3.Connection, agent_id: str, limit: int
) -> list[records.DeliveryRow]:
    """Deliveries not classified yet, in commit order."""
    return _DELIVERIES.select(db, f"{_PENDING_DELIVERIES} LIMIT ?", (agent_id, limit))


def read_send(db: sqlite3.Connection, agent_id: str, key: str) -> records.SendRow | None:
    """An idempotency key's row."""
    row = _SENDS.select_one(db, "WHERE agent_id = ? AND key = ?", (agent_id, key))
    # SQLite keeps the flag as an integer.
    return None if row is None else dataclasses.replace(row, resumable=bool(row.resumable))


_UNREAD_SUMMARY: Final = """SELECT agent_id, count, oldest FROM (
    SELECT i.agent_id,
        (SELECT COUNT(*) FROM inbox WHERE agent_id = i.agent_id AND state = 'unread') AS count,
        (SELECT MIN(created_at) FROM inbox WHERE agent_id = i.agent_id AND state = 'unread')
            AS oldest
    FROM identities i) WHERE count > 0"""
"""Per hosted agent, through `inbox_unread`: a `GROUP BY agent_id` over `state = 'unread'`
scans that whole index, acknowledged items included, at every gauge reading (issue 26)."""


def read_unread_summary(db: sqlite3.Connection) -> dict[str, tuple[int, float]]:
    """Per agent with unread items: (count, oldest creation time)."""
    return {row[0]: (int(row[1]), float(row[2])) for row in db.execute(_UNREAD_SUMMARY)}

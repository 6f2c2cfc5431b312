"""`SqliteStore`: the `Store` seam on one SQLite file with group commit (engine.md §8)."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, TypeVar

from harness_contract.ids import RandomId

from gateway.closing import AsyncClosing
from gateway.store import tables
from gateway.store.errors import ConstraintViolation, StoreCorrupt
from gateway.store.observer import StoreObserver
from gateway.store.records import (
    AgentSnapshot,
    ConversationRow,
    DeliveryRow,
    IdentityRow,
    InboxRow,
    IntentRow,
    RecordRow,
    SendRow,
    Write,
)
from gateway.store.sqlite import Migration, Schema, SqliteDatabase
from gateway.store.writer import CommitWriterSettings, FatalHandler

T = TypeVar("T")


def _mint_local_instance() -> str:
    return RandomId.ROUTER_INSTANCE.mint()


SCHEMA: Final = Schema(
    version=tables.SCHEMA_VERSION,
    statements=tables.DDL,
    migrations=(
        Migration(
            from_version=1,
            apply=lambda db: tables.migrate_1_to_2(db, local_instance_id=_mint_local_instance()),
        ),
        Migration(from_version=2, apply=tables.migrate_2_to_3),
    ),
    created=lambda: {tables.LOCAL_INSTANCE_KEY: _mint_local_instance()},
    # Read whole at start and bounded by conversations and agents, not by history
    # (engine.md §8.5): checked before a large file serves. The rest (records, bodies,
    # intents, deliveries, the inbox, sends, operations) is checked after it serves.
    checked_at_open=(
        "identities",
        "agent_tokens",
        "router_cursor",
        "conversations",
        "proposal_locks",
        "staged_records",
        "evidence",
        "reanchors",
        "outbox",
        "received_requests",
    ),
)
"""The gateway's tables at this build's version."""

STORE_FILE: Final = "gateway.sqlite3"
"""The store's file name inside the data directory."""


def _read_unread_count(db: sqlite3.Connection, agent_id: str) -> int:
    """The agent's unread items, counted on the `inbox_unread` index: no row is read out."""
    row = db.execute(
        "SELECT COUNT(*) FROM inbox WHERE agent_id = ? AND state = 'unread'", (agent_id,)
    ).fetchone()
    return int(row[0])


class SqliteStore(AsyncClosing):
    """A `Store` on one SQLite file; every row is keyed by agent."""

    def __init__(self, database: SqliteDatabase, local_instance_id: str) -> None:
        self._db = database
        self.local_instance_id = local_instance_id
        """The store's durable local instance id (engine.md §5.10): never changes."""

    @classmethod
    async def open(
        cls,
        path: Path | str,
        *,
        writer_settings: CommitWriterSettings | None = None,
        observer: StoreObserver | None = None,
        on_fatal: FatalHandler | None = None,
    ) -> SqliteStore:
        """Open (or create) the store file; see `SqliteDatabase.open` for the errors."""
        database = await SqliteDatabase.open(
            path,
            schema=SCHEMA,
            writer_settings=writer_settings,
            observer=observer,
            on_fatal=on_fatal,
        )
        local = await database.read(tables.read_local_instance, snapshot=False)
        if local is None:
            # A store of this version always has one: fail closed rather than mint another,
            # which would be a second order for every local conversation.
            await database.close()
            raise StoreCorrupt(Path(path), "meta has no local_instance_id")
        return cls(database, local)

    async def _one(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """A read of one statement, without a read transaction around it: SQLite reads one
        statement from one snapshot by itself (`SqliteDatabase.read`)."""
        return await self._db.read(fn, snapshot=False)

    def start_integrity_check(self) -> None:
        """The full `quick_check` a large file's open deferred, in the background
        (`SqliteDatabase.start_integrity_check`); the daemon calls it once it serves."""
        self._db.start_integrity_check()

    async def apply(self, writes: Sequence[Write]) -> None:
        """Commit `writes` atomically as one unit of a group commit."""
        if not writes:
            return
        try:
            await self._db.write(functools.partial(tables.apply_writes, writes=tuple(writes)))
        except sqlite3.IntegrityError as error:
            # The unit's savepoint was rolled back: nothing of this batch was applied.
            raise ConstraintViolation(str(error)) from error

    async def identities(self) -> list[IdentityRow]:
        return await self._one(tables.read_identities)

    async def token(self, token_digest: str) -> tuple[str, bool] | None:
        return await self._one(functools.partial(tables.read_token, token_digest=token_digest))

    async def cursor(self, subscription: str) -> bytes | None:
        return await self._one(functools.partial(tables.read_cursor, subscription=subscription))

    async def snapshot(self, agent_id: str) -> AgentSnapshot:
        # Many statements that must agree: one read transaction.
        return await self._db.read(functools.partial(tables.read_snapshot, agent_id=agent_id))

    async def unread(self, agent_id: str, after_seq: int, limit: int) -> list[InboxRow]:
        return await self._one(
            functools.partial(
                tables.read_unread, agent_id=agent_id, after_seq=after_seq, limit=limit
            )
        )

    async def pending_deliveries(self, agent_id: str, limit: int) -> list[DeliveryRow]:
        return await self._one(
            functools.partial(tables.read_pending_deliveries, agent_id=agent_id, limit=limit)
        )

    async def inbox_item(self, agent_id: str, token: str) -> InboxRow | None:
        return await self._one(
            functools.partial(tables.read_inbox_by_token, agent_id=agent_id, token=token)
        )

    async def inbox_items(self, agent_id: str, tokens: Sequence[str]) -> dict[str, InboxRow]:
        # One statement up to `tables.TOKENS_PER_QUERY` tokens; more take one snapshot.
        return await self._db.read(
            functools.partial(tables.read_inbox_by_tokens, agent_id=agent_id, tokens=tokens),
            snapshot=len(tokens) > tables.TOKENS_PER_QUERY,
        )

    async def unread_summary(self) -> dict[str, tuple[int, float]]:
        return await self._one(tables.read_unread_summary)

    async def oldest_unread(self, agent_id: str) -> float | None:
        return await self._one(functools.partial(tables.read_oldest_unread, agent_id=agent_id))

    async def unread_count(self, agent_id: str) -> int:
        return await self._one(functools.partial(_read_unread_count, agent_id=agent_id))

    async def conversations(self, agent_id: str) -> list[ConversationRow]:
        return await self._one(functools.partial(tables.read_conversations, agent_id=agent_id))

    async def records(
        self, agent_id: str, conversation_id: str, after_depth: int, limit: int
    ) -> list[RecordRow]:
        return await self._one(
            functools.partial(
                tables.read_records,
                agent_id=agent_id,
                conversation_id=conversation_id,
                after_depth=after_depth,
                limit=limit,
            )
        )

    async def record(self, agent_id: str, record_hash: str) -> RecordRow | None:
        return await self._one(
            functools.partial(
                tables.read_record_by_hash, agent_id=agent_id, record_hash=record_hash
            )
        )

    async def completed_reanchor(
        self, agent_id: str, conversation_id: str, previous_anchor_hash: str
    ) -> bytes | None:
        return await self._one(
            functools.partial(
                tables.read_completed_reanchor,
                agent_id=agent_id,
                conversation_id=conversation_id,
                previous_anchor_hash=previous_anchor_hash,
            )
        )

    async def intent(self, agent_id: str, post_id: str) -> IntentRow | None:
        return await self._one(
            functools.partial(tables.read_intent, agent_id=agent_id, post_id=post_id)
        )

    async def send_row(self, agent_id: str, key: str) -> SendRow | None:
        return await self._one(functools.partial(tables.read_send, agent_id=agent_id, key=key))

    async def close(self) -> None:
        """Flush queued writes and close; idempotent."""
        await self._db.close()

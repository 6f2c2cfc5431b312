"""The PostgreSQL store's tables, their version, and migrations (engine.md §8).

One database may hold the stores of several daemons. Each daemon is an *owner*: its
agents are the rows of `identities` with its name, and every other agent-keyed table is
keyed by AgentId first, as in SQLite (the agent implies the owner). Per-daemon facts are
keyed by owner (`owner_meta`: the local instance id; `router_cursor`; `leases`). Record
bodies (content-addressed) and API tokens (digest-keyed) are global. Schema-wide facts are
in `harness_meta`: `schema_version` and `protocol_version`.

Callers may rely on:

- `inspect(connection)` only reads (the catalog and `harness_meta`).
- `migrate(dsn)` and the first open of an empty database run under one transaction-level
  advisory lock (`MIGRATE_LOCK`), so concurrent daemons and `harness-gateway migrate`
  commands serialise; DDL is transactional, so a migration applies whole or not at all.
- `prepare(connection)` (at every open) creates the schema in an empty database, accepts
  this version, and refuses anything else with `DatabaseSchemaMismatch` without writing:
  an older version it can migrate (run `harness-gateway migrate`), a newer or unknown
  version, another protocol, or tables without `harness_meta` (fail closed).
"""

from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass
from typing import Final

import psycopg

from gateway.store.errors import DatabaseSchemaMismatch
from gateway.store.postgres.connection import (
    CONNECT_TIMEOUT,
    Connection,
    ConnectSettings,
    advisory_key,
)
from gateway.store.sqlite import PROTOCOL_VERSION

logger = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 2
"""This build's PostgreSQL schema version; bumped with every change to `DDL`, with a
`Migration` from the version before.

2: `sends.bound` and `sends.resumable`: a keyed send's bind writes what it bound into its
row, so a reservation a restart cut is resumed (engine.md §9.1)."""

META_TABLE: Final = "harness_meta"
"""The table of schema-wide facts; its presence marks a harness-gateway database."""

SCHEMA_VERSION_KEY: Final = "schema_version"
PROTOCOL_VERSION_KEY: Final = "protocol_version"

MIGRATE_LOCK: Final = advisory_key("harness-migrate")
"""Transaction-level advisory lock held while the schema is created or migrated."""

DDL: Final = (
    "CREATE TABLE harness_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE leases (
        owner TEXT PRIMARY KEY,
        fence BIGINT NOT NULL,
        holder TEXT NOT NULL,
        acquired_at TIMESTAMPTZ NOT NULL)""",
    """CREATE TABLE owner_meta (
        owner TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (owner, key))""",
    """CREATE TABLE router_cursor (
        owner TEXT NOT NULL,
        subscription TEXT NOT NULL,
        cursor BYTEA NOT NULL,
        PRIMARY KEY (owner, subscription))""",
    """CREATE TABLE identities (
        registered BIGINT GENERATED ALWAYS AS IDENTITY,
        owner TEXT NOT NULL,
        agent_id TEXT PRIMARY KEY,
        agent_name TEXT NOT NULL,
        signed_card BYTEA NOT NULL,
        seed BYTEA NOT NULL,
        created_at TEXT NOT NULL,
        UNIQUE (owner, agent_name))""",
    "CREATE INDEX identities_by_owner ON identities (owner, registered)",
    """CREATE TABLE agent_tokens (
        token_digest TEXT PRIMARY KEY,
        agent_id TEXT NOT NULL REFERENCES identities (agent_id),
        revoked BOOLEAN NOT NULL DEFAULT false,
        created_at TEXT NOT NULL)""",
    "CREATE INDEX agent_tokens_by_agent ON agent_tokens (agent_id)",
    """CREATE TABLE conversations (
        agent_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        descriptor BYTEA NOT NULL,
        membership_hash TEXT NOT NULL,
        anchor BYTEA NOT NULL,
        anchor_hash TEXT NOT NULL,
        head TEXT,
        depth BIGINT NOT NULL,
        PRIMARY KEY (agent_id, conversation_id))""",
    """CREATE TABLE post_intents (
        agent_id TEXT NOT NULL,
        post_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        bind_seq BIGINT NOT NULL,
        intent BYTEA NOT NULL,
        state TEXT NOT NULL,
        record_hash TEXT,
        bound_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (agent_id, post_id),
        UNIQUE (agent_id, bind_seq))""",
    "CREATE INDEX post_intents_open ON post_intents (agent_id, state)",
    """CREATE TABLE proposal_locks (
        agent_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        predecessor TEXT NOT NULL,
        action_hash TEXT NOT NULL,
        action BYTEA NOT NULL,
        PRIMARY KEY (agent_id, conversation_id, predecessor))""",
    """CREATE TABLE staged_records (
        agent_id TEXT NOT NULL,
        record_hash TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        predecessor TEXT NOT NULL,
        record BYTEA NOT NULL,
        PRIMARY KEY (agent_id, record_hash))""",
    """CREATE TABLE evidence (
        agent_id TEXT NOT NULL,
        subject TEXT NOT NULL,
        signer TEXT NOT NULL,
        kind TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        statement BYTEA NOT NULL,
        PRIMARY KEY (agent_id, subject, signer, kind))""",
    "CREATE INDEX evidence_by_conversation ON evidence (agent_id, conversation_id)",
    """CREATE TABLE certified_records (
        agent_id TEXT NOT NULL,
        record_hash TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        depth BIGINT NOT NULL,
        author TEXT NOT NULL,
        post_id TEXT NOT NULL,
        record BYTEA NOT NULL,
        commit_seq BIGINT NOT NULL,
        PRIMARY KEY (agent_id, record_hash),
        UNIQUE (agent_id, conversation_id, depth))""",
    """CREATE TABLE record_bodies (
        record_hash TEXT PRIMARY KEY,
        body BYTEA NOT NULL)""",
    """CREATE TABLE reanchors (
        agent_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        previous_anchor_hash TEXT NOT NULL,
        instance_id TEXT NOT NULL,
        body BYTEA NOT NULL,
        anchor_hash TEXT NOT NULL,
        completed BYTEA,
        PRIMARY KEY (agent_id, conversation_id, previous_anchor_hash, instance_id))""",
    """CREATE TABLE outbox (
        agent_id TEXT NOT NULL,
        row_id BIGINT NOT NULL,
        conversation_id TEXT NOT NULL,
        post_id TEXT,
        message_id TEXT NOT NULL,
        envelope BYTEA NOT NULL,
        state TEXT NOT NULL,
        PRIMARY KEY (agent_id, row_id))""",
    "CREATE INDEX outbox_pending ON outbox (agent_id, state)",
    """CREATE TABLE pending_deliveries (
        agent_id TEXT NOT NULL,
        token TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        record_hash TEXT NOT NULL,
        commit_seq BIGINT NOT NULL,
        projection BYTEA NOT NULL,
        state TEXT NOT NULL,
        PRIMARY KEY (agent_id, token))""",
    "CREATE INDEX pending_deliveries_pending ON pending_deliveries (agent_id, state, commit_seq)",
    """CREATE TABLE inbox (
        agent_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        token TEXT NOT NULL,
        item BYTEA NOT NULL,
        guidance BYTEA,
        state TEXT NOT NULL,
        replacement_token TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (agent_id, seq),
        UNIQUE (agent_id, token))""",
    "CREATE INDEX inbox_unread ON inbox (agent_id, state, seq)",
    """CREATE TABLE sends (
        agent_id TEXT NOT NULL,
        key TEXT NOT NULL,
        request BYTEA NOT NULL,
        outcome BYTEA,
        run_id TEXT NOT NULL,
        bound BYTEA,
        resumable BOOLEAN NOT NULL DEFAULT false,
        PRIMARY KEY (agent_id, key))""",
    """CREATE TABLE collective_operations (
        agent_id TEXT NOT NULL,
        operation_id TEXT NOT NULL,
        open BOOLEAN NOT NULL,
        row BYTEA NOT NULL,
        PRIMARY KEY (agent_id, operation_id))""",
    """CREATE TABLE received_requests (
        agent_id TEXT NOT NULL,
        operation_id TEXT NOT NULL,
        row BYTEA NOT NULL,
        PRIMARY KEY (agent_id, operation_id))""",
)
"""The tables at `SCHEMA_VERSION`, one statement each (`harness_meta` first)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration:
    """The step from schema `from_version` to `from_version + 1`: statements run in the
    migrating transaction, before `harness_meta.schema_version` is moved on."""

    from_version: int
    statements: tuple[str, ...]


def _sends_resumable() -> Migration:
    """1 → 2: the columns a keyed send's bind writes. Rows already there keep `resumable`
    false: they recorded no binding, so one without an outcome stays indeterminate."""
    return Migration(
        from_version=1,
        statements=(
            "ALTER TABLE sends ADD COLUMN bound BYTEA",
            "ALTER TABLE sends ADD COLUMN resumable BOOLEAN NOT NULL DEFAULT false",
        ),
    )


MIGRATIONS: tuple[Migration, ...] = (_sends_resumable(),)
"""Every step this build can apply, one per version after the first (version 1)."""


class SchemaState(enum.Enum):
    """What `inspect` found in a database."""

    EMPTY = "empty"
    """No table at all: the schema is created at the first open (or by `migrate`)."""
    CURRENT = "current"
    """This build's version and protocol: opens as it is."""
    OLDER = "older"
    """An older version this build migrates: `harness-gateway migrate` brings it here."""
    REFUSED = "refused"
    """Not a database this build may touch: a newer or unknown version, another protocol,
    or tables without `harness_meta`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaStatus:
    """A database's schema as `inspect` found it (what `migrate --check` reports)."""

    state: SchemaState
    found: int | None
    """The stored schema version; None for an empty database or one without a valid one."""
    expected: int
    """This build's version."""
    key: str
    """The `harness_meta` key that decided a refusal (`schema_version` or `protocol_version`)."""
    found_value: str | None
    """That key's stored value, as text (None when absent)."""


def _chain_from(version: int) -> list[Migration] | None:
    steps: list[Migration] = []
    while version < SCHEMA_VERSION:
        step = next((m for m in MIGRATIONS if m.from_version == version), None)
        if step is None:
            return None
        steps.append(step)
        version += 1
    return steps


STORE_TABLES: Final = frozenset(
    match.group(1)
    for statement in DDL
    if (match := re.match(r"CREATE TABLE (\w+)", statement)) is not None
)
"""The names of the store's tables; others in the database are not the store's concern."""


async def inspect(connection: Connection) -> SchemaStatus:
    """Read the catalog and `harness_meta` of the connection's current schema; no write."""
    cursor = await connection.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    )
    # Only the store's own table names count: the Registry's `registry_*` tables (or anything
    # else) may share the database, but a table of ours without `harness_meta` is foreign.
    tables = {str(row[0]) for row in await cursor.fetchall()} & STORE_TABLES

    def status(
        state: SchemaState,
        found: int | None = None,
        key: str = SCHEMA_VERSION_KEY,
        found_value: str | None = None,
    ) -> SchemaStatus:
        return SchemaStatus(
            state=state, found=found, expected=SCHEMA_VERSION, key=key, found_value=found_value
        )

    if not tables:
        return status(SchemaState.EMPTY)
    if META_TABLE not in tables:
        return status(SchemaState.REFUSED)
    cursor = await connection.execute(
        "SELECT key, value FROM harness_meta WHERE key IN (%s, %s)",
        (SCHEMA_VERSION_KEY, PROTOCOL_VERSION_KEY),
    )
    meta = {str(key): str(value) for key, value in await cursor.fetchall()}
    text = meta.get(SCHEMA_VERSION_KEY)
    version = int(text) if text is not None and text.isdigit() else None
    if version is None or version > SCHEMA_VERSION or _chain_from(version) is None:
        return status(SchemaState.REFUSED, version, found_value=text)
    protocol = meta.get(PROTOCOL_VERSION_KEY)
    if protocol != PROTOCOL_VERSION:
        return status(SchemaState.REFUSED, version, PROTOCOL_VERSION_KEY, protocol)
    if version == SCHEMA_VERSION:
        return status(SchemaState.CURRENT, version, found_value=text)
    return status(SchemaState.OLDER, version, found_value=text)


def refusal(status: SchemaStatus, store: str) -> DatabaseSchemaMismatch:
    """The error that refuses a database in `status` (OLDER or REFUSED)."""
    expected = str(SCHEMA_VERSION) if status.key == SCHEMA_VERSION_KEY else PROTOCOL_VERSION
    if status.state is SchemaState.OLDER:
        advice = (
            f"run `harness-gateway migrate --store {store}` to bring it to schema version "
            f"{SCHEMA_VERSION}"
        )
    elif status.key == PROTOCOL_VERSION_KEY:
        advice = "it was written for another protocol; use a harness-gateway of that protocol"
    elif status.found_value is None:
        advice = (
            "the database holds tables that are not a harness-gateway store; give the store "
            "a database of its own"
        )
    elif status.found is not None and status.found > SCHEMA_VERSION:
        advice = "it was written by a newer harness-gateway; run that version or a later one"
    else:
        advice = "this harness-gateway cannot migrate it"
    return DatabaseSchemaMismatch(
        store, key=status.key, found=status.found_value, expected=expected, advice=advice
    )


async def _create(connection: Connection) -> None:
    for statement in DDL:
        await connection.execute(statement)
    await connection.execute(
        "INSERT INTO harness_meta (key, value) VALUES (%s, %s), (%s, %s)",
        (SCHEMA_VERSION_KEY, str(SCHEMA_VERSION), PROTOCOL_VERSION_KEY, PROTOCOL_VERSION),
    )


async def _migrate_locked(connection: Connection, store: str) -> tuple[int | None, int]:
    """Inside the caller's transaction: take the migrate lock, then create or migrate."""
    await connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
    status = await inspect(connection)
    match status.state:
        case SchemaState.EMPTY:
            await _create(connection)
            logger.info("store schema created store=%s schema_version=%d", store, SCHEMA_VERSION)
            return None, SCHEMA_VERSION
        case SchemaState.CURRENT:
            return SCHEMA_VERSION, SCHEMA_VERSION
        case SchemaState.OLDER:
            assert status.found is not None
            steps = _chain_from(status.found)
            assert steps is not None  # inspect said OLDER only with a chain
            version = status.found
            for step in steps:
                for statement in step.statements:
                    await connection.execute(statement)
                version = step.from_version + 1
                await connection.execute(
                    "UPDATE harness_meta SET value = %s WHERE key = %s",
                    (str(version), SCHEMA_VERSION_KEY),
                )
                logger.warning("store migrated store=%s schema_version=%d", store, version)
            return status.found, version
        case SchemaState.REFUSED:
            raise refusal(status, store)


async def prepare(connection: Connection, store: str) -> None:
    """At open: create the schema in an empty database, accept this version, refuse the
    rest (`DatabaseSchemaMismatch`, nothing written). `store` is the redacted DSN."""
    status = await inspect(connection)
    if status.state is SchemaState.CURRENT:
        return
    if status.state is not SchemaState.EMPTY:
        raise refusal(status, store)
    # First start: create under the migrate lock; another daemon may have won the race, in
    # which case the database is CURRENT once the lock is ours.
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
        again = await inspect(connection)
        if again.state is SchemaState.EMPTY:
            await _create(connection)
            logger.info("store schema created store=%s schema_version=%d", store, SCHEMA_VERSION)
        elif again.state is not SchemaState.CURRENT:
            raise refusal(again, store)


async def migrate(dsn: str, *, connect_timeout: float = CONNECT_TIMEOUT) -> tuple[int | None, int]:
    """Bring the database at `dsn` to `SCHEMA_VERSION`: (the version found, None for an
    empty database; the version now). Idempotent.

    Raises:
        StoreDsnInvalid: `dsn` is not a connection string.
        StoreUnavailable: the server cannot be reached.
        DatabaseSchemaMismatch: a newer or unknown version, another protocol, or foreign
            tables; nothing was changed.
    """
    settings = ConnectSettings.parse(dsn, owner="migrate", connect_timeout=connect_timeout)
    connection = await settings.connect("migrate")
    try:
        async with connection.transaction():
            return await _migrate_locked(connection, settings.redacted)
    except psycopg.Error as error:
        raise settings.unavailable(f"migrating {settings.redacted} failed", error) from None
    finally:
        await connection.close()


async def schema_status(dsn: str, *, connect_timeout: float = CONNECT_TIMEOUT) -> SchemaStatus:
    """What `migrate` would find at `dsn`, without changing anything (`migrate --check`).

    Raises:
        StoreDsnInvalid: `dsn` is not a connection string.
        StoreUnavailable: the server cannot be reached.
    """
    settings = ConnectSettings.parse(dsn, owner="migrate", connect_timeout=connect_timeout)
    connection = await settings.connect("migrate")
    try:
        return await inspect(connection)
    except psycopg.Error as error:
        raise settings.unavailable(f"reading {settings.redacted} failed", error) from None
    finally:
        await connection.close()

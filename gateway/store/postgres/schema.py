"""The PostgreSQL store's tables, their version, and migrations (engine.md §8).

One database may hold the stores of several daemons. Each daemon is an *owner*: its
agents are the rows of `identities` with its name, and every other agent-keyed table is
keyed by AgentId first, as in SQLite (the agent implies the owner). Per-daemon facts are
keyed by owner (`owner_meta`: the local instance id; `router_cursor`; `leases`). Record
bodies (content-addressed) and API tokens (digest-keyed) are global. Schema-wide facts are
in `harness_meta`: `schema_version` and `protocol_version`.

A cluster (cluster.md §3.6) is one owner, `CLUSTER_OWNER`, with no lease: `harness_meta`
adds `mode = cluster`, `partitions` and the seed key check, `replicas` and `partitions` are
its membership, and the partition columns (NULL in network mode) feed its partial indexes.

Callers may rely on:

- `inspect(connection)` only reads (the catalog and `harness_meta`).
- `migrate(dsn)` and the first open of an empty database run under one transaction-level
  advisory lock (`MIGRATE_LOCK`), so concurrent daemons and `harness-gateway migrate`
  commands serialise; DDL is transactional, so a migration applies whole or not at all.
- `prepare(connection)` (at every open) creates the schema in an empty database, accepts
  this version, and refuses anything else with `DatabaseSchemaMismatch` without writing:
  an older version it can migrate (run `harness-gateway migrate`), a newer or unknown
  version, another protocol, or tables without `harness_meta` (fail closed). A cluster's
  database is refused with `ClusterModeMismatch` (naming `--cluster`).
- `setup_cluster(dsn, ...)` makes an empty database a cluster's (or returns the cluster it
  already is) under the same lock; a network-mode database or an older version is refused
  with `ClusterModeMismatch`, nothing written. Moving a network-mode database is
  `cluster_migration.py`'s (cluster.md §12.2), which shares `setup_locked` and
  `write_cluster_meta`.
"""

from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass
from typing import Final

import psycopg
from harness_contract.ids import RandomId

from gateway.cluster.partitions import MAX_PARTITIONS
from gateway.cluster.seeds import KEY_CHECK_META_KEY
from gateway.store.errors import ClusterModeMismatch, DatabaseSchemaMismatch
from gateway.store.layout import LOCAL_INSTANCE_KEY
from gateway.store.postgres.connection import (
    CONNECT_TIMEOUT,
    Connection,
    ConnectSettings,
    advisory_key,
)
from gateway.store.postgres.membership import MEMBERSHIP_DDL, create_partitions
from gateway.store.sqlite import PROTOCOL_VERSION

logger = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 3
"""This build's PostgreSQL schema version; bumped with every change to `DDL`, with a
`Migration` from the version before.

2: `sends.bound` and `sends.resumable`: a keyed send's bind writes what it bound into its
row, so a reservation a restart cut is resumed (engine.md §9.1).
3: cluster mode's tables and columns (cluster.md §3.6): `replicas`, `partitions`, the
partition columns and their partial indexes, `harness_commit_order`, the backstops
against certifying or delivering twice (with `harness_stale`, which a cluster's conditional
writes call when they match no row), and `conversations.set_aside` (the reason a cluster's
sequencer set a conversation aside). Network-mode rows keep NULL partition columns."""

META_TABLE: Final = "harness_meta"
"""The table of schema-wide facts; its presence marks a harness-gateway database."""

SCHEMA_VERSION_KEY: Final = "schema_version"
PROTOCOL_VERSION_KEY: Final = "protocol_version"

MODE_KEY: Final = "mode"
"""The `harness_meta` key of the database's mode: `cluster`, or absent for network mode
(every database before cluster mode, and every one a network daemon created)."""
CLUSTER_MODE: Final = "cluster"
PARTITIONS_KEY: Final = "partitions"
"""The `harness_meta` key of a cluster's P (cluster.md §2), fixed at set-up."""
CLUSTER_OWNER: Final = "cluster"
"""The `owner` of every row a cluster keys by owner (identities, its local instance id in
`owner_meta`): one cluster is one owner, so `UNIQUE (owner, agent_name)` makes agent names
cluster-wide and every replica reads the same agents."""

MIGRATE_LOCK: Final = advisory_key("harness-migrate")
"""Transaction-level advisory lock held while the schema is created or migrated."""

_COMMIT_ORDER: Final = "CREATE SEQUENCE harness_commit_order"
"""The cluster's commit order (cluster.md §5.2): `commit_seq` of a record or delivery a
cluster's sequencer inserts, monotonic per conversation because one sequencer serialises a
conversation's units. Network mode's writes still give their own per-agent numbers."""

_IDENTITIES_CLUSTER: Final = (
    # Names are cluster-wide in a cluster (one owner); this index says so even if an owner
    # were ever mistaken, and is empty outside a cluster.
    "CREATE UNIQUE INDEX identities_cluster_name ON identities (agent_name) "
    "WHERE home_partition IS NOT NULL",
    "CREATE INDEX identities_by_home ON identities (home_partition)",
)
_INTENTS_CLUSTER: Final = (
    # The sequencer's poll (cluster.md §3.4): open intents bound away from their sequencer.
    "CREATE INDEX post_intents_sequencing ON post_intents (seq_partition, conversation_id) "
    "WHERE state = 'open' AND seq_partition IS NOT NULL",
    # A waiting send, or a settled hint, finds an intent by PostId alone.
    "CREATE INDEX post_intents_by_post ON post_intents (post_id)",
)
_DELIVERIES_CLUSTER: Final = (
    # The home's poll (cluster.md §3.4): which agents have something to classify.
    "CREATE INDEX pending_deliveries_by_home ON pending_deliveries (home_partition, agent_id) "
    "WHERE state = 'pending' AND home_partition IS NOT NULL",
    # Backstop against delivering one record twice to one agent (cluster.md §5.2).
    "CREATE UNIQUE INDEX pending_deliveries_record ON pending_deliveries (agent_id, record_hash)",
)
_CONVERSATIONS_CLUSTER: Final = (
    # A sequencer loads a conversation from every member's row (cluster.md §5.2).
    "CREATE INDEX conversations_by_conversation ON conversations (conversation_id)"
)
_STALE: Final = (
    # A cluster's conditional writes (a head `WHERE depth = $old`, an intent completion `WHERE
    # state = 'open'`, cluster.md §5.2) call it when they match no row: the unit fails alone
    # as a constraint violation and the sequencer rebuilds the conversation from rows.
    "CREATE FUNCTION harness_stale(what TEXT) RETURNS INTEGER LANGUAGE plpgsql AS $$ BEGIN "
    "RAISE EXCEPTION 'stale unit: %', what USING ERRCODE = 'integrity_constraint_violation'; "
    "END $$"
)
_RECORDS_BACKSTOP: Final = (
    # Backstop against certifying one post twice at one member (cluster.md §5.2).
    "CREATE UNIQUE INDEX certified_records_post ON certified_records (agent_id, author, post_id)"
)

DDL: Final = (
    "CREATE TABLE harness_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    _COMMIT_ORDER,
    *MEMBERSHIP_DDL,
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
        home_partition INTEGER,
        UNIQUE (owner, agent_name))""",
    "CREATE INDEX identities_by_owner ON identities (owner, registered)",
    *_IDENTITIES_CLUSTER,
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
        set_aside TEXT,
        PRIMARY KEY (agent_id, conversation_id))""",
    _CONVERSATIONS_CLUSTER,
    _STALE,
    """CREATE TABLE post_intents (
        agent_id TEXT NOT NULL,
        post_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        bind_seq BIGINT NOT NULL,
        intent BYTEA NOT NULL,
        state TEXT NOT NULL,
        record_hash TEXT,
        bound_at DOUBLE PRECISION NOT NULL,
        seq_partition INTEGER,
        descriptor BYTEA,
        PRIMARY KEY (agent_id, post_id),
        UNIQUE (agent_id, bind_seq))""",
    "CREATE INDEX post_intents_open ON post_intents (agent_id, state)",
    *_INTENTS_CLUSTER,
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
        commit_seq BIGINT NOT NULL DEFAULT nextval('harness_commit_order'),
        PRIMARY KEY (agent_id, record_hash),
        UNIQUE (agent_id, conversation_id, depth))""",
    _RECORDS_BACKSTOP,
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
        commit_seq BIGINT NOT NULL DEFAULT nextval('harness_commit_order'),
        projection BYTEA NOT NULL,
        state TEXT NOT NULL,
        home_partition INTEGER,
        PRIMARY KEY (agent_id, token))""",
    "CREATE INDEX pending_deliveries_pending ON pending_deliveries (agent_id, state, commit_seq)",
    *_DELIVERIES_CLUSTER,
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


def _cluster_columns() -> Migration:
    """2 → 3: cluster mode's tables, columns and indexes (cluster.md §3.6). Existing rows
    are network mode's: their partition columns stay NULL, so no partial index holds them,
    and their `commit_seq` values stay what their daemons gave."""
    return Migration(
        from_version=2,
        statements=(
            _COMMIT_ORDER,
            *MEMBERSHIP_DDL,
            "ALTER TABLE identities ADD COLUMN home_partition INTEGER",
            *_IDENTITIES_CLUSTER,
            _CONVERSATIONS_CLUSTER,
            "ALTER TABLE conversations ADD COLUMN set_aside TEXT",
            _STALE,
            "ALTER TABLE post_intents ADD COLUMN seq_partition INTEGER",
            "ALTER TABLE post_intents ADD COLUMN descriptor BYTEA",
            *_INTENTS_CLUSTER,
            "ALTER TABLE certified_records "
            "ALTER COLUMN commit_seq SET DEFAULT nextval('harness_commit_order')",
            _RECORDS_BACKSTOP,
            "ALTER TABLE pending_deliveries "
            "ALTER COLUMN commit_seq SET DEFAULT nextval('harness_commit_order')",
            "ALTER TABLE pending_deliveries ADD COLUMN home_partition INTEGER",
            *_DELIVERIES_CLUSTER,
        ),
    )


MIGRATIONS: tuple[Migration, ...] = (_sends_resumable(), _cluster_columns())
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
    if (match := re.match(r"\s*CREATE TABLE (?:IF NOT EXISTS )?(\w+)", statement)) is not None
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
        if (await _meta(connection)).get(MODE_KEY) == CLUSTER_MODE:
            raise ClusterModeMismatch(
                store,
                "the database is a cluster's (harness_meta.mode = cluster); start the "
                "gateway with --cluster, or give this daemon a database of its own",
            )
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


async def _meta(connection: Connection) -> dict[str, str]:
    cursor = await connection.execute("SELECT key, value FROM harness_meta")
    return {str(key): str(value) for key, value in await cursor.fetchall()}


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterMeta:
    """A cluster's schema-wide facts, as set up once (cluster.md §12.1)."""

    partitions: int
    """P, fixed at set-up; the caller's own P is ignored once a cluster exists."""
    key_check: str
    """The seed key's check value (`gateway.cluster.seeds`), for the caller to compare."""
    local_instance_id: str
    """The cluster's one durable local instance id (cluster.md §1)."""


async def read_cluster_meta(connection: Connection, store: str) -> ClusterMeta:
    """The cluster facts of a database of this version (read only).

    Raises:
        ClusterModeMismatch: the database is not set up as a cluster.
    """
    meta = await _meta(connection)
    if meta.get(MODE_KEY) != CLUSTER_MODE:
        raise ClusterModeMismatch(
            store,
            "the database is not set up for a cluster; run `harness-gateway migrate "
            "--cluster` first (on an empty database, or on a network-mode one with every "
            "network daemon stopped, cluster.md §12.2)",
        )
    cursor = await connection.execute(
        "SELECT value FROM owner_meta WHERE owner = %s AND key = %s",
        (CLUSTER_OWNER, LOCAL_INSTANCE_KEY),
    )
    local = await cursor.fetchone()
    partitions = meta.get(PARTITIONS_KEY, "")
    key_check = meta.get(KEY_CHECK_META_KEY)
    if local is None or not partitions.isdigit() or key_check is None:
        raise ClusterModeMismatch(
            store,
            "the cluster's set-up is incomplete (partitions, seed key check or local "
            "instance id missing); this harness-gateway cannot repair it",
        )
    return ClusterMeta(
        partitions=int(partitions), key_check=key_check, local_instance_id=str(local[0])
    )


async def network_rows(connection: Connection) -> bool:
    """Whether a network daemon has used the database: an identity or an owner's lease."""
    cursor = await connection.execute(
        "SELECT EXISTS (SELECT 1 FROM identities) OR EXISTS (SELECT 1 FROM leases)"
    )
    row = await cursor.fetchone()
    return row is not None and bool(row[0])


async def setup_locked(
    connection: Connection, store: str, *, partitions: int, key_check: str
) -> ClusterMeta:
    """Inside the caller's transaction: take the migrate lock, then set up or read."""
    await connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
    status = await inspect(connection)
    match status.state:
        case SchemaState.EMPTY:
            await _create(connection)
            logger.info("store schema created store=%s schema_version=%d", store, SCHEMA_VERSION)
        case SchemaState.CURRENT:
            meta = await _meta(connection)
            if meta.get(MODE_KEY) == CLUSTER_MODE:
                return await read_cluster_meta(connection, store)
            if await network_rows(connection):
                raise ClusterModeMismatch(
                    store,
                    "the database is a network-mode store (it holds identities or owner "
                    "leases); stop every network daemon and run `harness-gateway migrate "
                    "--cluster` to move it into a cluster (cluster.md §12.2)",
                )
        case SchemaState.OLDER:
            raise ClusterModeMismatch(
                store,
                f"the database has schema version {status.found_value}; run "
                f"`harness-gateway migrate --store {store}` first, then `migrate --cluster`",
            )
        case SchemaState.REFUSED:
            raise refusal(status, store)
    return await write_cluster_meta(
        connection,
        store,
        partitions=partitions,
        key_check=key_check,
        local_instance_id=RandomId.ROUTER_INSTANCE.mint(),
    )


async def write_cluster_meta(
    connection: Connection,
    store: str,
    *,
    partitions: int,
    key_check: str,
    local_instance_id: str,
) -> ClusterMeta:
    """Inside the caller's transaction: what makes a database a cluster's (cluster.md
    §12.1) — `harness_meta`'s mode, P and key check, the cluster's local instance id, the
    partition rows."""
    await connection.execute(
        "INSERT INTO harness_meta (key, value) VALUES (%s, %s), (%s, %s), (%s, %s)",
        (
            MODE_KEY,
            CLUSTER_MODE,
            PARTITIONS_KEY,
            str(partitions),
            KEY_CHECK_META_KEY,
            key_check,
        ),
    )
    await connection.execute(
        "INSERT INTO owner_meta (owner, key, value) VALUES (%s, %s, %s)",
        (CLUSTER_OWNER, LOCAL_INSTANCE_KEY, local_instance_id),
    )
    await create_partitions(connection, partitions)
    logger.warning("store set up for a cluster store=%s partitions=%d", store, partitions)
    return ClusterMeta(
        partitions=partitions, key_check=key_check, local_instance_id=local_instance_id
    )


async def setup_cluster(
    dsn: str, *, partitions: int, key_check: str, connect_timeout: float = CONNECT_TIMEOUT
) -> ClusterMeta:
    """Set the database at `dsn` up for a cluster (cluster.md §12.1), or read the cluster it
    already is: an empty database (or one of this version no network daemon has used) gets
    the schema, `harness_meta.mode = cluster`, P, the seed key check, the partition rows and
    the cluster's local instance id, in one transaction under `MIGRATE_LOCK`. A database
    already set up is returned unchanged: the caller compares the key check, and P is the
    stored one whatever `partitions` says. Idempotent.

    Raises:
        StoreDsnInvalid: `dsn` is not a connection string.
        StoreUnavailable: the server cannot be reached.
        ClusterModeMismatch: a network-mode database, or an older schema version; nothing
            was changed.
        DatabaseSchemaMismatch: a newer or unknown version, another protocol, or foreign
            tables; nothing was changed.
        ValueError: `partitions` is out of range.
    """
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(f"a cluster has 1 to {MAX_PARTITIONS} partitions, not {partitions}")
    settings = ConnectSettings.parse(dsn, owner="migrate", connect_timeout=connect_timeout)
    connection = await settings.connect("migrate")
    try:
        async with connection.transaction():
            return await setup_locked(
                connection, settings.redacted, partitions=partitions, key_check=key_check
            )
    except psycopg.Error as error:
        raise settings.unavailable(
            f"setting up the cluster in {settings.redacted} failed", error
        ) from None
    finally:
        await connection.close()


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

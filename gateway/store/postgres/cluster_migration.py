"""The SQL of moving a network-mode database into a cluster (cluster.md §12.2).

`gateway.cluster_migration` runs the move in one transaction on one connection; this module
holds its statements, each inside that transaction:

- `claim_owners` tries every owner's lease lock (`pg_try_advisory_xact_lock`, the key
  `lease.py` holds for a running daemon): one held means a network daemon is running, and
  the move is refused (`NetworkDaemonRunning`). Held by the transaction, the locks also keep
  a daemon from starting until it ends.
- `check_names` and `check_cards` refuse a database whose agents could not live in one
  cluster: a name two owners use (`AgentNamesClash`; a cluster has one name space), or an
  agent without its card in the database's Registry tables (`RegistryCardsMissing`; the
  cluster's Registry is those tables, cluster.md §1).
- `MigrationRows` is the `Store` the engine's Existing data (`engine.md` §5.10) runs against
  offline: reads and `apply` on the migrating transaction (snapshots on a second, read-only
  session: `read_snapshot` runs its own transaction).
- `adopt` makes the rows a cluster's: the owner `cluster`, sealed seeds, the partition
  columns, the conversations the move set aside marked as a cluster marks them, every
  lease's fence bumped, the Router cursors dropped, `harness_commit_order` past every
  stored commit sequence.

Every refusal is a `ClusterModeMismatch` whose text says what to do; nothing was changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from harness_contract.ids import RandomId

from gateway.cluster.partitions import home_partition
from gateway.store.errors import ClusterModeMismatch
from gateway.store.layout import LOCAL_INSTANCE_KEY
from gateway.store.postgres import tables
from gateway.store.postgres.connection import Connection, advisory_key
from gateway.store.postgres.schema import CLUSTER_OWNER
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

LISTED: Final = 20
"""Names or agents an error lists before it says how many more there are."""


class NetworkDaemonRunning(ClusterModeMismatch):
    """An owner's lease lock is held: a network daemon runs on the database."""

    def __init__(self, store: str, owners: Sequence[str]) -> None:
        self.owners = tuple(owners)
        super().__init__(
            store,
            f"network daemons are running (the lease of owner {_listed(owners)} is held); "
            "stop every daemon on this database, then run `harness-gateway migrate "
            "--cluster` again (the move is offline, cluster.md §12.2)",
        )


class AgentNamesClash(ClusterModeMismatch):
    """Two owners have agents of one name; a cluster has one name space."""

    def __init__(self, store: str, names: Mapping[str, Sequence[str]]) -> None:
        self.names = {name: tuple(owners) for name, owners in names.items()}
        listed = "; ".join(
            f"{name} (owners {', '.join(owners)})" for name, owners in list(names.items())[:LISTED]
        )
        more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
        super().__init__(
            store,
            f"agent names are used by more than one owner: {listed}{more}; a cluster has one "
            "name space, so each name must belong to one agent: remove or rename the "
            "clashing agents first",
        )


class RegistryCardsMissing(ClusterModeMismatch):
    """An agent's card is not in the database's Registry tables (or the tables are absent)."""

    def __init__(self, store: str, agents: Sequence[str]) -> None:
        self.agents = tuple(agents)
        super().__init__(
            store,
            f"the Registry tables of this database hold no card for {_listed(agents)}; a "
            "cluster's Registry is this database's registry_* tables, so the network's "
            "Registry must have kept its cards here (`harness-gateway registry --store` this "
            "database) before the move",
        )


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:LISTED])
    return shown + (f" and {len(items) - LISTED} more" if len(items) > LISTED else "")


def lease_lock(owner: str) -> int:
    """The advisory key a network daemon's lease holds (`lease.py`)."""
    return advisory_key(f"harness-lease:{owner}")


async def claim_owners(connection: Connection, store: str) -> list[str]:
    """Every network owner, each one's lease lock taken for the transaction; raises
    `NetworkDaemonRunning` when any is held elsewhere."""
    cursor = await connection.execute(
        "SELECT owner FROM leases UNION SELECT owner FROM identities "
        "UNION SELECT owner FROM owner_meta ORDER BY 1"
    )
    owners = [str(row[0]) for row in await cursor.fetchall() if row[0] != CLUSTER_OWNER]
    held: list[str] = []
    for owner in owners:
        cursor = await connection.execute(
            "SELECT pg_try_advisory_xact_lock(%s)", (lease_lock(owner),)
        )
        row = await cursor.fetchone()
        if row is None or not row[0]:
            held.append(owner)
    if held:
        raise NetworkDaemonRunning(store, held)
    return owners


async def check_names(connection: Connection, store: str) -> None:
    """Raise `AgentNamesClash` when two owners hold agents of one name."""
    cursor = await connection.execute(
        "SELECT agent_name, array_agg(owner ORDER BY owner) FROM identities "
        "GROUP BY agent_name HAVING count(*) > 1 ORDER BY agent_name"
    )
    clashes = {
        str(name): [str(owner) for owner in owners] for name, owners in await cursor.fetchall()
    }
    if clashes:
        raise AgentNamesClash(store, clashes)


async def check_cards(connection: Connection, store: str) -> str:
    """The Registry's public key, once every identity's card is found in the Registry tables
    under its AgentId and name; else `RegistryCardsMissing` naming the agents without."""
    cursor = await connection.execute(
        "SELECT to_regclass('registry_cards') IS NOT NULL AND "
        "to_regclass('registry_meta') IS NOT NULL"
    )
    row = await cursor.fetchone()
    cursor = await connection.execute(
        "SELECT agent_id, agent_name FROM identities ORDER BY agent_name"
    )
    agents = [(str(agent_id), str(name)) for agent_id, name in await cursor.fetchall()]
    if row is None or not row[0]:
        raise RegistryCardsMissing(store, [name for _, name in agents])
    cursor = await connection.execute(
        "SELECT agent_id, agent_name FROM registry_cards WHERE agent_id = ANY(%s::bytea[])",
        ([_agent_bytes(agent_id) for agent_id, _ in agents],),
    )
    carded = {(bytes(agent_id), str(name)) for agent_id, name in await cursor.fetchall()}
    missing = [name for agent_id, name in agents if (_agent_bytes(agent_id), name) not in carded]
    if missing:
        raise RegistryCardsMissing(store, missing)
    cursor = await connection.execute(
        "SELECT value FROM registry_meta WHERE key = 'registry_public_key'"
    )
    key = await cursor.fetchone()
    if key is None:
        raise RegistryCardsMissing(store, [name for _, name in agents])
    return str(key[0])


def _agent_bytes(agent_id: str) -> bytes:
    data = RandomId.AGENT.decode(agent_id)
    if data is None:
        raise ValueError(f"identities holds {agent_id!r}, which is not an AgentId")
    return data


async def read_identities(connection: Connection) -> list[tuple[str, IdentityRow]]:
    """(owner, row) of every identity, in registration order."""
    cursor = await connection.execute("SELECT owner FROM identities ORDER BY registered")
    owners = [str(row[0]) for row in await cursor.fetchall()]
    rows: list[tuple[str, IdentityRow]] = []
    for owner in dict.fromkeys(owners):
        rows.extend((owner, row) for row in await tables.read_identities(connection, owner))
    return rows


async def read_local_instances(connection: Connection) -> dict[str, str]:
    """Each network owner's local instance id (`engine.md` §5.10), by owner."""
    cursor = await connection.execute(
        "SELECT owner, value FROM owner_meta WHERE key = %s AND owner <> %s ORDER BY owner",
        (LOCAL_INSTANCE_KEY, CLUSTER_OWNER),
    )
    return {str(owner): str(value) for owner, value in await cursor.fetchall()}


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenIntentPlace:
    """Where an open intent of a cluster conversation is sequenced (cluster.md §5.1)."""

    conversation_id: str
    seq_partition: int
    descriptor: bytes


async def read_open_descriptors(connection: Connection) -> dict[str, bytes]:
    """The stored MembershipDescriptor of every conversation with an open intent."""
    cursor = await connection.execute(
        "SELECT DISTINCT ON (i.conversation_id) i.conversation_id, c.descriptor "
        "FROM post_intents i JOIN conversations c "
        "ON c.agent_id = i.agent_id AND c.conversation_id = i.conversation_id "
        "WHERE i.state = 'open' ORDER BY i.conversation_id"
    )
    return {
        str(conversation): bytes(descriptor) for conversation, descriptor in await cursor.fetchall()
    }


async def adopt(
    connection: Connection,
    *,
    partitions: int,
    sealed: Mapping[str, bytes],
    places: Iterable[OpenIntentPlace],
    set_aside: Mapping[str, str],
) -> None:
    """Make the rows a cluster's (cluster.md §3.6): every identity the cluster's, its seed
    `sealed[agent_id]`, its home partition stored; every pending delivery's home partition;
    each open intent of a cluster conversation placed at its sequencer (`places`); every
    lease's fence bumped, so a forgotten network daemon's next group fails (`engine.md`
    §8.7); the Router cursors dropped; the commit order past every stored commit sequence,
    so the cluster's deliveries follow the old ones. Each conversation of `set_aside`
    (conversation id to reason) is set aside as a cluster's sequencer sets one aside
    (cluster.md §5.4): the reason in every member's row, its open intents refused."""
    agents = list(sealed)
    homes = [home_partition(agent_id, partitions) for agent_id in agents]
    await connection.execute(
        "UPDATE identities i SET owner = %s, seed = u.seed, home_partition = u.home "
        "FROM unnest(%s::text[], %s::bytea[], %s::integer[]) AS u(agent_id, seed, home) "
        "WHERE i.agent_id = u.agent_id",
        (CLUSTER_OWNER, agents, [sealed[agent_id] for agent_id in agents], homes),
    )
    await connection.execute(
        "UPDATE pending_deliveries d SET home_partition = u.home "
        "FROM unnest(%s::text[], %s::integer[]) AS u(agent_id, home) "
        "WHERE d.agent_id = u.agent_id",
        (agents, homes),
    )
    placed = list(places)
    await connection.execute(
        "UPDATE post_intents i SET seq_partition = u.partition, descriptor = u.descriptor "
        "FROM unnest(%s::text[], %s::integer[], %s::bytea[]) AS u(conversation_id, partition, "
        "descriptor) WHERE i.conversation_id = u.conversation_id AND i.state = 'open'",
        (
            [place.conversation_id for place in placed],
            [place.seq_partition for place in placed],
            [place.descriptor for place in placed],
        ),
    )
    aside = list(set_aside)
    await connection.execute(
        "UPDATE conversations c SET set_aside = COALESCE(c.set_aside, u.reason) "
        "FROM unnest(%s::text[], %s::text[]) AS u(conversation_id, reason) "
        "WHERE c.conversation_id = u.conversation_id",
        (aside, [set_aside[conversation_id] for conversation_id in aside]),
    )
    await connection.execute(
        "UPDATE post_intents SET state = 'refused', descriptor = NULL "
        "WHERE conversation_id = ANY(%s::text[]) AND state = 'open'",
        (aside,),
    )
    await connection.execute("UPDATE leases SET fence = fence + 1")
    await connection.execute("DELETE FROM router_cursor")
    await connection.execute(
        "SELECT setval('harness_commit_order', GREATEST("
        "(SELECT max(commit_seq) FROM certified_records), "
        "(SELECT max(commit_seq) FROM pending_deliveries), 1))"
    )


class MigrationRows:
    """The `Store` Existing data runs against during the move: every read and `apply` on the
    migrating transaction, except `snapshot`, read on `reader` (its own read-only
    transaction) before anything is written. `apply` runs the writes as a cluster replica's
    writer plans them (the partition columns filled); nothing commits until the move does."""

    def __init__(
        self,
        connection: Connection,
        reader: Connection,
        *,
        partitions: int,
        on_apply: Callable[[], None] = lambda: None,
    ) -> None:
        self._connection = connection
        self._reader = reader
        self._partitions = partitions
        self._on_apply = on_apply

    async def apply(self, writes: Sequence[Write]) -> None:
        plan = tables.plan_unit(CLUSTER_OWNER, writes, self._partitions)
        hashes, bodies = tables.group_bodies([plan])
        if hashes:
            await self._connection.execute(tables.INSERT_BODIES, (hashes, bodies))
        for sql, parameters in plan.statements:
            await self._connection.execute(sql, parameters)
        self._on_apply()

    async def identities(self) -> list[IdentityRow]:
        return await tables.read_identities(self._connection, CLUSTER_OWNER)

    async def token(self, token_digest: str) -> tuple[str, bool] | None:
        return await tables.read_token(self._connection, CLUSTER_OWNER, token_digest)

    async def cursor(self, subscription: str) -> bytes | None:
        return None  # a cluster has no Router cursor

    async def snapshot(self, agent_id: str) -> AgentSnapshot:
        return await tables.read_snapshot(self._reader, agent_id)

    async def unread(self, agent_id: str, after_seq: int, limit: int) -> list[InboxRow]:
        return await tables.read_unread(self._connection, agent_id, after_seq, limit)

    async def pending_deliveries(self, agent_id: str, limit: int) -> list[DeliveryRow]:
        return await tables.read_pending_deliveries(self._connection, agent_id, limit)

    async def inbox_item(self, agent_id: str, token: str) -> InboxRow | None:
        return await tables.read_inbox_by_token(self._connection, agent_id, token)

    async def inbox_items(self, agent_id: str, tokens: Sequence[str]) -> dict[str, InboxRow]:
        return await tables.read_inbox_by_tokens(self._connection, agent_id, tokens)

    async def unread_summary(self) -> dict[str, tuple[int, float]]:
        return await tables.read_unread_summary(self._connection, CLUSTER_OWNER)

    async def oldest_unread(self, agent_id: str) -> float | None:
        return await tables.read_oldest_unread(self._connection, agent_id)

    async def unread_count(self, agent_id: str) -> int:
        return await tables.read_unread_count(self._connection, agent_id)

    async def conversations(self, agent_id: str) -> list[ConversationRow]:
        return await tables.read_conversations(self._connection, agent_id)

    async def records(
        self, agent_id: str, conversation_id: str, after_depth: int, limit: int
    ) -> list[RecordRow]:
        return await tables.read_records(
            self._connection, agent_id, conversation_id, after_depth, limit
        )

    async def record(self, agent_id: str, record_hash: str) -> RecordRow | None:
        return await tables.read_record_by_hash(self._connection, agent_id, record_hash)

    async def completed_reanchor(
        self, agent_id: str, conversation_id: str, previous_anchor_hash: str
    ) -> bytes | None:
        return await tables.read_completed_reanchor(
            self._connection, agent_id, conversation_id, previous_anchor_hash
        )

    async def intent(self, agent_id: str, post_id: str) -> IntentRow | None:
        return await tables.read_intent(self._connection, agent_id, post_id)

    async def send_row(self, agent_id: str, key: str) -> SendRow | None:
        return await tables.read_send(self._connection, agent_id, key)

    async def close(self) -> None:
        """The connections are the caller's."""

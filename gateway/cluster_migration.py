"""`harness-gateway migrate --cluster`: set a database up for a cluster, or move a
network-mode one into a cluster (cluster.md §12.1, §12.2).

`migrate_to_cluster` runs under `MIGRATE_LOCK` in one transaction. An empty database (or
one no network daemon has used) is set up as `setup_cluster` does; a cluster's is read and
left alone. A network-mode database is moved, offline and one way:

1. every owner's lease lock is tried for the transaction (a running network daemon refuses
   the move, `NetworkDaemonRunning`); agent names must be unique across owners
   (`AgentNamesClash`) and every agent's card must be in the database's Registry tables
   (`RegistryCardsMissing`);
2. the cluster's one local instance id is the local instance id of the owner with the most
   agents, so that owner's local conversations stay as they are (nothing re-anchors);
3. Existing data (`engine.md` §5.10, `move_existing`) runs offline against the migrating
   transaction (`MigrationRows`), every identity's agent a hosted member: every
   conversation whose members are all cluster agents and whose anchor is not the cluster's
   local instance — the Router path's, and other owners' local ones — moves onto it (its
   outbox rows, locks, staged records and evidence discarded). A conversation with a member
   outside the cluster (no identity row), or whose members' chains differ, is set aside
   (cluster.md §5.4: the reason in its members' rows, its open intents refused) and listed;
4. the rows become a cluster's (`adopt`: owner, sealed seeds, partition columns, open
   intents placed at their sequencers, fences bumped, commit order moved past the old rows)
   and `harness_meta` says `mode = cluster`, P and the seed key check
   (`write_cluster_meta`).

A second run finds a cluster and changes nothing. Progress goes to `progress` (the CLI
prints it on stderr): counts of identities and conversations.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import psycopg
from harness_contract.ids import RandomId

from gateway.cluster.partitions import MAX_PARTITIONS, sequencing_partition
from gateway.cluster.seeds import SeedKey
from gateway.engine import protocol as p
from gateway.engine.certifier import Certifier, Identity
from gateway.engine.local import LocalObserver, LocalOrder, SetAside
from gateway.engine.local_move import move_existing
from gateway.identity.keys import SEED_SIZE, SigningKey, VerifyCache
from gateway.store.postgres.cluster_migration import (
    MigrationRows,
    OpenIntentPlace,
    adopt,
    check_cards,
    check_names,
    claim_owners,
    read_identities,
    read_local_instances,
    read_open_descriptors,
)
from gateway.store.postgres.connection import CONNECT_TIMEOUT, Connection, ConnectSettings
from gateway.store.postgres.schema import (
    CLUSTER_MODE,
    MIGRATE_LOCK,
    MODE_KEY,
    ClusterMeta,
    SchemaState,
    inspect,
    network_rows,
    setup_locked,
    write_cluster_meta,
)
from gateway.store.records import IdentityRow

PROGRESS_EVERY: Final = 100
"""Conversations moved between two progress lines."""


class MigrationState(enum.StrEnum):
    """What `migrate_to_cluster` did."""

    CURRENT = "current"
    """The database is a cluster's (set up now on an empty database, or already): the
    set-up of cluster.md §12.1."""
    MIGRATED = "migrated"
    """A network-mode database was moved into a cluster (cluster.md §12.2)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SetAsideConversation:
    """A conversation the move left as it was (cluster.md §12.2), and why."""

    conversation_id: str
    member_agent_ids: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterMigration:
    """The outcome of `migrate_to_cluster`."""

    state: MigrationState
    meta: ClusterMeta
    owners: tuple[str, ...] = ()
    """The network owners whose agents moved in."""
    identities: int = 0
    moved: int = 0
    """Conversations moved onto the cluster's local instance."""
    set_aside: tuple[SetAsideConversation, ...] = ()


async def migrate_to_cluster(
    dsn: str,
    *,
    partitions: int,
    seed_key: SeedKey,
    progress: Callable[[str], None] = lambda text: None,
    connect_timeout: float = CONNECT_TIMEOUT,
) -> ClusterMigration:
    """Set up or move the database at `dsn` (module docstring); idempotent. The caller
    compares `meta.key_check` with its key (a cluster set up before keeps its own).

    Raises:
        StoreDsnInvalid: `dsn` is not a connection string.
        StoreUnavailable: the server cannot be reached; nothing was changed.
        ClusterModeMismatch: refused (a network daemon running, clashing names, missing
            cards, an older schema version); nothing was changed.
        DatabaseSchemaMismatch: a newer or unknown version, another protocol, foreign tables.
        SealedSeedCorrupt: a stored seed is neither plaintext nor sealed with `seed_key`.
        ValueError: `partitions` is out of range.
    """
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(f"a cluster has 1 to {MAX_PARTITIONS} partitions, not {partitions}")
    settings = ConnectSettings.parse(dsn, owner="migrate", connect_timeout=connect_timeout)
    connection = await settings.connect("migrate")
    reader: Connection | None = None
    try:
        async with connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
            if await _network_mode(connection):
                reader = await settings.connect("migrate")
                return await _move(
                    connection,
                    reader,
                    settings.redacted,
                    partitions=partitions,
                    seed_key=seed_key,
                    progress=progress,
                )
            meta = await setup_locked(
                connection, settings.redacted, partitions=partitions, key_check=seed_key.key_check()
            )
            return ClusterMigration(state=MigrationState.CURRENT, meta=meta)
    except psycopg.Error as error:
        raise settings.unavailable(
            f"moving {settings.redacted} into a cluster failed", error
        ) from None
    finally:
        if reader is not None:
            await reader.close()
        await connection.close()


async def _network_mode(connection: Connection) -> bool:
    """A current-version database a network daemon has used and not yet a cluster's."""
    if (await inspect(connection)).state is not SchemaState.CURRENT:
        return False
    cursor = await connection.execute("SELECT value FROM harness_meta WHERE key = %s", (MODE_KEY,))
    mode = await cursor.fetchone()
    if mode is not None and mode[0] == CLUSTER_MODE:
        return False
    return await network_rows(connection)


async def _move(
    connection: Connection,
    reader: Connection,
    store: str,
    *,
    partitions: int,
    seed_key: SeedKey,
    progress: Callable[[str], None],
) -> ClusterMigration:
    owners = await claim_owners(connection, store)
    await check_names(connection, store)
    registry_key = await check_cards(connection, store)
    identities = await read_identities(connection)
    progress(
        f"moving {len(identities)} identities of {len(owners)} owners "
        f"({', '.join(owners)}) into a cluster of {partitions} partitions"
    )
    local_instance_id = _cluster_instance(await read_local_instances(connection), identities)
    sealed: dict[str, bytes] = {}
    certifiers: dict[str, Certifier] = {}
    moving: dict[str, int] = {}
    rows = MigrationRows(
        connection,
        reader,
        partitions=partitions,
        on_apply=lambda: _moved_one(moving, progress),
    )
    cache = VerifyCache()
    for _, row in identities:
        stored = seed_key.seal_stored(row.agent_id, row.seed)
        sealed[row.agent_id] = row.seed if stored is None else stored
        certifier = Certifier(
            _identity(row, seed_key), registry_public_key=registry_key, verify_cache=cache
        )
        # Every conversation not anchored on the cluster's instance stays on the Router
        # path in memory: Existing data moves it when all its members are cluster agents.
        certifier.restore(await rows.snapshot(row.agent_id), local_instance_id=local_instance_id)
        certifiers[row.agent_id] = certifier
    pending = {cid for certifier in certifiers.values() for cid in certifier.conversation_ids()}
    moving["total"] = len(pending)
    progress(f"moving {len(pending)} conversations onto the cluster's local order")
    misaligned: list[SetAside] = []
    order = LocalOrder(
        store=rows,
        instance_id=local_instance_id,
        certifiers=lambda: certifiers,
        release=lambda effects: None,
        on_fatal=lambda error: None,
        observer=LocalObserver(on_set_aside=misaligned.append),
    )
    moved = await move_existing(store=rows, local=order, certifiers=certifiers)
    set_aside = _set_aside(certifiers, misaligned)
    aside = {item.conversation_id for item in set_aside}
    places = [
        place
        for conversation_id, descriptor in (await read_open_descriptors(connection)).items()
        if conversation_id not in aside
        and (place := _place(conversation_id, descriptor, certifiers, partitions)) is not None
    ]
    await adopt(
        connection,
        partitions=partitions,
        sealed=sealed,
        places=places,
        set_aside={
            item.conversation_id: f"moved into a cluster: {item.reason}" for item in set_aside
        },
    )
    meta = await write_cluster_meta(
        connection,
        store,
        partitions=partitions,
        key_check=seed_key.key_check(),
        local_instance_id=local_instance_id,
    )
    progress(
        f"moved {len(identities)} identities and {moved} conversations; "
        f"{len(set_aside)} conversations set aside"
    )
    return ClusterMigration(
        state=MigrationState.MIGRATED,
        meta=meta,
        owners=tuple(owners),
        identities=len(identities),
        moved=moved,
        set_aside=tuple(set_aside),
    )


def _moved_one(moving: dict[str, int], progress: Callable[[str], None]) -> None:
    done = moving["done"] = moving.get("done", 0) + 1
    if done % PROGRESS_EVERY == 0:
        progress(f"moved {done} of {moving.get('total', 0)} conversations")


def _identity(row: IdentityRow, seed_key: SeedKey) -> Identity:
    seed = row.seed if len(row.seed) == SEED_SIZE else seed_key.open(row.agent_id, row.seed)
    return Identity(
        agent_id=row.agent_id,
        agent_name=row.agent_name,
        key=SigningKey(seed),
        card=p.decode(row.signed_card, p.SignedAgentCard),
    )


def _cluster_instance(instances: dict[str, str], identities: list[tuple[str, IdentityRow]]) -> str:
    """The local instance id of the owner with the most agents (the first by name on a tie):
    its local conversations need no move. Every owner that ran a daemon has one."""
    counts: dict[str, int] = {}
    for owner, _ in identities:
        counts[owner] = counts.get(owner, 0) + 1
    ranked = sorted(instances, key=lambda owner: (-counts.get(owner, 0), owner))
    if not ranked:
        return RandomId.ROUTER_INSTANCE.mint()
    return instances[ranked[0]]


def _set_aside(
    certifiers: dict[str, Certifier], misaligned: list[SetAside]
) -> list[SetAsideConversation]:
    """What the move left: conversations still on the Router path (a member outside the
    cluster), ones whose rows failed a check, and ones Existing data could not align."""
    found: dict[str, SetAsideConversation] = {}
    for certifier in certifiers.values():
        for conversation_id in certifier.conversation_ids():
            descriptor = certifier.membership_of(conversation_id)
            members = () if descriptor is None else descriptor.member_agent_ids
            outside = [member for member in members if member not in certifiers]
            found.setdefault(
                conversation_id,
                SetAsideConversation(
                    conversation_id=conversation_id,
                    member_agent_ids=tuple(members),
                    reason=f"members outside the cluster: {', '.join(outside)}",
                ),
            )
        for conversation_id, reason in certifier.set_aside.items():
            found.setdefault(
                conversation_id,
                SetAsideConversation(
                    conversation_id=conversation_id,
                    member_agent_ids=(certifier.agent_id,),
                    reason=reason,
                ),
            )
    for item in misaligned:
        found.setdefault(
            item.conversation_id,
            SetAsideConversation(
                conversation_id=item.conversation_id,
                member_agent_ids=item.member_agent_ids,
                reason=item.reason,
            ),
        )
    return sorted(found.values(), key=lambda item: item.conversation_id)


def _place(
    conversation_id: str,
    descriptor: bytes,
    certifiers: dict[str, Certifier],
    partitions: int,
) -> OpenIntentPlace | None:
    """Where the open intents of a cluster conversation are sequenced; None for one with a
    member outside the cluster or a descriptor that does not decode (its intents stay open
    and unseen, as a set-aside conversation's)."""
    try:
        members = p.decode(descriptor, p.MembershipDescriptor).member_agent_ids
    except p.ProtocolError:
        return None
    if any(member not in certifiers for member in members):
        return None
    return OpenIntentPlace(
        conversation_id=conversation_id,
        seq_partition=sequencing_partition(members, partitions),
        descriptor=descriptor,
    )

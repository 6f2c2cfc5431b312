"""The agents one daemon hosts: their runtimes, their API tokens, and registering new ones.

An `AgentDirectory` builds each hosted agent's `AgentRuntime` (restored from the store at
start, or fresh when `register` mints a key and a Registry card), keeps them in its
`HostedAgents` table by id and by name, and owns the token rules: API tokens are stored and cached only as SHA-256
digests, rotating or revoking them ends the agent's stream, and the operator token is
compared in constant time. Every registration and token change is logged on
`harness.audit` with the agent's name, never a token.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness_contract.addresses import agent_address, is_agent_name
from harness_contract.ids import RandomId, token_digest
from harness_contract.values import InboundMessage

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.collectives.port import MAX_OPEN_OPERATIONS
from gateway.endpoint.api import (
    AuthFailure,
    ManagementError,
    ManagementErrorReason,
    NotHome,
    RegisteredAgent,
)
from gateway.endpoint.export import HistoryExport
from gateway.endpoint.inbox import AgentInbox, InboxObserver, StreamEndReason
from gateway.endpoint.inbox.coordinator import SequencedItems
from gateway.endpoint.runtime import AgentParts, AgentRuntime, SendObserver, SendTimeouts
from gateway.engine import protocol as p
from gateway.engine.certifier import Certifier, Identity
from gateway.engine.effects import Delivered
from gateway.engine.network import Network
from gateway.firewall import Firewall
from gateway.identity.keys import SigningKey, VerifyCache
from gateway.identity.objects import format_timestamp
from gateway.registry import KeyAlreadyRegistered, NameTaken, Registered, RegistryClient
from gateway.registry.client import Found
from gateway.store.port import Store
from gateway.store.records import (
    DeliveryRow,
    IdentityRow,
    PutIdentity,
    PutInboxItem,
    PutToken,
    RevokeTokens,
    Write,
)

audit = logging.getLogger("harness.audit")

INVALID_NAME_TEXT = "an agent name is 3 to 32 characters of a-z, 0-9 and inner hyphens"
"""The `invalid-name` detail: the rule every agent name follows."""


def _utc_text(seconds: float) -> str:
    """Epoch seconds as the `YYYY-MM-DDTHH:MM:SSZ` text rows keep."""
    return format_timestamp(dt.datetime.fromtimestamp(seconds, dt.UTC))


@dataclass(frozen=True, slots=True, kw_only=True)
class Hosting:
    """How every hosted agent's runtime is built; the same for all agents of a daemon."""

    registry_public_key: str
    """The pinned Registry key every card is checked against."""
    verify_cache: VerifyCache
    """The daemon's one cache of verified signatures."""
    stream_window: int
    """Unacknowledged deliveries one `Messages` stream may hold."""
    timeouts: SendTimeouts
    """The send pipeline's bounds."""
    history_export_dir: Path | None
    """Where each agent's certified history is exported, if anywhere."""
    run_id: str
    """This process's run: keyed sends reserved by another run are indeterminate."""
    inbox_observer: InboxObserver
    """Metrics hooks of every inbox."""
    send_observer: SendObserver
    """Metrics hooks of every send pipeline."""
    clock: Clock = SYSTEM_CLOCK
    """What every runtime and inbox reads the time through."""
    firewall: Firewall | None = None
    """The local firewall every agent's sends and items pass, when one is configured."""
    max_open_operations: int = MAX_OPEN_OPERATIONS
    """Most collective operations each agent may have open (`--max-open-operations`)."""


class HostedAgents:
    """The directory's table: the runtimes of the agents hosted here, by id and by name.

    It holds no connection to anything, so the composition root builds it before the
    `Network` and hands the network's deliveries-ready signal straight to
    `deliveries_ready`; the `AgentDirectory` fills it as it hosts agents."""

    def __init__(self) -> None:
        self._by_id: dict[str, AgentRuntime] = {}
        self._by_name: dict[str, AgentRuntime] = {}

    @property
    def count(self) -> int:
        """How many agents are hosted here."""
        return len(self._by_id)

    def runtimes(self) -> list[AgentRuntime]:
        """Every hosted agent's runtime, in hosting order."""
        return list(self._by_id.values())

    def names(self) -> list[str]:
        """Every hosted agent's name, in hosting order."""
        return list(self._by_name)

    def by_id(self, agent_id: str) -> AgentRuntime | None:
        """The runtime of a hosted agent by id, or None."""
        return self._by_id.get(agent_id)

    def runtime(self, name: str) -> AgentRuntime:
        """A hosted agent's runtime by name; raises `ManagementError` `not-found`."""
        runtime = self._by_name.get(name)
        if runtime is None:
            raise ManagementError(
                ManagementErrorReason.NOT_FOUND, f"{agent_address(name)} is not hosted here"
            )
        return runtime

    def has_name(self, name: str) -> bool:
        """True when an agent of that name is hosted here."""
        return name in self._by_name

    def add(self, runtime: AgentRuntime) -> None:
        """Host `runtime` (the directory calls this once per agent)."""
        self._by_id[runtime.identity.agent_id] = runtime
        self._by_name[runtime.identity.agent_name] = runtime

    def remove(self, agent_id: str) -> AgentRuntime | None:
        """Stop listing an agent (a cluster released its home partition); its runtime."""
        runtime = self._by_id.pop(agent_id, None)
        if runtime is not None:
            self._by_name.pop(runtime.identity.agent_name, None)
        return runtime

    def deliveries_ready(self, agent_ids: Iterable[str]) -> None:
        """Wake the classifiers of the hosted agents among `agent_ids` (others are ignored):
        the network's deliveries-ready signal, wired here once by the composition root."""
        for agent_id in agent_ids:
            runtime = self._by_id.get(agent_id)
            if runtime is not None:
                runtime.deliveries_ready()

    def deliveries_committed(self, deliveries: Iterable[Delivered]) -> None:
        """Hand committed pending deliveries to their hosted agents' classifiers (engine.md
        §7.2; others are ignored): the network's `on_delivered` outside a cluster."""
        by_agent: dict[str, list[tuple[DeliveryRow, InboundMessage]]] = {}
        for delivery in deliveries:
            by_agent.setdefault(delivery.write.agent_id, []).append(
                (delivery.write.row(), delivery.message)
            )
        for agent_id, rows in by_agent.items():
            runtime = self._by_id.get(agent_id)
            if runtime is not None:
                runtime.deliveries_committed(rows)

    def item_for(self, agent_id: str, token: str, message: InboundMessage) -> PutInboxItem | None:
        """A hosted member's item for `message` when it needs no classifier (engine.md
        §5.10, classified at certification; `DirectInboxes`)."""
        runtime = self._by_id.get(agent_id)
        return None if runtime is None else runtime.direct_item(token, message)

    def sequence(
        self, writes: Sequence[Write]
    ) -> tuple[Sequence[Write], Callable[[BaseException | None], None]]:
        """`writes` with the hosted members' inbox items sequenced by their inboxes, and
        the settlement of them all (`DirectInboxes`)."""
        batches: dict[str, tuple[AgentRuntime, SequencedItems]] = {}
        sequenced: list[Write] = []
        for write in writes:
            if isinstance(write, PutInboxItem) and (runtime := self._by_id.get(write.agent_id)):
                if (batch := batches.get(write.agent_id)) is None:
                    batch = batches[write.agent_id] = (runtime, runtime.inbox.sequencing())
                write = batch[1].add(write)
            sequenced.append(write)

        def settle(error: BaseException | None) -> None:
            for runtime, items in batches.values():
                items.settle(error)
                if error is None:
                    runtime.direct_items_published(len(items))

        return sequenced, settle

    def end_streams(self, reason: StreamEndReason) -> None:
        """End every open `Messages` stream for `reason`."""
        for runtime in self._by_id.values():
            runtime.inbox.end_stream(reason)

    async def start(self) -> None:
        """Start every hosted agent's runtime."""
        for runtime in self._by_id.values():
            await runtime.start()

    async def close(self) -> None:
        """Close every hosted agent's runtime."""
        for runtime in self._by_id.values():
            await runtime.close()


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterHosting:
    """What hosting changes in a cluster (cluster.md §1.1, §3.2): seeds are sealed in the
    shared database, and an agent is hosted only by the replica holding its home partition."""

    seal: Callable[[str, bytes], bytes]
    """(AgentId, seed) → the sealed seed stored in `identities.seed`."""
    open: Callable[[str, bytes], bytes]
    """(AgentId, sealed seed) → the seed."""
    is_home: Callable[[str], bool]
    """Whether this replica holds the agent's home partition now."""
    identity: Callable[[str], Awaitable[IdentityRow | None]]
    """The agent's identity row, read now (an agent registered after its partition was
    claimed is hosted on its first call, cluster.md §3.2)."""


class AgentDirectory:
    """Hosting agents (restored at start or registered), and their tokens; the hosted
    runtimes live in its `HostedAgents` table."""

    def __init__(
        self,
        *,
        hosted: HostedAgents,
        store: Store,
        local_instance_id: str,
        network: Network,
        registry: RegistryClient,
        hosting: Hosting,
        admin_token: str,
        on_hosted: Callable[[], None] = lambda: None,
        cluster: ClusterHosting | None = None,
    ) -> None:
        """`on_hosted` is called after `register` hosts a new agent (the composition root
        republishes the gauges that count hosted agents)."""
        self._hosted = hosted
        self._store = store
        self._local_instance_id = local_instance_id
        self._network = network
        self._registry = registry
        self._hosting = hosting
        self._admin_token = admin_token
        self._on_hosted = on_hosted
        self._cluster = cluster
        self._tokens: dict[str, tuple[str, bool]] = {}
        """Token digest to (AgentId, revoked), as read from the store."""
        self._registering = asyncio.Lock()

    # --- hosting ---------------------------------------------------------------------------

    async def restore(self) -> None:
        """Host every agent whose identity the store holds, each from its snapshot; none is
        started (`HostedAgents.start` does that, once local order and the Router feed are
        ready). A cluster replica hosts agents as it claims their home partitions instead
        (`host_rows`)."""
        if self._cluster is not None:
            return
        for row in await self._store.identities():
            await self._host(self._identity(row), restore=True)

    def _identity(self, row: IdentityRow) -> Identity:
        seed = row.seed if self._cluster is None else self._cluster.open(row.agent_id, row.seed)
        return Identity(
            agent_id=row.agent_id,
            agent_name=row.agent_name,
            key=SigningKey(seed),
            card=p.decode(row.signed_card, p.SignedAgentCard),
        )

    async def host_rows(self, rows: Iterable[IdentityRow]) -> None:
        """Host and start the agents of partitions this replica just claimed, each from rows
        read after the claim (cluster.md §3.2); ones hosted already are left alone."""
        for row in rows:
            # Under the lock `_host_on_call` holds: a call racing the claim must not host a
            # second runtime of the agent (two inbox sequences collide).
            async with self._registering:
                if self._hosted.by_id(row.agent_id) is not None:
                    continue
                runtime = await self._host(self._identity(row), restore=True)
                await runtime.start()
        self._on_hosted()

    async def unhost(self, agent_ids: Iterable[str]) -> None:
        """Stop hosting agents whose home partition this replica is releasing: their streams
        end UNAVAILABLE (the client reconnects at the new home and replays), their keyed
        invocations, timers and classification stop; nothing of them stays in memory
        (cluster.md §3.2, a release is a teardown)."""
        for agent_id in agent_ids:
            runtime = self._hosted.remove(agent_id)
            if runtime is None:
                continue
            runtime.inbox.end_stream(StreamEndReason.SHUTDOWN)
            await runtime.close()
            self._network.unhost(agent_id)
            self._forget_tokens(agent_id)
        self._on_hosted()

    async def register(self, name: str) -> RegisteredAgent:
        """Mint the agent's key, register its card, host and start it, and return its first
        token. Raises `ManagementError` `invalid-name` or `name-taken`."""
        if not is_agent_name(name):
            raise ManagementError(ManagementErrorReason.INVALID_NAME, INVALID_NAME_TEXT)
        taken = f"{agent_address(name)} is already registered"
        # One registration at a time: the name check and the hosting must not interleave.
        async with self._registering:
            if self._hosted.has_name(name):
                raise ManagementError(ManagementErrorReason.NAME_TAKEN, taken)
            key = SigningKey.generate()
            outcome = await self._registry.register(name, key.public_key_b64)
            match outcome:
                case Registered(card=card):
                    pass
                case NameTaken() | KeyAlreadyRegistered():
                    raise ManagementError(ManagementErrorReason.NAME_TAKEN, taken)
            identity = Identity(agent_id=card.card.agent_id, agent_name=name, key=key, card=card)
            seed = (
                key.seed
                if self._cluster is None
                else self._cluster.seal(identity.agent_id, key.seed)
            )
            token = RandomId.API_TOKEN.mint()
            await self._store.apply(
                [
                    PutIdentity(
                        agent_id=identity.agent_id,
                        agent_name=name,
                        signed_card=p.encode(card),
                        seed=seed,
                        created_at=_utc_text(self._hosting.clock.time()),
                    ),
                    PutToken(
                        token_digest=token_digest(token),
                        agent_id=identity.agent_id,
                        created_at=_utc_text(self._hosting.clock.time()),
                    ),
                ]
            )
            if self._cluster is None or self._cluster.is_home(identity.agent_id):
                runtime = await self._host(identity, restore=False)
                await runtime.start()
        self._on_hosted()
        audit.info("agent registered agent=%s", name)
        return RegisteredAgent(address=agent_address(name), agent_id=identity.agent_id, token=token)

    async def _host(self, identity: Identity, *, restore: bool) -> AgentRuntime:
        hosting = self._hosting
        certifier = Certifier(
            identity,
            registry_public_key=hosting.registry_public_key,
            verify_cache=hosting.verify_cache,
        )
        next_inbox = 1
        snapshot = await self._store.snapshot(identity.agent_id) if restore else None
        if snapshot is not None:
            local_rows, local_intents = certifier.restore(
                snapshot, local_instance_id=self._local_instance_id
            )
            self._network.local.restore(identity.agent_id, local_rows, local_intents)
            next_inbox = snapshot.max_inbox_seq + 1
        runtime = AgentRuntime(
            AgentParts(
                identity=identity,
                certifier=certifier,
                network=self._network,
                registry=self._registry,
                store=self._store,
                inbox=AgentInbox(
                    agent_id=identity.agent_id,
                    store=self._store,
                    next_seq=next_inbox,
                    window=hosting.stream_window,
                    observer=hosting.inbox_observer,
                    clock=hosting.clock.time,
                ),
                timeouts=hosting.timeouts,
                clock=hosting.clock,
                firewall=hosting.firewall,
                max_open_operations=hosting.max_open_operations,
            ),
            run_id=hosting.run_id,
            export=None
            if hosting.history_export_dir is None
            else HistoryExport(hosting.history_export_dir, identity.agent_name),
            observer=hosting.send_observer,
        )
        if snapshot is not None:
            runtime.collectives.restore(snapshot.open_operations, snapshot.received_requests)
        self._hosted.add(runtime)
        self._network.host(certifier)
        return runtime

    # --- tokens ----------------------------------------------------------------------------

    async def authenticate(self, token: str) -> AgentRuntime | AuthFailure:
        """The runtime an agent token names, or why it is refused (tokens are looked up by
        their SHA-256, first in memory, then in the store)."""
        if not RandomId.API_TOKEN.is_valid(token):
            return AuthFailure.UNKNOWN if not self.is_admin(token) else AuthFailure.WRONG_ROLE
        digest = token_digest(token)
        known = self._tokens.get(digest)
        if known is None:
            known = await self._store.token(digest)
            if known is None:
                return AuthFailure.UNKNOWN
            self._tokens[digest] = known
        agent_id, revoked = known
        if revoked:
            return AuthFailure.REVOKED
        runtime = self._hosted.by_id(agent_id)
        if runtime is None and self._cluster is not None:
            runtime = await self._host_on_call(agent_id)
        return runtime if runtime is not None else AuthFailure.UNKNOWN

    async def ensure_hosted(self, name: str) -> None:
        """In a cluster, host the named agent now if its home partition is held here and it
        is not hosted yet (a management call reached its home before any agent call did);
        `NotHome` when its home is elsewhere. Nothing outside a cluster."""
        if self._cluster is None or self._hosted.has_name(name):
            return
        outcome = await self._registry.lookup_by_name(name)
        if isinstance(outcome, Found):
            await self._host_on_call(outcome.card.card.agent_id)

    async def _host_on_call(self, agent_id: str) -> AgentRuntime:
        """A cluster agent's runtime, hosted now when its home partition is held here; else
        `NotHome` (homed elsewhere, or its partition is moving): no effect here."""
        assert self._cluster is not None
        async with self._registering:
            runtime = self._hosted.by_id(agent_id)
            if runtime is not None:
                return runtime
            if not self._cluster.is_home(agent_id):
                raise NotHome(agent_id)
            row = await self._cluster.identity(agent_id)
            if row is None:
                raise NotHome(agent_id)
            runtime = await self._host(self._identity(row), restore=True)
            await runtime.start()
        self._on_hosted()
        return runtime

    def is_admin(self, token: str) -> bool:
        """True for the operator token, compared in constant time."""
        return bool(self._admin_token) and hmac.compare_digest(
            token.encode("utf-8"), self._admin_token.encode("utf-8")
        )

    async def rotate_token(self, name: str) -> str:
        """Revoke the agent's tokens, end its stream, and mint a new token; raises
        `ManagementError` `not-found`."""
        await self.ensure_hosted(name)
        runtime = self._hosted.runtime(name)
        token = RandomId.API_TOKEN.mint()
        await self._store.apply(
            [
                RevokeTokens(agent_id=runtime.identity.agent_id),
                PutToken(
                    token_digest=token_digest(token),
                    agent_id=runtime.identity.agent_id,
                    created_at=_utc_text(self._hosting.clock.time()),
                ),
            ]
        )
        self._forget_tokens(runtime.identity.agent_id)
        runtime.inbox.end_stream(StreamEndReason.REVOKED)
        audit.info("agent token rotated agent=%s", name)
        return token

    async def revoke_token(self, name: str) -> None:
        """Revoke the agent's tokens and end its stream; raises `ManagementError`
        `not-found`."""
        await self.ensure_hosted(name)
        runtime = self._hosted.runtime(name)
        await self._store.apply([RevokeTokens(agent_id=runtime.identity.agent_id)])
        self._forget_tokens(runtime.identity.agent_id)
        runtime.inbox.end_stream(StreamEndReason.REVOKED)
        audit.info("agent token revoked agent=%s", name)

    def _forget_tokens(self, agent_id: str) -> None:
        # The cache would otherwise keep answering "not revoked" for the old digests.
        self._tokens = {digest: row for digest, row in self._tokens.items() if row[0] != agent_id}

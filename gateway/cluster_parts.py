"""What a cluster replica adds to the composition root (cluster.md §1, §3, §4).

`Gateway._compose` stays the one composition root; for `serve --cluster` it calls, in order:

1. `ClusterBase.open(settings, opened, ...)` before the store: the seed key (refused when
   missing or not the cluster's), the cluster's set-up in the shared database (created on an
   empty one; `harness_meta` read on a cluster's), channels to other replicas, the hint
   sender, and the membership — joined as a fresh incarnation, the fence of the store's writer;
2. `base.open_store(...)`, the cluster `PostgresStore` under that incarnation;
3. `base.sequencing(...)` for the `Network`, then `base.wire(...)` once the agents' directory
   exists: the `ClusterReplica` (claims, releases, poll, hints), the forwarder's interceptor
   and the peer hint service for the server.

Each part's close is pushed onto the root's exit stack as it opens, so a failed start closes
what opened, last first. The shutdown's hand-over (`hand_over`) runs before the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from gateway.agents import AgentDirectory, ClusterHosting, HostedAgents
from gateway.cluster.hints import HintSender
from gateway.cluster.membership import LeaseLoss, Membership, MembershipSettings
from gateway.cluster.partitions import home_partition
from gateway.cluster.seeds import SeedKey
from gateway.engine.network import Network
from gateway.observability.cluster import ClusterGaugeLoop, ClusterMetrics
from gateway.observability.gauges import LoopLagMonitor
from gateway.observability.metrics import Metrics
from gateway.registry import RegistryClient
from gateway.registry.client import Found
from gateway.registry.postgres import PostgresRegistry, read_signing_seed
from gateway.replica import ClusterReplica, ClusterRoutes, ClusterSequencing
from gateway.rpc.cluster_client import ClusterHintClient
from gateway.rpc.cluster_service import ClusterPeerService
from gateway.rpc.forward import (
    ForwardingInterceptor,
    ForwardObserver,
    HomeChannels,
    open_home_channel,
)
from gateway.rpc.peer import PeerGuard, read_peer_token
from gateway.rpc.server import ENDPOINT_SERVICE, MANAGEMENT_SERVICE, ServiceBinding
from gateway.rpc.tls import peer_channel_credentials
from gateway.settings import Settings
from gateway.store.observer import StoreObserver
from gateway.store.postgres.membership import PostgresMembershipTable
from gateway.store.postgres.schema import ClusterMeta, setup_cluster
from gateway.store.postgres.store import PostgresStore
from gateway.store.records import IdentityRow
from gateway.store.writer import CommitWriterSettings, FatalHandler

logger = logging.getLogger(__name__)

NAMED_METHODS: Final = {
    f"/{MANAGEMENT_SERVICE}/{name}": field
    for name, field in (
        ("GetAgentStatus", "name"),
        ("RotateAgentToken", "name"),
        ("RevokeAgentToken", "name"),
        ("SearchConversations", "agent_name"),
        ("ReadConversation", "agent_name"),
    )
}
"""Management calls about one agent, answered by its home (cluster.md §4.1): the request
field naming the agent."""

FORWARDED_METHODS: Final = frozenset(
    f"/{ENDPOINT_SERVICE}/{name}"
    for name in ("Send", "Messages", "Acknowledge", "ReadSend", "ParseMessageText")
)
"""The agent API's methods, answered by the agent's home (cluster.md §4.1)."""

WITHDRAW_TIMEOUT: Final = 15.0
"""Seconds a shutting-down replica waits for its partitions to be released (cluster.md §9.3):
`HANDOVER_TIMEOUT` plus room for the release units to commit."""


class ClusterStartError(Exception):
    """A replica cannot start as configured; `str()` says why and what to fix."""


@dataclass(kw_only=True)
class ClusterBase:
    """The cluster's parts opened before the store."""

    settings: Settings
    seed_key: SeedKey
    meta: ClusterMeta
    membership: Membership
    hints: HintSender
    channels: HomeChannels
    peer_token: str
    counts: ClusterMetrics
    gauges: ClusterGaugeLoop
    lag: LoopLagMonitor
    closing: contextlib.AsyncExitStack
    replica: ClusterReplica | None = None
    sequencer: ClusterSequencing | None = None

    @classmethod
    async def open(
        cls,
        settings: Settings,
        opened: contextlib.AsyncExitStack,
        *,
        on_lost: Callable[[BaseException], None],
        metrics: Metrics,
        timing: MembershipSettings | None = None,
    ) -> ClusterBase:
        """Open everything a replica needs before its store (module docstring, step 1)."""
        assert settings.store is not None
        assert settings.seed_key_file is not None
        address = settings.advertised
        if address.rpartition(":")[2] in ("", "0"):
            raise ClusterStartError(
                "--cluster needs a fixed port: --listen with a port, or --advertise-address "
                "HOST:PORT that other replicas and clients reach this one at"
            )
        seed_key = SeedKey.load(settings.seed_key_file)
        peer_token = read_peer_token(settings.peer_token_file)
        meta = await setup_cluster(
            settings.store, partitions=settings.cluster_partitions, key_check=seed_key.key_check()
        )
        seed_key.verify_check(meta.key_check)
        tls = peer_channel_credentials(settings) if settings.tls_cert_file is not None else None
        closing = contextlib.AsyncExitStack()
        # One close for everything below, last opened first: pushed onto the root's stack
        # for a failed start, called by the shutdown after the store closed otherwise.
        opened.push_async_callback(closing.aclose)
        # The peer keepalive finds a home that vanished without a reset (cluster.md §9.1).
        channels = HomeChannels(lambda target: open_home_channel(target, tls=tls))
        closing.push_async_callback(channels.close)
        client = ClusterHintClient.connect(
            replica_id=settings.replica, peer_token=peer_token, channels=channels
        )
        closing.push_async_callback(client.close)
        hints = HintSender(client.send)
        hints.start()
        closing.push_async_callback(hints.close)
        table = PostgresMembershipTable.for_dsn(settings.store, replica_id=settings.replica)
        closing.push_async_callback(table.close)
        base: ClusterBase | None = None
        counts = ClusterMetrics(metrics)

        def lost(reason: LeaseLoss) -> None:
            # cluster.md §3.5: any lost lease ends the incarnation; the supervisor restarts it.
            counts.on_lost(reason)
            on_lost(ClusterLeaseLost(reason))

        def claimed(partitions: Mapping[int, int]) -> None:
            counts.on_claimed(partitions)
            if base is not None and base.replica is not None:
                base.replica.on_claimed(partitions)

        def surplus(partitions: frozenset[int]) -> None:
            if base is not None and base.replica is not None:
                base.replica.on_surplus(partitions)

        membership = await Membership.start(
            table,
            replica_id=settings.replica,
            address=address,
            on_lost=lost,
            on_claimed=claimed,
            on_surplus=surplus,
            settings=timing,
        )
        closing.push_async_callback(membership.close)
        gauges = ClusterGaugeLoop(metrics, membership.status, hints_dropped=lambda: hints.dropped)
        lag = LoopLagMonitor(metrics)
        base = cls(
            counts=counts,
            gauges=gauges,
            lag=lag,
            closing=closing,
            settings=settings,
            seed_key=seed_key,
            meta=meta,
            membership=membership,
            hints=hints,
            channels=channels,
            peer_token=peer_token,
        )
        logger.info(
            "cluster replica joined replica=%s incarnation=%d partitions=%d address=%s",
            settings.replica,
            membership.incarnation,
            meta.partitions,
            address,
        )
        return base

    async def open_store(
        self,
        *,
        writer_settings: CommitWriterSettings,
        observer: StoreObserver,
        on_fatal: FatalHandler,
    ) -> PostgresStore:
        """The cluster store under this incarnation (step 2)."""
        assert self.settings.store is not None
        return await PostgresStore.open_cluster(
            self.settings.store,
            replica_id=self.settings.replica,
            incarnation=self.membership.incarnation,
            partitions=self.meta.partitions,
            settings=writer_settings,
            observer=observer,
            on_fatal=on_fatal,
            # A committed group stamped the beat: it extends the lease (cluster.md §3.1).
            on_beat=self.membership.beat_committed,
        )

    def sequencing(self, store: PostgresStore) -> ClusterSequencing:
        """The engine's `Sequencing` (step 3)."""
        self.sequencer = ClusterSequencing(
            rows=store,
            seed_key=self.seed_key,
            partitions=self.meta.partitions,
            membership=self.membership,
            hints=self.hints,
            replica_id=self.settings.replica,
            admit_here=self._admit_here,
        )
        return self.sequencer

    def _admit_here(self, conversation_id: str) -> None:
        if self.replica is not None:
            self.replica.admit(conversation_id)

    def hosting(self, store: PostgresStore) -> ClusterHosting:
        """What the agents' directory needs to host in a cluster."""
        return ClusterHosting(
            seal=self.seed_key.seal,
            open=self.seed_key.open,
            identity=store.identity,
            is_home=self._is_home,
        )

    def _is_home(self, agent_id: str) -> bool:
        # A partition being released is no longer home (cluster.md §3.2, a release is a
        # teardown): a call hosting the agent again between the teardown and the release unit
        # would run a second runtime whose inbox sequence collides with the first one's.
        partition = home_partition(agent_id, self.meta.partitions)
        releasing = self.sequencer.releasing if self.sequencer is not None else ()
        return partition in self.membership.owned() and partition not in releasing

    def wire(
        self,
        *,
        store: PostgresStore,
        network: Network,
        agents: AgentDirectory,
        hosted: HostedAgents,
        registry: RegistryClient,
    ) -> tuple[ForwardingInterceptor, ServiceBinding]:
        """The replica itself, the forwarder and the peer hint service (step 3)."""
        assert self.sequencer is not None
        order = network.local
        from gateway.engine.cluster_order import ClusterOrder

        assert isinstance(order, ClusterOrder)
        sequencer = self.sequencer
        self.replica = ClusterReplica(
            replica_id=self.settings.replica,
            rows=store,
            partitions=self.meta.partitions,
            membership=self.membership,
            sequencing=sequencer,
            order=order,
            hosting=_Hosting(agents, hosted),
            settling=network,
            hints=self.hints,
            incarnation=self.membership.incarnation,
            on_released=self.counts.on_released,
        )
        routes = ClusterRoutes(
            rows=store,
            partitions=self.meta.partitions,
            membership=self.membership,
            releasing=lambda partition: partition in sequencer.releasing,
            replica_id=self.settings.replica,
            agent_of_name=_agent_of_name(registry),
        )
        interceptor = ForwardingInterceptor(
            routes=routes,
            channels=self.channels,
            peer_token=self.peer_token,
            methods=FORWARDED_METHODS,
            named=NAMED_METHODS,
            observer=_ForwardCounts(self.counts),
        )
        service = ClusterPeerService(self.replica, PeerGuard(self.peer_token)).binding()
        return interceptor, service

    async def serving(self) -> None:
        """The replica serves: it joins assignment and starts its poll."""
        assert self.replica is not None
        self.replica.start()
        self.gauges.start()
        self.lag.start()
        await self.membership.serving()

    async def hand_over(self) -> None:
        """Shutdown (cluster.md §9.3): leave assignment and release every partition held,
        bounded by `WITHDRAW_TIMEOUT`."""
        await self.membership.withdraw()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WITHDRAW_TIMEOUT
        while self.membership.owned() and loop.time() < deadline:  # noqa: ASYNC110 - released by other tasks, bounded
            await asyncio.sleep(0.05)
        if self.membership.owned():
            logger.warning(
                "shutdown: partitions not released in time count=%d", len(self.membership.owned())
            )

    async def stop_replica(self) -> None:
        """Stop the replica's poll, claims, releases and hints (before the runtimes close)."""
        if self.replica is not None:
            await self.replica.close()
        await self.gauges.close()
        await self.lag.close()

    async def close(self) -> None:
        """Close the membership (it writes nothing more), the table's sessions, the hint
        sender and the channels to other replicas: after the store closed. Idempotent."""
        await self.stop_replica()
        await self.closing.aclose()


async def open_cluster_registry(settings: Settings) -> PostgresRegistry:
    """The cluster's Registry on the shared database, signing with the one key every replica
    reads from `--registry-key-file` (cluster.md §1)."""
    assert settings.store is not None
    assert settings.registry_key_file is not None
    return await PostgresRegistry.open(
        settings.store, signing_seed=read_signing_seed(settings.registry_key_file)
    )


class ClusterLeaseLost(Exception):
    """This incarnation lost its lease: it ends (cluster.md §3.5)."""

    def __init__(self, reason: LeaseLoss) -> None:
        super().__init__(f"the cluster lease was lost ({reason.value}); this replica exits")
        self.reason = reason


def _agent_of_name(registry: RegistryClient) -> Callable[[str], Awaitable[str | None]]:
    async def agent_of_name(name: str) -> str | None:
        outcome = await registry.lookup_by_name(name)
        return outcome.card.card.agent_id if isinstance(outcome, Found) else None

    return agent_of_name


class _ForwardCounts(ForwardObserver):
    """Forwarded calls counted in `harness_cluster_forwards_total`."""

    def __init__(self, counts: ClusterMetrics) -> None:
        self._counts = counts

    def on_forward(self, method: str, outcome: str) -> None:
        self._counts.on_forward(method, outcome)


class _Hosting:
    """The replica's view of the agents: the directory hosts, the table wakes."""

    def __init__(self, agents: AgentDirectory, hosted: HostedAgents) -> None:
        self._agents = agents
        self._hosted = hosted

    async def host_rows(self, rows: Iterable[IdentityRow]) -> None:
        await self._agents.host_rows(rows)

    async def unhost(self, agent_ids: Iterable[str]) -> None:
        await self._agents.unhost(agent_ids)

    def hosted_ids(self) -> list[str]:
        return [runtime.identity.agent_id for runtime in self._hosted.runtimes()]

    def deliveries_ready(self, agent_ids: Iterable[str]) -> None:
        self._hosted.deliveries_ready(agent_ids)


__all__ = [
    "FORWARDED_METHODS",
    "ClusterBase",
    "ClusterLeaseLost",
    "ClusterStartError",
    "open_cluster_registry",
]

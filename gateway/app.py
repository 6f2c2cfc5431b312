"""The composition root: `Gateway` builds every component in one place and runs their lives.

`await Gateway.start(settings)` composes one frozen `Components` record: the data directory
(exclusive lock), the store, the Registry, the Router, the Router feed, the hosted agents'
table (`HostedAgents`, which the feed's deliveries-ready signal reaches directly) and their
`AgentDirectory`, the `ManagementQueries`, the gauges and the gRPC server. It then runs the
start in one written order: serve gRPC (readiness NOT_SERVING), rebuild every hosted agent
from the store, move existing conversations onto local order, start the Router feed and the
agents, then readiness SERVING. A start that fails closes what it opened, in reverse order.
`await gateway.shutdown()` runs the written order of operations.md §5; it is idempotent, and
`wait_stopped()` returns once it ran.

The Router and Registry are chosen by the settings (operations.md §1): in-process (the
embedded mode) unless `router` / `registry` name a standalone process to join, through the
gRPC clients of `gateway/rpc/` (the Registry key pinned from a setting or fetched once at
start), or `router` names a NATS JetStream cluster; the store is SQLite in the data
directory or PostgreSQL (`gateway.backends` opens whichever is chosen). With
`expose_network` the embedded Router and Registry are also served to other daemons on this
daemon's own gRPC port, behind the peer token.

The gRPC services receive one `GatewayCore` record built here: the gateway's lifecycle
state, the `AgentDirectory` (hosting, tokens, registration) and the `ManagementQueries`
(what an operator reads). They call those components directly; nothing is forwarded
through `Gateway`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from gateway import __version__
from gateway.agents import AgentDirectory, HostedAgents, Hosting
from gateway.backends import StoreWiring, open_nats_router, open_store
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.closing import AsyncClosing
from gateway.cluster.membership import MembershipSettings
from gateway.cluster_parts import ClusterBase, open_cluster_registry
from gateway.endpoint.api import GatewayCore, GatewayState, NotServing
from gateway.endpoint.inbox import InboxObserver, StreamEndReason
from gateway.endpoint.runtime import SendObserver, SendTimeouts
from gateway.engine.certifier import Certified
from gateway.engine.local_move import move_existing
from gateway.engine.network import Network, NetworkObserver, RouterAttachment
from gateway.firewall import Firewall, FirewallObserver
from gateway.firewall.config import FirewallConfigError, load_firewall
from gateway.firewall.spec import kind_of
from gateway.identity.keys import VerifyCache
from gateway.management import ManagementQueries
from gateway.observability.gauges import GaugeLoop
from gateway.observability.logs import install_grpc_log_filter
from gateway.observability.metrics import (
    DAEMON_GRPC_SERVICES,
    REGISTRY_SERVICE,
    ROUTER_SERVICE,
    FirewallReload,
    Metrics,
    SendOutcome,
    StoreMetrics,
)
from gateway.observability.metrics_server import MetricsServer
from gateway.registry import RegistryClient, RegistryPort, SqliteRegistry
from gateway.registry.verifier import RegistryEnvelopeVerifier
from gateway.router import InProcessRouter, RingSettings
from gateway.router.port import RouterPort
from gateway.rpc.firewall_client import GrpcExternalCaller
from gateway.rpc.keepalive import KeepalivePolicy
from gateway.rpc.peer import PeerGuard, ensure_peer_token, read_peer_token
from gateway.rpc.registry_client import GrpcRegistry
from gateway.rpc.registry_service import RegistryService
from gateway.rpc.router_client import GrpcRouter
from gateway.rpc.router_service import RouterService
from gateway.rpc.server import RpcServer, ServerInterceptor, ServiceBinding, build_server
from gateway.rpc.tls import peer_channel_credentials
from gateway.secret_file import ensure_secret, read_secret
from gateway.settings import Settings
from gateway.store import CommitWriterSettings, DataDirLock, SqliteStore
from gateway.store.port import Store

logger = logging.getLogger(__name__)

REGISTRY_FILE: Final = "registry.sqlite3"
"""The embedded Registry's file in the data directory."""
ADMIN_TOKEN_FILE: Final = "admin-token"  # noqa: S105 - a file name, not a secret
"""The generated operator token's file in the data directory (mode 0600)."""
SHUTDOWN_ANSWER_MARGIN: Final = 1.0
"""Seconds before the shutdown grace ends at which waiting sends answer (§5 step 5)."""


class ShutdownStep(enum.StrEnum):
    """The steps of operations.md §5, as logged with their durations."""

    NOT_SERVING = "health-not-serving"
    HAND_OVER = "cluster-hand-over"
    DELAY = "delay"
    REFUSE = "refuse-and-end-streams"
    DRAIN = "server-stop"
    BACKGROUND = "stop-background"
    FLUSH = "flush-store"
    METRICS = "stop-metrics"


def ensure_admin_token(settings: Settings) -> tuple[str, Path]:
    """The operator token: from `admin_token_file`, else generated once under the data
    directory with mode 0600. Either file is refused when others can read or write it
    (`SecretFileError`). The token is never logged; its path is."""
    if settings.admin_token_file is not None:
        path = settings.admin_token_file
        return read_secret(path, what="admin token"), path
    path = settings.data_dir / ADMIN_TOKEN_FILE
    token, _ = ensure_secret(path, what="admin token", prefix="hadm_")
    return token, path


class RegistryBackend(RegistryPort, Protocol):
    """A Registry backend the daemon opened (its own SQLite file, or a client of a
    standalone Registry), and so must close."""

    async def close(self) -> None:
        """Release the backend; idempotent."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Components:
    """Everything one daemon is made of, composed once by `Gateway.start`."""

    metrics_server: MetricsServer | None
    """`/metrics`, when `metrics_listen` is set."""
    lock: DataDirLock
    """The data directory's exclusive lock."""
    store: Store
    registry_port: RegistryBackend
    """The Registry backend: the embedded SQLite one, or a client of a standalone one."""
    registry: RegistryClient
    """The verifying, caching view of `registry_port` everything else resolves through."""
    router: RouterPort
    """The in-process ring, or a client of a standalone Router."""
    router_service: RouterService | None
    """The embedded Router served to other daemons, when this daemon exposes it."""
    network: Network
    hosted: HostedAgents
    """The hosted agents' runtimes: the network's deliveries-ready signal goes here."""
    agents: AgentDirectory
    management: ManagementQueries
    gauges: GaugeLoop
    server: RpcServer
    firewall: Firewall | None
    """The local firewall, when `firewall_config` names a file."""
    cluster: ClusterBase | None = None
    """A cluster replica's own parts (cluster.md), when `--cluster`."""


def _inbox_observer(metrics: Metrics) -> InboxObserver:
    return InboxObserver(
        on_stream_open=metrics.count_stream_open,
        on_stream_end=metrics.count_stream_end,
        on_replayed=metrics.count_replayed,
        on_acknowledged=metrics.count_acknowledged,
        on_acknowledge_result=metrics.count_acknowledge_result,
    )


def _send_observer(metrics: Metrics) -> SendObserver:
    return SendObserver(
        on_send=lambda op, error: metrics.count_send(
            op, SendOutcome.OK if error is None else error
        ),
        on_delivery_published=metrics.count_published,
        on_record_consumed=metrics.count_consumed,
        on_member_outcome=metrics.count_member_outcome,
        on_collective_result=metrics.count_collective_result,
        on_key_resolution=metrics.count_idempotency,
    )


def _firewall_observer(metrics: Metrics) -> FirewallObserver:
    return FirewallObserver(
        on_check=metrics.observe_firewall_check, on_refusal=metrics.count_firewall_refusal
    )


def _log_firewall(firewall: Firewall, what: str) -> None:
    spec = firewall.spec
    logger.info(
        "%s file=%s middlewares=%s content_logging=%s",
        what,
        spec.source,
        ",".join(f"{m.id}:{kind_of(m).value}" for m in spec.middlewares) or "none",
        spec.content_logging,
    )


class Gateway(AsyncClosing):
    """One gateway daemon: its components, their start and shutdown; the `Lifecycle` the
    gRPC services check."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock = SYSTEM_CLOCK,
        cluster_timing: MembershipSettings | None = None,
    ) -> None:
        """Use `start`; nothing is opened here."""
        self.settings = settings
        self._run_id = secrets.token_hex(8)
        """This process's run: marks idempotency reservations and a PostgreSQL lease."""
        self._clock = clock
        """The one clock every component reads the time through."""
        self._cluster_timing = cluster_timing
        """A cluster replica's membership timings; None is the shipped ones (tests shorten
        them, cluster.md §3.1)."""
        self._state = GatewayState.STARTING
        exposed = [
            name
            for name, served in (
                (ROUTER_SERVICE, settings.exposes_router),
                (REGISTRY_SERVICE, settings.exposes_registry),
            )
            if served
        ]
        self.metrics = Metrics(
            __version__, settings.mode, grpc_services=(*DAEMON_GRPC_SERVICES, *exposed)
        )
        self._components: Components | None = None
        self._opened = contextlib.AsyncExitStack()
        """What the start opened so far, closed in reverse order if the start fails."""
        self.admin_token_path: Path | None = None
        self.peer_token_path: Path | None = None
        """The peer token's file when this daemon serves its Router or Registry."""
        self._shutdown_started = False
        self._hurry = asyncio.Event()
        self._stopped = asyncio.Event()
        self._fatal: BaseException | None = None
        self._fatal_shutdown: asyncio.Task[None] | None = None
        self.exit_code = 0

    # --- start -------------------------------------------------------------------------------

    @classmethod
    async def start(
        cls,
        settings: Settings,
        *,
        clock: Clock = SYSTEM_CLOCK,
        cluster_timing: MembershipSettings | None = None,
    ) -> Gateway:
        """Compose, recover, and serve. On failure, what was opened is closed."""
        gateway = cls(settings, clock=clock, cluster_timing=cluster_timing)
        try:
            install_grpc_log_filter()  # before any call can make grpc log a token
            gateway._components = await gateway._compose(gateway._opened)
            await gateway._run(gateway._components)
        except BaseException:
            await gateway._close_after_failed_start()
            raise
        # From here on the written shutdown order closes everything.
        gateway._opened.pop_all()
        return gateway

    async def _compose(self, opened: contextlib.AsyncExitStack) -> Components:
        """Open and build every component, pushing each one's close onto `opened`."""
        settings = self.settings
        metrics_server = None
        if settings.metrics_listen is not None:
            # Metrics come up first and go down last, so a scrape sees the whole life.
            metrics_server = MetricsServer(self.metrics, settings.metrics_listen)
            metrics_server.start()
            opened.push_async_callback(asyncio.to_thread, metrics_server.stop)
        # A malformed firewall file refuses the start before anything opens, so its
        # file:line:column problems are the one error shown.
        firewall = None
        if settings.firewall_config is not None:
            firewall = Firewall(
                load_firewall(settings.firewall_config),
                caller_factory=GrpcExternalCaller,
                observer=_firewall_observer(self.metrics),
                clock=self._clock.time,
                log_content=settings.log_content,
            )
            opened.push_async_callback(firewall.close)
            _log_firewall(firewall, "firewall in force")
        # A NATS Router authenticates with its own credentials, not the peer token.
        joining = (
            settings.router is not None and not settings.router_is_nats
        ) or settings.registry is not None
        # Joining needs the token of the process serving the Router and Registry; read it
        # before anything opens, so a missing file is the one error shown.
        peer_token = read_peer_token(settings.peer_token_file) if joining else None
        peer_tls = peer_channel_credentials(settings) if settings.joins_over_tls else None
        lock = DataDirLock.acquire(settings.data_dir)
        opened.callback(lock.release)
        admin_token, self.admin_token_path = ensure_admin_token(settings)
        cluster = (
            await ClusterBase.open(
                settings,
                opened,
                on_lost=self._on_fatal,
                metrics=self.metrics,
                timing=self._cluster_timing,
            )
            if settings.cluster
            else None
        )
        guard = None
        if settings.exposes_router or settings.exposes_registry:
            served_token, self.peer_token_path = ensure_peer_token(settings)
            guard = PeerGuard(served_token)
        if settings.registry is None and cluster is None:
            # The embedded Registry holds its private seed: owner-only before SQLite opens it.
            os.close(os.open(settings.data_dir / REGISTRY_FILE, os.O_CREAT | os.O_WRONLY, 0o600))
        writer_settings = CommitWriterSettings(
            commit_delay=settings.commit_delay, max_batch=settings.commit_max_batch
        )
        store_observer = StoreMetrics(self.metrics, settings.store_kind)
        store: Store
        if cluster is not None:
            store = cluster_store = await cluster.open_store(
                writer_settings=writer_settings, observer=store_observer, on_fatal=self._on_fatal
            )
        else:
            store = await open_store(
                settings,
                StoreWiring(
                    writer_settings=writer_settings,
                    observer=store_observer,
                    on_fatal=self._on_fatal,
                    run_id=self._run_id,
                ),
            )
        opened.push_async_callback(store.close)

        registry_port: RegistryBackend
        registry_binding = None
        if cluster is not None:
            registry_port = await open_cluster_registry(settings)
        elif settings.registry is None:
            embedded_registry = await SqliteRegistry.open(settings.data_dir / REGISTRY_FILE)
            if guard is not None and settings.exposes_registry:
                registry_binding = RegistryService(embedded_registry, guard).binding()
            registry_port = embedded_registry
        else:
            assert peer_token is not None  # read above whenever a Registry is joined
            registry_port = await GrpcRegistry.connect(
                settings.registry,
                peer_token=peer_token,
                tls=peer_tls,
                keepalive=KeepalivePolicy.from_settings(settings),
                registry_public_key=settings.registry_public_key,
            )
        opened.push_async_callback(registry_port.close)
        cache = VerifyCache()
        registry = RegistryClient(
            registry_port,
            registry_public_key=registry_port.registry_public_key(),
            verify_cache=cache,
        )
        opened.push_async_callback(registry.close)

        router: RouterPort
        router_service = None
        if settings.router is None:
            ring = InProcessRouter(
                RegistryEnvelopeVerifier(registry, cache=cache),
                settings=RingSettings(
                    max_entries=settings.ring_max_entries, max_bytes=settings.ring_max_bytes
                ),
            )
            if guard is not None and settings.exposes_router:
                router_service = RouterService(ring, guard)
            router = ring
        elif settings.router_is_nats:
            router = await open_nats_router(
                settings, RegistryEnvelopeVerifier(registry, cache=cache)
            )
        else:
            # A Router that is down at start is fine: the feed retries while DETACHED.
            assert peer_token is not None  # read above whenever a Router is joined
            router = await GrpcRouter.connect(
                settings.router,
                peer_token=peer_token,
                tls=peer_tls,
                keepalive=KeepalivePolicy.from_settings(settings),
            )
        opened.push_async_callback(router.close)

        # The directory's table exists first: the network's delivery signals go to it directly.
        hosted = HostedAgents()
        signals = self._delivery_observers(cluster, hosted)
        network = Network(
            router=router,
            store=store,
            local_instance_id=store.local_instance_id,
            clock=self._clock,
            observer=NetworkObserver(
                on_certified=signals.on_certified,
                on_deliveries=signals.on_deliveries,
                on_delivered=signals.on_delivered,
                on_attachment=self._attachment,
                on_event=self.metrics.count_router_event,
                on_fatal=self._on_fatal,
            ),
            sequencing=None if cluster is None else cluster.sequencing(cluster_store),
            inboxes=hosted if cluster is None else None,
        )
        opened.push_async_callback(network.close)
        agents = AgentDirectory(
            hosted=hosted,
            store=store,
            local_instance_id=store.local_instance_id,
            network=network,
            registry=registry,
            hosting=self._hosting(registry_port.registry_public_key(), cache, firewall),
            admin_token=admin_token,
            # harness_router_attachments counts hosted agents: a new one joins the feed's state.
            on_hosted=lambda: self._attachment(network.state),
            cluster=None if cluster is None else cluster.hosting(cluster_store),
        )
        opened.push_async_callback(hosted.close)
        management = ManagementQueries(
            hosted=hosted,
            store=store,
            network=network,
            mode=settings.mode,
            clock=self._clock,
            cluster=None if cluster is None else cluster.membership.status,
            ensure_hosted=None if cluster is None else agents.ensure_hosted,
        )
        gauges = GaugeLoop(management, self.metrics)
        opened.push_async_callback(gauges.close)

        core = GatewayCore(
            lifecycle=self,
            agents=agents,
            management=management,
            on_auth_refused=self.metrics.count_auth_failure,
        )
        interceptors: list[ServerInterceptor] = []
        services = self._exposed_services(router_service, registry_binding)
        if cluster is not None:
            forwarder, hint_service = cluster.wire(
                store=cluster_store,
                network=network,
                agents=agents,
                hosted=hosted,
                registry=registry,
            )
            opened.push_async_callback(cluster.stop_replica)
            interceptors.append(forwarder)
            services.append(hint_service)
        server = await build_server(
            core, settings, metrics=self.metrics, interceptors=interceptors, services=services
        )
        opened.push_async_callback(server.stop, None)
        return Components(
            metrics_server=metrics_server,
            lock=lock,
            store=store,
            registry_port=registry_port,
            registry=registry,
            router=router,
            router_service=router_service,
            network=network,
            hosted=hosted,
            agents=agents,
            management=management,
            gauges=gauges,
            server=server,
            firewall=firewall,
            cluster=cluster,
        )

    def _delivery_observers(
        self, cluster: ClusterBase | None, hosted: HostedAgents
    ) -> NetworkObserver:
        """Outside a cluster, a hosted agent's pending deliveries are all committed here, so
        the rows themselves reach its classifier (engine.md §7.2); in one, the agents read the
        store, and the homes on other replicas are hinted (cluster.md §5.2)."""
        if cluster is None:
            return NetworkObserver(
                on_certified=self._certified, on_delivered=hosted.deliveries_committed
            )

        def certified(notice: Certified) -> None:
            self._certified(notice)
            if cluster.replica is not None:
                cluster.replica.certified(notice.agent_id, notice.post_id)

        def deliveries(agent_ids: set[str]) -> None:
            hosted.deliveries_ready(agent_ids)
            if cluster.replica is not None:
                cluster.replica.deliveries(agent_ids)

        return NetworkObserver(on_certified=certified, on_deliveries=deliveries)

    def _hosting(
        self, registry_public_key: str, cache: VerifyCache, firewall: Firewall | None
    ) -> Hosting:
        settings = self.settings
        return Hosting(
            registry_public_key=registry_public_key,
            verify_cache=cache,
            stream_window=settings.stream_window,
            timeouts=SendTimeouts(
                attach=settings.router_attach_timeout, certify=settings.send_certify_timeout
            ),
            history_export_dir=settings.history_export_dir,
            run_id=self._run_id,
            inbox_observer=_inbox_observer(self.metrics),
            send_observer=_send_observer(self.metrics),
            clock=self._clock,
            firewall=firewall,
            max_open_operations=settings.max_open_operations,
        )

    def _exposed_services(
        self, router_service: RouterService | None, registry_binding: ServiceBinding | None
    ) -> list[ServiceBinding]:
        """The embedded Router and Registry as services for other daemons (`expose_network`);
        each was built behind the peer token, and only when exposed."""
        exposed = [
            binding
            for binding in (
                None if router_service is None else router_service.binding(),
                registry_binding,
            )
            if binding is not None
        ]
        if exposed:
            logger.info(
                "exposing the embedded network router=%s registry=%s peer_token_file=%s",
                self.settings.exposes_router,
                self.settings.exposes_registry,
                self.peer_token_path,
            )
        return exposed

    async def _run(self, components: Components) -> None:
        """The start, one step after another."""
        # The port is open from here on, but readiness says NOT_SERVING and every call is
        # refused NOT_READY until the agents are back.
        await components.server.start()
        self._state = GatewayState.RECOVERING
        await components.agents.restore()
        # Existing data (engine.md §5.10): before local order and Router recovery start.
        await move_existing(
            store=components.store,
            local=components.network.local,
            certifiers={c.agent_id: c for c in components.network.certifiers()},
        )
        await components.network.start()
        await components.hosted.start()
        self._state = GatewayState.SERVING
        components.gauges.start()
        await components.server.set_serving()
        if isinstance(components.store, SqliteStore):
            # A large file's full check runs only now, beside serving (engine.md §8.5).
            components.store.start_integrity_check()
        if components.cluster is not None:
            # Only a serving replica joins assignment and claims (cluster.md §3.2).
            await components.cluster.serving()
        logger.info(
            "serving listen=%s agents=%d", components.server.address, components.hosted.count
        )

    async def _close_after_failed_start(self) -> None:
        """Close what a failed start opened, the last opened first."""
        self._shutdown_started = True
        try:
            await self._opened.aclose()
        finally:
            self._state = GatewayState.STOPPED
            self._stopped.set()

    # --- what tests and the CLI read ---------------------------------------------------------

    def _composed(self) -> Components:
        if self._components is None:
            raise NotServing(self._state)
        return self._components

    @property
    def components(self) -> Components:
        """The composed components (tests and tools reach into them); `NotServing` before
        `start` composed them."""
        return self._composed()

    @property
    def metrics_address(self) -> str | None:
        """The bound `/metrics` address, when metrics are on."""
        if self._components is None or self._components.metrics_server is None:
            return None
        return self._components.metrics_server.address

    @property
    def health_address(self) -> str | None:
        """The bound plaintext health-only address, when `health_listen` is set."""
        return None if self._components is None else self._components.server.health_address

    @property
    def address(self) -> str:
        """The bound gRPC address (`HOST:PORT`)."""
        return self._composed().server.address

    @property
    def registry_public_key(self) -> str:
        """The pinned Registry key every card is checked against."""
        return self._composed().registry_port.registry_public_key()

    @property
    def state(self) -> GatewayState:
        """The lifecycle state."""
        return self._state

    # --- shutdown ----------------------------------------------------------------------------

    def _on_fatal(self, error: BaseException) -> None:
        # engine.md §8: a store failure not attributable to one request stops the daemon
        # rather than let memory and disk diverge; recovery resumes after the restart.
        if self._fatal is None:
            self._fatal = error
            logger.critical("fatal store error; shutting down", exc_info=error)
            self.exit_code = 1
            self._fatal_shutdown = asyncio.get_running_loop().create_task(
                self.shutdown(skip_waits=True), name="fatal-shutdown"
            )

    async def wait_stopped(self) -> None:
        """Return once `shutdown` has completed."""
        await self._stopped.wait()

    async def shutdown(self, *, skip_waits: bool = False) -> None:
        """operations.md §5, one step after another; idempotent. A second call with
        `skip_waits` (a second signal) cuts the delay and the grace of the running one."""
        if skip_waits:
            self._hurry.set()
        if self._shutdown_started:
            await self._stopped.wait()
            return
        self._shutdown_started = True
        logger.info("shutdown requested")
        self._state = GatewayState.STOPPING
        durations: dict[str, float] = {}

        async def step(name: ShutdownStep, action: Callable[[], object]) -> None:
            started = self._clock.monotonic()
            try:
                result = action()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                logger.exception("shutdown step failed step=%s", name.value)
                self.exit_code = 1
            durations[name.value] = round(self._clock.monotonic() - started, 3)

        components = self._components
        # Health first, so probes and balancers stop routing here before anything ends.
        if components is not None:
            await step(ShutdownStep.NOT_SERVING, components.server.set_not_serving)
        if components is not None and components.cluster is not None and self._fatal is None:
            # cluster.md §9.3: hand the partitions over while calls can still be forwarded.
            await step(ShutdownStep.HAND_OVER, components.cluster.hand_over)
        if not skip_waits and self.settings.shutdown_delay > 0:
            await step(
                ShutdownStep.DELAY, lambda: self._wait_or_hurry(self.settings.shutdown_delay)
            )
        # New calls are refused by the state check; streams end now so none holds the grace,
        # and their clients reconnect elsewhere and replay.
        await step(ShutdownStep.REFUSE, self._end_streams)
        if components is not None:
            grace = 0.0 if skip_waits else self.settings.shutdown_grace
            await step(ShutdownStep.DRAIN, lambda: self._stop_server(components, grace))
        await step(ShutdownStep.BACKGROUND, self._stop_background)
        await step(ShutdownStep.FLUSH, self._close_store)
        # Metrics stop last, so the shutdown itself can be scraped.
        await step(ShutdownStep.METRICS, self._stop_metrics)
        self._state = GatewayState.STOPPED
        logger.info("stopped steps=%s", durations)
        self._stopped.set()

    def _end_streams(self) -> None:
        if self._components is None:
            return
        self._components.hosted.end_streams(StreamEndReason.SHUTDOWN)
        if self._components.router_service is not None:
            # Other daemons' held reads of the exposed Router would hold the grace too.
            self._components.router_service.end_reads()

    async def _wait_or_hurry(self, seconds: float) -> None:
        hurry = asyncio.ensure_future(self._hurry.wait())
        try:
            await asyncio.wait({hurry}, timeout=seconds)
        finally:
            hurry.cancel()

    async def _stop_server(self, components: Components, grace: float) -> None:
        # Waiting sends answer one second before the grace ends: cancelling their latches
        # turns a bound send into delivery-pending (it is proposed again after restart).
        answer_at = max(0.0, grace - SHUTDOWN_ANSWER_MARGIN)
        stopper = asyncio.ensure_future(components.server.stop(grace))
        hurry = asyncio.ensure_future(self._hurry.wait())
        try:
            await asyncio.wait(
                {stopper, hurry}, timeout=answer_at, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            hurry.cancel()
        if not stopper.done():
            # A second signal answers waiting sends now; the grace itself runs on, since
            # grpc cannot shorten a drain it began (see `RpcServer.stop`).
            components.network.cancel_waiters()
        await stopper

    async def _stop_background(self) -> None:
        if self._components is None:
            return
        components = self._components
        await components.gauges.close()
        if components.cluster is not None:
            await components.cluster.stop_replica()
        await components.hosted.close()
        await components.network.close()
        await components.router.close()
        await components.registry.close()
        await components.registry_port.close()
        # After the runtimes: no check runs any more, so the middlewares' channels close.
        await self._close_firewall()

    async def _close_store(self) -> None:
        if self._components is None:
            return
        # After the last `Send` was answered (DRAIN) and every runtime closed, so nothing
        # writes behind the flush.
        await self._components.store.close()
        if self._components.cluster is not None:
            # After the store's last group: the membership stops beating only now.
            await self._components.cluster.close()
        self._components.lock.release()

    async def _close_firewall(self) -> None:
        if self._components is not None and self._components.firewall is not None:
            await self._components.firewall.close()

    async def _stop_metrics(self) -> None:
        if self._components is not None and self._components.metrics_server is not None:
            await asyncio.to_thread(self._components.metrics_server.stop)

    async def close(self) -> None:
        """The shutdown order without its waits: how `async with` leaves a gateway."""
        await self.shutdown(skip_waits=True)

    # --- the firewall ----------------------------------------------------------------------

    async def reload_firewall(self) -> bool:
        """Re-read the firewall file (SIGHUP) and put it in force; streams and calls go on.
        An invalid file keeps the policy in force and says why. True when the new file is
        in force."""
        components = self._components
        path = self.settings.firewall_config
        if components is None or components.firewall is None or path is None:
            logger.info("SIGHUP: no firewall file is configured; nothing to reload")
            return False
        try:
            spec = await asyncio.to_thread(load_firewall, path)
        except FirewallConfigError as error:
            self.metrics.count_firewall_reload(FirewallReload.INVALID)
            logger.error(
                "firewall file invalid; the policy in force stays problems=%s",
                "; ".join(error.problems),
            )
            return False
        await components.firewall.replace(spec)
        self.metrics.count_firewall_reload(FirewallReload.OK)
        _log_firewall(components.firewall, "firewall reloaded")
        return True

    # --- observers of the network --------------------------------------------------------------

    def _certified(self, certified: Certified) -> None:
        if certified.resumed:
            # Its clock spans the downtime: counted as resumed, not observed as latency.
            self.metrics.count_intents_resumed(certified.kind)
            return
        self.metrics.observe_certification(
            certified.op, certified.kind, max(0.0, self._clock.time() - certified.bound_at)
        )

    def _attachment(self, state: RouterAttachment) -> None:
        hosted = 0 if self._components is None else self._components.hosted.count
        for each in RouterAttachment:
            self.metrics.set_router_attachments(each, hosted if each is state else 0)

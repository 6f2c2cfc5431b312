"""The composition root: one `Gateway` builds every component, in one place.

`await Gateway.start(settings)` opens the data directory (exclusive lock), the store, the
Registry, the Router and the Router feed, rebuilds every hosted agent from the store,
recovers its conversations, and serves gRPC. `await gateway.shutdown()` runs the written
order of operations.md §5; it is idempotent, and `wait_stopped()` returns once it ran.

The Router and Registry are chosen by the settings (operations.md §1): in-process (the
embedded mode) unless `router` / `registry` name a standalone process to join, through the
gRPC clients of `gateway/rpc/` (the Registry key pinned from a setting or fetched once at
start). With `expose_network` the embedded Router and Registry are also served to other
daemons on this daemon's own gRPC port, behind the peer token.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import enum
import hmac
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from gateway import __version__
from gateway.contract.addresses import canonicalize, is_agent_name
from gateway.contract.errors import SendError
from gateway.contract.ids import RandomId, token_digest
from gateway.endpoint.api import (
    AgentStatus,
    AuthFailure,
    ConversationSummary,
    GatewayState,
    GatewayStatus,
    HistoryRecord,
    ManagementError,
    RegisteredAgent,
    SetAsideConversation,
)
from gateway.endpoint.export import HistoryExport
from gateway.endpoint.inbox import AgentInbox, InboxObserver, StreamEndReason
from gateway.endpoint.runtime import AgentRuntime, SendObserver, SendTimeouts
from gateway.engine import protocol as p
from gateway.engine.certifier import Certified, Certifier, Identity
from gateway.engine.local_move import move_existing
from gateway.engine.network import Network, NetworkObserver, RouterAttachment
from gateway.identity.keys import SigningKey, VerifyCache
from gateway.observability.logs import install_grpc_log_filter
from gateway.observability.metrics import (
    DAEMON_GRPC_SERVICES,
    REGISTRY_SERVICE,
    ROUTER_SERVICE,
    Metrics,
    StoreMetrics,
)
from gateway.observability.metrics_server import MetricsServer
from gateway.registry import (
    KeyAlreadyRegistered,
    NameTaken,
    Registered,
    RegistryClient,
    SqliteRegistry,
)
from gateway.registry.verifier import RegistryEnvelopeVerifier
from gateway.router import InProcessRouter, RingSettings
from gateway.rpc.keepalive import KeepalivePolicy
from gateway.rpc.metrics_interceptor import MetricsInterceptor
from gateway.rpc.peer import PeerGuard, ensure_peer_token, read_peer_token
from gateway.rpc.registry_client import GrpcRegistry
from gateway.rpc.registry_service import RegistryService
from gateway.rpc.router_client import GrpcRouter
from gateway.rpc.router_service import RouterService
from gateway.rpc.server import RpcServer, ServiceBinding, build_server
from gateway.rpc.tls import peer_channel_credentials
from gateway.secret_file import ensure_secret, read_secret
from gateway.settings import Settings
from gateway.store import CommitWriterSettings, DataDirLock, SqliteStore
from gateway.store.records import PutIdentity, PutToken, RevokeTokens

logger = logging.getLogger(__name__)
audit = logging.getLogger("harness.audit")

STORE_FILE: Final = "gateway.sqlite3"
"""The store's file in the data directory."""
REGISTRY_FILE: Final = "registry.sqlite3"
"""The embedded Registry's file in the data directory."""
ADMIN_TOKEN_FILE: Final = "admin-token"  # noqa: S105 - a file name, not a secret
"""The generated operator token's file in the data directory (mode 0600)."""
GAUGE_INTERVAL: Final = 5.0
"""Seconds between refreshes of the gauges read from the store (backlog, oldest unacked)."""
SHUTDOWN_ANSWER_MARGIN: Final = 1.0
"""Seconds before the shutdown grace ends at which waiting sends answer (§5 step 5)."""


class ShutdownStep(enum.StrEnum):
    """The steps of operations.md §5, as logged with their durations."""

    NOT_SERVING = "health-not-serving"
    DELAY = "delay"
    REFUSE = "refuse-and-end-streams"
    DRAIN = "server-stop"
    BACKGROUND = "stop-background"
    FLUSH = "flush-store"
    METRICS = "stop-metrics"


def _utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayHooks:
    """Optional callbacks of the composition root (tests and the CLI use them)."""

    on_fatal: Callable[[BaseException], None] | None = None


class Gateway:
    """One gateway daemon: every component, its lifecycle and the `GatewayCore` surface."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._state = GatewayState.STARTING
        self._lock: DataDirLock | None = None
        self._store: SqliteStore | None = None
        self._registry_port: SqliteRegistry | GrpcRegistry | None = None
        self._registry: RegistryClient | None = None
        self._router: InProcessRouter | GrpcRouter | None = None
        self._router_service: RouterService | None = None
        self._network: Network | None = None
        self._server: RpcServer | None = None
        self._cache = VerifyCache()
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
        self._metrics_server: MetricsServer | None = None
        self._gauges: asyncio.Task[None] | None = None
        self._runtimes: dict[str, AgentRuntime] = {}
        self._by_name: dict[str, AgentRuntime] = {}
        self._tokens: dict[str, tuple[str, bool]] = {}
        self._admin_token = ""
        self.admin_token_path: Path | None = None
        self.peer_token_path: Path | None = None
        """The peer token's file when this daemon serves its Router or Registry."""
        self._registering = asyncio.Lock()
        self._run_id = secrets.token_hex(8)
        """This process's run: keyed sends reserved by another run are indeterminate."""
        self._shutdown_started = False
        self._hurry = asyncio.Event()
        self._stopped = asyncio.Event()
        self._fatal: BaseException | None = None
        self._fatal_shutdown: asyncio.Task[None] | None = None
        self.exit_code = 0

    # --- lifecycle ---------------------------------------------------------------------------

    @classmethod
    async def start(cls, settings: Settings) -> Gateway:
        """Open everything, recover, and serve. On failure, what was opened is closed."""
        gateway = cls(settings)
        try:
            await gateway._start()
        except BaseException:
            await gateway._close_components()
            raise
        return gateway

    async def _start(self) -> None:
        install_grpc_log_filter()  # before any call can make grpc log a token
        settings = self.settings
        if settings.metrics_listen is not None:
            # Metrics come up first and go down last, so a scrape sees the whole life.
            self._metrics_server = MetricsServer(self.metrics, settings.metrics_listen)
            self._metrics_server.start()
        joining = settings.router is not None or settings.registry is not None
        # Joining needs the token of the process serving the Router and Registry; read it
        # before anything opens, so a missing file is the one error shown.
        peer_token = read_peer_token(settings.peer_token_file) if joining else None
        peer_tls = peer_channel_credentials(settings) if settings.joins_over_tls else None
        self._lock = DataDirLock.acquire(settings.data_dir)
        self._admin_token, self.admin_token_path = ensure_admin_token(settings)
        if settings.exposes_router or settings.exposes_registry:
            served_token, self.peer_token_path = ensure_peer_token(settings)
        else:
            served_token = None
        # The store holds agents' private seeds: create both files owner-only before SQLite
        # opens them (its -wal and -shm files copy the database file's mode).
        files = (STORE_FILE,) if settings.registry is not None else (STORE_FILE, REGISTRY_FILE)
        for name in files:
            os.close(os.open(settings.data_dir / name, os.O_CREAT | os.O_WRONLY, 0o600))
        self._store = await SqliteStore.open(
            settings.data_dir / STORE_FILE,
            writer_settings=CommitWriterSettings(
                commit_delay=settings.commit_delay, max_batch=settings.commit_max_batch
            ),
            observer=StoreMetrics(self.metrics),
            on_fatal=self._on_fatal,
        )
        if settings.registry is None:
            self._registry_port = await SqliteRegistry.open(settings.data_dir / REGISTRY_FILE)
        else:
            assert peer_token is not None
            self._registry_port = await GrpcRegistry.connect(
                settings.registry,
                peer_token=peer_token,
                tls=peer_tls,
                keepalive=KeepalivePolicy.from_settings(settings),
                registry_public_key=settings.registry_public_key,
            )
        self._registry = RegistryClient(
            self._registry_port,
            registry_public_key=self._registry_port.registry_public_key(),
            verify_cache=self._cache,
        )
        if settings.router is None:
            self._router = InProcessRouter(
                RegistryEnvelopeVerifier(self._registry, cache=self._cache),
                settings=RingSettings(
                    max_entries=settings.ring_max_entries, max_bytes=settings.ring_max_bytes
                ),
            )
        else:
            # A Router that is down at start is fine: the feed retries while DETACHED.
            assert peer_token is not None
            self._router = await GrpcRouter.connect(
                settings.router,
                peer_token=peer_token,
                tls=peer_tls,
                keepalive=KeepalivePolicy.from_settings(settings),
            )
        self._network = Network(
            router=self._router,
            store=self._store,
            local_instance_id=self._store.local_instance_id,
            observer=NetworkObserver(
                on_certified=self._certified,
                on_deliveries=self._deliveries_ready,
                on_attachment=self._attachment,
                on_event=self.metrics.count_router_event,
                on_fatal=self._on_fatal,
            ),
        )
        self._server = await build_server(
            self,
            settings,
            interceptors=[MetricsInterceptor(self.metrics)],
            services=self._exposed_services(served_token),
        )
        await self._server.start()
        self._state = GatewayState.RECOVERING
        for row in await self._store.identities():
            key = SigningKey(row.seed)
            identity = Identity(
                agent_id=row.agent_id,
                agent_name=row.agent_name,
                key=key,
                card=p.decode(row.signed_card, p.SignedAgentCard),
            )
            await self._host(identity, restore=True)
        # Existing data (engine.md §5.10): before local order and Router recovery start.
        await move_existing(
            store=self._store,
            local=self._network.local,
            certifiers={certifier.agent_id: certifier for certifier in self._network.certifiers()},
        )
        await self._network.start()
        for runtime in self._runtimes.values():
            await runtime.start()
        self._state = GatewayState.SERVING
        self._gauges = asyncio.ensure_future(self._gauge_loop())
        self._gauges.set_name("gauges")
        await self._server.set_serving()
        logger.info("serving listen=%s agents=%d", self._server.address, len(self._runtimes))

    def _exposed_services(self, peer_token: str | None) -> list[ServiceBinding]:
        """The embedded Router and Registry as services for other daemons (`expose_network`),
        always behind the peer token (`peer_token` is None only when nothing is exposed)."""
        settings = self.settings
        if peer_token is None:
            return []
        guard = PeerGuard(peer_token)
        services = []
        if settings.exposes_router:
            assert isinstance(self._router, InProcessRouter)
            self._router_service = RouterService(self._router, guard)
            services.append(self._router_service.binding())
        if settings.exposes_registry:
            assert isinstance(self._registry_port, SqliteRegistry)
            services.append(RegistryService(self._registry_port, guard).binding())
        logger.info(
            "exposing the embedded network router=%s registry=%s peer_token_file=%s",
            settings.exposes_router,
            settings.exposes_registry,
            self.peer_token_path,
        )
        return services

    @property
    def metrics_address(self) -> str | None:
        """The bound `/metrics` address, when metrics are on."""
        return None if self._metrics_server is None else self._metrics_server.address

    @property
    def health_address(self) -> str | None:
        """The bound plaintext health-only address, when `health_listen` is set."""
        return None if self._server is None else self._server.health_address

    @property
    def address(self) -> str:
        """The bound gRPC address (`HOST:PORT`)."""
        assert self._server is not None
        return self._server.address

    @property
    def registry_public_key(self) -> str:
        """The pinned Registry key every card is checked against."""
        assert self._registry_port is not None
        return self._registry_port.registry_public_key()

    @property
    def state(self) -> GatewayState:
        """The lifecycle state."""
        return self._state

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
            started = time.monotonic()
            try:
                result = action()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                logger.exception("shutdown step failed step=%s", name.value)
                self.exit_code = 1
            durations[name.value] = round(time.monotonic() - started, 3)

        # Health first, so probes and balancers stop routing here before anything ends.
        if self._server is not None:
            await step(ShutdownStep.NOT_SERVING, self._server.set_not_serving)
        if not skip_waits and self.settings.shutdown_delay > 0:
            await step(
                ShutdownStep.DELAY, lambda: self._wait_or_hurry(self.settings.shutdown_delay)
            )
        # New calls are refused by the state check; streams end now so none holds the grace,
        # and their clients reconnect elsewhere and replay.
        await step(ShutdownStep.REFUSE, self._end_streams)
        if self._server is not None:
            grace = 0.0 if skip_waits else self.settings.shutdown_grace
            await step(ShutdownStep.DRAIN, lambda: self._stop_server(grace))
        await step(ShutdownStep.BACKGROUND, self._stop_background)
        await step(ShutdownStep.FLUSH, self._close_store)
        # Metrics stop last, so the shutdown itself can be scraped.
        await step(ShutdownStep.METRICS, self._stop_metrics)
        self._state = GatewayState.STOPPED
        logger.info("stopped steps=%s", durations)
        self._stopped.set()

    def _end_streams(self) -> None:
        for runtime in self._runtimes.values():
            runtime.inbox.end_stream(StreamEndReason.SHUTDOWN)
        if self._router_service is not None:
            # Other daemons' held reads of the exposed Router would hold the grace too.
            self._router_service.end_reads()

    async def _wait_or_hurry(self, seconds: float) -> None:
        hurry = asyncio.ensure_future(self._hurry.wait())
        try:
            await asyncio.wait({hurry}, timeout=seconds)
        finally:
            hurry.cancel()

    async def _stop_server(self, grace: float) -> None:
        assert self._server is not None
        # Waiting sends answer one second before the grace ends: cancelling their latches
        # turns a bound send into delivery-pending (it is proposed again after restart).
        answer_at = max(0.0, grace - SHUTDOWN_ANSWER_MARGIN)
        stopper = asyncio.ensure_future(self._server.stop(grace))
        hurry = asyncio.ensure_future(self._hurry.wait())
        try:
            await asyncio.wait(
                {stopper, hurry}, timeout=answer_at, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            hurry.cancel()
        if not stopper.done() and self._network is not None:
            # A second signal answers waiting sends now; the grace itself runs on, since
            # grpc cannot shorten a drain it began (see `RpcServer.stop`).
            self._network.cancel_waiters()
        await stopper

    async def _stop_metrics(self) -> None:
        if self._metrics_server is not None:
            await asyncio.to_thread(self._metrics_server.stop)

    async def _stop_background(self) -> None:
        if self._gauges is not None:
            self._gauges.cancel()
            await asyncio.gather(self._gauges, return_exceptions=True)
            self._gauges = None
        for runtime in self._runtimes.values():
            await runtime.close()
        if self._network is not None:
            await self._network.close()
        if self._router is not None:
            await self._router.close()
        if self._registry is not None:
            await self._registry.close()
        if self._registry_port is not None:
            await self._registry_port.close()

    async def _close_store(self) -> None:
        if self._store is not None:
            await self._store.close()
        if self._lock is not None:
            self._lock.release()

    async def _close_components(self) -> None:
        """Close what a failed start opened."""
        if self._server is not None:
            await self._server.stop(None)
        await self._stop_background()
        await self._close_store()
        await self._stop_metrics()
        self._state = GatewayState.STOPPED
        self._stopped.set()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.shutdown(skip_waits=True)

    # --- hosting -------------------------------------------------------------------------------

    async def _host(self, identity: Identity, *, restore: bool) -> AgentRuntime:
        assert self._store is not None
        assert self._network is not None
        assert self._registry is not None
        assert self._registry_port is not None
        certifier = Certifier(
            identity,
            registry_public_key=self._registry_port.registry_public_key(),
            verify_cache=self._cache,
        )
        next_inbox = 1
        snapshot = await self._store.snapshot(identity.agent_id) if restore else None
        if snapshot is not None:
            local_rows, local_intents = certifier.restore(
                snapshot, local_instance_id=self._store.local_instance_id
            )
            self._network.local.restore(identity.agent_id, local_rows, local_intents)
            next_inbox = snapshot.max_inbox_seq + 1
        runtime = AgentRuntime(
            identity=identity,
            certifier=certifier,
            network=self._network,
            registry=self._registry,
            store=self._store,
            inbox=AgentInbox(
                agent_id=identity.agent_id,
                store=self._store,
                next_seq=next_inbox,
                window=self.settings.stream_window,
                observer=self._inbox_observer,
            ),
            timeouts=SendTimeouts(
                attach=self.settings.router_attach_timeout,
                certify=self.settings.send_certify_timeout,
            ),
            run_id=self._run_id,
            export=None
            if self.settings.history_export_dir is None
            else HistoryExport(self.settings.history_export_dir, identity.agent_name),
            observer=self._send_observer,
        )
        if snapshot is not None:
            runtime.collectives.restore(snapshot.open_operations, snapshot.received_requests)
        self._runtimes[identity.agent_id] = runtime
        self._by_name[identity.agent_name] = runtime
        self._network.host(certifier)
        return runtime

    @property
    def _inbox_observer(self) -> InboxObserver:
        metrics = self.metrics
        return InboxObserver(
            on_stream_open=metrics.count_stream_open,
            on_stream_end=metrics.count_stream_end,
            on_replayed=metrics.count_replayed,
            on_acknowledged=metrics.count_acknowledged,
            on_acknowledge_result=metrics.count_acknowledge_result,
        )

    @property
    def _send_observer(self) -> SendObserver:
        metrics = self.metrics
        return SendObserver(
            on_send=metrics.count_send,
            on_delivery_published=metrics.count_published,
            on_record_consumed=metrics.count_consumed,
            on_member_outcome=metrics.count_member_outcome,
            on_collective_result=metrics.count_collective_result,
            on_key_resolution=metrics.count_idempotency,
        )

    def _certified(self, certified: Certified) -> None:
        if certified.resumed:
            # Its clock spans the downtime: counted as resumed, not observed as latency.
            self.metrics.count_intents_resumed(certified.kind)
            return
        self.metrics.observe_certification(
            certified.op, certified.kind, max(0.0, time.time() - certified.bound_at)
        )

    def _attachment(self, state: RouterAttachment) -> None:
        hosted = len(self._runtimes)
        for each in RouterAttachment:
            self.metrics.set_router_attachments(each.value, hosted if each is state else 0)

    async def _gauge_loop(self) -> None:
        """Refresh the gauges that are read, not counted (house style: no unowned task)."""
        while True:
            try:
                await self._refresh_gauges()
            except Exception:
                logger.exception("gauge refresh failed")
            await asyncio.sleep(GAUGE_INTERVAL)

    async def _refresh_gauges(self) -> None:
        assert self._store is not None
        metrics = self.metrics
        summary = await self._store.unread_summary()
        now = time.time()
        counts = {"attached": 0, "detached": 0}
        oldest = {"attached": 0.0, "detached": 0.0}
        for agent_id, (count, created) in summary.items():
            runtime = self._runtimes.get(agent_id)
            listener = "attached" if runtime is not None and runtime.inbox.listening else "detached"
            counts[listener] += count
            oldest[listener] = max(oldest[listener], now - created)
        for listener in ("attached", "detached"):
            metrics.set_unacknowledged(listener, counts[listener])
            metrics.set_oldest_unacked_age(listener, oldest[listener])
        runtimes = list(self._runtimes.values())
        metrics.set_agents_hosted(len(runtimes))
        if self._network is not None:
            metrics.set_conversations_set_aside(
                self._network.local.set_aside_count
                + sum(len(runtime.certifier.set_aside) for runtime in runtimes)
            )
        metrics.set_streams_active(sum(1 for runtime in runtimes if runtime.inbox.listening))
        metrics.set_streams_window_full(sum(1 for runtime in runtimes if runtime.inbox.window_full))
        pending = {"direct": 0, "group": 0}
        open_ops = {"gather": 0, "all_gather": 0}
        for runtime in runtimes:
            for kind, count in runtime.certifier.open_intents_by_kind().items():
                pending[kind] += count
            if self._network is not None:
                local = self._network.local.open_intents_by_kind(runtime.agent_id)
                for kind, count in local.items():
                    pending[kind] += count
            for op, count in runtime.collectives.open_counts().items():
                open_ops[op] += count
        for kind, count in pending.items():
            metrics.set_post_intents_pending(kind, count)
        for op, count in open_ops.items():
            metrics.set_collectives_open(op, count)

    def auth_refused(self, failure: AuthFailure) -> None:
        """Count a refused token (never the token itself)."""
        self.metrics.count_auth_failure(failure.value)

    def _deliveries_ready(self, agent_ids: set[str]) -> None:
        for agent_id in agent_ids:
            runtime = self._runtimes.get(agent_id)
            if runtime is not None:
                runtime.deliveries_ready()

    # --- GatewayCore ---------------------------------------------------------------------------

    async def authenticate(self, token: str) -> AgentRuntime | AuthFailure:
        """The runtime an agent token names (tokens are looked up by their SHA-256)."""
        if not RandomId.API_TOKEN.is_valid(token):
            return AuthFailure.UNKNOWN if not self.is_admin(token) else AuthFailure.WRONG_ROLE
        digest = token_digest(token)
        known = self._tokens.get(digest)
        if known is None:
            assert self._store is not None
            known = await self._store.token(digest)
            if known is None:
                return AuthFailure.UNKNOWN
            self._tokens[digest] = known
        agent_id, revoked = known
        if revoked:
            return AuthFailure.REVOKED
        runtime = self._runtimes.get(agent_id)
        return runtime if runtime is not None else AuthFailure.UNKNOWN

    def is_admin(self, token: str) -> bool:
        """Constant-time comparison with the operator token."""
        return bool(self._admin_token) and hmac.compare_digest(
            token.encode("utf-8"), self._admin_token.encode("utf-8")
        )

    async def register_agent(self, name: str) -> RegisteredAgent:
        """Mint the agent's key, register its card, host it, and return its first token."""
        if not is_agent_name(name):
            raise ManagementError(
                "invalid-name", "an agent name is 3 to 32 characters of a-z, 0-9 and inner hyphens"
            )
        async with self._registering:
            if name in self._by_name:
                raise ManagementError("name-taken", f"agent:{name} is already registered")
            assert self._registry is not None
            assert self._store is not None
            key = SigningKey.generate()
            outcome = await self._registry.register(name, key.public_key_b64)
            match outcome:
                case Registered(card=card):
                    pass
                case NameTaken() | KeyAlreadyRegistered():
                    raise ManagementError("name-taken", f"agent:{name} is already registered")
            identity = Identity(agent_id=card.card.agent_id, agent_name=name, key=key, card=card)
            token = RandomId.API_TOKEN.mint()
            await self._store.apply(
                [
                    PutIdentity(
                        agent_id=identity.agent_id,
                        agent_name=name,
                        signed_card=p.encode(card),
                        seed=key.seed,
                        created_at=_utc_now(),
                    ),
                    PutToken(
                        token_digest=token_digest(token),
                        agent_id=identity.agent_id,
                        created_at=_utc_now(),
                    ),
                ]
            )
            runtime = await self._host(identity, restore=False)
            await runtime.start()
        audit.info("agent registered agent=%s", name)
        return RegisteredAgent(address=f"agent:{name}", agent_id=identity.agent_id, token=token)

    def runtime(self, name: str) -> AgentRuntime:
        """A hosted agent's runtime (for tests and tools); raises `ManagementError`."""
        return self._runtime(name)

    def _runtime(self, name: str) -> AgentRuntime:
        runtime = self._by_name.get(name)
        if runtime is None:
            raise ManagementError("not-found", f"agent:{name} is not hosted here")
        return runtime

    async def agent_status(self, name: str) -> AgentStatus:
        """What an operator sees about one agent."""
        runtime = self._runtime(name)
        assert self._store is not None
        snapshot_unread = await self._store.unread(runtime.identity.agent_id, 0, 1_000_000)
        oldest = await self._store.oldest_unread(runtime.identity.agent_id)
        card = runtime.identity.card.card
        return AgentStatus(
            address=runtime.address,
            agent_id=card.agent_id,
            public_key=card.public_key,
            issued_at=card.issued_at,
            hosted=True,
            listening=runtime.inbox.listening,
            backlog=len(snapshot_unread),
            oldest_unacked_age=0.0 if oldest is None else max(0.0, time.time() - oldest),
            set_aside=self._set_aside_of(runtime),
        )

    def _set_aside_of(self, runtime: AgentRuntime) -> tuple[SetAsideConversation, ...]:
        assert self._network is not None
        local = [
            SetAsideConversation(conversation_id=item.conversation_id, reason=item.reason)
            for item in self._network.local.set_aside_of(runtime.agent_id)
        ]
        router = [
            SetAsideConversation(conversation_id=conversation_id, reason=reason)
            for conversation_id, reason in runtime.certifier.set_aside.items()
        ]
        unique = {item.conversation_id: item for item in router + local}
        return tuple(unique[key] for key in sorted(unique))

    async def list_agents(
        self, *, prefix: str, after: str | None, limit: int
    ) -> tuple[list[AgentStatus], str | None]:
        """Hosted agents by name, a page at a time."""
        names = sorted(name for name in self._by_name if name.startswith(prefix))
        if after is not None:
            names = [name for name in names if name > after]
        page = names[:limit]
        statuses = [await self.agent_status(name) for name in page]
        return statuses, (page[-1] if len(names) > limit else None)

    async def conversations(self, name: str) -> list[ConversationSummary]:
        """Every conversation one hosted agent stores."""
        runtime = self._runtime(name)
        assert self._store is not None
        summaries = []
        for row in await self._store.conversations(runtime.identity.agent_id):
            descriptor = p.decode(row.descriptor, p.MembershipDescriptor)
            names = sorted(member.card.agent_name for member in descriptor.members)
            if len(names) == 2:
                other = next(n for n in names if n != name)
                address, kind = f"agent:{other}", "direct"
            else:
                address, kind = "group:" + ",".join(names), "group"
            summaries.append(
                ConversationSummary(
                    address=address,
                    kind=kind,
                    members=tuple(f"agent:{n}" for n in names),
                    head=row.head,
                    depth=row.depth,
                )
            )
        return summaries

    async def history(
        self, name: str, address: str, *, after_record_hash: str | None, limit: int
    ) -> list[HistoryRecord]:
        """Certified records of one of the agent's conversations, in chain order."""
        runtime = self._runtime(name)
        assert self._store is not None
        try:
            conversation = canonicalize(address, name)
        except SendError as error:
            raise ManagementError("invalid-address", error.message) from None
        agent_id = runtime.identity.agent_id
        target = None
        for stored in await self._store.conversations(agent_id):
            descriptor = p.decode(stored.descriptor, p.MembershipDescriptor)
            if tuple(sorted(m.card.agent_name for m in descriptor.members)) == conversation.members:
                target = stored.conversation_id
        if target is None:
            return []
        after_depth = 0
        if after_record_hash is not None:
            known = await self._store.record(agent_id, after_record_hash)
            if known is None or known.conversation_id != target:
                raise ManagementError("not-found", "no such record in this conversation")
            after_depth = known.depth
        records = []
        for row in await self._store.records(agent_id, target, after_depth, limit):
            record = p.decode(row.record, p.CertifiedRecord)
            core = record.action_certified_record.record_core
            author = core.membership.card_of(row.author)
            records.append(
                HistoryRecord(
                    record_hash=row.record_hash,
                    post_id=row.post_id,
                    author=f"agent:{author.agent_name}" if author is not None else row.author,
                    depth=row.depth,
                    content=core.action.post_intent.content,
                    certified_record=bytes(row.record),
                )
            )
        return records

    async def rotate_token(self, name: str) -> str:
        """Revoke the agent's tokens, end its stream, and mint a new token."""
        runtime = self._runtime(name)
        assert self._store is not None
        token = RandomId.API_TOKEN.mint()
        await self._store.apply(
            [
                RevokeTokens(agent_id=runtime.identity.agent_id),
                PutToken(
                    token_digest=token_digest(token),
                    agent_id=runtime.identity.agent_id,
                    created_at=_utc_now(),
                ),
            ]
        )
        self._forget_tokens(runtime.identity.agent_id)
        runtime.inbox.end_stream(StreamEndReason.REVOKED)
        audit.info("agent token rotated agent=%s", name)
        return token

    async def revoke_token(self, name: str) -> None:
        """Revoke the agent's tokens and end its stream."""
        runtime = self._runtime(name)
        assert self._store is not None
        await self._store.apply([RevokeTokens(agent_id=runtime.identity.agent_id)])
        self._forget_tokens(runtime.identity.agent_id)
        runtime.inbox.end_stream(StreamEndReason.REVOKED)
        audit.info("agent token revoked agent=%s", name)

    def _forget_tokens(self, agent_id: str) -> None:
        self._tokens = {digest: row for digest, row in self._tokens.items() if row[0] != agent_id}

    def status(self) -> GatewayStatus:
        """Version, mode, hosted agents and Router state."""
        return GatewayStatus(
            version=__version__,
            mode=self.settings.mode,
            hosted_agents=len(self._runtimes),
            router_state=self._network.state.value if self._network is not None else "detached",
        )

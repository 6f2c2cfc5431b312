"""The standalone process roles: `harness-gateway router` and `harness-gateway registry`.

Joined daemons (`serve --router grpc://HOST:7771 --registry grpc://HOST:7772`) share one
Router and one Registry, each its own process (operations.md §1):

- `StandaloneRouter` serves the in-process ring (`InProcessRouter`) as
  `harness.v1.RouterService`. It verifies every envelope's signature under its sender's
  card, so it joins a Registry itself (`--registry`). One process, no replication: a
  restart is a new instance, and the daemons recover (engine.md §5.9).
- `StandaloneRegistry` serves a `SqliteRegistry` under its data directory (exclusively
  locked) as `harness.v1.RegistryService`; the Registry's signing seed lives in that file.

Both follow the daemon's lifecycle: `await X.start(settings)` opens everything, binds,
and turns health SERVING (the readiness names are NOT_SERVING until then, `liveness` from
listen to exit); `await x.shutdown()` runs the written order below, is idempotent, and
`wait_stopped()` returns once it ran. Every peer call needs the peer token: the Registry
creates `<data-dir>/peer-token` on first start unless `--peer-token-file` names one, and
the Router, which joins the Registry with it, needs `--peer-token-file`.

Shutdown (SIGTERM or SIGINT; a second signal skips the waits):

1. Log `shutdown requested`; the state becomes STOPPING.
2. Health: every name except `liveness` goes NOT_SERVING, so probes stop routing here.
3. Wait `shutdown_delay` while still serving.
4. Router only: end held polls and subscriptions (UNAVAILABLE, `SHUTTING_DOWN`), so no
   read holds the grace; daemons keep their cursors and resume.
5. `server.stop(grace)`: in-flight sends and lookups finish.
6. Close the backend: the ring and the Router's Registry client; the Registry's database
   and the data-directory lock.
7. Stop the metrics server, log `stopped` with each step's duration.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Final, Self

from gateway import __version__
from gateway.engine import protocol as p
from gateway.identity.keys import VerifyCache
from gateway.observability.logs import install_grpc_log_filter
from gateway.observability.metrics import (
    HEALTH_SERVICE,
    REFLECTION_SERVICE,
    REGISTRY_SERVICE,
    ROUTER_SERVICE,
    Metrics,
)
from gateway.observability.metrics_server import MetricsServer
from gateway.registry import RegistryClient, SqliteRegistry

if TYPE_CHECKING:
    from gateway.registry.postgres import PostgresRegistry
from gateway.registry.verifier import RegistryEnvelopeVerifier
from gateway.router import InProcessRouter, RingSettings, VerifiedEnvelope
from gateway.rpc.keepalive import KeepalivePolicy
from gateway.rpc.peer import PeerGuard, ensure_peer_token, read_peer_token
from gateway.rpc.registry_client import GrpcRegistry
from gateway.rpc.registry_service import RegistryService
from gateway.rpc.router_service import RouterService
from gateway.rpc.server import RpcServer, build_peer_server
from gateway.rpc.tls import peer_channel_credentials
from gateway.settings import Settings
from gateway.store import DataDirLock

logger = logging.getLogger(__name__)

REGISTRY_FILE: Final = "registry.sqlite3"
"""The standalone Registry's database in its data directory (as the embedded one's)."""

DIRECTORY_MODE: Final = 0o700
"""Permissions of a data directory the Registry creates: its database holds a seed."""


class ProcessState(enum.StrEnum):
    """The lifecycle of a standalone process: each state refuses the calls that make no sense in it."""

    STARTING = "starting"
    """Opening its backend and binding; health NOT_SERVING."""
    SERVING = "serving"
    """Taking peer calls."""
    STOPPING = "stopping"
    """Running the shutdown steps."""
    STOPPED = "stopped"
    """Everything closed."""


class ShutdownStep(enum.StrEnum):
    """The shutdown steps, as logged with their durations."""

    NOT_SERVING = "health-not-serving"
    DELAY = "delay"
    END_READS = "end-reads"
    DRAIN = "server-stop"
    BACKEND = "close-backend"
    METRICS = "stop-metrics"


class _CardFirstVerifier:
    """The Router's `EnvelopeVerifier`, failing (not refusing) while the Registry is down.

    `RegistryEnvelopeVerifier` answers `message_invalid` when the sender's card cannot be
    fetched, and a daemon discards what the Router calls invalid. Looking the sender up
    first lets a Registry outage raise instead (`RegistryError`), which the service answers
    UNAVAILABLE and the daemon retries; the card is then cached for the real check."""

    def __init__(self, registry: RegistryClient, *, cache: VerifyCache) -> None:
        self._registry = registry
        self._verifier = RegistryEnvelopeVerifier(registry, cache=cache)

    async def verify(self, signed_envelope: bytes) -> VerifiedEnvelope | str:
        try:
            sender = p.decode_signed_envelope(signed_envelope).envelope.sender_agent_id
        except p.ProtocolError:
            sender = None
        if sender is not None:
            await self._registry.lookup_by_id(sender)  # RegistryError propagates
        return await self._verifier.verify(signed_envelope)


class _StandaloneProcess:
    """What both roles share: start, metrics, the peer server, health and the shutdown order."""

    GRPC_SERVICE: ClassVar[str]
    """The peer service the role serves (beside health and reflection)."""

    def __init__(self, settings: Settings) -> None:
        """Use `start`; nothing is opened here."""
        install_grpc_log_filter()  # before any call can make grpc log a token
        self.settings = settings
        self.metrics = Metrics(
            __version__,
            settings.mode,
            grpc_services=(self.GRPC_SERVICE, HEALTH_SERVICE, REFLECTION_SERVICE),
        )
        self._metrics_server: MetricsServer | None = None
        self._server: RpcServer | None = None
        self._state = ProcessState.STARTING
        self._shutdown_started = False
        self._stopped = asyncio.Event()
        self.peer_token_path: Path | None = None
        """The file of the peer token this process requires (and sends)."""
        self.exit_code = 0

    @classmethod
    async def start(cls, settings: Settings) -> Self:
        """Open the role's backend, bind and serve. On failure, what was opened is closed and
        the error raised: `OSError`, `PeerConfigError`; the Router's `RegistryError`; the
        Registry's `DataDirLocked` and `RegistryUnavailable`."""
        process = cls(settings)
        try:
            await process._start()
        except BaseException:
            await process._close_after_failed_start()
            raise
        return process

    @property
    def state(self) -> ProcessState:
        """The lifecycle state."""
        return self._state

    @property
    def address(self) -> str:
        """The bound gRPC address (`HOST:PORT`)."""
        assert self._server is not None, "the process has not bound its address"
        return self._server.address

    @property
    def metrics_address(self) -> str | None:
        """The bound `/metrics` address, when metrics are on."""
        return None if self._metrics_server is None else self._metrics_server.address

    @property
    def health_address(self) -> str | None:
        """The bound plaintext health-only address, when `health_listen` is set."""
        return None if self._server is None else self._server.health_address

    def _start_metrics(self) -> None:
        if self.settings.metrics_listen is not None:
            # Metrics come up first and go down last, so a scrape sees the whole life.
            self._metrics_server = MetricsServer(self.metrics, self.settings.metrics_listen)
            self._metrics_server.start()

    async def _serve(self, server: RpcServer) -> None:
        self._server = server
        await server.start()
        await server.set_serving()
        self._state = ProcessState.SERVING
        logger.info("serving role=%s listen=%s", self.settings.role, server.address)

    async def wait_stopped(self) -> None:
        """Return once `shutdown` has completed."""
        await self._stopped.wait()

    async def shutdown(self, *, skip_waits: bool = False) -> None:
        """The written order (module docstring); idempotent, safe before start ended."""
        if self._shutdown_started:
            await self._stopped.wait()
            return
        self._shutdown_started = True
        logger.info("shutdown requested")
        self._state = ProcessState.STOPPING
        durations: dict[str, float] = {}

        async def step(name: ShutdownStep, action: Callable[[], Awaitable[None]]) -> None:
            started = time.monotonic()
            try:
                await action()
            except Exception:
                logger.exception("shutdown step failed step=%s", name.value)
                self.exit_code = 1
            durations[name.value] = round(time.monotonic() - started, 3)

        server = self._server
        if server is not None:
            await step(ShutdownStep.NOT_SERVING, server.set_not_serving)
        if server is not None and not skip_waits and self.settings.shutdown_delay > 0:
            await step(ShutdownStep.DELAY, lambda: asyncio.sleep(self.settings.shutdown_delay))
        await step(ShutdownStep.END_READS, self._end_reads)
        if server is not None:
            grace = 0.0 if skip_waits else self.settings.shutdown_grace
            await step(ShutdownStep.DRAIN, lambda: server.stop(grace))
        await step(ShutdownStep.BACKEND, self._close_backend)
        await step(ShutdownStep.METRICS, self._stop_metrics)
        self._state = ProcessState.STOPPED
        logger.info("stopped steps=%s", durations)
        self._stopped.set()

    async def _close_after_failed_start(self) -> None:
        if self._server is not None:
            await self._server.stop(None)
        await self._close_backend()
        await self._stop_metrics()
        self._state = ProcessState.STOPPED
        self._stopped.set()

    async def _start(self) -> None:
        """Open the backend, then `_serve` its server; each role has its own."""
        raise NotImplementedError

    async def _end_reads(self) -> None:
        """Step 4; nothing to end by default."""

    async def _close_backend(self) -> None:
        """Step 6."""

    async def _stop_metrics(self) -> None:
        if self._metrics_server is not None:
            await asyncio.to_thread(self._metrics_server.stop)


class StandaloneRouter(_StandaloneProcess):
    """`harness-gateway router`: one volatile ring behind `RouterService`."""

    GRPC_SERVICE = ROUTER_SERVICE

    def __init__(self, settings: Settings) -> None:
        """Use `start`; nothing is opened here."""
        super().__init__(settings)
        self._registry_port: GrpcRegistry | None = None
        self._registry: RegistryClient | None = None
        self._ring: InProcessRouter | None = None
        self._service: RouterService | None = None

    @property
    def instance_id(self) -> str:
        """The ring's `RouterInstanceId` (new with every start)."""
        assert self._ring is not None
        return self._ring.status().instance_id

    async def _start(self) -> None:
        """Join the Registry, open the ring, bind and serve."""
        settings = self.settings
        assert settings.registry is not None, "load_settings requires a registry for a router"
        # One token both ways: the Router's callers present it, and it presents it to the
        # Registry.
        token = read_peer_token(settings.peer_token_file)
        self.peer_token_path = settings.peer_token_file
        guard = PeerGuard(token)
        self._start_metrics()
        cache = VerifyCache()
        self._registry_port = await GrpcRegistry.connect(
            settings.registry,
            peer_token=token,
            tls=peer_channel_credentials(settings) if settings.joins_over_tls else None,
            keepalive=KeepalivePolicy.from_settings(settings),
            registry_public_key=settings.registry_public_key,
        )
        self._registry = RegistryClient(
            self._registry_port,
            registry_public_key=self._registry_port.registry_public_key(),
            verify_cache=cache,
        )
        self._ring = InProcessRouter(
            _CardFirstVerifier(self._registry, cache=cache),
            settings=RingSettings(
                max_entries=settings.ring_max_entries, max_bytes=settings.ring_max_bytes
            ),
        )
        self._service = RouterService(self._ring, guard)
        server = await build_peer_server(settings, [self._service.binding()], metrics=self.metrics)
        await self._serve(server)

    async def _end_reads(self) -> None:
        if self._service is not None:
            self._service.end_reads()

    async def _close_backend(self) -> None:
        if self._ring is not None:
            await self._ring.close()
        if self._registry is not None:
            await self._registry.close()
        if self._registry_port is not None:
            await self._registry_port.close()


REGISTRY_KEY_FILE: Final = "registry-key"
"""The signing key a PostgreSQL-backed Registry creates in its data directory when no
`--registry-key-file` names one (SQLite keeps its key in the database)."""


class StandaloneRegistry(_StandaloneProcess):
    """`harness-gateway registry`: a `SqliteRegistry` (in the data directory) or a
    `PostgresRegistry` (with `--store postgresql://...`; replicas share the database and
    one key file) behind `RegistryService`."""

    GRPC_SERVICE = REGISTRY_SERVICE

    def __init__(self, settings: Settings) -> None:
        """Use `start`; nothing is opened here."""
        super().__init__(settings)
        self._lock: DataDirLock | None = None
        self._registry: SqliteRegistry | PostgresRegistry | None = None

    @property
    def registry_public_key(self) -> str:
        """`b64` of the key that signs every card (what daemons may pin)."""
        assert self._registry is not None
        return self._registry.registry_public_key()

    @property
    def data_dir(self) -> Path:
        """The locked data directory."""
        return self.settings.data_dir

    async def _start(self) -> None:
        """Lock the data directory, open the database, bind and serve."""
        settings = self.settings
        self._start_metrics()
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=DIRECTORY_MODE)
        self._lock = DataDirLock.acquire(settings.data_dir)
        token, self.peer_token_path = ensure_peer_token(settings)
        guard = PeerGuard(token)
        if settings.store is not None:
            self._registry = await self._open_postgres(settings.store)
        else:
            path = settings.data_dir / REGISTRY_FILE
            # Owner-only before SQLite opens it: the file holds the Registry's private seed.
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            self._registry = await SqliteRegistry.open(path)
        server = await build_peer_server(
            settings,
            [RegistryService(self._registry, guard).binding()],
            metrics=self.metrics,
        )
        await self._serve(server)

    async def _open_postgres(self, dsn: str) -> PostgresRegistry:
        # Imported here: psycopg is loaded only by a Registry that uses it.
        from gateway.registry.postgres import (
            PostgresRegistry,
            ensure_signing_seed,
            read_signing_seed,
        )

        key_file = self.settings.registry_key_file
        if key_file is not None:
            # Named by the operator and shared by every replica: it must exist already.
            seed = read_signing_seed(key_file)
        else:
            # A single replica's convenience; `ensure_signing_seed` logs its creation.
            seed, _ = ensure_signing_seed(self.settings.data_dir / REGISTRY_KEY_FILE)
        return await PostgresRegistry.open(dsn, signing_seed=seed)

    async def _close_backend(self) -> None:
        try:
            if self._registry is not None:
                await self._registry.close()
        finally:
            if self._lock is not None:
                self._lock.release()
                self._lock = None

"""The gateway's gRPC server: both services, health, reflection, keepalive and limits.

`server = await build_server(core, settings)` binds the listen address (port 0 takes a free
port, `server.address` says which), and `await server.start()` starts serving. Health
follows operations.md §3: `""` and the two `harness.v1` services are NOT_SERVING until the
core calls `set_serving()`, and NOT_SERVING for good once `set_not_serving()` is called
after serving began or `stop()` is called; `liveness` is SERVING from listen to exit.

Peer services (`RouterService`, `RegistryService`) come as `ServiceBinding`s: a daemon
exposing its embedded Router and Registry passes them to `build_server` next to its own,
and the standalone `router` and `registry` processes serve them alone through
`build_peer_server`. Each binding's name joins the readiness names and reflection.

With `tls_cert_file` the listener speaks TLS only (`gateway.rpc.tls` checks the files first).
The kubelet's gRPC probe speaks plaintext, so `health_listen` opens a second, plaintext
listener that serves `grpc.health.v1.Health` alone, from the same servicer: both ports always
report the same statuses (operations.md §4).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection
from harness_contract._gen.harness.v1 import endpoint_pb2, endpoint_pb2_grpc, management_pb2_grpc

from gateway.endpoint.api import GatewayCore
from gateway.observability.metrics import Metrics
from gateway.rpc import tls
from gateway.rpc.calls import MeteredInterceptors, RpcCalls, calls_server
from gateway.rpc.endpoint_service import HarnessEndpointService
from gateway.rpc.health import GatewayHealthServicer
from gateway.rpc.keepalive import KeepalivePolicy
from gateway.rpc.management_service import ManagementService
from gateway.rpc.peer import PEER_MAX_MESSAGE_BYTES
from gateway.settings import Settings

logger = logging.getLogger(__name__)

ENDPOINT_SERVICE: Final = endpoint_pb2.DESCRIPTOR.services_by_name[
    "HarnessEndpointService"
].full_name
"""`harness.v1.HarnessEndpointService`."""
MANAGEMENT_SERVICE: Final = "harness.v1.ManagementService"
"""`harness.v1.ManagementService`."""
HEALTH_SERVICE: Final = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
"""`grpc.health.v1.Health`."""
LIVENESS: Final = "liveness"
"""The health name that is SERVING from listen to exit, for liveness probes."""
READINESS_NAMES: Final = ("", ENDPOINT_SERVICE, MANAGEMENT_SERVICE)
"""Health names that say whether calls can be taken (operations.md §3)."""

ServerInterceptor = grpc.aio.ServerInterceptor
"""An interceptor the composition root puts in front of every call (a cluster's forwarder);
the `grpc_server_*` metrics are not one: `build_server(metrics=...)` counts in each
method's one call wrapper (`gateway/rpc/calls.py`)."""

MAX_SEND_MESSAGE_BYTES: Final = 4 * 1024 * 1024
"""Largest message the server sends (operations.md §3): a history page stays well below."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceBinding:
    """One more service for a server: its full name (health and reflection) and how to add
    its servicer. Built by `gateway.rpc.router_service` and `gateway.rpc.registry_service`,
    so callers outside `gateway/rpc/` never touch grpc."""

    name: str
    """The full service name, e.g. `harness.v1.RouterService`."""
    add: Callable[[grpc.aio.Server], None]
    """Adds the servicer to a server before it starts."""


class RpcServerState(enum.StrEnum):
    """An RpcServer's lifecycle: each state refuses the calls that make no sense in it."""

    BOUND = "bound"
    """Built and listening address bound; not started."""
    STARTED = "started"
    """Taking connections."""
    STOPPED = "stopped"
    """Stopped; it cannot start again."""


def server_options(
    settings: Settings, *, max_send_bytes: int = MAX_SEND_MESSAGE_BYTES
) -> list[tuple[str, int]]:
    """The channel arguments of operations.md §3's keepalive and limits table.

    Keepalive comes from `gateway.rpc.keepalive` (one policy for both ends): the server
    pings every `keepalive_time` and waits `keepalive_timeout` for the acknowledgement; it
    accepts client pings `keepalive_min_client_interval` apart or more, with or without a
    call open, and tolerates two faster ones between two of its writes before GOAWAY
    `too_many_pings`. Raises `ValueError` when `keepalive_time` is under twice
    `keepalive_min_client_interval`, since this process's peer clients ping that often.

    `max_send_bytes` is raised to `PEER_MAX_MESSAGE_BYTES` where a Router is served: one
    batch may pass 4 MiB once its recipient tags are counted."""

    def ms(seconds: float) -> int:
        return round(seconds * 1000)

    return [
        *KeepalivePolicy.from_settings(settings).server_options(),
        ("grpc.max_connection_idle_ms", ms(settings.max_connection_idle)),
        ("grpc.max_connection_age_ms", ms(settings.max_connection_age)),
        ("grpc.max_connection_age_grace_ms", ms(settings.max_connection_age_grace)),
        ("grpc.max_receive_message_length", settings.max_receive_bytes),
        ("grpc.max_send_message_length", max_send_bytes),
        # A fixed port that another process holds must fail the bind, not share it.
        ("grpc.so_reuseport", 0),
    ]


class RpcServer:
    """A bound gRPC server: start, flip health, stop.

    It owns the health-only listener too, when there is one: started after the server and
    stopped after it, so probes keep seeing NOT_SERVING through the whole drain."""

    def __init__(
        self,
        server: grpc.aio.Server,
        health: HealthServicer,
        address: str,
        readiness_names: Sequence[str] = READINESS_NAMES,
        *,
        health_server: grpc.aio.Server | None = None,
        health_address: str | None = None,
    ) -> None:
        self._server = server
        self._health = health
        self._address = address
        self._health_server = health_server
        self._health_address = health_address
        self._readiness_names = tuple(readiness_names)
        self._state = RpcServerState.BOUND
        self._served = False
        self._readiness_ended = False

    @property
    def address(self) -> str:
        """The bound `HOST:PORT` (the real port when the listen address asked for 0)."""
        return self._address

    @property
    def health_address(self) -> str | None:
        """The bound `HOST:PORT` of the plaintext health-only listener (the real port when
        `health_listen` asked for 0); None when there is none."""
        return self._health_address

    @property
    def state(self) -> RpcServerState:
        """The lifecycle state."""
        return self._state

    @property
    def health(self) -> HealthServicer:
        """The `grpc.health.v1` servicer, for a health-only listener."""
        return self._health

    async def start(self) -> None:
        """Start taking connections; readiness stays NOT_SERVING until `set_serving()`."""
        if self._state is not RpcServerState.BOUND:
            raise RuntimeError(f"the rpc server cannot start: it is {self._state.value}")
        await self._server.start()
        self._state = RpcServerState.STARTED
        logger.info("rpc server listening address=%s", self._address)
        if self._health_server is not None:
            try:
                await self._health_server.start()
            except BaseException:
                await self.stop(None)
                raise
            logger.info("health listener listening address=%s", self._health_address)

    async def set_serving(self) -> None:
        """Readiness SERVING: calls can be taken. Ignored once serving ended."""
        if self._state is RpcServerState.STOPPED or self._readiness_ended:
            return
        self._served = True
        for name in self._readiness_names:
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def set_not_serving(self) -> None:
        """Readiness NOT_SERVING; after serving began this is for good (shutdown step 2)."""
        self._readiness_ended = self._served
        for name in self._readiness_names:
            await self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)

    async def stop(self, grace: float | None) -> None:
        """Stop: readiness NOT_SERVING, then `grpc.aio.Server.stop(grace)`. Idempotent and
        safe before start; in-flight calls get `grace` seconds (None: cancelled at once).

        A second call returns at once and cannot shorten a running drain: a second
        `grpc.aio.Server.stop` racing the first can touch the core server after the first
        destroyed it (a segfault, reproduced under grpcio 1.85)."""
        if self._state is RpcServerState.STOPPED:
            return
        await self.set_not_serving()
        self._state = RpcServerState.STOPPED
        try:
            await self._server.stop(grace)
            logger.info("rpc server stopped address=%s", self._address)
        finally:
            # Only now: probes must keep reading NOT_SERVING while calls drain above. A
            # health call holds nothing worth a grace, so it ends at once.
            if self._health_server is not None:
                await self._health_server.stop(None)
                logger.info("health listener stopped address=%s", self._health_address)

    async def wait_for_termination(self) -> None:
        """Wait until the server has stopped."""
        await self._server.wait_for_termination()


def _interceptors(
    calls: RpcCalls, interceptors: Sequence[grpc.aio.ServerInterceptor]
) -> list[grpc.aio.ServerInterceptor]:
    """What grpc.aio runs before each call: nothing without interceptors (the handler found
    is the call's one wrapper), else them inside `MeteredInterceptors`, so a handler of
    theirs is counted once too."""
    if not interceptors:
        return []
    return [MeteredInterceptors(calls, interceptors)]


def _bound_address(listen: str, port: int) -> str:
    host, _, _ = listen.rpartition(":")
    if host in ("", "0.0.0.0", "[::]"):  # noqa: S104 - naming the wildcard, not binding it
        host = "127.0.0.1" if host != "[::]" else "[::1]"
    return f"{host}:{port}"


async def build_server(
    core: GatewayCore,
    settings: Settings,
    *,
    metrics: Metrics | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    services: Sequence[ServiceBinding] = (),
) -> RpcServer:
    """Build the server over `core` and bind `settings.listen`; call `start()` to serve.

    Every call is counted in `metrics`' `grpc_server_*` family (nothing is counted when it
    is None) by the one wrapper of its method handler, which also refuses undecodable
    requests and translates failures (`gateway/rpc/calls.py`). `interceptors` run around
    every call in order (a cluster's forwarder), each call still counted once; `services`
    are served beside the agent and operator APIs (a daemon's exposed Router and Registry).
    Raises `OSError` when the address cannot be bound."""

    def add_endpoint(server: grpc.aio.Server) -> None:
        endpoint_pb2_grpc.add_HarnessEndpointServiceServicer_to_server(
            HarnessEndpointService(core), server
        )

    def add_management(server: grpc.aio.Server) -> None:
        management_pb2_grpc.add_ManagementServiceServicer_to_server(ManagementService(core), server)

    return await _build(
        settings,
        metrics=metrics,
        interceptors=interceptors,
        services=(
            ServiceBinding(name=ENDPOINT_SERVICE, add=add_endpoint),
            ServiceBinding(name=MANAGEMENT_SERVICE, add=add_management),
            *services,
        ),
        max_send_bytes=PEER_MAX_MESSAGE_BYTES if services else MAX_SEND_MESSAGE_BYTES,
    )


async def build_peer_server(
    settings: Settings,
    services: Sequence[ServiceBinding],
    *,
    metrics: Metrics | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> RpcServer:
    """Build a server of peer services alone (the standalone `router` and `registry`), with
    metrics, health and reflection as `build_server`'s, and bind `settings.listen`."""
    return await _build(
        settings,
        metrics=metrics,
        interceptors=interceptors,
        services=services,
        max_send_bytes=PEER_MAX_MESSAGE_BYTES,
    )


async def _build(
    settings: Settings,
    *,
    metrics: Metrics | None,
    interceptors: Sequence[grpc.aio.ServerInterceptor],
    services: Sequence[ServiceBinding],
    max_send_bytes: int,
) -> RpcServer:
    calls = RpcCalls(metrics)
    server = grpc.aio.server(
        interceptors=_interceptors(calls, interceptors),
        options=server_options(settings, max_send_bytes=max_send_bytes),
        maximum_concurrent_rpcs=settings.max_concurrent_rpcs,
    )
    # Every servicer is added through the calls view: each method handler gets its one
    # wrapper (a body that does not decode is INVALID_ARGUMENT `MALFORMED_REQUEST`, never
    # cygrpc's ERROR traceback and UNKNOWN; metrics; failures as statuses).
    guarded = calls_server(server, calls)
    for service in services:
        service.add(guarded)
    names = tuple(service.name for service in services)
    readiness = ("", *names)
    health = GatewayHealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, guarded)
    for name in readiness:
        await health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    await health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
    if settings.reflection_enabled:
        reflection.enable_server_reflection(
            (*names, HEALTH_SERVICE, reflection.SERVICE_NAME),
            guarded,
        )
    # Last: a method nobody above serves is UNIMPLEMENTED, counted.
    server.add_generic_rpc_handlers([calls.unimplemented_handler()])
    try:
        # Checked before binding: grpc reports a mismatched key as "Failed to bind".
        credentials = tls.server_credentials(settings)
    except tls.TlsConfigError:
        await server.stop(None)
        raise
    try:
        if credentials is None:
            port = server.add_insecure_port(settings.listen)
        else:
            # TLS only on this port: a secure port refuses plaintext handshakes.
            port = server.add_secure_port(settings.listen, credentials)
    except RuntimeError as error:
        await server.stop(None)
        raise OSError(f"cannot listen on {settings.listen}: {error}") from error
    if port == 0:
        await server.stop(None)
        raise OSError(f"cannot listen on {settings.listen}")
    address = _bound_address(settings.listen, port)
    if settings.health_listen is None:
        return RpcServer(server, health, address, readiness)
    try:
        health_server, health_address = await _bind_health(
            settings.health_listen, health, metrics=metrics
        )
    except OSError:
        await server.stop(None)
        raise
    return RpcServer(
        server,
        health,
        address,
        readiness,
        health_server=health_server,
        health_address=health_address,
    )


async def _bind_health(
    listen: str,
    health: HealthServicer,
    *,
    metrics: Metrics | None,
) -> tuple[grpc.aio.Server, str]:
    """The plaintext health-only listener on `listen` and its bound address; `OSError` when
    it cannot be bound. It shares `health` with the main server, so both ports answer alike;
    no reflection and no other service, since it has no TLS. Its calls are counted in
    `metrics` as they would be on the main port (a forwarder has nothing to do here)."""
    server = grpc.aio.server(
        # A fixed port that another process holds must fail the bind, not share it.
        options=[("grpc.so_reuseport", 0)],
    )
    calls = RpcCalls(metrics)
    health_pb2_grpc.add_HealthServicer_to_server(health, calls_server(server, calls))
    server.add_generic_rpc_handlers([calls.unimplemented_handler()])
    try:
        port = server.add_insecure_port(listen)
    except RuntimeError as error:
        await server.stop(None)
        raise OSError(f"cannot listen on {listen} for health: {error}") from error
    if port == 0:
        await server.stop(None)
        raise OSError(f"cannot listen on {listen} for health: the address cannot be bound")
    return server, _bound_address(listen, port)

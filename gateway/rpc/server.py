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

from gateway._gen.harness.v1 import endpoint_pb2, endpoint_pb2_grpc, management_pb2_grpc
from gateway.endpoint.api import GatewayCore
from gateway.rpc.endpoint_service import HarnessEndpointService
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

MAX_SEND_MESSAGE_BYTES: Final = 4 * 1024 * 1024
"""Largest message the server sends (operations.md §3): a history page stays well below."""
MAX_PING_STRIKES: Final = 2
"""Pings faster than the accepted interval tolerated before GOAWAY `too_many_pings`."""


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
    """An RpcServer's lifecycle (house style 9)."""

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

    `max_send_bytes` is raised to `PEER_MAX_MESSAGE_BYTES` where a Router is served: one
    batch may pass 4 MiB once its recipient tags are counted."""

    def ms(seconds: float) -> int:
        return round(seconds * 1000)

    return [
        ("grpc.keepalive_time_ms", ms(settings.keepalive_time)),
        ("grpc.keepalive_timeout_ms", ms(settings.keepalive_timeout)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        (
            "grpc.http2.min_recv_ping_interval_without_data_ms",
            ms(settings.keepalive_min_client_interval),
        ),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
        ("grpc.max_connection_idle_ms", ms(settings.max_connection_idle)),
        ("grpc.max_connection_age_ms", ms(settings.max_connection_age)),
        ("grpc.max_connection_age_grace_ms", ms(settings.max_connection_age_grace)),
        ("grpc.max_receive_message_length", settings.max_receive_bytes),
        ("grpc.max_send_message_length", max_send_bytes),
        # A fixed port that another process holds must fail the bind, not share it.
        ("grpc.so_reuseport", 0),
    ]


class RpcServer:
    """A bound gRPC server: start, flip health, stop."""

    def __init__(
        self,
        server: grpc.aio.Server,
        health: HealthServicer,
        address: str,
        readiness_names: Sequence[str] = READINESS_NAMES,
    ) -> None:
        self._server = server
        self._health = health
        self._address = address
        self._readiness_names = tuple(readiness_names)
        self._state = RpcServerState.BOUND
        self._served = False
        self._readiness_ended = False

    @property
    def address(self) -> str:
        """The bound `HOST:PORT` (the real port when the listen address asked for 0)."""
        return self._address

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
        safe before start; in-flight calls get `grace` seconds (None: cancelled at once)."""
        if self._state is RpcServerState.STOPPED:
            return
        await self.set_not_serving()
        self._state = RpcServerState.STOPPED
        await self._server.stop(grace)
        logger.info("rpc server stopped address=%s", self._address)

    async def wait_for_termination(self) -> None:
        """Wait until the server has stopped."""
        await self._server.wait_for_termination()


def _bound_address(listen: str, port: int) -> str:
    host, _, _ = listen.rpartition(":")
    if host in ("", "0.0.0.0", "[::]"):  # noqa: S104 - naming the wildcard, not binding it
        host = "127.0.0.1" if host != "[::]" else "[::1]"
    return f"{host}:{port}"


def _credentials(settings: Settings) -> grpc.ServerCredentials | None:
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    key_pair = (settings.tls_key_file.read_bytes(), settings.tls_cert_file.read_bytes())
    if settings.tls_client_ca_file is None:
        return grpc.ssl_server_credentials([key_pair])
    return grpc.ssl_server_credentials(
        [key_pair],
        root_certificates=settings.tls_client_ca_file.read_bytes(),
        require_client_auth=True,
    )


async def build_server(
    core: GatewayCore,
    settings: Settings,
    *,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    services: Sequence[ServiceBinding] = (),
) -> RpcServer:
    """Build the server over `core` and bind `settings.listen`; call `start()` to serve.

    `interceptors` run around every call in order (the `grpc_server_*` metrics interceptor
    goes here); `services` are served beside the agent and operator APIs (a daemon's
    exposed Router and Registry). Raises `OSError` when the address cannot be bound."""

    def add_endpoint(server: grpc.aio.Server) -> None:
        endpoint_pb2_grpc.add_HarnessEndpointServiceServicer_to_server(
            HarnessEndpointService(core), server
        )

    def add_management(server: grpc.aio.Server) -> None:
        management_pb2_grpc.add_ManagementServiceServicer_to_server(ManagementService(core), server)

    return await _build(
        settings,
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
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> RpcServer:
    """Build a server of peer services alone (the standalone `router` and `registry`), with
    health and reflection as `build_server`'s, and bind `settings.listen`."""
    return await _build(
        settings,
        interceptors=interceptors,
        services=services,
        max_send_bytes=PEER_MAX_MESSAGE_BYTES,
    )


async def _build(
    settings: Settings,
    *,
    interceptors: Sequence[grpc.aio.ServerInterceptor],
    services: Sequence[ServiceBinding],
    max_send_bytes: int,
) -> RpcServer:
    server = grpc.aio.server(
        interceptors=list(interceptors),
        options=server_options(settings, max_send_bytes=max_send_bytes),
        maximum_concurrent_rpcs=settings.max_concurrent_rpcs,
    )
    for service in services:
        service.add(server)
    names = tuple(service.name for service in services)
    readiness = ("", *names)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    for name in readiness:
        await health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    await health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
    if settings.reflection_enabled:
        reflection.enable_server_reflection(
            (*names, HEALTH_SERVICE, reflection.SERVICE_NAME),
            server,
        )
    credentials = _credentials(settings)
    try:
        if credentials is None:
            port = server.add_insecure_port(settings.listen)
        else:
            port = server.add_secure_port(settings.listen, credentials)
    except RuntimeError as error:
        await server.stop(None)
        raise OSError(f"cannot listen on {settings.listen}: {error}") from error
    if port == 0:
        await server.stop(None)
        raise OSError(f"cannot listen on {settings.listen}")
    return RpcServer(server, health, _bound_address(settings.listen, port), readiness)

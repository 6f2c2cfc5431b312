"""Channels: keepalive and retry options, targets, the bearer token, readiness and health."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness_contract.errors import ConnectError, ConnectErrorReason

from harness_client._retry import SERVICE_CONFIG_JSON

KEEPALIVE_TIME: Final = 30.0
"""Seconds between client keepalive pings, even on an idle `Messages` stream.

The server accepts pings 10 s apart or more and sends GOAWAY `too_many_pings` on the third
faster one; pinging at three times that leaves room for late timers. The gateway's
`gateway.rpc.keepalive` policy holds the same numbers (a test pins that they agree)."""
KEEPALIVE_TIMEOUT: Final = 10.0
"""Seconds to wait for a ping acknowledgement before the connection is considered dead, so
a half-open stream is found within about 40 s."""
MAX_RECEIVE_BYTES: Final = 4 * 1024 * 1024
"""Largest message the client accepts: the server sends at most 4 MiB."""
DEFAULT_CONNECT_TIMEOUT: Final = 10.0
"""Seconds `connect` waits for the channel, health and the token check together."""
ENDPOINT_SERVICE: Final = "harness.v1.HarnessEndpointService"
"""The health name (and service) of the agent API."""
MANAGEMENT_SERVICE: Final = "harness.v1.ManagementService"
"""The health name (and service) of the operator API."""

_SCHEMES: Final = ("grpc://", "http://", "dns:///")
_SECURE_SCHEMES: Final = ("grpcs://", "https://")


def channel_options(extra: Sequence[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    """Keepalive (30 s / 10 s) paired with the server's, and the retry service config.

    An `extra` entry replaces the default of the same name (`("grpc.keepalive_time_ms",
    1000)` pings every second); other entries are added. gRPC itself keeps the first of two
    entries with one name, so appending alone would never override a default."""
    options: dict[str, Any] = {
        "grpc.keepalive_time_ms": round(KEEPALIVE_TIME * 1000),
        "grpc.keepalive_timeout_ms": round(KEEPALIVE_TIMEOUT * 1000),
        # Pings with no call open keep an idle channel's connection checked too.
        "grpc.keepalive_permit_without_calls": 1,
        # Otherwise a channel stops pinging after two pings until data flows.
        "grpc.http2.max_pings_without_data": 0,
        "grpc.max_receive_message_length": MAX_RECEIVE_BYTES,
        "grpc.enable_retries": 1,
        "grpc.service_config": SERVICE_CONFIG_JSON,
    }
    options.update(extra)
    return list(options.items())


def parse_target(url: str) -> tuple[str, bool]:
    """`HOST:PORT`, `grpc://HOST:PORT` or `grpcs://HOST:PORT` as (target, tls)."""
    for scheme in _SECURE_SCHEMES:
        if url.startswith(scheme):
            return url.removeprefix(scheme).rstrip("/"), True
    for scheme in _SCHEMES:
        if url.startswith(scheme):
            return url.removeprefix(scheme).rstrip("/"), False
    return url, False


def open_channel(
    url: str,
    *,
    credentials: grpc.ChannelCredentials | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.aio.Channel:
    """A channel to `url` (no I/O yet); `grpcs://` uses the system's roots."""
    target, tls = parse_target(url)
    if credentials is None and tls:
        credentials = grpc.ssl_channel_credentials()
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=channel_options(options))
    return grpc.aio.secure_channel(target, credentials, options=channel_options(options))


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying `token`; never logged."""
    return (("authorization", f"Bearer {token}"),)


async def wait_ready(channel: grpc.aio.Channel, seconds: float) -> None:
    """Wait for the channel to connect; `ConnectError` `transport-failed` past `seconds`."""
    try:
        await asyncio.wait_for(channel.channel_ready(), seconds)
    except TimeoutError:
        raise ConnectError(ConnectErrorReason.TRANSPORT_FAILED) from None


async def wait_serving(channel: grpc.aio.Channel, service: str, seconds: float) -> None:
    """Wait until `grpc.health.v1` says `service` is SERVING.

    A daemon without the service (or without health) is `incompatible-daemon`; one that
    stays NOT_SERVING past `seconds` is `transport-failed`."""
    stub = health_pb2_grpc.HealthStub(channel)
    call = stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=seconds)
    try:
        async for response in call:
            if response.status == health_pb2.HealthCheckResponse.SERVING:
                return
            if response.status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN:
                raise ConnectError(ConnectErrorReason.INCOMPATIBLE_DAEMON)
    except grpc.aio.AioRpcError as error:
        if error.code() in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND):
            raise ConnectError(ConnectErrorReason.INCOMPATIBLE_DAEMON) from error
        raise ConnectError(ConnectErrorReason.TRANSPORT_FAILED) from error
    finally:
        call.cancel()
    raise ConnectError(ConnectErrorReason.TRANSPORT_FAILED)

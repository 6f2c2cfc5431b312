"""Channels: keepalive and retry options, targets, the bearer token, readiness and health,
and the route to the agent's home replica (`HomeRoute`).

A channel that cannot connect fails `ConnectError` `transport-failed` naming the address and
the cause (`cannot reach 127.0.0.1:7770: connection refused`), read from gRPC's text of the
failure (`reach_cause`); the CLI and the TypeScript client word the same causes the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness_contract._gen.harness.v1 import endpoint_pb2_grpc
from harness_contract.errors import (
    ConnectError,
    ConnectErrorReason,
    HarnessError,
    UnavailableError,
    incompatible_detail,
    not_ready_detail,
    unreachable_detail,
)

from harness_client._errors import TransportError
from harness_client._retry import SERVICE_CONFIG_JSON

logger = logging.getLogger(__name__)

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
CHANNEL_RECONNECT_INITIAL: Final = 0.1
"""Seconds gRPC waits before its first attempt to connect again after a connection is lost."""
CHANNEL_RECONNECT_MAX: Final = 1.0
"""Most seconds between gRPC's attempts to connect again (its default grows to 120 s): with
the library's own backoff capped at 1 s too (`_retry.py`), a stream or send is back within
about a second of the gateway listening again, however long it was away."""
DEFAULT_CONNECT_TIMEOUT: Final = 10.0
"""Seconds `connect` waits for the channel, health and the token check together."""
ENDPOINT_SERVICE: Final = "harness.v1.HarnessEndpointService"
"""The health name (and service) of the agent API."""
MANAGEMENT_SERVICE: Final = "harness.v1.ManagementService"
"""The health name (and service) of the operator API."""

HOME_METADATA_KEY: Final = "harness-home"
"""The response initial metadata by which a cluster replica that forwarded a call names the
agent's home replica (`host:port`, its `--advertise-address`; cluster.md §4)."""
HOME_CHANNEL_GRACE: Final = 60.0
"""Seconds calls already on a home channel the endpoint stopped using (the agent moved, or a
newer answer named another home) may go on before it closes: a send's default deadline, so
one in flight is answered rather than cut (a cut keyless send would be `outcome-unknown`)."""
HOME_CONNECT_TIMEOUT: Final = 2.0
"""Seconds a hinted home has to connect before the endpoint stays on the configured target
(the forwarder's own connect timeout): the dial runs beside the calls, never in one."""
HOME_AVOID: Final = 60.0
"""Seconds a home that did not connect, or was lost, is not dialled again though answers
keep naming it: a client outside Kubernetes, which cannot reach pod IPs, then pays one dial
a minute, and a home that went away is not chased while the cluster moves its agents."""
HOME_AVOID_MAX: Final = 16
"""Homes remembered as not to dial, the oldest forgotten first (a cluster has a few)."""
HOME_LOST_CODES: Final = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
"""Transport codes of a call to the home after which the endpoint goes back to the configured
target: the home stopped, moved away or cannot be reached in time."""
_TARGET_ONLY_OPTIONS: Final = frozenset({"grpc.ssl_target_name_override", "grpc.default_authority"})
"""Channel arguments that name the configured target; a home is dialled under its own name
(the advertised address is in the replica's certificate)."""

DIAGNOSE_TIMEOUT: Final = 1.0
"""Seconds for the one health call that reads why a connection failed (gRPC reports the
cause only on a call; it fails at once on a channel in TRANSIENT_FAILURE)."""

_SCHEMES: Final = ("grpc://", "http://", "dns:///")
_SECURE_SCHEMES: Final = ("grpcs://", "https://")


def channel_options(extra: Sequence[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    """Keepalive (30 s / 10 s) paired with the server's, reconnection at most 1 s apart, and
    the retry service config.

    An `extra` entry replaces the default of the same name (`("grpc.keepalive_time_ms",
    1000)` pings every second); other entries are added. gRPC itself keeps the first of two
    entries with one name, so appending alone would never override a default."""
    options: dict[str, Any] = {
        "grpc.keepalive_time_ms": round(KEEPALIVE_TIME * 1000),
        "grpc.keepalive_timeout_ms": round(KEEPALIVE_TIMEOUT * 1000),
        # C-core gives an unanswered keepalive ping this long (60 s unless set), whatever
        # the keepalive timeout says.
        "grpc.http2.ping_timeout_ms": round(KEEPALIVE_TIMEOUT * 1000),
        # Pings with no call open keep an idle channel's connection checked too.
        "grpc.keepalive_permit_without_calls": 1,
        # Otherwise a channel stops pinging after two pings until data flows.
        "grpc.http2.max_pings_without_data": 0,
        "grpc.max_receive_message_length": MAX_RECEIVE_BYTES,
        "grpc.initial_reconnect_backoff_ms": round(CHANNEL_RECONNECT_INITIAL * 1000),
        "grpc.max_reconnect_backoff_ms": round(CHANNEL_RECONNECT_MAX * 1000),
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


def home_hint(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The home replica a response's initial metadata names (`harness-home: host:port`), or
    None when it names none or something that is not `host:port`."""
    for key, value in metadata or ():
        if key != HOME_METADATA_KEY or not isinstance(value, str):
            continue
        host, _, port = value.strip().rpartition(":")
        if host and port.isdigit() and 0 < int(port) < 65536:
            return f"{host}:{port}"
    return None


def home_options(options: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The caller's extra channel arguments for a channel to a home: those that name the
    configured target (`grpc.ssl_target_name_override`, `grpc.default_authority`) dropped."""
    return [(name, value) for name, value in options if name not in _TARGET_ONLY_OPTIONS]


class Via:
    """A channel an endpoint's calls go through, with its stub: the configured target's
    (`address` None) or the agent's home replica's. A call reports what it saw to it."""

    def __init__(self, route: HomeRoute, channel: grpc.aio.Channel, address: str | None) -> None:
        self._route = route
        self.channel = channel
        self.address = address
        self.stub = endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)

    def observe(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> None:
        """A call through here was answered with this initial metadata (a home hint, maybe)."""
        self._route.observe(self, metadata)

    def failed(self, failure: HarnessError) -> None:
        """A call through here failed with `failure`."""
        self._route.failed(self, failure)


class HomeRoute:
    """Where an endpoint's calls go (cluster.md §4): the configured target (a Service in front
    of cluster replicas, or one gateway) until an answer names the agent's home replica in
    `harness-home`; then that home, dialled directly, so calls skip the forwarding hop; and the
    configured target again after an UNAVAILABLE or a deadline from the home, until an answer
    names a home again. A gateway that sends no hint (any gateway outside a cluster, and a
    home answering its own agent) leaves calls where they go. The TypeScript client's
    `HomeTransport` does the same.

    A hinted home is dialled in the background and followed only once it connected (within
    `HOME_CONNECT_TIMEOUT`), so a home this client cannot reach (a pod IP, seen from outside
    Kubernetes) costs one dial and never a call; it, and a home lost, is not dialled again
    for `HOME_AVOID` seconds. One home channel is in use at a time; one the endpoint stopped
    using is closed after `HOME_CHANNEL_GRACE` (at once when the route closes). The route
    owns every task it starts."""

    def __init__(
        self,
        configured: grpc.aio.Channel,
        dial: Callable[[str], grpc.aio.Channel] | None,
        *,
        ready: Callable[[grpc.aio.Channel], Awaitable[bool]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._configured = Via(self, configured, None)
        self._dial = dial
        self._ready = ready or _connects
        self._clock = clock
        self._home: Via | None = None
        self._pending: tuple[str, asyncio.Task[None]] | None = None
        # Address -> until when it is not dialled; at most `HOME_AVOID_MAX`, oldest dropped.
        self._avoided: dict[str, float] = {}
        # One task per home left in the last `HOME_CHANNEL_GRACE` seconds: a home changes
        # once per hand-over, so this holds a few at most.
        self._retiring: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()

    @property
    def home_address(self) -> str | None:
        """The home replica calls go to, while an answer's hint is followed."""
        return None if self._home is None else self._home.address

    def via(self) -> Via:
        """The channel the next call goes through."""
        return self._home or self._configured

    def observe(self, via: Via, metadata: Iterable[tuple[str, str | bytes]] | None) -> None:
        """Dial the home an answer names, if any (and if this route dials homes); calls go
        there once it connected."""
        hint = home_hint(metadata)
        if hint is None or self._dial is None or self._closed.is_set():
            return
        if self._home is not None and self._home.address == hint:
            return
        if self._pending is not None:
            if self._pending[0] == hint:
                return
            self._pending[1].cancel()  # a newer answer names another home
        if self._avoided.get(hint, 0.0) > self._clock():
            return
        task = asyncio.get_running_loop().create_task(self._connect(hint, self._dial(hint)))
        self._pending = (hint, task)

    def failed(self, via: Via, failure: HarnessError) -> None:
        """Back to the configured target when a call to the home shows the home gone."""
        if via is not self._home or not _home_lost(failure):
            return
        self._home = None
        self._avoid(via.address)
        self._retire(via.channel)
        logger.debug("home replica lost address=%s reason=%s", via.address, failure.reason)

    async def _connect(self, address: str, channel: grpc.aio.Channel) -> None:
        followed = False
        try:
            try:
                reachable = await self._ready(channel)
            except Exception as error:  # a dial that fails in any way is a home not to follow
                logger.debug("home replica dial failed address=%s error=%r", address, error)
                reachable = False
            if not reachable:
                self._avoid(address)
                logger.debug("home replica not reachable address=%s", address)
            elif not self._closed.is_set():
                if self._home is not None:
                    self._retire(self._home.channel)
                self._home = Via(self, channel, address)
                followed = True
                logger.debug("following the home replica address=%s", address)
        finally:
            if self._pending is not None and self._pending[0] == address:
                self._pending = None
            if not followed:
                await channel.close()

    def _avoid(self, address: str | None) -> None:
        if address is None:
            return
        now = self._clock()
        self._avoided = {a: until for a, until in self._avoided.items() if until > now}
        self._avoided.pop(address, None)
        self._avoided[address] = now + HOME_AVOID
        while len(self._avoided) > HOME_AVOID_MAX:
            del self._avoided[next(iter(self._avoided))]

    def _retire(self, channel: grpc.aio.Channel) -> None:
        task = asyncio.get_running_loop().create_task(self._close_later(channel))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _close_later(self, channel: grpc.aio.Channel) -> None:
        # No new call goes to this channel; the ones on it get the grace to be answered.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closed.wait(), HOME_CHANNEL_GRACE)
        await channel.close()

    async def close(self) -> None:
        """Close every channel, the configured target's last; idempotent."""
        self._closed.set()
        if self._pending is not None:
            pending = self._pending[1]
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
        home, self._home = self._home, None
        if home is not None:
            await home.channel.close()
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
        await self._configured.channel.close()


async def _connects(channel: grpc.aio.Channel) -> bool:
    """Whether `channel` connects within `HOME_CONNECT_TIMEOUT`."""
    try:
        await asyncio.wait_for(channel.channel_ready(), HOME_CONNECT_TIMEOUT)
    except TimeoutError:
        return False
    return True


def _home_lost(failure: HarnessError) -> bool:
    """True when a call to the home failed so that the home may be gone: it is stopping or not
    ready (UNAVAILABLE from the gateway), or cannot be reached or answer in time."""
    match failure:
        case UnavailableError():
            return True
        case TransportError(code=code):
            return code in HOME_LOST_CODES
        case _:
            return False


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying `token`; never logged."""
    return (("authorization", f"Bearer {token}"),)


class ReachCause(enum.StrEnum):
    """Why an address could not be reached, as the user reads it."""

    REFUSED = "connection refused"
    """Nothing listens there (or a firewall rejects the connection)."""
    UNRESOLVED = "the host name does not resolve"
    """DNS knows no such host."""
    TLS = "the TLS handshake failed (does the gateway serve TLS, and are its roots trusted?)"
    """A TLS client met a plaintext port, or a certificate it does not trust."""
    TIMED_OUT = "no answer"
    """Nothing answered within the connect timeout."""
    OTHER = "the connection failed"
    """Anything else; gRPC's own text follows."""


def reach_cause(details: str) -> tuple[ReachCause, str]:
    """The cause in gRPC's text of a failed connection (`failed to connect to all
    addresses; last error: UNKNOWN: ipv4:127.0.0.1:7770: Failed to connect to remote host:
    Connection refused`), with the words to print."""
    lowered = details.lower()
    if "connection refused" in lowered:
        cause = ReachCause.REFUSED
    elif "resolv" in lowered or "domain name not found" in lowered or "dns" in lowered:
        cause = ReachCause.UNRESOLVED
    elif any(word in lowered for word in ("handshake", "ssl", "tls", "certificate")):
        cause = ReachCause.TLS
    else:
        last = details.rsplit("last error: ", 1)[-1].strip()
        words = f"{ReachCause.OTHER.value}: {last}" if last else ReachCause.OTHER.value
        return ReachCause.OTHER, words
    return cause, cause.value


def unreachable(address: str, details: str | None, seconds: float) -> ConnectError:
    """`transport-failed` naming `address` and the cause in gRPC's `details` (None: nothing
    answered within `seconds`)."""
    words = f"no answer within {seconds:g}s" if details is None else reach_cause(details)[1]
    return ConnectError(
        ConnectErrorReason.TRANSPORT_FAILED,
        address=address,
        detail=unreachable_detail(address, words),
    )


async def failure_details(channel: grpc.aio.Channel) -> str | None:
    """gRPC's text of why `channel` cannot connect, or None when it connected meanwhile."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=DIAGNOSE_TIMEOUT)
    except grpc.aio.AioRpcError as error:
        if error.code() is grpc.StatusCode.UNAVAILABLE:
            return str(error.details() or "")
    return None


async def wait_ready(channel: grpc.aio.Channel, seconds: float, address: str) -> None:
    """Wait for the channel to connect; past `seconds`, `ConnectError` `transport-failed`
    naming `address` and why it could not be reached."""
    try:
        await asyncio.wait_for(channel.channel_ready(), seconds)
    except TimeoutError:
        # One call reads why: between two attempts the channel may read CONNECTING.
        raise unreachable(address, await failure_details(channel), seconds) from None


async def wait_serving(
    channel: grpc.aio.Channel, service: str, seconds: float, address: str
) -> None:
    """Wait until `grpc.health.v1` says `service` is SERVING.

    A daemon without the service (or without health) is `incompatible-daemon`; one that
    stays NOT_SERVING past `seconds` is `transport-failed`; both name `address`."""
    stub = health_pb2_grpc.HealthStub(channel)
    call = stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=seconds)
    incompatible = ConnectError(
        ConnectErrorReason.INCOMPATIBLE_DAEMON,
        address=address,
        detail=incompatible_detail(address),
    )
    not_ready = ConnectError(
        ConnectErrorReason.TRANSPORT_FAILED,
        address=address,
        detail=not_ready_detail(address, seconds),
    )
    try:
        async for response in call:
            if response.status == health_pb2.HealthCheckResponse.SERVING:
                return
            if response.status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN:
                raise incompatible
    except grpc.aio.AioRpcError as error:
        if error.code() in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND):
            raise incompatible from error
        if error.code() is grpc.StatusCode.UNAVAILABLE:
            raise unreachable(address, str(error.details() or ""), seconds) from error
        raise not_ready from error
    finally:
        call.cancel()
    raise not_ready

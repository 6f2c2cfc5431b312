"""Forwarding an agent's calls to its home replica (cluster.md §4.1).

In a cluster any replica answers any agent: `ForwardingInterceptor` sits in front of the
agent API and, for each call, asks the cluster's `HomeRoutes` where the call's agent is
homed. A call for an agent homed here (or a token naming no agent, which the local handler
refuses) runs here unchanged. Any other is forwarded, byte for byte, to the home's agent port
with the client's `authorization` unchanged (the home authenticates it), the peer token in
`harness-peer-authorization`, `harness-route: <partition>/<epoch>` and the caller's deadline
less `FORWARD_DEADLINE_MARGIN`; the home's answer — response, initial and trailing metadata,
status and its details — is the caller's answer, plus the home's address in `harness-home`.

Callers may rely on:

- **One hop.** A routed call (one carrying `harness-route`) is answered here only with the
  peer token and only if this replica holds that partition at that epoch; otherwise it is
  refused NOT_OWNER (UNAVAILABLE, before any effect) and never forwarded again.
- **NOT_OWNER is retried here.** A home that refuses NOT_OWNER had no effect: the forwarder
  refreshes its routes and tries the new home, up to `NOT_OWNER_RETRIES` times within the
  deadline, and answers the call itself when the partition has meanwhile come here.
- **Forwarding never invents "not sent".** UNAVAILABLE reaches the caller only when the home
  provably did not start the call: it could not be reached within `CONNECT_TIMEOUT`
  (`home-unreachable`), or it refused with a status of its own (NOT_OWNER, not ready,
  shutting down). A `Send` cut after its request left (a status without the gateway's
  details) answers `outcome-unknown`; other methods are safe to repeat, so their cut is
  UNAVAILABLE and a stream's cut ends it UNAVAILABLE (its client reconnects and
  unacknowledged items replay with their tokens).
- Channels to homes are cached per address (at most `MAX_CHANNELS`, the least recently used
  closed first) and closed by `close()`. `open_home_channel` opens them with the cluster's
  peer keepalive (cluster.md §9.1): a forwarded call, a `Messages` stream included, whose
  home stops answering pings (a SIGSTOPped or lost node, no RST) is cut within about 7 s
  and ends as a cut above, so its client reconnects, through the Service, to whichever
  replica then forwards it to the new home.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import grpc
from google.rpc import status_pb2
from grpc_status import rpc_status
from harness_contract import wire
from harness_contract.errors import SendError, SendErrorReason, UnavailableError, UnavailableReason

from gateway.cluster.routing import HERE, HomeRoutes, Remote, parse_route, route_text
from gateway.rpc.auth import AUTHORIZATION_KEY, BEARER_SCHEME
from gateway.rpc.errors import Context
from gateway.rpc.keepalive import CLUSTER_PEER_KEEPALIVE
from gateway.rpc.peer import open_peer_channel, peer_target
from gateway.settings import PEER_TLS_SCHEME

logger = logging.getLogger(__name__)

ROUTE_KEY: Final = "harness-route"
"""Metadata of a forwarded call: `<partition>/<epoch>` the home must hold."""
PEER_AUTHORIZATION_KEY: Final = "harness-peer-authorization"
"""Metadata of a forwarded call: `Bearer <peer token>` (the client's token stays in
`authorization`, so the home authenticates the agent itself)."""
HOME_KEY: Final = "harness-home"
"""Initial metadata of a forwarded answer: the home's `HOST:PORT`, which the project's
clients dial directly next time (cluster.md §4.2)."""
STATUS_DETAILS_KEY: Final = "grpc-status-details-bin"
"""The trailer every status the gateway sets carries; a status without it did not come from
a gateway (a connection cut)."""

FORWARD_DEADLINE_MARGIN: Final = 1.0
"""Seconds taken off the caller's deadline for the forwarded call, so the home's answer (or
its deadline) reaches this replica before the caller gives up."""
CONNECT_TIMEOUT: Final = 2.0
"""Seconds to wait for a connection to the home before answering UNAVAILABLE
`home-unreachable`: short, because nothing was sent and the client retries."""
NOT_OWNER_RETRIES: Final = 3
"""Homes tried after a NOT_OWNER refusal, each after refreshing the routes: a partition moves
once per hand-over, so more than a few refusals mean the table is in flux; the caller then
gets NOT_OWNER and retries later."""
MAX_CHANNELS: Final = 64
"""Channels to homes kept open: one per replica, so far above any cluster's size."""

_HOP_PREFIXES: Final = ("grpc-", ":")
"""Metadata the transport sets per hop; never copied onto a forwarded call."""
_HOP_KEYS: Final = frozenset(
    {"user-agent", "te", "content-type", ROUTE_KEY, PEER_AUTHORIZATION_KEY}
)

REFUSED_KEY: Final = "harness-refused"
"""Initial metadata a home sends on a stream it refuses before its status, so a forwarder
knows a refusal from an open stream without waiting for a first item."""

_SEND_METHOD_SUFFIX: Final = "/Send"


class _Refusal:
    """A finished upstream call that refused NOT_OWNER (its status is relayed if no other
    home answers)."""

    def __init__(self, call: Any) -> None:
        self.call = call


Metadata = Sequence[tuple[str, str | bytes]]
Handler = Any
"""A `grpc.RpcMethodHandler`: its stubs type the behaviours for the sync server only."""


class ForwardObserver:
    """Counts forwarded calls (`harness_cluster_forwards_total`); the default counts nothing."""

    def on_forward(self, method: str, outcome: str) -> None:
        """A forwarded call ended: `ok`, the status code's name, `not-owner` or `cut`."""


def open_home_channel(
    address: str, *, tls: grpc.ChannelCredentials | None = None
) -> grpc.aio.Channel:
    """A channel to the agent port of the replica at `address` (`HOST:PORT`): TLS with `tls`
    when given, plaintext otherwise, pinging as `CLUSTER_PEER_KEEPALIVE` says; no I/O yet."""
    if tls is None:
        return open_peer_channel(address, keepalive=CLUSTER_PEER_KEEPALIVE)
    return open_peer_channel(
        f"{PEER_TLS_SCHEME}{peer_target(address)}", tls=tls, keepalive=CLUSTER_PEER_KEEPALIVE
    )


class HomeChannels:
    """Channels to homes, one per address, the least recently used closed beyond a bound."""

    def __init__(self, open_channel: Callable[[str], grpc.aio.Channel]) -> None:
        self._open = open_channel
        self._channels: OrderedDict[str, grpc.aio.Channel] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()

    def get(self, address: str) -> grpc.aio.Channel:
        """The channel to `address`, opened on first use."""
        channel = self._channels.get(address)
        if channel is None:
            channel = self._open(address)
            self._channels[address] = channel
            while len(self._channels) > MAX_CHANNELS:
                _, oldest = self._channels.popitem(last=False)
                task = asyncio.ensure_future(oldest.close(grace=1.0))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        else:
            self._channels.move_to_end(address)
        return channel

    async def close(self) -> None:
        """Close every channel (ending calls in flight); idempotent."""
        channels = list(self._channels.values())
        self._channels.clear()
        for channel in channels:
            await channel.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


class ForwardingInterceptor(grpc.aio.ServerInterceptor):
    """Answers here or forwards to the home, for the methods it is given."""

    def __init__(
        self,
        *,
        routes: HomeRoutes,
        channels: HomeChannels,
        peer_token: str,
        methods: frozenset[str],
        named: Mapping[str, str] | None = None,
        observer: ForwardObserver | None = None,
    ) -> None:
        """`methods` are answered by the home of the agent the bearer token names; `named`
        maps management methods to the request field naming their agent, answered by that
        agent's home (the admin token, shared by every replica, travels unchanged)."""
        self._routes = routes
        self._channels = channels
        self._peer = peer_token.encode("utf-8")
        self._methods = methods
        self._named = dict(named or {})
        self._observer = observer or ForwardObserver()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler:
        method = handler_call_details.method
        field = self._named.get(method)
        if method not in self._methods and field is None:
            return await continuation(handler_call_details)
        metadata: Metadata = tuple(handler_call_details.invocation_metadata or ())
        local = await continuation(handler_call_details)
        route = _value(metadata, ROUTE_KEY)
        if route is not None:
            return self._routed(local, metadata, route)
        if field is not None:
            return self._by_name(local, method, metadata, field)
        token = _bearer(metadata)
        if token is None:  # the local handler refuses it with the typed error
            return local
        placement = await self._routes.home_of(token)
        if placement is HERE or not isinstance(placement, Remote):
            return local
        return self._forwarding(local, method, metadata, token, placement)

    def _by_name(self, local: Handler, method: str, metadata: Metadata, field: str) -> Handler:
        """A management call about one agent: answered by that agent's home."""
        carried = _carried_request(metadata)
        routes = self._routes

        async def behavior(request: bytes, context: Context) -> bytes:
            decoded = local.request_deserializer(request)
            name = getattr(decoded, field, "")
            placement = await routes.home_of_name(name) if name else HERE
            if not isinstance(placement, Remote):
                answer: Any = await local.unary_unary(decoded, context)
                return bytes(local.response_serializer(answer))

            async def homes() -> AsyncIterator[Remote | None]:
                home: Remote | None = placement
                for attempt in range(NOT_OWNER_RETRIES + 1):
                    if attempt:
                        routes.refresh()
                        again = await routes.home_of_name(name)
                        home = again if isinstance(again, Remote) else None
                    yield home
                    if home is None:
                        return

            forward = self._unary_behavior(
                local, method, homes, lambda home: self._call_metadata(carried, home), is_send=False
            )
            return await forward(request, context)

        return grpc.unary_unary_rpc_method_handler(
            behavior, request_deserializer=None, response_serializer=None
        )

    def _call_metadata(self, carried: Metadata, home: Remote) -> Metadata:
        return (
            *carried,
            (ROUTE_KEY, route_text(home.partition, home.epoch)),
            (PEER_AUTHORIZATION_KEY, f"Bearer {self._peer.decode('utf-8')}"),
        )

    # --- a call forwarded to this replica --------------------------------------------------

    def _routed(self, local: Handler, metadata: Metadata, route: str) -> Handler:
        peer = _value(metadata, PEER_AUTHORIZATION_KEY)
        scheme, _, token = (peer or "").partition(" ")
        if scheme.lower() != BEARER_SCHEME or not hmac.compare_digest(
            token.encode("utf-8"), self._peer
        ):
            return _refusing(local, _peer_refused())
        parsed = parse_route(route)
        if parsed is None or not self._routes.holds(*parsed):
            return _refusing(local, _not_owner())
        return local

    # --- a call this replica forwards -------------------------------------------------------

    def _forwarding(
        self,
        local: Handler,
        method: str,
        metadata: Metadata,
        token: str,
        first: Remote,
    ) -> Handler:
        carried = _carried_request(metadata)
        is_send = method.endswith(_SEND_METHOD_SUFFIX)

        async def homes() -> AsyncIterator[Remote | None]:
            """The home to try next; None once the partition came here."""
            home: Remote | None = first
            for attempt in range(NOT_OWNER_RETRIES + 1):
                if attempt:
                    self._routes.refresh()
                    placement = await self._routes.home_of(token)
                    home = placement if isinstance(placement, Remote) else None
                yield home
                if home is None:
                    return

        def call_metadata(home: Remote) -> Metadata:
            return self._call_metadata(carried, home)

        if local.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                self._stream_behavior(local, method, homes, call_metadata),
                request_deserializer=None,
                response_serializer=None,
            )
        return grpc.unary_unary_rpc_method_handler(
            self._unary_behavior(local, method, homes, call_metadata, is_send=is_send),
            request_deserializer=None,
            response_serializer=None,
        )

    def _unary_behavior(
        self,
        local: Handler,
        method: str,
        homes: Callable[[], AsyncIterator[Remote | None]],
        call_metadata: Callable[[Remote], Metadata],
        *,
        is_send: bool,
    ) -> Callable[[bytes, Context], Awaitable[bytes]]:
        async def behavior(request: bytes, context: Context) -> bytes:
            refusal: grpc.aio.AioRpcError | None = None
            async for home in homes():
                if home is None:  # the partition came here meanwhile
                    answer: Any = await local.unary_unary(
                        local.request_deserializer(request), context
                    )
                    return bytes(local.response_serializer(answer))
                channel = await self._connected(home, method, context)
                call: Any = _raw(channel.unary_unary(method))(
                    request, metadata=call_metadata(home), timeout=_forward_timeout(context)
                )
                try:
                    response: bytes = await call
                except grpc.aio.AioRpcError as error:
                    if _is_not_owner(error):
                        self._observer.on_forward(method, "not-owner")
                        refusal = error
                        continue
                    await self._relay_failure(context, method, error, cut_is_unknown=is_send)
                    raise  # pragma: no cover - _relay_failure aborts
                await context.send_initial_metadata(
                    _answer_metadata(await call.initial_metadata(), home)
                )
                context.set_trailing_metadata(_carried(await call.trailing_metadata()))
                self._observer.on_forward(method, "ok")
                return response
            assert refusal is not None
            await self._relay_failure(context, method, refusal, cut_is_unknown=False)
            raise AssertionError("unreachable")  # pragma: no cover

        return behavior

    def _stream_behavior(
        self,
        local: Handler,
        method: str,
        homes: Callable[[], AsyncIterator[Remote | None]],
        call_metadata: Callable[[Remote], Metadata],
    ) -> Callable[[bytes, Context], AsyncIterator[bytes]]:
        async def behavior(request: bytes, context: Context) -> AsyncIterator[bytes]:
            refusal: _Refusal | None = None
            async for home in homes():
                if home is None:
                    serialize = local.response_serializer
                    async for item in local.unary_stream(
                        local.request_deserializer(request), context
                    ):
                        yield bytes(serialize(item))
                    return
                channel = await self._connected(home, method, context)
                call: Any = _raw(channel.unary_stream(method))(
                    request, metadata=call_metadata(home), timeout=_forward_timeout(context)
                )
                try:
                    try:
                        initial = await call.initial_metadata()
                        if _value(initial or (), REFUSED_KEY) is not None:
                            # A home's refusal (cluster.md §4.1) sends this marker before its
                            # status, so the refusal is told apart from an open stream
                            # before anything is sent to the caller.
                            code = await call.code()
                            if _not_owner_status(code, await call.trailing_metadata()):
                                self._observer.on_forward(method, "not-owner")
                                refusal = _Refusal(call)
                                continue
                            await self._relay_status(context, method, call)
                        await context.send_initial_metadata(_answer_metadata(initial, home))
                        async for item in call:
                            yield item
                    except grpc.aio.AioRpcError as error:
                        await self._relay_failure(context, method, error, cut_is_unknown=False)
                    code = await call.code()
                    if code is not grpc.StatusCode.OK:
                        await self._relay_status(context, method, call)
                    context.set_trailing_metadata(_carried(await call.trailing_metadata()))
                    self._observer.on_forward(method, "ok")
                    return
                finally:
                    call.cancel()
            assert refusal is not None
            await self._relay_status(context, method, refusal.call)

        return behavior

    async def _connected(self, home: Remote, method: str, context: Context) -> grpc.aio.Channel:
        """The home's channel once connected; UNAVAILABLE `home-unreachable` (nothing sent)
        when it cannot be reached within `CONNECT_TIMEOUT`."""
        channel = self._channels.get(home.address)
        try:
            await asyncio.wait_for(channel.channel_ready(), CONNECT_TIMEOUT)
        except TimeoutError:
            self._observer.on_forward(method, "unreachable")
            await context.abort_with_status(
                _unavailable(
                    UnavailableReason.HOME_UNREACHABLE,
                    f"the agent's home replica ({home.address}) cannot be reached; retry",
                )
            )
        return channel

    async def _relay_status(self, context: Context, method: str, call: Any) -> None:
        """End the call with a finished upstream call's non-OK status."""
        code: grpc.StatusCode = await call.code()
        details: str = await call.details()
        trailing = _carried(await call.trailing_metadata())
        self._observer.on_forward(method, code.name)
        await context.abort(code, details, trailing_metadata=trailing)

    async def _relay_failure(
        self, context: Context, method: str, error: grpc.aio.AioRpcError, *, cut_is_unknown: bool
    ) -> None:
        """End the call with the home's status; a cut `Send` answers `outcome-unknown`."""
        trailing = _carried(error.trailing_metadata())
        from_home = _value(error.trailing_metadata() or (), STATUS_DETAILS_KEY) is not None
        # A status the home set carries its details; anything else is the transport's. For a
        # Send that may have left, only "outcome-unknown" is true (cluster.md §4.1).
        if not from_home and (
            (cut_is_unknown and error.code() is not grpc.StatusCode.CANCELLED)
            or error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL)
        ):
            self._observer.on_forward(method, "cut")
            if cut_is_unknown:
                status = wire.status_of(
                    SendError(
                        SendErrorReason.OUTCOME_UNKNOWN,
                        "send failed: the connection to the agent's home replica was cut "
                        "after the request left; the post may have been sent",
                    )
                )
                await context.abort_with_status(rpc_status.to_status(status))
            await context.abort_with_status(
                _unavailable(
                    UnavailableReason.HOME_UNREACHABLE,
                    "the connection to the agent's home replica was cut; retry",
                )
            )
        self._observer.on_forward(method, error.code().name)
        await context.abort(error.code(), error.details() or "", trailing_metadata=trailing)


def _raw(multicallable: Any) -> Any:
    """A multicallable without serializers takes and returns bytes; its stubs say otherwise."""
    return multicallable


def _refusing(local: Handler, status: grpc.Status) -> Handler:
    """A handler of `local`'s shape that ends every call with `status` before any effect."""
    if local.response_streaming:

        async def stream(request: Any, context: Context) -> AsyncIterator[Any]:
            await context.send_initial_metadata(((REFUSED_KEY, "1"),))
            await context.abort_with_status(status)
            yield  # type: ignore[unreachable]  # pragma: no cover - an async generator

        return grpc.unary_stream_rpc_method_handler(
            stream,
            request_deserializer=local.request_deserializer,
            response_serializer=local.response_serializer,
        )

    async def unary(request: Any, context: Context) -> Any:
        await context.abort_with_status(status)

    return grpc.unary_unary_rpc_method_handler(
        unary,
        request_deserializer=local.request_deserializer,
        response_serializer=local.response_serializer,
    )


def _unavailable(reason: UnavailableReason, text: str) -> grpc.Status:
    """UNAVAILABLE with the gateway's details: the call had no effect (RetryInfo)."""
    converted: grpc.Status = rpc_status.to_status(wire.status_of(UnavailableError(reason, text)))
    return converted


def _not_owner() -> grpc.Status:
    return _unavailable(
        UnavailableReason.NOT_OWNER,
        "this replica is not the agent's home for this route; retry at the new home",
    )


def _peer_refused() -> grpc.Status:
    return _unavailable(
        UnavailableReason.NOT_OWNER,
        "a routed call without the cluster's peer token is not answered",
    )


def _is_not_owner(error: grpc.aio.AioRpcError) -> bool:
    return _not_owner_status(error.code(), error.trailing_metadata())


def _not_owner_status(code: grpc.StatusCode, trailing: Any) -> bool:
    if code is not grpc.StatusCode.UNAVAILABLE:
        return False
    details = _value(trailing or (), STATUS_DETAILS_KEY)
    if not isinstance(details, bytes):
        return False
    status = status_pb2.Status()
    try:
        status.ParseFromString(details)
    except Exception:  # a malformed detail is not a NOT_OWNER refusal
        return False
    refused = wire.error_of_status(status)
    return isinstance(refused, UnavailableError) and refused.reason is UnavailableReason.NOT_OWNER


def _forward_timeout(context: Context) -> float | None:
    remaining = context.time_remaining()
    if remaining is None or remaining == float("inf"):
        return None
    return max(0.05, remaining - FORWARD_DEADLINE_MARGIN)


def _answer_metadata(metadata: Any, home: Remote) -> Metadata:
    return (*_carried(metadata), (HOME_KEY, home.address))


def _carried_request(metadata: Metadata) -> Metadata:
    """A request's metadata to pass on: the caller's own, without per-hop keys."""
    return tuple(
        (key, value)
        for key, value in metadata
        if key not in _HOP_KEYS and not key.startswith(_HOP_PREFIXES)
    )


def _carried(metadata: Any) -> Metadata:
    """The metadata of an answer to pass on: the home's own, with its status details."""
    return tuple(
        (key, value)
        for key, value in (metadata or ())
        if key == STATUS_DETAILS_KEY
        or (
            key not in _HOP_KEYS
            and key not in (HOME_KEY, REFUSED_KEY)
            and not key.startswith(_HOP_PREFIXES)
        )
    )


def _value(metadata: Any, key: str) -> Any:
    for item_key, value in metadata:
        if item_key == key:
            return value
    return None


def _bearer(metadata: Metadata) -> str | None:
    value = _value(metadata, AUTHORIZATION_KEY)
    if not isinstance(value, str):
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != BEARER_SCHEME or not token or token.split() != [token]:
        return None
    return token


__all__ = [
    "CONNECT_TIMEOUT",
    "FORWARD_DEADLINE_MARGIN",
    "HOME_KEY",
    "PEER_AUTHORIZATION_KEY",
    "ROUTE_KEY",
    "ForwardObserver",
    "ForwardingInterceptor",
    "HomeChannels",
    "open_home_channel",
]

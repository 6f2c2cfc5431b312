"""`connect` and `Endpoint`: one agent's HarnessEndpoint over gRPC."""

from __future__ import annotations

import asyncio
import enum
import logging
import re
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import grpc
from harness_contract import wire
from harness_contract._gen.harness.v1 import endpoint_pb2
from harness_contract.content import REQUEST_MAX_BYTES, oversized_detail
from harness_contract.errors import (
    AuthenticationError,
    AuthenticationErrorReason,
    CollectiveError,
    ConnectError,
    ConnectErrorReason,
    DeliveryAcknowledgeError,
    DeliveryAcknowledgeErrorReason,
    FirewallSendError,
    HarnessError,
    IdempotencyConflictError,
    InvalidRequestError,
    ListenError,
    ListenErrorReason,
    MessageTextError,
    PermissionDeniedError,
    SendError,
    SendErrorReason,
    token_refused_detail,
    unreachable_detail,
)
from harness_contract.values import (
    AcknowledgeResult,
    FailureDelivery,
    SendInput,
    SendResult,
    SendState,
)

from harness_client._acks import _AckBatcher
from harness_client._channel import (
    DEFAULT_CONNECT_TIMEOUT,
    ENDPOINT_SERVICE,
    HomeRoute,
    Via,
    bearer_metadata,
    home_options,
    open_channel,
    parse_target,
    reach_cause,
    wait_ready,
    wait_serving,
)
from harness_client._connection import ConnectionListener, ConnectionState, _ConnectionStates
from harness_client._errors import EndpointClosedError, TransportError, decode_status
from harness_client._items import InboundDelivery
from harness_client._retry import SEND_RETRY_FLOOR, Backoff, had_no_effect, send_may_retry
from harness_client._stream import MessagesCall, _StreamLoop

logger = logging.getLogger(__name__)

SEND_TIMEOUT: Final = 60.0
"""Seconds a `send` may take in all, its retries included (operations.md §3)."""
ACKNOWLEDGE_TIMEOUT: Final = 10.0
"""Seconds one `Acknowledge` call may take."""
READ_TIMEOUT: Final = 5.0
"""Seconds a `ReadSend` or `ParseMessageText` call may take."""
ACKNOWLEDGE_MAX_TOKENS: Final = 1_000
"""Most tokens the gateway takes in one `Acknowledge` call."""

_OVERSIZED: Final = re.compile(r"larger than max \((\d+) vs\. \d+\)")
"""gRPC's text of a request over the receiving side's limit: `Received message larger than
max (2000015 vs. 1048576)`; the first number is the request's size in bytes."""

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")

_TYPED_SEND_FAILURES: Final = (
    SendError,
    CollectiveError,
    FirewallSendError,
    IdempotencyConflictError,
    AuthenticationError,
    PermissionDeniedError,
    InvalidRequestError,
)
"""What `send` raises as decoded: the gateway's own typed answers."""


class EndpointState(enum.StrEnum):
    """An Endpoint's lifecycle: each state refuses the calls that make no sense in it."""

    OPEN = "open"
    """Connected and checked; calls are taken."""
    CLOSED = "closed"
    """Closed; every call raises `EndpointClosedError`."""


async def connect(
    target: str,
    *,
    token: str,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    credentials: grpc.ChannelCredentials | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> Endpoint:
    """Acquire the HarnessEndpoint of the agent `token` names.

    Waits for the channel, for `harness.v1.HarnessEndpointService` to be SERVING, and checks
    the token, all within `connect_timeout` seconds. Raises `ConnectError` with the address
    and what went wrong there (its `address` and `detail`): `transport-failed` (no channel,
    or not serving in time), `authentication-failed` (the token refused; the
    `AuthenticationError` or `PermissionDeniedError` is chained), `incompatible-daemon` (no
    such service), `decode-failed`.

    Args:
        target: `HOST:PORT`, `grpc://HOST:PORT` or `grpcs://HOST:PORT`.
        token: the agent's API token (`hat_…`).
        connect_timeout: seconds for the whole check.
        credentials: TLS channel credentials; None is plaintext unless `grpcs://`.
        options: extra channel arguments.
    """
    channel = open_channel(target, credentials=credentials, options=options)
    address, tls = parse_target(target)
    if credentials is None and tls:
        credentials = grpc.ssl_channel_credentials()

    def dial(home: str) -> grpc.aio.Channel:
        # A cluster replica's hint: the same TLS and options, under the home's own name.
        return open_channel(home, credentials=credentials, options=home_options(options))

    deadline = time.monotonic() + connect_timeout
    endpoint: Endpoint | None = None
    try:
        await wait_ready(channel, connect_timeout, address)
        await wait_serving(
            channel, ENDPOINT_SERVICE, max(0.0, deadline - time.monotonic()), address
        )
        endpoint = Endpoint(channel, token, dial=dial)
        await endpoint._check_token(max(0.0, deadline - time.monotonic()), address)
    except BaseException:
        # The endpoint's close also closes a home channel its check may have opened.
        await (channel.close() if endpoint is None else endpoint.close())
        raise
    return endpoint


def _refuse_oversized(size: int) -> None:
    """A request over the gateway's default receive limit cannot hold a valid message:
    `content-invalid` naming the limit, before the gateway refuses it unread (a bare
    transport error)."""
    if size > REQUEST_MAX_BYTES:
        raise SendError(SendErrorReason.CONTENT_INVALID, oversized_detail(size))


def _refuse_refused_unread(error: grpc.aio.AioRpcError, failure: HarnessError) -> None:
    """gRPC's bare refusal of a request over the gateway's receive limit (one set below the
    default) as the same `content-invalid`."""
    oversized = _OVERSIZED.search(failure.message)
    if error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and oversized:
        detail = oversized_detail(int(oversized[1]))
        raise SendError(SendErrorReason.CONTENT_INVALID, detail) from failure


def connect_failure(
    failure: HarnessError, address: str, *, role: str = "agent token"
) -> ConnectError:
    """The ConnectError a failed first call stands for: a refused token is
    `authentication-failed`, anything else `transport-failed`; both name the address."""
    match failure:
        case AuthenticationError(reason=reason):
            refusal: AuthenticationErrorReason | None = reason
        case PermissionDeniedError():
            refusal = None
        case _:
            return ConnectError(
                ConnectErrorReason.TRANSPORT_FAILED,
                address=address,
                detail=unreachable_detail(address, reach_cause(failure.message)[1]),
            )
    return ConnectError(
        ConnectErrorReason.AUTHENTICATION_FAILED,
        address=address,
        detail=token_refused_detail(address, refusal, role=role),
    )


class Endpoint:
    """One agent's HarnessEndpoint; an async context manager (`close()` on exit).

    Its calls go through `HomeRoute`: the configured target, or the agent's home replica
    once a cluster replica named it (`harness-home`), back to the target when the home is
    lost (`_channel.py`)."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        token: str,
        *,
        dial: Callable[[str], grpc.aio.Channel] | None = None,
    ) -> None:
        self._route = HomeRoute(channel, dial)
        self._metadata = bearer_metadata(token)
        self._acks = _AckBatcher(self._acknowledge_batch)
        self._state = EndpointState.OPEN
        self._connection = _ConnectionStates()

    @property
    def state(self) -> EndpointState:
        """The lifecycle state."""
        return self._state

    @property
    def connection_state(self) -> ConnectionState:
        """The agent's link to the gateway as `messages()` sees it: CONNECTING (no stream
        yet), READY (a stream is open), RECONNECTING (lost, opening a new one), CLOSED."""
        return self._connection.state

    def on_connection_state(self, callback: ConnectionListener) -> Callable[[], None]:
        """Call `callback(state)` on each change of `connection_state` from now on (not with
        the current one); returns a function that unsubscribes. A callback runs on the event
        loop, so it must not block; one that raises is logged and kept."""
        return self._connection.subscribe(callback)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop acknowledging and close the channel; idempotent."""
        if self._state is EndpointState.CLOSED:
            return
        self._state = EndpointState.CLOSED
        self._connection.report(ConnectionState.CLOSED)
        await self._acks.close()
        await self._route.close()

    def _check_open(self) -> None:
        if self._state is EndpointState.CLOSED:
            raise EndpointClosedError()

    async def _unary(
        self, start: Callable[[Via], grpc.aio.UnaryUnaryCall[_Request, _Response]]
    ) -> _Response:
        """One unary call through the route: its answer's home hint followed, its failure
        reported to the route (then raised as gRPC raised it)."""
        via = self._route.via()
        call = start(via)
        try:
            response = await call
        except grpc.aio.AioRpcError as error:
            via.failed(decode_status(error))
            raise
        via.observe(await call.initial_metadata())
        return response

    async def _check_token(self, seconds: float, address: str) -> None:
        """One authenticated call with no effect: a refused token fails the connect."""
        try:
            await self._unary(
                lambda via: via.stub.ParseMessageText(
                    endpoint_pb2.ParseMessageTextRequest(to="agent:connect-check", text=""),
                    metadata=self._metadata,
                    timeout=seconds,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise connect_failure(decode_status(error), address) from decode_status(error)

    # --- send ------------------------------------------------------------------------

    async def send(
        self,
        send_input: SendInput,
        *,
        idempotency_key: str | None = None,
        failure_delivery: FailureDelivery = FailureDelivery.RESULT,
        deadline: float = SEND_TIMEOUT,
    ) -> SendResult:
        """Send; returns once the post is certified (a gather: once its posts settled).

        Raises `SendError`, `CollectiveError`, `FirewallSendError`, or
        `IdempotencyConflictError` for a key bound to another send.

        A send refused before it had any effect (the gateway restarting or handing the agent
        over answers UNAVAILABLE, or the request never left) is sent again with capped
        backoff (up to 1 s apart) until `deadline` seconds passed. A keyed send whose outcome
        is unknown (the connection dropped with it in flight, or the gateway answered
        `outcome-unknown`) is also sent again under its key, which returns the kept outcome
        or joins the running send: give a key to ride out restarts and hand-overs. A keyless
        one is never sent twice: it fails `outcome-unknown` when it may have reached the
        gateway, `network-unavailable` when it cannot have."""
        self._check_open()
        request = endpoint_pb2.SendRequest(
            input=wire.send_input_to_proto(send_input),
            failure_delivery=wire.failure_delivery_to_proto(failure_delivery),
        )
        if idempotency_key is not None:
            request.idempotency_key = idempotency_key
        _refuse_oversized(request.ByteSize())
        give_up_at = time.monotonic() + deadline
        backoff = Backoff()
        may_have_posted = False
        while True:
            try:
                response = await self._unary(
                    lambda via: via.stub.Send(
                        request,
                        metadata=self._metadata,
                        timeout=max(0.0, give_up_at - time.monotonic()),
                    )
                )
            except grpc.aio.AioRpcError as error:
                failure = decode_status(error)
                _refuse_refused_unread(error, failure)
                may_have_posted = may_have_posted or not had_no_effect(failure)
                delay = backoff.next_delay()
                left = give_up_at - time.monotonic() - delay
                if send_may_retry(failure, keyed=idempotency_key is not None) and (
                    left >= SEND_RETRY_FLOOR
                ):
                    logger.debug(
                        "send failed, sending again reason=%s keyed=%s delay=%.3f",
                        failure.reason,
                        idempotency_key is not None,
                        delay,
                    )
                    await asyncio.sleep(delay)
                    self._check_open()
                    continue
                if isinstance(failure, _TYPED_SEND_FAILURES):
                    raise failure from None
                raise SendError(_lost_send_reason(may_have_posted=may_have_posted)) from failure
            try:
                return wire.send_result_from_proto(response.result)
            except InvalidRequestError:
                # The send succeeded, but this client cannot read what it returned.
                raise SendError(SendErrorReason.OUTCOME_UNKNOWN) from None

    # --- messages --------------------------------------------------------------------

    def messages(
        self, *, takeover: bool = False, give_up_after: float | None = None
    ) -> AsyncGenerator[InboundDelivery, None]:
        """The agent's deliveries in inbox order, as an async generator (`aclose()` it, or
        leave it with `break`, to end the stream).

        Reconnects on its own, within about a second of the gateway answering again however
        long it was away, and skips replays of tokens it already yielded (each call starts
        with an empty memory); `connection_state` follows it. It never gives up on its own:
        it raises `ListenError` `already-listening` when another stream is open (unless
        `takeover`) or takes this one over, `decode-failed`, the typed refusal no retry can
        change (`AuthenticationError` for a revoked token), `EndpointClosedError` once the
        endpoint closed, and `transport-failed` only when `give_up_after` seconds passed
        without a stream (None, the default: never)."""
        self._check_open()
        loop = _StreamLoop(
            open_call=self._open_messages,
            decode=self._delivery,
            takeover=takeover,
            is_closed=lambda: self._state is EndpointState.CLOSED,
            report=self._connection.report,
            give_up_after=give_up_after,
        )
        return loop.deliveries()

    def _open_messages(self, takeover: bool) -> tuple[MessagesCall, Via]:
        via = self._route.via()
        # wait_for_ready on the configured target: while the gateway is away the call waits
        # for the channel to connect instead of failing at once, so the stream opens as soon
        # as it can. Never on a home replica: one that is gone must fail the call, so the
        # route goes back to the target.
        call = via.stub.Messages(
            endpoint_pb2.MessagesRequest(takeover=takeover),
            metadata=self._metadata,
            wait_for_ready=via.address is None,
        )
        return call, via

    def _delivery(self, response: endpoint_pb2.MessagesResponse) -> InboundDelivery:
        try:
            delivery = wire.delivery_from_proto(response.delivery)
        except InvalidRequestError:
            raise ListenError(ListenErrorReason.DECODE_FAILED) from None
        return InboundDelivery(
            token=delivery.token,
            item=delivery.item,
            guidance=delivery.guidance,
            _acknowledge=self._acks.acknowledge,
        )

    # --- acknowledgments -------------------------------------------------------------

    async def acknowledge(
        self, tokens: Sequence[str], *, deadline: float = ACKNOWLEDGE_TIMEOUT
    ) -> list[DeliveryAcknowledgeError | None]:
        """Acknowledge tokens directly, 1,000 per call; one result per token (None: retired).

        Raises the decoded failure of a call (`AuthenticationError`, `TransportError`).
        `delivery.acknowledge()` is the batched way for deliveries in hand."""
        self._check_open()
        results: list[DeliveryAcknowledgeError | None] = []
        for start in range(0, len(tokens), ACKNOWLEDGE_MAX_TOKENS):
            chunk = tokens[start : start + ACKNOWLEDGE_MAX_TOKENS]
            try:
                response = await self._acknowledge_call(chunk, deadline)
            except grpc.aio.AioRpcError as error:
                raise decode_status(error) from None
            if len(response.results) != len(chunk):
                raise TransportError(grpc.StatusCode.INTERNAL, "acknowledge results do not match")
            try:
                results.extend(
                    _acknowledge_error(wire.acknowledge_result_from_proto(token, result))
                    for token, result in zip(chunk, response.results, strict=True)
                )
            except InvalidRequestError:
                raise TransportError(
                    grpc.StatusCode.INTERNAL, "acknowledge results do not decode"
                ) from None
        return results

    async def _acknowledge_call(
        self, tokens: Sequence[str], deadline: float
    ) -> endpoint_pb2.AcknowledgeResponse:
        request = endpoint_pb2.AcknowledgeRequest(delivery_tokens=tokens)
        return await self._unary(
            lambda via: via.stub.Acknowledge(request, metadata=self._metadata, timeout=deadline)
        )

    async def _acknowledge_batch(
        self, tokens: Sequence[str]
    ) -> list[DeliveryAcknowledgeError | None]:
        try:
            return await self.acknowledge(tokens)
        except HarnessError as error:
            raise DeliveryAcknowledgeError(
                DeliveryAcknowledgeErrorReason.TRANSPORT_FAILED
            ) from error

    # --- pure and state reads --------------------------------------------------------

    async def parse_message_text(
        self, to: str, text: str, *, deadline: float = READ_TIMEOUT
    ) -> SendInput:
        """The send a message's text states; raises `MessageTextError` when it states an
        operation that does not fit its shape, and `SendError` `content-invalid` for a text
        too large for the gateway to read (no send could carry it)."""
        self._check_open()
        request = endpoint_pb2.ParseMessageTextRequest(to=to, text=text)
        _refuse_oversized(request.ByteSize())
        try:
            response = await self._unary(
                lambda via: via.stub.ParseMessageText(
                    request, metadata=self._metadata, timeout=deadline
                )
            )
        except grpc.aio.AioRpcError as error:
            failure = decode_status(error)
            _refuse_refused_unread(error, failure)
            # A failed call; a gateway from before the `error` arm also refused a text so.
            raise failure from None
        try:
            parsed = wire.parse_result_from_proto(response)
        except InvalidRequestError:
            raise TransportError(grpc.StatusCode.INTERNAL, "parse answer does not decode") from None
        if isinstance(parsed, MessageTextError):
            raise parsed
        return parsed

    async def read_send(self, idempotency_key: str, *, deadline: float = READ_TIMEOUT) -> SendState:
        """The state of an idempotency key: absent, pending, indeterminate or returned."""
        self._check_open()
        try:
            response = await self._unary(
                lambda via: via.stub.ReadSend(
                    endpoint_pb2.ReadSendRequest(idempotency_key=idempotency_key),
                    metadata=self._metadata,
                    timeout=deadline,
                )
            )
        except grpc.aio.AioRpcError as error:
            raise decode_status(error) from None
        try:
            return wire.send_state_from_proto(response)
        except InvalidRequestError:
            raise TransportError(grpc.StatusCode.INTERNAL, "send state does not decode") from None


def _lost_send_reason(*, may_have_posted: bool) -> SendErrorReason:
    """Why a send without a typed answer failed: `outcome-unknown` when any attempt may have
    posted, `network-unavailable` when none can have (each never left, or was refused
    UNAVAILABLE)."""
    if may_have_posted:
        return SendErrorReason.OUTCOME_UNKNOWN
    return SendErrorReason.NETWORK_UNAVAILABLE


def _acknowledge_error(result: AcknowledgeResult) -> DeliveryAcknowledgeError | None:
    return None if result.error is None else DeliveryAcknowledgeError(result.error)

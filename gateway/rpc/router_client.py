"""`GrpcRouter`: a `RouterPort` over a standalone Router's `harness.v1.RouterService`.

A joined daemon (`serve --router grpc://HOST:PORT`) reads and sends through it exactly as
through the in-process ring: every protocol outcome is the same closed record, translated
once here. What a remote Router adds is transport failure, and that always raises:

- `RouterUnavailable` (a `ConnectionError`): the call failed or timed out, so the Router
  may or may not have acted on it. The daemon's drain and feed treat it as "Router
  unreachable": DETACHED, retry with backoff, never give up.
- `RouterVersionMismatch` (a `RouterUnavailable`): FAILED_PRECONDITION with `ErrorInfo`
  `VERSION_MISMATCH`, or an answer announcing another `harness-version`; a send waiting
  for attachment ends at once with `version-mismatch` (engine.md §6 step 6).
- `RouterClosedError`: this client was closed; held polls and subscriptions end with it.

Deadlines (engine.md §4, §6): a send and `instance_id` 10 s; a poll its hold (25 s at
most) plus 10 s, so 35 s by default; a subscription has no deadline, but a stream silent
for longer than its hold plus 10 s is dead (the Router sends an empty batch every hold),
and keepalive finds a half-open connection within about 40 s.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import AsyncGenerator
from typing import Final, Self

import grpc
from google.protobuf import duration_pb2
from harness_contract._gen.harness.v1 import router_pb2, router_pb2_grpc

from gateway.router import (
    POLL_HOLD,
    Accepted,
    Batch,
    Cursor,
    CursorInvalid,
    Entry,
    FeedGap,
    IdempotencyConflict,
    MessageInvalid,
    PollOutcome,
    RetryIdentityUnknown,
    RouterClosedError,
    RouterRestarted,
    RouterState,
    SendMode,
    SendOutcome,
)
from gateway.router.port import RouterUnavailable, RouterVersionMismatch
from gateway.rpc.keepalive import KeepalivePolicy
from gateway.rpc.peer import (
    describe_failure,
    is_version_mismatch,
    open_peer_channel,
    peer_target,
)
from gateway.rpc.peer_client import PeerClient

logger = logging.getLogger(__name__)

ROUTER_SEND_DEADLINE: Final = 10.0
"""Seconds a Router send may take (engine.md §6 "Router send deadline 10 s")."""

ROUTER_CALL_DEADLINE: Final = 10.0
"""Seconds a `GetInstance` may take: an immediate answer, bounded as a send."""

POLL_DEADLINE_MARGIN: Final = 10.0
"""Seconds a poll's deadline exceeds its hold: 25 s hold, 35 s deadline (engine.md §4)."""

_MODES: Final = {
    SendMode.INITIAL: router_pb2.ROUTER_SEND_MODE_INITIAL,
    SendMode.RETRY: router_pb2.ROUTER_SEND_MODE_RETRY,
}


def hold_duration(hold: float) -> duration_pb2.Duration:
    """The wire form of a hold: clamped to 0..`POLL_HOLD` seconds."""
    duration = duration_pb2.Duration()
    duration.FromTimedelta(dt.timedelta(seconds=min(max(hold, 0.0), POLL_HOLD)))
    return duration


def send_outcome(response: router_pb2.RouterServiceSendResponse) -> SendOutcome:
    """The closed outcome a `RouterServiceSendResponse` carries (`RouterUnavailable` when
    it carries none)."""
    match response.WhichOneof("result"):
        case "accepted":
            return Accepted(
                instance_id=response.accepted.instance_id, digest=response.accepted.digest
            )
        case "router_restarted":
            return RouterRestarted(instance_id=response.router_restarted.instance_id)
        case "message_invalid":
            return MessageInvalid(detail=response.message_invalid.detail)
        case "idempotency_conflict":
            return IdempotencyConflict()
        case "retry_identity_unknown":
            return RetryIdentityUnknown()
        case other:
            raise RouterUnavailable(f"the router answered a send with {other!r}")


def read_outcome(response: router_pb2.PollResponse | router_pb2.SubscribeResponse) -> PollOutcome:
    """The closed outcome a `PollResponse` or `SubscribeResponse` carries
    (`RouterUnavailable` for an empty or malformed answer)."""
    match response.WhichOneof("result"):
        case "batch":
            batch = response.batch
            cursor = Cursor.decode(batch.cursor)
            if cursor is None:
                raise RouterUnavailable("the router answered a malformed cursor")
            return Batch(
                instance_id=batch.instance_id,
                cursor=cursor,
                entries=tuple(
                    Entry(
                        order=entry.order,
                        signed_envelope=entry.signed_envelope,
                        recipients=tuple(entry.recipients),
                    )
                    for entry in batch.entries
                ),
            )
        case "feed_gap":
            return FeedGap(instance_id=response.feed_gap.instance_id)
        case "cursor_invalid":
            return CursorInvalid()
        case other:
            raise RouterUnavailable(f"the router answered a read with {other!r}")


class GrpcRouter(PeerClient[RouterState]):
    """A `RouterPort` whose Router is a `RouterService` across the network.

    Create it with `await GrpcRouter.connect(target, peer_token=...)`; the channel
    connects on first use, so a Router that is down at start only makes the first calls
    raise `RouterUnavailable`. `close()` (or leaving `async with`) ends held polls and
    subscriptions with `RouterClosedError`.
    """

    def __init__(self, channel: grpc.aio.Channel, *, target: str, peer_token: str) -> None:
        """Use `connect`; this only wires what it prepared."""
        super().__init__(
            channel,
            target=target,
            peer_token=peer_token,
            opened=RouterState.OPEN,
            closed=RouterState.CLOSED,
        )
        self._stub = router_pb2_grpc.RouterServiceStub(channel)

    @classmethod
    async def connect(
        cls,
        target: str,
        *,
        peer_token: str,
        tls: grpc.ChannelCredentials | None = None,
        keepalive: KeepalivePolicy | None = None,
    ) -> Self:
        """A client of the Router at `HOST:PORT`, `grpc://HOST:PORT` or `grpcs://HOST:PORT`
        (TLS with `tls`, by default the system's roots), pinging as `keepalive` says.

        Raises `ValueError` (`PeerConfigError`) for a malformed target; never waits for the
        Router."""
        address = peer_target(target)
        return cls(
            open_peer_channel(target, tls=tls, keepalive=keepalive),
            target=address,
            peer_token=peer_token,
        )

    async def instance_id(self) -> str:
        """The Router's current instance (`GetInstance`)."""
        response = await self._unary(
            self._stub.GetInstance, router_pb2.GetInstanceRequest(), deadline=ROUTER_CALL_DEADLINE
        )
        return str(response.instance_id)

    async def send(
        self, expected_instance_id: str, mode: SendMode, signed_envelope: bytes
    ) -> SendOutcome:
        """One `Send` within `ROUTER_SEND_DEADLINE`; see `RouterPort.send`."""
        request = router_pb2.RouterServiceSendRequest(
            expected_instance_id=expected_instance_id,
            mode=_MODES[mode],
            signed_envelope=signed_envelope,
        )
        response = await self._unary(self._stub.Send, request, deadline=ROUTER_SEND_DEADLINE)
        return send_outcome(response)

    async def poll(
        self, recipients: frozenset[str], cursor: Cursor | None, *, hold: float = POLL_HOLD
    ) -> PollOutcome:
        """One `Poll`, with a deadline of its hold plus `POLL_DEADLINE_MARGIN`."""
        request = router_pb2.PollRequest(recipients=sorted(recipients))
        if cursor is not None:
            request.cursor = cursor.encode()
        request.hold.CopyFrom(hold_duration(hold))
        deadline = min(max(hold, 0.0), POLL_HOLD) + POLL_DEADLINE_MARGIN
        response = await self._unary(self._stub.Poll, request, deadline=deadline)
        return read_outcome(response)

    async def subscribe(
        self, recipients: frozenset[str], cursor: Cursor | None, *, hold: float = POLL_HOLD
    ) -> AsyncGenerator[PollOutcome, None]:
        """`Subscribe` as an async generator; see `RouterPort.subscribe`. A stream that
        stays silent past its hold plus `POLL_DEADLINE_MARGIN` raises `RouterUnavailable`."""
        if not hold > 0:
            raise ValueError("a subscription needs a positive hold")
        self._check_open()
        request = router_pb2.SubscribeRequest(recipients=sorted(recipients))
        if cursor is not None:
            request.cursor = cursor.encode()
        request.hold.CopyFrom(hold_duration(hold))
        silence = min(hold, POLL_HOLD) + POLL_DEADLINE_MARGIN
        call = self._stub.Subscribe(request, metadata=self._metadata)
        checked = False
        try:
            while True:
                try:
                    async with asyncio.timeout(silence):
                        response = await call.read()
                        if not checked:
                            self._check_version(await call.initial_metadata())
                            checked = True
                except TimeoutError:
                    raise RouterUnavailable(
                        f"the router subscription was silent for {silence:g} s"
                    ) from None
                except grpc.aio.AioRpcError as error:
                    self._raise_for(error)
                except asyncio.CancelledError:
                    self._raise_if_closed()
                    raise
                if response is grpc.aio.EOF:
                    return
                assert isinstance(response, router_pb2.SubscribeResponse)
                outcome = read_outcome(response)
                yield outcome
                if isinstance(outcome, FeedGap | CursorInvalid):
                    return
        finally:
            call.cancel()

    def _refused_error(self) -> Exception:
        return RouterClosedError(self._state)

    def _closed_error(self) -> Exception:
        return RouterClosedError(self._state)

    def _version_error(self, announced: str) -> Exception:
        return RouterVersionMismatch(f"the router at {self._target} speaks {announced}")

    def _failure(self, error: grpc.aio.AioRpcError) -> Exception:
        if is_version_mismatch(error):
            logger.error(
                "the router at %s speaks another harness-version: %s",
                self._target,
                describe_failure(error),
            )
            return RouterVersionMismatch(
                f"the router at {self._target} refused our version: {describe_failure(error)}",
                code=error.code().name,
            )
        return RouterUnavailable(
            f"the router at {self._target} failed the call: {describe_failure(error)}",
            code=error.code().name,
        )

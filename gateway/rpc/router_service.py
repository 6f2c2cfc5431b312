"""`harness.v1.RouterService` over any `RouterPort` (engine.md §4).

The standalone `harness-gateway router` serves its in-process ring through it, and a daemon
started with `--expose-network` serves its embedded one. The service is a thin edge: every
call is admitted by the `PeerGuard` (peer token, `harness-version`), translated into one
`RouterPort` call, and its closed outcome translated back; the Router itself keeps no
per-reader state, so neither does this service (the cursor travels with every read).

Reads end early at shutdown: `end_reads()` answers every held poll and open subscription
UNAVAILABLE (`SHUTTING_DOWN`) so none holds the server's grace, and the daemons reading
resume elsewhere or later from the cursors they hold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable
from typing import Final, NoReturn, TypeVar, assert_never

import grpc
from google.rpc import code_pb2
from harness_contract._gen.harness.v1 import router_pb2, router_pb2_grpc
from harness_contract.errors import InvalidRequestError

from gateway.registry import RegistryError
from gateway.router import (
    POLL_HOLD,
    Accepted,
    Batch,
    Cursor,
    CursorInvalid,
    FeedGap,
    IdempotencyConflict,
    MessageInvalid,
    PollOutcome,
    RetryIdentityUnknown,
    RouterClosedError,
    RouterPort,
    RouterRestarted,
    SendMode,
    SendOutcome,
)
from gateway.rpc.errors import SHUTTING_DOWN, Context, stream_rpc, unary_rpc
from gateway.rpc.peer import PeerGuard, error_status
from gateway.rpc.server import ServiceBinding

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

ROUTER_SERVICE: Final = router_pb2.DESCRIPTOR.services_by_name["RouterService"].full_name
"""`harness.v1.RouterService`: its health name and reflection entry."""

HOLD_DEADLINE_MARGIN: Final = 1.0
"""Seconds a held poll answers before the caller's deadline, so an empty batch (not
DEADLINE_EXCEEDED) reaches a caller whose deadline is shorter than the hold."""

ROUTER_UNAVAILABLE: Final = "ROUTER_UNAVAILABLE"
"""`ErrorInfo.reason` of a send the Router could not judge now (its Registry is down)."""

_MODES: Final = {
    router_pb2.ROUTER_SEND_MODE_INITIAL: SendMode.INITIAL,
    router_pb2.ROUTER_SEND_MODE_RETRY: SendMode.RETRY,
}


class _ReadsEnded(Exception):
    """The service's reads were ended by `end_reads()` (shutdown)."""


def _unavailable(message: str, reason: str) -> grpc.Status:
    return error_status(code_pb2.UNAVAILABLE, message, reason)


async def _abort_shutting_down(context: Context) -> NoReturn:
    try:
        await context.abort_with_status(
            _unavailable("the router is shutting down; retry elsewhere or later", SHUTTING_DOWN)
        )
    except grpc.aio.AbortError:
        raise
    except Exception:
        # The caller went away first (it cancelled, or its channel closed): the call has
        # ended and no status can be sent; grpc.aio owns a cancelled call.
        raise asyncio.CancelledError from None
    raise AssertionError("abort_with_status returned")  # pragma: no cover


def send_response(outcome: SendOutcome) -> router_pb2.RouterServiceSendResponse:
    """The protobuf answer of a send outcome."""
    response = router_pb2.RouterServiceSendResponse()
    match outcome:
        case Accepted(instance_id=instance_id, digest=digest):
            response.accepted.instance_id = instance_id
            response.accepted.digest = digest
        case RouterRestarted(instance_id=instance_id):
            response.router_restarted.instance_id = instance_id
        case MessageInvalid(detail=detail):
            response.message_invalid.detail = detail
        case IdempotencyConflict():
            response.idempotency_conflict.SetInParent()
        case RetryIdentityUnknown():
            response.retry_identity_unknown.SetInParent()
        case _:
            assert_never(outcome)
    return response


def fill_read_response(
    response: router_pb2.PollResponse | router_pb2.SubscribeResponse, outcome: PollOutcome
) -> None:
    """Write a read outcome into a `PollResponse` or `SubscribeResponse` (same layout)."""
    match outcome:
        case Batch(instance_id=instance_id, cursor=cursor, entries=entries):
            response.batch.instance_id = instance_id
            response.batch.cursor = cursor.encode()
            response.batch.entries.extend(
                router_pb2.RouterEntry(
                    order=entry.order,
                    signed_envelope=entry.signed_envelope,
                    recipients=entry.recipients,
                )
                for entry in entries
            )
        case FeedGap(instance_id=instance_id):
            response.feed_gap.instance_id = instance_id
        case CursorInvalid():
            response.cursor_invalid.SetInParent()
        case _:
            assert_never(outcome)


def _requested_hold(
    request: router_pb2.PollRequest | router_pb2.SubscribeRequest,
) -> float:
    if not request.HasField("hold"):
        return POLL_HOLD
    # From the fields, not `ToTimedelta()`: every int64 of seconds is a valid Duration, and one
    # past `timedelta`'s range raised OverflowError (INTERNAL and a traceback per call).
    return min(request.hold.seconds + request.hold.nanos / 1e9, POLL_HOLD)


def _requested_cursor(
    request: router_pb2.PollRequest | router_pb2.SubscribeRequest,
) -> Cursor | CursorInvalid | None:
    if not request.HasField("cursor"):
        return None
    cursor = Cursor.decode(request.cursor)
    # "cursor_invalid for a malformed cursor": answered here, the port never sees it.
    return CursorInvalid() if cursor is None else cursor


class RouterService(router_pb2_grpc.RouterServiceServicer):
    """The Router's gRPC face over one `RouterPort`."""

    def __init__(self, router: RouterPort, guard: PeerGuard) -> None:
        self._router = router
        self._guard = guard
        self._reads_ended = asyncio.Event()

    def binding(self) -> ServiceBinding:
        """This servicer as a `ServiceBinding` for `build_server` / `build_peer_server`."""
        return ServiceBinding(
            name=ROUTER_SERVICE,
            add=lambda server: router_pb2_grpc.add_RouterServiceServicer_to_server(self, server),
        )

    def end_reads(self) -> None:
        """Answer every held poll and open subscription UNAVAILABLE `SHUTTING_DOWN`, now and
        from now on (shutdown: reads must not hold the server's grace). Idempotent."""
        self._reads_ended.set()

    @unary_rpc
    async def Send(  # noqa: N802 - the gRPC method name
        self, request: router_pb2.RouterServiceSendRequest, context: Context
    ) -> router_pb2.RouterServiceSendResponse:
        """engine.md §4 Send: one `RouterPort.send`, its outcome answered as is."""
        await self._guard.admit(context)
        mode = _MODES.get(request.mode)
        if mode is None:
            raise InvalidRequestError.of_field("mode: unknown or unspecified value")
        try:
            outcome = await self._router.send(
                request.expected_instance_id, mode, request.signed_envelope
            )
        except RouterClosedError:
            await _abort_shutting_down(context)
        except RegistryError as error:
            # The envelope could not be judged, which is not `message_invalid`: the sender
            # retries the same bytes, and nothing was appended.
            logger.warning("router send refused: the registry is unavailable (%s)", error.detail)
            await context.abort_with_status(
                _unavailable(
                    "the router cannot verify envelopes right now; nothing was appended",
                    ROUTER_UNAVAILABLE,
                )
            )
        return send_response(outcome)

    @unary_rpc
    async def Poll(  # noqa: N802 - the gRPC method name
        self, request: router_pb2.PollRequest, context: Context
    ) -> router_pb2.PollResponse:
        """One long poll; held at most the requested hold (25 s), less than the deadline."""
        await self._guard.admit(context)
        response = router_pb2.PollResponse()
        cursor = _requested_cursor(request)
        if isinstance(cursor, CursorInvalid):
            fill_read_response(response, cursor)
            return response
        hold = _requested_hold(request)
        remaining = context.time_remaining()
        if remaining is not None:
            hold = min(hold, remaining - HOLD_DEADLINE_MARGIN)
        try:
            outcome = await self._unless_reads_ended(
                self._router.poll(frozenset(request.recipients), cursor, hold=hold)
            )
        except (RouterClosedError, _ReadsEnded):
            await _abort_shutting_down(context)
        fill_read_response(response, outcome)
        return response

    @stream_rpc
    async def Subscribe(  # noqa: N802 - the gRPC method name
        self, request: router_pb2.SubscribeRequest, context: Context
    ) -> AsyncGenerator[router_pb2.SubscribeResponse, None]:
        """`RouterPort.subscribe` as a server stream; a feed gap or an invalid cursor is the
        last message."""
        await self._guard.admit(context)
        cursor = _requested_cursor(request)
        if isinstance(cursor, CursorInvalid):
            response = router_pb2.SubscribeResponse()
            fill_read_response(response, cursor)
            yield response
            return
        hold = _requested_hold(request)
        if not hold > 0:
            raise InvalidRequestError.of_field("hold: a subscription needs a positive hold")
        outcomes = self._router.subscribe(frozenset(request.recipients), cursor, hold=hold)
        try:
            while True:
                try:
                    outcome = await self._unless_reads_ended(anext(outcomes))
                except StopAsyncIteration:
                    return
                except (RouterClosedError, _ReadsEnded):
                    await _abort_shutting_down(context)
                response = router_pb2.SubscribeResponse()
                fill_read_response(response, outcome)
                yield response
        finally:
            await outcomes.aclose()

    @unary_rpc
    async def GetInstance(  # noqa: N802 - the gRPC method name
        self, request: router_pb2.GetInstanceRequest, context: Context
    ) -> router_pb2.GetInstanceResponse:
        """The current `RouterInstanceId`."""
        await self._guard.admit(context)
        try:
            instance_id = await self._router.instance_id()
        except RouterClosedError:
            await _abort_shutting_down(context)
        return router_pb2.GetInstanceResponse(instance_id=instance_id)

    async def _unless_reads_ended(self, read: Awaitable[_T]) -> _T:
        """`read`'s result, or `_ReadsEnded` once `end_reads()` is called (the read is
        cancelled and awaited first)."""
        if self._reads_ended.is_set():
            if asyncio.iscoroutine(read):
                read.close()
            raise _ReadsEnded
        task = asyncio.ensure_future(read)
        ended = asyncio.ensure_future(self._reads_ended.wait())
        try:
            await asyncio.wait({task, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
            if not task.done():
                task.cancel()
                # Awaited so the port's held read has cleaned up before the call ends; a
                # cancellation of this handler still propagates from the wait above.
                await asyncio.gather(task, return_exceptions=True)
        if task.cancelled():
            raise _ReadsEnded
        return task.result()

"""The status table and the one translation of failures into gRPC statuses.

Every servicer method is marked `unary_rpc` or `stream_rpc`, and the one call wrapper
(`gateway/rpc/calls.py`) calls `failure_status` when it raises: a `HarnessError` becomes a
non-OK status whose `google.rpc.Status` details hold the closed protobuf error (when the
failure has one) and an `ErrorInfo` (domain `harness.v1`, reason in UPPER_SNAKE), logged at
DEBUG at most; an exception nobody mapped becomes INTERNAL with its traceback logged, once,
at ERROR. grpc.aio owns the status of a cancelled call, so `CancelledError` always passes
through. The marks wrap nothing: a marked method called directly raises what it raises.

The table, operations.md §3 (each contract reason declares its `StatusCode`, numbered as
gRPC's, so `harness_contract.wire.status_of` sets it as it is):

| Failure | Code |
|---|---|
| invalid-address, membership-invalid, content-invalid, schema-invalid, answer-invalid, `MessageTextError` | INVALID_ARGUMENT |
| unknown-agent | NOT_FOUND |
| not-registered, version-mismatch, members-unreachable, request-none, request-ambiguous, request-answered, request-expired, already-listening, incompatible-daemon | FAILED_PRECONDITION |
| idempotency-conflict | ALREADY_EXISTS |
| certification-unavailable, persistence-failed, network-unavailable; not ready; shutting down | UNAVAILABLE |
| delivery-pending (the post will still be sent: never resend) | DEADLINE_EXCEEDED |
| outcome-unknown (the post may have been sent) | UNKNOWN |
| too-many-operations (the asker is at its bound of open operations; a gateway extension) | RESOURCE_EXHAUSTED |
| `FirewallSendError`; a token of the wrong role | PERMISSION_DENIED |
| missing, malformed, unknown or revoked token (with an `AuthenticationError` detail) | UNAUTHENTICATED |

Beyond the contract: a malformed request (`InvalidRequestError`), an invalid idempotency key
(`INVALID_IDEMPOTENCY_KEY`), a body that does not decode as the method's request message
(`MALFORMED_REQUEST`, answered by `gateway/rpc/decoding.py` before any handler runs) and a
management `invalid-name` or `invalid-address` are INVALID_ARGUMENT, `not-found` NOT_FOUND,
`name-taken` ALREADY_EXISTS (each `ManagementErrorReason` declares its code). Not ready and
shutting down carry a `RetryInfo` of one second: the call had no effect. In a cluster, a call
for an agent homed elsewhere (`NotHome`) or whose unit the store refused because its partition
was released meanwhile (`PartitionNotHeld`, cluster.md §3.2) is UNAVAILABLE `NOT_OWNER`: it
had no effect, and the forwarder retries it at the new home. The statuses are
packed by `harness_contract.wire.status_of`, which the Python client reads back with
`error_of_status`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Final, NoReturn, TypeAlias, TypeVar

import grpc
from google.rpc import code_pb2, status_pb2
from grpc_status import rpc_status
from harness_contract import wire
from harness_contract.errors import (
    AuthenticationError,
    HarnessError,
    InvalidRequestError,
    InvalidRequestReason,
    PermissionDeniedError,
    PermissionDeniedReason,
    UnavailableError,
    UnavailableReason,
)

from gateway.endpoint.api import (
    AuthFailure,
    GatewayState,
    NotHome,
    NotServing,
    StreamEnded,
    StreamEndReason,
)
from gateway.rpc.auth import AuthRefused, authentication_reason
from gateway.store.errors import PartitionNotHeld

logger = logging.getLogger(__name__)

ERROR_DOMAIN: Final = wire.ERROR_DOMAIN
"""The `ErrorInfo.domain` of every status the gateway sets."""

INTERNAL_MESSAGE: Final = "internal error; the gateway logged it"
"""The status message of a defect; the traceback stays in the gateway's log."""

NOT_READY: Final = UnavailableReason.NOT_READY.name
"""ErrorInfo reason of a call before the gateway is SERVING."""
SHUTTING_DOWN: Final = UnavailableReason.SHUTTING_DOWN.name
"""ErrorInfo reason of a call, or an open stream, once shutdown began."""
MALFORMED_REQUEST: Final = InvalidRequestReason.MALFORMED_REQUEST.name
"""ErrorInfo reason of a request body that does not decode as the method's message."""

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
Service = TypeVar("Service")
Request = TypeVar("Request")
Response = TypeVar("Response")


def not_serving_error(state: GatewayState) -> UnavailableError:
    """What a call gets while the gateway is not SERVING (with a RetryInfo of a second)."""
    if state in (GatewayState.STOPPING, GatewayState.STOPPED):
        return UnavailableError(
            UnavailableReason.SHUTTING_DOWN,
            "the gateway is shutting down; retry elsewhere or later",
        )
    return UnavailableError(
        UnavailableReason.NOT_READY, f"the gateway is not ready yet ({state.value})"
    )


def refused_token_error(failure: AuthFailure, detail: str) -> HarnessError:
    """What a call with a refused token gets: UNAUTHENTICATED with its reason, or
    PERMISSION_DENIED `wrong-role` for a valid token of the other API."""
    reason = authentication_reason(failure)
    if reason is None:
        return PermissionDeniedError(
            PermissionDeniedReason.WRONG_ROLE, f"permission denied: {detail}"
        )
    return AuthenticationError(reason, f"authentication failed: {detail}")


def status_for(error: BaseException) -> status_pb2.Status | None:
    """The rich status a failure travels as, or None for a defect (INTERNAL)."""
    match error:
        case HarnessError():
            return wire.status_of(error)
        case AuthRefused(failure=failure, detail=detail):
            return wire.status_of(refused_token_error(failure, detail))
        case NotServing(state=state):
            return wire.status_of(not_serving_error(state))
        case NotHome():
            return wire.status_of(
                UnavailableError(
                    UnavailableReason.NOT_OWNER,
                    "this replica is not the agent's home; retry (the call reaches its home)",
                )
            )
        case PartitionNotHeld():
            # The store seam refused the call's unit: its partition was released meanwhile
            # (cluster.md §3.2); nothing of it was written, so it is retried at the new home.
            return wire.status_of(
                UnavailableError(
                    UnavailableReason.NOT_OWNER,
                    "this replica no longer holds the call's partition; retry (the call "
                    "reaches its home)",
                )
            )
        case StreamEnded(reason=StreamEndReason.SHUTDOWN):
            return wire.status_of(not_serving_error(GatewayState.STOPPING))
        case StreamEnded(reason=StreamEndReason.REVOKED):
            return wire.status_of(refused_token_error(AuthFailure.REVOKED, "the token was revoked"))
        case StreamEnded(reason=StreamEndReason.CLIENT_CLOSED):
            # The client is gone; nobody reads this status, so it carries no detail.
            return status_pb2.Status(
                code=grpc.StatusCode.CANCELLED.value[0], message="the stream was closed"
            )
        case _:
            return None


def malformed_request_status(type_name: str) -> grpc.Status:
    """INVALID_ARGUMENT `MALFORMED_REQUEST` for a body that is not a valid `type_name` (the
    request message's full name, or the method when it has none); nothing of the body is
    echoed."""
    error = InvalidRequestError(
        InvalidRequestReason.MALFORMED_REQUEST, f"the request body is not a valid {type_name}"
    )
    converted: grpc.Status = rpc_status.to_status(wire.status_of(error))
    return converted


def internal_status() -> status_pb2.Status:
    """INTERNAL, for a defect; nothing of the exception reaches the caller."""
    return status_pb2.Status(code=code_pb2.INTERNAL, message=INTERNAL_MESSAGE)


async def abort_with(context: Context, error: BaseException) -> NoReturn:
    """End the call with the status `error` travels as (INTERNAL for a defect)."""
    status = status_for(error)
    if status is None:
        status = internal_status()
    await context.abort_with_status(rpc_status.to_status(status))
    raise AssertionError("abort_with_status returned")  # pragma: no cover


def failure_status(error: Exception, method: str) -> grpc.Status:
    """The status a call of `method` whose servicer raised `error` ends with; a defect (no
    status of its own) is INTERNAL and its traceback is logged here, once, at ERROR; a
    failure of the vocabulary is a client's or the system's state, logged at DEBUG."""
    status = status_for(error)
    if status is None:
        logger.error("rpc %s failed", method, exc_info=error)
        status = internal_status()
    else:
        logger.debug("rpc %s refused: %s", method, type(error).__name__)
    converted: grpc.Status = rpc_status.to_status(status)
    return converted


_TRANSLATED: Final = "__harness_translated__"
"""The attribute `unary_rpc` and `stream_rpc` set on the servicer methods they mark."""


def is_translated(behavior: object) -> bool:
    """Whether `behavior` (a servicer method, bound or not) is marked: its failures become
    statuses through `failure_status`."""
    return getattr(behavior, _TRANSLATED, False) is True


def unary_rpc(
    method: Callable[[Service, Request, Context], Awaitable[Response]],
) -> Callable[[Service, Request, Context], Awaitable[Response]]:
    """Mark a unary servicer method: the call wrapper turns its failures into statuses and
    its defects into INTERNAL. Returns `method` itself: nothing is added per call."""
    if not inspect.iscoroutinefunction(method):
        raise TypeError(f"unary_rpc: {method.__qualname__} is not a coroutine function")
    setattr(method, _TRANSLATED, True)
    return method


def stream_rpc(
    method: Callable[[Service, Request, Context], AsyncGenerator[Response, None]],
) -> Callable[[Service, Request, Context], AsyncGenerator[Response, None]]:
    """Mark a server-streaming servicer method (an async generator): as `unary_rpc`; the
    call wrapper also `aclose()`s the generator however the call ends."""
    if not inspect.isasyncgenfunction(method):
        raise TypeError(f"stream_rpc: {method.__qualname__} is not an async generator function")
    setattr(method, _TRANSLATED, True)
    return method


__all__ = [
    "ERROR_DOMAIN",
    "MALFORMED_REQUEST",
    "NOT_READY",
    "SHUTTING_DOWN",
    "abort_with",
    "failure_status",
    "internal_status",
    "is_translated",
    "malformed_request_status",
    "status_for",
    "stream_rpc",
    "unary_rpc",
]

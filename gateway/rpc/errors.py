"""The status table and the one translation of failures into gRPC statuses.

Every servicer method is wrapped by `unary_rpc` or `stream_rpc`: a `HarnessError` becomes
a non-OK status whose `google.rpc.Status` details hold the closed protobuf error (when the
failure has one) and an `ErrorInfo` (domain `harness.v1`, reason in UPPER_SNAKE); an
exception nobody mapped becomes INTERNAL with its traceback logged. grpc.aio owns the status
of a cancelled call, so `CancelledError` always passes through.

The table, operations.md §3 (each contract reason declares its `StatusCode`; `STATUS_CODES`
turns ours into gRPC's):

| Failure | Code |
|---|---|
| invalid-address, membership-invalid, content-invalid, schema-invalid, answer-invalid, `MessageTextError` | INVALID_ARGUMENT |
| unknown-agent | NOT_FOUND |
| not-registered, version-mismatch, members-unreachable, request-none, request-ambiguous, request-answered, request-expired, already-listening, incompatible-daemon | FAILED_PRECONDITION |
| idempotency-conflict | ALREADY_EXISTS |
| certification-unavailable, persistence-failed, network-unavailable; not ready; shutting down | UNAVAILABLE |
| delivery-pending (the post will still be sent: never resend) | DEADLINE_EXCEEDED |
| outcome-unknown (the post may have been sent) | UNKNOWN |
| `FirewallSendError`; a token of the wrong role | PERMISSION_DENIED |
| missing, malformed, unknown or revoked token (with an `AuthenticationError` detail) | UNAUTHENTICATED |

Beyond the contract: a malformed request (`InvalidRequest`), an invalid idempotency key
(`INVALID_IDEMPOTENCY_KEY`), a body that does not decode as the method's request message
(`MALFORMED_REQUEST`, answered by `gateway/rpc/decoding.py` before any handler runs) and a
management `invalid-name` or `invalid-address` are INVALID_ARGUMENT, `not-found` NOT_FOUND,
`name-taken` ALREADY_EXISTS (`MANAGEMENT_CODES`, one entry per `ManagementErrorReason`). Not
ready and shutting down carry a `RetryInfo` of one second: the call had no effect.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Mapping
from typing import Any, Final, NoReturn, TypeAlias, TypeVar

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from harness_contract.errors import HarnessError, StatusCode

from gateway.endpoint.api import (
    AuthFailure,
    GatewayState,
    ManagementError,
    ManagementErrorReason,
    NotServing,
    StreamEnded,
    StreamEndReason,
)
from gateway.rpc import convert
from gateway.rpc.auth import AuthRefused, authentication_reason
from gateway.rpc.convert import InvalidRequest

logger = logging.getLogger(__name__)

ERROR_DOMAIN: Final = "harness.v1"
"""The `ErrorInfo.domain` of every status the gateway sets."""

RETRY_DELAY_SECONDS: Final = 1
"""`RetryInfo.retry_delay` of NOT_READY and SHUTTING_DOWN (operations.md §5 step 4)."""

INTERNAL_MESSAGE: Final = "internal error; the gateway logged it"
"""The status message of a defect; the traceback stays in the gateway's log."""

STATUS_CODES: Final[Mapping[StatusCode, grpc.StatusCode]] = {
    StatusCode.OK: grpc.StatusCode.OK,
    StatusCode.CANCELLED: grpc.StatusCode.CANCELLED,
    StatusCode.UNKNOWN: grpc.StatusCode.UNKNOWN,
    StatusCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    StatusCode.DEADLINE_EXCEEDED: grpc.StatusCode.DEADLINE_EXCEEDED,
    StatusCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    StatusCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    StatusCode.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    StatusCode.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    StatusCode.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    StatusCode.ABORTED: grpc.StatusCode.ABORTED,
    StatusCode.OUT_OF_RANGE: grpc.StatusCode.OUT_OF_RANGE,
    StatusCode.UNIMPLEMENTED: grpc.StatusCode.UNIMPLEMENTED,
    StatusCode.INTERNAL: grpc.StatusCode.INTERNAL,
    StatusCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    StatusCode.DATA_LOSS: grpc.StatusCode.DATA_LOSS,
    StatusCode.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
}
"""Our mirror of the status codes to gRPC's: the one table (operations.md §3)."""

MANAGEMENT_CODES: Final[Mapping[ManagementErrorReason, grpc.StatusCode]] = {
    ManagementErrorReason.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ManagementErrorReason.NAME_TAKEN: grpc.StatusCode.ALREADY_EXISTS,
    ManagementErrorReason.INVALID_NAME: grpc.StatusCode.INVALID_ARGUMENT,
    ManagementErrorReason.INVALID_ADDRESS: grpc.StatusCode.INVALID_ARGUMENT,
}
"""Every `ManagementError.reason` to gRPC; a unit test checks that no reason is missing."""

NOT_READY: Final = "NOT_READY"
"""ErrorInfo reason of a call before the gateway is SERVING."""
SHUTTING_DOWN: Final = "SHUTTING_DOWN"
"""ErrorInfo reason of a call, or an open stream, once shutdown began."""
MALFORMED_REQUEST: Final = "MALFORMED_REQUEST"
"""ErrorInfo reason of a request body that does not decode as the method's message."""

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
Service = TypeVar("Service")
Request = TypeVar("Request")
Response = TypeVar("Response")


def _reason_text(reason: str) -> str:
    return reason.upper().replace("-", "_")


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def _status(
    code: grpc.StatusCode,
    message: str,
    reason: str,
    *,
    detail: Any = None,
    retry: bool = False,
) -> status_pb2.Status:
    status = status_pb2.Status(code=code.value[0], message=message)
    if detail is not None:
        status.details.append(_pack(detail))
    status.details.append(_pack(error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN)))
    if retry:
        status.details.append(
            _pack(
                error_details_pb2.RetryInfo(
                    retry_delay=duration_pb2.Duration(seconds=RETRY_DELAY_SECONDS)
                )
            )
        )
    return status


def _not_serving(state: GatewayState) -> status_pb2.Status:
    if state in (GatewayState.STOPPING, GatewayState.STOPPED):
        return _status(
            grpc.StatusCode.UNAVAILABLE,
            "the gateway is shutting down; retry elsewhere or later",
            SHUTTING_DOWN,
            retry=True,
        )
    return _status(
        grpc.StatusCode.UNAVAILABLE,
        f"the gateway is not ready yet ({state.value})",
        NOT_READY,
        retry=True,
    )


def _auth(failure: AuthFailure, detail: str) -> status_pb2.Status:
    reason = authentication_reason(failure)
    if reason is None:
        return _status(
            grpc.StatusCode.PERMISSION_DENIED,
            f"permission denied: {detail}",
            _reason_text(failure.value),
        )
    return _status(
        grpc.StatusCode.UNAUTHENTICATED,
        f"authentication failed: {detail}",
        _reason_text(failure.value),
        detail=convert.authentication_error_to_proto(reason),
    )


def status_for(error: BaseException) -> status_pb2.Status | None:
    """The rich status a failure travels as, or None for a defect (INTERNAL)."""
    match error:
        case HarnessError():
            return _status(
                STATUS_CODES[error.status_code],
                error.message,
                error.error_info_reason,
                detail=convert.error_to_proto(error),
            )
        case AuthRefused(failure=failure, detail=detail):
            return _auth(failure, detail)
        case NotServing(state=state):
            return _not_serving(state)
        case ManagementError(reason=reason, detail=detail):
            return _status(MANAGEMENT_CODES[reason], detail, _reason_text(reason))
        case StreamEnded(reason=StreamEndReason.SHUTDOWN):
            return _not_serving(GatewayState.STOPPING)
        case StreamEnded(reason=StreamEndReason.REVOKED):
            return _auth(AuthFailure.REVOKED, "the token was revoked")
        case StreamEnded(reason=StreamEndReason.CLIENT_CLOSED):
            return _status(grpc.StatusCode.CANCELLED, "the stream was closed", "CLIENT_CLOSED")
        case _:
            return None


def malformed_request_status(type_name: str) -> grpc.Status:
    """INVALID_ARGUMENT `MALFORMED_REQUEST` for a body that is not a valid `type_name` (the
    request message's full name, or the method when it has none); nothing of the body is
    echoed."""
    status = _status(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"the request body is not a valid {type_name}",
        MALFORMED_REQUEST,
    )
    converted: grpc.Status = rpc_status.to_status(status)
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


async def _translate(context: Context, error: Exception, method: str) -> NoReturn:
    if status_for(error) is None:
        # A defect: the traceback is the only record of it, so it is logged here, once.
        logger.error("rpc %s failed", method, exc_info=error)
    else:
        logger.debug("rpc %s refused: %s", method, type(error).__name__)
    await abort_with(context, error)


def unary_rpc(
    method: Callable[[Service, Request, Context], Awaitable[Response]],
) -> Callable[[Service, Request, Context], Coroutine[Any, Any, Response]]:
    """Wrap a unary servicer method: failures become statuses, defects INTERNAL."""

    @functools.wraps(method)
    async def handler(service: Service, request: Request, context: Context) -> Response:
        try:
            return await method(service, request, context)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as error:
            await _translate(context, error, method.__name__)

    return handler


def stream_rpc(
    method: Callable[[Service, Request, Context], AsyncGenerator[Response, None]],
) -> Callable[[Service, Request, Context], AsyncGenerator[Response, None]]:
    """Wrap a server-streaming servicer method; the inner generator is always closed."""

    @functools.wraps(method)
    async def handler(
        service: Service, request: Request, context: Context
    ) -> AsyncGenerator[Response, None]:
        responses = method(service, request, context)
        try:
            async for response in responses:
                yield response
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as error:
            await _translate(context, error, method.__name__)
        finally:
            await responses.aclose()

    return handler


__all__ = [
    "ERROR_DOMAIN",
    "MALFORMED_REQUEST",
    "MANAGEMENT_CODES",
    "NOT_READY",
    "SHUTTING_DOWN",
    "STATUS_CODES",
    "InvalidRequest",
    "abort_with",
    "internal_status",
    "malformed_request_status",
    "status_for",
    "stream_rpc",
    "unary_rpc",
]

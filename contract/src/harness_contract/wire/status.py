"""A failure as the `google.rpc.Status` a call ends with (`status_of`) and back
(`error_of_status`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Final

from google.protobuf import any_pb2, duration_pb2
from google.protobuf import message as protobuf_message
from google.rpc import error_details_pb2, status_pb2

from harness_contract._gen.harness.v1 import errors_pb2
from harness_contract.errors import (
    HarnessError,
    InvalidIdempotencyKeyError,
    InvalidRequestError,
    InvalidRequestReason,
    PermissionDeniedError,
    PermissionDeniedReason,
    SendError,
    SendErrorReason,
    UnavailableError,
    UnavailableReason,
)
from harness_contract.management import ManagementError, ManagementErrorReason
from harness_contract.wire.errors import ErrorDetail, error_from_proto, error_to_proto

ERROR_DOMAIN: Final = "harness.v1"
"""The `ErrorInfo.domain` of every status the gateway sets."""

RETRY_DELAY_SECONDS: Final = 1
"""`RetryInfo.retry_delay` of `not-ready` and `shutting-down` (operations.md §5 step 4)."""

_DETAIL_TYPES: Final[Mapping[str, type[ErrorDetail]]] = {
    message.DESCRIPTOR.full_name: message
    for message in (
        errors_pb2.SendError,
        errors_pb2.CollectiveError,
        errors_pb2.FirewallSendError,
        errors_pb2.ListenError,
        errors_pb2.DeliveryAcknowledgeError,
        errors_pb2.ConnectError,
        errors_pb2.MessageTextError,
        errors_pb2.IdempotencyConflict,
        errors_pb2.AuthenticationError,
    )
}

_BY_ERROR_INFO: Final[Mapping[str, Callable[[str], HarnessError]]] = {
    **{reason.name: functools.partial(ManagementError, reason) for reason in ManagementErrorReason},
    **{reason.name: functools.partial(UnavailableError, reason) for reason in UnavailableReason},
    **{
        reason.name: functools.partial(PermissionDeniedError, reason)
        for reason in PermissionDeniedReason
    },
    **{
        reason.name: functools.partial(InvalidRequestError, reason)
        for reason in InvalidRequestReason
        if reason is not InvalidRequestReason.INVALID_IDEMPOTENCY_KEY
    },
    "INVALID_IDEMPOTENCY_KEY": lambda _message: InvalidIdempotencyKeyError(),
}
"""The failures a status names by its ErrorInfo reason alone (no closed detail), each
keeping the status text."""


def _pack(message: protobuf_message.Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def status_of(error: HarnessError) -> status_pb2.Status:
    """The `google.rpc.Status` a call that failed with `error` ends with: the closed
    detail first (when the failure has one), then an `ErrorInfo` (domain `harness.v1`,
    the reason in UPPER_SNAKE), then a `RetryInfo` for a gateway not serving."""
    status = status_pb2.Status(code=error.status_code.value, message=error.message)
    detail = error_to_proto(error)
    if detail is not None:
        status.details.append(_pack(detail))
    status.details.append(
        _pack(error_details_pb2.ErrorInfo(reason=error.error_info_reason, domain=ERROR_DOMAIN))
    )
    if isinstance(error, UnavailableError):
        retry = error_details_pb2.RetryInfo(
            retry_delay=duration_pb2.Duration(seconds=RETRY_DELAY_SECONDS)
        )
        status.details.append(_pack(retry))
    return status


def error_of_status(status: status_pb2.Status) -> HarnessError | None:
    """The typed failure a status stands for, or None when it names none this version
    knows (a transport failure, or a reason from a newer gateway)."""
    reason: str | None = None
    for packed in status.details:
        detail_type = _DETAIL_TYPES.get(packed.TypeName())
        if detail_type is not None:
            detail = detail_type()
            if not packed.Unpack(detail):
                return None
            try:
                return error_from_proto(detail, status.message)
            except InvalidRequestError:
                if isinstance(detail, errors_pb2.SendError):
                    # A reason from a newer gateway: the send may or may not have happened.
                    return SendError(SendErrorReason.OUTCOME_UNKNOWN)
                return None
        if packed.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            packed.Unpack(info)
            if info.domain == ERROR_DOMAIN:
                reason = info.reason
    if reason is None:
        return None
    build = _BY_ERROR_INFO.get(reason)
    return None if build is None else build(status.message)

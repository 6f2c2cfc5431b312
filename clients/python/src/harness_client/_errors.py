"""The client's own failures, and `decode_status`, which reads a failed call's status.

Every contract failure (`SendError`, `CollectiveError`, ..., `AuthenticationError`) is the
`harness_contract` type the gateway raises itself, decoded by `harness_contract.wire`; this
module adds only what happens on the client's side of the wire:

    HarnessError (harness_contract.errors)
    ├── ... every contract failure
    ├── TransportError       the call failed below the API (no typed status)
    └── EndpointClosedError  the endpoint or client was closed
"""

from __future__ import annotations

import enum
from typing import Final

import grpc
from google.protobuf import message as protobuf_message
from google.rpc import status_pb2
from harness_contract import wire
from harness_contract.errors import HarnessError, StatusCode

STATUS_DETAILS_KEY: Final = "grpc-status-details-bin"
"""The trailing metadata key holding the serialized `google.rpc.Status`."""


class ClientReason(enum.StrEnum):
    """Reasons of the failures only the client raises."""

    CLOSED = "closed"
    """The endpoint or client was closed."""


class TransportError(HarnessError):
    """The call failed below the API: `reason` is the gRPC code in kebab-case
    (`unavailable`, `deadline-exceeded`, `cancelled`, `internal`, ...), and the message the
    transport's own text. Whether the call had an effect is unknown unless the code says."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self._message = message

    @property
    def reason(self) -> str:
        return str(self.code.name).lower().replace("_", "-")

    @property
    def message(self) -> str:
        return self._message

    @property
    def status_code(self) -> StatusCode:
        return StatusCode(self.code.value[0])

    def __repr__(self) -> str:
        return f"TransportError({self.reason!r}, {self._message!r})"


class EndpointClosedError(HarnessError):
    """The endpoint or client was closed (`closed`); open a new one."""

    def __init__(self) -> None:
        super().__init__("the endpoint is closed")

    @property
    def reason(self) -> ClientReason:
        return ClientReason.CLOSED

    @property
    def message(self) -> str:
        return "the endpoint is closed"

    @property
    def status_code(self) -> StatusCode:
        return StatusCode.CANCELLED


def status_of_call(error: grpc.aio.AioRpcError) -> status_pb2.Status:
    """The `google.rpc.Status` a failed call ended with: its `grpc-status-details-bin`
    trailer, or just its code and text when it has none (or none that decodes)."""
    for key, value in error.trailing_metadata() or ():
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            try:
                return status_pb2.Status.FromString(value)
            except protobuf_message.DecodeError:
                break
    return status_pb2.Status(code=error.code().value[0], message=error.details() or "")


def decode_status(error: grpc.aio.AioRpcError) -> HarnessError:
    """The typed error a failed call stands for: the contract failure its status names,
    else a `TransportError` with the call's code and text."""
    status = status_of_call(error)
    decoded = wire.error_of_status(status)
    if decoded is not None:
        return decoded
    return TransportError(error.code(), status.message or error.details() or "")

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, cast

import grpc
import harness_client
import pytest
from google.rpc import error_details_pb2, status_pb2
from harness_client import to_json
from harness_contract.errors import (
    CollectiveError,
    ConnectError,
    DeliveryAcknowledgeError,
    FirewallSendError,
    HarnessError,
    IdempotencyConflictError,
    InvalidRequestError,
    ListenError,
    MessageTextError,
    SendError,
    SendErrorReason,
    StatusCode,
)

from gateway.endpoint.api import (
    AuthFailure,
    GatewayState,
    ManagementError,
    ManagementErrorReason,
    NotHome,
    NotServing,
)
from gateway.endpoint.inbox import StreamEnded, StreamEndReason
from gateway.rpc import errors
from gateway.rpc.auth import AuthRefused
from gateway.rpc.calls import RpcCalls
from gateway.store.errors import PartitionNotHeld
from tests.unit.rpc.samples import CLOSED_ERRORS
from tests.unit.rpc.support import as_rpc_error

# operations.md §3, "Status codes", written out once more so the code is checked against
# the document rather than against itself.
OPERATIONS_TABLE: dict[str, grpc.StatusCode] = {
    "invalid-address": grpc.StatusCode.INVALID_ARGUMENT,
    "membership-invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "content-invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "schema-invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "answer-invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "message-text-invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "unknown-agent": grpc.StatusCode.NOT_FOUND,
    "not-registered": grpc.StatusCode.FAILED_PRECONDITION,
    "version-mismatch": grpc.StatusCode.FAILED_PRECONDITION,
    "members-unreachable": grpc.StatusCode.FAILED_PRECONDITION,
    "request-none": grpc.StatusCode.FAILED_PRECONDITION,
    "request-ambiguous": grpc.StatusCode.FAILED_PRECONDITION,
    "request-answered": grpc.StatusCode.FAILED_PRECONDITION,
    "request-expired": grpc.StatusCode.FAILED_PRECONDITION,
    "already-listening": grpc.StatusCode.FAILED_PRECONDITION,
    "incompatible-daemon": grpc.StatusCode.FAILED_PRECONDITION,
    "idempotency-conflict": grpc.StatusCode.ALREADY_EXISTS,
    "certification-unavailable": grpc.StatusCode.UNAVAILABLE,
    "persistence-failed": grpc.StatusCode.UNAVAILABLE,
    "network-unavailable": grpc.StatusCode.UNAVAILABLE,
    "delivery-pending": grpc.StatusCode.DEADLINE_EXCEEDED,
    "outcome-unknown": grpc.StatusCode.UNKNOWN,
    "too-many-operations": grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def expected_code(error: HarnessError) -> grpc.StatusCode:
    match error:
        case FirewallSendError():
            return grpc.StatusCode.PERMISSION_DENIED
        case DeliveryAcknowledgeError():
            # Per-token results, never a status; only a client raises one on its side.
            return grpc.StatusCode.FAILED_PRECONDITION
        case ConnectError():
            return grpc.StatusCode.UNAVAILABLE  # client side only
        case ListenError() if error.reason in ("transport-failed", "decode-failed"):
            return grpc.StatusCode.UNAVAILABLE  # client side only
        case _:
            return OPERATIONS_TABLE[error.reason]


def status_of(error: BaseException) -> Any:
    status = errors.status_for(error)
    assert status is not None
    return status


def error_info(status: status_pb2.Status) -> error_details_pb2.ErrorInfo:
    for packed in status.details:
        if packed.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            packed.Unpack(info)
            return info
    raise AssertionError("no ErrorInfo")


def test_every_status_code_of_the_contract_is_the_grpc_code_of_the_same_name_and_number():
    # The contract's codes go on the wire as their numbers (`wire.status_of`): each must be
    # gRPC's code of that name, and every gRPC code must have its mirror.
    assert {code.name for code in StatusCode} == {code.name for code in grpc.StatusCode}
    for ours in StatusCode:
        assert grpc.StatusCode[ours.name].value[0] == ours.value


@pytest.mark.parametrize(
    "error", CLOSED_ERRORS, ids=lambda error: f"{type(error).__name__}-{error.reason}"
)
def test_every_closed_error_travels_under_the_operations_table_code(error):
    status = status_of(error)
    assert status is not None
    assert status.code == expected_code(error).value[0]
    assert status.message == error.message
    info = error_info(status)
    assert info.domain == "harness.v1"
    assert info.reason == error.error_info_reason


@pytest.mark.parametrize(
    "error", CLOSED_ERRORS, ids=lambda error: f"{type(error).__name__}-{error.reason}"
)
def test_every_closed_error_decodes_on_the_client_to_the_same_typed_error_and_message(error):
    status = status_of(error)
    assert status is not None
    decoded = harness_client.decode_status(as_rpc_error(status))
    assert type(decoded).__name__ == type(error).__name__
    assert str(decoded.reason) == error.reason
    assert decoded.message == error.message
    match error:
        case SendError():
            assert isinstance(decoded, harness_client.SendError)
            assert decoded.detail == error.detail
        case CollectiveError():
            assert isinstance(decoded, harness_client.CollectiveError)
            assert decoded.id == error.id
            assert decoded.kind == error.kind.value
        case FirewallSendError():
            assert isinstance(decoded, harness_client.FirewallSendError)
            assert decoded.instruction == error.instruction
            assert decoded.check_id == error.check_id
        case IdempotencyConflictError():
            assert isinstance(decoded, harness_client.IdempotencyConflictError)
            assert decoded.key == error.key
        case MessageTextError():
            assert isinstance(decoded, harness_client.MessageTextError)
            assert decoded.detail == error.detail
        case _:
            pass


def test_the_client_json_of_a_decoded_send_failure_equals_the_gateway_codec_json():
    from harness_contract.codec import error_to_json

    for error in CLOSED_ERRORS:
        if not isinstance(error, SendError | CollectiveError | FirewallSendError):
            continue
        status = status_of(error)
        decoded = harness_client.decode_status(as_rpc_error(status))
        assert _plain(to_json(decoded)) == _plain(error_to_json(error))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


@pytest.mark.parametrize(
    ("failure", "code", "client_type", "reason"),
    [
        (
            AuthFailure.MISSING,
            grpc.StatusCode.UNAUTHENTICATED,
            harness_client.AuthenticationError,
            "missing",
        ),
        (
            AuthFailure.MALFORMED,
            grpc.StatusCode.UNAUTHENTICATED,
            harness_client.AuthenticationError,
            "malformed",
        ),
        (
            AuthFailure.UNKNOWN,
            grpc.StatusCode.UNAUTHENTICATED,
            harness_client.AuthenticationError,
            "unknown",
        ),
        (
            AuthFailure.REVOKED,
            grpc.StatusCode.UNAUTHENTICATED,
            harness_client.AuthenticationError,
            "revoked",
        ),
        (
            AuthFailure.WRONG_ROLE,
            grpc.StatusCode.PERMISSION_DENIED,
            harness_client.PermissionDeniedError,
            "wrong-role",
        ),
    ],
)
def test_auth_failures_are_unauthenticated_or_permission_denied(failure, code, client_type, reason):
    status = status_of(AuthRefused(failure, "why"))
    assert status.code == code.value[0]
    decoded = harness_client.decode_status(as_rpc_error(status))
    assert isinstance(decoded, client_type)
    assert decoded.reason == reason


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        (GatewayState.STARTING, "NOT_READY"),
        (GatewayState.RECOVERING, "NOT_READY"),
        (GatewayState.STOPPING, "SHUTTING_DOWN"),
        (GatewayState.STOPPED, "SHUTTING_DOWN"),
    ],
)
def test_a_gateway_not_serving_is_unavailable_with_a_one_second_retry(state, reason):
    status = status_of(NotServing(state))
    assert status.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert error_info(status).reason == reason
    retry = [d for d in status.details if d.Is(error_details_pb2.RetryInfo.DESCRIPTOR)]
    assert len(retry) == 1
    info = error_details_pb2.RetryInfo()
    retry[0].Unpack(info)
    assert info.retry_delay.seconds == 1
    decoded = harness_client.decode_status(as_rpc_error(status))
    assert isinstance(decoded, harness_client.UnavailableError)
    assert decoded.reason == reason.lower().replace("_", "-")


@pytest.mark.parametrize(
    "error", [NotHome("agt_x"), PartitionNotHeld((3,))], ids=["not-home", "partition-not-held"]
)
def test_a_call_this_replica_no_longer_homes_is_unavailable_not_owner(error):
    # cluster.md §3.2, §4.1: no effect here; the forwarder retries it at the new home.
    status = status_of(error)
    assert status.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert error_info(status).reason == "NOT_OWNER"
    decoded = harness_client.decode_status(as_rpc_error(status))
    assert isinstance(decoded, harness_client.UnavailableError)
    assert decoded.reason == "not-owner"


# The management reasons beyond the contract (the module docstring of gateway/rpc/errors.py),
# written out here so the table is checked against its documentation.
MANAGEMENT_TABLE: dict[str, grpc.StatusCode] = {
    "not-found": grpc.StatusCode.NOT_FOUND,
    "name-taken": grpc.StatusCode.ALREADY_EXISTS,
    "invalid-name": grpc.StatusCode.INVALID_ARGUMENT,
    "invalid-address": grpc.StatusCode.INVALID_ARGUMENT,
}


def test_every_management_reason_has_a_status_code_and_the_documented_one():
    assert {
        reason.value: grpc.StatusCode[reason.status_code.name] for reason in ManagementErrorReason
    } == MANAGEMENT_TABLE


@pytest.mark.parametrize("reason", list(ManagementErrorReason))
def test_management_errors_map_to_their_codes_and_decode_with_their_text(
    reason: ManagementErrorReason,
):
    status = status_of(ManagementError(reason, "agent:bob is not hosted here"))
    assert status.code == MANAGEMENT_TABLE[reason].value[0]
    assert error_info(status).reason == reason.upper().replace("-", "_")
    decoded = harness_client.decode_status(as_rpc_error(status))
    assert isinstance(decoded, harness_client.ManagementError)
    assert decoded.reason == reason
    assert decoded.message == "agent:bob is not hosted here"


def test_an_invalid_request_is_invalid_argument_and_decodes_as_such():
    status = status_of(InvalidRequestError.of_field("input: neither a message nor an answer"))
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    decoded = harness_client.decode_status(as_rpc_error(status))
    assert isinstance(decoded, harness_client.InvalidRequestError)


def test_a_stream_ended_by_shutdown_or_revocation_has_the_matching_status():
    shutdown = status_of(StreamEnded(StreamEndReason.SHUTDOWN))
    assert shutdown.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert error_info(shutdown).reason == "SHUTTING_DOWN"
    revoked = status_of(StreamEnded(StreamEndReason.REVOKED))
    assert revoked.code == grpc.StatusCode.UNAUTHENTICATED.value[0]
    assert error_info(revoked).reason == "REVOKED"


def test_an_unmapped_exception_has_no_status_and_becomes_internal():
    assert errors.status_for(RuntimeError("boom")) is None
    assert errors.internal_status().code == grpc.StatusCode.INTERNAL.value[0]


def test_a_status_without_details_decodes_as_a_transport_error():
    decoded = harness_client.decode_status(
        grpc.aio.AioRpcError(
            grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details="down"
        )
    )
    assert isinstance(decoded, harness_client.TransportError)
    assert decoded.reason == "unavailable"
    assert decoded.code is grpc.StatusCode.UNAVAILABLE


def test_a_send_error_reason_from_a_newer_gateway_is_outcome_unknown_on_the_client():
    from google.protobuf import any_pb2
    from harness_contract._gen.harness.v1 import errors_pb2

    status = status_pb2.Status(code=grpc.StatusCode.UNKNOWN.value[0], message="send failed: ?")
    packed = any_pb2.Any()
    packed.Pack(errors_pb2.SendError(reason=99))  # type: ignore[arg-type]
    status.details.append(packed)
    decoded = harness_client.decode_status(as_rpc_error(status))
    assert isinstance(decoded, harness_client.SendError)
    assert decoded.reason is harness_client.SendErrorReason.OUTCOME_UNKNOWN


class _Context:
    """Just enough of a servicer context to observe an abort."""

    def __init__(self) -> None:
        self.status: Any = None

    async def abort_with_status(self, status: grpc.Status) -> None:
        self.status = status
        raise grpc.aio.AbortError()

    def code(self) -> grpc.StatusCode | None:
        return None if self.status is None else self.status.code

    def time_remaining(self) -> float | None:
        return None


class _Service:
    @errors.unary_rpc
    async def Fails(self, request: object, context: Any) -> object:
        raise RuntimeError("a defect")

    @errors.unary_rpc
    async def Refuses(self, request: object, context: Any) -> object:
        raise SendError(SendErrorReason.NOT_REGISTERED)

    @errors.stream_rpc
    async def Streams(self, request: object, context: Any):
        yield 1
        raise NotServing(GatewayState.STOPPING)

    async def Unmarked(self, request: object, context: Any) -> object:
        raise RuntimeError("not ours to translate")


def _wrapped(behavior: Any) -> Any:
    """`behavior` as the server calls it: through its one call wrapper (no metrics)."""
    factory = (
        grpc.unary_stream_rpc_method_handler
        if inspect.isasyncgenfunction(behavior)
        else grpc.unary_unary_rpc_method_handler
    )
    handler: Any = RpcCalls().handler("/x.Y/Z", factory(behavior))
    return handler.unary_stream or handler.unary_unary


async def test_the_wrapper_turns_a_defect_into_internal_and_logs_its_traceback(caplog):
    context: Any = _Context()
    with (
        caplog.at_level(logging.ERROR, logger="gateway.rpc.errors"),
        pytest.raises(grpc.aio.AbortError),
    ):
        await _wrapped(_Service().Fails)(object(), context)
    assert context.status is not None
    assert context.status.code is grpc.StatusCode.INTERNAL
    assert "a defect" not in context.status.details
    assert [record.levelno for record in caplog.records if record.exc_info] == [logging.ERROR]


async def test_the_wrapper_turns_a_contract_failure_into_its_status_without_an_error_line(caplog):
    context: Any = _Context()
    with caplog.at_level(logging.DEBUG), pytest.raises(grpc.aio.AbortError):
        await _wrapped(_Service().Refuses)(object(), context)
    assert context.status.code is grpc.StatusCode.FAILED_PRECONDITION
    assert (
        context.status.details == "send failed: this agent is not registered with the gateway yet"
    )
    assert all(record.levelno < logging.WARNING for record in caplog.records)


async def test_the_stream_wrapper_yields_then_ends_with_the_status_of_the_failure():
    context: Any = _Context()
    received: list[object] = []

    async def consume() -> None:
        async for item in _wrapped(_Service().Streams)(object(), context):
            received.append(item)  # noqa: PERF401 - the list must hold what came before the failure

    with pytest.raises(grpc.aio.AbortError):
        await consume()
    assert received == [1]
    assert context.status.code is grpc.StatusCode.UNAVAILABLE


async def test_the_wrapper_lets_cancellation_through():
    class Cancelled:
        @errors.unary_rpc
        async def Call(self, request: object, context: Any) -> object:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await _wrapped(Cancelled().Call)(object(), cast(Any, _Context()))


async def test_an_unmarked_method_raises_through_the_wrapper_for_grpc_to_answer_unknown():
    context: Any = _Context()
    with pytest.raises(RuntimeError):
        await _wrapped(_Service().Unmarked)(object(), context)
    assert context.status is None


async def test_the_marks_wrap_nothing_and_refuse_a_method_of_the_other_shape():
    with pytest.raises(SendError):
        await _Service().Refuses(object(), cast(Any, _Context()))
    assert errors.is_translated(_Service().Refuses)
    assert not errors.is_translated(_Service().Unmarked)
    with pytest.raises(TypeError):
        errors.stream_rpc(_Service.Unmarked)  # type: ignore[arg-type]

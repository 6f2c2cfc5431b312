"""Acknowledgment results and the state of an idempotency key (`ReadSend`), both ways."""

from __future__ import annotations

from typing import assert_never

from harness_contract._gen.harness.v1 import endpoint_pb2
from harness_contract.errors import InvalidRequestError, SendFailure
from harness_contract.values import (
    AcknowledgeResult,
    SendAbsent,
    SendIndeterminate,
    SendPending,
    SendResult,
    SendReturned,
    SendState,
)
from harness_contract.wire.bridges import ACK_REASONS
from harness_contract.wire.errors import send_failure_from_proto, send_failure_to_proto
from harness_contract.wire.sends import (
    send_input_from_proto,
    send_input_to_proto,
    send_result_from_proto,
    send_result_to_proto,
)


def acknowledge_result_to_proto(result: AcknowledgeResult) -> endpoint_pb2.AcknowledgeResult:
    """One token's result (the token itself is implied by the request order)."""
    message = endpoint_pb2.AcknowledgeResult()
    if result.error is None:
        message.ok.SetInParent()
    else:
        message.error.reason = ACK_REASONS.to_proto(result.error)
    return message


def acknowledge_result_from_proto(
    token: str, result: endpoint_pb2.AcknowledgeResult
) -> AcknowledgeResult:
    """One token's result."""
    kind = result.WhichOneof("result")
    if kind == "ok":
        return AcknowledgeResult(token=token, error=None)
    if kind == "error":
        return AcknowledgeResult(
            token=token, error=ACK_REASONS.from_proto(result.error.reason, "error.reason")
        )
    raise InvalidRequestError.of_field("acknowledge result: neither ok nor error")


def send_state_to_proto(state: SendState) -> endpoint_pb2.ReadSendResponse:
    """`absent | pending{input} | indeterminate{input} | returned{input, outcome}`."""
    result = endpoint_pb2.ReadSendResponse()
    match state:
        case SendAbsent():
            result.absent.SetInParent()
        case SendPending(input=send_input):
            result.pending.input.CopyFrom(send_input_to_proto(send_input))
        case SendIndeterminate(input=send_input):
            result.indeterminate.input.CopyFrom(send_input_to_proto(send_input))
        case SendReturned(input=send_input, outcome=outcome):
            result.returned.input.CopyFrom(send_input_to_proto(send_input))
            if isinstance(outcome, SendResult):
                result.returned.result.CopyFrom(send_result_to_proto(outcome))
            else:
                result.returned.failure.CopyFrom(send_failure_to_proto(outcome))
        case _:
            assert_never(state)
    return result


def send_state_from_proto(state: endpoint_pb2.ReadSendResponse) -> SendState:
    """A key's state."""
    kind = state.WhichOneof("state")
    if kind == "absent":
        return SendAbsent()
    if kind == "pending":
        return SendPending(input=send_input_from_proto(state.pending.input))
    if kind == "indeterminate":
        return SendIndeterminate(input=send_input_from_proto(state.indeterminate.input))
    if kind == "returned":
        returned = state.returned
        outcome_kind = returned.WhichOneof("outcome")
        outcome: SendResult | SendFailure
        if outcome_kind == "result":
            outcome = send_result_from_proto(returned.result)
        elif outcome_kind == "failure":
            outcome = send_failure_from_proto(returned.failure)
        else:
            raise InvalidRequestError.of_field("returned: no outcome")
        return SendReturned(input=send_input_from_proto(returned.input), outcome=outcome)
    raise InvalidRequestError.of_field("send state: no state")

"""What a send takes and gives, both ways: answers, collective operations and responses,
`SendInput`, the failure delivery, `SendResult`.
"""

from __future__ import annotations

import math
from typing import assert_never

from google.protobuf import struct_pb2

from harness_contract._gen.harness.v1 import types_pb2
from harness_contract.errors import InvalidRequestError
from harness_contract.values import (
    Accept,
    AnswerContent,
    AnswerValue,
    AskOperation,
    CollectiveOp,
    CollectiveOperation,
    CollectiveResponse,
    Decline,
    FailureDelivery,
    MessageInput,
    MulticastOperation,
    RequestedSchema,
    ResponseInput,
    SendInput,
    SendResult,
)
from harness_contract.wire.bridges import FAILURE_DELIVERIES
from harness_contract.wire.guidance import checked_guidance_from_proto, checked_guidance_to_proto
from harness_contract.wire.jsonvalue import struct_from_proto, struct_to_proto


def answer_content_to_proto(content: AnswerContent) -> types_pb2.AnswerContent:
    """AnswerContent: strings, finite numbers, booleans and string lists."""
    result = types_pb2.AnswerContent()
    for key, value in content.items():
        target = result.fields[key]
        if isinstance(value, bool):
            target.bool_value = value
        elif isinstance(value, str):
            target.string_value = value
        elif isinstance(value, int | float):
            if not math.isfinite(value):
                raise ValueError("an answer number must be finite")
            target.number_value = float(value)
        else:
            target.string_list_value.values.extend(value)
    return result


def answer_content_from_proto(
    content: types_pb2.AnswerContent, where: str = "content"
) -> AnswerContent:
    """AnswerContent from protobuf (numbers as floats, string lists as tuples)."""
    result: dict[str, AnswerValue] = {}
    for key, value in content.fields.items():
        kind = value.WhichOneof("value")
        if kind == "string_value":
            result[key] = value.string_value
        elif kind == "number_value":
            if not math.isfinite(value.number_value):
                raise InvalidRequestError.of_field(f"{where}.{key}: numbers must be finite")
            result[key] = value.number_value + 0.0
        elif kind == "bool_value":
            result[key] = value.bool_value
        elif kind == "string_list_value":
            result[key] = tuple(value.string_list_value.values)
        else:
            raise InvalidRequestError.of_field(f"{where}.{key}: an answer value has no kind")
    return result


def collective_operation_to_proto(operation: CollectiveOperation) -> types_pb2.CollectiveOperation:
    """`{op: "multicast"}` or a gather/all_gather with its deadline and form."""
    result = types_pb2.CollectiveOperation()
    match operation:
        case MulticastOperation():
            result.multicast.SetInParent()
        case AskOperation(op=op, deadline=deadline, requested_schema=schema):
            ask = result.gather if op is CollectiveOp.GATHER else result.all_gather
            ask.deadline_seconds = deadline
            ask.requested_schema.CopyFrom(struct_to_proto(schema))
        case _:
            assert_never(operation)
    return result


def collective_operation_from_proto(
    operation: types_pb2.CollectiveOperation,
) -> CollectiveOperation:
    """A present CollectiveOperation; with no `op` it is the contract's `{}`, a multicast."""
    kind = operation.WhichOneof("op")
    if kind == "gather":
        return AskOperation(
            op=CollectiveOp.GATHER,
            deadline=operation.gather.deadline_seconds,
            requested_schema=schema_from_proto(operation.gather.requested_schema),
        )
    if kind == "all_gather":
        return AskOperation(
            op=CollectiveOp.ALL_GATHER,
            deadline=operation.all_gather.deadline_seconds,
            requested_schema=schema_from_proto(operation.all_gather.requested_schema),
        )
    # "An omitted op and an omitted collective both mean multicast."
    return MulticastOperation()


def schema_from_proto(schema: struct_pb2.Struct) -> RequestedSchema:
    """The requested schema of a gather or all_gather, as a JSON object."""
    return struct_from_proto(schema, "requested_schema")


def collective_response_to_proto(response: CollectiveResponse) -> types_pb2.CollectiveResponse:
    """`{action: "accept", content}` or `{action: "decline"}`."""
    result = types_pb2.CollectiveResponse()
    match response:
        case Accept(content=content):
            result.accept.content.CopyFrom(answer_content_to_proto(content))
        case Decline():
            result.decline.SetInParent()
        case _:
            assert_never(response)
    return result


def collective_response_from_proto(response: types_pb2.CollectiveResponse) -> CollectiveResponse:
    """An answer; an unset `action` is `InvalidRequestError`."""
    kind = response.WhichOneof("action")
    if kind == "accept":
        return Accept(content=answer_content_from_proto(response.accept.content))
    if kind == "decline":
        return Decline()
    raise InvalidRequestError.of_field("collective_response: no action")


def send_input_to_proto(send_input: SendInput) -> types_pb2.SendInput:
    """A SendInput; an omitted `collective` stays unset."""
    result = types_pb2.SendInput()
    match send_input:
        case MessageInput(to=to, text=text, collective=collective):
            result.message.to = to
            result.message.text = text
            if collective is not None:
                result.message.collective.CopyFrom(collective_operation_to_proto(collective))
        case ResponseInput(to=to, response=response):
            result.answer.to = to
            result.answer.collective_response.CopyFrom(collective_response_to_proto(response))
        case _:
            assert_never(send_input)
    return result


def send_input_from_proto(send_input: types_pb2.SendInput) -> SendInput:
    """A SendInput: an omitted `collective` stays None, a present empty one is multicast."""
    kind = send_input.WhichOneof("input")
    if kind == "message":
        message = send_input.message
        return MessageInput(
            to=message.to,
            text=message.text,
            collective=(
                collective_operation_from_proto(message.collective)
                if message.HasField("collective")
                else None
            ),
        )
    if kind == "answer":
        if not send_input.answer.HasField("collective_response"):
            raise InvalidRequestError.of_field("input.answer: no collective_response")
        return ResponseInput(
            to=send_input.answer.to,
            response=collective_response_from_proto(send_input.answer.collective_response),
        )
    raise InvalidRequestError.of_field("input: neither a message nor an answer")


def failure_delivery_to_proto(delivery: FailureDelivery) -> types_pb2.FailureDelivery.ValueType:
    """`result` or `inbound`."""
    return FAILURE_DELIVERIES.to_proto(delivery)


def failure_delivery_from_proto(value: types_pb2.FailureDelivery.ValueType) -> FailureDelivery:
    """Unset is the contract's default, `result`."""
    return FAILURE_DELIVERIES.from_proto(value, "failure_delivery")


def send_result_to_proto(result: SendResult) -> types_pb2.SendResult:
    """`{operationId?, guidance?, postIds}`."""
    message = types_pb2.SendResult(post_ids=result.post_ids)
    if result.operation_id is not None:
        message.operation_id = result.operation_id
    if result.guidance is not None:
        message.guidance.CopyFrom(checked_guidance_to_proto(result.guidance))
    return message


def send_result_from_proto(result: types_pb2.SendResult) -> SendResult:
    """A SendResult."""
    return SendResult(
        operation_id=result.operation_id if result.HasField("operation_id") else None,
        guidance=(
            checked_guidance_from_proto(result.guidance) if result.HasField("guidance") else None
        ),
        post_ids=tuple(result.post_ids),
    )

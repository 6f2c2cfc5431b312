"""Protobuf to the client's dataclasses and back; the client's only use of `_gen` messages
besides the stubs.

Decoding raises only `DecodeFailed`, which callers turn into the contract's `decode-failed`
reasons (`ListenError`, `ConnectError`) or, on a send, `outcome-unknown`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from typing import Final, TypeVar, assert_never

from google.protobuf import message as protobuf_message
from google.protobuf import struct_pb2
from harness_contract._gen.harness.v1 import (
    endpoint_pb2,
    errors_pb2,
    guidance_pb2,
    management_pb2,
    types_pb2,
)
from harness_contract.errors import AuthenticationErrorReason

from harness_client._errors import (
    AnswerFieldIssue,
    AnswerFieldReason,
    AnswerInvalid,
    AuthenticationError,
    CollectiveError,
    CollectiveFailure,
    ConnectError,
    ConnectErrorReason,
    DeliveryAcknowledgeError,
    DeliveryAcknowledgeErrorReason,
    FirewallSendError,
    HarnessClientError,
    IdempotencyConflictError,
    ListenError,
    ListenErrorReason,
    MembersUnreachable,
    MessageTextError,
    MessageTextOperation,
    RequestAmbiguous,
    RequestAnswered,
    RequestExpired,
    RequestNone,
    SchemaInvalid,
    SendError,
    SendErrorReason,
    SendFailure,
    UnreachableMember,
)
from harness_client._items import (
    Accept,
    AgentStatus,
    AnswerContent,
    Answered,
    AnswerValue,
    AskOperation,
    CheckedGuidance,
    CollectiveGuidance,
    CollectiveOp,
    CollectiveOperation,
    CollectiveRequestItem,
    CollectiveResponse,
    CollectiveResultItem,
    Content,
    ContentPart,
    ConversationRecord,
    ConversationSummary,
    DataPart,
    Decline,
    Declined,
    DirectMessage,
    Expectation,
    ExpectationInstruction,
    FailureDelivery,
    FirewallRefusal,
    GatewayStatus,
    GroupMessage,
    GuidanceSubject,
    InboundItem,
    InboundMessage,
    Instruction,
    Invalid,
    JsonValue,
    LocalGuidance,
    MemberGuidance,
    MemberOutcome,
    MemberResult,
    MessageInput,
    MulticastItem,
    MulticastOperation,
    NoAnswer,
    OperationFailedItem,
    RegisteredAgent,
    ResponseInput,
    SendAbsent,
    SendIndeterminate,
    SendInput,
    SendPending,
    SendResult,
    SendReturned,
    SendState,
    SetAsideConversation,
    TextPart,
    Uncertain,
    UncertainInstruction,
    Withheld,
)

E = TypeVar("E", bound=enum.Enum)
V = TypeVar("V")


class DecodeFailed(ValueError):
    """A message from the gateway does not have the shape this client knows."""


def _enum_map(
    members: type[E], proto: Callable[[str], int], prefix: str
) -> tuple[dict[E, int], dict[int, E]]:
    forward = {member: proto(f"{prefix}{member.name}") for member in members}
    return forward, {value: key for key, value in forward.items()}


def _back(table: Mapping[int, V], key: int, where: str) -> V:
    try:
        return table[key]
    except KeyError:
        raise DecodeFailed(f"{where}: unknown value {key}") from None


_OPS, _OPS_BACK = _enum_map(CollectiveOp, types_pb2.CollectiveOp.Value, "COLLECTIVE_OP_")
_FAILURE_DELIVERIES, _ = _enum_map(
    FailureDelivery, types_pb2.FailureDelivery.Value, "FAILURE_DELIVERY_"
)
_EXPECTATIONS, _EXPECTATIONS_BACK = _enum_map(
    Expectation, guidance_pb2.Expectation.Value, "EXPECTATION_"
)
_REFUSALS, _REFUSALS_BACK = _enum_map(
    FirewallRefusal, guidance_pb2.FirewallRefusal.Value, "FIREWALL_REFUSAL_"
)
_SEND_REASONS, _SEND_REASONS_BACK = _enum_map(
    SendErrorReason, errors_pb2.SendErrorReason.Value, "SEND_ERROR_REASON_"
)
_FIELD_REASONS, _FIELD_REASONS_BACK = _enum_map(
    AnswerFieldReason, errors_pb2.AnswerFieldReason.Value, "ANSWER_FIELD_REASON_"
)
_LISTEN_REASONS, _LISTEN_REASONS_BACK = _enum_map(
    ListenErrorReason, errors_pb2.ListenErrorReason.Value, "LISTEN_ERROR_REASON_"
)
_ACK_REASONS, _ACK_REASONS_BACK = _enum_map(
    DeliveryAcknowledgeErrorReason,
    errors_pb2.DeliveryAcknowledgeErrorReason.Value,
    "DELIVERY_ACKNOWLEDGE_ERROR_REASON_",
)
_CONNECT_REASONS, _CONNECT_REASONS_BACK = _enum_map(
    ConnectErrorReason, errors_pb2.ConnectErrorReason.Value, "CONNECT_ERROR_REASON_"
)
_TEXT_OPERATIONS, _TEXT_OPERATIONS_BACK = _enum_map(
    MessageTextOperation, errors_pb2.MessageTextOperation.Value, "MESSAGE_TEXT_OPERATION_"
)
_AUTHENTICATION_REASONS, _AUTHENTICATION_REASONS_BACK = _enum_map(
    AuthenticationErrorReason,
    errors_pb2.AuthenticationErrorReason.Value,
    "AUTHENTICATION_ERROR_REASON_",
)
_CONVERSATION_KINDS: Final = {
    management_pb2.CONVERSATION_KIND_DIRECT: "direct",
    management_pb2.CONVERSATION_KIND_GROUP: "group",
}
_MODES: Final = {
    management_pb2.GATEWAY_MODE_EMBEDDED: "embedded",
    management_pb2.GATEWAY_MODE_JOINED: "joined",
    management_pb2.GATEWAY_MODE_CLUSTER: "cluster",
    management_pb2.GATEWAY_MODE_ROUTER: "router",
    management_pb2.GATEWAY_MODE_REGISTRY: "registry",
}
_ROUTER_STATES: Final = {
    management_pb2.ROUTER_ATTACHMENT_RECOVERING: "recovering",
    management_pb2.ROUTER_ATTACHMENT_ACTIVE: "active",
    management_pb2.ROUTER_ATTACHMENT_DETACHED: "detached",
}


# --- JSON values -----------------------------------------------------------------------


def json_value_to_proto(value: JsonValue) -> struct_pb2.Value:
    """A JsonValue as `google.protobuf.Value`; raises `ValueError` for a non-finite number."""
    result = struct_pb2.Value()
    _fill_value(result, value)
    return result


def _fill_value(target: struct_pb2.Value, value: JsonValue) -> None:
    if value is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError("a JSON number must be finite")
        target.number_value = float(value)
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, Mapping):
        _fill_struct(target.struct_value, value)
    else:
        target.list_value.SetInParent()
        for item in value:
            _fill_value(target.list_value.values.add(), item)


def _fill_struct(target: struct_pb2.Struct, value: Mapping[str, JsonValue]) -> None:
    target.SetInParent()
    for key, item in value.items():
        _fill_value(target.fields[key], item)


def json_value_from_proto(value: struct_pb2.Value) -> JsonValue:
    """A `google.protobuf.Value` as a JsonValue (numbers float, lists tuples)."""
    kind = value.WhichOneof("kind")
    if kind == "null_value":
        return None
    if kind == "bool_value":
        return value.bool_value
    if kind == "number_value":
        if not math.isfinite(value.number_value):
            raise DecodeFailed("a JSON number is not finite")
        return value.number_value + 0.0
    if kind == "string_value":
        return value.string_value
    if kind == "struct_value":
        return struct_from_proto(value.struct_value)
    if kind == "list_value":
        return tuple(json_value_from_proto(item) for item in value.list_value.values)
    raise DecodeFailed("a JSON value has no kind")


def struct_from_proto(value: struct_pb2.Struct) -> dict[str, JsonValue]:
    """A `google.protobuf.Struct` as a JSON object."""
    return {key: json_value_from_proto(item) for key, item in value.fields.items()}


# --- content, answers and inputs -------------------------------------------------------


def content_from_proto(content: types_pb2.Content) -> Content:
    """Content parts in order."""
    parts: list[ContentPart] = []
    for part in content.parts:
        kind = part.WhichOneof("part")
        if kind == "text":
            parts.append(TextPart(text=part.text.text))
        elif kind == "data":
            parts.append(DataPart(value=json_value_from_proto(part.data.value)))
        else:
            raise DecodeFailed("a content part is neither text nor data")
    return tuple(parts)


def answer_content_to_proto(content: AnswerContent) -> types_pb2.AnswerContent:
    """AnswerContent (booleans are never numbers)."""
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


def answer_content_from_proto(content: types_pb2.AnswerContent) -> AnswerContent:
    """AnswerContent (numbers as floats, string lists as tuples)."""
    result: dict[str, AnswerValue] = {}
    for key, value in content.fields.items():
        kind = value.WhichOneof("value")
        if kind == "string_value":
            result[key] = value.string_value
        elif kind == "number_value":
            if not math.isfinite(value.number_value):
                raise DecodeFailed("an answer number is not finite")
            result[key] = value.number_value + 0.0
        elif kind == "bool_value":
            result[key] = value.bool_value
        elif kind == "string_list_value":
            result[key] = tuple(value.string_list_value.values)
        else:
            raise DecodeFailed("an answer value has no kind")
    return result


def _collective_to_proto(operation: CollectiveOperation) -> types_pb2.CollectiveOperation:
    result = types_pb2.CollectiveOperation()
    match operation:
        case MulticastOperation():
            result.multicast.SetInParent()
        case AskOperation(op=op, deadline=deadline, requested_schema=schema):
            ask = result.gather if op is CollectiveOp.GATHER else result.all_gather
            ask.deadline_seconds = deadline
            _fill_struct(ask.requested_schema, schema)
        case _:
            assert_never(operation)
    return result


def _response_to_proto(response: CollectiveResponse) -> types_pb2.CollectiveResponse:
    result = types_pb2.CollectiveResponse()
    match response:
        case Accept(content=content):
            result.accept.content.CopyFrom(answer_content_to_proto(content))
        case Decline():
            result.decline.SetInParent()
        case _:
            assert_never(response)
    return result


def send_input_to_proto(send_input: SendInput) -> types_pb2.SendInput:
    """A SendInput; an omitted `collective` stays unset."""
    result = types_pb2.SendInput()
    match send_input:
        case MessageInput(to=to, text=text, collective=collective):
            result.message.to = to
            result.message.text = text
            if collective is not None:
                result.message.collective.CopyFrom(_collective_to_proto(collective))
        case ResponseInput(to=to, response=response):
            result.answer.to = to
            result.answer.collective_response.CopyFrom(_response_to_proto(response))
        case _:
            assert_never(send_input)
    return result


def send_input_from_proto(send_input: types_pb2.SendInput) -> SendInput:
    """A SendInput (a present CollectiveOperation with no op is a multicast)."""
    kind = send_input.WhichOneof("input")
    if kind == "message":
        message = send_input.message
        collective: CollectiveOperation | None = None
        if message.HasField("collective"):
            op = message.collective.WhichOneof("op")
            if op == "gather":
                collective = AskOperation(
                    op=CollectiveOp.GATHER,
                    deadline=message.collective.gather.deadline_seconds,
                    requested_schema=struct_from_proto(message.collective.gather.requested_schema),
                )
            elif op == "all_gather":
                collective = AskOperation(
                    op=CollectiveOp.ALL_GATHER,
                    deadline=message.collective.all_gather.deadline_seconds,
                    requested_schema=struct_from_proto(
                        message.collective.all_gather.requested_schema
                    ),
                )
            else:
                collective = MulticastOperation()
        return MessageInput(to=message.to, text=message.text, collective=collective)
    if kind == "answer":
        answer = send_input.answer.collective_response
        action = answer.WhichOneof("action")
        response: CollectiveResponse
        if action == "accept":
            response = Accept(content=answer_content_from_proto(answer.accept.content))
        elif action == "decline":
            response = Decline()
        else:
            raise DecodeFailed("an answer has no action")
        return ResponseInput(to=send_input.answer.to, response=response)
    raise DecodeFailed("a send input is neither a message nor an answer")


def failure_delivery_to_proto(delivery: FailureDelivery) -> types_pb2.FailureDelivery.ValueType:
    """`result` or `inbound`."""
    return types_pb2.FailureDelivery.ValueType(_FAILURE_DELIVERIES[delivery])


def send_result_from_proto(result: types_pb2.SendResult) -> SendResult:
    """`{operationId?, guidance?}`."""
    return SendResult(
        operation_id=result.operation_id if result.HasField("operation_id") else None,
        guidance=(
            checked_guidance_from_proto(result.guidance) if result.HasField("guidance") else None
        ),
    )


# --- guidance --------------------------------------------------------------------------


def checked_guidance_from_proto(guidance: guidance_pb2.CheckedGuidance) -> CheckedGuidance:
    """One check's subjects and instructions."""
    instructions: list[Instruction] = []
    for instruction in guidance.instructions:
        kind = instruction.WhichOneof("kind")
        if kind == "expectation":
            raw = instruction.expectation
            instructions.append(
                ExpectationInstruction(
                    middleware_id=raw.middleware_id,
                    rule_id=raw.rule_id,
                    expectation=_back(_EXPECTATIONS_BACK, raw.expectation, "expectation"),
                    subjects=tuple(raw.subjects),
                    instruction=raw.instruction,
                )
            )
        elif kind == "uncertain":
            judged = instruction.uncertain
            instructions.append(
                UncertainInstruction(
                    middleware_id=judged.middleware_id,
                    rule_id=judged.rule_id,
                    uncertain=Uncertain(
                        choice=judged.uncertain.choice,
                        probability=judged.uncertain.probability,
                    ),
                    instruction=judged.instruction,
                )
            )
        else:
            raise DecodeFailed("an instruction has no kind")
    return CheckedGuidance(
        check_id=guidance.check_id,
        subjects=tuple(
            GuidanceSubject(
                id=subject.id,
                sender=subject.sender,
                recipients=tuple(subject.recipients),
                text=subject.text,
            )
            for subject in guidance.subjects
        ),
        instructions=tuple(instructions),
    )


def checked_guidance_to_proto(guidance: CheckedGuidance) -> guidance_pb2.CheckedGuidance:
    """CheckedGuidance (used by tests and tools that build statuses)."""
    result = guidance_pb2.CheckedGuidance(check_id=guidance.check_id)
    for subject in guidance.subjects:
        result.subjects.add(
            id=subject.id, sender=subject.sender, recipients=subject.recipients, text=subject.text
        )
    for instruction in guidance.instructions:
        target = result.instructions.add()
        match instruction:
            case ExpectationInstruction():
                target.expectation.middleware_id = instruction.middleware_id
                target.expectation.rule_id = instruction.rule_id
                target.expectation.expectation = guidance_pb2.Expectation.ValueType(
                    _EXPECTATIONS[instruction.expectation]
                )
                target.expectation.subjects.extend(instruction.subjects)
                target.expectation.instruction = instruction.instruction
            case UncertainInstruction():
                target.uncertain.middleware_id = instruction.middleware_id
                target.uncertain.rule_id = instruction.rule_id
                target.uncertain.uncertain.choice = instruction.uncertain.choice
                target.uncertain.uncertain.probability = instruction.uncertain.probability
                target.uncertain.instruction = instruction.instruction
            case _:
                assert_never(instruction)
    return result


def local_guidance_from_proto(guidance: guidance_pb2.LocalGuidance) -> LocalGuidance:
    """Either LocalGuidance form."""
    kind = guidance.WhichOneof("kind")
    if kind == "checked":
        return checked_guidance_from_proto(guidance.checked)
    if kind == "collective":
        collective = guidance.collective
        return CollectiveGuidance(
            question=(
                checked_guidance_from_proto(collective.question)
                if collective.HasField("question")
                else None
            ),
            answers=tuple(
                MemberGuidance(
                    member=answer.member, guidance=checked_guidance_from_proto(answer.guidance)
                )
                for answer in collective.answers
            ),
        )
    raise DecodeFailed("guidance has no kind")


def _withheld_from_proto(withheld: guidance_pb2.Withheld) -> Withheld:
    return Withheld(
        check_id=withheld.check_id, reason=_back(_REFUSALS_BACK, withheld.reason, "reason")
    )


# --- items -----------------------------------------------------------------------------


def _message_from_proto(message: types_pb2.InboundMessage) -> InboundMessage:
    kind = message.WhichOneof("kind")
    if kind == "direct":
        direct = message.direct
        return DirectMessage(
            post_id=direct.post_id,
            address=direct.address,
            sender=direct.sender,
            content=content_from_proto(direct.content),
        )
    if kind == "group":
        group = message.group
        return GroupMessage(
            post_id=group.post_id,
            address=group.address,
            sender=group.sender,
            members=tuple(group.members),
            content=content_from_proto(group.content),
        )
    raise DecodeFailed("a message is neither direct nor group")


def _outcome_from_proto(outcome: types_pb2.CollectiveMemberOutcome) -> MemberOutcome:
    kind = outcome.WhichOneof("kind")
    if kind == "answered":
        return Answered(content=answer_content_from_proto(outcome.answered.content))
    if kind == "declined":
        return Declined()
    if kind == "invalid":
        return Invalid(reason=outcome.invalid.reason)
    if kind == "no_answer":
        return NoAnswer()
    if kind == "withheld":
        return _withheld_from_proto(outcome.withheld)
    raise DecodeFailed("an outcome has no kind")


def item_from_proto(item: types_pb2.InboundItem) -> InboundItem:
    """Any of the four item kinds."""
    kind = item.WhichOneof("kind")
    if kind == "multicast":
        return MulticastItem(message=_message_from_proto(item.multicast.message))
    if kind == "collective_request":
        request = item.collective_request
        return CollectiveRequestItem(
            op=_back(_OPS_BACK, request.op, "op"),
            id=request.id,
            post_id=request.post_id,
            sender=request.sender,
            to=request.to,
            question=request.question,
            requested_schema=struct_from_proto(request.requested_schema),
            deadline_at=request.deadline_at,
        )
    if kind == "collective_result":
        collective = item.collective_result
        question_kind = collective.question.WhichOneof("kind")
        question: str | Withheld
        if question_kind == "text":
            question = collective.question.text
        elif question_kind == "withheld":
            question = _withheld_from_proto(collective.question.withheld)
        else:
            raise DecodeFailed("a result's question has no kind")
        return CollectiveResultItem(
            op=_back(_OPS_BACK, collective.op, "op"),
            id=collective.id,
            to=collective.to,
            question=question,
            outcomes=tuple(
                MemberResult(member=entry.member, outcome=_outcome_from_proto(entry.outcome))
                for entry in collective.outcomes
            ),
        )
    if kind == "operation_failed":
        failed = item.operation_failed
        return OperationFailedItem(id=failed.id, to=failed.to, error=failed.error)
    raise DecodeFailed("an item has no kind")


# --- errors ----------------------------------------------------------------------------


def send_error_from_proto(error: errors_pb2.SendError) -> SendError:
    """A SendError; a reason this client does not know is `outcome-unknown` (§10)."""
    reason = _SEND_REASONS_BACK.get(error.reason)
    if reason is None:
        return SendError(SendErrorReason.OUTCOME_UNKNOWN)
    return SendError(reason, error.detail if error.HasField("detail") else None)


def collective_error_from_proto(error: errors_pb2.CollectiveError) -> CollectiveError:
    """A CollectiveError."""
    kind = error.WhichOneof("failure")
    failure: CollectiveFailure
    if kind == "members_unreachable":
        failure = MembersUnreachable(
            members=tuple(
                UnreachableMember(
                    member=member.member,
                    reason=_SEND_REASONS_BACK.get(member.reason, SendErrorReason.OUTCOME_UNKNOWN),
                    detail=member.detail if member.HasField("detail") else None,
                )
                for member in error.members_unreachable.members
            )
        )
    elif kind == "schema_invalid":
        failure = SchemaInvalid(detail=error.schema_invalid.detail)
    elif kind == "answer_invalid":
        failure = AnswerInvalid(
            fields=tuple(
                AnswerFieldIssue(
                    field=field.field,
                    reason=_back(_FIELD_REASONS_BACK, field.reason, "fields.reason"),
                    detail=field.detail if field.HasField("detail") else None,
                )
                for field in error.answer_invalid.fields
            )
        )
    elif kind == "request_none":
        failure = RequestNone()
    elif kind == "request_ambiguous":
        failure = RequestAmbiguous()
    elif kind == "request_answered":
        failure = RequestAnswered()
    elif kind == "request_expired":
        failure = RequestExpired()
    else:
        raise DecodeFailed("a collective error has no failure")
    return CollectiveError(error.id, failure)


_FIREWALL_PREFIX: Final = "send refused by the local firewall ("


def firewall_error_from_proto(
    error: errors_pb2.FirewallSendError, message: str = ""
) -> FirewallSendError:
    """A FirewallSendError carrying the refusing rule's `instruction`.

    A daemon older than the `instruction` field leaves it empty; then the instruction is the
    refusing rule's in `guidance`, else the text after the refusal in the status message."""
    guidance = checked_guidance_from_proto(error.guidance)
    refusal = _back(_REFUSALS_BACK, error.refusal, "refusal")
    instruction = error.instruction or _older_refusal_instruction(
        guidance, error.middleware_id, error.rule_id, refusal, message
    )
    return FirewallSendError(
        check_id=error.check_id,
        refusal=refusal,
        middleware_id=error.middleware_id,
        rule_id=error.rule_id,
        instruction=instruction,
        guidance=guidance,
    )


def _older_refusal_instruction(
    guidance: CheckedGuidance,
    middleware_id: str,
    rule_id: str,
    refusal: FirewallRefusal,
    message: str,
) -> str:
    for item in guidance.instructions:
        if item.middleware_id == middleware_id and item.rule_id == rule_id:
            return item.instruction
    prefix = f"{_FIREWALL_PREFIX}{refusal.value}): "
    return message.removeprefix(prefix) if message.startswith(prefix) else ""


def send_failure_from_proto(failure: errors_pb2.SendFailure) -> SendFailure:
    """A kept send failure."""
    kind = failure.WhichOneof("failure")
    if kind == "send_error":
        return send_error_from_proto(failure.send_error)
    if kind == "collective_error":
        return collective_error_from_proto(failure.collective_error)
    if kind == "firewall_send_error":
        return firewall_error_from_proto(failure.firewall_send_error)
    raise DecodeFailed("a send failure has no failure")


def message_text_error_from_proto(error: errors_pb2.MessageTextError) -> MessageTextError:
    """A `ParseMessageText` answer's `error` arm (or, from an older gateway, a status detail)."""
    return MessageTextError(
        _back(_TEXT_OPERATIONS_BACK, error.operation, "operation"), error.detail
    )


def error_from_detail(detail: protobuf_message.Message, message: str) -> HarnessClientError:
    """The typed error a closed harness error detail stands for."""
    match detail:
        case errors_pb2.SendError():
            return send_error_from_proto(detail)
        case errors_pb2.CollectiveError():
            return collective_error_from_proto(detail)
        case errors_pb2.FirewallSendError():
            return firewall_error_from_proto(detail, message)
        case errors_pb2.ListenError():
            return ListenError(_back(_LISTEN_REASONS_BACK, detail.reason, "reason"))
        case errors_pb2.DeliveryAcknowledgeError():
            return DeliveryAcknowledgeError(_back(_ACK_REASONS_BACK, detail.reason, "reason"))
        case errors_pb2.ConnectError():
            return ConnectError(_back(_CONNECT_REASONS_BACK, detail.reason, "reason"))
        case errors_pb2.MessageTextError():
            return message_text_error_from_proto(detail)
        case errors_pb2.IdempotencyConflict():
            return IdempotencyConflictError(detail.key)
        case errors_pb2.AuthenticationError():
            return AuthenticationError(
                _back(_AUTHENTICATION_REASONS_BACK, detail.reason, "reason"), message
            )
        case _:
            raise DecodeFailed(f"{type(detail).__name__} is not a closed error")


def acknowledge_error_from_proto(
    result: endpoint_pb2.AcknowledgeResult,
) -> DeliveryAcknowledgeError | None:
    """One token's result: None when it is retired."""
    kind = result.WhichOneof("result")
    if kind == "ok":
        return None
    if kind == "error":
        return DeliveryAcknowledgeError(_back(_ACK_REASONS_BACK, result.error.reason, "reason"))
    raise DecodeFailed("an acknowledge result has no result")


def send_state_from_proto(state: endpoint_pb2.ReadSendResponse) -> SendState:
    """`absent | pending | indeterminate | returned`."""
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
            raise DecodeFailed("a returned send has no outcome")
        return SendReturned(input=send_input_from_proto(returned.input), outcome=outcome)
    raise DecodeFailed("a send state has no state")


# --- management ------------------------------------------------------------------------


def registered_agent_from_proto(agent: management_pb2.RegisterAgentResponse) -> RegisteredAgent:
    """A registration."""
    return RegisteredAgent(address=agent.address, agent_id=agent.agent_id, token=agent.token)


def agent_status_from_proto(status: management_pb2.AgentStatus) -> AgentStatus:
    """One agent's status."""
    return AgentStatus(
        name=status.name,
        address=status.address,
        agent_id=status.agent_id,
        public_key=status.public_key,
        issued_at=status.issued_at,
        hosted=status.hosted,
        stream_attached=status.stream_attached,
        backlog=status.backlog,
        oldest_unacked_age_seconds=status.oldest_unacked_age_seconds,
        set_aside=tuple(
            SetAsideConversation(conversation_id=item.conversation_id, reason=item.reason)
            for item in status.set_aside
        ),
    )


def conversation_from_proto(summary: management_pb2.ConversationSummary) -> ConversationSummary:
    """One conversation."""
    return ConversationSummary(
        address=summary.address,
        kind=_CONVERSATION_KINDS.get(summary.kind, "unknown"),
        members=tuple(summary.members),
        head_record_hash=summary.head_record_hash if summary.HasField("head_record_hash") else None,
        depth=summary.depth,
    )


def conversation_record_from_proto(record: management_pb2.ConversationRecord) -> ConversationRecord:
    """One certified record."""
    return ConversationRecord(
        record_hash=record.record_hash,
        post_id=record.post_id,
        author=record.author,
        depth=record.depth,
        content=content_from_proto(record.content),
        certified_record=record.certified_record,
    )


def gateway_status_from_proto(status: management_pb2.GetGatewayStatusResponse) -> GatewayStatus:
    """Version, mode, hosted agents and Router state (`unknown` for a value we do not know)."""
    return GatewayStatus(
        version=status.version,
        mode=_MODES.get(status.mode, "unknown"),
        hosted_agents=status.hosted_agents,
        router_state=_ROUTER_STATES.get(status.router_state, "unknown"),
    )

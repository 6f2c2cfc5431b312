"""The contract's protobuf forms: the one mapping between `harness.v1` messages and our
dataclasses, both ways, shared by the gateway's RPC layer and the Python client.

Every value of the agent and management APIs has a `*_to_proto` and a `*_from_proto`
here; the gateway encodes what it answers and decodes what a client sent, the client the
other way round. Encoding our own values cannot fail except through a defect. Decoding
never raises anything but a typed failure:

- content that is not valid (`Value` with no kind, a non-finite number, a part with no
  `part`) is `SendError` `content-invalid`, as the contract's status table says;
- any other message that breaks the contract (an unset oneof, a NaN answer, an enum value
  this version does not know) is `InvalidRequestError` `invalid-request`. The gateway
  answers it as INVALID_ARGUMENT; the client reports an answer it cannot read as a
  transport failure.

JSON values travel as `google.protobuf.Value`: numbers are finite binary64 floats (`-0`
reads as `0`, as the core normalizes it), arrays read as tuples, objects as dicts.
Statuses: `status_of` packs a failure into the `google.rpc.Status` a call ends with, and
`error_of_status` reads one back.

The module is long because it is the one mapping of every contract value, both ways; enum
mappings go through one `EnumBridge`, which fails at import when a member is unmapped.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, Generic, Protocol, TypeAlias, TypeVar, assert_never

from google.protobuf import any_pb2, duration_pb2, struct_pb2
from google.protobuf import message as protobuf_message
from google.rpc import error_details_pb2, status_pb2

from harness_contract._gen.harness.v1 import (
    endpoint_pb2,
    errors_pb2,
    guidance_pb2,
    management_pb2,
    types_pb2,
)
from harness_contract.errors import (
    AnswerFieldIssue,
    AnswerFieldReason,
    AnswerInvalid,
    AuthenticationError,
    AuthenticationErrorReason,
    CollectiveError,
    CollectiveFailure,
    ConnectError,
    ConnectErrorReason,
    DeliveryAcknowledgeError,
    DeliveryAcknowledgeErrorReason,
    FirewallRefusal,
    FirewallSendError,
    HarnessError,
    IdempotencyConflictError,
    InvalidIdempotencyKeyError,
    InvalidRequestError,
    InvalidRequestReason,
    ListenError,
    ListenErrorReason,
    MembersUnreachable,
    MessageTextError,
    MessageTextOperation,
    PermissionDeniedError,
    PermissionDeniedReason,
    RequestAmbiguous,
    RequestAnswered,
    RequestExpired,
    RequestNone,
    SchemaInvalid,
    SendError,
    SendErrorReason,
    SendFailure,
    UnavailableError,
    UnavailableReason,
    UnreachableMember,
)
from harness_contract.guidance import (
    CheckedGuidance,
    CollectiveGuidance,
    Expectation,
    ExpectationInstruction,
    GuidanceSubject,
    Instruction,
    LocalGuidance,
    MemberGuidance,
    Uncertain,
    UncertainInstruction,
    Withheld,
)
from harness_contract.jsonvalue import JsonValue
from harness_contract.management import (
    AgentStatus,
    ConversationRecord,
    ConversationSummary,
    GatewayStatus,
    ManagementError,
    ManagementErrorReason,
    RegisteredAgent,
    SetAsideConversation,
)
from harness_contract.values import (
    Accept,
    AcknowledgeResult,
    AnswerContent,
    Answered,
    AnswerValue,
    AskOperation,
    CollectiveOp,
    CollectiveOperation,
    CollectiveRequestItem,
    CollectiveResponse,
    CollectiveResultItem,
    Content,
    ContentPart,
    DataPart,
    Decline,
    Declined,
    Delivery,
    DirectMessage,
    FailureDelivery,
    GroupMessage,
    InboundItem,
    InboundMessage,
    Invalid,
    MemberOutcome,
    MemberResult,
    MessageInput,
    MulticastItem,
    MulticastOperation,
    NoAnswer,
    OperationFailedItem,
    RequestedSchema,
    ResponseInput,
    SendAbsent,
    SendIndeterminate,
    SendInput,
    SendPending,
    SendResult,
    SendReturned,
    SendState,
    TextPart,
)

# --- closed enums ------------------------------------------------------------------------

OursT = TypeVar("OursT")
E = TypeVar("E", bound=enum.Enum)
ProtoT = TypeVar("ProtoT", bound=int)
ProtoT_co = TypeVar("ProtoT_co", bound=int, covariant=True)


class _ProtoEnum(Protocol[ProtoT_co]):
    """What a generated protobuf enum (its `EnumTypeWrapper`) offers the bridge."""

    def Value(self, name: str) -> ProtoT_co:  # noqa: N802 - protobuf's name
        """The number of the member called `name`; ValueError when there is none."""
        ...

    def items(self) -> Sequence[tuple[str, ProtoT_co]]:
        """Every member's name and number."""
        ...


class EnumBridge(Generic[OursT, ProtoT]):
    """One closed value set of ours and its protobuf enum, value for value.

    Built by name: each of our values has a protobuf member `<prefix><name>`, and every
    protobuf member but `<prefix>UNSPECIFIED` has one of our values; a value missing on
    either side raises ValueError at import, so a renamed or added member never ships
    unmapped. UNSPECIFIED is never sent, and received it is refused like an unknown
    number, unless the contract gives the field a default (`unspecified`)."""

    __slots__ = ("_from", "_to", "_unspecified")

    def __init__(
        self,
        proto: _ProtoEnum[ProtoT],
        prefix: str,
        names: Mapping[OursT, str],
        *,
        unspecified: OursT | None = None,
    ) -> None:
        """`names` gives each of our values its protobuf name after `prefix`."""
        self._to: Final = {ours: proto.Value(prefix + name) for ours, name in names.items()}
        self._unspecified: Final = proto.Value(prefix + "UNSPECIFIED")
        self._from: Final = {number: ours for ours, number in self._to.items()}
        unmapped = [
            name
            for name, number in proto.items()
            if number not in self._from and number != self._unspecified
        ]
        if unmapped:
            raise ValueError(f"no value of ours for {', '.join(unmapped)}")
        if unspecified is not None:
            self._from[self._unspecified] = unspecified

    def to_proto(self, value: OursT) -> ProtoT:
        """The protobuf number of one of our values."""
        return self._to[value]

    def to_proto_or_unspecified(self, value: OursT) -> ProtoT:
        """The protobuf number of `value`, UNSPECIFIED for a value outside the set."""
        return self._to.get(value, self._unspecified)

    def from_proto(self, number: ProtoT, where: str) -> OursT:
        """Our value of a received number; UNSPECIFIED (unless it has a default) and
        numbers this version does not know are `InvalidRequestError` naming `where`."""
        try:
            return self._from[number]
        except KeyError:
            raise InvalidRequestError.of_field(
                f"{where}: unknown or unspecified value {number!r}"
            ) from None


def _members(
    ours: type[E], proto: _ProtoEnum[ProtoT], prefix: str, *, unspecified: E | None = None
) -> EnumBridge[E, ProtoT]:
    """The bridge of one of our enums whose member names are the protobuf names
    (`SendErrorReason.UNKNOWN_AGENT` is `SEND_ERROR_REASON_UNKNOWN_AGENT`)."""
    return EnumBridge(
        proto, prefix, {member: member.name for member in ours}, unspecified=unspecified
    )


def _words(words: Iterable[str], proto: _ProtoEnum[ProtoT], prefix: str) -> EnumBridge[str, ProtoT]:
    """The bridge of a closed set of lowercase words (`"direct"` is `..._DIRECT`)."""
    return EnumBridge(proto, prefix, {word: word.upper() for word in words})


_SEND_REASONS: Final = _members(SendErrorReason, errors_pb2.SendErrorReason, "SEND_ERROR_REASON_")
_FIELD_REASONS: Final = _members(
    AnswerFieldReason, errors_pb2.AnswerFieldReason, "ANSWER_FIELD_REASON_"
)
_LISTEN_REASONS: Final = _members(
    ListenErrorReason, errors_pb2.ListenErrorReason, "LISTEN_ERROR_REASON_"
)
_ACK_REASONS: Final = _members(
    DeliveryAcknowledgeErrorReason,
    errors_pb2.DeliveryAcknowledgeErrorReason,
    "DELIVERY_ACKNOWLEDGE_ERROR_REASON_",
)
_CONNECT_REASONS: Final = _members(
    ConnectErrorReason, errors_pb2.ConnectErrorReason, "CONNECT_ERROR_REASON_"
)
_TEXT_OPERATIONS: Final = _members(
    MessageTextOperation, errors_pb2.MessageTextOperation, "MESSAGE_TEXT_OPERATION_"
)
_AUTHENTICATION_REASONS: Final = _members(
    AuthenticationErrorReason,
    errors_pb2.AuthenticationErrorReason,
    "AUTHENTICATION_ERROR_REASON_",
)
REFUSALS: Final = _members(FirewallRefusal, guidance_pb2.FirewallRefusal, "FIREWALL_REFUSAL_")
"""The closed refusals both ways (also for the external middleware's answers)."""
_EXPECTATIONS: Final = _members(Expectation, guidance_pb2.Expectation, "EXPECTATION_")
_OPS: Final = _members(CollectiveOp, types_pb2.CollectiveOp, "COLLECTIVE_OP_")
_FAILURE_DELIVERIES: Final = _members(
    FailureDelivery,
    types_pb2.FailureDelivery,
    "FAILURE_DELIVERY_",
    # The contract's default: an unset failure delivery is `result`.
    unspecified=FailureDelivery.RESULT,
)
_CONVERSATION_KINDS: Final = _words(
    ("direct", "group"), management_pb2.ConversationKind, "CONVERSATION_KIND_"
)
_MODES: Final = _words(
    ("embedded", "joined", "cluster", "router", "registry"),
    management_pb2.GatewayMode,
    "GATEWAY_MODE_",
)
_ROUTER_STATES: Final = _words(
    ("recovering", "active", "detached"), management_pb2.RouterAttachment, "ROUTER_ATTACHMENT_"
)


# --- JSON values -------------------------------------------------------------------------


def json_value_to_proto(value: JsonValue) -> struct_pb2.Value:
    """A JsonValue as `google.protobuf.Value`; raises `ValueError` for a non-finite number."""
    result = struct_pb2.Value()
    _fill_value(result, value)
    return result


def _fill_value(target: struct_pb2.Value, value: JsonValue) -> None:
    # bool before numbers: `True` is an `int` in Python, never a number in JSON.
    if value is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int | float):
        number = float(value)
        if not math.isfinite(number):
            raise ValueError("a JSON number must be finite")
        target.number_value = number
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


def struct_to_proto(value: Mapping[str, JsonValue]) -> struct_pb2.Struct:
    """A JSON object as `google.protobuf.Struct`."""
    result = struct_pb2.Struct()
    _fill_struct(result, value)
    return result


def json_value_from_proto(value: struct_pb2.Value, where: str = "value") -> JsonValue:
    """A `google.protobuf.Value` as a JsonValue (numbers float, lists tuples).

    Raises `InvalidRequestError` for a Value with no kind or a non-finite number."""
    kind = value.WhichOneof("kind")
    if kind == "null_value":
        return None
    if kind == "bool_value":
        return value.bool_value
    if kind == "number_value":
        number = value.number_value
        if not math.isfinite(number):
            raise InvalidRequestError.of_field(f"{where}: numbers must be finite")
        return number + 0.0  # -0.0 + 0.0 == 0.0, as the core normalizes numbers
    if kind == "string_value":
        return value.string_value
    if kind == "struct_value":
        return struct_from_proto(value.struct_value, where)
    if kind == "list_value":
        return tuple(
            json_value_from_proto(item, f"{where}[{index}]")
            for index, item in enumerate(value.list_value.values)
        )
    raise InvalidRequestError.of_field(f"{where}: a JSON value has no kind")


def struct_from_proto(value: struct_pb2.Struct, where: str = "value") -> dict[str, JsonValue]:
    """A `google.protobuf.Struct` as a JSON object."""
    return {
        key: json_value_from_proto(item, f"{where}.{key}") for key, item in value.fields.items()
    }


# --- content -----------------------------------------------------------------------------


def content_to_proto(content: Content) -> types_pb2.Content:
    """Content parts in order."""
    result = types_pb2.Content()
    for part in content:
        match part:
            case TextPart(text=text):
                result.parts.add().text.text = text
            case DataPart(value=value):
                result.parts.add().data.value.CopyFrom(json_value_to_proto(value))
            case _:
                assert_never(part)
    return result


def content_from_proto(content: types_pb2.Content) -> Content:
    """Content from protobuf; bad parts are `SendError` `content-invalid`."""
    parts: list[ContentPart] = []
    for part in content.parts:
        kind = part.WhichOneof("part")
        if kind == "text":
            parts.append(TextPart(text=part.text.text))
        elif kind == "data":
            try:
                value = json_value_from_proto(part.data.value, "data")
            except InvalidRequestError as error:
                raise SendError(
                    SendErrorReason.CONTENT_INVALID,
                    f"a data part is not a JSON value ({error.detail})",
                ) from None
            parts.append(DataPart(value=value))
        else:
            raise SendError(
                SendErrorReason.CONTENT_INVALID, "a content part is neither text nor data"
            )
    return tuple(parts)


# --- answers and send inputs -------------------------------------------------------------


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
            requested_schema=_schema_from_proto(operation.gather.requested_schema),
        )
    if kind == "all_gather":
        return AskOperation(
            op=CollectiveOp.ALL_GATHER,
            deadline=operation.all_gather.deadline_seconds,
            requested_schema=_schema_from_proto(operation.all_gather.requested_schema),
        )
    # "An omitted op and an omitted collective both mean multicast."
    return MulticastOperation()


def _schema_from_proto(schema: struct_pb2.Struct) -> RequestedSchema:
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
    return _FAILURE_DELIVERIES.to_proto(delivery)


def failure_delivery_from_proto(value: types_pb2.FailureDelivery.ValueType) -> FailureDelivery:
    """Unset is the contract's default, `result`."""
    return _FAILURE_DELIVERIES.from_proto(value, "failure_delivery")


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


# --- guidance ----------------------------------------------------------------------------


def checked_guidance_to_proto(guidance: CheckedGuidance) -> guidance_pb2.CheckedGuidance:
    """One check's subjects and instructions."""
    result = guidance_pb2.CheckedGuidance(check_id=guidance.check_id)
    for subject in guidance.subjects:
        result.subjects.add(
            id=subject.id,
            sender=subject.sender,
            recipients=subject.recipients,
            text=subject.text,
        )
    for instruction in guidance.instructions:
        target = result.instructions.add()
        match instruction:
            case ExpectationInstruction():
                target.expectation.middleware_id = instruction.middleware_id
                target.expectation.rule_id = instruction.rule_id
                target.expectation.expectation = _EXPECTATIONS.to_proto(instruction.expectation)
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


def checked_guidance_from_proto(guidance: guidance_pb2.CheckedGuidance) -> CheckedGuidance:
    """CheckedGuidance; an instruction of neither shape is `InvalidRequestError`."""
    instructions: list[Instruction] = []
    for instruction in guidance.instructions:
        kind = instruction.WhichOneof("kind")
        if kind == "expectation":
            raw = instruction.expectation
            instructions.append(
                ExpectationInstruction(
                    middleware_id=raw.middleware_id,
                    rule_id=raw.rule_id,
                    expectation=_EXPECTATIONS.from_proto(raw.expectation, "expectation"),
                    subjects=tuple(raw.subjects),
                    instruction=raw.instruction,
                )
            )
        elif kind == "uncertain":
            judged = instruction.uncertain
            if not math.isfinite(judged.uncertain.probability):
                raise InvalidRequestError.of_field("uncertain.probability: numbers must be finite")
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
            raise InvalidRequestError.of_field("guidance.instructions: an instruction has no kind")
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


def local_guidance_to_proto(guidance: LocalGuidance) -> guidance_pb2.LocalGuidance:
    """Either LocalGuidance form."""
    result = guidance_pb2.LocalGuidance()
    match guidance:
        case CheckedGuidance():
            result.checked.CopyFrom(checked_guidance_to_proto(guidance))
        case CollectiveGuidance(question=question, answers=answers):
            result.collective.SetInParent()
            if question is not None:
                result.collective.question.CopyFrom(checked_guidance_to_proto(question))
            for answer in answers:
                result.collective.answers.add(
                    member=answer.member, guidance=checked_guidance_to_proto(answer.guidance)
                )
        case _:
            assert_never(guidance)
    return result


def local_guidance_from_proto(guidance: guidance_pb2.LocalGuidance) -> LocalGuidance:
    """Either LocalGuidance form; neither is `InvalidRequestError`."""
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
    raise InvalidRequestError.of_field("guidance: neither checked nor collective")


def withheld_to_proto(withheld: Withheld) -> guidance_pb2.Withheld:
    """`{kind: "withheld", checkId, reason}`."""
    return guidance_pb2.Withheld(
        check_id=withheld.check_id, reason=REFUSALS.to_proto(withheld.reason)
    )


def withheld_from_proto(withheld: guidance_pb2.Withheld) -> Withheld:
    """Withheld text."""
    return Withheld(
        check_id=withheld.check_id, reason=REFUSALS.from_proto(withheld.reason, "reason")
    )


# --- inbound items -----------------------------------------------------------------------


def inbound_message_to_proto(message: InboundMessage) -> types_pb2.InboundMessage:
    """A direct or group message."""
    result = types_pb2.InboundMessage()
    match message:
        case DirectMessage():
            result.direct.post_id = message.post_id
            result.direct.address = message.address
            result.direct.sender = message.sender
            result.direct.content.CopyFrom(content_to_proto(message.content))
        case GroupMessage():
            result.group.post_id = message.post_id
            result.group.address = message.address
            result.group.sender = message.sender
            result.group.members.extend(message.members)
            result.group.content.CopyFrom(content_to_proto(message.content))
        case _:
            assert_never(message)
    return result


def inbound_message_from_proto(message: types_pb2.InboundMessage) -> InboundMessage:
    """A direct or group message."""
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
    raise InvalidRequestError.of_field("message: neither direct nor group")


def member_outcome_to_proto(outcome: MemberOutcome) -> types_pb2.CollectiveMemberOutcome:
    """One member's outcome, Withheld included."""
    result = types_pb2.CollectiveMemberOutcome()
    match outcome:
        case Answered(content=content):
            result.answered.content.CopyFrom(answer_content_to_proto(content))
        case Declined():
            result.declined.SetInParent()
        case Invalid(reason=reason):
            result.invalid.reason = reason
        case NoAnswer():
            result.no_answer.SetInParent()
        case Withheld():
            result.withheld.CopyFrom(withheld_to_proto(outcome))
        case _:
            assert_never(outcome)
    return result


def member_outcome_from_proto(outcome: types_pb2.CollectiveMemberOutcome) -> MemberOutcome:
    """One member's outcome."""
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
        return withheld_from_proto(outcome.withheld)
    raise InvalidRequestError.of_field("outcome: no kind")


def item_to_proto(item: InboundItem) -> types_pb2.InboundItem:
    """Any of the four item kinds (`sender` carries the contract's `from`)."""
    result = types_pb2.InboundItem()
    match item:
        case MulticastItem(message=message):
            result.multicast.message.CopyFrom(inbound_message_to_proto(message))
        case CollectiveRequestItem():
            request = result.collective_request
            request.op = _OPS.to_proto(item.op)
            request.id = item.id
            request.post_id = item.post_id
            request.sender = item.sender
            request.to = item.to
            request.question = item.question
            request.requested_schema.CopyFrom(struct_to_proto(item.requested_schema))
            request.deadline_at = item.deadline_at
        case CollectiveResultItem():
            collective = result.collective_result
            collective.op = _OPS.to_proto(item.op)
            collective.id = item.id
            collective.to = item.to
            if isinstance(item.question, str):
                collective.question.text = item.question
            else:
                collective.question.withheld.CopyFrom(withheld_to_proto(item.question))
            for entry in item.outcomes:
                collective.outcomes.add(
                    member=entry.member, outcome=member_outcome_to_proto(entry.outcome)
                )
        case OperationFailedItem():
            result.operation_failed.id = item.id
            result.operation_failed.to = item.to
            result.operation_failed.error = item.error
        case _:
            assert_never(item)
    return result


def item_from_proto(item: types_pb2.InboundItem) -> InboundItem:
    """Any of the four item kinds."""
    kind = item.WhichOneof("kind")
    if kind == "multicast":
        return MulticastItem(message=inbound_message_from_proto(item.multicast.message))
    if kind == "collective_request":
        request = item.collective_request
        return CollectiveRequestItem(
            op=_OPS.from_proto(request.op, "op"),
            id=request.id,
            post_id=request.post_id,
            sender=request.sender,
            to=request.to,
            question=request.question,
            requested_schema=_schema_from_proto(request.requested_schema),
            deadline_at=request.deadline_at,
        )
    if kind == "collective_result":
        collective = item.collective_result
        question_kind = collective.question.WhichOneof("kind")
        question: str | Withheld
        if question_kind == "text":
            question = collective.question.text
        elif question_kind == "withheld":
            question = withheld_from_proto(collective.question.withheld)
        else:
            raise InvalidRequestError.of_field("collective_result.question: no kind")
        return CollectiveResultItem(
            op=_OPS.from_proto(collective.op, "op"),
            id=collective.id,
            to=collective.to,
            question=question,
            outcomes=tuple(
                MemberResult(member=entry.member, outcome=member_outcome_from_proto(entry.outcome))
                for entry in collective.outcomes
            ),
        )
    if kind == "operation_failed":
        failed = item.operation_failed
        return OperationFailedItem(id=failed.id, to=failed.to, error=failed.error)
    raise InvalidRequestError.of_field("item: no kind")


def delivery_to_proto(delivery: Delivery) -> types_pb2.InboundDelivery:
    """A delivery under its token; guidance only when the firewall gave some."""
    result = types_pb2.InboundDelivery(
        delivery_token=delivery.token, item=item_to_proto(delivery.item)
    )
    if delivery.guidance is not None:
        result.guidance.CopyFrom(local_guidance_to_proto(delivery.guidance))
    return result


def delivery_from_proto(delivery: types_pb2.InboundDelivery) -> Delivery:
    """A delivery."""
    return Delivery(
        token=delivery.delivery_token,
        item=item_from_proto(delivery.item),
        guidance=(
            local_guidance_from_proto(delivery.guidance) if delivery.HasField("guidance") else None
        ),
    )


# --- acknowledgments and send states -----------------------------------------------------


def acknowledge_result_to_proto(result: AcknowledgeResult) -> endpoint_pb2.AcknowledgeResult:
    """One token's result (the token itself is implied by the request order)."""
    message = endpoint_pb2.AcknowledgeResult()
    if result.error is None:
        message.ok.SetInParent()
    else:
        message.error.reason = _ACK_REASONS.to_proto(result.error)
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
            token=token, error=_ACK_REASONS.from_proto(result.error.reason, "error.reason")
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


# --- closed errors -----------------------------------------------------------------------


def send_error_to_proto(error: SendError) -> errors_pb2.SendError:
    """A SendError with its optional detail."""
    result = errors_pb2.SendError(reason=_SEND_REASONS.to_proto(error.send_reason))
    if error.detail is not None:
        result.detail = error.detail
    return result


def send_error_from_proto(error: errors_pb2.SendError) -> SendError:
    """A SendError."""
    return SendError(
        _SEND_REASONS.from_proto(error.reason, "reason"),
        error.detail if error.HasField("detail") else None,
    )


def collective_error_to_proto(error: CollectiveError) -> errors_pb2.CollectiveError:
    """A CollectiveError: the operation id and its failure."""
    result = errors_pb2.CollectiveError(id=error.id)
    failure = error.failure
    match failure:
        case MembersUnreachable(members=members):
            result.members_unreachable.SetInParent()
            for member in members:
                entry = result.members_unreachable.members.add(
                    member=member.member, reason=_SEND_REASONS.to_proto(member.reason)
                )
                if member.detail is not None:
                    entry.detail = member.detail
        case SchemaInvalid(detail=detail):
            result.schema_invalid.detail = detail
        case AnswerInvalid(fields=fields):
            result.answer_invalid.SetInParent()
            for issue in fields:
                field = result.answer_invalid.fields.add(
                    field=issue.field, reason=_FIELD_REASONS.to_proto(issue.reason)
                )
                if issue.detail is not None:
                    field.detail = issue.detail
        case RequestNone():
            result.request_none.SetInParent()
        case RequestAmbiguous():
            result.request_ambiguous.SetInParent()
        case RequestAnswered():
            result.request_answered.SetInParent()
        case RequestExpired():
            result.request_expired.SetInParent()
        case _:
            assert_never(failure)
    return result


def collective_error_from_proto(error: errors_pb2.CollectiveError) -> CollectiveError:
    """A CollectiveError; an unset failure is `InvalidRequestError`."""
    kind = error.WhichOneof("failure")
    failure: CollectiveFailure
    if kind == "members_unreachable":
        failure = MembersUnreachable(
            members=tuple(
                UnreachableMember(
                    member=member.member,
                    reason=_SEND_REASONS.from_proto(member.reason, "members.reason"),
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
                    reason=_FIELD_REASONS.from_proto(field.reason, "fields.reason"),
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
        raise InvalidRequestError.of_field("collective error: no failure")
    return CollectiveError(error.id, failure)


def firewall_error_to_proto(error: FirewallSendError) -> errors_pb2.FirewallSendError:
    """A FirewallSendError (its instruction travels inside `guidance`)."""
    return errors_pb2.FirewallSendError(
        check_id=error.check_id,
        refusal=REFUSALS.to_proto(error.refusal),
        middleware_id=error.middleware_id,
        rule_id=error.rule_id,
        guidance=checked_guidance_to_proto(error.guidance),
        instruction=error.instruction,
    )


def firewall_error_from_proto(error: errors_pb2.FirewallSendError) -> FirewallSendError:
    """A FirewallSendError (its `instruction` is the refusing rule's text)."""
    return FirewallSendError(
        check_id=error.check_id,
        refusal=REFUSALS.from_proto(error.refusal, "refusal"),
        middleware_id=error.middleware_id,
        rule_id=error.rule_id,
        instruction=error.instruction,
        guidance=checked_guidance_from_proto(error.guidance),
    )


def send_failure_to_proto(error: HarnessError) -> errors_pb2.SendFailure:
    """A kept send failure; only the three closed send failures can be one."""
    result = errors_pb2.SendFailure()
    match error:
        case SendError():
            result.send_error.CopyFrom(send_error_to_proto(error))
        case CollectiveError():
            result.collective_error.CopyFrom(collective_error_to_proto(error))
        case FirewallSendError():
            result.firewall_send_error.CopyFrom(firewall_error_to_proto(error))
        case _:
            raise ValueError(f"{type(error).__name__} is not a send failure")
    return result


def send_failure_from_proto(failure: errors_pb2.SendFailure) -> SendFailure:
    """A kept send failure."""
    kind = failure.WhichOneof("failure")
    if kind == "send_error":
        return send_error_from_proto(failure.send_error)
    if kind == "collective_error":
        return collective_error_from_proto(failure.collective_error)
    if kind == "firewall_send_error":
        return firewall_error_from_proto(failure.firewall_send_error)
    raise InvalidRequestError.of_field("send failure: no failure")


def listen_error_to_proto(error: ListenError) -> errors_pb2.ListenError:
    """A ListenError."""
    return errors_pb2.ListenError(reason=_LISTEN_REASONS.to_proto(error.listen_reason))


def listen_error_from_proto(error: errors_pb2.ListenError) -> ListenError:
    """A ListenError."""
    return ListenError(_LISTEN_REASONS.from_proto(error.reason, "reason"))


def acknowledge_error_to_proto(
    error: DeliveryAcknowledgeError,
) -> errors_pb2.DeliveryAcknowledgeError:
    """A DeliveryAcknowledgeError."""
    return errors_pb2.DeliveryAcknowledgeError(
        reason=_ACK_REASONS.to_proto(error.acknowledge_reason)
    )


def acknowledge_error_from_proto(
    error: errors_pb2.DeliveryAcknowledgeError,
) -> DeliveryAcknowledgeError:
    """A DeliveryAcknowledgeError."""
    return DeliveryAcknowledgeError(_ACK_REASONS.from_proto(error.reason, "reason"))


def connect_error_to_proto(error: ConnectError) -> errors_pb2.ConnectError:
    """A ConnectError."""
    return errors_pb2.ConnectError(reason=_CONNECT_REASONS.to_proto(error.connect_reason))


def connect_error_from_proto(error: errors_pb2.ConnectError) -> ConnectError:
    """A ConnectError."""
    return ConnectError(_CONNECT_REASONS.from_proto(error.reason, "reason"))


def message_text_error_to_proto(error: MessageTextError) -> errors_pb2.MessageTextError:
    """A MessageTextError."""
    return errors_pb2.MessageTextError(
        operation=_TEXT_OPERATIONS.to_proto(error.operation), detail=error.detail
    )


def message_text_error_from_proto(error: errors_pb2.MessageTextError) -> MessageTextError:
    """A MessageTextError."""
    return MessageTextError(_TEXT_OPERATIONS.from_proto(error.operation, "operation"), error.detail)


def parse_result_to_proto(
    result: SendInput | MessageTextError,
) -> endpoint_pb2.ParseMessageTextResponse:
    """The contract's `Either<SendInput, MessageTextError>`: the send, or why the text fails."""
    match result:
        case MessageTextError():
            return endpoint_pb2.ParseMessageTextResponse(error=message_text_error_to_proto(result))
        case _:
            return endpoint_pb2.ParseMessageTextResponse(input=send_input_to_proto(result))


def authentication_error_to_proto(error: AuthenticationError) -> errors_pb2.AuthenticationError:
    """The detail of an UNAUTHENTICATED status (a gateway extension; never the token)."""
    return errors_pb2.AuthenticationError(
        reason=_AUTHENTICATION_REASONS.to_proto(error.authentication_reason)
    )


def parse_result_from_proto(
    response: endpoint_pb2.ParseMessageTextResponse,
) -> SendInput | MessageTextError:
    """The send a text states, or why it fails."""
    kind = response.WhichOneof("result")
    if kind == "input":
        return send_input_from_proto(response.input)
    if kind == "error":
        return message_text_error_from_proto(response.error)
    raise InvalidRequestError.of_field("parse result: neither input nor error")


def idempotency_conflict_to_proto(
    error: IdempotencyConflictError,
) -> errors_pb2.IdempotencyConflict:
    """The conflicting key."""
    return errors_pb2.IdempotencyConflict(key=error.key)


def idempotency_conflict_from_proto(
    error: errors_pb2.IdempotencyConflict,
) -> IdempotencyConflictError:
    """The conflicting key."""
    return IdempotencyConflictError(error.key)


ErrorDetail: TypeAlias = (
    errors_pb2.SendError
    | errors_pb2.CollectiveError
    | errors_pb2.FirewallSendError
    | errors_pb2.ListenError
    | errors_pb2.DeliveryAcknowledgeError
    | errors_pb2.ConnectError
    | errors_pb2.MessageTextError
    | errors_pb2.IdempotencyConflict
    | errors_pb2.AuthenticationError
)
"""The closed protobuf errors a status may carry as its first detail."""


def error_to_proto(error: HarnessError) -> ErrorDetail | None:
    """The closed protobuf error a status carries for `error`, or None when it has none."""
    match error:
        case SendError():
            return send_error_to_proto(error)
        case CollectiveError():
            return collective_error_to_proto(error)
        case FirewallSendError():
            return firewall_error_to_proto(error)
        case ListenError():
            return listen_error_to_proto(error)
        case DeliveryAcknowledgeError():
            return acknowledge_error_to_proto(error)
        case ConnectError():
            return connect_error_to_proto(error)
        case MessageTextError():
            return message_text_error_to_proto(error)
        case IdempotencyConflictError():
            return idempotency_conflict_to_proto(error)
        case AuthenticationError():
            return authentication_error_to_proto(error)
        case _:
            return None


def error_from_proto(detail: ErrorDetail, message: str = "") -> HarnessError:
    """The typed error a closed protobuf error stands for; `message` is the status text
    (only an `AuthenticationError` keeps it: the others rebuild theirs from the fields)."""
    match detail:
        case errors_pb2.SendError():
            return send_error_from_proto(detail)
        case errors_pb2.CollectiveError():
            return collective_error_from_proto(detail)
        case errors_pb2.FirewallSendError():
            return firewall_error_from_proto(detail)
        case errors_pb2.ListenError():
            return listen_error_from_proto(detail)
        case errors_pb2.DeliveryAcknowledgeError():
            return acknowledge_error_from_proto(detail)
        case errors_pb2.ConnectError():
            return connect_error_from_proto(detail)
        case errors_pb2.MessageTextError():
            return message_text_error_from_proto(detail)
        case errors_pb2.IdempotencyConflict():
            return idempotency_conflict_from_proto(detail)
        case errors_pb2.AuthenticationError():
            return AuthenticationError(
                _AUTHENTICATION_REASONS.from_proto(detail.reason, "reason"), message
            )
        case _:
            assert_never(detail)


# --- statuses ----------------------------------------------------------------------------

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


# --- management --------------------------------------------------------------------------


def registered_agent_to_proto(agent: RegisteredAgent) -> management_pb2.RegisterAgentResponse:
    """A registration and its one-time token."""
    return management_pb2.RegisterAgentResponse(
        address=agent.address, agent_id=agent.agent_id, token=agent.token
    )


def registered_agent_from_proto(agent: management_pb2.RegisterAgentResponse) -> RegisteredAgent:
    """A registration."""
    return RegisteredAgent(address=agent.address, agent_id=agent.agent_id, token=agent.token)


def agent_status_to_proto(status: AgentStatus) -> management_pb2.AgentStatus:
    """What an operator sees of one agent."""
    return management_pb2.AgentStatus(
        name=status.name,
        address=status.address,
        agent_id=status.agent_id,
        public_key=status.public_key,
        issued_at=status.issued_at,
        hosted=status.hosted,
        stream_attached=status.stream_attached,
        backlog=status.backlog,
        oldest_unacked_age_seconds=status.oldest_unacked_age_seconds,
        set_aside=[
            management_pb2.SetAsideConversation(
                conversation_id=item.conversation_id, reason=item.reason
            )
            for item in status.set_aside
        ],
    )


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


def conversation_to_proto(summary: ConversationSummary) -> management_pb2.ConversationSummary:
    """One conversation an agent stores."""
    result = management_pb2.ConversationSummary(
        address=summary.address,
        kind=_CONVERSATION_KINDS.to_proto(summary.kind),
        members=summary.members,
        depth=summary.depth,
    )
    if summary.head_record_hash is not None:
        result.head_record_hash = summary.head_record_hash
    return result


def conversation_from_proto(summary: management_pb2.ConversationSummary) -> ConversationSummary:
    """One conversation."""
    return ConversationSummary(
        address=summary.address,
        kind=_CONVERSATION_KINDS.from_proto(summary.kind, "kind"),
        members=tuple(summary.members),
        head_record_hash=(
            summary.head_record_hash if summary.HasField("head_record_hash") else None
        ),
        depth=summary.depth,
    )


def conversation_record_to_proto(record: ConversationRecord) -> management_pb2.ConversationRecord:
    """One certified record."""
    return management_pb2.ConversationRecord(
        record_hash=record.record_hash,
        post_id=record.post_id,
        author=record.author,
        depth=record.depth,
        content=content_to_proto(record.content),
        certified_record=record.certified_record,
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


def gateway_status_to_proto(status: GatewayStatus) -> management_pb2.GetGatewayStatusResponse:
    """Version, mode, hosted agents and Router state (unknown names are UNSPECIFIED)."""
    return management_pb2.GetGatewayStatusResponse(
        version=status.version,
        mode=_MODES.to_proto_or_unspecified(status.mode),
        hosted_agents=status.hosted_agents,
        router_state=_ROUTER_STATES.to_proto_or_unspecified(status.router_state),
    )


def gateway_status_from_proto(status: management_pb2.GetGatewayStatusResponse) -> GatewayStatus:
    """The daemon's status."""
    return GatewayStatus(
        version=status.version,
        mode=_MODES.from_proto(status.mode, "mode"),
        hosted_agents=status.hosted_agents,
        router_state=_ROUTER_STATES.from_proto(status.router_state, "router_state"),
    )

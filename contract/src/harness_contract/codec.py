"""The contract's JSON shapes of the public values (camelCase, as the contract writes them).

Used where a value is stored or exported as JSON: inbox items and their guidance, the
idempotency binding of a `SendInput`, kept send outcomes, the history export, and what the
`harness` CLI prints. Every `*_from_json` is strict (exact keys) and raises only
`CodecError`, so a row that does not decode is reported, never half-read. `to_json` takes
any public value and answers plain `json`-module values (lists, not tuples).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TypeVar, assert_never

from harness_contract.content import content_from_json, content_to_json
from harness_contract.errors import (
    AnswerFieldIssue,
    AnswerFieldReason,
    AnswerInvalid,
    CollectiveError,
    CollectiveFailure,
    FirewallRefusal,
    FirewallSendError,
    HarnessError,
    IdempotencyConflictError,
    MembersUnreachable,
    MessageTextError,
    RequestAmbiguous,
    RequestAnswered,
    RequestExpired,
    RequestNone,
    SchemaInvalid,
    SendError,
    SendErrorReason,
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
    RegisteredAgent,
)
from harness_contract.values import (
    Accept,
    AnswerContent,
    Answered,
    AskOperation,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResponse,
    CollectiveResultItem,
    Content,
    DataPart,
    Decline,
    Declined,
    Delivery,
    DirectMessage,
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

E = TypeVar("E")


class CodecError(ValueError):
    """A JSON value does not have the expected contract shape; `detail` says where."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


# --- helpers ---------------------------------------------------------------------------


def _object(
    value: JsonValue, where: str, required: set[str], optional: Collection[str] = ()
) -> Mapping[str, JsonValue]:
    if not isinstance(value, Mapping):
        raise CodecError(f"{where}: expected an object")
    keys = set(value)
    if missing := required - keys:
        raise CodecError(f"{where}: missing {sorted(missing)}")
    if extra := keys - required - set(optional):
        raise CodecError(f"{where}: unexpected {sorted(extra)}")
    return value


def _str(value: JsonValue, where: str) -> str:
    if not isinstance(value, str):
        raise CodecError(f"{where}: expected a string")
    return value


def _int(value: JsonValue, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise CodecError(f"{where}: expected an integer")
    return int(value)


def _list(value: JsonValue, where: str) -> Sequence[JsonValue]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise CodecError(f"{where}: expected an array")
    return value


def _strs(value: JsonValue, where: str) -> tuple[str, ...]:
    return tuple(_str(item, where) for item in _list(value, where))


def _enum(factory: Callable[[str], E], value: JsonValue, where: str) -> E:
    try:
        return factory(_str(value, where))
    except ValueError:
        raise CodecError(f"{where}: unknown value {value!r}") from None


def _schema(value: JsonValue, where: str) -> Mapping[str, JsonValue]:
    if not isinstance(value, Mapping):
        raise CodecError(f"{where}: expected an object")
    return value


# --- answers ---------------------------------------------------------------------------


def answer_content_to_json(content: AnswerContent) -> dict[str, JsonValue]:
    """AnswerContent as a JSON object (string arrays as arrays)."""
    return dict(content)


def answer_content_from_json(value: JsonValue, where: str = "content") -> AnswerContent:
    """Strict AnswerContent: each value a string, a finite number, a boolean or strings."""
    if not isinstance(value, Mapping):
        raise CodecError(f"{where}: expected an object")
    result: dict[str, str | float | bool | tuple[str, ...]] = {}
    for key, item in value.items():
        if isinstance(item, bool | str):
            result[key] = item
        elif isinstance(item, int | float):
            result[key] = float(item)
        elif isinstance(item, Sequence) and all(isinstance(entry, str) for entry in item):
            result[key] = tuple(str(entry) for entry in item)
        else:
            raise CodecError(f"{where}.{key}: expected an answer value")
    return result


# --- SendInput -------------------------------------------------------------------------


def send_input_to_json(send_input: SendInput) -> dict[str, JsonValue]:
    """The contract's SendInput shape; an omitted collective stays omitted."""
    match send_input:
        case MessageInput(to=to, text=text, collective=collective):
            result: dict[str, JsonValue] = {"to": to, "text": text}
            match collective:
                case None:
                    pass
                case MulticastOperation():
                    result["collective"] = {"op": "multicast"}
                case AskOperation(op=op, deadline=deadline, requested_schema=schema):
                    result["collective"] = {
                        "op": op.value,
                        "deadline": float(deadline),
                        "requestedSchema": schema,
                    }
                case _:
                    assert_never(collective)
            return result
        case ResponseInput(to=to, response=response):
            return {"to": to, "collectiveResponse": response_to_json(response)}
        case _:
            assert_never(send_input)


def response_to_json(response: CollectiveResponse) -> dict[str, JsonValue]:
    """`{action: "accept", content}` or `{action: "decline"}` (an answer's JSON text is
    what the firewall checks, firewall.md §2.1)."""
    match response:
        case Accept(content=content):
            return {"action": "accept", "content": answer_content_to_json(content)}
        case Decline():
            return {"action": "decline"}
        case _:
            assert_never(response)


def send_input_from_json(value: JsonValue) -> SendInput:
    """Read a SendInput from its contract shape."""
    if isinstance(value, Mapping) and "collectiveResponse" in value:
        obj = _object(value, "input", {"to", "collectiveResponse"})
        answer = obj["collectiveResponse"]
        action = _str(
            _object(answer, "collectiveResponse", {"action"}, {"content"})["action"], "action"
        )
        if action == "accept":
            accept = _object(answer, "collectiveResponse", {"action", "content"})
            return ResponseInput(
                to=_str(obj["to"], "to"),
                response=Accept(content=answer_content_from_json(accept["content"])),
            )
        if action == "decline":
            _object(answer, "collectiveResponse", {"action"})
            return ResponseInput(to=_str(obj["to"], "to"), response=Decline())
        raise CodecError(f"collectiveResponse.action: unknown value {action!r}")
    obj = _object(value, "input", {"to", "text"}, {"collective"})
    to, text = _str(obj["to"], "to"), _str(obj["text"], "text")
    if "collective" not in obj:
        return MessageInput(to=to, text=text)
    collective = _object(obj["collective"], "collective", {"op"}, {"deadline", "requestedSchema"})
    op = _str(collective["op"], "collective.op")
    if op == "multicast":
        _object(collective, "collective", {"op"})
        return MessageInput(to=to, text=text, collective=MulticastOperation())
    ask = _object(collective, "collective", {"op", "deadline", "requestedSchema"})
    return MessageInput(
        to=to,
        text=text,
        collective=AskOperation(
            op=_enum(CollectiveOp, op, "collective.op"),
            deadline=_int(ask["deadline"], "collective.deadline"),
            requested_schema=_schema(ask["requestedSchema"], "collective.requestedSchema"),
        ),
    )


def send_result_to_json(result: SendResult) -> dict[str, JsonValue]:
    """`{operationId?, guidance?, postIds?}` (`postIds` when the send certified a post)."""
    value: dict[str, JsonValue] = {}
    if result.operation_id is not None:
        value["operationId"] = result.operation_id
    if result.guidance is not None:
        value["guidance"] = checked_guidance_to_json(result.guidance)
    if result.post_ids:
        value["postIds"] = result.post_ids
    return value


def send_result_from_json(value: JsonValue) -> SendResult:
    """Read a SendResult."""
    obj = _object(value, "result", set(), {"operationId", "guidance", "postIds"})
    return SendResult(
        operation_id=_str(obj["operationId"], "operationId") if "operationId" in obj else None,
        guidance=checked_guidance_from_json(obj["guidance"]) if "guidance" in obj else None,
        # Kept outcomes stored before the field have none.
        post_ids=_strs(obj["postIds"], "postIds") if "postIds" in obj else (),
    )


# --- guidance --------------------------------------------------------------------------


def checked_guidance_to_json(guidance: CheckedGuidance) -> dict[str, JsonValue]:
    """CheckedGuidance in the contract's shape."""
    return {
        "checkId": guidance.check_id,
        "subjects": tuple(
            {
                "id": subject.id,
                "sender": subject.sender,
                "recipients": subject.recipients,
                "text": subject.text,
            }
            for subject in guidance.subjects
        ),
        "instructions": tuple(_instruction_to_json(item) for item in guidance.instructions),
    }


def _instruction_to_json(instruction: Instruction) -> dict[str, JsonValue]:
    match instruction:
        case ExpectationInstruction():
            return {
                "middlewareId": instruction.middleware_id,
                "ruleId": instruction.rule_id,
                "expectation": instruction.expectation.value,
                "subjects": instruction.subjects,
                "instruction": instruction.instruction,
            }
        case UncertainInstruction():
            return {
                "middlewareId": instruction.middleware_id,
                "ruleId": instruction.rule_id,
                "uncertain": {
                    "choice": instruction.uncertain.choice,
                    "probability": instruction.uncertain.probability,
                },
                "instruction": instruction.instruction,
            }
        case _:
            assert_never(instruction)


def checked_guidance_from_json(value: JsonValue) -> CheckedGuidance:
    """Read CheckedGuidance."""
    obj = _object(value, "guidance", {"checkId", "subjects", "instructions"})
    subjects = []
    for item in _list(obj["subjects"], "subjects"):
        subject = _object(item, "subject", {"id", "sender", "recipients", "text"})
        subjects.append(
            GuidanceSubject(
                id=_str(subject["id"], "subject.id"),
                sender=_str(subject["sender"], "subject.sender"),
                recipients=_strs(subject["recipients"], "subject.recipients"),
                text=_str(subject["text"], "subject.text"),
            )
        )
    instructions: list[Instruction] = []
    for item in _list(obj["instructions"], "instructions"):
        if isinstance(item, Mapping) and "uncertain" in item:
            raw = _object(
                item, "instruction", {"middlewareId", "ruleId", "uncertain", "instruction"}
            )
            uncertain = _object(raw["uncertain"], "uncertain", {"choice", "probability"})
            probability = uncertain["probability"]
            if isinstance(probability, bool) or not isinstance(probability, int | float):
                raise CodecError("uncertain.probability: expected a number")
            instructions.append(
                UncertainInstruction(
                    middleware_id=_str(raw["middlewareId"], "middlewareId"),
                    rule_id=_str(raw["ruleId"], "ruleId"),
                    uncertain=Uncertain(
                        choice=_str(uncertain["choice"], "uncertain.choice"),
                        probability=float(probability),
                    ),
                    instruction=_str(raw["instruction"], "instruction"),
                )
            )
        else:
            raw = _object(
                item,
                "instruction",
                {"middlewareId", "ruleId", "expectation", "subjects", "instruction"},
            )
            instructions.append(
                ExpectationInstruction(
                    middleware_id=_str(raw["middlewareId"], "middlewareId"),
                    rule_id=_str(raw["ruleId"], "ruleId"),
                    expectation=_enum(Expectation, raw["expectation"], "expectation"),
                    subjects=_strs(raw["subjects"], "subjects"),
                    instruction=_str(raw["instruction"], "instruction"),
                )
            )
    return CheckedGuidance(
        check_id=_str(obj["checkId"], "checkId"),
        subjects=tuple(subjects),
        instructions=tuple(instructions),
    )


def local_guidance_to_json(guidance: LocalGuidance) -> dict[str, JsonValue]:
    """Either LocalGuidance form."""
    match guidance:
        case CheckedGuidance():
            return checked_guidance_to_json(guidance)
        case CollectiveGuidance(question=question, answers=answers):
            value: dict[str, JsonValue] = {
                "answers": tuple(
                    {**checked_guidance_to_json(answer.guidance), "member": answer.member}
                    for answer in answers
                )
            }
            if question is not None:
                value["question"] = checked_guidance_to_json(question)
            return value
        case _:
            assert_never(guidance)


def local_guidance_from_json(value: JsonValue) -> LocalGuidance:
    """Read either LocalGuidance form (the collective one has `answers`)."""
    if isinstance(value, Mapping) and "answers" in value:
        obj = _object(value, "guidance", {"answers"}, {"question"})
        answers = []
        for item in _list(obj["answers"], "answers"):
            if not isinstance(item, Mapping):
                raise CodecError("answers: expected objects")
            answers.append(
                MemberGuidance(
                    member=_str(item.get("member"), "answers.member"),
                    guidance=checked_guidance_from_json(
                        {key: entry for key, entry in item.items() if key != "member"}
                    ),
                )
            )
        question = obj.get("question")
        return CollectiveGuidance(
            question=None if question is None else checked_guidance_from_json(question),
            answers=tuple(answers),
        )
    return checked_guidance_from_json(value)


# --- items -----------------------------------------------------------------------------


def withheld_to_json(withheld: Withheld) -> dict[str, JsonValue]:
    """`{kind: "withheld", checkId, reason}`."""
    return {"kind": "withheld", "checkId": withheld.check_id, "reason": withheld.reason.value}


def _withheld_from_json(value: JsonValue) -> Withheld:
    obj = _object(value, "withheld", {"kind", "checkId", "reason"})
    if obj["kind"] != "withheld":
        raise CodecError("withheld.kind: expected withheld")
    return Withheld(
        check_id=_str(obj["checkId"], "checkId"),
        reason=_enum(FirewallRefusal, obj["reason"], "withheld.reason"),
    )


def outcome_to_json(outcome: MemberOutcome) -> dict[str, JsonValue]:
    """A CollectiveMemberOutcome."""
    match outcome:
        case Answered(content=content):
            return {"kind": "answered", "content": answer_content_to_json(content)}
        case Declined():
            return {"kind": "declined"}
        case Invalid(reason=reason):
            return {"kind": "invalid", "reason": reason}
        case NoAnswer():
            return {"kind": "no-answer"}
        case Withheld():
            return withheld_to_json(outcome)
        case _:
            assert_never(outcome)


def outcome_from_json(value: JsonValue) -> MemberOutcome:
    """Read a CollectiveMemberOutcome."""
    kind = _str(value.get("kind") if isinstance(value, Mapping) else None, "outcome.kind")
    if kind == "answered":
        obj = _object(value, "outcome", {"kind", "content"})
        return Answered(content=answer_content_from_json(obj["content"]))
    if kind == "declined":
        _object(value, "outcome", {"kind"})
        return Declined()
    if kind == "invalid":
        obj = _object(value, "outcome", {"kind", "reason"})
        return Invalid(reason=_str(obj["reason"], "outcome.reason"))
    if kind == "no-answer":
        _object(value, "outcome", {"kind"})
        return NoAnswer()
    if kind == "withheld":
        return _withheld_from_json(value)
    raise CodecError(f"outcome.kind: unknown value {kind!r}")


def message_to_json(message: InboundMessage) -> dict[str, JsonValue]:
    """An InboundMessage."""
    match message:
        case DirectMessage():
            return {
                "kind": "direct",
                "postId": message.post_id,
                "address": message.address,
                "sender": message.sender,
                "content": content_to_json(message.content),
            }
        case GroupMessage():
            return {
                "kind": "group",
                "postId": message.post_id,
                "address": message.address,
                "sender": message.sender,
                "members": message.members,
                "content": content_to_json(message.content),
            }
        case _:
            assert_never(message)


def message_from_json(value: JsonValue) -> InboundMessage:
    kind = value.get("kind") if isinstance(value, Mapping) else None
    if kind == "direct":
        obj = _object(value, "message", {"kind", "postId", "address", "sender", "content"})
        return DirectMessage(
            post_id=_str(obj["postId"], "postId"),
            address=_str(obj["address"], "address"),
            sender=_str(obj["sender"], "sender"),
            content=_content(obj["content"]),
        )
    if kind == "group":
        obj = _object(
            value, "message", {"kind", "postId", "address", "sender", "members", "content"}
        )
        return GroupMessage(
            post_id=_str(obj["postId"], "postId"),
            address=_str(obj["address"], "address"),
            sender=_str(obj["sender"], "sender"),
            members=_strs(obj["members"], "members"),
            content=_content(obj["content"]),
        )
    raise CodecError("message.kind: expected direct or group")


def _content(value: JsonValue) -> Content:
    try:
        return content_from_json(value)
    except SendError as error:
        raise CodecError(f"content: {error.message}") from None


def item_to_json(item: InboundItem) -> dict[str, JsonValue]:
    """An InboundItem in the contract's shape (`from` for the requester)."""
    match item:
        case MulticastItem(message=message):
            return {"kind": "multicast", "message": message_to_json(message)}
        case CollectiveRequestItem():
            return {
                "kind": "collectiveRequest",
                "op": item.op.value,
                "id": item.id,
                "postId": item.post_id,
                "from": item.sender,
                "to": item.to,
                "question": item.question,
                "requestedSchema": item.requested_schema,
                "deadlineAt": float(item.deadline_at),
            }
        case CollectiveResultItem():
            return {
                "kind": "collectiveResult",
                "op": item.op.value,
                "id": item.id,
                "to": item.to,
                "question": (
                    item.question
                    if isinstance(item.question, str)
                    else withheld_to_json(item.question)
                ),
                "outcomes": tuple(
                    {"member": entry.member, "outcome": outcome_to_json(entry.outcome)}
                    for entry in item.outcomes
                ),
            }
        case OperationFailedItem():
            return {"kind": "operationFailed", "id": item.id, "to": item.to, "error": item.error}
        case _:
            assert_never(item)


def item_from_json(value: JsonValue) -> InboundItem:
    """Read an InboundItem."""
    kind = value.get("kind") if isinstance(value, Mapping) else None
    if kind == "multicast":
        obj = _object(value, "item", {"kind", "message"})
        return MulticastItem(message=message_from_json(obj["message"]))
    if kind == "collectiveRequest":
        keys = {
            "kind",
            "op",
            "id",
            "postId",
            "from",
            "to",
            "question",
            "requestedSchema",
            "deadlineAt",
        }
        obj = _object(value, "item", keys)
        return CollectiveRequestItem(
            op=_enum(CollectiveOp, obj["op"], "op"),
            id=_str(obj["id"], "id"),
            post_id=_str(obj["postId"], "postId"),
            sender=_str(obj["from"], "from"),
            to=_str(obj["to"], "to"),
            question=_str(obj["question"], "question"),
            requested_schema=_schema(obj["requestedSchema"], "requestedSchema"),
            deadline_at=_int(obj["deadlineAt"], "deadlineAt"),
        )
    if kind == "collectiveResult":
        obj = _object(value, "item", {"kind", "op", "id", "to", "question", "outcomes"})
        question = obj["question"]
        outcomes = []
        for entry in _list(obj["outcomes"], "outcomes"):
            pair = _object(entry, "outcomes", {"member", "outcome"})
            outcomes.append(
                MemberResult(
                    member=_str(pair["member"], "member"),
                    outcome=outcome_from_json(pair["outcome"]),
                )
            )
        return CollectiveResultItem(
            op=_enum(CollectiveOp, obj["op"], "op"),
            id=_str(obj["id"], "id"),
            to=_str(obj["to"], "to"),
            question=question if isinstance(question, str) else _withheld_from_json(question),
            outcomes=tuple(outcomes),
        )
    if kind == "operationFailed":
        obj = _object(value, "item", {"kind", "id", "to", "error"})
        return OperationFailedItem(
            id=_str(obj["id"], "id"), to=_str(obj["to"], "to"), error=_str(obj["error"], "error")
        )
    raise CodecError(f"item.kind: unknown value {kind!r}")


# --- errors ----------------------------------------------------------------------------


def error_to_json(error: HarnessError) -> dict[str, JsonValue]:
    """A closed send-side error with every typed field (kept outcomes, CLI `--json`)."""
    match error:
        case SendError():
            value: dict[str, JsonValue] = {"type": "SendError", "reason": error.reason}
            if error.detail is not None:
                value["detail"] = error.detail
            return value
        case CollectiveError(failure=failure):
            value = {"type": "CollectiveError", "reason": error.reason, "id": error.id}
            match failure:
                case MembersUnreachable(members=members):
                    value["members"] = tuple(
                        _issue_to_json("member", member.member, member.reason, member.detail)
                        for member in members
                    )
                case SchemaInvalid(detail=detail):
                    value["detail"] = detail
                case AnswerInvalid(fields=fields):
                    value["fields"] = tuple(
                        _issue_to_json("field", issue.field, issue.reason, issue.detail)
                        for issue in fields
                    )
                case _:
                    pass
            return value
        case FirewallSendError():
            return {
                "type": "FirewallSendError",
                "reason": error.reason,
                "checkId": error.check_id,
                "middlewareId": error.middleware_id,
                "ruleId": error.rule_id,
                "instruction": error.instruction,
                "guidance": checked_guidance_to_json(error.guidance),
            }
        case MessageTextError():
            return {
                "type": "MessageTextError",
                "reason": error.reason,
                "operation": error.operation.value,
                "detail": error.detail,
            }
        case IdempotencyConflictError():
            return {"type": "IdempotencyConflictError", "reason": error.reason, "key": error.key}
        case _:
            return {"type": type(error).__name__, "reason": error.reason, "message": error.message}


def _issue_to_json(
    subject_key: str, subject: str, reason: enum.StrEnum, detail: str | None
) -> dict[str, JsonValue]:
    """One entry of a collective failure's list: `{<subject_key>, reason, detail?}`."""
    entry: dict[str, JsonValue] = {subject_key: subject, "reason": reason.value}
    if detail is not None:
        entry["detail"] = detail
    return entry


def _issues_from_json(
    value: JsonValue, where: str, subject_key: str, reasons: Callable[[str], E]
) -> list[tuple[str, E, str | None]]:
    """The entries `_issue_to_json` wrote, as (subject, reason, detail)."""
    issues = []
    for item in _list(value, where):
        entry = _object(item, where, {subject_key, "reason"}, {"detail"})
        detail = entry.get("detail")
        issues.append(
            (
                _str(entry[subject_key], subject_key),
                _enum(reasons, entry["reason"], "reason"),
                None if detail is None else _str(detail, "detail"),
            )
        )
    return issues


def error_from_json(value: JsonValue) -> HarnessError:
    """Read a send-side error written by `error_to_json`."""
    obj = _object(
        value,
        "error",
        {"type", "reason"},
        {
            "detail",
            "id",
            "members",
            "fields",
            "checkId",
            "middlewareId",
            "ruleId",
            "instruction",
            "guidance",
        },
    )
    kind = obj["type"]
    reason = _str(obj["reason"], "error.reason")
    if kind == "SendError":
        detail = obj.get("detail")
        return SendError(
            _enum(SendErrorReason, reason, "error.reason"),
            None if detail is None else _str(detail, "error.detail"),
        )
    if kind == "CollectiveError":
        operation_id = _str(obj.get("id"), "error.id")
        failures: dict[str, CollectiveFailure] = {
            "request-none": RequestNone(),
            "request-ambiguous": RequestAmbiguous(),
            "request-answered": RequestAnswered(),
            "request-expired": RequestExpired(),
        }
        if reason in failures:
            return CollectiveError(operation_id, failures[reason])
        if reason == "schema-invalid":
            return CollectiveError(
                operation_id, SchemaInvalid(detail=_str(obj.get("detail"), "detail"))
            )
        if reason == "members-unreachable":
            members = tuple(
                UnreachableMember(member=member, reason=member_reason, detail=detail)
                for member, member_reason, detail in _issues_from_json(
                    obj.get("members"), "members", "member", SendErrorReason
                )
            )
            return CollectiveError(operation_id, MembersUnreachable(members=members))
        if reason == "answer-invalid":
            fields = tuple(
                AnswerFieldIssue(field=field, reason=field_reason, detail=detail)
                for field, field_reason, detail in _issues_from_json(
                    obj.get("fields"), "fields", "field", AnswerFieldReason
                )
            )
            return CollectiveError(operation_id, AnswerInvalid(fields=fields))
        raise CodecError(f"error.reason: unknown collective kind {reason!r}")
    if kind == "FirewallSendError":
        return FirewallSendError(
            check_id=_str(obj.get("checkId"), "checkId"),
            refusal=_enum(FirewallRefusal, reason, "error.reason"),
            middleware_id=_str(obj.get("middlewareId"), "middlewareId"),
            rule_id=_str(obj.get("ruleId"), "ruleId"),
            instruction=_str(obj.get("instruction"), "instruction"),
            guidance=checked_guidance_from_json(obj.get("guidance")),
        )
    raise CodecError(f"error.type: unknown value {kind!r}")


# --- what only the client prints -----------------------------------------------------------


def delivery_to_json(delivery: Delivery) -> dict[str, JsonValue]:
    """`{token, item, guidance?}`: one `harness listen` line."""
    value: dict[str, JsonValue] = {"token": delivery.token, "item": item_to_json(delivery.item)}
    if delivery.guidance is not None:
        value["guidance"] = local_guidance_to_json(delivery.guidance)
    return value


def send_state_to_json(state: SendState) -> dict[str, JsonValue]:
    """`{state: absent | pending | indeterminate | returned, input?, outcome?}`."""
    match state:
        case SendAbsent():
            return {"state": "absent"}
        case SendPending(input=send_input):
            return {"state": "pending", "input": send_input_to_json(send_input)}
        case SendIndeterminate(input=send_input):
            return {"state": "indeterminate", "input": send_input_to_json(send_input)}
        case SendReturned(input=send_input, outcome=outcome):
            kept: dict[str, JsonValue]
            if isinstance(outcome, SendResult):
                kept = {"kind": "success", "result": send_result_to_json(outcome)}
            else:
                kept = {"kind": "failure", "error": error_to_json(outcome)}
            return {"state": "returned", "input": send_input_to_json(send_input), "outcome": kept}
        case _:
            assert_never(state)


def registered_agent_to_json(agent: RegisteredAgent) -> dict[str, JsonValue]:
    """`{address, agentId, token}`: the token is shown this once."""
    return {"address": agent.address, "agentId": agent.agent_id, "token": agent.token}


def agent_status_to_json(status: AgentStatus) -> dict[str, JsonValue]:
    """The agent's card, hosting, stream and backlog."""
    return {
        "name": status.name,
        "address": status.address,
        "agentId": status.agent_id,
        "publicKey": status.public_key,
        "issuedAt": status.issued_at,
        "hosted": status.hosted,
        "streamAttached": status.stream_attached,
        "backlog": status.backlog,
        "oldestUnackedAgeSeconds": status.oldest_unacked_age_seconds,
        "setAside": tuple(
            {"conversationId": item.conversation_id, "reason": item.reason}
            for item in status.set_aside
        ),
    }


def conversation_summary_to_json(summary: ConversationSummary) -> dict[str, JsonValue]:
    """`{address, kind, members, headRecordHash?, depth}`."""
    value: dict[str, JsonValue] = {
        "address": summary.address,
        "kind": summary.kind,
        "members": summary.members,
        "depth": summary.depth,
    }
    if summary.head_record_hash is not None:
        value["headRecordHash"] = summary.head_record_hash
    return value


def conversation_record_to_json(record: ConversationRecord) -> dict[str, JsonValue]:
    """`{recordHash, postId, author, depth, content}` (the record's JCS bytes are left out;
    the export has them)."""
    return {
        "recordHash": record.record_hash,
        "postId": record.post_id,
        "author": record.author,
        "depth": record.depth,
        "content": content_to_json(record.content),
    }


def gateway_status_to_json(status: GatewayStatus) -> dict[str, JsonValue]:
    """`{version, mode, hostedAgents, routerState}`."""
    return {
        "version": status.version,
        "mode": status.mode,
        "hostedAgents": status.hosted_agents,
        "routerState": status.router_state,
    }


Printable = (
    InboundItem
    | InboundMessage
    | MemberOutcome
    | TextPart
    | DataPart
    | SendInput
    | SendResult
    | SendState
    | Delivery
    | LocalGuidance
    | HarnessError
    | RegisteredAgent
    | AgentStatus
    | ConversationSummary
    | ConversationRecord
    | GatewayStatus
)
"""Every public value `to_json` prints."""


def to_json(value: Printable) -> dict[str, object]:
    """Any public value in the contract's JSON shape, as plain `json` values (arrays are
    lists): what `harness --json` prints and what a host may hand its model."""
    return _plain(_shape(value))  # type: ignore[return-value]


def _shape(value: Printable) -> JsonValue:
    match value:
        case (
            MulticastItem()
            | CollectiveRequestItem()
            | CollectiveResultItem()
            | OperationFailedItem()
        ):
            return item_to_json(value)
        case DirectMessage() | GroupMessage():
            return message_to_json(value)
        case Answered() | Declined() | Invalid() | NoAnswer() | Withheld():
            return outcome_to_json(value)
        case TextPart() | DataPart():
            return content_to_json((value,))[0]
        case MessageInput() | ResponseInput():
            return send_input_to_json(value)
        case SendResult():
            return send_result_to_json(value)
        case SendAbsent() | SendPending() | SendIndeterminate() | SendReturned():
            return send_state_to_json(value)
        case Delivery():
            return delivery_to_json(value)
        case CheckedGuidance() | CollectiveGuidance():
            return local_guidance_to_json(value)
        case HarnessError():
            return error_to_json(value)
        case RegisteredAgent():
            return registered_agent_to_json(value)
        case AgentStatus():
            return agent_status_to_json(value)
        case ConversationSummary():
            return conversation_summary_to_json(value)
        case ConversationRecord():
            return conversation_record_to_json(value)
        case GatewayStatus():
            return gateway_status_to_json(value)
        case _:
            assert_never(value)


def _plain(value: JsonValue) -> object:
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value

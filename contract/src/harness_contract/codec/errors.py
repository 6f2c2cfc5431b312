"""The JSON form of the closed send-side errors, every typed field kept (kept outcomes, the
CLI's `--json`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from harness_contract.codec.guidance import checked_guidance_from_json, checked_guidance_to_json
from harness_contract.codec.strict import (
    CodecError,
    E,
    expect_enum,
    expect_list,
    expect_object,
    expect_str,
)
from harness_contract.errors import (
    AnswerFieldIssue,
    AnswerFieldReason,
    AnswerInvalid,
    CollectiveError,
    CollectiveFailure,
    ConnectError,
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
from harness_contract.jsonvalue import JsonValue


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
                case RequestNone(own_question=True):
                    value["ownQuestion"] = True
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
        case ConnectError(address=address, detail=detail):
            value = {"type": "ConnectError", "reason": error.reason, "message": error.message}
            if address is not None:
                value["address"] = address
            if detail is not None:
                value["detail"] = detail
            return value
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
    for item in expect_list(value, where):
        entry = expect_object(item, where, {subject_key, "reason"}, {"detail"})
        detail = entry.get("detail")
        issues.append(
            (
                expect_str(entry[subject_key], subject_key),
                expect_enum(reasons, entry["reason"], "reason"),
                None if detail is None else expect_str(detail, "detail"),
            )
        )
    return issues


def error_from_json(value: JsonValue) -> HarnessError:
    """Read a send-side error written by `error_to_json`."""
    obj = expect_object(
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
            "ownQuestion",
        },
    )
    kind = obj["type"]
    reason = expect_str(obj["reason"], "error.reason")
    if kind == "SendError":
        detail = obj.get("detail")
        return SendError(
            expect_enum(SendErrorReason, reason, "error.reason"),
            None if detail is None else expect_str(detail, "error.detail"),
        )
    if kind == "CollectiveError":
        operation_id = expect_str(obj.get("id"), "error.id")
        failures: dict[str, CollectiveFailure] = {
            "request-none": RequestNone(own_question=obj.get("ownQuestion") is True),
            "request-ambiguous": RequestAmbiguous(),
            "request-answered": RequestAnswered(),
            "request-expired": RequestExpired(),
        }
        if reason in failures:
            return CollectiveError(operation_id, failures[reason])
        if reason == "schema-invalid":
            return CollectiveError(
                operation_id, SchemaInvalid(detail=expect_str(obj.get("detail"), "detail"))
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
            check_id=expect_str(obj.get("checkId"), "checkId"),
            refusal=expect_enum(FirewallRefusal, reason, "error.reason"),
            middleware_id=expect_str(obj.get("middlewareId"), "middlewareId"),
            rule_id=expect_str(obj.get("ruleId"), "ruleId"),
            instruction=expect_str(obj.get("instruction"), "instruction"),
            guidance=checked_guidance_from_json(obj.get("guidance")),
        )
    raise CodecError(f"error.type: unknown value {kind!r}")

"""The JSON forms of inbound items: messages, collective requests and results, their
members' outcomes, failed operations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import assert_never

from harness_contract.codec.guidance import withheld_from_json, withheld_to_json
from harness_contract.codec.sends import answer_content_from_json, answer_content_to_json
from harness_contract.codec.strict import (
    CodecError,
    expect_enum,
    expect_int,
    expect_list,
    expect_object,
    expect_schema,
    expect_str,
    expect_strs,
)
from harness_contract.content import content_from_json, content_to_json
from harness_contract.errors import SendError
from harness_contract.guidance import Withheld
from harness_contract.jsonvalue import JsonValue
from harness_contract.values import (
    Answered,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    Content,
    Declined,
    DirectMessage,
    GroupMessage,
    InboundItem,
    InboundMessage,
    Invalid,
    MemberOutcome,
    MemberResult,
    MulticastItem,
    NoAnswer,
    OperationFailedItem,
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
    kind = expect_str(value.get("kind") if isinstance(value, Mapping) else None, "outcome.kind")
    if kind == "answered":
        obj = expect_object(value, "outcome", {"kind", "content"})
        return Answered(content=answer_content_from_json(obj["content"]))
    if kind == "declined":
        expect_object(value, "outcome", {"kind"})
        return Declined()
    if kind == "invalid":
        obj = expect_object(value, "outcome", {"kind", "reason"})
        return Invalid(reason=expect_str(obj["reason"], "outcome.reason"))
    if kind == "no-answer":
        expect_object(value, "outcome", {"kind"})
        return NoAnswer()
    if kind == "withheld":
        return withheld_from_json(value)
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
        obj = expect_object(value, "message", {"kind", "postId", "address", "sender", "content"})
        return DirectMessage(
            post_id=expect_str(obj["postId"], "postId"),
            address=expect_str(obj["address"], "address"),
            sender=expect_str(obj["sender"], "sender"),
            content=_content(obj["content"]),
        )
    if kind == "group":
        obj = expect_object(
            value, "message", {"kind", "postId", "address", "sender", "members", "content"}
        )
        return GroupMessage(
            post_id=expect_str(obj["postId"], "postId"),
            address=expect_str(obj["address"], "address"),
            sender=expect_str(obj["sender"], "sender"),
            members=expect_strs(obj["members"], "members"),
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
        obj = expect_object(value, "item", {"kind", "message"})
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
        obj = expect_object(value, "item", keys)
        return CollectiveRequestItem(
            op=expect_enum(CollectiveOp, obj["op"], "op"),
            id=expect_str(obj["id"], "id"),
            post_id=expect_str(obj["postId"], "postId"),
            sender=expect_str(obj["from"], "from"),
            to=expect_str(obj["to"], "to"),
            question=expect_str(obj["question"], "question"),
            requested_schema=expect_schema(obj["requestedSchema"], "requestedSchema"),
            deadline_at=expect_int(obj["deadlineAt"], "deadlineAt"),
        )
    if kind == "collectiveResult":
        obj = expect_object(value, "item", {"kind", "op", "id", "to", "question", "outcomes"})
        question = obj["question"]
        outcomes = []
        for entry in expect_list(obj["outcomes"], "outcomes"):
            pair = expect_object(entry, "outcomes", {"member", "outcome"})
            outcomes.append(
                MemberResult(
                    member=expect_str(pair["member"], "member"),
                    outcome=outcome_from_json(pair["outcome"]),
                )
            )
        return CollectiveResultItem(
            op=expect_enum(CollectiveOp, obj["op"], "op"),
            id=expect_str(obj["id"], "id"),
            to=expect_str(obj["to"], "to"),
            question=question if isinstance(question, str) else withheld_from_json(question),
            outcomes=tuple(outcomes),
        )
    if kind == "operationFailed":
        obj = expect_object(value, "item", {"kind", "id", "to", "error"})
        return OperationFailedItem(
            id=expect_str(obj["id"], "id"),
            to=expect_str(obj["to"], "to"),
            error=expect_str(obj["error"], "error"),
        )
    raise CodecError(f"item.kind: unknown value {kind!r}")

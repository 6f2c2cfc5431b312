"""The JSON forms of what a send takes and gives: answers, `SendInput`, `SendResult`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import assert_never

from harness_contract.codec.guidance import checked_guidance_from_json, checked_guidance_to_json
from harness_contract.codec.strict import (
    CodecError,
    expect_enum,
    expect_int,
    expect_object,
    expect_schema,
    expect_str,
    expect_strs,
)
from harness_contract.jsonvalue import JsonValue
from harness_contract.values import (
    Accept,
    AnswerContent,
    AskOperation,
    CollectiveOp,
    CollectiveResponse,
    Decline,
    MessageInput,
    MulticastOperation,
    ResponseInput,
    SendInput,
    SendResult,
)

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
        obj = expect_object(value, "input", {"to", "collectiveResponse"})
        answer = obj["collectiveResponse"]
        action = expect_str(
            expect_object(answer, "collectiveResponse", {"action"}, {"content"})["action"], "action"
        )
        if action == "accept":
            accept = expect_object(answer, "collectiveResponse", {"action", "content"})
            return ResponseInput(
                to=expect_str(obj["to"], "to"),
                response=Accept(content=answer_content_from_json(accept["content"])),
            )
        if action == "decline":
            expect_object(answer, "collectiveResponse", {"action"})
            return ResponseInput(to=expect_str(obj["to"], "to"), response=Decline())
        raise CodecError(f"collectiveResponse.action: unknown value {action!r}")
    obj = expect_object(value, "input", {"to", "text"}, {"collective"})
    to, text = expect_str(obj["to"], "to"), expect_str(obj["text"], "text")
    if "collective" not in obj:
        return MessageInput(to=to, text=text)
    collective = expect_object(
        obj["collective"], "collective", {"op"}, {"deadline", "requestedSchema"}
    )
    op = expect_str(collective["op"], "collective.op")
    if op == "multicast":
        expect_object(collective, "collective", {"op"})
        return MessageInput(to=to, text=text, collective=MulticastOperation())
    ask = expect_object(collective, "collective", {"op", "deadline", "requestedSchema"})
    return MessageInput(
        to=to,
        text=text,
        collective=AskOperation(
            op=expect_enum(CollectiveOp, op, "collective.op"),
            deadline=expect_int(ask["deadline"], "collective.deadline"),
            requested_schema=expect_schema(ask["requestedSchema"], "collective.requestedSchema"),
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
    obj = expect_object(value, "result", set(), {"operationId", "guidance", "postIds"})
    return SendResult(
        operation_id=expect_str(obj["operationId"], "operationId")
        if "operationId" in obj
        else None,
        guidance=checked_guidance_from_json(obj["guidance"]) if "guidance" in obj else None,
        # Kept outcomes stored before the field have none.
        post_ids=expect_strs(obj["postIds"], "postIds") if "postIds" in obj else (),
    )

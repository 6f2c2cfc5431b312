"""Content: parts, JsonValue limits, the 32,768-byte bound and the collective part layout.

engine.md §2 and collectives.md §2.1: every post an endpoint authors carries exactly one
collective part, a data part whose value is `{"harness/collective": <value>}`, always last.
A plain send and a send with `{op: "multicast"}` therefore certify identical content.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from harness_contract.errors import SendError, SendErrorReason
from harness_contract.jsonvalue import (
    DATA_VALUE_MAX_DEPTH,
    JsonValue,
    JsonValueError,
    canonical_json,
    depth,
    is_well_formed_text,
    normalize_json,
)
from harness_contract.values import (
    AnswerContent,
    CollectiveOp,
    Content,
    ContentPart,
    DataPart,
    RequestedSchema,
    TextPart,
)

CONTENT_MAX_BYTES: Final = 32_768
"""Largest Content of one post, in RFC 8785 bytes; there is no fragmentation."""

REQUEST_MAX_BYTES: Final = 1 << 20
"""Most bytes of one request the gateway takes by default (`max_receive_bytes`, 1 MiB).

Far above any valid request (content is at most 32,768 bytes), so a request between the two
is read and refused `content-invalid` by the gateway's own check; a larger one never reaches
it (gRPC refuses it bare, RESOURCE_EXHAUSTED), so both clients refuse it before sending, and
read that bare refusal as `content-invalid` too (`oversized_detail`)."""

COLLECTIVE_KEY: Final = "harness/collective"
"""The key that makes a data part the collective part."""

MULTICAST_VALUE: Final[Mapping[str, JsonValue]] = {"kind": "operation", "op": "multicast"}


def _invalid(detail: str) -> SendError:
    return SendError(SendErrorReason.CONTENT_INVALID, detail)


def check_content(parts: Sequence[ContentPart]) -> Content:
    """Validate parts and return them as Content with normalized data values.

    Raises `SendError` `content-invalid` for an empty list, a lone surrogate, a non-finite
    number, a value nested deeper than 16, or more than 32,768 canonical bytes.
    """
    if not parts:
        raise _invalid("the message has no content")
    checked: list[ContentPart] = []
    for part in parts:
        match part:
            case TextPart(text=text):
                if not isinstance(text, str) or not is_well_formed_text(text):
                    raise _invalid("the message text is not well-formed Unicode")
                checked.append(part)
            case DataPart(value=value):
                try:
                    normalized = normalize_json(value, max_depth=DATA_VALUE_MAX_DEPTH + 1)
                except JsonValueError as error:
                    raise _invalid(f"a data part is not a JSON value ({error.detail})") from None
                if depth(normalized) > DATA_VALUE_MAX_DEPTH:
                    raise _invalid("a data part nests deeper than 16 levels")
                checked.append(DataPart(value=normalized))
            case _:
                raise _invalid("a content part is neither text nor data")
    content = tuple(checked)
    size = len(canonical_json(content_to_json(content)))
    if size > CONTENT_MAX_BYTES:
        raise _invalid(
            f"the message is {size:,} bytes as canonical JSON; the limit is 32,768 bytes"
        )
    return content


def oversized_detail(size: int) -> str:
    """The `content-invalid` detail of a request too large for the gateway to read: both
    clients word it so (the TypeScript client's `oversizedDetail`)."""
    return (
        f"the message is {size:,} bytes, more than the gateway reads in one call; "
        f"the limit is {CONTENT_MAX_BYTES:,} bytes as canonical JSON"
    )


def content_to_json(content: Content) -> tuple[JsonValue, ...]:
    """The contract's JSON shape: `[{"type":"text","text":...}, {"type":"data","value":...}]`."""
    result: list[JsonValue] = []
    for part in content:
        match part:
            case TextPart(text=text):
                result.append({"type": "text", "text": text})
            case DataPart(value=value):
                result.append({"type": "data", "value": value})
    return tuple(result)


def content_from_json(value: JsonValue) -> Content:
    """Read Content from its JSON shape (exact keys), validating it as `check_content` does."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise _invalid("content must be an array of parts")
    parts: list[ContentPart] = []
    for item in value:
        if not isinstance(item, Mapping):
            raise _invalid("a content part must be an object")
        match dict(item):
            case {"type": "text", "text": str(text), **rest} if not rest:
                parts.append(TextPart(text=text))
            case {"type": "data", "value": data, **rest} if not rest:
                parts.append(DataPart(value=data))
            case _:
                raise _invalid("a content part must be exactly a text part or a data part")
    return check_content(parts)


def collective_part(value: Mapping[str, JsonValue]) -> DataPart:
    """The data part carrying a collective value."""
    return DataPart(value={COLLECTIVE_KEY: value})


def multicast_content(text: str) -> Content:
    """A multicast: the text part, then the explicit multicast part (both spellings)."""
    return check_content((TextPart(text=text), collective_part(MULTICAST_VALUE)))


def request_content(
    *,
    question: str,
    op: CollectiveOp,
    id: str,
    nonce: str,
    deadline_at: int,
    requested_schema: RequestedSchema,
) -> Content:
    """A gather or all_gather request: the question, then the operation part."""
    return check_content(
        (
            TextPart(text=question),
            collective_part(
                {
                    "kind": "operation",
                    "op": op.value,
                    "id": id,
                    "nonce": nonce,
                    "deadlineAt": float(deadline_at),
                    "requestedSchema": requested_schema,
                }
            ),
        )
    )


def answer_content(*, id: str, content: AnswerContent | None) -> Content:
    """A response: accept with content, or decline when `content` is None (part alone)."""
    value: dict[str, JsonValue] = {"kind": "response", "id": id}
    if content is None:
        value["action"] = "decline"
    else:
        value["action"] = "accept"
        value["content"] = dict(content)
    return check_content((collective_part(value),))


def close_content(*, id: str, included: Sequence[str]) -> Content:
    """An all_gather close listing the record hash of each counted answer, member order."""
    return check_content(
        (collective_part({"kind": "close", "id": id, "included": tuple(included)}),)
    )


def collective_parts(content: Content) -> list[tuple[int, JsonValue]]:
    """Index and `harness/collective` value of every collective part of `content`.

    A data part is a collective part when its value is an object holding the key; its
    other keys are ignored (collectives.md §2.4).
    """
    found: list[tuple[int, JsonValue]] = []
    for index, part in enumerate(content):
        if (
            isinstance(part, DataPart)
            and isinstance(part.value, Mapping)
            and COLLECTIVE_KEY in part.value
        ):
            found.append((index, part.value[COLLECTIVE_KEY]))
    return found


def without_part(content: Content, index: int) -> Content:
    """`content` with the part at `index` removed (possibly empty)."""
    return content[:index] + content[index + 1 :]


def text_of(content: Content) -> str:
    """The text parts joined by newlines (a request's question, a firewall subject)."""
    return "\n".join(part.text for part in content if isinstance(part, TextPart))

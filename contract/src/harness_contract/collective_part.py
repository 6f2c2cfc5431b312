"""The collective part of certified content, read strictly (collectives.md §2.2, §2.4).

Every post an endpoint authors carries exactly one collective part: a data part whose value
is `{"harness/collective": <value>}`. `read_collective` finds it in received content and
reads its value into a closed union; anything else is `Malformed` or `Duplicate`, which the
classifier consumes and logs. Nothing here raises.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from harness_contract.content import collective_parts, without_part
from harness_contract.forms import FormSchemaError, admit_schema, validate_answer_content
from harness_contract.ids import HashId, is_collective_id, is_nonce
from harness_contract.jsonvalue import JsonValue
from harness_contract.values import AnswerContent, CollectiveOp, Content, RequestedSchema

_DEADLINE_AT_MAX: Final = 2**53
"""Largest `deadlineAt` read exactly as a binary64 integer (epoch milliseconds)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MulticastPart:
    """`{kind:"operation", op:"multicast"}`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestPart:
    """A gather or all_gather request; `requested_schema` is the admitted (normalized) form."""

    op: CollectiveOp
    id: str
    nonce: str
    deadline_at: int
    requested_schema: RequestedSchema


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponsePart:
    """An answer: `content` for accept, None for decline."""

    id: str
    content: AnswerContent | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClosePart:
    """An all_gather close listing each counted answer's record hash, member order."""

    id: str
    included: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Malformed:
    """A collective part whose value fails §2.2."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Duplicate:
    """Two or more collective parts."""


CollectivePart: TypeAlias = (
    MulticastPart | RequestPart | ResponsePart | ClosePart | Malformed | Duplicate
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadContent:
    """Received content split into its collective part (None: none) and the rest."""

    part: CollectivePart | None
    rest: Content


def read_collective(content: Content) -> ReadContent:
    """Find and read the collective part of received content."""
    found = collective_parts(content)
    if not found:
        return ReadContent(part=None, rest=content)
    if len(found) > 1:
        return ReadContent(part=Duplicate(), rest=content)
    index, value = found[0]
    return ReadContent(part=read_value(value), rest=without_part(content, index))


def read_value(value: JsonValue) -> CollectivePart:
    """Read one `harness/collective` value; exact keys, nothing extra."""
    if not isinstance(value, Mapping):
        return Malformed()
    kind = value.get("kind")
    keys = set(value)
    if kind == "operation" and value.get("op") == "multicast":
        return MulticastPart() if keys == {"kind", "op"} else Malformed()
    if kind == "operation":
        return _request(value, keys)
    if kind == "response":
        return _response(value, keys)
    if kind == "close":
        return _close(value, keys)
    return Malformed()


def _request(value: Mapping[str, JsonValue], keys: set[str]) -> CollectivePart:
    if keys != {"kind", "op", "id", "nonce", "deadlineAt", "requestedSchema"}:
        return Malformed()
    op = value["op"]
    if op not in ("gather", "all_gather"):
        return Malformed()
    operation_id, nonce, deadline_at = value["id"], value["nonce"], value["deadlineAt"]
    if not is_collective_id(operation_id) or not is_nonce(nonce):
        return Malformed()
    if (
        isinstance(deadline_at, bool)
        or not isinstance(deadline_at, int | float)
        or deadline_at != int(deadline_at)
        or not 0 < deadline_at <= _DEADLINE_AT_MAX
    ):
        return Malformed()
    try:
        schema = admit_schema(value["requestedSchema"])
    except FormSchemaError:
        return Malformed()
    assert isinstance(operation_id, str)
    assert isinstance(nonce, str)
    return RequestPart(
        op=CollectiveOp(op),
        id=operation_id,
        nonce=nonce,
        deadline_at=int(deadline_at),
        requested_schema=schema,
    )


def _response(value: Mapping[str, JsonValue], keys: set[str]) -> CollectivePart:
    operation_id = value.get("id")
    if not is_collective_id(operation_id):
        return Malformed()
    assert isinstance(operation_id, str)
    action = value.get("action")
    if action == "decline" and keys == {"kind", "id", "action"}:
        return ResponsePart(id=operation_id, content=None)
    if action == "accept" and keys == {"kind", "id", "action", "content"}:
        content = validate_answer_content(value["content"])
        if content is None:
            return Malformed()
        return ResponsePart(id=operation_id, content=content)
    return Malformed()


def _close(value: Mapping[str, JsonValue], keys: set[str]) -> CollectivePart:
    operation_id, included = value.get("id"), value.get("included")
    if keys != {"kind", "id", "included"} or not is_collective_id(operation_id):
        return Malformed()
    if isinstance(included, str) or not isinstance(included, Sequence):
        return Malformed()
    if not all(isinstance(item, str) and HashId.RECORD.is_valid(item) for item in included):
        return Malformed()
    assert isinstance(operation_id, str)
    return ClosePart(id=operation_id, included=tuple(str(item) for item in included))

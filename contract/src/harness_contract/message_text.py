"""parseMessageText: the send a message's whole text states (collectives.md §5).

Models state every operation as the whole text of an ordinary message:

    plain text                                                      multicast
    {"gather": <question>, "deadline": <seconds>, "requestedSchema": <form>}
    {"all_gather": <question>, "deadline": <seconds>, "requestedSchema": <form>}
    {"action": "accept", "content": {...}}                           answer
    {"action": "decline"}                                            answer

Only a whole text that parses as a JSON object with a `gather`, `all_gather` or `action`
key (checked in that order) states an operation; any other text is a multicast of exactly
that text. A text that states an operation but does not fit its shape is refused with a
`MessageTextError` naming every issue, never sent as text. The function is pure: no clock,
no Registry, and for any `str` input it returns a `SendInput` or raises `MessageTextError`,
nothing else.

Choices the design leaves to us:

- Nesting. RFC 8259 §9 lets a parser limit nesting; ours stops at `MESSAGE_TEXT_MAX_DEPTH`
  levels (counted outside strings, exactly). A deeper text does not parse, so it is a
  multicast like any other text that does not parse. No operation can be valid that deep
  (a collective part's value nests at most 16 levels), and the limit keeps Python's
  recursive `json` far from its stack limit.
- `to` is checked first, before the stated shape's keys, and is reported with every other
  issue (also with an unknown `action`, which is otherwise reported alone).
- `<value>` in `expected <what>, actual <value>` is the value's RFC 8785 text, except that
  a lone surrogate is written as a lowercase `\\udxxx` escape (as ECMAScript's
  `JSON.stringify` writes it) and an overflowing number as `Infinity` or `-Infinity`. A
  rendering longer than `ACTUAL_MAX_CHARS` characters (code points) keeps its first
  `ACTUAL_MAX_CHARS - 1` and ends in `…`, so it is never longer than `ACTUAL_MAX_CHARS`.
- Paths write keys as they are, except lone surrogates, which are escaped as in values so
  the detail is always well-formed text. A key that is not well-formed Unicode is reported
  at its own path as `expected well-formed Unicode text`.
- Plain text that is not well-formed Unicode is refused as `text: expected well-formed
  Unicode text` under `message`.
- Inside `requestedSchema.properties.<name>` only what the travelling JsonValue needs is
  checked here (finite numbers, well-formed strings and keys); the form grammar runs at
  send. `required` is `expected an array of strings` as a whole; an ill-formed string in it
  is reported at its index. An AnswerContent array holding a non-string is reported at
  its field, as for any other wrong field value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Final, TypeAlias

from harness_contract.errors import MessageTextError, MessageTextOperation
from harness_contract.jsonvalue import (
    PARSE_MAX_DEPTH,
    JsonValue,
    JsonValueError,
    canonical_text,
    is_well_formed_text,
    load_untrusted_json,
    normalize_json,
)
from harness_contract.values import (
    Accept,
    AnswerContent,
    AnswerValue,
    AskOperation,
    CollectiveOp,
    Decline,
    MessageInput,
    RequestedSchema,
    ResponseInput,
    SendInput,
)

DEADLINE_MIN_SECONDS: Final = 1
"""Shortest deadline a gather or all_gather may state, in whole seconds."""

DEADLINE_MAX_SECONDS: Final = 2_592_000
"""Longest deadline a gather or all_gather may state, in seconds: 30 days (the contract)."""

ACTUAL_MAX_CHARS: Final = 60
"""Most characters (code points) of an offending value quoted in a problem, `…` included.

collectives.md §5 cuts the value at 60 characters; a longer rendering keeps its first 59
and ends in `…`, so a model sees enough to recognise its value and the detail stays short."""

MESSAGE_TEXT_MAX_DEPTH: Final = PARSE_MAX_DEPTH
"""Deepest nesting, in arrays and objects, of a text read as JSON (`{}` is 1).

A deeper text does not parse and so is a multicast. Shared with the core's parser limit:
far above any valid operation, far below Python's recursion limit."""

_JSON_WHITESPACE: Final = " \t\n\r"
"""The four whitespace characters RFC 8259 allows around a JSON text."""

_OPERATION_KEYS: Final = ("gather", "all_gather", "action")
"""The keys that make a JSON object text state an operation, in the order checked."""

_AGENT_PREFIX: Final = "agent:"
_GROUP_PREFIX: Final = "group:"
_AGENT_NAME: Final = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_AGENT_NAME_MIN: Final = 3
"""Fewest characters of an agent name (engine.md §1.1)."""
_AGENT_NAME_MAX: Final = 32
"""Most characters of an agent name (engine.md §1.1)."""

_SURROGATE: Final = re.compile("([\ud800-\udfff])")

_ASK_TEXT_OPERATION: Final = {
    CollectiveOp.GATHER: MessageTextOperation.GATHER,
    CollectiveOp.ALL_GATHER: MessageTextOperation.ALL_GATHER,
}

_ADDRESS: Final = "an agent: or group: address"
_STRING: Final = "a string"
_OBJECT: Final = "an object"
_STRINGS: Final = "an array of strings"
_FINITE_NUMBER: Final = "a finite number"
_DEADLINE: Final = f"an integer from {DEADLINE_MIN_SECONDS} to {DEADLINE_MAX_SECONDS}"
_OBJECT_TYPE: Final = '"object"'
_ACTION: Final = '"accept" or "decline"'
_ANSWER_VALUE: Final = "a string, a finite number, a boolean or an array of strings"
_MISSING: Final = "is missing"
_UNEXPECTED: Final = "is unexpected"
_ILL_FORMED: Final = "expected well-formed Unicode text"

_SCHEMA_KEYS: Final = ("$schema", "type", "properties", "required")
"""The requestedSchema outline's keys in declared order (collectives.md §6.1)."""

Path: TypeAlias = tuple[str | int, ...]
"""Keys and array indices from the text's root object."""


def parse_message_text(to: str, text: str) -> SendInput:
    """Read one message's whole text as the send it states.

    Args:
        to: The address the host's tool call names: the recipients of a multicast, gather
            or all_gather, or for an answer the conversation whose open request it answers.
            Checked by syntax only (`agent:` + a name, or `group:` + names).
        text: The whole text of the message.

    Returns:
        `MessageInput(to, text)` for plain text (anything but a JSON object stating an
        operation); `MessageInput(to, question, AskOperation(...))` for a gather or
        all_gather, its schema normalized (numbers as floats, arrays as tuples);
        `ResponseInput(to, Accept(content) | Decline())` for an answer.

    Raises:
        MessageTextError: The text states an operation that does not fit its shape, `to` is
            not an address, or plain text is not well-formed Unicode. `detail` joins every
            issue with `; `, in the order collectives.md §5 gives.
    """
    stated = _stated_object(text)
    if stated is not None:
        if "gather" in stated:
            return _ask(CollectiveOp.GATHER, to, stated)
        if "all_gather" in stated:
            return _ask(CollectiveOp.ALL_GATHER, to, stated)
        if "action" in stated:
            return _answer(to, stated)
    issues = _Issues()
    _check_to(issues, to)
    if not is_well_formed_text(text):
        issues.add(("text",), _ILL_FORMED)
    issues.raise_any(MessageTextOperation.MESSAGE)
    return MessageInput(to=to, text=text)


# --- Reading the text ------------------------------------------------------------------


def _stated_object(text: str) -> dict[str, object] | None:
    """The JSON object the whole text is, when it is one; None for anything else."""
    if not text.lstrip(_JSON_WHITESPACE).startswith("{"):
        return None  # not an object (or a BOM first): no need to parse plain prose
    try:
        # The loader refuses deeper nesting (outside strings) before it parses.
        value = load_untrusted_json(text, duplicate_keys="last", max_depth=MESSAGE_TEXT_MAX_DEPTH)
    except JsonValueError:
        return None
    return value if isinstance(value, dict) else None


# --- Operations ------------------------------------------------------------------------


def _ask(op: CollectiveOp, to: str, stated: Mapping[str, object]) -> SendInput:
    issues = _Issues()
    _check_to(issues, to)
    question = _string(issues, (op.value,), stated[op.value])
    deadline: int | None = None
    if "deadline" in stated:
        deadline = _deadline(issues, ("deadline",), stated["deadline"])
    else:
        issues.add(("deadline",), _MISSING)
    schema: RequestedSchema | None = None
    if "requestedSchema" in stated:
        schema = _requested_schema(issues, ("requestedSchema",), stated["requestedSchema"])
    else:
        issues.add(("requestedSchema",), _MISSING)
    _check_unexpected(issues, (), stated, (op.value, "deadline", "requestedSchema"))
    issues.raise_any(_ASK_TEXT_OPERATION[op])
    if question is None or deadline is None or schema is None:  # pragma: no cover
        raise AssertionError("every part was checked")
    return MessageInput(
        to=to,
        text=question,
        collective=AskOperation(op=op, deadline=deadline, requested_schema=schema),
    )


def _answer(to: str, stated: Mapping[str, object]) -> SendInput:
    issues = _Issues()
    _check_to(issues, to)
    action = stated["action"]
    # "action is checked alone first, so an unknown action (including cancel) is reported
    # only as action" (collectives.md §5).
    if action not in ("accept", "decline"):
        issues.expected(("action",), _ACTION, action)
        issues.raise_any(MessageTextOperation.ANSWER)
    if action == "decline":
        _check_unexpected(issues, (), stated, ("action",))
        issues.raise_any(MessageTextOperation.ANSWER)
        return ResponseInput(to=to, response=Decline())
    content: AnswerContent | None = None
    if "content" in stated:
        content = _answer_content(issues, ("content",), stated["content"])
    else:
        issues.add(("content",), _MISSING)
    _check_unexpected(issues, (), stated, ("action", "content"))
    issues.raise_any(MessageTextOperation.ANSWER)
    if content is None:  # pragma: no cover
        raise AssertionError("content was checked")
    return ResponseInput(to=to, response=Accept(content=content))


# --- Shapes ----------------------------------------------------------------------------


def _check_to(issues: _Issues, to: str) -> None:
    if not _is_address_syntax(to):
        issues.expected(("to",), _ADDRESS, to)


def _is_address_syntax(address: str) -> bool:
    if address.startswith(_AGENT_PREFIX):
        return _is_agent_name(address[len(_AGENT_PREFIX) :])
    if address.startswith(_GROUP_PREFIX):
        return all(_is_agent_name(name) for name in address[len(_GROUP_PREFIX) :].split(","))
    return False


def _is_agent_name(name: str) -> bool:
    # fullmatch: `re.match` with `$` would let a trailing newline through (engine.md §1.1).
    return (
        _AGENT_NAME_MIN <= len(name) <= _AGENT_NAME_MAX and _AGENT_NAME.fullmatch(name) is not None
    )


def _string(issues: _Issues, path: Path, value: object) -> str | None:
    if not isinstance(value, str):
        issues.expected(path, _STRING, value)
        return None
    if not is_well_formed_text(value):
        issues.add(path, _ILL_FORMED)
        return None
    return value


def _deadline(issues: _Issues, path: Path, value: object) -> int | None:
    # Parsed numbers are floats, so `60`, `60.0` and `6e1` are one value; a JSON boolean
    # is a `bool`, never a float here.
    if (
        isinstance(value, float)
        and value.is_integer()
        and DEADLINE_MIN_SECONDS <= value <= DEADLINE_MAX_SECONDS
    ):
        return int(value)
    issues.expected(path, _DEADLINE, value)
    return None


def _requested_schema(issues: _Issues, path: Path, value: object) -> RequestedSchema | None:
    """The outline of collectives.md §6.1; the form grammar runs at send."""
    if not isinstance(value, dict):
        issues.expected(path, _OBJECT, value)
        return None
    before = len(issues)
    if "$schema" in value:
        _string(issues, (*path, "$schema"), value["$schema"])
    if "type" not in value:
        issues.add((*path, "type"), _MISSING)
    elif value["type"] != "object":
        issues.expected((*path, "type"), _OBJECT_TYPE, value["type"])
    if "properties" not in value:
        issues.add((*path, "properties"), _MISSING)
    else:
        _schema_properties(issues, (*path, "properties"), value["properties"])
    if "required" in value:
        _schema_required(issues, (*path, "required"), value["required"])
    _check_unexpected(issues, path, value, _SCHEMA_KEYS)
    if len(issues) > before:
        return None
    try:
        schema = normalize_json(value, max_depth=MESSAGE_TEXT_MAX_DEPTH)
    except JsonValueError as error:  # pragma: no cover - the checks above admit only JSON
        issues.add(path, f"expected a JSON object ({error.detail})")
        return None
    return schema if isinstance(schema, Mapping) else None


def _schema_properties(issues: _Issues, path: Path, value: object) -> None:
    if not isinstance(value, dict):
        issues.expected(path, _OBJECT, value)
        return
    for name in _canonical_order(value):
        field_path = (*path, name)
        _check_key(issues, field_path, name)
        field = value[name]
        if isinstance(field, dict):
            _check_json_value(issues, field_path, field)
        else:
            issues.expected(field_path, _OBJECT, field)


def _schema_required(issues: _Issues, path: Path, value: object) -> None:
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        issues.expected(path, _STRINGS, value)
        return
    for index, name in enumerate(value):
        if not is_well_formed_text(name):
            issues.add((*path, index), _ILL_FORMED)


def _check_json_value(issues: _Issues, path: Path, value: object) -> None:
    """Report what keeps a parsed value from being a JsonValue: an infinite number, or a
    string or key that is not well-formed Unicode."""
    if isinstance(value, str):
        if not is_well_formed_text(value):
            issues.add(path, _ILL_FORMED)
    elif isinstance(value, float):
        if not math.isfinite(value):
            issues.expected(path, _FINITE_NUMBER, value)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json_value(issues, (*path, index), item)
    elif isinstance(value, dict):
        for key in _canonical_order(value):
            _check_key(issues, (*path, key), key)
            _check_json_value(issues, (*path, key), value[key])


def _answer_content(issues: _Issues, path: Path, value: object) -> AnswerContent | None:
    if not isinstance(value, dict):
        issues.expected(path, _OBJECT, value)
        return None
    before = len(issues)
    content: dict[str, AnswerValue] = {}
    for key in _canonical_order(value):
        field_path = (*path, key)
        _check_key(issues, field_path, key)
        answer = _answer_value(issues, field_path, value[key])
        if answer is not None:
            content[key] = answer
    return content if len(issues) == before else None


def _answer_value(issues: _Issues, path: Path, value: object) -> AnswerValue | None:
    if isinstance(value, bool):  # before numbers: JSON booleans are never numbers
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value + 0.0  # -0.0 + 0.0 == 0.0, as the core normalizes numbers
    if isinstance(value, str):
        if is_well_formed_text(value):
            return value
        issues.add(path, _ILL_FORMED)
        return None
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        before = len(issues)
        for index, item in enumerate(value):
            if not is_well_formed_text(item):
                issues.add((*path, index), _ILL_FORMED)
        return tuple(value) if len(issues) == before else None
    issues.expected(path, _ANSWER_VALUE, value)
    return None


def _check_key(issues: _Issues, path: Path, key: str) -> None:
    if not is_well_formed_text(key):
        issues.add(path, _ILL_FORMED)


def _check_unexpected(
    issues: _Issues, path: Path, value: Mapping[str, object], declared: Iterable[str]
) -> None:
    """Report every key not `declared`, last, in canonical order."""
    allowed = set(declared)
    for key in _canonical_order(key for key in value if key not in allowed):
        issues.add((*path, key), _UNEXPECTED)


def _canonical_order(keys: Iterable[str]) -> list[str]:
    """RFC 8785 key order: by UTF-16 code units (lone surrogates are single code units)."""
    return sorted(keys, key=lambda key: key.encode("utf-16-be", "surrogatepass"))


# --- Issues and their text -------------------------------------------------------------


class _Issues:
    """The issues found so far, each already written as `<path>: <problem>`."""

    __slots__ = ("_texts",)

    def __init__(self) -> None:
        self._texts: list[str] = []

    def __len__(self) -> int:
        return len(self._texts)

    def add(self, path: Path, problem: str) -> None:
        self._texts.append(f"{_path_text(path)}: {problem}" if path else problem)

    def expected(self, path: Path, what: str, actual: object) -> None:
        self.add(path, f"expected {what}, actual {_actual_text(actual)}")

    def raise_any(self, operation: MessageTextOperation) -> None:
        if self._texts:
            raise MessageTextError(operation, "; ".join(self._texts))


def _path_text(path: Path) -> str:
    return ".".join(
        str(step) if isinstance(step, int) else _escape_surrogates(step) for step in path
    )


def _escape_surrogates(text: str) -> str:
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def _actual_text(value: object) -> str:
    """The offending value as compact canonical JSON, at most `ACTUAL_MAX_CHARS` long."""
    pieces: list[str] = []
    _render(value, pieces, ACTUAL_MAX_CHARS + 1)
    rendered = "".join(pieces)
    if len(rendered) > ACTUAL_MAX_CHARS:
        return rendered[: ACTUAL_MAX_CHARS - 1] + "…"
    return rendered


def _render(value: object, pieces: list[str], budget: int) -> int:
    """Append the RFC 8785 text of `value` to `pieces`, stopping once `budget` characters
    are written; return the budget left (0 or less once it ran out).

    The written prefix is exact; past the budget it may be cut anywhere, so the caller
    cuts every rendering longer than its limit. Recursion is bounded by the budget (each
    level writes a bracket) as well as by the parser's nesting limit.
    """
    if budget <= 0:
        return budget
    if isinstance(value, list):
        return _render_items(pieces, budget, "[", "]", ((None, item) for item in value))
    if isinstance(value, dict):
        return _render_items(
            pieces, budget, "{", "}", ((key, value[key]) for key in _canonical_order(value))
        )
    piece = _scalar_text(value, budget)
    pieces.append(piece)
    return budget - len(piece)


def _render_items(
    pieces: list[str],
    budget: int,
    opening: str,
    closing: str,
    items: Iterable[tuple[str | None, object]],
) -> int:
    pieces.append(opening)
    budget -= len(opening)
    for index, (key, item) in enumerate(items):
        if budget <= 0:
            return budget
        if index:
            pieces.append(",")
            budget -= 1
        if key is not None:
            key_text = _string_text(key, budget) + ":"
            pieces.append(key_text)
            budget -= len(key_text)
        budget = _render(item, pieces, budget)
    pieces.append(closing)
    return budget - len(closing)


def _scalar_text(value: object, budget: int) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _string_text(value, budget)
    if isinstance(value, float) and math.isfinite(value):
        return canonical_text(value)
    if isinstance(value, float):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)  # pragma: no cover - the parser makes only JSON values


def _string_text(text: str, budget: int) -> str:
    """The JSON string literal of `text`, only its first `budget` characters when longer
    (then without the closing quote, and still longer than `budget`)."""
    whole = len(text) <= budget
    if not whole:
        text = text[:budget]
    parts = [
        f"\\u{ord(part):04x}" if index % 2 else _well_formed_literal(part)
        for index, part in enumerate(_SURROGATE.split(text))
    ]
    return '"' + "".join(parts) + ('"' if whole else "")


def _well_formed_literal(text: str) -> str:
    literal: JsonValue = text
    return canonical_text(literal)[1:-1]

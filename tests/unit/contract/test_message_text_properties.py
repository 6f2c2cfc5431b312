"""parseMessageText on arbitrary input: a SendInput or a MessageTextError, never a crash."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from harness_contract.errors import MessageTextError, MessageTextOperation
from harness_contract.jsonvalue import canonical_text, is_well_formed_text, normalize_json
from harness_contract.message_text import (
    ACTUAL_MAX_CHARS,
    DEADLINE_MAX_SECONDS,
    MESSAGE_TEXT_MAX_DEPTH,
    parse_message_text,
)
from harness_contract.values import (
    Accept,
    AskOperation,
    CollectiveOp,
    MessageInput,
    RequestedSchema,
    ResponseInput,
)
from hypothesis import given, settings
from hypothesis import strategies as st

TO = "group:alice,bob,carol"
S = '{"type":"object","properties":{"slot":{"type":"string","enum":["mon","tue"]}},"required":["slot"]}'
OPERATION_KEYS = ("gather", "all_gather", "action")
SHAPE_KEYS = ("deadline", "requestedSchema", "content", "id", "$schema")

any_text = st.text(st.characters(codec=None), max_size=40)
well_formed_text = st.text(max_size=40)


def slot_schema() -> RequestedSchema:
    schema = normalize_json(json.loads(S))
    assert isinstance(schema, dict)
    return schema


@dataclass(frozen=True)
class Overflow:
    """A number literal too large for a float: reads as infinite."""

    negative: bool


@dataclass(frozen=True)
class Deep:
    """`inner` wrapped in `levels` arrays, written without recursion."""

    levels: int
    inner: object


@dataclass(frozen=True)
class Huge:
    """A string of `size` letters."""

    size: int


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0.0, -0.0, 60.0, 1.5, 2592000.0, 2592001.0])
    | any_text
    | st.builds(Overflow, st.booleans())
)
json_like = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(SHAPE_KEYS) | any_text, children, max_size=4)
        | st.builds(Deep, st.sampled_from([1, 30, 62, 63, 64, 65, 100, 10_000]), children)
        | st.builds(Huge, st.sampled_from([61, 1000, 300_000]))
    ),
    max_leaves=12,
)
near_valid_values = st.fixed_dictionaries(
    {},
    optional={
        "deadline": st.integers(-2, DEADLINE_MAX_SECONDS + 2).map(float) | json_like,
        "requestedSchema": st.just(json.loads(S)) | json_like,
        "action": st.sampled_from(["accept", "decline", "cancel"]) | json_like,
        "content": st.dictionaries(any_text, json_like, max_size=3) | json_like,
    },
)


@dataclass
class Written:
    """JSON-like text and what its writer knows about it."""

    text: str
    depth: int
    not_json: bool


def write(value: object, *, ascii_only: bool) -> Written:
    """Write `value` as JSON text; NaN and Infinity come out as their (non-JSON) literals."""
    match value:
        case None:
            return Written("null", 0, False)
        case bool():
            return Written("true" if value else "false", 0, False)
        case int():
            return Written(str(value), 0, False)
        case float() if math.isnan(value):
            return Written("NaN", 0, True)
        case float() if math.isinf(value):
            return Written("Infinity" if value > 0 else "-Infinity", 0, True)
        case float():
            return Written(repr(value), 0, False)
        case Overflow(negative=negative):
            return Written("-1e400" if negative else "1e400", 0, False)
        case Huge(size=size):
            return Written('"' + "x" * size + '"', 0, False)
        case str():
            return Written(json.dumps(value, ensure_ascii=ascii_only), 0, False)
        case Deep(levels=levels, inner=inner):
            written = write(inner, ascii_only=ascii_only)
            text = "[" * levels + written.text + "]" * levels
            return Written(text, written.depth + levels, written.not_json)
        case list():
            items = [write(item, ascii_only=ascii_only) for item in value]
            return Written(
                "[" + ",".join(item.text for item in items) + "]",
                1 + max((item.depth for item in items), default=0),
                any(item.not_json for item in items),
            )
        case dict():
            members = [
                (json.dumps(key, ensure_ascii=ascii_only), write(item, ascii_only=ascii_only))
                for key, item in value.items()
            ]
            return Written(
                "{" + ",".join(f"{key}:{item.text}" for key, item in members) + "}",
                1 + max((item.depth for _, item in members), default=0),
                any(item.not_json for _, item in members),
            )
    raise AssertionError(value)


def read(to: str, text: str) -> MessageInput | ResponseInput | MessageTextError:
    try:
        result = parse_message_text(to, text)
    except MessageTextError as error:
        assert is_well_formed_text(error.message)
        assert error.message == f"{error.operation.value} not sent: {error.detail}"
        return error
    assert isinstance(result, MessageInput | ResponseInput)
    return result


def cut(rendered: str) -> str:
    if len(rendered) > ACTUAL_MAX_CHARS:
        return rendered[: ACTUAL_MAX_CHARS - 1] + "…"
    return rendered


@settings(max_examples=200)
@given(to=st.sampled_from([TO, "agent:bob"]) | any_text, text=st.text(st.characters(codec=None)))
def test_any_text_reads_as_a_send_input_or_a_message_text_error(to, text):
    result = read(to, text)

    if isinstance(result, MessageInput) and result.collective is None:
        assert result == MessageInput(to=to, text=text)


@settings(max_examples=200)
@given(
    text=st.text(st.characters(codec=None, exclude_characters="{")),
    padding=st.text(" \t\r\n", max_size=3),
)
def test_plain_text_without_a_brace_is_always_the_exact_multicast(text, padding):
    text = padding + text
    result = read(TO, text)

    if is_well_formed_text(text):
        assert result == MessageInput(to=TO, text=text)
    else:
        assert result == MessageTextError(
            MessageTextOperation.MESSAGE, "text: expected well-formed Unicode text"
        )


@settings(max_examples=200, deadline=None)
@given(
    operation=st.sampled_from(OPERATION_KEYS),
    stated=st.sampled_from(["accept", "decline", "Which day?"]) | json_like,
    rest=near_valid_values,
    extra=st.dictionaries(any_text, json_like, max_size=2),
    ascii_only=st.booleans(),
    padding=st.sampled_from(["", " ", "\n  ", "\t\r\n"]),
)
def test_an_object_stating_an_operation_is_read_or_refused_under_that_operation(
    operation, stated, rest, extra, ascii_only, padding
):
    value = {**extra, **rest, operation: stated}
    written = write(value, ascii_only=ascii_only)
    text = padding + written.text + padding

    result = read(TO, text)

    if written.not_json or written.depth > MESSAGE_TEXT_MAX_DEPTH:
        # Not RFC 8259 JSON, or deeper than our parser reads: plain text.
        assert result in (
            MessageInput(to=TO, text=text),
            MessageTextError(
                MessageTextOperation.MESSAGE, "text: expected well-formed Unicode text"
            ),
        )
        return
    # A text that states an operation is never sent as text.
    assert not (isinstance(result, MessageInput) and result.collective is None)
    stated_first = next(key for key in OPERATION_KEYS if key in value)
    match result:
        case MessageTextError(operation=refused):
            expected = "answer" if stated_first == "action" else stated_first
            assert refused.value == expected
        case MessageInput(collective=AskOperation(op=op, deadline=deadline)):
            assert op.value == stated_first
            assert 1 <= deadline <= DEADLINE_MAX_SECONDS
        case ResponseInput():
            assert stated_first == "action"
        case _:
            raise AssertionError(result)


@settings(max_examples=200)
@given(
    op=st.sampled_from(CollectiveOp),
    question=well_formed_text,
    seconds=st.integers(1, DEADLINE_MAX_SECONDS),
    spelling=st.sampled_from(["{}", "{}.0", "{}e0", "{}0e-1", "{}.000E+0"]),
    padding=st.text(" \t\r\n", max_size=4),
    to=st.sampled_from([TO, "agent:bob", "group:zed,abc"]),
)
def test_a_well_formed_gather_or_all_gather_reads_back_exactly(
    op, question, seconds, spelling, padding, to
):
    deadline = spelling.format(seconds)
    text = (
        f"{padding}{{{json.dumps(op.value)}:{json.dumps(question)},"
        f'"deadline":{deadline},"requestedSchema":{S}}}{padding}'
    )

    assert parse_message_text(to, text) == MessageInput(
        to=to,
        text=question,
        collective=AskOperation(op=op, deadline=seconds, requested_schema=slot_schema()),
    )


answer_values = (
    well_formed_text
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(-(10**6), 10**6)
    | st.booleans()
    | st.lists(well_formed_text, max_size=3)
)


@settings(max_examples=200)
@given(content=st.dictionaries(well_formed_text, answer_values, max_size=5))
def test_an_accept_reads_back_its_content(content):
    text = json.dumps({"action": "accept", "content": content})

    result = parse_message_text(TO, text)

    expected = {
        key: tuple(value) if isinstance(value, list) else value for key, value in content.items()
    }
    assert result == ResponseInput(to=TO, response=Accept(content=expected))


finite_json = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False, allow_infinity=False) | well_formed_text,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(well_formed_text, children, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=200)
@given(value=finite_json)
def test_an_actual_value_is_its_canonical_json_cut_at_60_characters(value):
    text = f'{{"gather":"Q","deadline":{json.dumps(value)},"requestedSchema":{S}}}'
    try:
        parse_message_text(TO, text)
    except MessageTextError as error:
        actual = cut(canonical_text(normalize_json(value)))
        assert error.detail == f"deadline: expected an integer from 1 to 2592000, actual {actual}"
        assert len(actual) <= ACTUAL_MAX_CHARS
    else:
        assert isinstance(value, float)
        assert value.is_integer()

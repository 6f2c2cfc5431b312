from __future__ import annotations

import json

import pytest
from harness_contract.errors import MessageTextError, MessageTextOperation
from harness_contract.jsonvalue import normalize_json
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
    Decline,
    MessageInput,
    ResponseInput,
)

TO = "group:alice,bob,carol"
S = '{"type":"object","properties":{"slot":{"type":"string","enum":["mon","tue"]}},"required":["slot"]}'
SLOT_SCHEMA = normalize_json(json.loads(S))


def with_s(template: str) -> str:
    """The template with every `<S>` replaced by the slot schema text."""
    return template.replace("<S>", S)


def refusal(text: str, to: str = TO) -> MessageTextError:
    with pytest.raises(MessageTextError) as caught:
        parse_message_text(to, text)
    return caught.value


def ask(op: CollectiveOp, question: str, deadline: int, schema=SLOT_SCHEMA) -> MessageInput:
    return MessageInput(
        to=TO,
        text=question,
        collective=AskOperation(op=op, deadline=deadline, requested_schema=schema),
    )


# --- collectives.md §5 examples, byte for byte ------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("Monday works for me.", id="1-prose"),
        pytest.param("", id="2-empty"),
        pytest.param('{"note": "no operation key"}', id="3-object-without-operation-key"),
        pytest.param('["gather", 60]', id="4-array"),
        pytest.param('"gather"', id="5-string"),
        pytest.param('{"gather": "Which day?"', id="6-truncated-json"),
        pytest.param(
            'Answer with {"action":"accept","content":{"slot":"mon"}}', id="7-json-in-prose"
        ),
    ],
)
def test_text_that_states_no_operation_is_a_multicast_of_the_exact_text(text):
    assert parse_message_text(TO, text) == MessageInput(to=TO, text=text)


def test_example_8_a_gather_reads_its_question_deadline_and_schema():
    text = with_s('{"gather":"Which day?","deadline":600,"requestedSchema":<S>}')

    assert parse_message_text(TO, text) == ask(CollectiveOp.GATHER, "Which day?", 600)


def test_example_9_an_all_gather_in_json_whitespace_with_deadline_60_0_reads_deadline_60():
    text = with_s('\n  {"all_gather":"Which day?","deadline":60.0,"requestedSchema":<S>}\n')

    result = parse_message_text(TO, text)

    assert result == ask(CollectiveOp.ALL_GATHER, "Which day?", 60)
    assert isinstance(result, MessageInput)
    assert isinstance(result.collective, AskOperation)
    assert type(result.collective.deadline) is int


def test_example_10_an_accept_reads_its_content():
    text = '{"action":"accept","content":{"slot":"mon"}}'

    assert parse_message_text(TO, text) == ResponseInput(
        to=TO, response=Accept(content={"slot": "mon"})
    )


def test_example_11_a_decline_reads_as_a_decline():
    assert parse_message_text(TO, '{"action":"decline"}') == ResponseInput(
        to=TO, response=Decline()
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            '{"gather":"Q","requestedSchema":<S>}',
            "gather not sent: deadline: is missing",
            id="12",
        ),
        pytest.param(
            '{"gather":"Q","deadline":1.5,"requestedSchema":<S>}',
            "gather not sent: deadline: expected an integer from 1 to 2592000, actual 1.5",
            id="13",
        ),
        pytest.param(
            '{"gather":7,"deadline":60,"requestedSchema":<S>}',
            "gather not sent: gather: expected a string, actual 7",
            id="14",
        ),
        pytest.param(
            '{"gather":"Q","all_gather":"Q","deadline":60,"requestedSchema":<S>}',
            "gather not sent: all_gather: is unexpected",
            id="15",
        ),
        pytest.param(
            '{"all_gather":"Q","deadline":60,"requestedSchema":{"type":"array","properties":{}}}',
            'all_gather not sent: requestedSchema.type: expected "object", actual "array"',
            id="16",
        ),
        pytest.param(
            '{"action":"maybe","content":5}',
            'answer not sent: action: expected "accept" or "decline", actual "maybe"',
            id="18",
        ),
        pytest.param(
            '{"action":"accept"}',
            "answer not sent: content: is missing",
            id="19",
        ),
        pytest.param(
            '{"action":"decline","content":{"slot":"mon"}}',
            "answer not sent: content: is unexpected",
            id="20",
        ),
        pytest.param(
            '{"action":"accept","content":{"slot":"mon"},"id":"col_x"}',
            "answer not sent: id: is unexpected",
            id="21",
        ),
        pytest.param(
            '{"action":"accept","content":{"slot":{"day":"mon"}}}',
            "answer not sent: content.slot: expected a string, a finite number, a boolean"
            ' or an array of strings, actual {"day":"mon"}',
            id="22",
        ),
        pytest.param(
            '{"gather":"Q","action":"decline"}',
            "gather not sent: deadline: is missing; requestedSchema: is missing;"
            " action: is unexpected",
            id="23",
        ),
    ],
)
def test_a_stated_operation_that_does_not_fit_is_refused_with_the_design_text(text, message):
    error = refusal(with_s(text))

    assert str(error) == message
    assert error.message == message
    assert f"{error.operation.value} not sent: {error.detail}" == message


def test_example_17_a_schema_inside_the_outline_is_read_and_left_to_the_grammar_at_send():
    text = (
        '{"gather":"Q","deadline":60,"requestedSchema":'
        '{"type":"object","properties":{"x":{"type":"objekt"}}}}'
    )

    assert parse_message_text(TO, text) == ask(
        CollectiveOp.GATHER, "Q", 60, {"type": "object", "properties": {"x": {"type": "objekt"}}}
    )


def test_the_refused_operation_is_the_one_the_text_states():
    assert refusal(with_s('{"gather":7}')).operation is MessageTextOperation.GATHER
    assert refusal(with_s('{"all_gather":7}')).operation is MessageTextOperation.ALL_GATHER
    assert refusal('{"action":"cancel"}').operation is MessageTextOperation.ANSWER
    assert refusal("hi", to="@bob").operation is MessageTextOperation.MESSAGE


# --- to --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "to",
    ["@bob", "bob", "Agent:bob", " agent:bob", "agent:bo", "agent:bob\n", "agent:Bob",
     "agent:" + "a" * 33, "agent:a--b", "group:", "group:bob,,carol", "group:bob,",
     "group:bob carol", "agent:bob,carol", "", "agent:b\ud800b"],
)  # fmt: skip
def test_to_that_is_not_an_address_by_syntax_is_refused(to):
    error = refusal("Monday works for me.", to=to)

    assert error.operation is MessageTextOperation.MESSAGE
    assert error.detail.startswith("to: expected an agent: or group: address, actual ")


def test_to_is_quoted_as_a_json_string():
    assert str(refusal("hi", to="@bob")) == (
        'message not sent: to: expected an agent: or group: address, actual "@bob"'
    )


@pytest.mark.parametrize(
    "to", ["agent:bob", "group:bob", "group:carol,bob,alice", "group:bob,bob", "agent:" + "a" * 32]
)
def test_to_is_checked_by_syntax_only_so_canonical_form_and_membership_wait_for_send(to):
    assert parse_message_text(to, "hi") == MessageInput(to=to, text="hi")


def test_a_bad_to_is_reported_under_the_stated_operation_before_its_other_issues():
    error = refusal(with_s('{"gather":"Q","deadline":0,"requestedSchema":<S>}'), to="@bob")

    assert str(error) == (
        'gather not sent: to: expected an agent: or group: address, actual "@bob"; '
        "deadline: expected an integer from 1 to 2592000, actual 0"
    )


def test_a_bad_to_is_reported_with_an_unknown_action():
    assert str(refusal('{"action":"cancel","x":1}', to="bob")) == (
        'answer not sent: to: expected an agent: or group: address, actual "bob"; '
        'action: expected "accept" or "decline", actual "cancel"'
    )


def test_a_bad_to_refuses_a_valid_answer():
    assert str(refusal('{"action":"decline"}', to="agent:x")) == (
        'answer not sent: to: expected an agent: or group: address, actual "agent:x"'
    )


# --- deadline --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "seconds"),
    [("60", 60), ("60.0", 60), ("6e1", 60), ("600E-1", 60), ("1", 1), ("2592000", 2592000)],
)
def test_a_deadline_is_a_json_number_with_an_integer_value(written, seconds):
    text = with_s(f'{{"gather":"Q","deadline":{written},"requestedSchema":<S>}}')

    assert parse_message_text(TO, text) == ask(CollectiveOp.GATHER, "Q", seconds)


@pytest.mark.parametrize(
    ("written", "actual"),
    [
        ("true", "true"),
        ("false", "false"),
        ("null", "null"),
        ('"60"', '"60"'),
        ("[60]", "[60]"),
        ("0", "0"),
        ("-0", "0"),
        ("-60", "-60"),
        ("2592001", "2592001"),
        ("1e21", "1e+21"),
        ("0.5", "0.5"),
        ("1e400", "Infinity"),
        ("-1e400", "-Infinity"),
    ],
)
def test_a_deadline_that_is_not_an_integer_from_1_to_30_days_is_refused(written, actual):
    error = refusal(with_s(f'{{"gather":"Q","deadline":{written},"requestedSchema":<S>}}'))

    assert error.detail == f"deadline: expected an integer from 1 to 2592000, actual {actual}"


def test_the_longest_deadline_is_30_days():
    assert DEADLINE_MAX_SECONDS == 30 * 24 * 60 * 60


# --- Unicode ---------------------------------------------------------------------------


def test_a_question_with_a_lone_surrogate_is_refused():
    error = refusal(with_s('{"gather":"Which \\ud800 day?","deadline":60,"requestedSchema":<S>}'))

    assert str(error) == "gather not sent: gather: expected well-formed Unicode text"


def test_a_surrogate_pair_escape_is_one_well_formed_character():
    text = with_s('{"gather":"\\ud83d\\ude00","deadline":60,"requestedSchema":<S>}')

    assert parse_message_text(TO, text) == ask(CollectiveOp.GATHER, "😀", 60)


def test_plain_text_with_a_lone_surrogate_is_refused_as_a_message():
    assert str(refusal("broken \ud800 text")) == (
        "message not sent: text: expected well-formed Unicode text"
    )


def test_a_json_object_without_an_operation_key_may_escape_a_lone_surrogate():
    text = '{"note":"\\ud800"}'

    assert parse_message_text(TO, text) == MessageInput(to=TO, text=text)


def test_content_strings_must_be_well_formed():
    error = refusal('{"action":"accept","content":{"a":"\\udc00","b":["x","\\ud800"]}}')

    assert error.detail == (
        "content.a: expected well-formed Unicode text; "
        "content.b.1: expected well-formed Unicode text"
    )


def test_a_key_that_is_not_well_formed_is_named_with_its_surrogate_escaped():
    error = refusal('{"action":"accept","content":{"\\ud800":"x"},"\\udfff":1}')

    assert error.detail == (
        "content.\\ud800: expected well-formed Unicode text; \\udfff: is unexpected"
    )


def test_a_lone_surrogate_in_a_quoted_value_is_written_as_an_escape():
    error = refusal('{"action":"\\ud800"}')

    assert error.detail == 'action: expected "accept" or "decline", actual "\\ud800"'
    assert error.message.encode("utf-8")


# --- What is JSON ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('\ufeff{"action":"decline"}', id="byte-order-mark"),
        pytest.param(' \ufeff{"action":"decline"}', id="byte-order-mark-after-space"),
        pytest.param('{"action":"accept","content":{"n":NaN}}', id="nan-literal"),
        pytest.param('{"action":"accept","content":{"n":Infinity}}', id="infinity-literal"),
        pytest.param('{"action":"accept","content":{"n":-Infinity}}', id="minus-infinity"),
        pytest.param('\u00a0{"action":"decline"}', id="no-break-space-is-not-json-whitespace"),
        pytest.param('\u2028{"action":"decline"}', id="line-separator"),
        pytest.param('\f{"action":"decline"}', id="form-feed"),
        pytest.param('{"action":"decline"} x', id="trailing-text"),
        pytest.param('{"action":"decline"}{}', id="two-values"),
        pytest.param("{'action':'decline'}", id="single-quotes"),
        pytest.param('{"action":"decline",}', id="trailing-comma"),
        pytest.param('{"action":"accept","content":{"n":01}}', id="leading-zero"),
        pytest.param('{"action":"accept","content":{"s":"a\tb"}}', id="raw-control-in-string"),
    ],
)
def test_text_that_is_not_rfc_8259_json_is_a_multicast(text):
    assert parse_message_text(TO, text) == MessageInput(to=TO, text=text)


def test_json_whitespace_around_the_object_is_allowed():
    assert parse_message_text(TO, ' \t\r\n{"action":"decline"}\r\n\t ') == ResponseInput(
        to=TO, response=Decline()
    )


def test_a_repeated_key_keeps_its_last_value():
    assert parse_message_text(TO, '{"action":"maybe","action":"decline"}') == ResponseInput(
        to=TO, response=Decline()
    )
    text = with_s('{"gather":"Q","deadline":0,"requestedSchema":<S>,"deadline":90}')
    assert parse_message_text(TO, text) == ask(CollectiveOp.GATHER, "Q", 90)


def test_keys_are_checked_in_order_gather_all_gather_action():
    error = refusal('{"action":"decline","all_gather":"Q"}')

    assert str(error) == (
        "all_gather not sent: deadline: is missing; requestedSchema: is missing;"
        " action: is unexpected"
    )


def test_an_overflowing_number_reads_as_infinite_and_fails_finiteness():
    error = refusal('{"action":"accept","content":{"n":1e400,"m":-1e999}}')

    assert error.detail == (
        "content.m: expected a string, a finite number, a boolean or an array of strings,"
        " actual -Infinity; "
        "content.n: expected a string, a finite number, a boolean or an array of strings,"
        " actual Infinity"
    )


# --- Answers ---------------------------------------------------------------------------


def test_an_accept_reads_each_answer_value_kind():
    text = '{"action":"accept","content":{"s":"x","n":3,"f":-0.0,"b":false,"a":["p","q"],"e":[]}}'

    result = parse_message_text(TO, text)

    assert result == ResponseInput(
        to=TO,
        response=Accept(
            content={"s": "x", "n": 3.0, "f": 0.0, "b": False, "a": ("p", "q"), "e": ()}
        ),
    )
    assert isinstance(result, ResponseInput)
    assert isinstance(result.response, Accept)
    assert type(result.response.content["n"]) is float
    assert type(result.response.content["b"]) is bool


def test_an_empty_content_object_is_read_and_left_to_the_answer_checker():
    assert parse_message_text(TO, '{"action":"accept","content":{}}') == ResponseInput(
        to=TO, response=Accept(content={})
    )


@pytest.mark.parametrize(
    ("action", "actual"),
    [('"cancel"', '"cancel"'), ('"Accept"', '"Accept"'), ("null", "null"), ("1", "1")],
)
def test_an_unknown_action_is_reported_alone(action, actual):
    error = refusal(f'{{"action":{action},"content":5,"id":"x"}}')

    assert str(error) == (
        f'answer not sent: action: expected "accept" or "decline", actual {actual}'
    )


def test_every_content_issue_is_reported_in_canonical_key_order_then_unexpected_keys():
    text = (
        '{"zz":1,"action":"accept","content":{"b":null,"a":[1],"c":{},"d":true},'
        '"\uffff":1,"\U0001f600":2}'
    )

    error = refusal(text)

    what = "expected a string, a finite number, a boolean or an array of strings"
    assert error.detail == (
        f"content.a: {what}, actual [1]; content.b: {what}, actual null; "
        f"content.c: {what}, actual {{}}; "
        # RFC 8785 orders keys by UTF-16 code units: U+1F600 (0xD83D…) before U+FFFF.
        "zz: is unexpected; \U0001f600: is unexpected; \uffff: is unexpected"
    )


def test_content_that_is_not_an_object_is_refused():
    assert refusal('{"action":"accept","content":["mon"]}').detail == (
        'content: expected an object, actual ["mon"]'
    )


# --- requestedSchema outline -----------------------------------------------------------


def test_the_schema_travels_normalized():
    text = (
        '{"gather":"Q","deadline":60,"requestedSchema":{"$schema":"s","type":"object",'
        '"properties":{"n":{"type":"integer","minimum":1,"maximum":5,"x":[-0.0]}},'
        '"required":["n"]}}'
    )

    result = parse_message_text(TO, text)

    assert result == ask(
        CollectiveOp.GATHER,
        "Q",
        60,
        {
            "$schema": "s",
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1.0, "maximum": 5.0, "x": (0.0,)}},
            "required": ("n",),
        },
    )


def test_a_schema_with_empty_properties_fits_the_outline():
    text = '{"gather":"Q","deadline":60,"requestedSchema":{"type":"object","properties":{}}}'

    assert parse_message_text(TO, text) == ask(
        CollectiveOp.GATHER, "Q", 60, {"type": "object", "properties": {}}
    )


def test_every_outline_issue_is_reported_in_declared_key_order():
    text = (
        '{"gather":"Q","deadline":60,"requestedSchema":{"title":"t","required":"slot",'
        '"properties":{"b":"x","a":{"type":"string","n":1e400},"c":{"s":"\\ud800"}},'
        '"$schema":5,"additionalProperties":false}}'
    )

    error = refusal(text)

    assert str(error) == (
        "gather not sent: requestedSchema.$schema: expected a string, actual 5; "
        "requestedSchema.type: is missing; "
        "requestedSchema.properties.a.n: expected a finite number, actual Infinity; "
        'requestedSchema.properties.b: expected an object, actual "x"; '
        "requestedSchema.properties.c.s: expected well-formed Unicode text; "
        'requestedSchema.required: expected an array of strings, actual "slot"; '
        "requestedSchema.additionalProperties: is unexpected; "
        "requestedSchema.title: is unexpected"
    )


@pytest.mark.parametrize(
    ("schema", "detail"),
    [
        ('"form"', 'requestedSchema: expected an object, actual "form"'),
        ("{}", "requestedSchema.type: is missing; requestedSchema.properties: is missing"),
        (
            '{"type":"object","properties":[]}',
            "requestedSchema.properties: expected an object, actual []",
        ),
        (
            '{"type":"object","properties":{},"required":["a",1]}',
            'requestedSchema.required: expected an array of strings, actual ["a",1]',
        ),
        (
            '{"type":"object","properties":{},"required":["a","\\udc00"]}',
            "requestedSchema.required.1: expected well-formed Unicode text",
        ),
        (
            '{"type":"Object","properties":{}}',
            'requestedSchema.type: expected "object", actual "Object"',
        ),
    ],
)
def test_a_schema_outside_the_outline_is_refused(schema, detail):
    text = f'{{"all_gather":"Q","deadline":60,"requestedSchema":{schema}}}'

    assert refusal(text).detail == detail


# --- Actual values ---------------------------------------------------------------------


def test_an_actual_value_of_60_characters_is_written_whole():
    value = "x" * (ACTUAL_MAX_CHARS - 2)  # 58 letters and two quotes
    error = refusal(with_s(f'{{"gather":"Q","deadline":"{value}","requestedSchema":<S>}}'))

    assert error.detail.endswith(f', actual "{value}"')


def test_a_longer_actual_value_keeps_59_characters_and_an_ellipsis():
    value = "x" * (ACTUAL_MAX_CHARS - 1)  # 61 characters written
    error = refusal(with_s(f'{{"gather":"Q","deadline":"{value}","requestedSchema":<S>}}'))

    assert error.detail == (
        'deadline: expected an integer from 1 to 2592000, actual "' + "x" * 58 + "…"
    )


def test_a_long_container_is_cut_in_its_canonical_form():
    members = ",".join(f'"k{index:02d}":{index}' for index in reversed(range(30)))
    error = refusal(f'{{"action":"accept","content":{{"slot":{{{members}}}}}}}')

    rendered = '{"k00":0,"k01":1,"k02":2,"k03":3,"k04":4,"k05":5,"k06":6,"k…'
    assert len(rendered) == ACTUAL_MAX_CHARS
    assert error.detail.endswith(f"actual {rendered}")


def test_a_megabyte_value_is_quoted_cut():
    error = refusal(
        with_s('{"gather":"Q","deadline":"' + "é" * 1_000_000 + '","requestedSchema":<S>}')
    )

    assert error.detail == (
        'deadline: expected an integer from 1 to 2592000, actual "' + "é" * 58 + "…"
    )


def test_escapes_count_as_the_characters_they_are_written_with():
    error = refusal(with_s('{"gather":"Q","deadline":"' + "\\n" * 40 + '","requestedSchema":<S>}'))

    assert error.detail.endswith('actual "' + "\\n" * 29 + "…")


# --- Size and depth --------------------------------------------------------------------


def test_a_megabyte_question_is_read():
    question = "q" * 1_000_000
    text = with_s(f'{{"gather":"{question}","deadline":60,"requestedSchema":<S>}}')

    assert parse_message_text(TO, text) == ask(CollectiveOp.GATHER, question, 60)


def test_a_megabyte_of_prose_is_a_multicast():
    text = "Monday works. " * 80_000

    assert parse_message_text(TO, text) == MessageInput(to=TO, text=text)


@pytest.mark.parametrize("opening", ["[", "{", '{"a":[', '{"gather":'])
def test_text_nested_10000_deep_is_a_multicast(opening):
    closing = {"[": "]", "{": "}", '{"a":[': "]}", '{"gather":': "}"}[opening]
    text = opening * 10_000 + "1" + closing * 10_000

    assert parse_message_text(TO, text) == MessageInput(to=TO, text=text)


def test_an_operation_nested_deeper_than_the_parser_limit_does_not_parse_and_is_a_multicast():
    deep = "[" * MESSAGE_TEXT_MAX_DEPTH + "]" * MESSAGE_TEXT_MAX_DEPTH
    text = f'{{"action":"accept","content":{{"x":{deep}}}}}'

    assert parse_message_text(TO, text) == MessageInput(to=TO, text=text)


def test_an_operation_at_the_parser_limit_is_read_and_refused():
    deep = "[" * (MESSAGE_TEXT_MAX_DEPTH - 2) + "]" * (MESSAGE_TEXT_MAX_DEPTH - 2)
    text = f'{{"action":"accept","content":{{"x":{deep}}}}}'

    error = refusal(text)

    assert error.detail.startswith("content.x: expected a string")
    assert error.detail.endswith("actual " + "[" * 59 + "…")


def test_brackets_inside_strings_do_not_count_as_nesting():
    question = "[{" * 200
    text = with_s(f'{{"gather":"{question}","deadline":60,"requestedSchema":<S>}}')

    assert parse_message_text(TO, text) == ask(CollectiveOp.GATHER, question, 60)


def test_an_unterminated_string_of_escaped_quotes_is_a_multicast_quickly():
    text = '{"' + '\\"' * 200_000

    assert parse_message_text(TO, text) == MessageInput(to=TO, text=text)

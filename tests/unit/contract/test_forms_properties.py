"""Property tests: the grammar and the checker are total, and admission is a fixed point."""

from __future__ import annotations

import math
from typing import Any

from harness_contract.errors import AnswerFieldIssue, AnswerFieldReason
from harness_contract.forms import (
    FormSchemaError,
    admit_schema,
    canonical_key_order,
    check_answer,
    validate_answer_content,
)
from harness_contract.jsonvalue import canonical_json, is_well_formed_text, normalize_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PROPERTY_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Text that may hold lone surrogates, which `st.text()` leaves out by default.
TEXT = st.text(
    st.one_of(st.characters(), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)),
    max_size=12,
)
NUMBERS = st.one_of(
    st.integers(),
    # Integers past binary64's range (10**400 is what JSON's 1e400 overflows from).
    st.integers(min_value=3, max_value=4).map(lambda exponent: -(10 ** (100 * exponent))),
    st.integers(min_value=3, max_value=4).map(lambda exponent: 10 ** (100 * exponent)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([-0.0, 0.0, math.nan, math.inf, -math.inf, 1e400, 3.0, 2.5, 1e21]),
)
GRAMMAR_WORDS = st.sampled_from(
    [
        "$schema",
        "type",
        "properties",
        "required",
        "title",
        "description",
        "enum",
        "enumNames",
        "default",
        "oneOf",
        "anyOf",
        "items",
        "const",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "format",
        "string",
        "number",
        "integer",
        "boolean",
        "array",
        "object",
        "email",
        "uri",
        "date",
        "date-time",
        "a",
        "b",
    ]
)
KEYS = st.one_of(GRAMMAR_WORDS, TEXT)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT, GRAMMAR_WORDS)
# Things that are not JSON at all; none of them may make the grammar raise.
FOREIGN = st.one_of(
    st.binary(max_size=4),
    st.complex_numbers(allow_nan=True),
    st.builds(object),
    st.frozensets(st.integers(), max_size=3),
    st.sets(st.integers(), max_size=3),
)
JSON_LIKE = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(KEYS, children, max_size=5),
    ),
    max_leaves=30,
)
ANYTHING = st.recursive(
    st.one_of(SCALARS, FOREIGN),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(KEYS, st.integers(), st.none()), children, max_size=5),
    ),
    max_leaves=30,
)


def grammar_field(values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A property built mostly from grammar words, so every shape and refusal is reached."""
    option = st.fixed_dictionaries(
        {"const": st.one_of(GRAMMAR_WORDS, values), "title": st.one_of(GRAMMAR_WORDS, values)}
    )
    options = st.lists(st.one_of(option, values), max_size=3)
    strings = st.lists(st.one_of(GRAMMAR_WORDS, values), max_size=3)
    items = st.fixed_dictionaries(
        {},
        optional={
            "type": st.one_of(GRAMMAR_WORDS, values),
            "enum": st.one_of(strings, values),
            "anyOf": st.one_of(options, values),
        },
    )
    return st.fixed_dictionaries(
        {"type": st.one_of(GRAMMAR_WORDS, values)},
        optional={
            "title": st.one_of(TEXT, values),
            "description": st.one_of(TEXT, values),
            "enum": st.one_of(strings, values),
            "enumNames": st.one_of(strings, values),
            "oneOf": st.one_of(options, values),
            "items": st.one_of(items, values),
            "default": values,
            "minItems": st.one_of(NUMBERS, values),
            "maxItems": NUMBERS,
            "minLength": NUMBERS,
            "maxLength": NUMBERS,
            "minimum": NUMBERS,
            "maximum": NUMBERS,
            "format": st.one_of(GRAMMAR_WORDS, values),
            "x-extra": values,
        },
    )


def grammar_schema(values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A schema built mostly from grammar words, with arbitrary values mixed in."""
    return st.fixed_dictionaries(
        {"type": st.one_of(st.just("object"), values)},
        optional={
            "$schema": st.one_of(TEXT, values),
            "properties": st.one_of(
                st.dictionaries(KEYS, st.one_of(grammar_field(values), values), max_size=4),
                values,
            ),
            "required": st.one_of(st.lists(KEYS, max_size=3), values),
            "extra": values,
        },
    )


WORDS = st.one_of(GRAMMAR_WORDS, st.text(max_size=6))
WORD_LISTS = st.lists(WORDS, max_size=4)
CHOICES = st.lists(WORDS, min_size=1, max_size=4)
FINITE = st.one_of(st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False))
OPTIONS = st.lists(
    st.fixed_dictionaries({"const": WORDS, "title": WORDS}, optional={"icon": JSON_LIKE}),
    min_size=1,
    max_size=3,
)
LABELS = {"title": WORDS, "description": WORDS, "x-ui": JSON_LIKE}
ADMISSIBLE_FIELDS = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("string"), "enum": CHOICES},
        optional={**LABELS, "enumNames": WORD_LISTS, "default": WORDS, "format": WORDS},
    ),
    st.fixed_dictionaries(
        {"type": st.just("string"), "oneOf": OPTIONS},
        optional={**LABELS, "default": WORDS, "enum": st.one_of(CHOICES, SCALARS)},
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("array"),
            "items": st.fixed_dictionaries(
                {"type": st.just("string"), "enum": CHOICES}, optional={"title": WORDS}
            ),
        },
        optional={**LABELS, "minItems": FINITE, "maxItems": FINITE, "default": WORD_LISTS},
    ),
    st.fixed_dictionaries(
        {"type": st.just("array"), "items": st.fixed_dictionaries({"anyOf": OPTIONS})},
        optional={**LABELS, "minItems": FINITE, "maxItems": FINITE, "default": WORD_LISTS},
    ),
    st.fixed_dictionaries(
        {"type": st.just("boolean")}, optional={**LABELS, "default": st.booleans()}
    ),
    st.fixed_dictionaries(
        {"type": st.just("string")},
        optional={
            **LABELS,
            "minLength": FINITE,
            "maxLength": FINITE,
            "format": st.sampled_from(["email", "uri", "date", "date-time"]),
            "default": WORDS,
        },
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["number", "integer"])},
        optional={**LABELS, "minimum": FINITE, "maximum": FINITE, "default": FINITE},
    ),
)


@st.composite
def admissible_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """A schema the grammar admits: every property fits a shape, `required` is declared."""
    properties = draw(st.dictionaries(WORDS, ADMISSIBLE_FIELDS, max_size=4))
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if draw(st.booleans()):
        names = sorted(properties)
        schema["required"] = draw(st.lists(st.sampled_from(names), max_size=3)) if names else []
    if draw(st.booleans()):
        schema["$schema"] = draw(WORDS)
    return schema


FORMS = st.one_of(admissible_schemas(), grammar_schema(SCALARS))
SCHEMAS = st.one_of(
    admissible_schemas(), grammar_schema(SCALARS), grammar_schema(JSON_LIKE), JSON_LIKE, ANYTHING
)


def admit_or_refuse(schema: object) -> dict[str, Any] | FormSchemaError:
    try:
        return admit_schema(schema)
    except FormSchemaError as error:
        return error


@PROPERTY_SETTINGS
@given(SCHEMAS)
def test_admission_returns_a_json_schema_or_raises_only_form_schema_error(schema):
    outcome = admit_or_refuse(schema)
    if isinstance(outcome, FormSchemaError):
        assert outcome.detail
        assert outcome.detail == "; ".join(outcome.issues)
        assert is_well_formed_text(outcome.detail)
    else:
        assert isinstance(outcome, dict)
        assert normalize_json(outcome) == outcome
        canonical_json(outcome)


@PROPERTY_SETTINGS
@given(admissible_schemas())
def test_an_admissible_schema_is_admitted(schema):
    properties = admit_schema(schema)["properties"]
    assert isinstance(properties, dict)
    assert set(properties) == set(schema["properties"])


@PROPERTY_SETTINGS
@given(FORMS)
def test_an_admitted_schema_is_a_fixed_point_of_admission(schema):
    outcome = admit_or_refuse(schema)
    if isinstance(outcome, dict):
        assert admit_schema(outcome) == outcome
        assert admit_schema(normalize_json(outcome)) == outcome


@PROPERTY_SETTINGS
@given(FORMS)
def test_admission_depends_only_on_the_json_value_not_its_python_spelling(schema):
    try:
        normalized = normalize_json(schema)
    except ValueError:
        return
    first, second = admit_or_refuse(schema), admit_or_refuse(normalized)
    if isinstance(first, FormSchemaError):
        assert isinstance(second, FormSchemaError)
        assert first.detail == second.detail
    else:
        assert first == second


ANSWER_VALUES = st.one_of(
    TEXT,
    GRAMMAR_WORDS,
    NUMBERS,
    st.booleans(),
    st.lists(st.one_of(GRAMMAR_WORDS, TEXT), max_size=4),
    JSON_LIKE,
    FOREIGN,
)
ANSWERS = st.one_of(
    st.dictionaries(KEYS, ANSWER_VALUES, max_size=5),
    ANYTHING,
)


@PROPERTY_SETTINGS
@given(FORMS, ANSWERS)
def test_the_checker_returns_field_issues_for_any_answer_to_any_admitted_schema(schema, answer):
    admitted = admit_or_refuse(schema)
    form: dict[str, Any] = admitted if isinstance(admitted, dict) else {"properties": {}}
    issues = check_answer(form, answer)
    assert isinstance(issues, tuple)
    assert all(isinstance(issue, AnswerFieldIssue) for issue in issues)
    assert all(
        (issue.detail is not None) == (issue.reason is AnswerFieldReason.INVALID)
        for issue in issues
    )
    fields = [issue.field for issue in issues]
    assert len(fields) == len(set(fields))


@PROPERTY_SETTINGS
@given(SCHEMAS, ANSWERS)
def test_the_checker_never_raises_even_for_schemas_that_were_never_admitted(schema, answer):
    issues = check_answer(schema, answer)
    assert isinstance(issues, tuple)
    assert all(isinstance(issue, AnswerFieldIssue) for issue in issues)


@PROPERTY_SETTINGS
@given(FORMS, st.dictionaries(KEYS, ANSWER_VALUES, max_size=5))
def test_the_verdict_ignores_the_order_of_the_answer_keys(schema, answer):
    admitted = admit_or_refuse(schema)
    if isinstance(admitted, FormSchemaError):
        return
    reversed_answer = dict(reversed(list(answer.items())))
    assert check_answer(admitted, answer) == check_answer(admitted, reversed_answer)


@PROPERTY_SETTINGS
@given(FORMS, st.dictionaries(KEYS, ANSWER_VALUES, max_size=5))
def test_declared_fields_come_first_then_undeclared_ones_each_in_canonical_order(schema, answer):
    admitted = admit_or_refuse(schema)
    if isinstance(admitted, FormSchemaError):
        return
    issues = check_answer(admitted, answer)
    declared = [i.field for i in issues if i.reason is not AnswerFieldReason.UNEXPECTED]
    undeclared = [i.field for i in issues if i.reason is AnswerFieldReason.UNEXPECTED]
    assert [i.field for i in issues] == declared + undeclared
    assert declared == canonical_key_order(declared)
    assert undeclared == canonical_key_order(undeclared)


@PROPERTY_SETTINGS
@given(ANSWERS)
def test_validated_answer_content_is_json_and_validates_to_itself(value):
    content = validate_answer_content(value)
    if content is not None:
        assert validate_answer_content(content) == content
        canonical_json(content)


def deeply_nested(depth: int) -> object:
    value: object = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_huge_nesting_in_ignored_or_ill_typed_places_is_harmless():
    deep = deeply_nested(100_000)
    field = {"type": "string", "enum": ["a"], "x-deep": deep, "default": deep}
    schema = {"type": "object", "properties": {"x": field, "y": deep}, "required": deep}
    assert isinstance(admit_or_refuse(schema), FormSchemaError)
    admitted = admit_schema({"type": "object", "properties": {"x": {"type": "boolean", "x": deep}}})
    assert admitted == {"type": "object", "properties": {"x": {"type": "boolean"}}}
    assert check_answer(admitted, {"x": deep, "y": deep}) != ()


def test_a_self_referencing_schema_is_refused_without_recursing():
    cyclic: dict[str, Any] = {"type": "object"}
    cyclic["properties"] = {"x": cyclic}
    cyclic["items"] = cyclic
    assert isinstance(admit_or_refuse(cyclic), FormSchemaError)
    assert check_answer(cyclic, cyclic) != ()


def test_huge_strings_are_checked_in_linear_time():
    schema = admit_schema(
        {
            "type": "object",
            "properties": {
                "e": {"type": "string", "format": "email"},
                "u": {"type": "string", "format": "uri"},
                "t": {"type": "string", "format": "date-time", "maxLength": 10},
            },
        }
    )
    huge = "a" * 1_000_000
    issues = check_answer(schema, {"e": huge + "@", "u": "http://" + huge + " ", "t": huge})
    assert [issue.field for issue in issues] == ["e", "t", "u"]

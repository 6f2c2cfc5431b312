"""The form-mode grammar and the answer checker, byte for byte (collectives.md §6)."""

from __future__ import annotations

import math

import pytest
from harness_contract.errors import (
    AnswerFieldIssue,
    AnswerFieldReason,
    AnswerInvalid,
    CollectiveError,
    SchemaInvalid,
    answer_issues_text,
)
from harness_contract.forms import (
    FormSchemaError,
    admit_schema,
    answer_value,
    canonical_key_order,
    check_answer,
    validate_answer_content,
)
from harness_contract.jsonvalue import canonical_text, normalize_json

TITLED_SINGLE_SELECT = (
    'a titled single-select is {"type":"string","oneOf":[{"const":"a","title":"A"}]}'
)
SINGLE_SELECT = 'a single-select is {"type":"string","enum":["a","b"]}'
STRING = 'a string is {"type":"string"} with optional minLength, maxLength or format'
NUMBER = 'a number is {"type":"number"} or {"type":"integer"} with optional minimum and maximum'
BOOLEAN = 'a boolean is {"type":"boolean"}'
TITLED_MULTI_SELECT = (
    'a titled multi-select is {"type":"array","items":{"anyOf":[{"const":"a","title":"A"}]}}'
)
MULTI_SELECT = 'a multi-select is {"type":"array","items":{"type":"string","enum":["a","b"]}}'
NO_SHAPE = '"type" must be "string", "number", "integer", "boolean" or "array"'

SLOT_SCHEMA = {
    "type": "object",
    "properties": {"slot": {"type": "string", "enum": ["mon", "tue"]}},
    "required": ["slot"],
}


def one_property(field: object) -> dict[str, object]:
    return {"type": "object", "properties": {"x": field}}


def admitted_property(field: object) -> object:
    properties = admit_schema(one_property(field))["properties"]
    assert isinstance(properties, dict)
    return properties["x"]


def refusal(schema: object) -> str:
    with pytest.raises(FormSchemaError) as caught:
        admit_schema(schema)
    return caught.value.detail


def answer_text(schema: object, content: dict[str, object]) -> str:
    return answer_issues_text(check_answer(admit_schema(schema), content))


def field_schema(name: str, field: object, *, required: bool = False) -> dict[str, object]:
    schema: dict[str, object] = {"type": "object", "properties": {name: field}}
    if required:
        schema["required"] = [name]
    return schema


# --- §6.6 schema examples --------------------------------------------------------------


def test_a_single_select_is_admitted_unchanged_by_shape_one():
    field = {"type": "string", "enum": ["mon", "tue"]}
    assert admitted_property(field) == normalize_json(field)


def test_a_single_select_drops_format_and_unknown_keywords():
    field = {"type": "string", "enum": ["a"], "format": "email", "x-ui": "radio"}
    assert admitted_property(field) == normalize_json({"type": "string", "enum": ["a"]})


def test_a_titled_single_select_drops_unknown_option_keywords():
    field = {"type": "string", "oneOf": [{"const": "mon", "title": "Monday", "icon": "m"}]}
    assert admitted_property(field) == normalize_json(
        {"type": "string", "oneOf": [{"const": "mon", "title": "Monday"}]}
    )


def test_a_multi_select_drops_unique_items():
    field = {
        "type": "array",
        "items": {"type": "string", "enum": ["a", "b"]},
        "minItems": 1,
        "uniqueItems": True,
    }
    assert admitted_property(field) == normalize_json(
        {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 1}
    )


def test_a_titled_multi_select_is_admitted_by_shape_five():
    field = {"type": "array", "items": {"anyOf": [{"const": "a", "title": "A"}]}}
    assert admitted_property(field) == normalize_json(field)


def test_an_integer_drops_multiple_of():
    field = {"type": "integer", "minimum": 1, "maximum": 5, "multipleOf": 2}
    assert admitted_property(field) == normalize_json(
        {"type": "integer", "minimum": 1, "maximum": 5}
    )


def test_an_object_property_names_the_types_a_field_may_have():
    assert refusal(one_property({"type": "object"})) == f"properties.x: {NO_SHAPE}"


def test_a_multi_select_without_items_type_names_it_then_the_template():
    field = {"type": "array", "items": {"enum": ["mon", "tue"]}}
    assert refusal(one_property(field)) == (
        f'properties.x: items.type: expected "string"; {MULTI_SELECT}'
    )


def test_an_unknown_format_names_the_four_formats_then_the_string_template():
    field = {"type": "string", "format": "phone"}
    assert refusal(one_property(field)) == (
        f'properties.x: format: expected one of "email", "uri", "date" or "date-time"; {STRING}'
    )


def test_an_empty_enum_is_refused_as_offering_no_option():
    field = {"type": "string", "enum": []}
    assert refusal(one_property(field)) == "properties.x: enum: expected at least one option"


def test_a_titled_option_without_a_title_is_refused_as_a_titled_single_select():
    field = {"type": "string", "oneOf": [{"const": "a"}]}
    assert refusal(one_property(field)) == (
        'properties.x: oneOf: expected an array of {"const": string, "title": string}; '
        f"{TITLED_SINGLE_SELECT}"
    )


def test_a_required_name_that_is_not_a_property_is_refused():
    schema = {
        "type": "object",
        "properties": {"note": {"type": "string"}},
        "required": ["slot"],
    }
    assert refusal(schema) == 'required: "slot" is not declared in properties'


def test_a_refused_form_reads_as_a_schema_invalid_collective_error():
    with pytest.raises(FormSchemaError) as caught:
        admit_schema(one_property({"type": "object"}))
    assert caught.value.failure == SchemaInvalid(detail=f"properties.x: {NO_SHAPE}")
    error = CollectiveError("col_x", caught.value.failure)
    assert error.message == f"send failed: the form is invalid (properties.x: {NO_SHAPE})"


# --- outline (§6.1, §6.3) --------------------------------------------------------------


def test_the_slot_schema_is_admitted_unchanged():
    assert admit_schema(SLOT_SCHEMA) == normalize_json(SLOT_SCHEMA)


def test_an_empty_properties_object_is_admitted():
    assert admit_schema({"type": "object", "properties": {}}) == {
        "type": "object",
        "properties": {},
    }


def test_a_string_schema_dialect_travels_with_the_form():
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **SLOT_SCHEMA}
    assert admit_schema(schema) == normalize_json(schema)


def test_a_dialect_that_is_not_a_string_is_refused():
    assert refusal({"$schema": 7, **SLOT_SCHEMA}) == "$schema: expected a string"


def test_an_extra_top_level_key_is_unexpected():
    assert refusal({**SLOT_SCHEMA, "additionalProperties": False}) == (
        "additionalProperties: is unexpected"
    )


def test_several_extra_top_level_keys_are_unexpected_in_canonical_order():
    assert refusal({**SLOT_SCHEMA, "title": "T", "$id": "x", "description": "d"}) == (
        "$id: is unexpected; description: is unexpected; title: is unexpected"
    )


def test_a_type_other_than_object_is_refused():
    assert refusal({**SLOT_SCHEMA, "type": "array"}) == 'type: expected "object"'


def test_a_missing_type_is_refused_the_same_way():
    assert refusal({"properties": {}}) == 'type: expected "object"'


def test_missing_properties_are_refused():
    assert refusal({"type": "object"}) == "properties: expected an object"


def test_properties_that_are_not_an_object_are_refused():
    assert refusal({"type": "object", "properties": []}) == "properties: expected an object"


def test_required_that_is_not_an_array_of_strings_is_refused():
    assert refusal({**SLOT_SCHEMA, "required": ["slot", 1]}) == (
        "required: expected an array of strings"
    )


def test_several_undeclared_required_names_are_listed_together_in_their_order():
    schema = {
        "type": "object",
        "properties": {"b": {"type": "boolean"}},
        "required": ["z", "b", "a", "z"],
    }
    assert refusal(schema) == 'required: "z", "a" are not declared in properties'


def test_a_schema_that_is_not_an_object_is_refused_without_a_path():
    assert refusal(["type", "object"]) == "expected an object"
    assert refusal(None) == "expected an object"


def test_outline_issues_come_in_outline_order_with_unexpected_keys_last():
    schema = {"z": 1, "required": "a", "properties": [], "$schema": 1, "a": 2}
    assert refusal(schema) == (
        "$schema: expected a string; "
        'type: expected "object"; '
        "properties: expected an object; "
        "required: expected an array of strings; "
        "a: is unexpected; z: is unexpected"
    )


def test_property_issues_come_in_utf16_canonical_order_before_later_outline_issues():
    bad = {"type": "object"}
    schema = {
        "type": "object",
        "properties": {"\uff01": bad, "b": bad, "\U0001f600": bad, "a": bad},
        "required": ["ghost"],
        "extra": True,
    }
    assert refusal(schema) == "; ".join(
        [
            f"properties.a: {NO_SHAPE}",
            f"properties.b: {NO_SHAPE}",
            f"properties.\U0001f600: {NO_SHAPE}",
            f"properties.\uff01: {NO_SHAPE}",
            'required: "ghost" is not declared in properties',
            "extra: is unexpected",
        ]
    )


def test_a_required_name_is_declared_even_when_its_property_is_refused():
    schema = {"type": "object", "properties": {"x": {"type": "object"}}, "required": ["x"]}
    assert refusal(schema) == f"properties.x: {NO_SHAPE}"


def test_admitted_properties_are_returned_in_canonical_order():
    schema = {
        "type": "object",
        "properties": {"b": {"type": "boolean"}, "a": {"type": "boolean"}},
    }
    properties = admit_schema(schema)["properties"]
    assert isinstance(properties, dict)
    assert list(properties) == ["a", "b"]


# --- shapes (§6.2) ---------------------------------------------------------------------


def test_shape_one_keeps_enum_names():
    field = {"type": "string", "enum": ["a", "b"], "enumNames": ["A", "B"], "default": "a"}
    assert admitted_property(field) == normalize_json(field)


def test_ill_typed_enum_names_fall_to_shape_two_which_drops_them():
    field = {"type": "string", "enum": ["a"], "enumNames": "A", "title": "Pick"}
    assert admitted_property(field) == normalize_json(
        {"type": "string", "enum": ["a"], "title": "Pick"}
    )


def test_a_property_with_both_enum_and_one_of_is_admitted_by_the_first_shape_as_a_select():
    field = {"type": "string", "enum": ["a"], "oneOf": [{"const": "b", "title": "B"}]}
    assert admitted_property(field) == normalize_json({"type": "string", "enum": ["a"]})


def test_an_ill_typed_enum_beside_good_options_falls_to_the_titled_single_select():
    field = {"type": "string", "enum": [1], "oneOf": [{"const": "b", "title": "B"}]}
    assert admitted_property(field) == normalize_json(
        {"type": "string", "oneOf": [{"const": "b", "title": "B"}]}
    )


def test_a_malformed_select_never_becomes_free_text():
    field = {"type": "string", "enum": [1], "minLength": 1}
    assert refusal(one_property(field)) == (
        f"properties.x: enum: expected an array of strings; {SINGLE_SELECT}"
    )


def test_a_string_keeps_its_limits_format_and_labels():
    field = {
        "type": "string",
        "title": "Mail",
        "description": "Where to write",
        "minLength": 3,
        "maxLength": 320,
        "format": "email",
        "default": "a@example.com",
        "pattern": ".*",
    }
    expected = {key: value for key, value in field.items() if key != "pattern"}
    assert admitted_property(field) == normalize_json(expected)


def test_a_boolean_keeps_its_default():
    field = {"type": "boolean", "default": False, "const": True}
    assert admitted_property(field) == {"type": "boolean", "default": False}


def test_a_number_keeps_bounds_as_floats():
    field = {"type": "number", "minimum": -0.5, "maximum": 10, "default": 2}
    assert admitted_property(field) == {
        "type": "number",
        "minimum": -0.5,
        "maximum": 10.0,
        "default": 2.0,
    }


def test_a_number_enum_is_dropped_as_the_number_shape_does_not_know_it():
    assert admitted_property({"type": "number", "enum": ["x"]}) == {"type": "number"}


def test_multi_select_items_keep_only_type_and_enum():
    field = {
        "type": "array",
        "items": {"type": "string", "enum": ["a"], "title": "t", "minLength": 2},
        "default": ["a"],
        "maxItems": 1,
    }
    assert admitted_property(field) == normalize_json(
        {
            "type": "array",
            "items": {"type": "string", "enum": ["a"]},
            "default": ["a"],
            "maxItems": 1,
        }
    )


@pytest.mark.parametrize(
    ("field", "detail"),
    [
        ({"type": "string", "oneOf": []}, "oneOf: expected at least one option"),
        (
            {"type": "array", "items": {"type": "string", "enum": []}},
            "items.enum: expected at least one option",
        ),
        ({"type": "array", "items": {"anyOf": []}}, "items.anyOf: expected at least one option"),
        (
            {"type": "string", "enum": [], "enumNames": [], "minLength": 1},
            "enum: expected at least one option",
        ),
    ],
)
def test_an_admitted_select_with_no_options_is_refused(field, detail):
    assert refusal(one_property(field)) == f"properties.x: {detail}"


# --- refusal texts (§6.3) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "detail"),
    [
        (
            {
                "type": "string",
                "title": 5,
                "description": None,
                "minLength": "1",
                "maxLength": math.nan,
                "format": "phone",
                "default": 1,
            },
            "title: expected a string; description: expected a string; "
            "minLength: expected a number; maxLength: expected a number; "
            'format: expected one of "email", "uri", "date" or "date-time"; '
            f"default: expected a string; {STRING}",
        ),
        (
            {"type": "string", "enum": "a", "default": 1},
            f"enum: expected an array of strings; default: expected a string; {SINGLE_SELECT}",
        ),
        (
            {"type": "string", "enum": ["a"], "enumNames": [1], "default": 1},
            f"default: expected a string; {SINGLE_SELECT}",
        ),
        (
            {"type": "string", "oneOf": [{"const": 1, "title": "A"}], "default": 2},
            'oneOf: expected an array of {"const": string, "title": string}; '
            f"default: expected a string; {TITLED_SINGLE_SELECT}",
        ),
        (
            {"type": "integer", "minimum": "1", "maximum": True, "default": math.inf},
            "minimum: expected a number; maximum: expected a number; "
            f"default: expected a number; {NUMBER}",
        ),
        (
            {"type": "number", "minimum": 10**400},
            f"minimum: expected a number; {NUMBER}",
        ),
        (
            {"type": "boolean", "default": "yes", "title": 1},
            f"title: expected a string; default: expected a boolean; {BOOLEAN}",
        ),
        (
            {"type": "array", "items": {"anyOf": [{"const": "a"}]}, "minItems": "1"},
            "minItems: expected a number; "
            'items.anyOf: expected an array of {"const": string, "title": string}; '
            f"{TITLED_MULTI_SELECT}",
        ),
        (
            {"type": "array", "items": "x", "maxItems": None, "default": "a"},
            "maxItems: expected a number; default: expected an array of strings; "
            f"items: expected an object; {MULTI_SELECT}",
        ),
        ({"type": "array"}, f"items: expected an object; {MULTI_SELECT}"),
        (
            {"type": "array", "items": {"type": "number", "enum": [1]}},
            'items.type: expected "string"; items.enum: expected an array of strings; '
            f"{MULTI_SELECT}",
        ),
        ({"type": "objekt"}, NO_SHAPE),
        ({"enum": ["a"]}, NO_SHAPE),
        ({"type": ["string"]}, NO_SHAPE),
        ("string", NO_SHAPE),
        (None, NO_SHAPE),
    ],
)
def test_a_refused_property_names_each_rejected_keyword_of_its_intended_shape(field, detail):
    assert refusal(one_property(field)) == f"properties.x: {detail}"


def test_the_refusal_error_carries_each_issue_separately():
    schema = {"type": "object", "properties": {"a": {"type": "object"}}, "extra": 1}
    with pytest.raises(FormSchemaError) as caught:
        admit_schema(schema)
    assert caught.value.issues == (f"properties.a: {NO_SHAPE}", "extra: is unexpected")
    assert str(caught.value) == caught.value.detail


# --- §6.6 answer examples --------------------------------------------------------------


def test_a_listed_slot_is_a_valid_answer():
    assert check_answer(admit_schema(SLOT_SCHEMA), {"slot": "mon"}) == ()


def test_an_unlisted_slot_fails_enum():
    assert check_answer(admit_schema(SLOT_SCHEMA), {"slot": "sun"}) == (
        AnswerFieldIssue(
            field="slot",
            reason=AnswerFieldReason.INVALID,
            detail="enum: must be one of the allowed values",
        ),
    )
    assert answer_text(SLOT_SCHEMA, {"slot": "sun"}) == (
        'field "slot" is invalid (enum: must be one of the allowed values)'
    )


def test_a_required_field_left_out_is_missing():
    assert answer_text(SLOT_SCHEMA, {}) == 'field "slot" is missing'


def test_an_undeclared_field_is_not_in_the_form():
    assert answer_text(SLOT_SCHEMA, {"slot": "mon", "note": "x"}) == (
        'field "note" is not in the form'
    )


def test_a_number_for_a_select_fails_type_then_enum():
    assert answer_text(SLOT_SCHEMA, {"slot": 5.0}) == (
        'field "slot" is invalid (type: must be string, enum: must be one of the allowed values)'
    )


@pytest.mark.parametrize(
    ("value", "verdict"),
    [
        (3.0, ""),
        (3, ""),
        (2.5, 'field "n" is invalid (type: must be integer)'),
        (7.0, 'field "n" is invalid (maximum: must be <= 5)'),
        (0.0, 'field "n" is invalid (minimum: must be >= 1)'),
        (True, 'field "n" is invalid (type: must be integer)'),
    ],
)
def test_an_integer_from_one_to_five(value, verdict):
    schema = field_schema("n", {"type": "integer", "minimum": 1, "maximum": 5})
    assert answer_text(schema, {"n": value}) == verdict


def test_an_email_without_a_dotted_host_fails_format():
    schema = field_schema("e", {"type": "string", "format": "email"})
    assert answer_text(schema, {"e": "a@example"}) == (
        'field "e" is invalid (format: must match format "email")'
    )


@pytest.mark.parametrize(("value", "valid"), [("2024-02-29", True), ("2023-02-29", False)])
def test_a_date_must_be_a_real_day(value, valid):
    schema = field_schema("d", {"type": "string", "format": "date"})
    expected = "" if valid else 'field "d" is invalid (format: must match format "date")'
    assert answer_text(schema, {"d": value}) == expected


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("2024-02-01 10:00:00-0130", True),
        ("2024-02-01T23:59:60Z", True),
        ("2024-02-01T10:00:00", False),
        ("2024-02-01T10:59:60Z", False),
    ],
)
def test_a_date_time_needs_a_zone_and_a_leap_second_at_23_59_utc(value, valid):
    schema = field_schema("t", {"type": "string", "format": "date-time"})
    expected = "" if valid else 'field "t" is invalid (format: must match format "date-time")'
    assert answer_text(schema, {"t": value}) == expected


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("https://user@[::1]:8080/a?b#c", True),
        ("urn:example:x", True),
        ("example.com", False),
        ("https://a b", False),
    ],
)
def test_a_uri_must_be_absolute(value, valid):
    schema = field_schema("u", {"type": "string", "format": "uri"})
    expected = "" if valid else 'field "u" is invalid (format: must match format "uri")'
    assert answer_text(schema, {"u": value}) == expected


@pytest.mark.parametrize(
    ("value", "verdict"),
    [
        ([], 'field "tags" is invalid (minItems: must have at least 1 items)'),
        (["a", "c"], 'field "tags" is invalid (items[1].enum: must be one of the allowed values)'),
        (["b", "a"], ""),
    ],
)
def test_a_multi_select_with_at_least_one_item(value, verdict):
    schema = field_schema(
        "tags",
        {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 1},
    )
    assert answer_text(schema, {"tags": value}) == verdict


def test_duplicate_consts_admit_no_answer():
    schema = field_schema(
        "c",
        {"type": "string", "oneOf": [{"const": "a", "title": "A"}, {"const": "a", "title": "B"}]},
    )
    assert answer_text(schema, {"c": "a"}) == (
        'field "c" is invalid (oneOf: must equal exactly one option\'s const)'
    )


def test_length_counts_code_points_so_an_emoji_is_one_character():
    schema = field_schema("s", {"type": "string", "minLength": 2})
    assert answer_text(schema, {"s": "😀"}) == (
        'field "s" is invalid (minLength: must have at least 2 characters)'
    )


def test_two_missing_fields_come_before_an_undeclared_one():
    schema = {
        "type": "object",
        "properties": {"b": {"type": "string"}, "a": {"type": "string"}},
        "required": ["a", "b"],
    }
    assert answer_text(schema, {"z": 1.0}) == (
        'field "a" is missing; field "b" is missing; field "z" is not in the form'
    )


# --- more answers (§6.4) ---------------------------------------------------------------


def test_an_optional_field_left_out_is_fine():
    schema = field_schema("note", {"type": "string"})
    assert check_answer(admit_schema(schema), {}) == ()


def test_a_boolean_field_wants_a_boolean_not_its_spelling():
    schema = field_schema("ok", {"type": "boolean"})
    assert answer_text(schema, {"ok": True}) == ""
    assert answer_text(schema, {"ok": "true"}) == 'field "ok" is invalid (type: must be boolean)'


def test_a_boolean_is_never_a_number():
    schema = field_schema("n", {"type": "number", "minimum": 5})
    assert answer_text(schema, {"n": False}) == 'field "n" is invalid (type: must be number)'


def test_limits_are_written_as_rfc_8785_writes_numbers():
    schema = field_schema("n", {"type": "number", "minimum": 2.5, "maximum": 1e21})
    assert answer_text(schema, {"n": 1.0}) == 'field "n" is invalid (minimum: must be >= 2.5)'
    assert answer_text(schema, {"n": 1e22}) == ('field "n" is invalid (maximum: must be <= 1e+21)')


def test_a_too_long_string_counts_astral_characters_once():
    schema = field_schema("s", {"type": "string", "maxLength": 2})
    assert answer_text(schema, {"s": "😀😀"}) == ""
    assert answer_text(schema, {"s": "😀😀😀"}) == (
        'field "s" is invalid (maxLength: must have at most 2 characters)'
    )


def test_every_failing_keyword_is_listed_in_table_order():
    schema = field_schema("s", {"type": "string", "minLength": 5, "format": "email"})
    assert answer_text(schema, {"s": "a"}) == (
        'field "s" is invalid (minLength: must have at least 5 characters, '
        'format: must match format "email")'
    )


def test_a_wrong_type_skips_the_limits_of_the_right_type():
    schema = field_schema("s", {"type": "string", "minLength": 5, "format": "date"})
    assert answer_text(schema, {"s": ["x"]}) == 'field "s" is invalid (type: must be string)'


def test_too_many_items_and_each_stranger_are_reported():
    schema = field_schema(
        "tags",
        {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 2},
    )
    assert answer_text(schema, {"tags": ["x", "a", "y"]}) == (
        'field "tags" is invalid (maxItems: must have at most 2 items, '
        "items[0].enum: must be one of the allowed values, "
        "items[2].enum: must be one of the allowed values)"
    )


def test_a_titled_multi_select_wants_option_consts():
    schema = field_schema(
        "tags",
        {"type": "array", "items": {"anyOf": [{"const": "a", "title": "A"}]}},
    )
    assert answer_text(schema, {"tags": ["a"]}) == ""
    assert answer_text(schema, {"tags": ["A"]}) == (
        'field "tags" is invalid (items[0].anyOf: must equal some option\'s const)'
    )
    assert answer_text(schema, {"tags": "a"}) == 'field "tags" is invalid (type: must be array)'


def test_a_titled_single_select_wants_exactly_one_const():
    schema = field_schema("c", {"type": "string", "oneOf": [{"const": "a", "title": "A"}]})
    assert answer_text(schema, {"c": "a"}) == ""
    assert answer_text(schema, {"c": "A"}) == (
        'field "c" is invalid (oneOf: must equal exactly one option\'s const)'
    )


def test_enum_names_default_title_and_description_never_affect_validation():
    schema = field_schema(
        "s",
        {
            "type": "string",
            "enum": ["a"],
            "enumNames": ["Never"],
            "default": "zzz",
            "title": "T",
            "description": "D",
        },
    )
    assert answer_text(schema, {"s": "a"}) == ""
    assert answer_text(schema, {"s": "zzz"}) == (
        'field "s" is invalid (enum: must be one of the allowed values)'
    )


def test_fields_come_in_canonical_order_then_undeclared_keys_in_canonical_order():
    schema = {
        "type": "object",
        "properties": {
            "\uff01": {"type": "boolean"},
            "\U0001f600": {"type": "boolean"},
            "B": {"type": "boolean"},
            "a": {"type": "boolean"},
        },
        "required": ["a"],
    }
    content = {"\uff01": 1.0, "\U0001f600": 1.0, "B": 1.0, "zz": 1.0, "\uff02": 1.0, "Z": 1.0}
    fields = [issue.field for issue in check_answer(admit_schema(schema), content)]
    assert fields == ["B", "a", "\U0001f600", "\uff01", "Z", "zz", "\uff02"]


def test_an_answer_invalid_error_reads_its_clauses():
    issues = check_answer(admit_schema(SLOT_SCHEMA), {"slot": "sun", "x": True})
    error = CollectiveError("col_x", AnswerInvalid(fields=issues))
    assert error.message == (
        'reply failed: field "slot" is invalid (enum: must be one of the allowed values); '
        'field "x" is not in the form'
    )


def test_a_value_that_is_not_an_answer_value_fails_every_type_and_option_check():
    assert answer_text(SLOT_SCHEMA, {"slot": {"day": "mon"}}) == (
        'field "slot" is invalid (type: must be string, enum: must be one of the allowed values)'
    )
    number = field_schema("n", {"type": "number", "maximum": 1})
    assert answer_text(number, {"n": math.nan}) == 'field "n" is invalid (type: must be number)'


def test_the_checker_tolerates_a_schema_that_was_never_admitted():
    assert check_answer({"properties": 5}, {"a": "x"}) == (
        AnswerFieldIssue(field="a", reason=AnswerFieldReason.UNEXPECTED),
    )
    assert check_answer({}, {}) == ()


# --- helpers ---------------------------------------------------------------------------


def test_canonical_key_order_compares_utf16_code_units():
    keys = ["\uff61", "\U0001f600", "a", "", "B", "\u00e9", "\ud800"]
    assert canonical_key_order(keys) == ["", "B", "a", "\u00e9", "\ud800", "\U0001f600", "\uff61"]
    assert canonical_text(dict.fromkeys(["\uff61", "\U0001f600"], 1.0)) == (
        '{"\U0001f600":1,"\uff61":1}'
    )


def test_answer_content_of_every_value_kind_is_normalized():
    content = validate_answer_content({"s": "x", "n": 3, "f": -0.0, "b": True, "a": ["p", "q"]})
    assert content == {"s": "x", "n": 3.0, "f": 0.0, "b": True, "a": ("p", "q")}
    assert isinstance(content["n"], float)


@pytest.mark.parametrize(
    "value",
    [
        {"x": None},
        {"x": {"day": "mon"}},
        {"x": [1]},
        {"x": math.nan},
        {"x": math.inf},
        {"x": 10**400},
        {"x": "\ud800"},
        {"\udfff": "x"},
        {1: "x"},
        ["x"],
        "x",
        None,
    ],
)
def test_anything_else_is_not_answer_content(value):
    assert validate_answer_content(value) is None


def test_an_empty_object_is_answer_content():
    assert validate_answer_content({}) == {}


def test_answer_values_never_treat_booleans_as_numbers():
    assert answer_value(True) is True
    assert answer_value(1) == 1.0
    assert answer_value(("a",)) == ("a",)
    assert answer_value(b"a") is None

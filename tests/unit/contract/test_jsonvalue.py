from __future__ import annotations

import contextlib
import enum
import json
import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

import pytest
from harness_contract.jsonvalue import (
    PARSE_MAX_DEPTH,
    JsonValue,
    JsonValueError,
    canonical_json,
    depth,
    is_well_formed_text,
    load_untrusted_json,
    nests_deeper_than,
    normalize_json,
    parse_canonical_json,
    parse_json,
    reference_canonical_json,
)
from hypothesis import given, settings
from hypothesis import strategies as st


class _Reason(enum.StrEnum):
    LATE = "late"


class _Pair(NamedTuple):
    name: str
    score: float


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, b"1"),
        (1e20, b"100000000000000000000"),
        (1e21, b"1e+21"),
        (5e-7, b"5e-7"),
        (0.1 + 0.2, b"0.30000000000000004"),
        (float(2**53), b"9007199254740992"),
        (2**53 + 1, b"9007199254740992"),  # an int past 2**53 is its binary64 float
        (-0.0, b"0"),
        (True, b"true"),
        (False, b"false"),
        (None, b"null"),
        ("\u007f\u2028/", '"\u007f\u2028/"'.encode()),
        ("\b\t\n\f\r\x00\x1f", b'"\\b\\t\\n\\f\\r\\u0000\\u001f"'),
        ('"\\', b'"\\"\\\\"'),
    ],
)
def test_canonical_json_writes_the_jcs_pitfalls_as_rfc_8785_does(value, expected):
    assert canonical_json(normalize_json(value)) == expected


def test_keys_sort_by_utf16_code_units_not_code_points():
    value = {"\ufb33": 1, "\U0001f600": 2}
    assert canonical_json(normalize_json(value)) == '{"\U0001f600":2,"\ufb33":1}'.encode()
    assert sorted(value) == ["\ufb33", "\U0001f600"]  # Python's code-point order differs


def test_a_boolean_never_becomes_a_number():
    assert normalize_json(True) is True
    assert normalize_json([True, 1]) == (True, 1.0)
    assert canonical_json(normalize_json({"a": True, "b": 1})) == b'{"a":true,"b":1}'


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 10**400])
def test_non_finite_numbers_are_refused(value):
    with pytest.raises(JsonValueError):
        normalize_json(value)


@pytest.mark.parametrize("value", ["\ud800", {"\udfff": 1}, ["ok", "\ud83d"]])
def test_lone_surrogates_are_refused(value):
    with pytest.raises(JsonValueError):
        normalize_json(value)


def test_other_python_types_and_non_string_keys_are_refused():
    for value in [object(), {1: "a"}, b"bytes", {1.5}]:
        with pytest.raises(JsonValueError):
            normalize_json(value)


def _reference_normalize(value: object, budget: int = PARSE_MAX_DEPTH, path: str = "") -> object:
    # normalize_json as it was before its concrete-type shortcuts, for the property below.
    at = f"{path}: " if path else ""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        number = float(value) if not isinstance(value, int) or abs(value) < 2**1023 else math.inf
        if not math.isfinite(number):
            raise JsonValueError(f"{at}numbers must be finite")
        return number + 0.0
    if isinstance(value, str):
        if not is_well_formed_text(value):
            raise JsonValueError(f"{at}text must be well-formed Unicode")
        return value
    if budget <= 0:
        raise JsonValueError(f"{at}nesting is too deep")
    if isinstance(value, list | tuple):
        return tuple(
            _reference_normalize(item, budget - 1, f"{path}[{index}]")
            for index, item in enumerate(value)
        )
    if isinstance(value, Mapping):
        result = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise JsonValueError(f"{at}object keys must be strings")
            if not is_well_formed_text(key):
                raise JsonValueError(f"{at}object keys must be well-formed Unicode")
            result[key] = _reference_normalize(item, budget - 1, f"{path}.{key}" if path else key)
        return result
    raise JsonValueError(f"{at}{type(value).__name__} is not a JSON value")


_any_text = st.text(st.characters(codec="utf-8"), max_size=6) | st.sampled_from(
    ["\ud800", "a\udfffb", "\u00e9\ud83d", "\U0001f600"]  # lone surrogates, and a pair
)
_anything = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | _any_text
    | st.sampled_from([b"bytes", _Reason.LATE, object]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(
            _any_text | st.integers(0, 2) | st.just(_Reason.LATE), children, max_size=3
        )
        | st.dictionaries(_any_text, children, max_size=3).map(MappingProxyType)
    ),
    max_leaves=20,
)


def _normalized(normalize: Callable[[object, int], object], value: object, limit: int) -> object:
    try:
        return ("value", normalize(value, limit))
    except JsonValueError as error:
        return ("refused", error.detail)


@settings(max_examples=1000)
@given(value=_anything, limit=st.integers(0, 4))
def test_normalize_json_returns_and_refuses_exactly_as_the_reference(value: object, limit: int):
    expected = _normalized(_reference_normalize, value, limit)
    actual = _normalized(lambda v, d: normalize_json(v, max_depth=d), value, limit)
    assert actual == expected


def test_depth_counts_scalars_as_zero_and_empty_containers_as_one():
    assert depth(normalize_json(3)) == 0
    assert depth(normalize_json([])) == 1
    assert depth(normalize_json({})) == 1
    assert depth(normalize_json([[1], {"a": [[]]}])) == 4


def test_parse_json_refuses_duplicate_keys_bom_and_constants():
    assert parse_json('{"a": 1}') == {"a": 1.0}
    for text in ['{"a":1,"a":2}', "\ufeff{}", "NaN", "[Infinity]", "-Infinity", "{", "1e400"]:
        with pytest.raises(JsonValueError):
            parse_json(text)


def test_untrusted_json_can_keep_the_last_duplicate_key():
    assert load_untrusted_json('{"a":1,"a":2}', duplicate_keys="last") == {"a": 2.0}


def test_hostile_nesting_is_refused_without_recursing():
    with pytest.raises(JsonValueError):
        parse_json("[" * 100_000 + "]" * 100_000)


def test_protocol_bytes_must_be_exactly_canonical():
    assert parse_canonical_json(b'{"a":1,"b":[true]}') == {"a": 1.0, "b": (True,)}
    for data in [b'{"b":1,"a":2}', b'{"a": 1}', b'{"a":1.0}', b"\xef\xbb\xbf{}", b"\xff"]:
        with pytest.raises(JsonValueError):
            parse_canonical_json(data)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8"), max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=1000)
@given(value=json_values)
def test_the_fast_encoder_is_byte_identical_to_the_rfc8785_reference(value):
    assert canonical_json(value) == reference_canonical_json(value)


def test_the_fast_encoder_agrees_on_the_pitfalls_it_handles_itself():
    values: list[JsonValue] = [
        {"b": 1, "a": [True, None, 'x\u2028\x7f/"\\\x01']},
        {"n": 2**53 - 1, "m": -(2**53 - 1), "z": -0.0},
        [1.0, 0.0, 100.0],
        # Containers come back uncopied unless something inside changes: at every depth.
        (("a", ("b", {"c": (None, 2.0)})), {"d": {"e": ["f", -0.0]}}),
        # Not the concrete types: a mapping view, a str subclass, a tuple subclass.
        MappingProxyType({"b": _Reason.LATE, "a": _Pair("x", 1.0)}),
    ]
    for value in values:
        assert canonical_json(value) == reference_canonical_json(value)
    assert canonical_json(_Reason.LATE) == b'"late"'


def test_the_fast_encoder_escapes_every_code_point_as_the_reference_does():
    # orjson writes strings; JCS escapes per character, so chunks cover every code point.
    code_points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(code_points), 4096):
        text = "".join(map(chr, code_points[start : start + 4096]))
        assert canonical_json(text) == reference_canonical_json(text)
    keys = {chr(c): None for c in range(0x80)} | {"\ufb33": True, "\U0001f600": False}
    assert canonical_json(keys) == reference_canonical_json(keys)


@pytest.mark.parametrize(
    "value",
    [
        {"z": "\ue000", "a": "\U0001f600"},  # high characters in values: order is by key
        {"\ue000": 1, "\U00010000": 2, "a": 3},  # the one place code point order differs
        [2**53 - 1, -(2**53 - 1), 2**53, 2.0**53 + 2, 0.5, 1e21, 1e-7],  # the integer edge
    ],
)
def test_the_fast_encoder_agrees_with_the_reference_at_its_boundaries(value: JsonValue):
    assert canonical_json(value) == reference_canonical_json(value)


def _reference_parse_canonical_json(data: bytes) -> JsonValue:
    # parse_canonical_json as it was before orjson: the exact parser, then the reference.
    value = parse_json(data)
    if reference_canonical_json(value) != data:
        raise JsonValueError("JSON bytes are not canonical (RFC 8785)")
    return value


def _outcome(parse: Callable[[bytes], JsonValue], data: bytes) -> object:
    try:
        return ("value", parse(data))
    except JsonValueError as error:
        return ("refused", error.detail)


@st.composite
def _spellings(draw: st.DrawFn) -> bytes:
    """Canonical bytes, other spellings of the same value, and canonical bytes with one
    byte changed, inserted or deleted."""
    value = draw(json_values)
    data = reference_canonical_json(normalize_json(value))
    how = draw(st.sampled_from(["canonical", "spaced", "ascii", "unsorted", "mutated"]))
    if how == "spaced":
        return json.dumps(value, sort_keys=True, ensure_ascii=False).encode()
    if how == "ascii":
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    if how == "unsorted":
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    if how == "mutated":
        at = draw(st.integers(0, len(data)))
        byte = bytes([draw(st.sampled_from(b' "\\,:[]{}01-.e\x00\x7f\xc3\xef\xff'))])
        edit = draw(st.sampled_from(["replace", "insert", "delete"]))
        if edit == "insert":
            return data[:at] + byte + data[at:]
        return data[:at] + (byte if edit == "replace" else b"") + data[at + 1 :]
    return data


@settings(max_examples=1500)
@given(data=_spellings())
def test_parse_canonical_json_accepts_and_refuses_exactly_as_the_reference(data: bytes):
    # The orjson path may only ever say what the exact path says, refusals word for word.
    assert _outcome(parse_canonical_json, data) == _outcome(_reference_parse_canonical_json, data)


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":"x","a":"x"}',  # a duplicate orjson keeps silently
        b'{"a":"\\ud800"}',  # a lone surrogate escaped
        b'"\\u0041"',  # an escape JCS never writes
        b"[-0]",
        b"[1.0]",
        b"[1e400]",
        b"[" * 65 + b"]" * 65,  # past PARSE_MAX_DEPTH
        b"[" * 64 + b"]" * 64,
        b'{"\xef\xac\xb3":true,"\xf0\x9f\x98\x80":false}',  # code point order, not JCS
        b'{"\xf0\x9f\x98\x80":false,"\xef\xac\xb3":true}',
        b"[9007199254740993]",
        b"123456789012345678901234567890",
    ],
)
def test_parse_canonical_json_matches_the_reference_at_the_fast_paths_edges(data: bytes):
    assert _outcome(parse_canonical_json, data) == _outcome(_reference_parse_canonical_json, data)


# --- Nesting counts structure, never characters inside strings (issue: a text of 60 `[`
# characters once made every stored record of its conversation unreadable) -------------

_TRICKY = st.sampled_from(['"', "\\", "[", "]", "{", "}", '\\"', "\\\\", "a", ",", ":", " "])
"""Characters and escapes that confuse a bracket counter."""

_tricky_text = st.lists(_TRICKY, max_size=40).map("".join)
_nested_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | _tricky_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(_tricky_text, children, max_size=3)
    ),
    max_leaves=25,
)


def _reference_depth(value: object) -> int:
    # The depth as the reference parser (json.loads) built it, counted on the result.
    if isinstance(value, list):
        return 1 + max((_reference_depth(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_reference_depth(item) for item in value.values()), default=0)
    return 0


@settings(max_examples=300)
@given(value=json_values)
def test_depth_agrees_with_the_depth_of_what_a_reference_parser_builds(value: JsonValue):
    expected = _reference_depth(json.loads(json.dumps(value)))
    assert depth(value) == depth(normalize_json(value)) == expected


@settings(max_examples=1000)
@given(value=_nested_values, limit=st.integers(0, 8))
def test_the_nesting_check_agrees_with_a_reference_parser(value: object, limit: int):
    text = json.dumps(value)
    actual = _reference_depth(json.loads(text))
    assert nests_deeper_than(text, limit) == (actual > limit)
    if actual <= PARSE_MAX_DEPTH:
        assert load_untrusted_json(text) == json.loads(text, parse_int=float)


@settings(max_examples=500)
@given(prefix=_tricky_text, suffix=_tricky_text)
def test_the_nesting_check_never_lets_a_parser_recurse_past_it(prefix: str, suffix: str):
    # Garbage with deep brackets somewhere: whatever the check says, parsing is bounded.
    text = prefix + "[" * 200 + suffix
    with contextlib.suppress(JsonValueError):
        load_untrusted_json(text)


@pytest.mark.parametrize("count", [60, 10_000])
@pytest.mark.parametrize("bracket", ["[", "{", "]", '\\"['])
def test_brackets_inside_a_string_parse_at_any_count(count: int, bracket: str):
    text = json.dumps({"text": bracket * count, "list": ["[" * count]})
    assert load_untrusted_json(text) == json.loads(text)
    value = parse_json(text)
    assert parse_canonical_json(canonical_json(value)) == value

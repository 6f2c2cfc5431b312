"""Bad input: the core returns a value or a typed failure for anything, never crashes."""

from __future__ import annotations

import contextlib

from harness_contract.addresses import canonicalize, is_address_syntax
from harness_contract.content import check_content, content_from_json, content_to_json
from harness_contract.errors import SendError
from harness_contract.jsonvalue import (
    JsonValueError,
    canonical_json,
    normalize_json,
    parse_canonical_json,
    parse_json,
)
from harness_contract.values import DataPart, TextPart
from hypothesis import given, settings
from hypothesis import strategies as st

any_text = st.text(st.characters(codec=None), max_size=200)
names = st.from_regex(r"[a-z0-9]{3,8}", fullmatch=True)
scalars = st.none() | st.booleans() | st.integers() | st.floats() | any_text
json_like = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4)
    ),
    max_leaves=40,
)


@settings(max_examples=300)
@given(
    address=any_text
    | st.builds(lambda xs: "group:" + ",".join(xs), st.lists(names | any_text, max_size=40))
)
def test_canonicalize_returns_a_conversation_or_a_send_error(address):
    try:
        conversation = canonicalize(address, "alice")
    except SendError:
        return
    assert is_address_syntax(conversation.address)
    assert "alice" in conversation.members
    assert 2 <= len(conversation.members) <= 32


@settings(max_examples=300)
@given(value=json_like)
def test_normalize_and_canonicalize_accept_or_raise_json_value_error(value):
    try:
        normalized = normalize_json(value)
    except JsonValueError:
        return
    data = canonical_json(normalized)
    assert parse_canonical_json(data) == normalized


@settings(max_examples=300)
@given(text=any_text | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_parse_json_returns_a_value_or_a_json_value_error(text):
    with contextlib.suppress(JsonValueError):
        parse_json(text)


@settings(max_examples=200)
@given(value=json_like)
def test_content_from_json_returns_content_or_content_invalid(value):
    try:
        content = content_from_json(value)
    except SendError as error:
        assert error.reason == "content-invalid"
        return
    assert content_from_json(content_to_json(content)) == content


@settings(max_examples=200)
@given(
    parts=st.lists(
        st.builds(TextPart, text=any_text) | st.builds(DataPart, value=json_like), max_size=5
    )
)
def test_check_content_returns_content_or_content_invalid(parts):
    try:
        check_content(parts)
    except SendError as error:
        assert error.reason == "content-invalid"


def test_huge_strings_and_deep_nesting_are_refused_cleanly():
    for value in ["x" * 40_000, "[" * 5000 + "]" * 5000]:
        with contextlib.suppress(SendError):
            check_content((TextPart(text=value),))
    deep: object = 1
    for _ in range(5000):
        deep = [deep]
    try:
        check_content((DataPart(value=deep),))  # type: ignore[arg-type]
    except SendError as error:
        assert error.reason == "content-invalid"
    else:
        raise AssertionError("a 5000-deep value must be refused")

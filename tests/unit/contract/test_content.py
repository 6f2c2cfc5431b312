from __future__ import annotations

import math

import pytest
from harness_contract.content import (
    CONTENT_MAX_BYTES,
    answer_content,
    check_content,
    close_content,
    collective_parts,
    content_from_json,
    content_to_json,
    multicast_content,
    request_content,
    text_of,
)
from harness_contract.errors import SendError, SendErrorReason
from harness_contract.jsonvalue import canonical_json
from harness_contract.values import CollectiveOp, DataPart, TextPart

MULTICAST_HI = (
    b'[{"text":"hi","type":"text"},{"type":"data","value":'
    b'{"harness/collective":{"kind":"operation","op":"multicast"}}}]'
)


def size_of(content) -> int:
    return len(canonical_json(content_to_json(content)))


def test_a_multicast_is_the_text_part_then_the_explicit_multicast_part():
    content = multicast_content("hi")
    assert canonical_json(content_to_json(content)) == MULTICAST_HI
    assert len(MULTICAST_HI) == 114


def test_both_multicast_spellings_certify_identical_content():
    # The send pipeline builds the same content whether `collective` is omitted or
    # {op: "multicast"}: there is one builder, and it takes only the text.
    assert multicast_content("hello") == multicast_content("hello")
    assert content_from_json(content_to_json(multicast_content("hello"))) == multicast_content(
        "hello"
    )


@pytest.mark.parametrize(
    ("char", "fits", "fails"),
    [("a", 32_656, 32_657), ("é", 16_328, 16_329), ("\x1f", 5_442, 5_443)],
)
def test_the_content_limit_is_measured_in_canonical_bytes(char, fits, fails):
    assert size_of(multicast_content(char * fits)) <= CONTENT_MAX_BYTES
    with pytest.raises(SendError) as raised:
        multicast_content(char * fails)
    assert raised.value.send_reason is SendErrorReason.CONTENT_INVALID


def test_content_of_exactly_32768_bytes_passes_and_32769_fails():
    # `[{"text":"<N>","type":"text"}]` is N + 27 bytes.
    exact = check_content((TextPart(text="a" * 32_741),))
    assert size_of(exact) == 32_768
    assert size_of(multicast_content("a" * 32_656)) == 32_768
    with pytest.raises(SendError) as raised:
        check_content((TextPart(text="a" * 32_742),))
    assert raised.value.detail == (
        "the message is 32,769 bytes as canonical JSON; the limit is 32,768 bytes"
    )


def nested(levels: int):
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def test_a_data_value_may_nest_sixteen_levels_but_not_seventeen():
    check_content((DataPart(value=nested(16)),))
    with pytest.raises(SendError):
        check_content((DataPart(value=nested(17)),))


@pytest.mark.parametrize("value", [math.nan, math.inf, "\ud800", {"k": -math.inf}])
def test_non_finite_numbers_and_lone_surrogates_are_invalid_content(value):
    with pytest.raises(SendError) as raised:
        check_content((DataPart(value=value),))
    assert raised.value.send_reason is SendErrorReason.CONTENT_INVALID


def test_empty_content_and_lone_surrogate_text_are_invalid():
    with pytest.raises(SendError):
        check_content(())
    with pytest.raises(SendError):
        check_content((TextPart(text="\udc00"),))


def test_negative_zero_is_stored_as_zero():
    (part,) = check_content((DataPart(value=-0.0),))
    assert isinstance(part, DataPart)
    assert math.copysign(1.0, part.value) == 1.0  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [
        "text",
        [{"type": "text"}],
        [{"type": "text", "text": "a", "extra": 1}],
        [{"type": "data"}],
        [{"type": "image", "url": "x"}],
        [],
        ["a"],
    ],
)
def test_content_from_json_refuses_anything_but_exact_parts(value):
    with pytest.raises(SendError):
        content_from_json(value)


def test_request_answer_and_close_content_keep_the_part_last_and_alone():
    request = request_content(
        question="Which day works for the review?",
        op=CollectiveOp.GATHER,
        id="col_" + "A" * 43,
        nonce="B" * 43,
        deadline_at=1_767_225_600_000,
        requested_schema={"type": "object", "properties": {}},
    )
    assert text_of(request) == "Which day works for the review?"
    assert [index for index, _ in collective_parts(request)] == [1]
    assert b'"deadlineAt":1767225600000' in canonical_json(content_to_json(request))
    accept = answer_content(id="col_x", content={"slot": "mon"})
    decline = answer_content(id="col_x", content=None)
    close = close_content(id="col_x", included=["rch_a", "rch_b"])
    for content in (accept, decline, close):
        assert len(content) == 1
        assert len(collective_parts(content)) == 1
    assert collective_parts(decline)[0][1] == {
        "kind": "response",
        "id": "col_x",
        "action": "decline",
    }


def test_a_data_part_is_collective_only_when_it_holds_the_key():
    content = check_content(
        (
            DataPart(value={"harness/collectivex": 1}),
            DataPart(value=["harness/collective"]),
            DataPart(value={"harness/collective": 5, "other": 1}),
        )
    )
    assert collective_parts(content) == [(2, 5.0)]

from __future__ import annotations

import contextlib

import pytest
from harness_contract.codec import (
    CodecError,
    error_from_json,
    error_to_json,
    item_from_json,
    item_to_json,
    local_guidance_from_json,
    local_guidance_to_json,
    send_input_from_json,
    send_input_to_json,
    send_result_from_json,
    send_result_to_json,
)
from harness_contract.content import multicast_content
from harness_contract.errors import (
    AnswerFieldIssue,
    AnswerFieldReason,
    AnswerInvalid,
    CollectiveError,
    FirewallRefusal,
    FirewallSendError,
    HarnessError,
    MembersUnreachable,
    RequestExpired,
    SchemaInvalid,
    SendError,
    SendErrorReason,
    UnreachableMember,
)
from harness_contract.guidance import (
    CheckedGuidance,
    CollectiveGuidance,
    Expectation,
    ExpectationInstruction,
    GuidanceSubject,
    MemberGuidance,
    Uncertain,
    UncertainInstruction,
    Withheld,
)
from harness_contract.jsonvalue import JsonValue, canonical_json
from harness_contract.values import (
    Accept,
    Answered,
    AskOperation,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    Decline,
    Declined,
    DirectMessage,
    GroupMessage,
    InboundItem,
    Invalid,
    MemberResult,
    MessageInput,
    MulticastItem,
    MulticastOperation,
    NoAnswer,
    OperationFailedItem,
    ResponseInput,
    SendInput,
    SendResult,
)
from hypothesis import given, settings
from hypothesis import strategies as st

SCHEMA: dict[str, JsonValue] = {
    "type": "object",
    "properties": {"slot": {"type": "string", "enum": ("mon", "tue")}},
}
GUIDANCE = CheckedGuidance(
    check_id="chk_AAAAAAAAAAAAAAAAAAAAAA",
    subjects=(GuidanceSubject(id="out", sender="agent:a", recipients=("agent:b",), text="hi"),),
    instructions=(
        ExpectationInstruction(
            middleware_id="m",
            rule_id="r",
            expectation=Expectation.PERMITTED,
            subjects=("out",),
            instruction="you may answer",
        ),
        UncertainInstruction(
            middleware_id="c",
            rule_id="k",
            uncertain=Uncertain(choice="injection", probability=0.25),
            instruction="looks odd",
        ),
    ),
)

INPUTS: list[SendInput] = [
    MessageInput(to="agent:bob", text="hi"),
    MessageInput(to="agent:bob", text="hi", collective=MulticastOperation()),
    MessageInput(
        to="group:a,b,c",
        text="Which day?",
        collective=AskOperation(op=CollectiveOp.GATHER, deadline=60, requested_schema=SCHEMA),
    ),
    ResponseInput(
        to="agent:alice", response=Accept(content={"slot": "mon", "n": 2.0, "t": ("a",)})
    ),
    ResponseInput(to="agent:alice", response=Decline()),
]


@pytest.mark.parametrize("send_input", INPUTS)
def test_send_inputs_round_trip_through_their_contract_shape(send_input):
    assert send_input_from_json(send_input_to_json(send_input)) == send_input


def test_an_omitted_collective_and_an_explicit_multicast_bind_different_bytes():
    omitted, explicit = INPUTS[0], INPUTS[1]
    assert canonical_json(send_input_to_json(omitted)) != canonical_json(
        send_input_to_json(explicit)
    )


ITEMS: list[InboundItem] = [
    MulticastItem(
        message=DirectMessage(
            post_id="pst_x", address="agent:a", sender="agent:a", content=multicast_content("x")
        )
    ),
    MulticastItem(
        message=GroupMessage(
            post_id="pst_y",
            address="group:a,b,c",
            sender="agent:a",
            members=("agent:a", "agent:b", "agent:c"),
            content=multicast_content("y"),
        )
    ),
    CollectiveRequestItem(
        op=CollectiveOp.ALL_GATHER,
        id="col_x",
        post_id="pst_z",
        sender="agent:a",
        to="group:a,b,c",
        question="Which day?",
        requested_schema=SCHEMA,
        deadline_at=1_767_225_600_000,
    ),
    CollectiveResultItem(
        op=CollectiveOp.GATHER,
        id="col_x",
        to="group:a,b,c",
        question=Withheld(check_id="chk_x", reason=FirewallRefusal.CONTENT_BLOCKED),
        outcomes=(
            MemberResult(member="agent:b", outcome=Answered(content={"slot": "tue"})),
            MemberResult(member="agent:c", outcome=Declined()),
            MemberResult(member="agent:d", outcome=Invalid(reason='field "x" is missing')),
            MemberResult(member="agent:e", outcome=NoAnswer()),
            MemberResult(
                member="agent:f",
                outcome=Withheld(check_id="chk_y", reason=FirewallRefusal.CONTENT_BLOCKED),
            ),
        ),
    ),
    OperationFailedItem(id="col_x", to="group:a,b,c", error="all_gather failed: ..."),
]


@pytest.mark.parametrize("item", ITEMS)
def test_items_round_trip_and_use_the_contract_keys(item):
    value = item_to_json(item)
    assert item_from_json(value) == item
    assert "kind" in value


def test_a_collective_request_writes_its_requester_as_from():
    value = item_to_json(ITEMS[2])
    assert value["from"] == "agent:a"
    assert canonical_json(value).count(b'"deadlineAt":1767225600000') == 1


def test_guidance_and_results_round_trip():
    assert local_guidance_from_json(local_guidance_to_json(GUIDANCE)) == GUIDANCE
    collective = CollectiveGuidance(
        question=GUIDANCE, answers=(MemberGuidance(member="agent:b", guidance=GUIDANCE),)
    )
    assert local_guidance_from_json(local_guidance_to_json(collective)) == collective
    result = SendResult(operation_id="col_x", guidance=GUIDANCE)
    assert send_result_from_json(send_result_to_json(result)) == result
    assert send_result_to_json(SendResult()) == {}


ERRORS: list[HarnessError] = [
    SendError(SendErrorReason.DELIVERY_PENDING),
    SendError(SendErrorReason.UNKNOWN_AGENT, "agent:x is not registered with the gateway"),
    CollectiveError("col_x", RequestExpired()),
    CollectiveError("col_x", SchemaInvalid(detail='type: expected "object"')),
    CollectiveError(
        "col_x",
        MembersUnreachable(
            members=(
                UnreachableMember(member="agent:b", reason=SendErrorReason.UNKNOWN_AGENT),
                UnreachableMember(
                    member="agent:c", reason=SendErrorReason.NETWORK_UNAVAILABLE, detail="down"
                ),
            )
        ),
    ),
    CollectiveError(
        "col_x",
        AnswerInvalid(
            fields=(
                AnswerFieldIssue(field="a", reason=AnswerFieldReason.INVALID, detail="type: x"),
            )
        ),
    ),
]


@pytest.mark.parametrize("error", ERRORS)
def test_send_side_errors_round_trip_with_every_typed_field(error):
    assert error_from_json(error_to_json(error)) == error


def test_a_firewall_error_round_trips():
    error = FirewallSendError(
        check_id="chk_x",
        refusal=FirewallRefusal.FORBIDDEN_RECIPIENT,
        middleware_id="m",
        rule_id="r",
        instruction="not to that tenant",
        guidance=GUIDANCE,
    )
    decoded = error_from_json(error_to_json(error))
    assert isinstance(decoded, FirewallSendError)
    assert decoded.message == error.message
    assert decoded.guidance == GUIDANCE


json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["kind", "to", "text", "id", "op", "message", "outcomes", "x"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=300)
@given(value=json_values)
def test_decoders_return_a_value_or_a_codec_error(value):
    for decode in (item_from_json, send_input_from_json, local_guidance_from_json, error_from_json):
        with contextlib.suppress(CodecError):
            decode(value)

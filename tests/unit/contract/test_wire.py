from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from google.protobuf import struct_pb2
from harness_contract import wire
from harness_contract._gen.harness.v1 import (
    endpoint_pb2,
    errors_pb2,
    guidance_pb2,
    management_pb2,
    types_pb2,
)
from harness_contract.errors import (
    ConnectErrorReason,
    DeliveryAcknowledgeErrorReason,
    FirewallRefusal,
    HarnessError,
    InvalidRequestError,
    ListenErrorReason,
    MessageTextOperation,
    SendError,
    SendErrorReason,
)
from harness_contract.guidance import Expectation
from harness_contract.jsonvalue import JsonValue, normalize_json
from harness_contract.management import ClusterReplica, ClusterStatus
from harness_contract.values import (
    CollectiveOp,
    FailureDelivery,
    MessageInput,
    MulticastOperation,
    SendResult,
    TextPart,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.endpoint.api import (
    AgentStatus,
    ConversationRecord,
    ConversationSummary,
    GatewayStatus,
    RegisteredAgent,
    SendAbsent,
    SendIndeterminate,
    SendPending,
    SendReturned,
)
from gateway.endpoint.inbox import AcknowledgeResult
from tests.unit.rpc.samples import (
    CHECKED,
    CLOSED_ERRORS,
    COLLECTIVE_ERRORS,
    COLLECTIVE_GUIDANCE,
    DELIVERIES,
    FIREWALL_ERROR,
    ITEMS,
    SEND_INPUTS,
    SEND_RESULTS,
)


def through_the_wire(message: Any) -> Any:
    """Serialize and parse again, as the message would travel."""
    return type(message).FromString(message.SerializeToString())


# --- round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("send_input", SEND_INPUTS)
def test_every_send_input_shape_round_trips(send_input):
    proto = through_the_wire(wire.send_input_to_proto(send_input))
    assert wire.send_input_from_proto(proto) == send_input


def test_an_omitted_collective_stays_omitted_and_an_empty_one_is_a_multicast():
    omitted = types_pb2.SendInput(message=types_pb2.SendInput.Message(to="agent:bob", text="x"))
    assert wire.send_input_from_proto(omitted) == MessageInput(to="agent:bob", text="x")
    empty = types_pb2.SendInput()
    empty.message.to = "agent:bob"
    empty.message.text = "x"
    empty.message.collective.SetInParent()
    assert wire.send_input_from_proto(through_the_wire(empty)) == MessageInput(
        to="agent:bob", text="x", collective=MulticastOperation()
    )


def test_an_explicit_multicast_and_an_omitted_collective_stay_different_on_the_wire():
    plain, explicit = SEND_INPUTS[0], SEND_INPUTS[1]
    assert wire.send_input_to_proto(plain) != wire.send_input_to_proto(explicit)


def test_answer_numbers_read_as_floats_and_string_lists_as_tuples():
    content = types_pb2.AnswerContent()
    content.fields["n"].number_value = 3
    content.fields["names"].string_list_value.values.extend(["a", "b"])
    content.fields["zero"].number_value = -0.0
    decoded = wire.answer_content_from_proto(content)
    assert decoded == {"n": 3.0, "names": ("a", "b"), "zero": 0.0}
    assert isinstance(decoded["n"], float)
    assert math.copysign(1.0, decoded["zero"]) == 1.0  # type: ignore[arg-type]


@pytest.mark.parametrize("result", SEND_RESULTS)
def test_every_send_result_round_trips(result):
    proto = through_the_wire(wire.send_result_to_proto(result))
    assert wire.send_result_from_proto(proto) == result


@pytest.mark.parametrize("item", ITEMS)
def test_every_inbound_item_kind_round_trips(item):
    proto = through_the_wire(wire.item_to_proto(item))
    assert wire.item_from_proto(proto) == item


def test_a_collective_request_carries_its_requester_as_sender_on_the_wire():
    proto = wire.item_to_proto(ITEMS[2])
    assert proto.collective_request.sender == "agent:alice"


@pytest.mark.parametrize("delivery", DELIVERIES)
def test_every_delivery_round_trips_with_either_guidance_form(delivery):
    proto = through_the_wire(wire.delivery_to_proto(delivery))
    assert wire.delivery_from_proto(proto) == delivery


@pytest.mark.parametrize("guidance", [CHECKED, COLLECTIVE_GUIDANCE])
def test_local_guidance_round_trips(guidance):
    proto = through_the_wire(wire.local_guidance_to_proto(guidance))
    assert wire.local_guidance_from_proto(proto) == guidance


@pytest.mark.parametrize(
    "error", CLOSED_ERRORS, ids=lambda error: f"{type(error).__name__}-{error.reason}"
)
def test_every_closed_error_round_trips_through_its_protobuf_message(error):
    proto = wire.error_to_proto(error)
    assert proto is not None
    decoded = wire.error_from_proto(through_the_wire(proto))
    assert type(decoded) is type(error)
    assert decoded.reason == error.reason
    assert decoded.message == error.message


@pytest.mark.parametrize(
    "error", [*COLLECTIVE_ERRORS, SendError(SendErrorReason.CONTENT_INVALID, "x")]
)
def test_send_and_collective_errors_decode_equal(error):
    proto = through_the_wire(wire.send_failure_to_proto(error))
    assert wire.send_failure_from_proto(proto) == error


def test_a_firewall_error_recovers_its_instruction_from_the_refusing_rule():
    decoded = wire.send_failure_from_proto(wire.send_failure_to_proto(FIREWALL_ERROR))
    assert decoded.message == FIREWALL_ERROR.message
    assert decoded.guidance == CHECKED  # type: ignore[union-attr]


def test_only_send_failures_can_be_a_kept_send_outcome():
    with pytest.raises(ValueError, match="not a send failure"):
        wire.send_failure_to_proto(CLOSED_ERRORS[-1])


@pytest.mark.parametrize(
    "state",
    [
        SendAbsent(),
        SendPending(input=SEND_INPUTS[2]),
        SendIndeterminate(input=SEND_INPUTS[4]),
        SendReturned(input=SEND_INPUTS[0], outcome=SendResult(guidance=CHECKED)),
        SendReturned(input=SEND_INPUTS[3], outcome=COLLECTIVE_ERRORS[0]),
    ],
)
def test_every_send_state_round_trips(state):
    proto = through_the_wire(wire.send_state_to_proto(state))
    assert wire.send_state_from_proto(proto) == state


@pytest.mark.parametrize("error", [None, *DeliveryAcknowledgeErrorReason])
def test_acknowledge_results_round_trip(error):
    result = AcknowledgeResult(token="dlv_x", error=error)
    proto = through_the_wire(wire.acknowledge_result_to_proto(result))
    assert wire.acknowledge_result_from_proto("dlv_x", proto) == result


def test_management_values_round_trip():
    registered = RegisteredAgent(address="agent:bob", agent_id="agt_x", token="hat_y")
    assert (
        wire.registered_agent_from_proto(wire.registered_agent_to_proto(registered)) == registered
    )
    status = AgentStatus(
        name="bob",
        address="agent:bob",
        agent_id="agt_x",
        public_key="k",
        issued_at="2026-01-01T00:00:00Z",
        hosted=True,
        stream_attached=True,
        backlog=3,
        oldest_unacked_age_seconds=1.5,
    )
    proto_status = wire.agent_status_to_proto(status)
    assert proto_status.name == "bob"
    assert wire.agent_status_from_proto(proto_status) == status
    for summary in (
        ConversationSummary(
            address="agent:bob",
            kind="direct",
            members=("agent:a", "agent:bob"),
            head_record_hash="rch_x",
            depth=4,
        ),
        ConversationSummary(
            address="group:a,b,c",
            kind="group",
            members=("agent:a", "agent:b", "agent:c"),
            head_record_hash=None,
            depth=0,
        ),
    ):
        assert wire.conversation_from_proto(wire.conversation_to_proto(summary)) == summary
    record = ConversationRecord(
        record_hash="rch_x",
        post_id="pst_x",
        author="agent:bob",
        depth=2,
        content=(TextPart(text="hi"),),
        certified_record=b'{"a":1}',
    )
    assert wire.conversation_record_from_proto(wire.conversation_record_to_proto(record)) == record
    gateway = GatewayStatus(
        version="0.1.0", mode="embedded", hosted_agents=2, router_state="active"
    )
    assert wire.gateway_status_from_proto(wire.gateway_status_to_proto(gateway)) == gateway
    clustered = replace(
        gateway,
        mode="cluster",
        cluster=ClusterStatus(
            replica_id="r1",
            incarnation=2**40,
            state="withdrawn",
            lease_remaining_seconds=-0.5,
            claiming=False,
            partitions=1024,
            owned_partitions=0,
            unowned_partitions=3,
            replicas=(
                ClusterReplica(
                    replica_id="r2",
                    incarnation=5,
                    address="10.0.0.2:7770",
                    serving=True,
                    live=True,
                    fenced=False,
                    beat_age_seconds=0.25,
                    partitions=1021,
                ),
            ),
        ),
    )
    assert wire.gateway_status_from_proto(wire.gateway_status_to_proto(clustered)) == clustered
    assert not wire.gateway_status_to_proto(gateway).HasField("cluster")


def test_failure_delivery_unset_is_result():
    assert (
        wire.failure_delivery_from_proto(types_pb2.FAILURE_DELIVERY_UNSPECIFIED)
        is FailureDelivery.RESULT
    )
    for delivery in FailureDelivery:
        assert (
            wire.failure_delivery_from_proto(wire.failure_delivery_to_proto(delivery)) is delivery
        )


@pytest.mark.parametrize(
    ("ours", "proto_enum", "prefix"),
    [
        (SendErrorReason, errors_pb2.SendErrorReason, "SEND_ERROR_REASON_"),
        (ListenErrorReason, errors_pb2.ListenErrorReason, "LISTEN_ERROR_REASON_"),
        (
            DeliveryAcknowledgeErrorReason,
            errors_pb2.DeliveryAcknowledgeErrorReason,
            "DELIVERY_ACKNOWLEDGE_ERROR_REASON_",
        ),
        (ConnectErrorReason, errors_pb2.ConnectErrorReason, "CONNECT_ERROR_REASON_"),
        (MessageTextOperation, errors_pb2.MessageTextOperation, "MESSAGE_TEXT_OPERATION_"),
        (FirewallRefusal, guidance_pb2.FirewallRefusal, "FIREWALL_REFUSAL_"),
        (Expectation, guidance_pb2.Expectation, "EXPECTATION_"),
        (CollectiveOp, types_pb2.CollectiveOp, "COLLECTIVE_OP_"),
        (FailureDelivery, types_pb2.FailureDelivery, "FAILURE_DELIVERY_"),
    ],
)
def test_each_closed_enum_matches_its_protobuf_enum_member_for_member(ours, proto_enum, prefix):
    names = proto_enum.keys()
    proto_names = {name.removeprefix(prefix) for name in names} - {"UNSPECIFIED"}
    assert proto_names == {member.name for member in ours}


# --- garbage in, typed failures out ------------------------------------------------------


def test_a_send_input_with_neither_shape_is_an_invalid_request():
    with pytest.raises(InvalidRequestError, match="input"):
        wire.send_input_from_proto(types_pb2.SendInput())


def test_an_answer_without_a_response_or_action_is_an_invalid_request():
    no_response = types_pb2.SendInput()
    no_response.answer.to = "agent:alice"
    with pytest.raises(InvalidRequestError):
        wire.send_input_from_proto(no_response)
    no_action = types_pb2.SendInput()
    no_action.answer.to = "agent:alice"
    no_action.answer.collective_response.SetInParent()
    with pytest.raises(InvalidRequestError, match="no action"):
        wire.send_input_from_proto(no_action)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_answer_number_is_an_invalid_request(bad):
    send_input = types_pb2.SendInput()
    send_input.answer.to = "agent:alice"
    send_input.answer.collective_response.accept.content.fields["n"].number_value = bad
    with pytest.raises(InvalidRequestError, match="finite"):
        wire.send_input_from_proto(send_input)


def test_an_answer_value_without_a_kind_is_an_invalid_request():
    send_input = types_pb2.SendInput()
    send_input.answer.to = "agent:alice"
    send_input.answer.collective_response.accept.content.fields["n"].SetInParent()
    with pytest.raises(InvalidRequestError, match="no kind"):
        wire.send_input_from_proto(send_input)


def test_a_nan_inside_a_requested_schema_is_an_invalid_request():
    send_input = types_pb2.SendInput()
    send_input.message.to = "agent:bob"
    send_input.message.collective.gather.deadline_seconds = 60
    send_input.message.collective.gather.requested_schema.fields["x"].number_value = math.nan
    with pytest.raises(InvalidRequestError, match=r"requested_schema\.x: numbers must be finite"):
        wire.send_input_from_proto(send_input)


def test_a_value_without_a_kind_is_an_invalid_request():
    with pytest.raises(InvalidRequestError, match="no kind"):
        wire.json_value_from_proto(struct_pb2.Value())


@pytest.mark.parametrize(
    "part",
    [
        types_pb2.ContentPart(),
        types_pb2.ContentPart(
            data=types_pb2.ContentPart.Data(value=struct_pb2.Value(number_value=math.nan))
        ),
        types_pb2.ContentPart(data=types_pb2.ContentPart.Data()),
    ],
    ids=["no-part", "nan", "no-value"],
)
def test_bad_content_is_send_error_content_invalid(part):
    content = types_pb2.Content(
        parts=[types_pb2.ContentPart(text=types_pb2.ContentPart.Text(text="ok")), part]
    )
    with pytest.raises(SendError) as raised:
        wire.content_from_proto(content)
    assert raised.value.send_reason is SendErrorReason.CONTENT_INVALID


@pytest.mark.parametrize(
    ("decode", "message"),
    [
        (wire.item_from_proto, types_pb2.InboundItem()),
        (
            wire.item_from_proto,
            types_pb2.InboundItem(collective_request=types_pb2.CollectiveRequestItem()),
        ),
        (
            wire.item_from_proto,
            types_pb2.InboundItem(
                collective_result=types_pb2.CollectiveResultItem(op=types_pb2.COLLECTIVE_OP_GATHER)
            ),
        ),
        (wire.item_from_proto, types_pb2.InboundItem(multicast=types_pb2.MulticastItem())),
        (wire.local_guidance_from_proto, guidance_pb2.LocalGuidance()),
        (
            wire.checked_guidance_from_proto,
            guidance_pb2.CheckedGuidance(instructions=[guidance_pb2.Instruction()]),
        ),
        (wire.member_outcome_from_proto, types_pb2.CollectiveMemberOutcome()),
        (wire.withheld_from_proto, guidance_pb2.Withheld()),
        (wire.collective_error_from_proto, errors_pb2.CollectiveError(id="col_x")),
        (wire.send_error_from_proto, errors_pb2.SendError()),
        (wire.send_failure_from_proto, errors_pb2.SendFailure()),
        (wire.send_state_from_proto, endpoint_pb2.ReadSendResponse()),
        (wire.gateway_status_from_proto, management_pb2.GetGatewayStatusResponse()),
        (
            wire.gateway_status_from_proto,
            management_pb2.GetGatewayStatusResponse(
                mode=management_pb2.GATEWAY_MODE_CLUSTER,
                router_state=management_pb2.ROUTER_ATTACHMENT_ACTIVE,
                cluster=management_pb2.ClusterStatus(replica_id="r1"),
            ),
        ),
        (wire.failure_delivery_from_proto, 7),
    ],
)
def test_unset_oneofs_and_unknown_enum_values_are_invalid_requests(decode, message):
    with pytest.raises(InvalidRequestError):
        decode(message)


def test_an_invalid_request_is_a_harness_error_with_its_own_reason():
    error = InvalidRequestError.of_field("input: neither a message nor an answer")
    assert isinstance(error, HarnessError)
    assert error.error_info_reason == "INVALID_REQUEST"
    assert error.message == "invalid request: input: neither a message nor an answer"


def test_encoding_refuses_a_non_finite_number():
    with pytest.raises(ValueError, match="finite"):
        wire.json_value_to_proto(math.nan)


# --- JsonValue <-> google.protobuf.Value --------------------------------------------------

keys = st.text(max_size=8)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300)
@given(value=json_values)
def test_any_json_value_survives_google_protobuf_value_as_its_normalized_form(value):
    expected: JsonValue = normalize_json(value)
    proto = through_the_wire(wire.json_value_to_proto(value))
    decoded = wire.json_value_from_proto(proto)
    assert decoded == expected
    assert _same_types(decoded, expected)


def _same_types(left: object, right: object) -> bool:
    if type(left) is not type(right):
        return False
    if isinstance(left, tuple) and isinstance(right, tuple):
        return all(_same_types(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict) and isinstance(right, dict):
        return all(_same_types(left[key], right[key]) for key in left)
    return True

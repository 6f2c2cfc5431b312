"""The client's values mirror the contract: decoded from the gateway's protobuf, their
`to_json()` is the gateway codec's JSON of the same value."""

from __future__ import annotations

from typing import Any, TypeVar

import pytest
from harness_client import CollectiveRequestItem, InboundDelivery, MulticastItem, TextPart
from harness_client import _convert as client_convert
from harness_contract._gen.harness.v1 import guidance_pb2, types_pb2
from harness_contract._gen.harness.v1 import types_pb2 as gateway_types
from harness_contract.codec import (
    item_to_json,
    local_guidance_to_json,
    send_input_to_json,
    send_result_to_json,
)

from gateway.rpc import convert
from tests.unit.rpc.samples import (
    CHECKED,
    COLLECTIVE_GUIDANCE,
    DELIVERIES,
    ITEMS,
    SEND_INPUTS,
    SEND_RESULTS,
)

T = TypeVar("T")


def to_client(message: Any, client_type: type[T]) -> T:
    """The gateway's protobuf message as the client's, through the wire bytes."""
    return client_type.FromString(message.SerializeToString())  # type: ignore[attr-defined, no-any-return]


def numbers_as_floats(value: Any) -> Any:
    """JSON with every number a float and every array a list, for comparison."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return {key: numbers_as_floats(item) for key, item in value.items()}
    return [numbers_as_floats(item) for item in value]


@pytest.mark.parametrize("item", ITEMS)
def test_a_decoded_item_prints_the_contract_json_of_the_gateway_item(item):
    decoded = client_convert.item_from_proto(
        to_client(convert.item_to_proto(item), types_pb2.InboundItem)
    )
    assert numbers_as_floats(decoded.to_json()) == numbers_as_floats(item_to_json(item))


@pytest.mark.parametrize("send_input", SEND_INPUTS)
def test_a_send_input_survives_the_client_and_prints_the_contract_json(send_input):
    decoded = client_convert.send_input_from_proto(
        to_client(convert.send_input_to_proto(send_input), types_pb2.SendInput)
    )
    assert numbers_as_floats(decoded.to_json()) == numbers_as_floats(send_input_to_json(send_input))
    # ...and the client's own encoding is what the gateway reads back.
    again = convert.send_input_from_proto(
        to_client(client_convert.send_input_to_proto(decoded), gateway_types.SendInput)
    )
    assert again == send_input


@pytest.mark.parametrize("result", SEND_RESULTS)
def test_a_send_result_prints_the_contract_json(result):
    decoded = client_convert.send_result_from_proto(
        to_client(convert.send_result_to_proto(result), types_pb2.SendResult)
    )
    assert numbers_as_floats(decoded.to_json()) == numbers_as_floats(send_result_to_json(result))


@pytest.mark.parametrize("guidance", [CHECKED, COLLECTIVE_GUIDANCE])
def test_guidance_prints_the_contract_json(guidance):
    decoded = client_convert.local_guidance_from_proto(
        to_client(convert.local_guidance_to_proto(guidance), guidance_pb2.LocalGuidance)
    )
    assert numbers_as_floats(decoded.to_json()) == numbers_as_floats(
        local_guidance_to_json(guidance)
    )


def test_a_delivery_prints_token_item_and_guidance_only_when_present():
    plain, guided = DELIVERIES[0], DELIVERIES[1]
    for delivery in (plain, guided):
        proto = to_client(convert.delivery_to_proto(delivery), types_pb2.InboundDelivery)
        client = InboundDelivery(
            token=proto.delivery_token,
            item=client_convert.item_from_proto(proto.item),
            guidance=client_convert.local_guidance_from_proto(proto.guidance)
            if proto.HasField("guidance")
            else None,
        )
        value = client.to_json()
        assert value["token"] == delivery.token
        assert ("guidance" in value) == (delivery.guidance is not None)


def test_the_requester_is_from_in_json_and_sender_in_python():
    decoded = client_convert.item_from_proto(
        to_client(convert.item_to_proto(ITEMS[2]), types_pb2.InboundItem)
    )
    assert isinstance(decoded, CollectiveRequestItem)
    assert decoded.sender == "agent:alice"
    assert decoded.to_json()["from"] == "agent:alice"


async def test_a_delivery_built_by_hand_cannot_be_acknowledged():
    delivery = InboundDelivery(
        token="dlv_x",
        item=MulticastItem(
            message=client_convert.item_from_proto(  # type: ignore[union-attr]
                to_client(convert.item_to_proto(ITEMS[0]), types_pb2.InboundItem)
            ).message
        ),
    )
    with pytest.raises(RuntimeError, match="not received"):
        await delivery.acknowledge()
    assert TextPart(text="x").to_json() == {"type": "text", "text": "x"}

"""The agent API end to end: a real grpc.aio server over the fake core, the real client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import harness_client
import pytest
from harness_client import (
    AuthenticationError,
    ConnectError,
    ConnectErrorReason,
    InvalidRequestError,
    ListenError,
    ListenErrorReason,
    MulticastItem,
    PermissionDeniedError,
    UnavailableError,
)
from harness_contract._gen.harness.v1 import endpoint_pb2, endpoint_pb2_grpc
from harness_contract.errors import (
    CollectiveError,
    RequestNone,
    SendError,
    SendErrorReason,
)
from harness_contract.values import FailureDelivery, MessageInput, SendResult

from gateway.endpoint.api import GatewayState
from gateway.endpoint.inbox import StreamEndReason
from tests.integration.rpc.conftest import Served, until
from tests.integration.rpc.fake_core import text_item
from tests.unit.rpc.samples import CHECKED, COLLECTIVE_ERRORS, FIREWALL_ERROR

BOUND = 10.0


@asynccontextmanager
async def raw_stub(
    served: Served,
) -> AsyncIterator[endpoint_pb2_grpc.HarnessEndpointServiceAsyncStub]:
    channel = grpc.aio.insecure_channel(served.address)
    try:
        yield endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
    finally:
        await channel.close()


async def raw_failure(call) -> harness_client.HarnessError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return harness_client.decode_status(raised.value)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def next_delivery(deliveries) -> harness_client.InboundDelivery:
    return await asyncio.wait_for(anext(deliveries), BOUND)


# --- authentication ----------------------------------------------------------------------


async def test_a_call_without_a_token_is_unauthenticated_missing(served):
    async with raw_stub(served) as stub:
        failure = await raw_failure(
            stub.ParseMessageText(endpoint_pb2.ParseMessageTextRequest(to="agent:bob", text="x"))
        )
    assert isinstance(failure, AuthenticationError)
    assert failure.reason == "missing"


@pytest.mark.parametrize("header", ["Basic abc", "Bearer", "Bearer a b", "bearer  x"])
async def test_a_call_with_a_malformed_authorization_is_unauthenticated_malformed(served, header):
    async with raw_stub(served) as stub:
        failure = await raw_failure(
            stub.ParseMessageText(
                endpoint_pb2.ParseMessageTextRequest(to="agent:bob", text="x"),
                metadata=(("authorization", header),),
            )
        )
    assert isinstance(failure, AuthenticationError)
    assert failure.reason == "malformed"


async def test_connecting_with_an_unknown_token_fails_authentication_failed_caused_by_the_refusal(
    served,
):
    with pytest.raises(ConnectError) as raised:
        await harness_client.connect(served.address, token="hat_unknown")
    assert raised.value.reason is ConnectErrorReason.AUTHENTICATION_FAILED
    assert isinstance(raised.value.__cause__, AuthenticationError)
    assert raised.value.__cause__.reason == "unknown"


async def test_the_admin_token_on_the_agent_api_is_permission_denied(served):
    async with raw_stub(served) as stub:
        failure = await raw_failure(
            stub.ReadSend(
                endpoint_pb2.ReadSendRequest(idempotency_key="k"),
                metadata=bearer(served.admin_token),
            )
        )
    assert isinstance(failure, PermissionDeniedError)
    assert failure.reason == "wrong-role"


async def test_a_revoked_token_is_unauthenticated_revoked(served):
    token = await served.register("alice")
    await served.core.revoke_token("alice")
    async with raw_stub(served) as stub:
        failure = await raw_failure(
            stub.ReadSend(endpoint_pb2.ReadSendRequest(idempotency_key="k"), metadata=bearer(token))
        )
    assert isinstance(failure, AuthenticationError)
    assert failure.reason == "revoked"


# --- readiness ---------------------------------------------------------------------------


async def test_every_call_is_refused_not_ready_until_the_core_serves(served):
    token = await served.register("alice")
    served.core.lifecycle = GatewayState.RECOVERING
    async with raw_stub(served) as stub:
        failure = await raw_failure(
            stub.ReadSend(endpoint_pb2.ReadSendRequest(idempotency_key="k"), metadata=bearer(token))
        )
    assert isinstance(failure, UnavailableError)
    assert failure.reason == "not-ready"


async def test_calls_are_refused_shutting_down_once_the_core_stops(served):
    token = await served.register("alice")
    served.core.lifecycle = GatewayState.STOPPING
    async with raw_stub(served) as stub:
        failure = await raw_failure(
            stub.ReadSend(endpoint_pb2.ReadSendRequest(idempotency_key="k"), metadata=bearer(token))
        )
    assert isinstance(failure, UnavailableError)
    assert failure.reason == "shutting-down"


async def test_a_keyless_send_refused_not_ready_is_sent_again_once_the_gateway_is_ready(served):
    await served.register("bob")
    async with await served.connect("alice") as alice:
        served.core.refuse_next = 2
        result = await alice.send(harness_client.MessageInput(to="agent:bob", text="x"))
    assert result == harness_client.SendResult()
    assert len(served.core.endpoints["alice"].calls) == 1


async def test_a_keyless_send_refused_not_ready_until_its_deadline_is_network_unavailable(served):
    async with await served.connect("alice") as alice:
        served.core.refuse_next = 1_000_000
        with pytest.raises(harness_client.SendError) as raised:
            await alice.send(harness_client.MessageInput(to="agent:alice", text="x"), deadline=2.0)
    assert raised.value.reason is harness_client.SendErrorReason.NETWORK_UNAVAILABLE


async def test_a_keyed_send_refused_not_ready_is_sent_again_under_its_key(served):
    await served.register("bob")
    async with await served.connect("alice") as alice:
        served.core.refuse_next = 2
        result = await alice.send(
            harness_client.MessageInput(to="agent:bob", text="x"), idempotency_key="k1"
        )
    assert result == harness_client.SendResult()
    assert [call.idempotency_key for call in served.core.endpoints["alice"].calls] == ["k1"]


async def test_a_keyed_send_answered_outcome_unknown_is_sent_again_under_its_key(served):
    served.core.scripted["agent:bob"] = SendError(SendErrorReason.OUTCOME_UNKNOWN)
    async with await served.connect("alice") as alice:
        with pytest.raises(harness_client.SendError) as raised:
            await alice.send(
                harness_client.MessageInput(to="agent:bob", text="x"),
                idempotency_key="k1",
                deadline=2.5,
            )
    # The fake keeps outcome-unknown under the key, as an indeterminate reservation does: the
    # client asked again under the key until its deadline, then reports what it was told.
    assert raised.value.reason is harness_client.SendErrorReason.OUTCOME_UNKNOWN
    calls = served.core.endpoints["alice"].calls
    assert len(calls) > 1
    assert {call.idempotency_key for call in calls} == {"k1"}


async def test_a_keyless_send_answered_outcome_unknown_is_never_sent_again(served):
    served.core.scripted["agent:bob"] = SendError(SendErrorReason.OUTCOME_UNKNOWN)
    async with await served.connect("alice") as alice:
        with pytest.raises(harness_client.SendError) as raised:
            await alice.send(harness_client.MessageInput(to="agent:bob", text="x"), deadline=2.5)
    assert raised.value.reason is harness_client.SendErrorReason.OUTCOME_UNKNOWN
    assert len(served.core.endpoints["alice"].calls) == 1


async def test_a_keyless_send_refused_unavailable_then_unreachable_is_network_unavailable(served):
    served.core.scripted["agent:bob"] = SendError(SendErrorReason.NETWORK_UNAVAILABLE)
    async with await served.connect("alice") as alice:
        sending = asyncio.create_task(
            alice.send(harness_client.MessageInput(to="agent:bob", text="x"), deadline=4.0)
        )
        await until(lambda: len(served.core.endpoints["alice"].calls) > 0)
        await served.server.stop(None)
        with pytest.raises(harness_client.SendError) as raised:
            await sending
    # Neither the refusal nor the attempts that found no server can have posted anything.
    assert raised.value.reason is harness_client.SendErrorReason.NETWORK_UNAVAILABLE


async def test_connect_fails_when_the_endpoint_service_never_serves(served):
    await served.server.set_not_serving()
    token = await served.register("alice")
    with pytest.raises(ConnectError) as raised:
        await harness_client.connect(served.address, token=token, connect_timeout=0.5)
    assert raised.value.reason is ConnectErrorReason.TRANSPORT_FAILED


async def test_connecting_to_nothing_fails_transport_failed():
    with pytest.raises(ConnectError) as raised:
        await harness_client.connect("127.0.0.1:1", token="t", connect_timeout=0.5)
    assert raised.value.reason is ConnectErrorReason.TRANSPORT_FAILED


# --- send --------------------------------------------------------------------------------


async def test_a_send_is_delivered_and_the_core_sees_the_key_routing_and_a_deadline(served):
    await served.register("bob")
    async with await served.connect("alice") as alice:
        result = await alice.send(
            harness_client.MessageInput(to="agent:bob", text="hello"),
            idempotency_key="key-1",
            failure_delivery=harness_client.FailureDelivery.INBOUND,
            deadline=30.0,
        )
    assert result == harness_client.SendResult()
    [call] = served.core.endpoints["alice"].calls
    assert call.send_input == MessageInput(to="agent:bob", text="hello")
    assert call.idempotency_key == "key-1"
    assert call.failure_delivery is FailureDelivery.INBOUND
    assert call.deadline is not None
    assert 20.0 < call.deadline <= 31.0  # gRPC rounds the timeout it sends up


async def test_a_send_result_with_guidance_and_an_operation_id_decodes(served):
    served.core.scripted["agent:bob"] = SendResult(operation_id="col_x", guidance=CHECKED)
    async with await served.connect("alice") as alice:
        result = await alice.send(harness_client.MessageInput(to="agent:bob", text="hello"))
    assert result.operation_id == "col_x"
    assert result.guidance is not None
    assert result.guidance.check_id == CHECKED.check_id


@pytest.mark.parametrize(
    "error",
    [
        *(SendError(reason) for reason in SendErrorReason),
        SendError(SendErrorReason.UNKNOWN_AGENT, "agent:zed is not registered with the gateway"),
        *COLLECTIVE_ERRORS,
        FIREWALL_ERROR,
    ],
    ids=lambda error: f"{type(error).__name__}-{error.reason}",
)
async def test_each_send_failure_decodes_to_the_typed_client_error(served, error):
    served.core.scripted["agent:bob"] = error
    async with await served.connect("alice") as alice:
        with pytest.raises(harness_client.HarnessError) as raised:
            # A short deadline: a keyless send refused UNAVAILABLE is sent again until it.
            await alice.send(
                harness_client.MessageInput(to="agent:bob", text="hello"), deadline=2.0
            )
    assert type(raised.value).__name__ == type(error).__name__
    assert str(raised.value.reason) == error.reason
    assert raised.value.message == error.message


async def test_the_same_key_with_another_input_is_an_idempotency_conflict(served):
    await served.register("bob")
    async with await served.connect("alice") as alice:
        await alice.send(
            harness_client.MessageInput(to="agent:bob", text="one"), idempotency_key="k"
        )
        with pytest.raises(harness_client.IdempotencyConflictError) as raised:
            await alice.send(
                harness_client.MessageInput(to="agent:bob", text="two"), idempotency_key="k"
            )
    assert raised.value.key == "k"


async def test_a_send_request_without_an_input_is_an_invalid_request(served):
    token = await served.register("alice")
    async with raw_stub(served) as stub:
        failure = await raw_failure(stub.Send(endpoint_pb2.SendRequest(), metadata=bearer(token)))
    assert isinstance(failure, InvalidRequestError)


async def test_read_send_reports_absent_then_the_returned_outcome(served):
    served.core.scripted["agent:bob"] = CollectiveError("col_x", RequestNone())
    async with await served.connect("alice") as alice:
        assert await alice.read_send("k") == harness_client.SendAbsent()
        with pytest.raises(harness_client.CollectiveError):
            await alice.send(
                harness_client.MessageInput(to="agent:bob", text="x"), idempotency_key="k"
            )
        state = await alice.read_send("k")
    assert isinstance(state, harness_client.SendReturned)
    assert state.input == harness_client.MessageInput(to="agent:bob", text="x")
    assert isinstance(state.outcome, harness_client.CollectiveError)
    assert state.outcome.kind is harness_client.CollectiveErrorKind.REQUEST_NONE


async def test_a_defect_in_the_core_is_internal_and_not_an_outcome(served):
    served.core.scripted["agent:bob"] = RuntimeError("boom")
    async with await served.connect("alice") as alice:
        with pytest.raises(harness_client.SendError) as raised:
            await alice.send(harness_client.MessageInput(to="agent:bob", text="x"))
    # The call reached the gateway and failed without a typed answer: the send may have
    # happened, so the keyless client reports outcome-unknown.
    assert raised.value.reason is harness_client.SendErrorReason.OUTCOME_UNKNOWN
    assert isinstance(raised.value.__cause__, harness_client.TransportError)
    assert raised.value.__cause__.reason == "internal"


# --- parse -------------------------------------------------------------------------------


async def test_parse_message_text_reads_an_operation_and_refuses_a_malformed_one(served):
    async with await served.connect("alice") as alice:
        parsed = await alice.parse_message_text(
            "agent:bob", '{"action": "accept", "content": {"slot": "tue"}}'
        )
        assert parsed == harness_client.ResponseInput(
            to="agent:bob", response=harness_client.Accept(content={"slot": "tue"})
        )
        assert await alice.parse_message_text("agent:bob", "plain") == harness_client.MessageInput(
            to="agent:bob", text="plain"
        )
        with pytest.raises(harness_client.MessageTextError) as raised:
            await alice.parse_message_text("agent:bob", '{"gather": 1}')
    assert raised.value.operation is harness_client.MessageTextOperation.GATHER
    assert raised.value.message.startswith("gather not sent: ")


# --- messages and acknowledgments --------------------------------------------------------


async def test_deliveries_stream_in_order_and_an_acknowledged_one_is_not_replayed(served):
    async with await served.connect("alice") as alice:
        tokens = [
            await served.core.deliver("alice", text_item("one")),
            await served.core.deliver("alice", text_item("two")),
        ]
        deliveries = alice.messages()
        one = await next_delivery(deliveries)
        two = await next_delivery(deliveries)
        assert [one.token, two.token] == tokens
        assert isinstance(one.item, MulticastItem)
        assert harness_client.text_of(one.item.message.content) == "one"
        await one.acknowledge()
        await deliveries.aclose()
        await until(lambda: not served.core.endpoints["alice"].inbox.listening)

        again = alice.messages()
        replayed = await next_delivery(again)
        assert replayed.token == two.token
        assert replayed.item == two.item
        await again.aclose()


async def test_a_stream_that_the_gateway_ends_reconnects_and_skips_what_it_already_yielded(
    served,
):
    async with await served.connect("alice") as alice:
        inbox = served.core.endpoints["alice"].inbox
        first = await served.core.deliver("alice", text_item("one"))
        deliveries = alice.messages()
        assert (await next_delivery(deliveries)).token == first
        inbox.end_stream(StreamEndReason.SHUTDOWN)
        second = await served.core.deliver("alice", text_item("two"))
        # The replay of "one" on the new stream is skipped; "two" comes next.
        assert (await next_delivery(deliveries)).token == second
        await deliveries.aclose()


async def test_a_second_listener_is_refused_already_listening(served):
    token = await served.register("alice")
    async with (
        await harness_client.connect(served.address, token=token) as first,
        await harness_client.connect(served.address, token=token) as second,
    ):
        listening = first.messages()
        waiter = asyncio.create_task(anext(listening))
        await until(lambda: served.core.endpoints["alice"].inbox.listening)
        with pytest.raises(ListenError) as raised:
            await next_delivery(second.messages())
        assert raised.value.reason is ListenErrorReason.ALREADY_LISTENING
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        await listening.aclose()


async def test_a_takeover_ends_the_old_stream_with_already_listening(served):
    token = await served.register("alice")
    async with (
        await harness_client.connect(served.address, token=token) as first,
        await harness_client.connect(served.address, token=token) as second,
    ):
        old = first.messages()
        old_next = asyncio.create_task(anext(old))
        await until(lambda: served.core.endpoints["alice"].inbox.listening)
        new = second.messages(takeover=True)
        new_next = asyncio.create_task(anext(new))
        with pytest.raises(ListenError) as raised:
            await asyncio.wait_for(old_next, BOUND)
        assert raised.value.reason is ListenErrorReason.ALREADY_LISTENING
        item_token = await served.core.deliver("alice", text_item("mine now"))
        assert (await asyncio.wait_for(new_next, BOUND)).token == item_token
        await new.aclose()
        await old.aclose()


async def test_revoking_the_token_ends_the_stream_unauthenticated(served):
    async with await served.connect("alice") as alice:
        deliveries = alice.messages()
        waiter = asyncio.create_task(anext(deliveries))
        await until(lambda: served.core.endpoints["alice"].inbox.listening)
        await served.core.revoke_token("alice")
        with pytest.raises(AuthenticationError) as raised:
            await asyncio.wait_for(waiter, BOUND)
        assert raised.value.reason == "revoked"
        await deliveries.aclose()


async def test_the_server_releases_the_stream_slot_when_the_client_goes_away(served):
    async with await served.connect("alice") as alice:
        deliveries = alice.messages()
        waiter = asyncio.create_task(anext(deliveries))
        await until(lambda: served.core.endpoints["alice"].inbox.listening)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        await deliveries.aclose()
        await until(lambda: not served.core.endpoints["alice"].inbox.listening)


async def test_acknowledge_reports_each_tokens_result(served):
    async with await served.connect("alice") as alice:
        token = await served.core.deliver("alice", text_item("one"))
        results = await alice.acknowledge([token, "dlv_never", token])
    assert results[0] is None
    assert results[2] is None
    assert results[1] is not None
    assert results[1].reason is harness_client.DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY


async def test_acknowledging_an_unknown_delivery_raises_for_its_waiter(served):
    async with await served.connect("alice") as alice:
        await served.core.deliver("alice", text_item("one"))
        deliveries = alice.messages()
        delivery = await next_delivery(deliveries)
        await delivery.acknowledge()
        fake = harness_client.InboundDelivery(
            token="dlv_never", item=delivery.item, _acknowledge=delivery._acknowledge
        )
        with pytest.raises(harness_client.DeliveryAcknowledgeError) as raised:
            await fake.acknowledge()
        assert raised.value.reason is harness_client.DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY
        await deliveries.aclose()


@pytest.mark.parametrize("count", [0, 1001])
async def test_acknowledge_takes_one_to_a_thousand_tokens(served, count):
    token = await served.register("alice")
    async with raw_stub(served) as stub:
        failure = await raw_failure(
            stub.Acknowledge(
                endpoint_pb2.AcknowledgeRequest(delivery_tokens=[f"dlv_{n}" for n in range(count)]),
                metadata=bearer(token),
            )
        )
    assert isinstance(failure, InvalidRequestError)
    assert "1 to 1,000" in failure.message


async def test_a_keyless_send_to_a_gateway_that_went_away_is_network_unavailable(served):
    async with await served.connect("alice") as alice:
        await served.server.stop(None)
        with pytest.raises(harness_client.SendError) as raised:
            await alice.send(harness_client.MessageInput(to="agent:bob", text="x"), deadline=5.0)
    assert raised.value.reason is harness_client.SendErrorReason.NETWORK_UNAVAILABLE

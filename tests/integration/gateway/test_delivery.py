"""Inbound delivery through a real gateway (engine.md §7, §10 vector 14): replay of what was
not acknowledged, on the next stream and after a restart; one stream per agent; take-over;
acknowledgments scoped to their agent; authentication of every agent call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager

import grpc
import harness_client
import pytest
from harness_client import (
    AuthenticationError,
    ConnectError,
    ConnectErrorReason,
    DeliveryAcknowledgeError,
    DeliveryAcknowledgeErrorReason,
    InboundDelivery,
    ListenError,
    ListenErrorReason,
    MessageInput,
    MulticastItem,
    PermissionDeniedError,
)
from harness_contract import wire
from harness_contract._gen.harness.v1 import endpoint_pb2, endpoint_pb2_grpc, types_pb2
from harness_contract.ids import RandomId

from gateway.testing import RunningGateway, run_gateway
from tests.support import eventually

BOUND = 20.0
"""Seconds any single wait in these tests may take before it fails."""


# --- helpers -------------------------------------------------------------------------------


async def next_delivery(deliveries: AsyncIterator[InboundDelivery]) -> InboundDelivery:
    return await asyncio.wait_for(anext(deliveries), BOUND)


def text_of(delivery: InboundDelivery) -> str:
    item = delivery.item
    assert isinstance(item, MulticastItem)
    return harness_client.text_of(item.message.content)


async def wait_listening(gw: RunningGateway, name: str, listening: bool) -> None:
    """Until the gateway itself says whether `name` holds a stream (the client closing its
    call does not mean the server has seen it yet)."""
    await eventually(
        lambda: gw.gateway.components.management.agent_status(name),
        lambda status: status.stream_attached is listening,
        within=BOUND,
    )


async def wait_backlog(gw: RunningGateway, name: str, backlog: int) -> None:
    """Until `name` has exactly `backlog` unacknowledged items in its inbox."""
    await eventually(
        lambda: gw.gateway.components.management.agent_status(name),
        lambda status: status.backlog == backlog,
        within=BOUND,
    )


async def close_stream(
    gw: RunningGateway, name: str, stream: AsyncGenerator[InboundDelivery, None]
) -> None:
    """End a client stream and wait until the gateway released the agent's slot."""
    await stream.aclose()
    await wait_listening(gw, name, False)


@asynccontextmanager
async def raw_stub(
    address: str,
) -> AsyncIterator[endpoint_pb2_grpc.HarnessEndpointServiceAsyncStub]:
    """The generated stub, for what the client library hides: status codes and raw bytes."""
    channel = grpc.aio.insecure_channel(address)
    try:
        yield endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
    finally:
        await channel.close()


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def first_raw_delivery(address: str, token: str) -> types_pb2.InboundDelivery:
    """Open one `Messages` call, read its first delivery as sent, and end the call."""
    async with raw_stub(address) as stub:
        call = stub.Messages(endpoint_pb2.MessagesRequest(), metadata=bearer(token))
        try:
            response = await asyncio.wait_for(call.read(), BOUND)
        finally:
            call.cancel()
    assert isinstance(response, endpoint_pb2.MessagesResponse)
    return response.delivery


def wire_bytes(message: types_pb2.InboundDelivery | types_pb2.InboundItem) -> bytes:
    return message.SerializeToString(deterministic=True)


async def unauthenticated(call: object) -> grpc.aio.AioRpcError:
    """Await a raw call that must fail UNAUTHENTICATED and return its error."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call  # type: ignore[misc]
    assert raised.value.code() is grpc.StatusCode.UNAUTHENTICATED
    return raised.value


# --- replay --------------------------------------------------------------------------------


async def test_a_delivery_not_acknowledged_comes_back_with_the_same_token_and_item_on_the_next_stream():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        bob_token = await gw.register("bob")
        async with (
            await harness_client.connect(gw.address, token=alice_token) as alice,
            await harness_client.connect(gw.address, token=bob_token) as bob,
        ):
            await alice.send(MessageInput(to="agent:bob", text="unacknowledged"))
            first_stream = bob.messages()
            received = await next_delivery(first_stream)
            assert text_of(received) == "unacknowledged"
            await close_stream(gw, "bob", first_stream)

            # A new iterator starts with an empty replay memory: what comes is the gateway's.
            second_stream = bob.messages()
            replayed = await next_delivery(second_stream)
            assert replayed.token == received.token
            assert replayed.item == received.item
            assert replayed.guidance == received.guidance
            await close_stream(gw, "bob", second_stream)

            third_stream = bob.messages()
            again = await next_delivery(third_stream)
            assert again.token == received.token
            assert again.item == received.item
            await third_stream.aclose()


async def test_a_delivery_not_acknowledged_comes_back_with_identical_bytes_after_a_restart():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        bob_token = await gw.register("bob")
        async with await harness_client.connect(gw.address, token=alice_token) as alice:
            await alice.send(MessageInput(to="agent:bob", text="survives restarts"))
        await wait_backlog(gw, "bob", 1)
        received = await first_raw_delivery(gw.address, bob_token)
        await wait_listening(gw, "bob", False)

        await gw.restart()
        after_restart = await first_raw_delivery(gw.address, bob_token)
        assert after_restart.delivery_token == received.delivery_token
        assert wire_bytes(after_restart.item) == wire_bytes(received.item)
        assert after_restart == received
        await wait_listening(gw, "bob", False)

        await gw.restart()
        after_second_restart = await first_raw_delivery(gw.address, bob_token)
        assert wire_bytes(after_second_restart) == wire_bytes(received)
        await wait_listening(gw, "bob", False)

        async with await harness_client.connect(gw.address, token=bob_token) as bob:
            stream = bob.messages()
            delivery = await next_delivery(stream)
            assert text_of(delivery) == "survives restarts"
            assert delivery.token == received.delivery_token
            await stream.aclose()


async def test_an_acknowledged_delivery_never_comes_back_on_a_new_stream_or_after_a_restart():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        bob_token = await gw.register("bob")
        async with await harness_client.connect(gw.address, token=alice_token) as alice:
            for text in ("one", "two", "three"):
                await alice.send(MessageInput(to="agent:bob", text=text))
        async with await harness_client.connect(gw.address, token=bob_token) as bob:
            stream = bob.messages()
            received = [await next_delivery(stream) for _ in range(3)]
            assert [text_of(delivery) for delivery in received] == ["one", "two", "three"]
            await received[0].acknowledge()
            await received[2].acknowledge()
            # Acknowledging again succeeds and changes nothing.
            assert await bob.acknowledge([received[0].token]) == [None]
            await close_stream(gw, "bob", stream)
            await wait_backlog(gw, "bob", 1)

            stream = bob.messages()
            replayed = await next_delivery(stream)
            assert replayed.token == received[1].token
            assert replayed.item == received[1].item
            await close_stream(gw, "bob", stream)

        await gw.restart()
        await wait_backlog(gw, "bob", 1)
        async with (
            await harness_client.connect(gw.address, token=alice_token) as alice,
            await harness_client.connect(gw.address, token=bob_token) as bob,
        ):
            stream = bob.messages()
            replayed = await next_delivery(stream)
            assert replayed.token == received[1].token
            assert replayed.item == received[1].item
            await replayed.acknowledge()
            await close_stream(gw, "bob", stream)
            await wait_backlog(gw, "bob", 0)

            # Nothing acknowledged comes back: the next item a new stream sees is new.
            await alice.send(MessageInput(to="agent:bob", text="marker"))
            stream = bob.messages()
            marker = await next_delivery(stream)
            assert text_of(marker) == "marker"
            assert marker.token not in {delivery.token for delivery in received}
            await marker.acknowledge()
            await close_stream(gw, "bob", stream)

        await gw.restart()
        await wait_backlog(gw, "bob", 0)
        async with (
            await harness_client.connect(gw.address, token=alice_token) as alice,
            await harness_client.connect(gw.address, token=bob_token) as bob,
        ):
            await alice.send(MessageInput(to="agent:bob", text="after the last restart"))
            stream = bob.messages()
            latest = await next_delivery(stream)
            assert text_of(latest) == "after the last restart"
            await stream.aclose()


# --- one stream per agent ------------------------------------------------------------------


async def test_a_second_stream_of_the_same_agent_fails_already_listening_and_the_first_keeps_going():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        bob_token = await gw.register("bob")
        async with (
            await harness_client.connect(gw.address, token=alice_token) as alice,
            await harness_client.connect(gw.address, token=bob_token) as bob,
            await harness_client.connect(gw.address, token=bob_token) as bob_again,
        ):
            first = bob.messages()
            first_next = asyncio.create_task(anext(first))
            await wait_listening(gw, "bob", True)

            with pytest.raises(ListenError) as raised:
                await next_delivery(bob_again.messages())
            assert raised.value.reason is ListenErrorReason.ALREADY_LISTENING
            assert raised.value.message == "listen failed: already-listening"

            # The refused stream took nothing from the first one.
            await alice.send(MessageInput(to="agent:bob", text="still yours"))
            delivery = await asyncio.wait_for(first_next, BOUND)
            assert text_of(delivery) == "still yours"
            assert (await gw.gateway.components.management.agent_status("bob")).stream_attached
            await first.aclose()


async def test_a_second_stream_on_the_raw_api_fails_failed_precondition_already_listening():
    async with run_gateway() as gw:
        bob_token = await gw.register("bob")
        async with raw_stub(gw.address) as stub:
            first = stub.Messages(endpoint_pb2.MessagesRequest(), metadata=bearer(bob_token))
            try:
                await asyncio.wait_for(first.initial_metadata(), BOUND)
                await wait_listening(gw, "bob", True)
                second = stub.Messages(endpoint_pb2.MessagesRequest(), metadata=bearer(bob_token))
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await asyncio.wait_for(second.read(), BOUND)
                assert raised.value.code() is grpc.StatusCode.FAILED_PRECONDITION
                failure = harness_client.decode_status(raised.value)
                assert isinstance(failure, ListenError)
                assert failure.reason is ListenErrorReason.ALREADY_LISTENING
            finally:
                first.cancel()
        await wait_listening(gw, "bob", False)


async def test_a_take_over_stream_ends_the_first_with_already_listening_and_replays_its_unacknowledged_items():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        bob_token = await gw.register("bob")
        async with (
            await harness_client.connect(gw.address, token=alice_token) as alice,
            await harness_client.connect(gw.address, token=bob_token) as bob,
            await harness_client.connect(gw.address, token=bob_token) as bob_again,
        ):
            await alice.send(MessageInput(to="agent:bob", text="before the take-over"))
            old = bob.messages()
            unacknowledged = await next_delivery(old)
            old_next = asyncio.create_task(anext(old))
            await wait_listening(gw, "bob", True)

            new = bob_again.messages(takeover=True)
            replayed = await next_delivery(new)
            with pytest.raises(ListenError) as raised:
                await asyncio.wait_for(old_next, BOUND)
            assert raised.value.reason is ListenErrorReason.ALREADY_LISTENING
            assert replayed.token == unacknowledged.token
            assert replayed.item == unacknowledged.item

            await alice.send(MessageInput(to="agent:bob", text="after the take-over"))
            fresh = await next_delivery(new)
            assert text_of(fresh) == "after the take-over"
            assert (await gw.gateway.components.management.agent_status("bob")).stream_attached
            await new.aclose()
            await old.aclose()
            await wait_listening(gw, "bob", False)


# --- acknowledgments are the agent's own ---------------------------------------------------


async def test_acknowledging_another_agents_delivery_token_is_unknown_delivery_and_changes_nothing():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        bob_token = await gw.register("bob")
        carol_token = await gw.register("carol")
        async with (
            await harness_client.connect(gw.address, token=alice_token) as alice,
            await harness_client.connect(gw.address, token=bob_token) as bob,
            await harness_client.connect(gw.address, token=carol_token) as carol,
        ):
            await alice.send(MessageInput(to="agent:bob", text="for bob only"))
            stream = bob.messages()
            delivery = await next_delivery(stream)
            await close_stream(gw, "bob", stream)

            # The author, and a third agent, both try to retire bob's item.
            for intruder in (alice, carol):
                results = await intruder.acknowledge([delivery.token])
                assert len(results) == 1
                result = results[0]
                assert isinstance(result, DeliveryAcknowledgeError)
                assert result.reason is DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY
                assert result.message == "delivery acknowledgment failed: unknown-delivery"
            await wait_backlog(gw, "bob", 1)

            # The batched path raises the same for its waiter.
            forged = InboundDelivery(
                token=delivery.token,
                item=delivery.item,
                _acknowledge=carol._acks.acknowledge,
            )
            with pytest.raises(DeliveryAcknowledgeError) as raised:
                await forged.acknowledge()
            assert raised.value.reason is DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY

            # Nothing changed: bob's item is still unacknowledged and replays unchanged.
            assert (await gw.gateway.components.management.agent_status("bob")).backlog == 1
            stream = bob.messages()
            replayed = await next_delivery(stream)
            assert replayed.token == delivery.token
            assert replayed.item == delivery.item
            await replayed.acknowledge()
            await close_stream(gw, "bob", stream)
            await wait_backlog(gw, "bob", 0)


async def test_acknowledging_a_token_never_issued_is_unknown_delivery_beside_a_good_one():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        bob_token = await gw.register("bob")
        async with (
            await harness_client.connect(gw.address, token=alice_token) as alice,
            await harness_client.connect(gw.address, token=bob_token) as bob,
        ):
            await alice.send(MessageInput(to="agent:bob", text="x"))
            stream = bob.messages()
            delivery = await next_delivery(stream)
            never = RandomId.DELIVERY.mint()
            results = await bob.acknowledge([never, delivery.token, delivery.token])
            assert isinstance(results[0], DeliveryAcknowledgeError)
            assert results[0].reason is DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY
            assert results[1:] == [None, None]
            await close_stream(gw, "bob", stream)
            await wait_backlog(gw, "bob", 0)


# --- authentication ------------------------------------------------------------------------


async def test_every_agent_call_without_a_token_is_unauthenticated():
    async with run_gateway() as gw:
        await gw.register("bob")
        async with raw_stub(gw.address) as stub:
            calls = [
                stub.Send(
                    endpoint_pb2.SendRequest(
                        input=wire.send_input_to_proto(MessageInput(to="agent:bob", text="x"))
                    )
                ),
                stub.Acknowledge(
                    endpoint_pb2.AcknowledgeRequest(delivery_tokens=[RandomId.DELIVERY.mint()])
                ),
                stub.ReadSend(endpoint_pb2.ReadSendRequest(idempotency_key="k")),
                stub.ParseMessageText(
                    endpoint_pb2.ParseMessageTextRequest(to="agent:bob", text="")
                ),
            ]
            for call in calls:
                error = await unauthenticated(call)
                failure = harness_client.decode_status(error)
                assert isinstance(failure, AuthenticationError)
                assert failure.reason == "missing"
            stream = stub.Messages(endpoint_pb2.MessagesRequest())
            error = await unauthenticated(stream.read())
            assert harness_client.decode_status(error).reason == "missing"


@pytest.mark.parametrize(
    "token",
    [
        pytest.param(RandomId.API_TOKEN.mint(), id="well-formed-but-never-issued"),
        pytest.param("hat_not-a-token", id="malformed-agent-token"),
        pytest.param("anything", id="no-prefix"),
    ],
)
async def test_every_agent_call_with_an_unknown_token_is_unauthenticated_unknown(token):
    async with run_gateway() as gw:
        bob_token = await gw.register("bob")
        async with raw_stub(gw.address) as stub:
            metadata = bearer(token)
            calls = [
                stub.Send(
                    endpoint_pb2.SendRequest(
                        input=wire.send_input_to_proto(MessageInput(to="agent:bob", text="x"))
                    ),
                    metadata=metadata,
                ),
                stub.Acknowledge(
                    endpoint_pb2.AcknowledgeRequest(delivery_tokens=[RandomId.DELIVERY.mint()]),
                    metadata=metadata,
                ),
                stub.ReadSend(endpoint_pb2.ReadSendRequest(idempotency_key="k"), metadata=metadata),
            ]
            for call in calls:
                failure = harness_client.decode_status(await unauthenticated(call))
                assert isinstance(failure, AuthenticationError)
                assert failure.reason == "unknown"
            stream = stub.Messages(endpoint_pb2.MessagesRequest(), metadata=metadata)
            failure = harness_client.decode_status(await unauthenticated(stream.read()))
            assert failure.reason == "unknown"
        assert not (await gw.gateway.components.management.agent_status("bob")).stream_attached
        with pytest.raises(ConnectError) as raised:
            await harness_client.connect(gw.address, token=token)
        assert raised.value.reason is ConnectErrorReason.AUTHENTICATION_FAILED
        assert isinstance(raised.value.__cause__, AuthenticationError)
        assert raised.value.__cause__.reason == "unknown"
        # The refusals did not disturb the real agent.
        async with await harness_client.connect(gw.address, token=bob_token):
            pass


async def test_an_unknown_token_cannot_acknowledge_and_the_item_stays():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        bob_token = await gw.register("bob")
        async with await harness_client.connect(gw.address, token=alice_token) as alice:
            await alice.send(MessageInput(to="agent:bob", text="mine"))
        await wait_backlog(gw, "bob", 1)
        token = (await first_raw_delivery(gw.address, bob_token)).delivery_token
        await wait_listening(gw, "bob", False)
        async with raw_stub(gw.address) as stub:
            await unauthenticated(
                stub.Acknowledge(
                    endpoint_pb2.AcknowledgeRequest(delivery_tokens=[token]),
                    metadata=bearer(RandomId.API_TOKEN.mint()),
                )
            )
        assert (await gw.gateway.components.management.agent_status("bob")).backlog == 1


async def test_a_rotated_token_is_unauthenticated_revoked_and_ends_the_stream():
    async with run_gateway() as gw:
        old_token = await gw.register("bob")
        async with await harness_client.connect(gw.address, token=old_token) as bob:
            stream = bob.messages()
            waiter = asyncio.create_task(anext(stream))
            await wait_listening(gw, "bob", True)
            new_token = await gw.gateway.components.agents.rotate_token("bob")
            with pytest.raises(AuthenticationError) as raised:
                await asyncio.wait_for(waiter, BOUND)
            assert raised.value.reason == "revoked"
            await stream.aclose()
        await wait_listening(gw, "bob", False)
        async with raw_stub(gw.address) as stub:
            error = await unauthenticated(
                stub.ReadSend(
                    endpoint_pb2.ReadSendRequest(idempotency_key="k"), metadata=bearer(old_token)
                )
            )
        assert harness_client.decode_status(error).reason == "revoked"
        async with await harness_client.connect(gw.address, token=new_token):
            pass


async def test_the_admin_token_on_the_agent_api_is_permission_denied_wrong_role():
    async with run_gateway() as gw:
        async with raw_stub(gw.address) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.ReadSend(
                    endpoint_pb2.ReadSendRequest(idempotency_key="k"),
                    metadata=bearer(gw.admin_token),
                )
        assert raised.value.code() is grpc.StatusCode.PERMISSION_DENIED
        failure = harness_client.decode_status(raised.value)
        assert isinstance(failure, PermissionDeniedError)
        assert failure.reason == "wrong-role"

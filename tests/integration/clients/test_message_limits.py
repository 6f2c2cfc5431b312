"""An oversized message is a typed `content-invalid` naming the limit, for every kind of
client.

The gateway reads a request up to its receive limit (`max_receive_bytes`, 1 MiB by
default), far above any valid one (content is at most 32,768 bytes as canonical JSON), so a
request between the two is read and refused by the gateway's own content check. A larger
one never reaches the gateway's code: gRPC refuses it unread with a bare RESOURCE_EXHAUSTED.
Both clients refuse such a send before sending it (the shared scenario
`oversized-message`), and read that bare refusal, from a gateway set to a lower limit, as
`content-invalid` too. A raw gRPC client gets the typed refusal up to the limit and gRPC's
own status past it.
"""

from __future__ import annotations

from dataclasses import replace

import grpc
import harness_client
import pytest
from harness_client import MessageInput, SendError, SendErrorReason
from harness_contract import wire
from harness_contract._gen.harness.v1 import endpoint_pb2, endpoint_pb2_grpc
from harness_contract.content import REQUEST_MAX_BYTES, oversized_detail
from harness_contract.errors import StatusCode
from harness_contract.values import FailureDelivery

from gateway.settings import Settings
from gateway.testing import run_gateway

pytestmark = pytest.mark.timeout(60)


def send_request(text: str) -> endpoint_pb2.SendRequest:
    return endpoint_pb2.SendRequest(
        input=wire.send_input_to_proto(MessageInput(to="agent:bob", text=text)),
        failure_delivery=wire.failure_delivery_to_proto(FailureDelivery.RESULT),
    )


async def raw_send(address: str, token: str, text: str) -> grpc.aio.AioRpcError:
    """Send `text` with a plain generated stub, as a client in any language would."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Send(
                send_request(text), metadata=(("authorization", f"Bearer {token}"),), timeout=20
            )
    return raised.value


async def test_a_raw_client_s_message_under_the_receive_limit_is_refused_typed_naming_the_limit():
    async with run_gateway() as gateway:
        alice = await gateway.register("alice")
        await gateway.register("bob")
        error = await raw_send(gateway.address, alice, "x" * 500_000)
    refusal = harness_client.decode_status(error)
    assert isinstance(refusal, SendError)
    assert refusal.reason is SendErrorReason.CONTENT_INVALID
    assert refusal.status_code is StatusCode.INVALID_ARGUMENT
    assert refusal.message == (
        "send failed: the message is 500,112 bytes as canonical JSON; the limit is 32,768 bytes"
    )


async def test_a_raw_client_s_message_over_the_receive_limit_is_refused_by_grpc_unread():
    async with run_gateway() as gateway:
        alice = await gateway.register("alice")
        await gateway.register("bob")
        error = await raw_send(gateway.address, alice, "x" * 2_000_000)
    # What a raw client sees past the limit; both clients read it as content-invalid.
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max (2000025 vs. 1048576)" in str(error.details())


async def test_the_client_reads_a_lower_receive_limit_s_refusal_as_content_invalid():
    limit = 64 * 1024
    async with run_gateway(replace(Settings(), max_receive_bytes=limit)) as gateway:
        token = await gateway.register("alice")
        await gateway.register("bob")
        async with await harness_client.connect(gateway.address, token=token) as alice:
            text = "x" * 100_000
            size = send_request(text).ByteSize()
            assert limit < size < REQUEST_MAX_BYTES, "the client's own check lets it through"
            with pytest.raises(SendError) as raised:
                await alice.send(MessageInput(to="agent:bob", text=text))
    assert raised.value.reason is SendErrorReason.CONTENT_INVALID
    assert raised.value.message == f"send failed: {oversized_detail(size)}"

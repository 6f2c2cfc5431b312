"""An agent that cancels its `Messages` stream and reopens it at once gets its stream
(issue 13, item 3), whatever unary calls it made meanwhile, with or without `takeover`; a
second live stream still fails `already-listening`; a take-over still ends the old one.

The clients here are raw: a `grpc.aio` channel, and a plaintext HTTP/2 connection
(`RawConnection`) that puts frames on the wire in the order a test chooses. The second is
what makes the race deterministic: grpc-js sends the new call's HEADERS before the old
call's RST_STREAM, so the gateway sees the new stream while the old one is still open and
learns of the cancellation only afterwards. Before the handover, that order was refused
`already-listening` nearly every time.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import harness_client
import pytest
from harness_client import ListenError, ListenErrorReason, MessageInput
from harness_contract._gen.harness.v1 import endpoint_pb2, endpoint_pb2_grpc, types_pb2

from gateway.testing import RunningGateway, run_gateway
from tests.raw_h2 import grpc_frame
from tests.support import eventually

BOUND: Final = 20.0
"""Seconds any single wait in these tests may take before it fails."""

ROUNDS: Final = 50
"""Cancel-and-reopen rounds per test."""

OPEN: Final = ("harness-stream", "open")
"""The initial metadata of a stream that holds the agent's slot."""

MESSAGES: Final = "/harness.v1.HarnessEndpointService/Messages"
READ_SEND: Final = "/harness.v1.HarnessEndpointService/ReadSend"


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@asynccontextmanager
async def raw_stub(
    address: str,
) -> AsyncIterator[endpoint_pb2_grpc.HarnessEndpointServiceAsyncStub]:
    channel = grpc.aio.insecure_channel(address)
    try:
        yield endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
    finally:
        await channel.close()


async def wait_listening(gw: RunningGateway, name: str, listening: bool) -> None:
    await eventually(
        lambda: gw.gateway.components.management.agent_status(name),
        lambda status: status.stream_attached is listening,
        within=BOUND,
    )


async def unary_calls(
    stub: endpoint_pb2_grpc.HarnessEndpointServiceAsyncStub, token: str, round_: int
) -> None:
    """What an agent does between cancelling and reopening: a send and a read of it."""
    await stub.Send(
        endpoint_pb2.SendRequest(
            input=types_pb2.SendInput(
                message=types_pb2.SendInput.Message(to="agent:alice", text=f"round {round_}")
            ),
            idempotency_key=f"round-{round_}",
        ),
        metadata=bearer(token),
        timeout=BOUND,
    )
    await stub.ReadSend(
        endpoint_pb2.ReadSendRequest(idempotency_key=f"round-{round_}"),
        metadata=bearer(token),
        timeout=BOUND,
    )


async def opened(
    call: grpc.aio.UnaryStreamCall[endpoint_pb2.MessagesRequest, endpoint_pb2.MessagesResponse],
) -> bool:
    """Whether `call` got the agent's stream slot (its status if it was refused)."""
    metadata = await asyncio.wait_for(call.initial_metadata(), BOUND)
    if OPEN in tuple(metadata or ()):
        return True
    code = await asyncio.wait_for(call.code(), BOUND)
    details = await call.details()
    pytest.fail(f"the reopened stream was refused: {code} {details}")


# --- a raw HTTP/2 connection -----------------------------------------------------------------


class RawConnection:
    """One plaintext HTTP/2 connection whose frames a test orders itself (blocking; run its
    methods with `asyncio.to_thread`)."""

    def __init__(self, address: str, token: str) -> None:
        host, _, port = address.rpartition(":")
        self._address = address
        self._token = token
        self._sock = socket.create_connection((host, int(port)), timeout=BOUND)
        self._h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self._h2.initiate_connection()
        self._sock.sendall(self._h2.data_to_send())
        self._headers: dict[int, dict[bytes, bytes]] = {}
        self._ended: set[int] = set()

    def close(self) -> None:
        self._h2.close_connection()
        self._sock.sendall(self._h2.data_to_send())
        self._sock.close()

    def start(self, path: str, body: bytes) -> int:
        """Queue a call's HEADERS and DATA (sent by `flush`); returns its stream id."""
        stream = self._h2.get_next_available_stream_id()
        self._h2.send_headers(
            stream,
            [
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", path.encode()),
                (b":authority", self._address.encode()),
                (b"content-type", b"application/grpc"),
                (b"te", b"trailers"),
                (b"authorization", f"Bearer {self._token}".encode()),
            ],
        )
        self._h2.send_data(stream, grpc_frame(body), end_stream=True)
        return stream

    def cancel(self, stream: int) -> None:
        """Queue the stream's RST_STREAM (CANCEL), as a client's `cancel()` sends it."""
        self._h2.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)

    def flush(self) -> None:
        """Send everything queued, in the order it was queued, in one write."""
        self._sock.sendall(self._h2.data_to_send())

    def response_headers(self, stream: int) -> dict[bytes, bytes]:
        """The first HEADERS the gateway answered `stream` with (a refusal's carry its
        `grpc-status`: a trailers-only response)."""
        while stream not in self._headers:
            self._receive()
        return self._headers[stream]

    def wait_ended(self, stream: int) -> None:
        while stream not in self._ended:
            self._receive()

    def _receive(self) -> None:
        data = self._sock.recv(65535)
        if not data:
            raise ConnectionError("the gateway closed the connection")
        for event in self._h2.receive_data(data):
            match event:
                case h2.events.ResponseReceived(stream_id=stream, headers=headers):
                    self._headers[stream] = {bytes(k): bytes(v) for k, v in headers}
                case (
                    h2.events.StreamEnded(stream_id=stream)
                    | h2.events.StreamReset(stream_id=stream)
                ):
                    self._ended.add(stream)
                case h2.events.DataReceived(stream_id=stream, flow_controlled_length=length):
                    self._h2.acknowledge_received_data(length, stream)
                case _:
                    pass
        self._sock.sendall(self._h2.data_to_send())


def holds_the_slot(headers: dict[bytes, bytes]) -> bool:
    return headers.get(b"harness-stream") == b"open" and b"grpc-status" not in headers


# --- cancel and reopen at once -------------------------------------------------------------


@pytest.mark.parametrize("takeover", [False, True], ids=["plain", "takeover"])
async def test_cancelling_a_stream_and_reopening_it_at_once_after_unary_calls_never_fails(
    takeover: bool,
):
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        token = await gw.register("bob")
        async with raw_stub(gw.address) as stub:
            call = stub.Messages(endpoint_pb2.MessagesRequest(), metadata=bearer(token))
            assert await opened(call)
            for round_ in range(ROUNDS):
                call.cancel()
                await unary_calls(stub, token, round_)
                call = stub.Messages(
                    endpoint_pb2.MessagesRequest(takeover=takeover), metadata=bearer(token)
                )
                assert await opened(call), f"round {round_}"
            # The last stream is the live one: it delivers.
            async with await harness_client.connect(gw.address, token=alice_token) as alice:
                await alice.send(MessageInput(to="agent:bob", text="to the last stream"))
            response = await asyncio.wait_for(call.read(), BOUND)
            assert isinstance(response, endpoint_pb2.MessagesResponse)
            assert response.delivery.item.WhichOneof("kind") == "multicast"
            call.cancel()
        await wait_listening(gw, "bob", False)


@pytest.mark.parametrize("unary", [0, 1, 3], ids=["in-one-write", "after-a-call", "after-3-calls"])
async def test_a_reopened_stream_that_reaches_the_gateway_before_the_old_ones_cancel_gets_the_slot(
    unary: int,
):
    async with run_gateway() as gw:
        token = await gw.register("bob")
        connection = await asyncio.to_thread(RawConnection, gw.address, token)
        request = endpoint_pb2.MessagesRequest().SerializeToString()
        read_send = endpoint_pb2.ReadSendRequest(idempotency_key="k").SerializeToString()
        try:
            old = connection.start(MESSAGES, request)
            await asyncio.to_thread(connection.flush)
            assert holds_the_slot(await asyncio.to_thread(connection.response_headers, old))
            for round_ in range(ROUNDS):
                # grpc-js's order: the new stream goes out before the old one's RST_STREAM.
                # With unary calls, the RST_STREAM follows their answers, so the gateway
                # has run the new stream's handler before it learns of the cancellation.
                new = connection.start(MESSAGES, request)
                calls = [connection.start(READ_SEND, read_send) for _ in range(unary)]
                if calls:
                    await asyncio.to_thread(connection.flush)
                    for unary_call in calls:
                        await asyncio.to_thread(connection.wait_ended, unary_call)
                connection.cancel(old)
                await asyncio.to_thread(connection.flush)
                headers = await asyncio.to_thread(connection.response_headers, new)
                assert holds_the_slot(headers), f"round {round_}: {headers!r}"
                old = new
            assert (await gw.gateway.components.management.agent_status("bob")).stream_attached
        finally:
            await asyncio.to_thread(connection.close)
        await wait_listening(gw, "bob", False)


# --- the rule that stays -------------------------------------------------------------------


async def test_a_second_live_stream_still_fails_already_listening_and_the_first_keeps_going():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        bob_token = await gw.register("bob")
        async with (
            raw_stub(gw.address) as stub,
            await harness_client.connect(gw.address, token=alice_token) as alice,
        ):
            first = stub.Messages(endpoint_pb2.MessagesRequest(), metadata=bearer(bob_token))
            assert await opened(first)
            second = stub.Messages(endpoint_pb2.MessagesRequest(), metadata=bearer(bob_token))
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await asyncio.wait_for(second.read(), BOUND)
            assert raised.value.code() is grpc.StatusCode.FAILED_PRECONDITION
            failure = harness_client.decode_status(raised.value)
            assert isinstance(failure, ListenError)
            assert failure.reason == ListenErrorReason.ALREADY_LISTENING
            assert OPEN not in tuple(await second.initial_metadata() or ())

            await alice.send(MessageInput(to="agent:bob", text="still the first's"))
            response = await asyncio.wait_for(first.read(), BOUND)
            assert isinstance(response, endpoint_pb2.MessagesResponse)
            assert response.delivery.item.WhichOneof("kind") == "multicast"
            first.cancel()
        await wait_listening(gw, "bob", False)


async def test_a_take_over_gets_the_slot_and_ends_the_live_stream_with_already_listening():
    async with run_gateway() as gw:
        token = await gw.register("bob")
        async with raw_stub(gw.address) as stub:
            first = stub.Messages(endpoint_pb2.MessagesRequest(), metadata=bearer(token))
            assert await opened(first)
            taker = stub.Messages(
                endpoint_pb2.MessagesRequest(takeover=True), metadata=bearer(token)
            )
            assert await opened(taker)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await asyncio.wait_for(first.read(), BOUND)
            assert raised.value.code() is grpc.StatusCode.FAILED_PRECONDITION
            failure = harness_client.decode_status(raised.value)
            assert isinstance(failure, ListenError)
            assert failure.reason == ListenErrorReason.ALREADY_LISTENING
            assert (await gw.gateway.components.management.agent_status("bob")).stream_attached
            taker.cancel()
        await wait_listening(gw, "bob", False)

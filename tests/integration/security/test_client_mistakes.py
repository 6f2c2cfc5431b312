"""A client's mistake is a typed client error: a status, an ErrorInfo, a count, no ERROR line.

Each case once reached the gateway's log as an ERROR traceback (and answered UNKNOWN or
INTERNAL): an undecodable body or a string field that is not UTF-8 (cygrpc's DecodeError,
before authentication), `Health/List` (not implemented by grpcio-health-checking), and an
invalid idempotency key (its metric label was missing, so counting the refusal failed).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Final

import grpc
import harness_client
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness_client import MessageInput
from harness_contract._gen.harness.v1 import endpoint_pb2

from gateway.testing import RunningGateway, run_gateway

SEND = "/harness.v1.HarnessEndpointService/Send"
MESSAGES = "/harness.v1.HarnessEndpointService/Messages"
LIST_AGENTS = "/harness.v1.ManagementService/ListAgents"


def _not_utf8_send() -> bytes:
    """A SendRequest whose `input.message.to` string holds the bytes C3 28 (not UTF-8)."""
    request = endpoint_pb2.SendRequest()
    request.input.message.to = "ZZ"
    request.input.message.text = "hello"
    return request.SerializeToString().replace(b"ZZ", b"\xc3\x28")


NOT_UTF8_SEND: Final = _not_utf8_send()
INVALID_KEYS = ("", "k" * 129, "a\x00b", "é" * 65)
"""Empty, 129 bytes, a NUL, and 65 two-byte characters (130 UTF-8 bytes)."""


def _raw(body: bytes) -> bytes:
    return body


@pytest.fixture
async def gw() -> AsyncIterator[RunningGateway]:
    async with run_gateway() as running:
        yield running


def error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo | None:
    """The `harness.v1` ErrorInfo of a failed call's `grpc-status-details-bin`."""
    for key, value in error.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return info
    return None


def count(gw: RunningGateway, name: str, labels: dict[str, str]) -> float:
    value = gw.gateway.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def rejected(gw: RunningGateway) -> float:
    return count(gw, "harness_rejected_requests_total", {"reason": "malformed-request"})


def error_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{record.name}: {record.getMessage()}"
        for record in caplog.records
        if record.levelno >= logging.ERROR
    ]


async def raw_unary(
    address: str, path: str, body: bytes, metadata: tuple[tuple[str, str], ...] = ()
) -> grpc.aio.AioRpcError:
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_unary(path, request_serializer=_raw, response_deserializer=_raw)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(body, metadata=metadata, timeout=10)
    return raised.value


@pytest.mark.parametrize(
    ("case", "body"),
    [
        ("bytes that are not protobuf", b"\xff\xff\xff"),
        ("a string field that is not UTF-8", NOT_UTF8_SEND),
    ],
    ids=["not-protobuf", "not-utf8"],
)
async def test_an_undecodable_send_body_is_invalid_argument_malformed_request_before_auth(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture, case: str, body: bytes
):
    caplog.set_level(logging.WARNING)
    before = rejected(gw)
    error = await raw_unary(gw.address, SEND, body)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, case
    assert error.details() == "the request body is not a valid harness.v1.SendRequest"
    info = error_info(error)
    assert info is not None
    assert (info.domain, info.reason) == ("harness.v1", "MALFORMED_REQUEST")
    assert rejected(gw) == before + 1
    assert error_lines(caplog) == []
    assert all("Traceback" not in record.getMessage() for record in caplog.records)
    assert all(record.exc_info is None for record in caplog.records)


async def test_an_undecodable_body_is_refused_the_same_with_a_valid_token_and_on_a_stream(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.WARNING)
    token = await gw.register("alice")
    before = rejected(gw)
    error = await raw_unary(
        gw.address, SEND, NOT_UTF8_SEND, (("authorization", f"Bearer {token}"),)
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    async with grpc.aio.insecure_channel(gw.address) as channel:
        stream = channel.unary_stream(MESSAGES, request_serializer=_raw, response_deserializer=_raw)
        call = stream(b"\x08\x02\x08", metadata=(("authorization", f"Bearer {token}"),))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            async for _ in call:
                pass
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert raised.value.details() == "the request body is not a valid harness.v1.MessagesRequest"
    info = error_info(raised.value)
    assert info is not None
    assert info.reason == "MALFORMED_REQUEST"
    management = await raw_unary(gw.address, LIST_AGENTS, b"\xff")
    assert management.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert rejected(gw) == before + 3
    assert error_lines(caplog) == []
    # The warning is rate-limited and names neither the token nor the body.
    warnings = [r.getMessage() for r in caplog.records if r.name == "gateway.rpc.decoding"]
    assert len(warnings) <= 1
    assert all(token not in line and "\\xc3" not in line for line in warnings)


async def test_a_malformed_request_counts_in_grpc_server_handled_as_invalid_argument(
    gw: RunningGateway,
):
    labels = {
        "grpc_type": "unary",
        "grpc_service": "harness.v1.HarnessEndpointService",
        "grpc_method": "Send",
        "grpc_code": "INVALID_ARGUMENT",
    }
    before = count(gw, "grpc_server_handled_total", labels)
    await raw_unary(gw.address, SEND, b"\xff\xff\xff")
    assert count(gw, "grpc_server_handled_total", labels) == before + 1
    for code in ("UNKNOWN", "INTERNAL"):
        assert count(gw, "grpc_server_handled_total", {**labels, "grpc_code": code}) == 0


async def test_health_list_answers_every_registered_status_without_an_error_line(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.WARNING)
    async with grpc.aio.insecure_channel(gw.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = await stub.List(health_pb2.HealthListRequest(), timeout=10)
    serving = health_pb2.HealthCheckResponse.SERVING
    assert {name: status.status for name, status in response.statuses.items()} == {
        "": serving,
        "liveness": serving,
        "harness.v1.HarnessEndpointService": serving,
        "harness.v1.ManagementService": serving,
    }
    assert error_lines(caplog) == []


@pytest.mark.parametrize("key", INVALID_KEYS, ids=["empty", "129-bytes", "nul", "130-utf8-bytes"])
async def test_a_send_with_an_invalid_idempotency_key_is_a_typed_invalid_request_sent_once(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture, key: str
):
    caplog.set_level(logging.WARNING)
    token = await gw.register("alice")
    await gw.register("bob")
    started_labels = {
        "grpc_type": "unary",
        "grpc_service": "harness.v1.HarnessEndpointService",
        "grpc_method": "Send",
    }
    started = count(gw, "grpc_server_started_total", started_labels)
    outcome = {"op": "multicast", "outcome": "invalid-idempotency-key"}
    counted = count(gw, "harness_sends_total", outcome)
    async with await harness_client.connect(gw.address, token=token) as alice:
        with pytest.raises(harness_client.InvalidRequestError) as raised:
            await alice.send(MessageInput(to="agent:bob", text="hello"), idempotency_key=key)
    assert raised.value.reason == "invalid-idempotency-key"
    assert "idempotency key" in raised.value.message
    # Not retried: the gateway saw exactly one Send.
    assert count(gw, "grpc_server_started_total", started_labels) == started + 1
    assert count(gw, "harness_sends_total", outcome) == counted + 1
    assert error_lines(caplog) == []


async def test_the_invalid_idempotency_key_status_carries_its_error_info(gw: RunningGateway):
    token = await gw.register("alice")
    await gw.register("bob")
    request = endpoint_pb2.SendRequest(idempotency_key="a\x00b")
    request.input.message.to = "agent:bob"
    request.input.message.text = "hello"
    error = await raw_unary(
        gw.address,
        SEND,
        request.SerializeToString(),
        (("authorization", f"Bearer {token}"),),
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(error)
    assert info is not None
    assert (info.domain, info.reason) == ("harness.v1", "INVALID_IDEMPOTENCY_KEY")


@pytest.mark.parametrize("key", INVALID_KEYS, ids=["empty", "129-bytes", "nul", "130-utf8-bytes"])
async def test_read_send_with_an_invalid_idempotency_key_is_a_typed_invalid_request(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture, key: str
):
    caplog.set_level(logging.WARNING)
    token = await gw.register("alice")
    async with await harness_client.connect(gw.address, token=token) as alice:
        with pytest.raises(harness_client.InvalidRequestError) as raised:
            await alice.read_send(key)
    assert raised.value.reason == "invalid-idempotency-key"
    assert error_lines(caplog) == []


async def test_a_valid_key_still_sends_after_invalid_ones(gw: RunningGateway):
    token = await gw.register("alice")
    await gw.register("bob")
    async with await harness_client.connect(gw.address, token=token) as alice:
        for key in INVALID_KEYS:
            with pytest.raises(harness_client.InvalidRequestError):
                await alice.send(MessageInput(to="agent:bob", text="x"), idempotency_key=key)
        await alice.send(MessageInput(to="agent:bob", text="x"), idempotency_key="k" * 128)
    assert count(gw, "harness_sends_total", {"op": "multicast", "outcome": "ok"}) == 1

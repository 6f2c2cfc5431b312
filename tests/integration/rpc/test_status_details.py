"""What the wire carries, read as a client in another language would: raw stubs, raw trailers.

endpoint.proto's header promises the shape of every failed call (a `google.rpc.Status` in
`grpc-status-details-bin`, the closed detail first as an `Any` of type URL
`type.googleapis.com/harness.v1.<Message>`, then the `ErrorInfo`). These tests hold the
gateway to it for the typed authentication detail on the agent, management and peer APIs,
and for `ParseMessageText`, whose refusal of a text is its answer, not a failed call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import harness_client
import pytest
from google.rpc import error_details_pb2, status_pb2
from harness_client import AuthenticationError, AuthenticationErrorReason, to_json
from harness_contract._gen.harness.v1 import (
    endpoint_pb2,
    endpoint_pb2_grpc,
    errors_pb2,
    management_pb2,
    management_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)

from gateway.rpc.peer import HARNESS_VERSION, VERSION_KEY
from gateway.settings import Settings
from gateway.testing import run_gateway
from tests.integration.rpc.conftest import Served

STATUS_DETAILS_KEY = "grpc-status-details-bin"
TYPE_URL_PREFIX = "type.googleapis.com/"
AUTHENTICATION_ERROR_URL = TYPE_URL_PREFIX + "harness.v1.AuthenticationError"
ERROR_INFO_URL = TYPE_URL_PREFIX + "google.rpc.ErrorInfo"
WRONG_TOKEN = "hat_" + "x" * 43


@dataclass(frozen=True, slots=True, kw_only=True)
class WireStatus:
    """A failed call as its trailers carry it."""

    code: grpc.StatusCode
    status: status_pb2.Status

    @property
    def type_urls(self) -> list[str]:
        return [detail.type_url for detail in self.status.details]

    def authentication_reason(self) -> errors_pb2.AuthenticationErrorReason.ValueType:
        detail = errors_pb2.AuthenticationError()
        assert self.status.details[0].Unpack(detail)
        return detail.reason

    def error_info(self) -> error_details_pb2.ErrorInfo:
        info = error_details_pb2.ErrorInfo()
        assert self.status.details[-1].Unpack(info)
        return info


async def wire_failure(call: Any) -> tuple[WireStatus, grpc.aio.AioRpcError]:
    """Await a call that must fail; its status as the trailer holds it, and the error."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    error = raised.value
    (raw,) = [value for key, value in error.trailing_metadata() or () if key == STATUS_DETAILS_KEY]
    assert isinstance(raw, bytes)
    status = status_pb2.Status.FromString(raw)
    assert status.code == error.code().value[0]
    return WireStatus(code=error.code(), status=status), error


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@asynccontextmanager
async def channel_to(address: str) -> AsyncIterator[grpc.aio.Channel]:
    channel = grpc.aio.insecure_channel(address)
    try:
        yield channel
    finally:
        await channel.close()


def assert_authentication_status(
    wire: WireStatus,
    reason: errors_pb2.AuthenticationErrorReason.ValueType,
    *,
    error_info: str,
    secrets: Sequence[str] = (),
) -> None:
    assert wire.code is grpc.StatusCode.UNAUTHENTICATED
    assert wire.type_urls == [AUTHENTICATION_ERROR_URL, ERROR_INFO_URL]
    assert wire.authentication_reason() == reason
    assert (wire.error_info().domain, wire.error_info().reason) == ("harness.v1", error_info)
    assert wire.status.message.startswith("authentication failed: ")
    for secret in secrets:
        assert secret not in wire.status.SerializeToString().decode("utf-8", "replace")


# --- the agent API -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "reason", "error_info"),
    [
        ((), errors_pb2.AUTHENTICATION_ERROR_REASON_MISSING, "MISSING"),
        (
            (("authorization", "Basic abc"),),
            errors_pb2.AUTHENTICATION_ERROR_REASON_MALFORMED,
            "MALFORMED",
        ),
        (bearer(WRONG_TOKEN), errors_pb2.AUTHENTICATION_ERROR_REASON_UNKNOWN, "UNKNOWN"),
    ],
)
async def test_a_refused_agent_token_carries_a_typed_authentication_error_first(
    served: Served,
    metadata: tuple[tuple[str, str], ...],
    reason: errors_pb2.AuthenticationErrorReason.ValueType,
    error_info: str,
) -> None:
    async with channel_to(served.address) as channel:
        stub = endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
        wire, error = await wire_failure(
            stub.ReadSend(endpoint_pb2.ReadSendRequest(idempotency_key="k"), metadata=metadata)
        )
    assert_authentication_status(wire, reason, error_info=error_info, secrets=[WRONG_TOKEN])
    decoded = harness_client.decode_status(error)
    assert isinstance(decoded, AuthenticationError)
    assert decoded.reason is AuthenticationErrorReason(error_info.lower())


async def test_a_revoked_token_carries_revoked_and_the_client_reads_the_enum(
    served: Served,
) -> None:
    token = await served.register("alice")
    await served.core.revoke_token("alice")
    async with channel_to(served.address) as channel:
        stub = endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
        wire, error = await wire_failure(
            stub.ReadSend(endpoint_pb2.ReadSendRequest(idempotency_key="k"), metadata=bearer(token))
        )
    assert_authentication_status(
        wire, errors_pb2.AUTHENTICATION_ERROR_REASON_REVOKED, error_info="REVOKED", secrets=[token]
    )
    decoded = harness_client.decode_status(error)
    assert isinstance(decoded, AuthenticationError)
    assert decoded.reason is AuthenticationErrorReason.REVOKED
    assert to_json(decoded)["reason"] == "revoked"


async def test_the_wrong_role_is_permission_denied_without_an_authentication_error(
    served: Served,
) -> None:
    async with channel_to(served.address) as channel:
        stub = endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
        wire, _ = await wire_failure(
            stub.ReadSend(
                endpoint_pb2.ReadSendRequest(idempotency_key="k"),
                metadata=bearer(served.admin_token),
            )
        )
    assert wire.code is grpc.StatusCode.PERMISSION_DENIED
    assert wire.type_urls == [ERROR_INFO_URL]
    assert wire.error_info().reason == "WRONG_ROLE"


# --- the management API --------------------------------------------------------------------


async def test_a_wrong_admin_token_carries_unknown_on_the_management_api(served: Served) -> None:
    async with channel_to(served.address) as channel:
        stub = management_pb2_grpc.ManagementServiceStub(channel)
        wire, error = await wire_failure(
            stub.GetGatewayStatus(
                management_pb2.GetGatewayStatusRequest(), metadata=bearer(WRONG_TOKEN)
            )
        )
        missing, _ = await wire_failure(
            stub.GetGatewayStatus(management_pb2.GetGatewayStatusRequest())
        )
    assert_authentication_status(
        wire,
        errors_pb2.AUTHENTICATION_ERROR_REASON_UNKNOWN,
        error_info="UNKNOWN",
        secrets=[WRONG_TOKEN],
    )
    assert_authentication_status(
        missing, errors_pb2.AUTHENTICATION_ERROR_REASON_MISSING, error_info="MISSING"
    )
    decoded = harness_client.decode_status(error)
    assert isinstance(decoded, AuthenticationError)
    assert decoded.reason is AuthenticationErrorReason.UNKNOWN


# --- the peer services ---------------------------------------------------------------------


async def test_the_peer_services_carry_the_same_detail_beside_peer_unauthenticated() -> None:
    peer_token = "hpeer_" + "w" * 43
    cases = [
        ((), errors_pb2.AUTHENTICATION_ERROR_REASON_MISSING),
        ((("authorization", "Token abc"),), errors_pb2.AUTHENTICATION_ERROR_REASON_MALFORMED),
        (bearer(peer_token), errors_pb2.AUTHENTICATION_ERROR_REASON_UNKNOWN),
    ]
    async with (
        run_gateway(Settings(expose_network=True)) as gateway,
        channel_to(gateway.address) as channel,
    ):
        stub = registry_pb2_grpc.RegistryServiceStub(channel)
        for metadata, reason in cases:
            wire, _ = await wire_failure(
                stub.GetRegistryKey(
                    registry_pb2.GetRegistryKeyRequest(),
                    metadata=((VERSION_KEY, HARNESS_VERSION), *metadata),
                    timeout=10,
                )
            )
            assert_authentication_status(
                wire, reason, error_info="PEER_UNAUTHENTICATED", secrets=[peer_token]
            )


# --- ParseMessageText ----------------------------------------------------------------------


async def test_a_text_that_fails_to_parse_is_the_answers_error_arm_not_a_status(
    served: Served,
) -> None:
    token = await served.register("alice")
    async with channel_to(served.address) as channel:
        stub = endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
        refused = await stub.ParseMessageText(
            endpoint_pb2.ParseMessageTextRequest(to="agent:bob", text='{"gather": 1}'),
            metadata=bearer(token),
        )
        bad_address = await stub.ParseMessageText(
            endpoint_pb2.ParseMessageTextRequest(to="bob", text="hello"),
            metadata=bearer(token),
        )
        parsed = await stub.ParseMessageText(
            endpoint_pb2.ParseMessageTextRequest(to="agent:bob", text="hello"),
            metadata=bearer(token),
        )
    assert refused.WhichOneof("result") == "error"
    assert refused.error.operation == errors_pb2.MESSAGE_TEXT_OPERATION_GATHER
    assert "deadline: is missing" in refused.error.detail
    assert bad_address.WhichOneof("result") == "error"
    assert bad_address.error.operation == errors_pb2.MESSAGE_TEXT_OPERATION_MESSAGE
    assert bad_address.error.detail.startswith("to: ")
    assert parsed.WhichOneof("result") == "input"
    assert parsed.input.message.text == "hello"


async def test_the_client_still_raises_message_text_error_from_the_error_arm(
    served: Served,
) -> None:
    async with await served.connect("alice") as alice:
        with pytest.raises(harness_client.MessageTextError) as raised:
            await alice.parse_message_text("agent:bob", '{"action": "cancel"}')
    assert raised.value.operation is harness_client.MessageTextOperation.ANSWER
    assert raised.value.message.startswith("answer not sent: action: ")

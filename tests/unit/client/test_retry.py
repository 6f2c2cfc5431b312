from __future__ import annotations

import json

import grpc
import pytest
from harness_client import (
    AuthenticationError,
    AuthenticationErrorReason,
    HarnessError,
    IdempotencyConflictError,
    ListenError,
    ListenErrorReason,
    SendError,
    SendErrorReason,
    TransportError,
    UnavailableError,
    UnavailableReason,
    should_reconnect,
)
from harness_client._retry import (
    SERVICE_CONFIG_JSON,
    Backoff,
    had_no_effect,
    never_sent,
    send_may_retry,
)

REFUSED = TransportError(
    grpc.StatusCode.UNAVAILABLE,
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
    "Failed to connect to remote host: Connection refused",
)


def test_a_stream_reconnects_after_transport_failures_and_shutdown_only():
    assert should_reconnect(TransportError(grpc.StatusCode.UNAVAILABLE, "reset"))
    assert should_reconnect(UnavailableError(UnavailableReason.SHUTTING_DOWN, "bye"))
    assert not should_reconnect(ListenError(ListenErrorReason.ALREADY_LISTENING))
    assert not should_reconnect(AuthenticationError(AuthenticationErrorReason.REVOKED, "no"))
    assert not should_reconnect(TransportError(grpc.StatusCode.UNIMPLEMENTED, "no such method"))


@pytest.mark.parametrize(
    "failure",
    [
        UnavailableError(UnavailableReason.NOT_READY, "starting"),
        UnavailableError(UnavailableReason.SHUTTING_DOWN, "stopping"),
        REFUSED,
    ],
)
def test_any_send_is_sent_again_after_a_refusal_that_had_no_effect(failure: HarnessError):
    assert send_may_retry(failure, keyed=False)
    assert send_may_retry(failure, keyed=True)


@pytest.mark.parametrize(
    "failure",
    [
        SendError(SendErrorReason.OUTCOME_UNKNOWN),
        TransportError(grpc.StatusCode.UNAVAILABLE, "Socket closed"),
        TransportError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"),
        TransportError(grpc.StatusCode.UNKNOWN, "Stream removed"),
        TransportError(grpc.StatusCode.INTERNAL, "RST_STREAM"),
    ],
)
def test_only_a_keyed_send_is_sent_again_when_its_outcome_is_unknown(failure: HarnessError):
    assert send_may_retry(failure, keyed=True)
    assert not send_may_retry(failure, keyed=False)


def test_a_keyless_send_the_gateway_refused_unavailable_is_sent_again_a_keyed_one_is_kept():
    refused = SendError(SendErrorReason.CERTIFICATION_UNAVAILABLE)
    assert send_may_retry(refused, keyed=False)
    # Under a key the refusal is the kept outcome: sending again would only return it.
    assert not send_may_retry(refused, keyed=True)


@pytest.mark.parametrize(
    "failure",
    [
        SendError(SendErrorReason.DELIVERY_PENDING),
        SendError(SendErrorReason.UNKNOWN_AGENT),
        IdempotencyConflictError("k"),
        AuthenticationError(AuthenticationErrorReason.REVOKED, "no"),
        TransportError(grpc.StatusCode.UNIMPLEMENTED, "no such method"),
    ],
)
def test_a_send_with_a_definite_answer_is_never_sent_again(failure: HarnessError):
    assert not send_may_retry(failure, keyed=True)
    assert not send_may_retry(failure, keyed=False)


def test_a_refused_connection_never_sent_the_request():
    assert never_sent(REFUSED)
    assert never_sent(UnavailableError(UnavailableReason.NOT_READY, "starting"))
    assert not never_sent(TransportError(grpc.StatusCode.UNAVAILABLE, "Socket closed"))
    assert not never_sent(TransportError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))


def test_backoff_starts_at_a_fifth_of_a_second_and_doubles_to_one_second_with_jitter():
    backoff = Backoff()
    delays = [backoff.next_delay() for _ in range(10)]
    assert 0.1 <= delays[0] <= 0.2
    assert 0.2 <= delays[1] <= 0.4
    assert all(delay <= 1.0 for delay in delays)
    assert all(delay >= 0.5 for delay in delays[3:])
    backoff.reset()
    assert backoff.next_delay() <= 0.2


def test_the_service_config_retries_only_idempotent_methods_on_unavailable():
    config = json.loads(SERVICE_CONFIG_JSON)
    [method_config] = config["methodConfig"]
    assert {name["method"] for name in method_config["name"]} == {
        "Acknowledge",
        "ReadSend",
        "ParseMessageText",
    }
    assert method_config["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE"]
    assert config["retryThrottling"] == {"maxTokens": 10, "tokenRatio": 0.1}


def test_only_an_unavailable_answer_or_a_request_that_never_left_had_no_effect():
    assert had_no_effect(SendError(SendErrorReason.NETWORK_UNAVAILABLE))
    assert had_no_effect(UnavailableError(UnavailableReason.SHUTTING_DOWN, "stopping"))
    assert had_no_effect(REFUSED)
    assert not had_no_effect(SendError(SendErrorReason.OUTCOME_UNKNOWN))
    assert not had_no_effect(SendError(SendErrorReason.DELIVERY_PENDING))
    assert not had_no_effect(TransportError(grpc.StatusCode.UNAVAILABLE, "Socket closed"))

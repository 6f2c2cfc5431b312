from __future__ import annotations

import json

import grpc
from harness_client import (
    AuthenticationError,
    AuthenticationErrorReason,
    ListenError,
    ListenErrorReason,
    TransportError,
    UnavailableError,
    UnavailableReason,
    should_reconnect,
)
from harness_client._retry import SERVICE_CONFIG_JSON, Backoff, never_sent, should_retry_keyed_send


def test_a_stream_reconnects_after_transport_failures_and_shutdown_only():
    assert should_reconnect(TransportError(grpc.StatusCode.UNAVAILABLE, "reset"))
    assert should_reconnect(UnavailableError(UnavailableReason.SHUTTING_DOWN, "bye"))
    assert not should_reconnect(ListenError(ListenErrorReason.ALREADY_LISTENING))
    assert not should_reconnect(AuthenticationError(AuthenticationErrorReason.REVOKED, "no"))
    assert not should_reconnect(TransportError(grpc.StatusCode.UNIMPLEMENTED, "no such method"))


def test_a_keyed_send_is_retried_after_a_transport_failure_but_not_past_its_deadline():
    assert should_retry_keyed_send(TransportError(grpc.StatusCode.UNAVAILABLE, "reset"))
    assert not should_retry_keyed_send(TransportError(grpc.StatusCode.DEADLINE_EXCEEDED, "late"))


def test_a_refused_connection_never_sent_the_request():
    refused = TransportError(
        grpc.StatusCode.UNAVAILABLE,
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
        "Failed to connect to remote host: Connection refused",
    )
    assert never_sent(refused)
    assert never_sent(UnavailableError(UnavailableReason.NOT_READY, "starting"))
    assert not never_sent(TransportError(grpc.StatusCode.UNAVAILABLE, "Socket closed"))
    assert not never_sent(TransportError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))


def test_backoff_starts_at_a_fifth_of_a_second_and_doubles_to_ten_seconds_with_jitter():
    backoff = Backoff()
    delays = [backoff.next_delay() for _ in range(10)]
    assert 0.1 <= delays[0] <= 0.2
    assert 0.2 <= delays[1] <= 0.4
    assert all(delay <= 10.0 for delay in delays)
    assert delays[-1] >= 5.0
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

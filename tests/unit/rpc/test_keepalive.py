"""The one keepalive policy: its rule, its channel arguments, and the Python client's copy."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from harness_client import _channel

from gateway.rpc.keepalive import (
    CLIENT_INTERVAL_MARGIN,
    CLUSTER_PEER_KEEPALIVE,
    DEFAULT_KEEPALIVE,
    OPTION_NAMES,
    KeepalivePolicy,
)
from gateway.rpc.peer import channel_options as peer_channel_options
from gateway.rpc.server import server_options
from gateway.settings import Settings


def test_the_python_client_pings_as_the_gateway_policy_says():
    client = dict(_channel.channel_options())
    for name, value in DEFAULT_KEEPALIVE.client_options():
        assert client[name] == value, name


def test_peer_channels_ping_as_the_policy_they_are_given():
    policy = KeepalivePolicy(client_time=3.0, client_timeout=1.0, min_client_interval=1.5)
    options = dict(peer_channel_options(policy))
    assert options["grpc.keepalive_time_ms"] == 3_000
    assert options["grpc.keepalive_timeout_ms"] == 1_000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.http2.max_pings_without_data"] == 0
    # C-core gives an unanswered ping `ping_timeout_ms` (60 s unless set), not the keepalive
    # timeout: a half-open connection is found within time + timeout only with both.
    assert options["grpc.http2.ping_timeout_ms"] == 1_000


def test_the_default_settings_give_the_default_policy():
    assert KeepalivePolicy.from_settings(Settings()) == DEFAULT_KEEPALIVE
    assert dict(DEFAULT_KEEPALIVE.server_options()) == {
        "grpc.keepalive_time_ms": 30_000,
        "grpc.keepalive_timeout_ms": 10_000,
        "grpc.keepalive_permit_without_calls": 1,
        "grpc.http2.min_ping_interval_without_data_ms": 10_000,
        "grpc.http2.max_ping_strikes": 2,
        "grpc.http2.ping_timeout_ms": 10_000,
    }


def test_every_option_name_is_one_grpcio_knows():
    # gRPC ignores an unknown channel argument without a word: the misspelt
    # `grpc.http2.min_recv_ping_interval_without_data_ms` left C-core's 5-minute default in
    # force and sent every idle stream GOAWAY too_many_pings after three pings.
    cygrpc = next((Path(grpc.__file__).parent / "_cython").glob("cygrpc*.so"))
    text = cygrpc.read_bytes()
    for name in OPTION_NAMES:
        assert name.encode() in text, name
    assert b"grpc.http2.min_recv_ping_interval_without_data_ms" not in text


def test_clients_must_ping_at_twice_the_interval_the_server_accepts():
    KeepalivePolicy(client_time=20.0, min_client_interval=10.0)
    with pytest.raises(ValueError, match="HARNESS_KEEPALIVE_MIN_CLIENT_INTERVAL"):
        KeepalivePolicy(client_time=19.9, min_client_interval=10.0)
    with pytest.raises(ValueError, match="at least 2 times"):
        KeepalivePolicy.from_settings(Settings(keepalive_time=15.0))


@pytest.mark.parametrize(
    "field", ["client_time", "client_timeout", "server_time", "server_timeout"]
)
def test_a_policy_refuses_an_interval_that_is_not_positive(field: str):
    with pytest.raises(ValueError, match=field):
        KeepalivePolicy(**{field: 0.0})  # type: ignore[arg-type]


def test_a_policy_refuses_negative_strikes():
    with pytest.raises(ValueError, match="max_ping_strikes"):
        KeepalivePolicy(max_ping_strikes=-1)


def test_an_extra_client_option_replaces_the_default_of_its_name():
    options = _channel.channel_options([("grpc.keepalive_time_ms", 1_000), ("grpc.x", 1)])
    names = [name for name, _ in options]
    assert len(names) == len(set(names))
    assert dict(options)["grpc.keepalive_time_ms"] == 1_000
    assert dict(options)["grpc.x"] == 1


def test_cluster_peer_channels_ping_every_5_s_with_a_2_s_timeout_while_a_call_is_open():
    # cluster.md §9.1: a home that vanished without a reset is found within 7 s.
    options = dict(peer_channel_options(CLUSTER_PEER_KEEPALIVE))
    assert options["grpc.keepalive_time_ms"] == 5_000
    assert options["grpc.keepalive_timeout_ms"] == 2_000
    assert options["grpc.keepalive_permit_without_calls"] == 0
    assert options["grpc.http2.max_pings_without_data"] == 0
    # C-core gives an unanswered keepalive ping this timeout, not the keepalive timeout.
    assert options["grpc.http2.ping_timeout_ms"] == 2_000


def test_a_cluster_replicas_server_accepts_its_peers_pings_and_agents_clients_alike():
    accepted = dict(server_options(Settings(cluster=True)))[
        "grpc.http2.min_ping_interval_without_data_ms"
    ]
    assert accepted <= 5_000
    # Each client pings at least twice the accepted interval, so no GOAWAY too_many_pings:
    # the replicas' peer channels, and the agents' own clients with the shipped numbers.
    for client_ping_ms in (
        CLUSTER_PEER_KEEPALIVE.client_options()[0][1],
        dict(_channel.channel_options())["grpc.keepalive_time_ms"],
    ):
        assert client_ping_ms >= CLIENT_INTERVAL_MARGIN * accepted
    # Outside a cluster nothing changes.
    assert dict(server_options(Settings()))["grpc.http2.min_ping_interval_without_data_ms"] == (
        10_000
    )

"""The standalone `router` and `registry` roles and the `serve` flags that join or expose
them, as real processes: health, ready lines, ordered stops, peer tokens and refusals."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import grpc
import harness_client
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness_client import MessageInput

from gateway.cli import main
from gateway.testing_network import NetworkProcess, ProcessFailed, run_network
from tests.e2e.network_support import register
from tests.integration.network.support import message_of, next_delivery

pytestmark = pytest.mark.e2e

BOUND: Final = 30.0
"""Seconds any one wait may take."""


def write_token(directory: Path, name: str = "peer-token") -> Path:
    path = directory / name
    path.write_text("hpeer_" + secrets.token_urlsafe(32) + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


@contextlib.asynccontextmanager
async def started(*processes: NetworkProcess) -> AsyncIterator[None]:
    """Start each process in turn; stop every one of them when the block ends."""
    try:
        for process in processes:
            await process.start()
        yield
    finally:
        for process in reversed(processes):
            await process.close()


async def health_status(address: str, service: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        response = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=BOUND
        )
    return int(response.status)


@pytest.mark.timeout(120)
async def test_standalone_processes_report_ready_serve_health_and_stop_in_order_with_status_zero():
    async with run_network(daemons=0) as network:
        router, registry = network.router, network.registry
        assert router.ready_line["role"] == "router"
        assert str(router.ready_line["instance_id"]).startswith("rti_")
        assert registry.ready_line["role"] == "registry"
        assert registry.ready_line["data_dir"] == str(registry.data_dir)
        assert registry.ready_line["store"] == "sqlite"
        # What --registry-public-key pins (docs/deploy.md): 32 bytes, unpadded base64url.
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", str(registry.ready_line["registry_public_key"]))
        serving = health_pb2.HealthCheckResponse.SERVING
        for process, service in (
            (router, "harness.v1.RouterService"),
            (registry, "harness.v1.RegistryService"),
        ):
            for name in ("", service, "liveness"):
                assert await health_status(process.address, name) == serving
        assert await router.stop() == 0
        assert await registry.stop() == 0
        for process in (router, registry):
            assert "shutdown requested" in process.stderr
            assert '"msg": "stopped steps=' in process.stderr


@pytest.mark.timeout(120)
async def test_a_daemon_exposing_its_embedded_network_is_joined_by_another(tmp_path):
    (tmp_path / "hub").mkdir()
    (tmp_path / "spoke").mkdir()
    # No --peer-token-file: the hub creates <data-dir>/peer-token, and names it.
    hub = NetworkProcess("serve", "hub", data_dir=tmp_path / "hub", args=["--expose-network"])
    spoke = NetworkProcess("serve", "spoke", data_dir=tmp_path / "spoke", args=[])
    async with started(hub):
        token = tmp_path / "hub" / "peer-token"
        assert hub.ready_line["peer_token_file"] == str(token)
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        spoke.args = ["--router", hub.address, "--registry", hub.target]
        spoke.args += ["--peer-token-file", str(token)]
        async with started(spoke):
            assert hub.ready_line["mode"] == "embedded"
            assert spoke.ready_line["mode"] == "joined"
            assert hub.ready_line["store"] == spoke.ready_line["store"] == "sqlite"
            assert (
                await health_status(hub.address, "harness.v1.RouterService")
                == health_pb2.HealthCheckResponse.SERVING
            )
            alice_token = await register(hub, "alice")
            bob_token = await register(spoke, "bob")
            async with (
                await harness_client.connect(hub.address, token=alice_token) as alice,
                await harness_client.connect(spoke.address, token=bob_token) as bob,
            ):
                await asyncio.wait_for(
                    bob.send(MessageInput(to="agent:alice", text="via the hub")), BOUND
                )
                delivery = await next_delivery(alice.messages())
                assert message_of(delivery).sender == "agent:bob"


@pytest.mark.timeout(120)
async def test_a_daemon_without_the_peer_token_cannot_join_and_exits_non_zero(tmp_path):
    async with run_network(daemons=0) as network:
        (tmp_path / "intruder").mkdir()
        peers = ["--router", network.router.target, "--registry", network.registry.target]
        intruder = NetworkProcess("serve", "intruder", data_dir=tmp_path / "intruder", args=peers)
        with pytest.raises(ProcessFailed) as raised:
            async with started(intruder):
                pytest.fail("a daemon joined without a peer token")
        assert raised.value.returncode == 2
        assert "needs --peer-token-file" in raised.value.stderr
        intruder.args = [*peers, "--peer-token-file", str(write_token(tmp_path))]
        with pytest.raises(ProcessFailed) as raised:
            async with started(intruder):
                pytest.fail("a daemon joined with another peer token")
        assert raised.value.returncode == 1
        assert "UNAUTHENTICATED" in raised.value.stderr


@pytest.mark.timeout(60)
async def test_a_router_without_a_registry_is_a_usage_error():
    router = NetworkProcess("router", "router", data_dir=None, args=[])
    with pytest.raises(ProcessFailed) as raised:
        async with started(router):
            pytest.fail("a router started without a registry")
    assert raised.value.returncode == 2
    assert "--registry" in raised.value.stderr


@pytest.mark.timeout(60)
async def test_a_standalone_router_without_the_peer_token_is_a_usage_error_naming_the_flag():
    router = NetworkProcess(
        "router", "router", data_dir=None, args=["--registry", "grpc://127.0.0.1:1"]
    )
    with pytest.raises(ProcessFailed) as raised:
        async with started(router):
            pytest.fail("a router started without a peer token")
    assert raised.value.returncode == 2
    assert "the standalone Router needs --peer-token-file" in raised.value.stderr


def test_check_config_normalises_peers_and_shows_the_new_settings(capsys):
    key = "A" * 43
    assert (
        main(
            [
                "check-config",
                "--router",
                "127.0.0.1:7771",
                "--registry",
                "grpc://127.0.0.1:7772",
                "--registry-public-key",
                key,
                "--peer-token-file",
                "/run/secrets/peer-token",
            ]
        )
        == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert shown["router"] == "grpc://127.0.0.1:7771"
    assert shown["registry"] == "grpc://127.0.0.1:7772"
    assert shown["registry_public_key"] == key
    assert shown["expose_network"] is False
    assert main(["check-config", "--router", "nats://127.0.0.1:4222,127.0.0.1:4223"]) == 0
    assert json.loads(capsys.readouterr().out)["router"] == (
        "nats://127.0.0.1:4222,nats://127.0.0.1:4223"
    )
    assert main(["check-config", "--router", "amqp://127.0.0.1:5672"]) == 2
    assert "only grpc://" in capsys.readouterr().err
    assert main(["check-config", "--router", "nats://user:secret@127.0.0.1:4222"]) == 2
    assert "--nats-creds" in capsys.readouterr().err
    assert main(["check-config", "--expose-network", "--router", "127.0.0.1:7771"]) == 2

"""Graceful shutdown of a real daemon process under traffic (operations.md §5).

SIGTERM turns health NOT_SERVING before the server stops; every call waiting at the time
gets an answer; no bound intent is lost: after a restart every one of them certifies."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from pathlib import Path

import grpc
import harness_client
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from harness_client import HarnessError, MessageInput

from gateway.testing import RunningDaemon, run_daemon
from tests.support import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SENDS = 40
"""Sends that succeed before the signal, so it lands in steady traffic."""
SENDERS = 8
"""Senders sending one message after another until a send fails."""
SEND_DEADLINE = 10.0
"""Client deadline of each send, its retries of a refusal included."""
SHUTDOWN_FAILURES = frozenset({"SendError:network-unavailable", "SendError:delivery-pending"})
"""What a send may meet once the daemon stops: refused before anything was bound, or bound and
certified after the restart."""


async def health(address: str, service: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
        return int(response.status)


async def tokens_for(daemon: RunningDaemon, *names: str) -> dict[str, str]:
    async with await harness_client.connect_management(
        daemon.address, admin_token=daemon.admin_token
    ) as client:
        return {name: (await client.register_agent(name)).token for name in names}


def open_intents(data_dir: Path) -> int:
    with sqlite3.connect(f"file:{data_dir / 'gateway.sqlite3'}?mode=ro", uri=True) as db:
        return int(
            db.execute("SELECT COUNT(*) FROM post_intents WHERE state = 'open'").fetchone()[0]
        )


def intents(data_dir: Path) -> tuple[int, int]:
    with sqlite3.connect(f"file:{data_dir / 'gateway.sqlite3'}?mode=ro", uri=True) as db:
        total = db.execute("SELECT COUNT(*) FROM post_intents").fetchone()[0]
        certified = db.execute(
            "SELECT COUNT(DISTINCT post_id) FROM certified_records WHERE author IN "
            "(SELECT agent_id FROM identities WHERE agent_name = 'alice')"
        ).fetchone()[0]
        return int(total), int(certified)


async def test_sigterm_under_traffic_flips_health_first_answers_every_call_and_loses_no_intent():
    async with run_daemon(extra_args=("--shutdown-delay", "1s")) as daemon:
        tokens = await tokens_for(daemon, "alice", "bob")
        serving = health_pb2.HealthCheckResponse.SERVING
        assert await health(daemon.address, "harness.v1.HarnessEndpointService") == serving
        async with await harness_client.connect(daemon.address, token=tokens["alice"]) as alice:
            certified_sends = 0

            async def sender(index: int) -> str:
                """Sends until a send fails; the failure, as `type:reason`."""
                nonlocal certified_sends
                for number in itertools.count():
                    try:
                        # A send refused by the stopping daemon is sent again until its
                        # deadline (operations.md §10): short, so each sender ends soon after.
                        await alice.send(
                            MessageInput(to="agent:bob", text=f"under traffic {index}.{number}"),
                            deadline=SEND_DEADLINE,
                        )
                    except HarnessError as error:
                        return f"{type(error).__name__}:{getattr(error, 'reason', '')}"
                    certified_sends += 1
                raise AssertionError("unreachable")

            senders = [asyncio.ensure_future(sender(index)) for index in range(SENDERS)]

            # The signal lands in steady traffic: sends are bound, certifying and answered.
            async def count() -> int:
                return certified_sends

            await eventually(count, lambda sent: sent >= SENDS, within=60)
            daemon.process.send_signal(15)
            # During the shutdown delay the process still answers health: NOT_SERVING.
            not_serving = await eventually(
                lambda: health(daemon.address, "harness.v1.HarnessEndpointService"),
                lambda status: status == health_pb2.HealthCheckResponse.NOT_SERVING,
                within=5,
            )
            assert not_serving == health_pb2.HealthCheckResponse.NOT_SERVING
            assert await health(daemon.address, "liveness") == serving
            # Every sender's last call got an answer, and each is a closed failure that says
            # what became of the message.
            failures = await asyncio.wait_for(asyncio.gather(*senders), 60)
        assert set(failures) <= SHUTDOWN_FAILURES, failures
        returncode = await asyncio.wait_for(daemon.process.wait(), 60)
        assert returncode == 0, daemon.stderr
        await daemon.restart()
        # Every intent bound before the signal certifies after the restart.
        await eventually(
            lambda: asyncio.to_thread(open_intents, daemon.data_dir),
            lambda count: count == 0,
            within=60,
        )
        total, certified = await asyncio.to_thread(intents, daemon.data_dir)
        assert certified == total
        assert total >= certified_sends >= SENDS


async def test_a_second_signal_skips_the_waits():
    async with run_daemon(extra_args=("--shutdown-delay", "30s")) as daemon:
        daemon.process.send_signal(15)
        await eventually(
            lambda: health(daemon.address, "harness.v1.HarnessEndpointService"),
            lambda status: status == health_pb2.HealthCheckResponse.NOT_SERVING,
            within=5,
        )
        daemon.process.send_signal(2)
        returncode = await asyncio.wait_for(daemon.process.wait(), 20)
        assert returncode == 0, daemon.stderr

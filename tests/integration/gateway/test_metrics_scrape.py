"""A scrape of /metrics after real traffic (operations.md §2; issue 6 Done means)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import urllib.request
from dataclasses import replace
from typing import Any

import harness_client
import pytest
from harness_client import AskOperation, CollectiveOp, MessageInput, ResponseInput, SendError
from harness_client import Decline as ClientDecline
from prometheus_client.parser import text_string_to_metric_families

from gateway.settings import Settings
from gateway.testing import RunningGateway, run_gateway
from tests.support import eventually

S: dict[str, Any] = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


def scrape(gw: RunningGateway) -> str:
    address = gw.gateway.metrics_address
    assert address is not None
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        return str(response.read().decode())


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_a_scrape_after_traffic_counts_what_happened():
    settings = replace(Settings(), metrics_listen="127.0.0.1:0")
    async with run_gateway(settings) as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob", "carol")}
        async with (
            await harness_client.connect(gw.address, token=tokens["alice"]) as alice,
            await harness_client.connect(gw.address, token=tokens["bob"]) as bob,
        ):
            for index in range(3):
                await alice.send(MessageInput(to="agent:bob", text=f"d{index}"))
            for index in range(2):
                await alice.send(MessageInput(to="group:bob,carol", text=f"g{index}"))
            with pytest.raises(SendError):
                await alice.send(MessageInput(to="agent:nobody", text="refused"))
            await alice.send(
                MessageInput(
                    to="agent:bob",
                    text="ok?",
                    collective=AskOperation(
                        op=CollectiveOp.GATHER, deadline=60, requested_schema=S
                    ),
                )
            )
            stream = bob.messages()
            acknowledged = 0
            for _ in range(6):
                delivery = await asyncio.wait_for(stream.__anext__(), 20)
                await delivery.acknowledge()
                acknowledged += 1
            await stream.aclose()
            await bob.send(ResponseInput(to="agent:alice", response=ClientDecline()))

        def settled(found: dict[Any, float]) -> bool:
            return (
                value(
                    found,
                    "harness_collective_member_outcomes_total",
                    op="gather",
                    outcome="declined",
                )
                == 1
            )

        found = await eventually(lambda: asyncio.to_thread(lambda: samples(scrape(gw))), settled)
        assert (
            value(found, "harness_certification_seconds_count", op="multicast", kind="direct") == 3
        )
        assert (
            value(found, "harness_certification_seconds_count", op="multicast", kind="group") == 2
        )
        assert value(found, "harness_certification_seconds_count", op="gather", kind="direct") == 1
        assert value(found, "harness_certification_seconds_count", op="answer", kind="direct") == 1
        assert value(found, "harness_sends_total", op="multicast", outcome="ok") == 5
        assert value(found, "harness_sends_total", op="multicast", outcome="unknown-agent") == 1
        assert value(found, "harness_sends_total", op="gather", outcome="ok") == 1
        assert (
            value(
                found,
                "grpc_server_handled_total",
                grpc_type="unary",
                grpc_service="harness.v1.HarnessEndpointService",
                grpc_method="Send",
                grpc_code="OK",
            )
            == 7
        )
        published = sum(
            value(found, "harness_deliveries_published_total", item=item)
            for item in ("multicast", "collectiveRequest", "collectiveResult", "operationFailed")
        )
        acked = sum(
            value(found, "harness_deliveries_acknowledged_total", item=item)
            for item in ("multicast", "collectiveRequest", "collectiveResult", "operationFailed")
        )
        assert acked == acknowledged
        summary = await gw.gateway.components.store.unread_summary()
        backlog = sum(count for count, _ in summary.values())
        assert published == acked + backlog
        text = scrape(gw)
        promtool = shutil.which("promtool")
        if promtool is not None:
            checked = await asyncio.to_thread(
                subprocess.run,
                [promtool, "check", "metrics"],
                input=text.encode(),
                capture_output=True,
                check=False,
            )
            assert checked.returncode == 0, checked.stdout + checked.stderr

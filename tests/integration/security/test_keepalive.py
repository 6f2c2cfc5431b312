"""Keepalive that holds: idle connections outlive many ping periods without GOAWAY
`too_many_pings` (operations.md §3), with the intervals scaled down: clients and servers
ping every second, and pings half a second apart are accepted (the policy's tightest
allowed pairing; 30 s and 10 s in production).

The server accepts client pings `MIN_CLIENT_INTERVAL` apart and sends GOAWAY on the third
faster one between two of its writes; an idle `Messages` stream and an idle peer link write
nothing, so they survive only if the accepted interval really is in force. A GOAWAY shows
up as a reconnect (a second `stream attached`, a `stream lost`), a Router feed that
detaches, or C-core's "too_many_pings" line on stderr; each test checks all it can.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Final

import harness_client
import pytest
from harness_client import InboundDelivery, MessageInput, MulticastItem, TextPart

from gateway.rpc.keepalive import KeepalivePolicy
from gateway.settings import Settings
from gateway.testing import RunningGateway, run_gateway
from tests.support import eventually

CLIENT_TIME: Final = 1.0
"""Seconds between client pings (30 s in production)."""
MIN_CLIENT_INTERVAL: Final = 0.5
"""Fastest client ping interval the servers accept, in seconds: clients ping exactly
`CLIENT_INTERVAL_MARGIN` (2) times slower."""
PERIODS: Final = 8
"""Keepalive periods a connection stays idle: a GOAWAY comes on the third strike."""
IDLE: Final = PERIODS * CLIENT_TIME
"""Seconds of idleness under test."""
BOUND: Final = 15.0
"""Seconds any one wait for a send or delivery may take."""

POLICY: Final = KeepalivePolicy(
    client_time=CLIENT_TIME,
    client_timeout=CLIENT_TIME,
    server_time=CLIENT_TIME,
    server_timeout=CLIENT_TIME,
    min_client_interval=MIN_CLIENT_INTERVAL,
)
FAST: Final = Settings(
    keepalive_time=POLICY.server_time,
    keepalive_timeout=POLICY.server_timeout,
    keepalive_min_client_interval=POLICY.min_client_interval,
)
"""A gateway whose server and peer clients follow `POLICY`."""
CLIENT_OPTIONS: Final = POLICY.client_options()
"""The Python client's channel arguments under `POLICY` (they replace its 30 s defaults)."""

GOAWAY_SIGNS: Final = ("too_many_pings", "Too many pings", "ENHANCE_YOUR_CALM")


def write_peer_token(path: Path) -> Path:
    """A peer token file (mode 0600) both sides of a peer link use."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write("hpeer_" + "k" * 43 + "\n")
    return path


def messages_of(caplog: pytest.LogCaptureFixture, logger: str, text: str) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == logger and text in record.getMessage()
    ]


def goaway_signs(caplog: pytest.LogCaptureFixture, stderr: str) -> list[str]:
    """Every captured log line or stderr line that speaks of a ping GOAWAY."""
    texts = [caplog.text, stderr]
    return [
        line for text in texts for line in text.splitlines() if any(s in line for s in GOAWAY_SIGNS)
    ]


@contextlib.asynccontextmanager
async def joined_pair(
    tmp_path: Path, *, router_settings: Settings, daemon_settings: Settings
) -> AsyncIterator[tuple[RunningGateway, RunningGateway]]:
    """A daemon exposing its Router and Registry, and a daemon joined to it; both
    in-process, with one explicit peer token."""
    token = write_peer_token(tmp_path / "peer-token")
    exposing = replace(router_settings, expose_network=True, peer_token_file=token)
    async with run_gateway(exposing) as router_side:
        joined = replace(
            daemon_settings,
            router=router_side.address,
            registry=router_side.address,
            peer_token_file=token,
        )
        async with run_gateway(joined) as daemon_side:
            yield router_side, daemon_side


async def logged(caplog: pytest.LogCaptureFixture, logger: str, text: str) -> list[str]:
    """`messages_of` as a probe for `eventually`."""
    return messages_of(caplog, logger, text)


async def first_delivery(deliveries: AsyncIterator[InboundDelivery]) -> InboundDelivery:
    return await asyncio.wait_for(anext(deliveries), BOUND)


@pytest.mark.timeout(30)
async def test_an_idle_messages_stream_outlives_eight_keepalive_periods_and_then_receives(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
):
    caplog.set_level(logging.DEBUG)
    async with run_gateway(FAST) as gw:
        alice_token = await gw.register("alice")
        bob_token = await gw.register("bob")
        async with (
            await harness_client.connect(
                gw.address, token=bob_token, options=CLIENT_OPTIONS
            ) as bob,
            await harness_client.connect(
                gw.address, token=alice_token, options=CLIENT_OPTIONS
            ) as alice,
        ):
            deliveries = bob.messages()
            waiting = asyncio.ensure_future(first_delivery(deliveries))
            try:
                await eventually(
                    lambda: logged(caplog, "gateway.rpc.endpoint_service", "stream attached")
                )
                # The idleness is what is under test, not a wait for something to happen.
                await asyncio.sleep(IDLE)
                assert not waiting.done(), waiting
                await alice.send(MessageInput(to="agent:bob", text="after the idle"))
                delivery = await waiting
            finally:
                waiting.cancel()
                with contextlib.suppress(BaseException):
                    await waiting
            item = delivery.item
            assert isinstance(item, MulticastItem)
            assert item.message.content == (TextPart(text="after the idle"),)
            await delivery.acknowledge()
            await deliveries.aclose()
    attached = messages_of(caplog, "gateway.rpc.endpoint_service", "stream attached")
    assert len(attached) == 1, attached
    assert messages_of(caplog, "harness_client._stream", "stream lost") == []
    assert goaway_signs(caplog, capfd.readouterr().err) == []


@pytest.mark.timeout(30)
async def test_an_idle_peer_link_outlives_eight_keepalive_periods_and_then_certifies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
):
    caplog.set_level(logging.INFO)
    async with joined_pair(tmp_path, router_settings=FAST, daemon_settings=FAST) as (
        router_side,
        daemon_side,
    ):
        alice_token = await router_side.register("alice")
        bob_token = await daemon_side.register("bob")
        async with (
            await harness_client.connect(
                router_side.address, token=alice_token, options=CLIENT_OPTIONS
            ) as alice,
            await harness_client.connect(
                daemon_side.address, token=bob_token, options=CLIENT_OPTIONS
            ) as bob,
        ):
            # One exchange first, so the joined daemon's Registry and Router channels are
            # connected and idle from here on.
            await asyncio.wait_for(alice.send(MessageInput(to="agent:bob", text="before")), BOUND)
            deliveries = bob.messages()
            delivery = await first_delivery(deliveries)
            await delivery.acknowledge()
            caplog.clear()
            await asyncio.sleep(IDLE)  # the idleness under test
            await asyncio.wait_for(alice.send(MessageInput(to="agent:bob", text="after")), BOUND)
            delivery = await first_delivery(deliveries)
            item = delivery.item
            assert isinstance(item, MulticastItem)
            assert item.message.content == (TextPart(text="after"),)
            await delivery.acknowledge()
            await deliveries.aclose()
            assert messages_of(caplog, "gateway.engine.network", "detached") == []
    assert goaway_signs(caplog, capfd.readouterr().err) == []


@pytest.mark.timeout(30)
async def test_a_peer_pinging_faster_than_the_router_accepts_is_sent_away(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """The control of the test above: the joined daemon really pings every `CLIENT_TIME`
    (its settings reach its peer channels), and a GOAWAY is seen as a detached feed."""
    caplog.set_level(logging.INFO)
    strict = Settings(
        keepalive_time=10 * CLIENT_TIME,
        keepalive_timeout=CLIENT_TIME,
        keepalive_min_client_interval=5 * CLIENT_TIME,
    )
    async with joined_pair(tmp_path, router_settings=strict, daemon_settings=FAST):
        detached = await eventually(
            lambda: logged(caplog, "gateway.engine.network", "detached"),
            within=BOUND,
            interval=0.1,
        )
    assert detached

"""Killing the stream leader of an R3 stream while sends are in flight (a cluster of its own):
every accepted envelope is in the order exactly once, and every reader on every daemon
reads the restriction of that one order without a loss, a repeat or a reordering."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from gateway.router import (
    Accepted,
    Cursor,
    Entry,
    RouterPort,
    RouterUnavailable,
    SendMode,
    SendOutcome,
    envelope_digest,
)
from tests.integration.router.conftest import streams_on
from tests.servers import NatsCluster
from tests.support import eventually
from tests.unit.router.contract_suite import PROPERTY_AGENTS, anchor, expect_batch, read_to_tail
from tests.unit.router.fakes import signed_envelope

SENDS = 400
"""Envelopes sent, half through each daemon: the first half at once, the second half
started as the leader is killed."""

KILL_AFTER = 100
"""Accepted sends of the first half before the leader is killed."""

SEND_BOUND = 90.0
"""Seconds one send may keep retrying across the failover."""

RETRY_DELAY = 0.025
"""Seconds between retries of an ambiguous send (the engine's quick retries)."""


async def send_until_answered(
    router: RouterPort, instance: str, data: bytes, retries: list[int]
) -> SendOutcome:
    """The engine's client rule: an ambiguous outcome retries the same bytes as `retry`
    (each retry counted in `retries`)."""
    mode = SendMode.INITIAL
    async with asyncio.timeout(SEND_BOUND):
        while True:
            try:
                return await router.send(instance, mode, data)
            except RouterUnavailable:
                retries.append(1)
                mode = SendMode.RETRY
                await asyncio.sleep(RETRY_DELAY)


async def read_continuously(
    router: RouterPort, recipients: frozenset[str], count: int
) -> list[Entry]:
    """A daemon's feed: held polls from an anchor until `count` entries, retrying a poll
    that fails with the same cursor."""
    cursor = await anchor(router, recipients)
    received: list[Entry] = []
    while len(received) < count:
        try:
            batch = expect_batch(await router.poll(recipients, cursor))
        except RouterUnavailable:
            await asyncio.sleep(RETRY_DELAY)
            continue
        received.extend(batch.entries)
        cursor = batch.cursor
    return received


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_killing_the_stream_leader_during_concurrent_sends_loses_repeats_and_reorders_nothing(
    tmp_path: Path,
):
    draw = random.Random(20_251)  # a fixed plan, so a failure replays
    plan = [
        (
            draw.randrange(len(PROPERTY_AGENTS)),
            sorted(draw.sample(range(len(PROPERTY_AGENTS)), draw.randint(1, 3))),
        )
        for _ in range(SENDS)
    ]
    envelopes = [
        signed_envelope(
            sender=PROPERTY_AGENTS[sender],
            recipients=[PROPERTY_AGENTS[index] for index in recipients],
            body=number.to_bytes(4, "big"),
        )
        for number, (sender, recipients) in enumerate(plan)
    ]
    everyone = frozenset(PROPERTY_AGENTS)
    some = frozenset(PROPERTY_AGENTS[:2])
    count_some = sum(1 for _, recipients in plan if {0, 1} & set(recipients))

    cluster = await asyncio.to_thread(NatsCluster.start, tmp_path / "nats", nodes=3)
    try:
        async with streams_on(cluster) as streams:
            prefix = streams.new_prefix()
            async with (
                streams.router(prefix=prefix) as first,
                streams.router(prefix=prefix) as second,
            ):
                daemons = (first, second)
                instance = await first.instance_id()
                assert await second.instance_id() == instance
                info = await streams.js.stream_info(first.stream_name)
                assert info.config.num_replicas == 3
                assert info.cluster is not None
                leader = info.cluster.leader
                assert leader is not None

                readers = [
                    asyncio.create_task(read_continuously(daemon, recipients, count))
                    for daemon in daemons
                    for recipients, count in ((everyone, SENDS), (some, count_some))
                ]
                retries: list[int] = []

                def start_sends(numbers: range) -> list[asyncio.Task[SendOutcome]]:
                    return [
                        asyncio.create_task(
                            send_until_answered(
                                daemons[number % 2], instance, envelopes[number], retries
                            )
                        )
                        for number in numbers
                    ]

                sends = start_sends(range(SENDS // 2))
                try:
                    await eventually(
                        lambda: _accepted_count(sends),
                        lambda accepted: accepted >= KILL_AFTER,
                        within=30.0,
                    )
                    sends += start_sends(range(SENDS // 2, SENDS))
                    await asyncio.to_thread(cluster.kill, leader)
                    outcomes = await asyncio.gather(*sends)
                    async with asyncio.timeout(SEND_BOUND):
                        reads = await asyncio.gather(*readers)
                finally:
                    for task in (*sends, *readers):
                        task.cancel()

                assert retries, "no send was in flight when the leader died"
                for outcome, data in zip(outcomes, envelopes, strict=True):
                    assert outcome == Accepted(instance_id=instance, digest=envelope_digest(data))
                after = await streams.js.stream_info(first.stream_name)
                assert after.cluster is not None
                assert after.cluster.leader not in (None, leader)

                start = Cursor(instance_id=instance, order=0)
                everything, _ = await read_to_tail(first, everyone, start)
                orders = [entry.order for entry in everything]
                assert orders == sorted(set(orders)), "an order repeats or goes back"
                assert sorted(entry.signed_envelope for entry in everything) == sorted(envelopes)
                assert (await read_to_tail(second, everyone, start))[0] == everything
                expected_some = [
                    Entry(
                        order=entry.order,
                        signed_envelope=entry.signed_envelope,
                        recipients=tuple(r for r in entry.recipients if r in some),
                    )
                    for entry in everything
                    if some & set(entry.recipients)
                ]
                for index, read in enumerate(reads):
                    expected = everything if index % 2 == 0 else expected_some
                    assert read == expected, f"reader {index} differs from the one order"
    finally:
        await asyncio.to_thread(cluster.close)


async def _accepted_count(sends: list[asyncio.Task[SendOutcome]]) -> int:
    return sum(1 for task in sends if task.done() and not task.cancelled())

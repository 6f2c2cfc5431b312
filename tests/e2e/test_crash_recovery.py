"""A daemon killed with SIGKILL while sends are in flight loses no bound intent and
certifies none twice (engine.md §6 "Restart", §10 vector 8 e2e)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

import harness_client
import pytest
from harness_client import HarnessError, InboundDelivery, MessageInput, SendError

from gateway.testing import RunningDaemon, run_daemon
from tests.e2e import support
from tests.support import eventually

pytestmark = pytest.mark.e2e

SENDERS: Final = 50
"""Concurrent sending tasks of alice's."""

KILL_AFTER_OK: Final = 40
"""Successful sends after which the daemon is killed; the senders keep sending, so many
sends are in flight (bound or not) at that moment."""

SEND_DEADLINE: Final = 30.0
"""Client deadline of each send."""

BOUND: Final = 60.0
"""Seconds any one wait of these tests may take."""

RECOVERY_BOUND: Final = 60.0
"""Seconds the restarted daemon has to complete every reloaded intent."""


@dataclass
class Attempt:
    """One send and what its caller saw."""

    text: str
    outcome: str | None = None
    """`ok`, a SendError reason, or another client error's type and reason."""


@dataclass
class Senders:
    """Alice's sending tasks and their attempts; `enough` is set at `KILL_AFTER_OK`."""

    attempts: list[Attempt] = field(default_factory=list)
    enough: asyncio.Event = field(default_factory=asyncio.Event)
    ok: int = 0

    async def run(self, endpoint: harness_client.Endpoint, worker: int) -> None:
        """Send one message after another until a send fails (the daemon died)."""
        sequence = 0
        while True:
            attempt = Attempt(text=f"worker {worker} message {sequence}")
            self.attempts.append(attempt)
            sequence += 1
            try:
                await endpoint.send(
                    MessageInput(to="agent:bob", text=attempt.text), deadline=SEND_DEADLINE
                )
            except SendError as error:
                attempt.outcome = error.reason.value
                return
            except HarnessError as error:
                attempt.outcome = f"{type(error).__name__}:{error.reason}"
                return
            attempt.outcome = "ok"
            self.ok += 1
            if self.ok >= KILL_AFTER_OK:
                self.enough.set()


async def collect_deliveries(
    endpoint: harness_client.Endpoint, count: int
) -> list[InboundDelivery]:
    """Read deliveries until `count` arrived (bounded; fewer than the stream window, so
    none waits for an acknowledgment), then acknowledge them all."""
    received: list[InboundDelivery] = []
    stream = endpoint.messages()
    try:
        async with asyncio.timeout(BOUND):
            while len(received) < count:
                received.append(await anext(stream))
    finally:
        await stream.aclose()
    results = await endpoint.acknowledge([delivery.token for delivery in received])
    assert results == [None] * len(received)
    return received


async def wait_no_open_intents(daemon: RunningDaemon, agent_id: str) -> None:
    await eventually(
        lambda: support.open_intents(daemon.data_dir, agent_id),
        lambda rows: rows == [],
        within=RECOVERY_BOUND,
        interval=0.1,
    )


MID_FLIGHT_ROUNDS: Final = 3
"""Rounds the next test may take to kill the daemon while an intent is bound and not yet
certified: local order certifies a burst in one short step, so a kill can land when every
bound intent had just completed (the round still checks everything else)."""


@pytest.mark.timeout(480)
async def test_sigkill_with_sends_in_flight_then_restart_certifies_every_bound_intent_exactly_once_with_its_post_id():
    for _ in range(MID_FLIGHT_ROUNDS):
        if await _sigkill_with_sends_in_flight():
            return
    pytest.fail(f"in {MID_FLIGHT_ROUNDS} rounds no kill landed while an intent was bound and open")


async def _sigkill_with_sends_in_flight() -> bool:
    """One round: kill, restart, check every bound intent is certified once under its
    PostId and delivered once. True when the kill cut certification short (some intent
    was bound and not completed at the kill), the case the test is after."""
    async with run_daemon() as daemon:
        agents = await support.register(daemon, "alice", "bob")
        alice_id, bob_id = agents["alice"].agent_id, agents["bob"].agent_id

        senders = Senders()
        async with await harness_client.connect(
            daemon.address, token=agents["alice"].token
        ) as alice:
            tasks = [
                asyncio.create_task(senders.run(alice, worker), name=f"sender-{worker}")
                for worker in range(SENDERS)
            ]
            try:
                await asyncio.wait_for(senders.enough.wait(), BOUND)
                assert await daemon.kill() == -9
                async with asyncio.timeout(BOUND):
                    await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

        outcomes = Counter(attempt.outcome for attempt in senders.attempts)
        assert None not in outcomes, outcomes
        succeeded = {attempt.text for attempt in senders.attempts if attempt.outcome == "ok"}
        assert len(succeeded) >= KILL_AFTER_OK
        # Every sender saw the kill: each one's last send failed on the client side.
        failed = [attempt for attempt in senders.attempts if attempt.outcome != "ok"]
        assert len(failed) == SENDERS, outcomes
        assert set(outcomes) <= {"ok", "outcome-unknown", "network-unavailable"}, outcomes
        bound_before_kill = await asyncio.to_thread(support.intents, daemon.data_dir, alice_id)
        assert len(bound_before_kill) >= len(succeeded)
        # Whether the kill cut certification short: some intents bound and not completed.
        cut_short = any(row.state == "open" for row in bound_before_kill)

        await daemon.restart()
        await wait_no_open_intents(daemon, alice_id)

        async with support.management(daemon) as operator:
            alice_view = await support.full_history(operator, "alice", "agent:bob")
            # Bob promotes the same records, possibly a moment after alice.
            await eventually(
                lambda: support.full_history(operator, "bob", "agent:alice"),
                lambda bob_view: (
                    [record.record_hash for record in bob_view]
                    == [record.record_hash for record in alice_view]
                ),
                within=BOUND,
                interval=0.05,
            )
        post_ids = [record.post_id for record in alice_view]
        texts = [support.text_of(record.content) for record in alice_view]
        # No duplicate post, neither by PostId nor by content (each send's text is unique).
        assert len(set(post_ids)) == len(post_ids)
        assert len(set(texts)) == len(texts)
        assert {record.author for record in alice_view} == {"agent:alice"}
        # Every send that returned OK is certified; so is every intent bound before the
        # kill, under the PostId it was bound with.
        assert succeeded <= set(texts)
        assert {row.post_id for row in bound_before_kill} <= set(post_ids)
        assert set(texts) <= {attempt.text for attempt in senders.attempts}

        async with await harness_client.connect(daemon.address, token=agents["bob"].token) as bob:
            deliveries = await collect_deliveries(bob, len(alice_view))
            delivered = [support.delivered_post_id(delivery) for delivery in deliveries]
            assert len(set(delivered)) == len(delivered)
            assert set(delivered) == set(post_ids)
            assert len({delivery.token for delivery in deliveries}) == len(deliveries)
            async with support.management(daemon) as operator:
                await eventually(
                    lambda: operator.agent_status("bob"),
                    lambda status: status.backlog == 0,
                    within=BOUND,
                )

        assert await daemon.terminate() == 0

        # The store after an ordered stop says the same.
        intent_rows = support.intents(daemon.data_dir, alice_id)
        alice_records = support.certified_records(daemon.data_dir, alice_id)
        bob_records = support.certified_records(daemon.data_dir, bob_id)
        assert intent_rows
        assert {row.state for row in intent_rows} == {"completed"}
        by_hash = {record.record_hash: record for record in alice_records}
        for row in intent_rows:
            assert row.record_hash is not None
            assert by_hash[row.record_hash].post_id == row.post_id
        for records in (alice_records, bob_records):
            stored_post_ids = [record.post_id for record in records]
            assert len(set(stored_post_ids)) == len(stored_post_ids)
            assert set(stored_post_ids) == set(post_ids)
        assert {record.author for record in alice_records} == {alice_id}
        assert len(intent_rows) == len(alice_records)
        # No intent was minted by the recovery: every post is one bound before the kill.
        assert [row.post_id for row in intent_rows] == [row.post_id for row in bound_before_kill]
        bob_inbox = support.inbox(daemon.data_dir, bob_id)
        assert sorted(entry.post_id or "" for entry in bob_inbox) == sorted(post_ids)
        assert {entry.state for entry in bob_inbox} == {"acknowledged"}
    return cut_short


STRANDED_SEND_DEADLINE: Final = 15.0
"""Client deadline of the send that shows whether the conversation still posts."""

SIGKILL_ROUNDS: Final = 5
"""SIGKILL restarts of an embedded daemon holding one local conversation."""


@pytest.mark.timeout(180)
async def test_sigkill_restarts_never_move_a_local_conversations_anchor():
    # Local order (engine.md §5.10): the store's local instance survives restarts, so a
    # restart needs no re-anchor, and a crash can no longer land between two members'
    # adoptions of one (what once stranded a conversation after a SIGKILL).
    async with run_daemon() as daemon:
        agents = await support.register(daemon, "alice", "bob")
        alice_token, bob_token = agents["alice"].token, agents["bob"].token
        async with await harness_client.connect(daemon.address, token=alice_token) as alice:
            await alice.send(MessageInput(to="agent:bob", text="before the crashes"))
        before = support.anchor_hashes(daemon.data_dir)
        assert len(before) == 2
        assert not support.diverged(before)
        for round_ in range(SIGKILL_ROUNDS):
            assert await daemon.kill() == -9
            await daemon.start()
            async with await harness_client.connect(daemon.address, token=alice_token) as alice:
                await alice.send(
                    MessageInput(to="agent:bob", text=f"round {round_}"),
                    deadline=STRANDED_SEND_DEADLINE,
                )
            assert support.anchor_hashes(daemon.data_dir) == before
        assert await daemon.kill() == -9
        await daemon.start()
        async with await harness_client.connect(daemon.address, token=bob_token) as bob:
            stream = bob.messages()
            try:
                texts = []
                async with asyncio.timeout(BOUND):
                    while f"round {SIGKILL_ROUNDS - 1}" not in texts:
                        delivery = await anext(stream)
                        item = delivery.item
                        assert isinstance(item, harness_client.MulticastItem)
                        texts.append(support.text_of(item.message.content))
            finally:
                await stream.aclose()
        assert texts[0] == "before the crashes"
        assert support.anchor_hashes(daemon.data_dir) == before

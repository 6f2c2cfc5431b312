"""Keyed sends survive a SIGKILL (engine.md §9.1, §10 vector 16): every key in flight when an
embedded daemon is killed answers a definite outcome once retried after the restart — its
bound posts' outcome, or a fresh run when it bound none — never `outcome-unknown`, and the
recipient holds each post, and each send's text, at most once."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

import harness_client
import pytest
from harness_client import HarnessError, MessageInput, SendError, SendIndeterminate

from gateway.store import tables
from gateway.testing import RunningDaemon, run_daemon
from tests.e2e import support
from tests.support import eventually

pytestmark = pytest.mark.e2e

SENDERS: Final = 50
"""Concurrent sending tasks of alice's, each sending keyed sends one after another."""

KILL_AFTER_OK: Final = 40
"""Successful sends after which the daemon is killed: the senders keep sending, so many keyed
sends are in flight (reserved, bound or certified, without a kept outcome) at that moment."""

FIRST_DEADLINE: Final = 3.0
"""Client deadline of each send before the kill: the client's own retries under the key end
well before the restarted daemon (on a new port) is there."""

RETRY_DEADLINE: Final = 60.0
"""Client deadline of each retry after the restart."""

BOUND: Final = 60.0
"""Seconds any one wait of this test may take."""

ROUNDS: Final = 3
"""Rounds the test may take to kill the daemon while a keyed send has no kept outcome."""

DEFINITE: Final = frozenset({"ok", "delivery-pending"})
"""What a retry may answer: success, or a send saved that will be delivered (§6.4)."""


@dataclass
class Keyed:
    """One keyed send and what its caller saw."""

    key: str
    text: str
    outcome: str | None = None
    """`ok`, a SendError reason, or another client error's type and reason."""
    post_ids: tuple[str, ...] = ()


@dataclass
class Senders:
    """Alice's sending tasks and their sends; `enough` is set at `KILL_AFTER_OK`."""

    sends: list[Keyed] = field(default_factory=list)
    enough: asyncio.Event = field(default_factory=asyncio.Event)
    ok: int = 0

    async def run(self, endpoint: harness_client.Endpoint, worker: int) -> None:
        """Send one keyed message after another until a send fails (the daemon died)."""
        sequence = 0
        while True:
            keyed = Keyed(key=f"w{worker}-{sequence}", text=f"worker {worker} message {sequence}")
            self.sends.append(keyed)
            sequence += 1
            await send(endpoint, keyed, FIRST_DEADLINE)
            if keyed.outcome != "ok":
                return
            self.ok += 1
            if self.ok >= KILL_AFTER_OK:
                self.enough.set()


async def send(endpoint: harness_client.Endpoint, keyed: Keyed, deadline: float) -> None:
    """Send `keyed` to bob under its key; record what the caller saw."""
    try:
        result = await endpoint.send(
            MessageInput(to="agent:bob", text=keyed.text),
            idempotency_key=keyed.key,
            deadline=deadline,
        )
    except SendError as error:
        keyed.outcome = error.reason.value
        return
    except HarnessError as error:
        keyed.outcome = f"{type(error).__name__}:{error.reason}"
        return
    keyed.outcome = "ok"
    keyed.post_ids = tuple(result.post_ids)


@dataclass(frozen=True, slots=True)
class SendsRow:
    key: str
    kept: bool
    bound: bool


def sends_rows(daemon: RunningDaemon, agent_id: str) -> list[SendsRow]:
    """Alice's `sends` rows: whether each kept an outcome and whether its bind was recorded."""
    with support.read_only_store(daemon.data_dir) as db:
        rows = db.execute(
            "SELECT key, outcome IS NOT NULL, bound IS NOT NULL FROM sends WHERE agent_id = ?",
            (agent_id,),
        ).fetchall()
    return [SendsRow(key=key, kept=bool(kept), bound=bool(bound)) for key, kept, bound in rows]


def inbox_posts(daemon: RunningDaemon, agent_id: str) -> list[tuple[str, str]]:
    """(PostId, text) of each multicast item in the agent's inbox, read or not."""
    with support.read_only_store(daemon.data_dir) as db:
        items = db.execute(
            "SELECT item FROM inbox WHERE agent_id = ? ORDER BY seq", (agent_id,)
        ).fetchall()
    posts = []
    for (item,) in items:
        message = json.loads(bytes(item)).get("message") or {}
        text = "".join(
            part.get("text", "")
            for part in message.get("content", [])
            if part.get("type") == "text"
        )
        posts.append((message.get("postId", ""), text))
    return posts


@pytest.mark.timeout(480)
async def test_every_keyed_send_cut_by_a_sigkill_answers_a_definite_outcome_when_retried():
    for _ in range(ROUNDS):
        if await _sigkill_keyed_sends_in_flight():
            return
    pytest.fail(f"in {ROUNDS} rounds no kill landed while a keyed send had no kept outcome")


async def _sigkill_keyed_sends_in_flight() -> bool:
    """One round: kill with keyed sends in flight, restart, retry every key. True when the
    kill left some key without a kept outcome, the case the test is after."""
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

        before = {send.key: (send.outcome, send.post_ids) for send in senders.sends}
        rows = await asyncio.to_thread(sends_rows, daemon, alice_id)
        cut = [row for row in rows if not row.kept]

        await daemon.start()
        async with await harness_client.connect(
            daemon.address, token=agents["alice"].token
        ) as alice:
            # Half the cut keys are asked about first: a read resumes the send too, and
            # never calls it indeterminate; the retries below then join or replay it.
            for row in cut[::2]:
                assert not isinstance(await alice.read_send(row.key), SendIndeterminate)
            async with asyncio.timeout(BOUND * 2):
                await asyncio.gather(
                    *(send(alice, keyed, RETRY_DEADLINE) for keyed in senders.sends)
                )

        outcomes = Counter(keyed.outcome for keyed in senders.sends)
        assert set(outcomes) <= DEFINITE, outcomes
        # A send that succeeded before the kill answers its kept PostIds.
        for keyed in senders.sends:
            outcome, post_ids = before[keyed.key]
            if outcome == "ok":
                assert keyed.post_ids == post_ids, keyed
        promised = {post_id for keyed in senders.sends for post_id in keyed.post_ids}
        assert len(promised) == sum(len(keyed.post_ids) for keyed in senders.sends)

        # Bob holds every post a retry answered, and no post nor text twice.
        posts = await eventually(
            lambda: asyncio.to_thread(inbox_posts, daemon, bob_id),
            lambda held: promised <= {post_id for post_id, _ in held},
            within=BOUND,
            interval=0.1,
        )
        assert max(Counter(post_id for post_id, _ in posts).values()) == 1
        assert max(Counter(text for _, text in posts).values()) == 1
        assert {text for _, text in posts} <= {keyed.text for keyed in senders.sends}
        # Every key kept its outcome now.
        assert all(row.kept for row in await asyncio.to_thread(sends_rows, daemon, alice_id))
        assert await daemon.terminate() == 0
    return bool(cut)


def test_the_sends_columns_this_test_reads_are_the_stores(tmp_path):
    # The test reads the store file directly: the columns it names must be the schema's.
    with sqlite3.connect(tmp_path / "s.sqlite3") as db:
        for statement in tables.DDL:
            db.execute(statement)
        columns = {row[1] for row in db.execute("PRAGMA table_info(sends)")}
    assert {"key", "outcome", "bound"} <= columns

"""Idempotent sends and the history export (engine.md §9, §10 vector 16)."""

from __future__ import annotations

import asyncio
import json
import stat
from dataclasses import replace
from pathlib import Path

import harness_client
import pytest
from harness_client import (
    FailureDelivery,
    IdempotencyConflictError,
    MessageInput,
    MulticastOperation,
    SendError,
)

from gateway.endpoint.api import SendAbsent, SendIndeterminate, SendReturned
from gateway.settings import Settings
from gateway.store.records import PutSend
from gateway.testing import run_gateway
from tests.support import eventually


async def test_the_same_key_and_input_replays_the_kept_outcome_without_a_second_post():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        await gw.register("bob")
        async with await harness_client.connect(gw.address, token=alice_token) as alice:
            message = MessageInput(to="agent:bob", text="once")
            first = await alice.send(message, idempotency_key="k-1")
            second = await alice.send(message, idempotency_key="k-1")
            assert first == second
        history = await gw.gateway.components.management.history(
            "alice", "agent:bob", after_record_hash=None, limit=50
        )
        assert len(history) == 1


async def test_concurrent_calls_with_one_key_join_one_invocation():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        await gw.register("bob")
        async with await harness_client.connect(gw.address, token=alice_token) as alice:
            message = MessageInput(to="agent:bob", text="joined")
            results = await asyncio.gather(
                *(alice.send(message, idempotency_key="k-join") for _ in range(5))
            )
            assert len(set(results)) == 1
        history = await gw.gateway.components.management.history(
            "alice", "agent:bob", after_record_hash=None, limit=50
        )
        assert len(history) == 1


@pytest.mark.parametrize(
    "changed",
    [
        MessageInput(to="agent:bob", text="other text"),
        MessageInput(to="agent:bob", text="same", collective=MulticastOperation()),
    ],
)
async def test_the_same_key_with_other_input_is_an_idempotency_conflict(changed):
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        await gw.register("bob")
        async with await harness_client.connect(gw.address, token=alice_token) as alice:
            await alice.send(MessageInput(to="agent:bob", text="same"), idempotency_key="k-2")
            with pytest.raises(IdempotencyConflictError):
                await alice.send(changed, idempotency_key="k-2")


async def test_changed_failure_routing_is_a_conflict_too():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        await gw.register("bob")
        async with await harness_client.connect(gw.address, token=alice_token) as alice:
            message = MessageInput(to="agent:bob", text="x")
            await alice.send(message, idempotency_key="k-3")
            with pytest.raises(IdempotencyConflictError):
                await alice.send(
                    message, idempotency_key="k-3", failure_delivery=FailureDelivery.INBOUND
                )


async def test_a_kept_failure_is_returned_again_and_read_send_reports_it():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        async with await harness_client.connect(gw.address, token=alice_token) as alice:
            message = MessageInput(to="agent:nobody", text="x")
            for _ in range(2):
                with pytest.raises(SendError) as raised:
                    await alice.send(message, idempotency_key="k-fail")
                assert raised.value.reason == "unknown-agent"
        endpoint = await gw.gateway.components.agents.authenticate(alice_token)
        state = await endpoint.read_send("k-fail")  # type: ignore[union-attr]
        assert isinstance(state, SendReturned)
        assert isinstance(await endpoint.read_send("never-used"), SendAbsent)  # type: ignore[union-attr]


async def test_a_key_a_restart_cut_before_schema_3_recorded_bindings_is_outcome_unknown_for_good():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        await gw.register("bob")
        runtime = gw.gateway.components.hosted.runtime("alice")
        request = b'{"failureDelivery":"result","input":{"text":"x","to":"agent:bob"}}'
        await gw.gateway.components.store.apply(
            [
                PutSend(
                    agent_id=runtime.agent_id,
                    key="k-cut",
                    request=request,
                    run_id="old",
                    outcome=None,
                )
            ]
        )
        async with await harness_client.connect(gw.address, token=alice_token) as alice:
            with pytest.raises(SendError) as raised:
                # A short deadline: a client may send a keyed `outcome-unknown` again under
                # its key until the deadline, and every attempt answers the same.
                await alice.send(
                    MessageInput(to="agent:bob", text="x"), idempotency_key="k-cut", deadline=3.0
                )
            assert raised.value.reason == "outcome-unknown"
        state = await runtime.read_send("k-cut")
        assert isinstance(state, SendIndeterminate)
        history = await gw.gateway.components.management.history(
            "alice", "agent:bob", after_record_hash=None, limit=50
        )
        assert history == []


async def test_a_key_cut_after_its_post_certified_is_resumed_across_a_restart_to_the_same_post():
    async with run_gateway() as gw:
        alice_token = await gw.register("alice")
        await gw.register("bob")
        message = MessageInput(to="agent:bob", text="once")
        async with await harness_client.connect(gw.address, token=alice_token) as alice:
            first = await alice.send(message, idempotency_key="k-cut")
        store = gw.gateway.components.store
        agent_id = gw.gateway.components.hosted.runtime("alice").agent_id
        row = await store.send_row(agent_id, "k-cut")
        assert row is not None
        assert row.resumable
        assert json.loads(row.bound or b"{}") == {"postIds": list(first.post_ids)}
        # As if the daemon had died between the certification and the kept outcome.
        await store.apply(
            [
                PutSend(
                    agent_id=agent_id,
                    key="k-cut",
                    request=row.request,
                    run_id=row.run_id,
                    outcome=None,
                    bound=row.bound,
                    resumable=True,
                )
            ]
        )
        await gw.restart()
        async with await harness_client.connect(gw.address, token=alice_token) as alice:
            again = await alice.send(message, idempotency_key="k-cut")
        assert again == first
        history = await gw.gateway.components.management.history(
            "alice", "agent:bob", after_record_hash=None, limit=50
        )
        assert [record.post_id for record in history] == list(first.post_ids)


async def test_the_export_writes_one_line_per_item_and_per_send(tmp_path: Path):
    export_dir = tmp_path / "export"
    async with run_gateway(replace(Settings(), history_export_dir=export_dir)) as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob")}
        async with (
            await harness_client.connect(gw.address, token=tokens["alice"]) as alice,
            await harness_client.connect(gw.address, token=tokens["bob"]) as bob,
        ):
            await alice.send(MessageInput(to="agent:bob", text="exported"))
            with pytest.raises(SendError):
                await alice.send(MessageInput(to="agent:nobody", text="fails"))
            stream = bob.messages()
            first = await asyncio.wait_for(stream.__anext__(), 20)
            await stream.aclose()
            # A replay on a new stream is not exported again.
            again = bob.messages()
            replayed = await asyncio.wait_for(again.__anext__(), 20)
            assert replayed.token == first.token
            await again.aclose()
        alice_file = export_dir / "alice.jsonl"
        bob_file = export_dir / "bob.jsonl"
        lines = [json.loads(line) for line in alice_file.read_text().splitlines()]
        assert [line["kind"] for line in lines] == ["outbound", "outbound"]
        assert lines[0]["outcome"]["kind"] == "sent"
        assert len(lines[0]["outcome"]["postIds"]) == 1
        assert lines[1]["outcome"] == {
            "kind": "failed",
            "error": "send failed: agent:nobody is not registered with the gateway",
        }
        bob_lines = await eventually(
            lambda: asyncio.sleep(0, [json.loads(x) for x in bob_file.read_text().splitlines()])
        )
        assert [line["kind"] for line in bob_lines] == ["inbound"]
        assert bob_lines[0]["item"]["kind"] == "multicast"
        assert stat.S_IMODE(alice_file.stat().st_mode) == 0o600

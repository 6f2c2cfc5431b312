"""Idempotent sends on a `MemoryStore` (engine.md §9): a key runs its send at most once,
concurrent callers join it, every later call gets its one outcome, and a reservation that a
restart cut answers `outcome-unknown` for good."""

from __future__ import annotations

import asyncio

import pytest
from harness_contract.errors import (
    IdempotencyConflictError,
    InvalidIdempotencyKeyError,
    SendError,
    SendErrorReason,
)
from harness_contract.values import FailureDelivery, MessageInput, SendResult

from gateway.endpoint.api import SendAbsent, SendIndeterminate, SendPending, SendReturned
from gateway.endpoint.idempotency import KeyResolution, SendLedger, binding
from gateway.store.memory import MemoryStore
from gateway.store.records import PutSend
from tests.support import eventually

AGENT = "agt_alice"
HELLO = MessageInput(to="agent:bob", text="hello")
RESULT = SendResult(operation_id="col_x")


class Sends:
    """A send the ledger runs: counts its runs, answers `outcome`, or waits for `release`."""

    def __init__(self, outcome: SendResult | Exception = RESULT) -> None:
        self.outcome = outcome
        self.runs = 0
        self.release: asyncio.Event | None = None

    async def __call__(self) -> SendResult:
        self.runs += 1
        if self.release is not None:
            await self.release.wait()
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


def ledger_on(store: MemoryStore, resolutions: list[KeyResolution], run_id: str = "run-1"):
    return SendLedger(agent_id=AGENT, store=store, run_id=run_id, on_resolution=resolutions.append)


async def test_a_keyed_send_runs_once_and_a_later_call_replays_its_outcome(store):
    resolutions: list[KeyResolution] = []
    ledger = ledger_on(store, resolutions)
    send = Sends()

    first = await ledger.run("k", HELLO, FailureDelivery.RESULT, send)
    again = await ledger.run("k", HELLO, FailureDelivery.RESULT, send)

    assert first == again == RESULT
    assert send.runs == 1
    assert resolutions == [KeyResolution.EXECUTED, KeyResolution.REPLAYED]


async def test_concurrent_calls_with_one_key_join_its_one_invocation(store):
    resolutions: list[KeyResolution] = []
    ledger = ledger_on(store, resolutions)
    send = Sends()
    send.release = asyncio.Event()

    calls = [
        asyncio.ensure_future(ledger.run("k", HELLO, FailureDelivery.RESULT, send))
        for _ in range(3)
    ]
    await eventually(lambda: asyncio.sleep(0, len(resolutions)), lambda n: n == 3)
    assert isinstance(await ledger.read("k"), SendPending)
    send.release.set()

    assert await asyncio.gather(*calls) == [RESULT] * 3
    assert send.runs == 1
    assert resolutions == [KeyResolution.EXECUTED, KeyResolution.JOINED, KeyResolution.JOINED]


async def test_a_key_used_again_with_another_input_or_routing_fails_idempotency_conflict(store):
    resolutions: list[KeyResolution] = []
    ledger = ledger_on(store, resolutions)
    await ledger.run("k", HELLO, FailureDelivery.RESULT, Sends())

    with pytest.raises(IdempotencyConflictError):
        await ledger.run(
            "k", MessageInput(to="agent:bob", text="bye"), FailureDelivery.RESULT, Sends()
        )
    with pytest.raises(IdempotencyConflictError):
        await ledger.run("k", HELLO, FailureDelivery.INBOUND, Sends())
    assert resolutions[1:] == [KeyResolution.CONFLICT, KeyResolution.CONFLICT]


async def test_a_live_key_used_with_another_input_fails_idempotency_conflict(store):
    ledger = ledger_on(store, [])
    send = Sends()
    send.release = asyncio.Event()
    running = asyncio.ensure_future(ledger.run("k", HELLO, FailureDelivery.RESULT, send))
    await eventually(lambda: asyncio.sleep(0, send.runs), lambda runs: runs == 1)

    with pytest.raises(IdempotencyConflictError):
        await ledger.run("k", HELLO, FailureDelivery.INBOUND, Sends())
    send.release.set()
    assert await running == RESULT


async def test_a_failed_send_is_returned_as_the_same_failure_to_every_later_call(store):
    ledger = ledger_on(store, [])
    send = Sends(SendError(SendErrorReason.UNKNOWN_AGENT, "agent:bob is not registered"))

    for _ in range(2):
        with pytest.raises(SendError) as failed:
            await ledger.run("k", HELLO, FailureDelivery.RESULT, send)
        assert failed.value.send_reason is SendErrorReason.UNKNOWN_AGENT
        assert failed.value.detail == "agent:bob is not registered"
    assert send.runs == 1


async def test_a_defect_in_the_send_is_kept_as_outcome_unknown(store):
    ledger = ledger_on(store, [])
    with pytest.raises(SendError) as failed:
        await ledger.run("k", HELLO, FailureDelivery.RESULT, Sends(RuntimeError("a defect")))
    assert failed.value.send_reason is SendErrorReason.OUTCOME_UNKNOWN
    state = await ledger.read("k")
    assert isinstance(state, SendReturned)
    assert state.outcome == SendError(SendErrorReason.OUTCOME_UNKNOWN)


async def test_a_reservation_a_restart_cut_is_indeterminate_and_never_runs_again(store):
    await store.apply(
        [
            PutSend(
                agent_id=AGENT,
                key="k",
                request=binding(HELLO, FailureDelivery.RESULT),
                run_id="run-before",
                outcome=None,
            )
        ]
    )
    resolutions: list[KeyResolution] = []
    ledger = ledger_on(store, resolutions, run_id="run-after")
    send = Sends()

    with pytest.raises(SendError) as failed:
        await ledger.run("k", HELLO, FailureDelivery.RESULT, send)

    assert failed.value.send_reason is SendErrorReason.OUTCOME_UNKNOWN
    assert send.runs == 0
    assert resolutions == [KeyResolution.INDETERMINATE]
    assert await ledger.read("k") == SendIndeterminate(input=HELLO)


async def test_a_caller_that_goes_away_does_not_stop_the_invocation(store):
    ledger = ledger_on(store, [])
    send = Sends()
    send.release = asyncio.Event()
    caller = asyncio.ensure_future(ledger.run("k", HELLO, FailureDelivery.RESULT, send))
    await eventually(lambda: asyncio.sleep(0, send.runs), lambda runs: runs == 1)

    caller.cancel()
    await asyncio.gather(caller, return_exceptions=True)
    send.release.set()

    state = await eventually(lambda: ledger.read("k"), lambda s: isinstance(s, SendReturned))
    assert state == SendReturned(input=HELLO, outcome=RESULT)


async def test_closing_cancels_live_invocations_and_leaves_their_keys_indeterminate(store):
    ledger = ledger_on(store, [])
    send = Sends()
    send.release = asyncio.Event()
    caller = asyncio.ensure_future(ledger.run("k", HELLO, FailureDelivery.RESULT, send))
    await eventually(lambda: asyncio.sleep(0, send.runs), lambda runs: runs == 1)

    await ledger.close()
    await asyncio.gather(caller, return_exceptions=True)

    restarted = ledger_on(store, [], run_id="run-2")
    assert await restarted.read("k") == SendIndeterminate(input=HELLO)


async def test_read_reports_an_unused_key_as_absent(store):
    assert await ledger_on(store, []).read("never") == SendAbsent()


@pytest.mark.parametrize("key", ["", "k" * 129, "a\x00b", "\ud800"])
async def test_a_key_that_is_not_one_to_128_utf8_bytes_without_nul_is_refused(store, key):
    ledger = ledger_on(store, [])
    send = Sends()
    with pytest.raises(InvalidIdempotencyKeyError):
        await ledger.run(key, HELLO, FailureDelivery.RESULT, send)
    with pytest.raises(InvalidIdempotencyKeyError):
        await ledger.read(key)
    assert send.runs == 0


async def test_a_key_of_128_multibyte_bytes_is_accepted(store):
    key = "é" * 64  # 128 bytes in UTF-8
    assert await ledger_on(store, []).run(key, HELLO, FailureDelivery.RESULT, Sends()) == RESULT

"""Idempotent sends on a `MemoryStore` (engine.md §9): a key runs its send at most once,
concurrent callers join it, every later call gets its one outcome; a reservation that a
restart cut is resumed with what its bind wrote, unless it was reserved before schema 3
recorded bindings, which answers `outcome-unknown` for good."""

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
from gateway.endpoint.idempotency import (
    KeyResolution,
    Resumption,
    SendLedger,
    binding,
    bound_bytes,
)
from gateway.store.errors import PartitionNotHeld
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


class Resumes:
    """The ledger's `resume`: records each resumption, answers `outcome`, or waits for
    `release`."""

    def __init__(self, outcome: SendResult = RESULT) -> None:
        self.outcome = outcome
        self.seen: list[Resumption] = []
        self.release: asyncio.Event | None = None

    async def __call__(self, resumption: Resumption) -> SendResult:
        self.seen.append(resumption)
        if self.release is not None:
            await self.release.wait()
        return self.outcome


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


def ledger_on(
    store: MemoryStore,
    resolutions: list[KeyResolution],
    run_id: str = "run-1",
    resume: Resumes | None = None,
):
    return SendLedger(
        agent_id=AGENT,
        store=store,
        run_id=run_id,
        on_resolution=resolutions.append,
        resume=resume,
    )


async def cut_reservation(store: MemoryStore, *, bound: bytes | None, resumable: bool = True):
    """The row a run that the daemon's end cut left: reserved, maybe bound, no outcome."""
    await store.apply(
        [
            PutSend(
                agent_id=AGENT,
                key="k",
                request=binding(HELLO, FailureDelivery.RESULT),
                run_id="run-before",
                outcome=None,
                bound=bound,
                resumable=resumable,
            )
        ]
    )


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


async def test_a_send_whose_unit_the_partition_seam_refused_stays_resumable_under_its_key(store):
    # Its partition was released meanwhile (cluster.md §3.2): no outcome is kept, and the call
    # under the same key at the new home resumes the reservation (§8).
    ledger = ledger_on(store, [])
    with pytest.raises(PartitionNotHeld):
        await ledger.run("k", HELLO, FailureDelivery.RESULT, Sends(PartitionNotHeld((7,))))
    row = await store.send_row(AGENT, "k")
    assert row is not None
    assert row.outcome is None
    assert row.resumable
    resumes = Resumes()
    elsewhere = ledger_on(store, [], run_id="run-elsewhere", resume=resumes)
    assert await elsewhere.run("k", HELLO, FailureDelivery.RESULT, Sends()) == RESULT
    assert [resumption.bound for resumption in resumes.seen] == [None]


async def test_a_reservation_from_before_schema_3_is_indeterminate_and_never_runs_again(store):
    # Schema 2 recorded no binding: whether its posts exist is unknown (engine.md §9.1).
    await cut_reservation(store, bound=None, resumable=False)
    resolutions: list[KeyResolution] = []
    resumes = Resumes()
    ledger = ledger_on(store, resolutions, run_id="run-after", resume=resumes)
    send = Sends()

    with pytest.raises(SendError) as failed:
        await ledger.run("k", HELLO, FailureDelivery.RESULT, send)

    assert failed.value.send_reason is SendErrorReason.OUTCOME_UNKNOWN
    assert send.runs == 0
    assert resumes.seen == []
    assert resolutions == [KeyResolution.INDETERMINATE]
    assert await ledger.read("k") == SendIndeterminate(input=HELLO)


async def test_a_reservation_a_restart_cut_before_its_bind_is_resumed_from_its_request(store):
    await cut_reservation(store, bound=None)
    resolutions: list[KeyResolution] = []
    resumes = Resumes()
    ledger = ledger_on(store, resolutions, run_id="run-after", resume=resumes)
    send = Sends()

    first = await ledger.run("k", HELLO, FailureDelivery.RESULT, send, deadline=5.0)
    again = await ledger.run("k", HELLO, FailureDelivery.RESULT, send)

    assert first == again == RESULT
    assert send.runs == 0  # the resumption runs the stored request, not this call's
    assert resumes.seen == [
        Resumption(
            key="k",
            send_input=HELLO,
            failure_delivery=FailureDelivery.RESULT,
            bound=None,
            deadline=5.0,
        )
    ]
    assert resolutions == [KeyResolution.RESUMED, KeyResolution.REPLAYED]
    assert await ledger.read("k") == SendReturned(input=HELLO, outcome=RESULT)


async def test_a_reservation_a_restart_cut_after_its_bind_is_resumed_with_what_it_bound(store):
    bound = SendResult(post_ids=("pst_1", "pst_2"), operation_id="col_x")
    await cut_reservation(store, bound=bound_bytes(bound))
    resumes = Resumes(SendResult(operation_id="col_x", post_ids=("pst_1",)))
    ledger = ledger_on(store, [], run_id="run-after", resume=resumes)

    result = await ledger.run("k", HELLO, FailureDelivery.RESULT, Sends())

    assert result == SendResult(operation_id="col_x", post_ids=("pst_1",))
    assert [resumption.bound for resumption in resumes.seen] == [bound]
    row = await store.send_row(AGENT, "k")
    assert row is not None
    assert row.bound == bound_bytes(bound)  # the outcome leaves what was bound as it was


async def test_read_send_resumes_a_cut_reservation_and_reports_it_pending_then_returned(store):
    await cut_reservation(store, bound=None)
    resolutions: list[KeyResolution] = []
    resumes = Resumes()
    resumes.release = asyncio.Event()
    ledger = ledger_on(store, resolutions, run_id="run-after", resume=resumes)

    assert await ledger.read("k") == SendPending(input=HELLO)
    assert await ledger.read("k") == SendPending(input=HELLO)
    joined = asyncio.ensure_future(ledger.run("k", HELLO, FailureDelivery.RESULT, Sends()))
    await eventually(lambda: asyncio.sleep(0, len(resolutions)), lambda n: n == 1)
    resumes.release.set()

    assert await joined == RESULT
    assert len(resumes.seen) == 1
    assert resolutions == [KeyResolution.JOINED]
    assert await ledger.read("k") == SendReturned(input=HELLO, outcome=RESULT)


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


async def test_closing_cancels_live_invocations_and_the_next_run_resumes_their_keys(store):
    ledger = ledger_on(store, [])
    send = Sends()
    send.release = asyncio.Event()
    caller = asyncio.ensure_future(ledger.run("k", HELLO, FailureDelivery.RESULT, send))
    await eventually(lambda: asyncio.sleep(0, send.runs), lambda runs: runs == 1)
    row = await store.send_row(AGENT, "k")
    assert row is not None
    assert (row.outcome, row.bound, row.resumable) == (None, None, True)

    await ledger.close()
    await asyncio.gather(caller, return_exceptions=True)

    # Without a way to resume (as a ledger built so), it is indeterminate; with one, resumed.
    assert await ledger_on(store, [], run_id="run-2").read("k") == SendIndeterminate(input=HELLO)
    resumes = Resumes()
    restarted = ledger_on(store, [], run_id="run-2", resume=resumes)
    assert await restarted.run("k", HELLO, FailureDelivery.RESULT, Sends()) == RESULT
    assert len(resumes.seen) == 1


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


async def test_callers_of_an_invocation_close_stopped_are_answered_outcome_unknown(store):
    """A teardown or shutdown cancels live invocations (`close()`): every caller waiting on
    one gets `outcome-unknown` at once, never a cancelled call left open until its deadline,
    and the key stays for a retry to resume (cluster.md §3.2)."""
    resolutions: list[KeyResolution] = []
    ledger = ledger_on(store, resolutions)
    send = Sends()
    send.release = asyncio.Event()
    calls = [
        asyncio.ensure_future(ledger.run("k", HELLO, FailureDelivery.RESULT, send))
        for _ in range(2)
    ]
    await eventually(lambda: asyncio.sleep(0, len(resolutions)), lambda n: n == 2)

    await ledger.close()

    for call in calls:
        with pytest.raises(SendError) as failure:
            await call
        assert failure.value.reason is SendErrorReason.OUTCOME_UNKNOWN
    assert not isinstance(await ledger.read("k"), SendReturned)

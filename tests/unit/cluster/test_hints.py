"""The hint sender (cluster.md §3.4): hints for one replica within the window leave in one
call, duplicates coalesce, one call per target is in flight, the pending set is bounded by
dropping the oldest, and a failed call is a rate-limited log line, never an error. Time is a
`FakeClock`; the calls go to a fake `send` that records them."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import pytest

from gateway.clock import FakeClock
from gateway.cluster.hints import (
    FAILURES_REMEMBERED,
    HINT_DELAY,
    MAX_HINT_ITEMS,
    HintSender,
    HintSenderState,
    HintUnsent,
    parse_settled_post,
    settled_post,
)
from tests.support import eventually

A = "10.0.0.1:7000"
B = "10.0.0.2:7000"
WAIT = 5.0
"""Seconds a test waits for a call it expects (a bound, never a timing assertion)."""


@dataclass(frozen=True, slots=True)
class Call:
    address: str
    conversations: tuple[str, ...]
    settled_posts: tuple[str, ...]
    delivery_agents: tuple[str, ...]


class FakeSend:
    """Records calls; while `hold` is set, each call waits for `release()`; `fail` makes the
    next calls raise `HintUnsent`."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.fail = False
        self.hold = False
        self._released = asyncio.Event()
        self._arrived = asyncio.Condition()

    async def __call__(
        self,
        address: str,
        conversations: tuple[str, ...],
        settled_posts: tuple[str, ...],
        delivery_agents: tuple[str, ...],
    ) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            async with self._arrived:
                self.calls.append(Call(address, conversations, settled_posts, delivery_agents))
                self._arrived.notify_all()
            if self.hold:
                await self._released.wait()
                self._released.clear()
            if self.fail:
                raise HintUnsent(f"hint to {address}: UNAVAILABLE: connection refused")
        finally:
            self.in_flight -= 1

    def release(self) -> None:
        self._released.set()

    async def wait_calls(self, count: int) -> list[Call]:
        """The calls once there are `count` of them (at most `WAIT` seconds)."""
        async with asyncio.timeout(WAIT):
            async with self._arrived:
                await self._arrived.wait_for(lambda: len(self.calls) >= count)
        return list(self.calls)


async def window_armed(clock: FakeClock, count: int = 1) -> None:
    """Wait until `count` targets' windows are waiting on the clock."""

    async def sleepers() -> int:
        return clock.sleepers

    await eventually(sleepers, lambda armed: armed >= count, within=WAIT)


@pytest.fixture
async def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def send() -> FakeSend:
    return FakeSend()


@pytest.fixture
async def sender(clock: FakeClock, send: FakeSend):
    hints = HintSender(send, clock=clock)
    hints.start()
    async with hints:
        yield hints


async def test_hints_for_one_replica_within_the_window_leave_in_one_call_grouped_by_kind(
    clock, send, sender
):
    sender.hint(A, conversations=("cnv_1",))
    sender.hint(A, settled_posts=(settled_post("agt_a", "pst_1"),), delivery_agents=("agt_b",))
    sender.hint(A, conversations=("cnv_2",), delivery_agents=("agt_c",))
    await window_armed(clock)
    assert send.calls == [], "nothing leaves before the window passes"
    assert sender.pending(A) == 5

    clock.advance(HINT_DELAY)

    assert await send.wait_calls(1) == [
        Call(A, ("cnv_1", "cnv_2"), ("agt_a/pst_1",), ("agt_b", "agt_c")),
    ]
    assert sender.pending(A) == 0


async def test_a_repeated_hint_is_sent_once(clock, send, sender):
    for _ in range(3):
        sender.hint(A, conversations=("cnv_1",), delivery_agents=("agt_b",))
    await window_armed(clock)
    clock.advance(HINT_DELAY)
    (call,) = await send.wait_calls(1)
    assert (call.conversations, call.delivery_agents) == (("cnv_1",), ("agt_b",))


async def test_each_replica_gets_its_own_call(clock, send, sender):
    sender.hint(A, conversations=("cnv_a",))
    sender.hint(B, conversations=("cnv_b",))
    await window_armed(clock, 2)
    clock.advance(HINT_DELAY)
    calls = await send.wait_calls(2)
    assert sorted((call.address, call.conversations) for call in calls) == [
        (A, ("cnv_a",)),
        (B, ("cnv_b",)),
    ]


async def test_an_empty_hint_sends_nothing_and_arms_nothing(clock, send, sender):
    sender.hint(A)
    await asyncio.sleep(0)
    assert clock.sleepers == 0
    assert sender.pending(A) == 0


async def test_one_call_per_replica_is_in_flight_and_what_arrives_meanwhile_goes_next(
    clock, send, sender
):
    send.hold = True
    sender.hint(A, conversations=("cnv_1",))
    await window_armed(clock)
    clock.advance(HINT_DELAY)
    await send.wait_calls(1)

    # The first call is in flight: these wait, coalesced, for it to end.
    sender.hint(A, conversations=("cnv_2",))
    sender.hint(A, conversations=("cnv_3", "cnv_2"))
    assert sender.pending(A) == 2
    send.hold = False
    send.release()

    calls = await send.wait_calls(2)
    assert [sorted(call.conversations) for call in calls] == [["cnv_1"], ["cnv_2", "cnv_3"]]
    assert send.most_in_flight == 1


async def test_beyond_the_bound_the_oldest_pending_hints_are_dropped(clock, send):
    async with HintSender(send, clock=clock, max_pending=3) as sender:
        sender.start()
        sender.hint(A, conversations=("cnv_1", "cnv_2", "cnv_3"))
        # Hinted again, cnv_1 is the newest, so cnv_2 is the oldest when cnv_4 arrives.
        sender.hint(A, conversations=("cnv_1",))
        sender.hint(A, delivery_agents=("agt_a", "agt_b"))
        assert sender.pending(A) == 3
        assert sender.dropped == 2
        await window_armed(clock)
        clock.advance(HINT_DELAY)
        (call,) = await send.wait_calls(1)
        assert (call.conversations, call.delivery_agents) == (("cnv_1",), ("agt_a", "agt_b"))


async def test_no_call_carries_more_than_the_services_limit(clock, send):
    async with HintSender(send, clock=clock, max_pending=MAX_HINT_ITEMS + 10) as sender:
        sender.start()
        sender.hint(A, delivery_agents=tuple(f"agt_{n}" for n in range(MAX_HINT_ITEMS + 10)))
        await window_armed(clock)
        clock.advance(HINT_DELAY)
        calls = await send.wait_calls(2)
        assert [len(call.delivery_agents) for call in calls] == [MAX_HINT_ITEMS, 10]
        assert calls[1].delivery_agents[-1] == f"agt_{MAX_HINT_ITEMS + 9}"


async def test_a_failed_call_is_one_warning_per_interval_and_never_reaches_the_committer(
    clock, send, caplog
):
    caplog.set_level(logging.DEBUG, logger="gateway.cluster.hints")
    send.fail = True
    async with HintSender(send, clock=clock, failure_log_interval=30.0) as sender:
        sender.start()
        for round_ in range(3):
            sender.hint(A, conversations=(f"cnv_{round_}",))
            await window_armed(clock)
            clock.advance(HINT_DELAY)
            await send.wait_calls(round_ + 1)
            await eventually(_async(lambda: sender.pending(A)), lambda n: n == 0, within=WAIT)
        await eventually(_async(lambda: _lines(caplog, logging.DEBUG)), lambda n: n == 2)
        assert _lines(caplog, logging.WARNING) == 1

        # Past the interval the next failure warns again, counting the two held back.
        clock.advance(30.0)
        sender.hint(A, conversations=("cnv_late",))
        await window_armed(clock)
        clock.advance(HINT_DELAY)
        await send.wait_calls(4)
        await eventually(_async(lambda: _lines(caplog, logging.WARNING)), lambda n: n == 2)
        assert "2 failed calls held back" in _messages(caplog, logging.WARNING)[-1]
        assert "10.0.0.1:7000" in _messages(caplog, logging.WARNING)[-1]

        # The target is back: one line says so, and hints flow again.
        send.fail = False
        sender.hint(A, conversations=("cnv_back",))
        await window_armed(clock)
        clock.advance(HINT_DELAY)
        assert (await send.wait_calls(5))[-1].conversations == ("cnv_back",)
        await eventually(
            _async(lambda: _messages(caplog, logging.INFO)),
            lambda lines: lines == ["cluster hints reach 10.0.0.1:7000 again"],
        )
    assert not [record for record in caplog.records if record.exc_info]


async def test_a_replica_that_stopped_failing_long_ago_is_forgotten_by_the_failure_log(
    clock, send, caplog
):
    caplog.set_level(logging.INFO, logger="gateway.cluster.hints")
    send.fail = True
    async with HintSender(send, clock=clock, failure_log_interval=30.0) as sender:
        sender.start()
        sender.hint(A, conversations=("cnv_1",))
        await window_armed(clock)
        clock.advance(HINT_DELAY)
        await send.wait_calls(1)
        await eventually(_async(lambda: _lines(caplog, logging.WARNING)), lambda n: n == 1)

        # Long after A's last failure, B's failure prunes A from the log ...
        clock.advance(30.0 * FAILURES_REMEMBERED)
        sender.hint(B, conversations=("cnv_2",))
        await window_armed(clock)
        clock.advance(HINT_DELAY)
        await send.wait_calls(2)
        await eventually(_async(lambda: _lines(caplog, logging.WARNING)), lambda n: n == 2)

        # ... so A's success has nothing to report, while B's recovery is still news.
        send.fail = False
        sender.hint(A, conversations=("cnv_3",))
        sender.hint(B, conversations=("cnv_4",))
        await window_armed(clock, 2)
        clock.advance(HINT_DELAY)
        await send.wait_calls(4)
        await eventually(
            _async(lambda: _messages(caplog, logging.INFO)),
            lambda lines: lines == [f"cluster hints reach {B} again"],
        )


async def test_hinting_before_start_is_refused_and_after_close_is_dropped(clock, send):
    sender = HintSender(send, clock=clock)
    with pytest.raises(RuntimeError, match="start it"):
        sender.hint(A, conversations=("cnv_1",))
    sender.start()
    with pytest.raises(RuntimeError, match="running"):
        sender.start()
    await sender.close()
    await sender.close()
    assert sender.state is HintSenderState.CLOSED
    sender.hint(A, conversations=("cnv_1",))
    assert sender.pending(A) == 0
    assert clock.sleepers == 0


async def test_closing_is_safe_before_start():
    sender = HintSender(FakeSend())
    await sender.close()
    assert sender.state is HintSenderState.CLOSED


async def test_close_cancels_the_call_in_flight_and_the_waiting_windows(clock, send):
    sender = HintSender(send, clock=clock)
    sender.start()
    send.hold = True
    sender.hint(A, conversations=("cnv_1",))
    sender.hint(B, conversations=("cnv_2",))
    await window_armed(clock, 2)
    clock.advance(HINT_DELAY)
    await send.wait_calls(2)
    sender.hint(A, conversations=("cnv_3",))

    await sender.close()

    assert send.in_flight == 0, "the calls in flight were cancelled"
    assert sender.pending(A) == 0
    assert len(send.calls) == 2


def test_a_settled_post_entry_is_the_author_then_the_post():
    entry = settled_post("agt_author", "pst_one")
    assert entry == "agt_author/pst_one"
    assert parse_settled_post(entry) == ("agt_author", "pst_one")
    for malformed in ("", "agt_author", "/pst_one", "agt_author/", "a/b/c"):
        assert parse_settled_post(malformed) is None, malformed


def test_a_sender_needs_room_for_one_hint():
    with pytest.raises(ValueError, match="max_pending"):
        HintSender(FakeSend(), max_pending=0)


def _async(read):
    async def probe():
        return read()

    return probe


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == level and record.name == "gateway.cluster.hints"
    ]


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> int:
    return len(_messages(caplog, level))

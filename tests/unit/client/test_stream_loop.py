from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import grpc
import pytest
from harness_client import (
    ConnectionState,
    DirectMessage,
    HarnessError,
    InboundDelivery,
    ListenError,
    ListenErrorReason,
    MulticastItem,
    TextPart,
    TransportError,
)
from harness_client._connection import _ConnectionStates
from harness_client._retry import Backoff
from harness_client._stream import STREAM_OPEN_METADATA, _ReplayFilter, _StreamLoop
from harness_contract._gen.harness.v1 import endpoint_pb2, types_pb2


def test_the_replay_filter_passes_a_token_once():
    replay = _ReplayFilter()
    assert replay.first_time("a")
    assert not replay.first_time("a")
    assert replay.first_time("b")


def test_the_replay_filter_is_bounded_and_forgets_the_oldest_first():
    replay = _ReplayFilter(capacity=2)
    for token in ("a", "b", "c"):
        assert replay.first_time(token)
    assert replay.first_time("a")  # forgotten, so it passes again
    assert not replay.first_time("c")


def unavailable() -> grpc.aio.AioRpcError:
    return failed(grpc.StatusCode.UNAVAILABLE)


def failed(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details="reset")


class FakeTime:
    """The loop's clock: each backoff sleep, and each attempt, moves it on by `per_attempt`
    seconds (an attempt that waited for a gateway that is away), and nothing really sleeps."""

    def __init__(self, per_attempt: float) -> None:
        self.now = 0.0
        self.per_attempt = per_attempt

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds + self.per_attempt


class FakeCall:
    """A `Messages` call: optional open metadata, some tokens, then an error."""

    def __init__(self, *, opened: bool, tokens: Sequence[str], error: grpc.aio.AioRpcError) -> None:
        self._opened = opened
        self._tokens = tokens
        self._error = error
        self.cancelled = False

    async def initial_metadata(self) -> grpc.aio.Metadata:
        return grpc.aio.Metadata(STREAM_OPEN_METADATA) if self._opened else grpc.aio.Metadata()

    def __aiter__(self) -> AsyncIterator[endpoint_pb2.MessagesResponse]:
        return self._responses()

    async def _responses(self) -> AsyncIterator[endpoint_pb2.MessagesResponse]:
        for token in self._tokens:
            yield endpoint_pb2.MessagesResponse(
                delivery=types_pb2.InboundDelivery(delivery_token=token)
            )
        raise self._error

    def cancel(self) -> bool:
        self.cancelled = True
        return True


def decode(response: endpoint_pb2.MessagesResponse) -> InboundDelivery:
    return InboundDelivery(
        token=response.delivery.delivery_token,
        item=MulticastItem(
            message=DirectMessage(
                post_id="pst_x", address="agent:b", sender="agent:b", content=(TextPart(text="x"),)
            )
        ),
    )


class SeenRoute:
    """The route every call of a test takes: what the calls reported to it."""

    def __init__(self) -> None:
        self.answers: list[tuple[tuple[str, str | bytes], ...]] = []
        self.failures: list[str] = []

    def observe(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> None:
        self.answers.append(tuple(metadata or ()))

    def failed(self, failure: HarnessError) -> None:
        self.failures.append(str(failure.reason))


def make_loop(
    calls: list[FakeCall],
    takeovers: list[bool],
    route: SeenRoute | None = None,
    **options: Any,
) -> _StreamLoop:
    taken = route or SeenRoute()

    def open_call(takeover: bool) -> Any:
        takeovers.append(takeover)
        return calls.pop(0), taken

    loop = _StreamLoop(
        open_call=open_call, decode=decode, takeover=False, is_closed=lambda: False, **options
    )
    loop._backoff = Backoff(initial=0.0, maximum=0.0)
    return loop


async def test_a_lost_stream_reconnects_taking_over_its_own_and_skips_what_it_yielded():
    first = FakeCall(opened=True, tokens=["t1"], error=unavailable())
    second = FakeCall(opened=True, tokens=["t1", "t2"], error=unavailable())
    takeovers: list[bool] = []
    deliveries = make_loop([first, second], takeovers).deliveries()
    assert (await anext(deliveries)).token == "t1"
    assert (await anext(deliveries)).token == "t2"
    assert takeovers == [False, True]
    assert first.cancelled
    await deliveries.aclose()


async def test_a_stream_never_opened_reconnects_without_taking_over():
    never = FakeCall(opened=False, tokens=[], error=unavailable())
    then = FakeCall(opened=True, tokens=["t1"], error=unavailable())
    takeovers: list[bool] = []
    deliveries = make_loop([never, then], takeovers).deliveries()
    assert (await anext(deliveries)).token == "t1"
    assert takeovers == [False, False]
    await deliveries.aclose()


async def test_without_a_stream_for_too_long_the_iterator_fails_transport_failed():
    calls = [FakeCall(opened=False, tokens=[], error=unavailable())]
    deliveries = make_loop(calls, [], give_up_after=-1.0).deliveries()
    with pytest.raises(ListenError) as raised:
        await anext(deliveries)
    assert raised.value.reason is ListenErrorReason.TRANSPORT_FAILED


def heard() -> tuple[_ConnectionStates, list[ConnectionState]]:
    """The endpoint's state record and the changes a listener of it hears."""
    states = _ConnectionStates()
    changes: list[ConnectionState] = []
    states.subscribe(changes.append)
    return states, changes


def outage(attempts: int) -> list[FakeCall]:
    return [FakeCall(opened=False, tokens=[], error=unavailable()) for _ in range(attempts)]


async def test_the_loop_never_gives_up_on_its_own_and_reports_ready_reconnecting_ready():
    time = FakeTime(per_attempt=30.0)
    calls = [
        FakeCall(opened=True, tokens=["t1"], error=unavailable()),
        *outage(40),  # twenty minutes without a gateway, far past the old five-minute limit
        FakeCall(opened=True, tokens=["t2"], error=unavailable()),
    ]
    record, states = heard()
    deliveries = make_loop(
        calls, [], report=record.report, clock=time.monotonic, sleep=time.sleep
    ).deliveries()
    assert (await anext(deliveries)).token == "t1"
    assert (await anext(deliveries)).token == "t2"
    assert time.now > 20 * 60
    assert states == [ConnectionState.READY, ConnectionState.RECONNECTING, ConnectionState.READY]
    await deliveries.aclose()
    assert states[-1] is ConnectionState.CONNECTING


async def test_a_caller_bound_ends_the_loop_transport_failed_once_it_passed_without_a_stream():
    time = FakeTime(per_attempt=30.0)
    calls = [FakeCall(opened=True, tokens=["t1"], error=unavailable()), *outage(40)]
    deliveries = make_loop(
        calls, [], give_up_after=300.0, clock=time.monotonic, sleep=time.sleep
    ).deliveries()
    assert (await anext(deliveries)).token == "t1"
    with pytest.raises(ListenError) as raised:
        await anext(deliveries)
    assert raised.value.reason is ListenErrorReason.TRANSPORT_FAILED
    assert 300.0 <= time.now < 400.0


async def test_attempts_that_never_open_a_stream_stay_connecting():
    record, states = heard()
    calls = [*outage(3), FakeCall(opened=True, tokens=["t1"], error=unavailable())]
    deliveries = make_loop(calls, [], report=record.report).deliveries()
    assert (await anext(deliveries)).token == "t1"
    assert states == [ConnectionState.READY]
    await deliveries.aclose()


async def test_a_stream_without_the_open_header_is_ready_once_it_delivers():
    record, states = heard()
    calls = [FakeCall(opened=False, tokens=["t1"], error=unavailable())]
    deliveries = make_loop(calls, [], report=record.report).deliveries()
    assert (await anext(deliveries)).token == "t1"
    assert states == [ConnectionState.READY]
    await deliveries.aclose()


async def test_a_failure_no_retry_can_fix_ends_the_loop_with_it():
    calls = [
        FakeCall(opened=True, tokens=["t1"], error=failed(grpc.StatusCode.UNAUTHENTICATED)),
        *outage(1),
    ]
    record, states = heard()
    deliveries = make_loop(calls, [], report=record.report).deliveries()
    assert (await anext(deliveries)).token == "t1"
    with pytest.raises(TransportError) as raised:
        await anext(deliveries)
    assert raised.value.code is grpc.StatusCode.UNAUTHENTICATED
    assert len(calls) == 1  # never reconnected
    assert states == [ConnectionState.READY, ConnectionState.CONNECTING]


async def test_leaving_the_iterator_cancels_the_open_call_at_once():
    call = FakeCall(opened=True, tokens=["t1", "t2"], error=unavailable())
    deliveries = make_loop([call], []).deliveries()
    assert (await anext(deliveries)).token == "t1"
    await deliveries.aclose()
    assert call.cancelled


async def test_each_call_reports_its_headers_and_its_failure_to_the_route_it_took():
    route = SeenRoute()
    calls = [
        FakeCall(opened=True, tokens=["t1"], error=unavailable()),
        FakeCall(opened=True, tokens=["t2"], error=unavailable()),
    ]
    deliveries = make_loop(calls, [], route).deliveries()
    assert (await anext(deliveries)).token == "t1"
    assert (await anext(deliveries)).token == "t2"
    assert route.answers == [(STREAM_OPEN_METADATA,), (STREAM_OPEN_METADATA,)]
    assert route.failures == ["unavailable"]
    await deliveries.aclose()

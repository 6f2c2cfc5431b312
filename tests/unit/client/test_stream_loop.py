from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import pytest
from harness_client import (
    DirectMessage,
    InboundDelivery,
    ListenError,
    ListenErrorReason,
    MulticastItem,
    TextPart,
)
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
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details="reset"
    )


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


def make_loop(calls: list[FakeCall], takeovers: list[bool], **options: Any) -> _StreamLoop:
    def open_call(takeover: bool) -> Any:
        takeovers.append(takeover)
        return calls.pop(0)

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

"""`ClusterPeerService.Hint` between real gRPC ends (cluster.md §3.4): a `HintSender` over the
real `ClusterHintClient` reaches a real server's `ClusterHintsPort`; a call without the
cluster's peer token, in another version, or over the size bound is refused before the port
sees it; and a target replica that is down costs the sender one log line, nothing more."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from harness_contract._gen.harness.v1 import cluster_pb2, cluster_pb2_grpc

from gateway.cluster.hints import MAX_HINT_ITEMS, HintSender, HintUnsent, settled_post
from gateway.rpc.cluster_client import ClusterHintClient, HintClientState
from gateway.rpc.cluster_service import ClusterPeerService
from gateway.rpc.forward import HomeChannels
from gateway.rpc.peer import (
    HARNESS_VERSION,
    PEER_UNAUTHENTICATED,
    VERSION_KEY,
    VERSION_MISMATCH,
    PeerGuard,
    open_peer_channel,
)
from gateway.rpc.server import RpcServer, build_peer_server
from gateway.settings import Settings
from tests.servers import free_port
from tests.support import eventually

PEER_TOKEN = "hpeer_" + "c" * 43
WRONG_TOKEN = "hpeer_" + "w" * 43


@dataclass(frozen=True, slots=True)
class Hint:
    from_replica: str
    conversations: tuple[str, ...]
    settled_posts: tuple[str, ...]
    delivery_agents: tuple[str, ...]


class RecordingHints:
    """A `ClusterHintsPort` that records what it was told."""

    def __init__(self) -> None:
        self.hints: list[Hint] = []

    def on_hint(
        self,
        from_replica: str,
        conversations: tuple[str, ...],
        settled_posts: tuple[str, ...],
        delivery_agents: tuple[str, ...],
    ) -> None:
        self.hints.append(Hint(from_replica, conversations, settled_posts, delivery_agents))


@contextlib.asynccontextmanager
async def served_hints(hints: RecordingHints) -> AsyncIterator[RpcServer]:
    """`hints` behind a real `ClusterPeerService` on 127.0.0.1:0."""
    server = await build_peer_server(
        Settings(listen="127.0.0.1:0", metrics_listen=None, reflection=False),
        [ClusterPeerService(hints, PeerGuard(PEER_TOKEN)).binding()],
    )
    await server.start()
    await server.set_serving()
    try:
        yield server
    finally:
        await server.stop(None)


@contextlib.asynccontextmanager
async def raw_stub(address: str) -> AsyncIterator[cluster_pb2_grpc.ClusterPeerServiceAsyncStub]:
    channel = open_peer_channel(address)
    try:
        yield cluster_pb2_grpc.ClusterPeerServiceStub(channel)
    finally:
        await channel.close()


def metadata(token: str, version: str = HARNESS_VERSION) -> tuple[tuple[str, str], ...]:
    return ((VERSION_KEY, version), ("authorization", f"Bearer {token}"))


def error_info_reason(error: grpc.aio.AioRpcError) -> str | None:
    """The `ErrorInfo.reason` in a failed call's status details."""
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            for detail in status_pb2.Status.FromString(value).details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return str(info.reason)
    return None


async def test_hints_sent_after_commits_reach_the_replica_they_name():
    hints = RecordingHints()
    async with (
        served_hints(hints) as server,
        ClusterHintClient.connect(replica_id="replica-a", peer_token=PEER_TOKEN) as client,
        HintSender(client.send) as sender,
    ):
        sender.start()
        sender.hint(server.address, conversations=("cnv_1",))
        sender.hint(
            server.address,
            settled_posts=(settled_post("agt_author", "pst_1"),),
            delivery_agents=("agt_reader",),
        )

        async def received() -> list[Hint]:
            return list(hints.hints)

        got = await eventually(received, lambda seen: seen != [])
    # One window, one call: the three hints arrived together.
    assert got == [Hint("replica-a", ("cnv_1",), ("agt_author/pst_1",), ("agt_reader",))]


async def test_a_call_without_the_peer_token_is_unauthenticated_and_tells_the_port_nothing():
    hints = RecordingHints()
    async with served_hints(hints) as server, raw_stub(server.address) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Hint(
                cluster_pb2.HintRequest(from_replica="intruder", conversations=["cnv_1"]),
                metadata=metadata(WRONG_TOKEN),
                timeout=5,
            )
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert error_info_reason(refused.value) == PEER_UNAUTHENTICATED

        async with ClusterHintClient.connect(replica_id="b", peer_token=WRONG_TOKEN) as client:
            with pytest.raises(HintUnsent, match="UNAUTHENTICATED"):
                await client.send(server.address, ("cnv_1",), (), ())
    assert hints.hints == []


async def test_a_call_in_another_version_is_refused_as_a_version_mismatch():
    hints = RecordingHints()
    async with served_hints(hints) as server, raw_stub(server.address) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Hint(
                cluster_pb2.HintRequest(from_replica="old", conversations=["cnv_1"]),
                metadata=metadata(PEER_TOKEN, version="harness/0"),
                timeout=5,
            )
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert error_info_reason(refused.value) == VERSION_MISMATCH
    assert hints.hints == []


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (
            cluster_pb2.HintRequest(
                from_replica="a",
                conversations=[f"cnv_{n}" for n in range(MAX_HINT_ITEMS // 2)],
                delivery_agents=[f"agt_{n}" for n in range(MAX_HINT_ITEMS // 2 + 1)],
            ),
            "at most 4096",
        ),
        (cluster_pb2.HintRequest(conversations=["cnv_1"]), "from_replica"),
        (cluster_pb2.HintRequest(from_replica="a", settled_posts=["pst_1"]), "settled_posts"),
    ],
    ids=["over-the-bound", "no-sender", "settled-post-without-author"],
)
async def test_a_malformed_or_oversized_hint_is_invalid_argument_and_tells_the_port_nothing(
    request_, field
):
    hints = RecordingHints()
    async with served_hints(hints) as server, raw_stub(server.address) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Hint(request_, metadata=metadata(PEER_TOKEN), timeout=5)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert field in (refused.value.details() or "")

        # Exactly at the bound is a hint like any other.
        await stub.Hint(
            cluster_pb2.HintRequest(
                from_replica="a", delivery_agents=[f"agt_{n}" for n in range(MAX_HINT_ITEMS)]
            ),
            metadata=metadata(PEER_TOKEN),
            timeout=5,
        )
    assert [len(hint.delivery_agents) for hint in hints.hints] == [MAX_HINT_ITEMS]


async def test_a_replica_that_is_down_costs_the_sender_one_log_line_and_nothing_else(caplog):
    caplog.set_level(logging.DEBUG, logger="gateway.cluster.hints")
    down = f"127.0.0.1:{free_port()}"
    hints = RecordingHints()
    async with (
        served_hints(hints) as server,
        ClusterHintClient.connect(replica_id="replica-a", peer_token=PEER_TOKEN) as client,
        HintSender(client.send) as sender,
    ):
        sender.start()
        sender.hint(down, conversations=("cnv_lost",))

        async def warnings() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

        lines = await eventually(warnings, lambda seen: seen != [])
        assert len(lines) == 1
        assert f"cluster hint to {down} failed" in lines[0]
        assert sender.pending(down) == 0

        # A second hint to the dead replica, within the interval, adds no line; the live
        # replica still gets its hints.
        sender.hint(down, conversations=("cnv_lost_again",))
        sender.hint(server.address, conversations=("cnv_kept",))

        async def received() -> list[Hint]:
            return list(hints.hints)

        async def held_back() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]

        await eventually(received, lambda seen: seen != [])
        (debug,) = await eventually(held_back, lambda seen: seen != [])
        assert f"cluster hint to {down} failed" in debug
    assert [hint.conversations for hint in hints.hints] == [("cnv_kept",)]
    assert len(await warnings()) == 1


async def test_a_closed_client_refuses_to_send_and_leaves_shared_channels_open():
    hints = RecordingHints()
    channels = HomeChannels(lambda address: open_peer_channel(address))
    try:
        async with served_hints(hints) as server:
            client = ClusterHintClient.connect(
                replica_id="a", peer_token=PEER_TOKEN, channels=channels
            )
            await client.send(server.address, (), (), ("agt_1",))
            await client.close()
            assert client.state is HintClientState.CLOSED
            with pytest.raises(HintUnsent, match="closed"):
                await client.send(server.address, (), (), ("agt_2",))

            # The shared channel still carries another client's hints.
            async with ClusterHintClient.connect(
                replica_id="b", peer_token=PEER_TOKEN, channels=channels
            ) as other:
                await other.send(server.address, (), (), ("agt_3",))
    finally:
        await channels.close()
    assert [(h.from_replica, h.delivery_agents) for h in hints.hints] == [
        ("a", ("agt_1",)),
        ("b", ("agt_3",)),
    ]

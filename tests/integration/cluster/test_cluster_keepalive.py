"""A forwarded `Messages` stream whose home vanished without resetting its connections ends
UNAVAILABLE within seconds, and the agent reconnects to its new home (cluster.md §9.1).

Two `serve --cluster` replica processes on one real PostgreSQL. An agent homed at replica B
opens its stream at replica A (a plain gRPC stub, which ignores the home hint), so A forwards
it to B. B is SIGSTOPped: its kernel keeps the TCP connection up and answers nothing else, as a
lost node's would answer nothing at all. The peer channel's keepalive (a ping every 5 s, 2 s
to answer) cuts the forwarded stream, which ends UNAVAILABLE; once A has claimed B's
partitions the agent reconnects through A and receives a message sent to it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

import grpc
import harness_client
import pytest
from harness_client import MessageInput, MulticastItem
from harness_contract._gen.harness.v1 import endpoint_pb2, endpoint_pb2_grpc

from gateway.testing_cluster import random_name
from tests.integration.cluster.cluster_support import process_cluster
from tests.servers import PostgresServer

pytestmark = pytest.mark.slow

TWO: Final = ("replica-a", "replica-b")

STREAM_END_BOUND: Final = 12.0
"""Seconds within which the forwarded stream ends once its home is stopped: the peer
keepalive's 5 s ping and 2 s timeout, with room for a busy machine. Without the keepalive
the stream hangs until TCP gives up, minutes later."""

CLAIM_BOUND: Final = 40.0
"""Seconds until replica A holds every partition: B's lease (6 s) and a claim pass."""

DELIVERY_BOUND: Final = 30.0
"""Seconds for the reconnected stream to receive the message sent after the move."""

AGENTS: Final = 8
"""Agents registered so that at least one is homed at B (each is, with probability 1/2)."""


async def test_a_forwarded_stream_to_a_stopped_home_ends_unavailable_and_reconnects_to_the_new_home(
    postgres_server: PostgresServer, tmp_path
) -> None:
    async with process_cluster(postgres_server, tmp_path / "cluster", TWO) as cluster:
        front, home = (cluster.replicas[name] for name in TWO)
        async with await harness_client.connect_management(
            front.bound, admin_token=cluster.files.admin()
        ) as operator:
            names = [random_name(f"k{i}") for i in range(AGENTS)]
            tokens = {name: (await operator.register_agent(name)).token for name in names}
        homes = cluster.homes(names)
        listener = next(name for name in names if homes[name] == "replica-b")
        sender = next(name for name in names if name != listener)

        async with grpc.aio.insecure_channel(front.bound) as channel:
            stub = endpoint_pb2_grpc.HarnessEndpointServiceStub(channel)
            stream = stub.Messages(
                endpoint_pb2.MessagesRequest(),
                metadata=(("authorization", f"Bearer {tokens[listener]}"),),
            )
            initial = dict(await stream.initial_metadata())
            assert initial.get("harness-stream") == "open", initial
            assert initial.get("harness-home") == home.bound, "the stream was not forwarded"

            async def ended() -> grpc.StatusCode:
                try:
                    async for _ in stream:
                        pass
                except grpc.aio.AioRpcError as error:
                    return error.code()
                return grpc.StatusCode.OK

            home.pause()
            try:
                paused_at = time.monotonic()
                code = await asyncio.wait_for(ended(), STREAM_END_BOUND)
                print(
                    f"cluster.md §9.1: the forwarded stream ended {code.name} "
                    f"{time.monotonic() - paused_at:.1f} s after its home was stopped"
                )
                assert code is grpc.StatusCode.UNAVAILABLE
                await cluster.wait_held_by(["replica-a"], within=CLAIM_BOUND)
            finally:
                home.resume()

        # The agent reconnects through A, now its home, and gets what is sent to it.
        text = f"after the move {random_name('m')}"
        async with (
            await harness_client.connect(front.bound, token=tokens[listener]) as receiving,
            await harness_client.connect(front.bound, token=tokens[sender]) as sending,
        ):
            messages = receiving.messages()

            async def received() -> str:
                async for delivery in messages:
                    item = delivery.item
                    if isinstance(item, MulticastItem):
                        return harness_client.text_of(item.message.content)
                raise AssertionError("the stream ended without the message")

            waiting = asyncio.ensure_future(received())
            try:
                await sending.send(
                    MessageInput(to=f"agent:{listener}", text=text), deadline=DELIVERY_BOUND
                )
                assert await asyncio.wait_for(waiting, DELIVERY_BOUND) == text
            finally:
                waiting.cancel()
                await messages.aclose()

"""The Router contract suite through gRPC: `GrpcRouter` against a real `RouterService`
on 127.0.0.1:0 wrapping an `InProcessRouter`, plus what only a remote Router adds (peer
token, `harness-version`, transport failures, shutdown of held reads)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest
from harness_contract._gen.harness.v1 import router_pb2, router_pb2_grpc
from hypothesis import HealthCheck, given, settings

from gateway.router import (
    POLL_HOLD,
    Batch,
    Cursor,
    Entry,
    EnvelopeVerifier,
    InProcessRouter,
    RingSettings,
    RouterClosedError,
    RouterPort,
    RouterUnavailable,
    RouterVersionMismatch,
    SendMode,
)
from gateway.rpc.peer import PeerConfigError, PeerGuard, is_version_mismatch
from gateway.rpc.router_client import POLL_DEADLINE_MARGIN, GrpcRouter
from gateway.rpc.router_service import RouterService
from gateway.rpc.server import RpcServer, build_peer_server
from gateway.settings import Settings
from tests.servers import free_port
from tests.unit.router.contract_suite import (
    PROPERTY_AGENTS,
    WAKE_BOUND,
    RouterContract,
    RouterFactory,
    _plans,
    anchor,
    expect_accepted,
    expect_batch,
    fixed_message_id,
    let_tasks_run,
    read_to_tail,
    restriction,
    send_all,
)
from tests.unit.router.fakes import FakeVerifier, agent_ids, crc_yields, signed_envelope

PEER_TOKEN = "peer-token-" + "x" * 32


@contextlib.asynccontextmanager
async def served_router(
    router: RouterPort, *, peer_token: str = PEER_TOKEN
) -> AsyncIterator[tuple[RouterService, RpcServer]]:
    """`router` served on 127.0.0.1:0, stopped when the block ends."""
    service = RouterService(router, PeerGuard(peer_token))
    server = await build_peer_server(
        Settings(listen="127.0.0.1:0", metrics_listen=None, reflection=False),
        [service.binding()],
    )
    await server.start()
    await server.set_serving()
    try:
        yield service, server
    finally:
        service.end_reads()
        await server.stop(None)


@contextlib.asynccontextmanager
async def remote_router(
    *, settings: RingSettings | None = None, verifier: EnvelopeVerifier | None = None
) -> AsyncIterator[RouterPort]:
    """A fresh in-process ring behind a real server, seen through `GrpcRouter`."""
    async with (
        InProcessRouter(
            verifier if verifier is not None else FakeVerifier(), settings=settings
        ) as ring,
        served_router(ring) as (_, server),
        await GrpcRouter.connect(f"grpc://{server.address}", peer_token=PEER_TOKEN) as client,
    ):
        yield client


class TestGrpcRouter(RouterContract):
    """The whole Router contract suite, through a real gRPC server and client."""

    @pytest.fixture
    def router_factory(self) -> RouterFactory:
        return remote_router

    @settings(
        max_examples=100,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(plan=_plans)
    async def test_every_reader_sees_the_restriction_of_one_global_order_under_any_interleaving(
        self, router_factory, plan
    ):
        """The suite's one-order property, with every reader anchored before the first send.

        The suite lets readers anchor during a few loop iterations (`let_tasks_run`), which
        an in-process ring always answers in time; across a socket an anchor can land after
        some sends and rightly start past them. So each reader anchors first here, and the
        holds, wake-ups and interleaving of sends are exercised as in the suite."""
        ring = RingSettings(
            batch_max_entries=plan.batch_max_entries, batch_max_bytes=plan.batch_max_bytes
        )
        verifier = FakeVerifier(yields=crc_yields(plan.spread))
        envelopes = [
            signed_envelope(
                sender=PROPERTY_AGENTS[sender],
                recipients=[PROPERTY_AGENTS[index] for index in sorted(recipients)],
                message_id=fixed_message_id(number),
                body=bytes(length),
            )
            for number, (sender, recipients, length) in enumerate(plan.sends)
        ]
        readers = [frozenset(PROPERTY_AGENTS[index] for index in reader) for reader in plan.readers]
        expected_counts = [
            sum(1 for _, recipients, _ in plan.sends if recipients & reader)
            for reader in plan.readers
        ]

        async def read(
            router: RouterPort, recipients: frozenset[str], cursor: Cursor, count: int
        ) -> list[Entry]:
            received: list[Entry] = []
            while len(received) < count:
                batch = expect_batch(await router.poll(recipients, cursor, hold=POLL_HOLD))
                assert len(batch.entries) <= ring.batch_max_entries
                assert (
                    len(batch.entries) <= 1
                    or sum(len(entry.signed_envelope) for entry in batch.entries)
                    <= ring.batch_max_bytes
                )
                received.extend(batch.entries)
                cursor = batch.cursor
            return received

        async with router_factory(settings=ring, verifier=verifier) as router:
            instance = await router.instance_id()
            anchors = [await anchor(router, recipients) for recipients in readers]
            async with asyncio.timeout(WAKE_BOUND * 2), asyncio.TaskGroup() as group:
                reads = [
                    group.create_task(read(router, recipients, cursor, count))
                    for recipients, cursor, count in zip(
                        readers, anchors, expected_counts, strict=True
                    )
                ]
                await let_tasks_run()
                sends = [
                    group.create_task(router.send(instance, SendMode.INITIAL, data))
                    for data in envelopes
                ]
            for task, data in zip(sends, envelopes, strict=True):
                expect_accepted(task.result(), data)
            everything, _ = await read_to_tail(
                router, frozenset(PROPERTY_AGENTS), Cursor(instance_id=instance, order=0)
            )
            assert [entry.order for entry in everything] == list(range(1, len(envelopes) + 1))
            assert sorted(entry.signed_envelope for entry in everything) == sorted(envelopes)
            for recipients, task in zip(readers, reads, strict=True):
                assert task.result() == restriction(everything, recipients)


async def test_a_grpc_router_is_a_router_port_and_takes_either_target_form():
    for target in ("127.0.0.1:1", "grpc://127.0.0.1:1"):
        client = await GrpcRouter.connect(target, peer_token=PEER_TOKEN)
        port: RouterPort = client  # mypy checks the client against the seam here
        assert port is client
        assert client.target == "127.0.0.1:1"
        await client.close()
    for target in ("nats://127.0.0.1:1", "127.0.0.1", "grpc://:1"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            await GrpcRouter.connect(target, peer_token=PEER_TOKEN)


async def test_a_call_without_the_peer_token_is_unauthenticated_and_has_no_effect():
    async with (
        InProcessRouter(FakeVerifier()) as ring,
        served_router(ring) as (_, server),
    ):
        async with await GrpcRouter.connect(
            server.address, peer_token="another-token-" + "y" * 32
        ) as client:
            with pytest.raises(RouterUnavailable) as raised:
                await client.instance_id()
            assert raised.value.code == "UNAUTHENTICATED"
            assert not isinstance(raised.value, RouterVersionMismatch)
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = router_pb2_grpc.RouterServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.GetInstance(
                    router_pb2.GetInstanceRequest(), metadata=[("harness-version", "harness/1")]
                )
            assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert ring.status().tail == 0


def test_peer_services_never_run_without_a_peer_token():
    with pytest.raises(PeerConfigError, match="never run without a peer token"):
        PeerGuard("")


@pytest.mark.parametrize("version", [None, "harness/2", "harness/1 "])
async def test_a_call_of_another_version_is_failed_precondition_version_mismatch(version):
    async with (
        InProcessRouter(FakeVerifier()) as ring,
        served_router(ring) as (_, server),
    ):
        metadata = [("authorization", f"Bearer {PEER_TOKEN}")]
        if version is not None:
            metadata.append(("harness-version", version))
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = router_pb2_grpc.RouterServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.GetInstance(router_pb2.GetInstanceRequest(), metadata=metadata)
        assert raised.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert is_version_mismatch(raised.value)


class _OtherVersionRouter(router_pb2_grpc.RouterServiceServicer):
    """A Router that answers as `harness/2` would: announcing its version, or refusing."""

    def __init__(self, *, refuse: bool) -> None:
        self.refuse = refuse

    async def GetInstance(self, request, context):
        if self.refuse:
            from gateway.rpc.peer import version_mismatch_status

            await context.abort_with_status(version_mismatch_status("harness/1"))
        await context.send_initial_metadata((("harness-version", "harness/2"),))
        return router_pb2.GetInstanceResponse(instance_id="rti_" + "A" * 22)


@pytest.mark.parametrize("refuse", [True, False])
async def test_a_router_of_another_version_raises_router_version_mismatch(refuse):
    server = grpc.aio.server()
    router_pb2_grpc.add_RouterServiceServicer_to_server(
        _OtherVersionRouter(refuse=refuse),  # type: ignore[abstract]  # one method is enough
        server,
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with await GrpcRouter.connect(f"127.0.0.1:{port}", peer_token=PEER_TOKEN) as client:
            with pytest.raises(RouterVersionMismatch):
                await client.instance_id()
    finally:
        await server.stop(None)


async def test_an_unreachable_router_raises_router_unavailable_for_sends_and_polls():
    port = free_port()
    alice, bob = agent_ids(2)
    async with await GrpcRouter.connect(f"127.0.0.1:{port}", peer_token=PEER_TOKEN) as client:
        with pytest.raises(RouterUnavailable) as raised:
            await client.send(
                "rti_" + "A" * 22,
                SendMode.INITIAL,
                signed_envelope(sender=alice, recipients=[alice, bob]),
            )
        assert raised.value.code == "UNAVAILABLE"
        with pytest.raises(RouterUnavailable):
            await client.poll(frozenset({bob}), None)
        with pytest.raises(RouterUnavailable):
            async for _ in client.subscribe(frozenset({bob}), None):
                pass


async def test_closing_the_client_ends_a_held_poll_and_later_calls_with_router_closed_error():
    _, bob = agent_ids(2)
    async with (
        InProcessRouter(FakeVerifier()) as ring,
        served_router(ring) as (_, server),
    ):
        client = await GrpcRouter.connect(server.address, peer_token=PEER_TOKEN)
        cursor = await anchor(client, frozenset({bob}))
        held = asyncio.create_task(client.poll(frozenset({bob}), cursor))
        await let_tasks_run()
        await client.close()
        with pytest.raises(RouterClosedError):
            await asyncio.wait_for(held, WAKE_BOUND)
        with pytest.raises(RouterClosedError):
            await client.instance_id()
        await client.close()  # idempotent


async def test_a_caller_cancelling_a_held_poll_cancels_it_and_the_client_stays_usable():
    _, bob = agent_ids(2)
    async with remote_router() as client:
        cursor = await anchor(client, frozenset({bob}))
        held = asyncio.create_task(client.poll(frozenset({bob}), cursor))
        await let_tasks_run()
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        assert isinstance(await client.poll(frozenset({bob}), cursor, hold=0), Batch)


class _HeldReads:
    """A `RouterPort` over a ring that counts the reads it holds, so a test can wait for
    calls to be held on the server instead of sleeping."""

    def __init__(self, ring: InProcessRouter) -> None:
        self._ring = ring
        self.held = 0
        self.changed = asyncio.Event()

    async def instance_id(self) -> str:
        return await self._ring.instance_id()

    async def send(self, expected_instance_id, mode, signed_envelope):
        return await self._ring.send(expected_instance_id, mode, signed_envelope)

    async def poll(self, recipients, cursor, *, hold=POLL_HOLD):
        self.held += cursor is not None
        self.changed.set()
        return await self._ring.poll(recipients, cursor, hold=hold)

    def subscribe(self, recipients, cursor, *, hold=POLL_HOLD):
        return self._ring.subscribe(recipients, cursor, hold=hold)

    async def close(self) -> None:
        await self._ring.close()

    async def wait_held(self, count: int) -> None:
        while self.held < count:
            self.changed.clear()
            await self.changed.wait()


async def test_ending_reads_answers_held_polls_and_subscriptions_unavailable_at_once():
    alice, bob = agent_ids(2)
    async with InProcessRouter(FakeVerifier()) as ring:
        observed = _HeldReads(ring)
        async with (
            served_router(observed) as (service, server),
            await GrpcRouter.connect(server.address, peer_token=PEER_TOKEN) as client,
        ):
            cursor = await anchor(client, frozenset({bob}))
            held = asyncio.create_task(client.poll(frozenset({bob}), cursor))
            await asyncio.wait_for(observed.wait_held(1), WAKE_BOUND)
            # A subscription past its anchoring batch, reading (and soon held) again.
            stream = client.subscribe(frozenset({bob}), None)
            assert isinstance(await asyncio.wait_for(anext(stream), WAKE_BOUND), Batch)
            reading = asyncio.ensure_future(anext(stream))
            await let_tasks_run()
            service.end_reads()
            with pytest.raises(RouterUnavailable) as raised:
                await asyncio.wait_for(held, WAKE_BOUND)
            assert raised.value.code == "UNAVAILABLE"
            with pytest.raises(RouterUnavailable):
                await asyncio.wait_for(reading, WAKE_BOUND)
            await stream.aclose()
            with pytest.raises(RouterUnavailable):
                await client.poll(frozenset({bob}), cursor)
            # Sends still work while the server drains.
            await send_all(client, [signed_envelope(sender=alice, recipients=[alice, bob])])


def test_a_poll_deadline_is_its_hold_plus_ten_seconds():
    assert POLL_HOLD + POLL_DEADLINE_MARGIN == 35.0

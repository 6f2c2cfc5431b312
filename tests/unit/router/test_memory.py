from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager

import pytest
from harness_contract.ids import RandomId

from gateway.router import (
    POLL_HOLD,
    SIGNED_ENVELOPE_MAX_BYTES,
    Batch,
    Cursor,
    EnvelopeVerifier,
    FeedGap,
    InProcessRouter,
    MessageInvalid,
    RingSettings,
    RouterClosedError,
    RouterPort,
    RouterRestarted,
    RouterState,
    SendMode,
)
from tests.unit.router.contract_suite import (
    SHORT_HOLD,
    WAKE_BOUND,
    RouterContract,
    RouterFactory,
    anchor,
    expect_batch,
    let_tasks_run,
    read_to_tail,
    send_all,
)
from tests.unit.router.fakes import FakeVerifier, agent_ids, signed_envelope


class TestInProcessRouter(RouterContract):
    """The Router contract suite against the in-process ring."""

    @pytest.fixture
    def router_factory(self) -> RouterFactory:
        def make(
            *, settings: RingSettings | None = None, verifier: EnvelopeVerifier | None = None
        ) -> AbstractAsyncContextManager[RouterPort]:
            return InProcessRouter(
                verifier if verifier is not None else FakeVerifier(), settings=settings
            )

        return make


def test_an_in_process_router_is_a_router_port_with_a_new_instance_per_construction():
    first, second = InProcessRouter(FakeVerifier()), InProcessRouter(FakeVerifier())
    port: RouterPort = first  # mypy checks the ring against the seam here
    assert port is first
    assert RandomId.ROUTER_INSTANCE.is_valid(first.status().instance_id)
    assert first.status().instance_id != second.status().instance_id


async def test_router_restarted_verifies_nothing():
    alice, bob = agent_ids(2)
    verifier = FakeVerifier()
    async with InProcessRouter(verifier) as router:
        outcome = await router.send(
            RandomId.ROUTER_INSTANCE.mint(),
            SendMode.INITIAL,
            signed_envelope(sender=alice, recipients=[alice, bob]),
        )
        assert outcome == RouterRestarted(instance_id=await router.instance_id())
        assert verifier.calls == 0


async def test_an_envelope_past_the_size_bound_is_refused_before_verification():
    alice, bob = agent_ids(2)
    verifier = FakeVerifier()
    data = signed_envelope(
        sender=alice, recipients=[alice, bob], signature="x" * SIGNED_ENVELOPE_MAX_BYTES
    )
    async with InProcessRouter(verifier) as router:
        outcome = await router.send(await router.instance_id(), SendMode.INITIAL, data)
        assert isinstance(outcome, MessageInvalid)
        assert verifier.calls == 0


async def test_a_held_poll_whose_entry_is_evicted_before_it_runs_is_a_feed_gap():
    alice, bob, carol = agent_ids(3)
    async with InProcessRouter(FakeVerifier(), settings=RingSettings(max_entries=2)) as router:
        cursor = await anchor(router, frozenset({carol}))
        held = asyncio.create_task(router.poll(frozenset({carol}), cursor, hold=POLL_HOLD))
        try:
            await let_tasks_run()
            # The fake verifier never yields, so these three sends run before the woken
            # poll does: the entry it was woken for is evicted by then.
            await send_all(
                router,
                [
                    signed_envelope(sender=alice, recipients=[alice, carol]),
                    signed_envelope(sender=alice, recipients=[alice, bob]),
                    signed_envelope(sender=alice, recipients=[alice, bob]),
                ],
            )
            outcome = await asyncio.wait_for(held, WAKE_BOUND)
        finally:
            held.cancel()
        assert outcome == FeedGap(instance_id=await router.instance_id())


async def test_a_held_poll_passes_evicted_entries_for_others_without_a_gap():
    alice, bob, carol = agent_ids(3)
    async with InProcessRouter(FakeVerifier(), settings=RingSettings(max_entries=2)) as router:
        cursor = await anchor(router, frozenset({carol}))
        held = asyncio.create_task(router.poll(frozenset({carol}), cursor, hold=SHORT_HOLD))
        try:
            await let_tasks_run()
            await send_all(
                router, [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(5)]
            )
            assert router.status().greatest_evicted == 3
            batch = expect_batch(await asyncio.wait_for(held, WAKE_BOUND))
        finally:
            held.cancel()
        assert (batch.entries, batch.cursor.order) == ((), 5)


async def test_reading_one_recipient_among_many_evictions_returns_exactly_its_entries():
    alice, bob, carol = agent_ids(3)
    envelopes = [
        signed_envelope(sender=alice, recipients=[alice, carol] if n % 7 == 0 else [alice, bob])
        for n in range(200)
    ]
    async with InProcessRouter(FakeVerifier(), settings=RingSettings(max_entries=50)) as router:
        instance = await router.instance_id()
        await send_all(router, envelopes)
        status = router.status()
        assert (status.tail, status.greatest_evicted, status.entries) == (200, 150, 50)
        entries, cursor = await read_to_tail(
            router, frozenset({carol}), Cursor(instance_id=instance, order=150)
        )
        assert [entry.order for entry in entries] == [n + 1 for n in range(150, 200) if n % 7 == 0]
        assert cursor.order == 200


async def test_an_envelope_larger_than_the_byte_bound_is_kept_until_the_next_append():
    alice, bob = agent_ids(2)
    envelopes = [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(2)]
    async with InProcessRouter(FakeVerifier(), settings=RingSettings(max_bytes=10)) as router:
        await send_all(router, envelopes[:1])
        assert router.status().entries == 1
        await send_all(router, envelopes[1:])
        status = router.status()
        assert (status.entries, status.greatest_evicted, status.retained_bytes) == (
            1,
            1,
            len(envelopes[1]),
        )


async def test_close_wakes_a_held_poll_with_router_closed_error():
    (carol,) = agent_ids(1)
    router = InProcessRouter(FakeVerifier())
    cursor = await anchor(router, frozenset({carol}))
    held = asyncio.create_task(router.poll(frozenset({carol}), cursor, hold=POLL_HOLD))
    try:
        await let_tasks_run()
        await router.close()
        with pytest.raises(RouterClosedError) as raised:
            await asyncio.wait_for(held, WAKE_BOUND)
    finally:
        held.cancel()
    assert raised.value.state is RouterState.CLOSED


async def test_every_call_after_close_raises_and_close_is_idempotent():
    alice, bob = agent_ids(2)
    router = InProcessRouter(FakeVerifier())
    instance = await router.instance_id()
    await router.close()
    await router.close()
    assert router.state is RouterState.CLOSED
    with pytest.raises(RouterClosedError):
        await router.instance_id()
    with pytest.raises(RouterClosedError):
        await router.send(
            instance, SendMode.INITIAL, signed_envelope(sender=alice, recipients=[alice, bob])
        )
    with pytest.raises(RouterClosedError):
        await router.poll(frozenset({bob}), None)
    stream = router.subscribe(frozenset({bob}), None)
    with pytest.raises(RouterClosedError):
        await anext(stream)


async def test_a_send_whose_verification_outlives_close_appends_nothing():
    alice, bob = agent_ids(2)
    router = InProcessRouter(FakeVerifier(yields=lambda _: 3))
    instance = await router.instance_id()
    sending = asyncio.create_task(
        router.send(
            instance, SendMode.INITIAL, signed_envelope(sender=alice, recipients=[alice, bob])
        )
    )
    try:
        await asyncio.sleep(0)  # one yield: the send is inside its verification
        await router.close()
        with pytest.raises(RouterClosedError):
            await asyncio.wait_for(sending, WAKE_BOUND)
    finally:
        sending.cancel()
    assert router.status().tail == 0


async def test_a_cancelled_held_poll_leaves_no_waiter_behind():
    alice, carol = agent_ids(2)
    async with InProcessRouter(FakeVerifier()) as router:
        cursor = await anchor(router, frozenset({carol}))
        held = asyncio.create_task(router.poll(frozenset({carol}), cursor, hold=POLL_HOLD))
        await let_tasks_run()
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        # Another poll is answered normally, and the append wakes no stale waiter.
        await send_all(router, [signed_envelope(sender=alice, recipients=[alice, carol])])
        batch = expect_batch(await router.poll(frozenset({carol}), cursor, hold=0))
        assert [entry.order for entry in batch.entries] == [1]


async def test_a_subscription_refuses_a_hold_that_is_not_positive():
    (bob,) = agent_ids(1)
    async with InProcessRouter(FakeVerifier()) as router:
        stream = router.subscribe(frozenset({bob}), None, hold=0)
        with pytest.raises(ValueError, match="positive hold"):
            await anext(stream)


async def test_the_status_reports_the_ring():
    alice, bob = agent_ids(2)
    data = signed_envelope(sender=alice, recipients=[alice, bob])
    async with InProcessRouter(FakeVerifier()) as router:
        await send_all(router, [data])
        status = router.status()
        assert status.instance_id == await router.instance_id()
        assert (status.state, status.tail, status.greatest_evicted, status.entries) == (
            RouterState.OPEN,
            1,
            0,
            1,
        )
        assert status.retained_bytes == len(data)
    assert router.status().state is RouterState.CLOSED


async def test_an_anchor_batch_names_the_instance():
    (bob,) = agent_ids(1)
    async with InProcessRouter(FakeVerifier()) as router:
        instance = await router.instance_id()
        assert await router.poll(frozenset({bob}), None, hold=0) == Batch(
            instance_id=instance, cursor=Cursor(instance_id=instance, order=0), entries=()
        )

"""Local order's sequencer through its seams (engine.md §5.10): a failing unit sets only its
conversation aside; binds are refused there while every other conversation certifies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
from harness_contract.content import multicast_content

from gateway.clock import FakeClock
from gateway.engine import local as local_module
from gateway.engine.local import UNIT_RETRY_MOST
from gateway.engine.state import BindRefused
from gateway.store.errors import ConstraintViolation, StoreUnavailable
from gateway.store.memory import MemoryStore
from gateway.store.records import PutRecord, Write
from tests.support import eventually
from tests.unit.engine.support import BOUND, World, started, world_on


class FailingStore(MemoryStore):
    """Refuses (definitely) every unit that certifies a record of one conversation, and the
    next `unavailable` units that certify any record as a network store's outage does."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: str | None = None
        self.unavailable = 0

    async def apply(self, writes: Sequence[Write]) -> None:
        if any(isinstance(w, PutRecord) and w.conversation_id == self.failing for w in writes):
            raise ConstraintViolation("forced by the test")
        if self.unavailable and any(isinstance(w, PutRecord) for w in writes):
            self.unavailable -= 1
            raise StoreUnavailable("the server is unreachable (forced by the test)")
        await super().apply(writes)


@pytest.fixture
async def world() -> AsyncIterator[World]:
    async with world_on(FailingStore()) as built:
        yield built


async def _post(world: World, author: str, *others: str) -> asyncio.Future[str]:
    local = world.network.local
    descriptor = world.descriptor(author, *others)
    assert local.accepts(descriptor)
    await local.founded(descriptor.conversation_id)
    post_id, writes = local.bind(
        world.members[author], descriptor, multicast_content("hi"), now=0.0
    )
    latch = world.network.latch(post_id)
    await world.store.apply(writes)
    local.bound([(descriptor.conversation_id, post_id)])
    return latch


async def test_a_unit_that_raises_sets_only_its_conversation_aside(world):
    await started(world, "alice", "bob", "carol")
    store = world.store
    assert isinstance(store, FailingStore)
    local = world.network.local
    failing = world.descriptor("alice", "bob")
    store.failing = failing.conversation_id
    stuck = await _post(world, "alice", "bob")
    await eventually(lambda: asyncio.sleep(0, local.set_aside_count), lambda n: n == 1)
    assert not stuck.done()
    alice = world.members["alice"].agent_id
    assert [item.conversation_id for item in local.set_aside_of(alice)] == [failing.conversation_id]
    with pytest.raises(BindRefused):
        local.bind(world.members["bob"], failing, multicast_content("again"), now=0.0)
    # Every other conversation goes on.
    assert await asyncio.wait_for(await _post(world, "alice", "carol"), BOUND)
    assert await asyncio.wait_for(await _post(world, "carol", "alice", "bob"), BOUND)


async def test_a_unit_the_store_could_not_take_is_tried_again_and_its_conversation_goes_on():
    clock = FakeClock()
    async with world_on(FailingStore(), clock=clock) as world:
        await started(world, "alice", "bob")
        store = world.store
        assert isinstance(store, FailingStore)
        local = world.network.local
        store.unavailable = 1
        first = await _post(world, "alice", "bob")
        await eventually(lambda: asyncio.sleep(0, store.unavailable), lambda n: n == 0)
        # Nothing was written and nothing else happens: only the retry can certify it.
        assert not first.done()

        async def retried() -> bool:
            clock.advance(UNIT_RETRY_MOST)
            await asyncio.sleep(0)
            return first.done()

        await eventually(retried)
        assert first.result().startswith("rch_")
        assert local.set_aside_count == 0
        # The conversation is not left behind: later posts certify too.
        assert await asyncio.wait_for(await _post(world, "bob", "alice"), BOUND)


class GatedStore(MemoryStore):
    """Holds every write at `gate` while it is closed (a commit still in the writer)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.held = asyncio.Event()

    async def apply(self, writes: Sequence[Write]) -> None:
        if not self.gate.is_set():
            self.held.set()
            await self.gate.wait()
        await super().apply(writes)


async def test_a_bind_whose_caller_is_cancelled_mid_commit_certifies_and_its_conversation_goes_on():
    """A release's teardown cancels keyed invocations (cluster.md §3.2) while their binds are
    in the writer, which commits them anyway: memory follows the commit, so the post
    certifies and later posts of its conversation are not stuck behind it."""
    store = GatedStore()
    async with world_on(store) as world:
        await started(world, "alice", "bob")
        descriptor = world.descriptor("alice", "bob")
        store.gate.clear()
        call = asyncio.ensure_future(
            world.network.bind(
                world.members["alice"],
                [(descriptor, multicast_content("first"))],
                attach_within=BOUND,
            )
        )
        await asyncio.wait_for(store.held.wait(), BOUND)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        store.gate.set()

        handles = await world.network.bind(
            world.members["alice"], [(descriptor, multicast_content("second"))], attach_within=BOUND
        )
        await asyncio.wait_for(handles[0].certified, BOUND)

        rows = await eventually(
            lambda: store.records(world.members["bob"].agent_id, descriptor.conversation_id, 0, 9),
            lambda rows: len(rows) == 2,
            within=BOUND,
        )
        assert [row.depth for row in rows] == [1, 2]


async def test_a_pass_past_its_signature_budget_lets_other_tasks_run_between_units(
    world, monkeypatch
):
    # Every unit here signs 4 statements (2 members, 1 post): a budget of 4 yields after each.
    monkeypatch.setattr(local_module, "SIGN_BUDGET", 4)
    await started(world, "alice", "bob", "carol", "dave")
    local = world.network.local
    pairs = [("alice", "bob"), ("carol", "dave"), ("alice", "carol")]
    bound: list[tuple[str, str]] = []
    latches = []
    for author, other in pairs:
        descriptor = world.descriptor(author, other)
        await local.prepare(descriptor)
        post_id, writes = local.bind(
            world.members[author], descriptor, multicast_content("hi"), now=0.0
        )
        latches.append(world.network.latch(post_id))
        await world.store.apply(writes)
        bound.append((descriptor.conversation_id, post_id))
    seen: list[int] = []

    async def probe() -> None:
        # Scheduled after the sequencer was woken: it runs at the sequencer's first yield.
        seen.append(len(local._units))

    local.bound(bound)
    await asyncio.gather(asyncio.ensure_future(probe()), *latches)
    assert seen == [1], "the pass should yield after the first unit's signatures"

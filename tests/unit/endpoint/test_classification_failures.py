"""A classification page whose commit fails (engine.md §7.2, §8): one the store could not
take while nothing in memory changed is classified again after a backoff; one whose
collective rows were already taken into memory, or any other failure, stops the daemon
through its fatal path instead of silently ending that agent's classification."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
from harness_contract.values import (
    AskOperation,
    CollectiveOp,
    MessageInput,
    MulticastItem,
)

from gateway.endpoint.runtime import CLASSIFY_RETRY
from gateway.engine.network import FatalStoreError
from gateway.store.errors import ConstraintViolation, StoreError, StoreUnavailable
from gateway.store.memory import MemoryStore
from gateway.store.records import SetDeliveryState, Write
from tests.support import eventually
from tests.unit.collectives.fakes import SCHEMA
from tests.unit.endpoint.support import Daemon, daemon


class ClassifyFailingStore(MemoryStore):
    """A `MemoryStore` that refuses the next classification commit (the one setting
    deliveries' states) with `refusal`, then works."""

    def __init__(self) -> None:
        super().__init__()
        self.refusal: StoreError | None = None

    async def apply(self, writes: Sequence[Write]) -> None:
        if self.refusal is not None and any(isinstance(w, SetDeliveryState) for w in writes):
            refusal, self.refusal = self.refusal, None
            raise refusal
        await super().apply(writes)


@pytest.fixture
async def world() -> AsyncIterator[Daemon]:
    async with daemon(ClassifyFailingStore()) as built:
        yield built


def failing(world: Daemon) -> ClassifyFailingStore:
    store = world.store
    assert isinstance(store, ClassifyFailingStore)
    return store


async def test_a_multicast_page_the_store_could_not_take_is_delivered_once_after_the_backoff(
    world,
):
    alice = await world.host("alice")
    bob = await world.host("bob")
    await world.start()
    store = failing(world)
    store.refusal = StoreUnavailable("forced by the test")

    await alice.send(MessageInput(to="agent:bob", text="hi"))
    await eventually(lambda: asyncio.sleep(0, store.refusal), lambda refusal: refusal is None)
    assert await world.items(bob) == []
    world.clock.advance(CLASSIFY_RETRY[0])

    [item] = await eventually(lambda: world.items(bob), lambda items: len(items) == 1)
    assert isinstance(item, MulticastItem)
    await eventually(
        lambda: world.store.pending_deliveries(bob.agent_id, 10), lambda rows: not rows
    )
    assert len(await world.items(bob)) == 1
    assert world.observed["bob"].published == ["multicast"]
    assert world.fatal == []


async def test_a_collective_page_the_store_could_not_take_stops_the_daemon_and_stays_pending(
    world,
):
    alice = await world.host("alice")
    bob = await world.host("bob")
    await world.start()
    store = failing(world)
    store.refusal = StoreUnavailable("forced by the test")

    await alice.send(
        MessageInput(
            to="agent:bob",
            text="when?",
            collective=AskOperation(op=CollectiveOp.GATHER, deadline=60, requested_schema=SCHEMA),
        )
    )

    [error] = await eventually(lambda: asyncio.sleep(0, world.fatal), lambda fatal: len(fatal) == 1)
    assert isinstance(error, FatalStoreError)
    # Nothing was written: after the restart the request is classified from the store.
    assert len(await world.store.pending_deliveries(bob.agent_id, 10)) == 1
    assert await world.items(bob) == []


async def test_a_classification_commit_failing_otherwise_stops_the_daemon(world):
    alice = await world.host("alice")
    bob = await world.host("bob")
    await world.start()
    refusal = ConstraintViolation("forced by the test")
    failing(world).refusal = refusal

    await alice.send(MessageInput(to="agent:bob", text="hi"))

    assert await eventually(lambda: asyncio.sleep(0, world.fatal), lambda fatal: bool(fatal)) == [
        refusal
    ]
    assert len(await world.store.pending_deliveries(bob.agent_id, 10)) == 1

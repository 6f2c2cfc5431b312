"""`AgentPosting.settled` (engine.md §5.10 Restart): whatever waits for an own post's
settlement registers its latch before it reads the intent's stored state, so an outcome
released while that read is in flight is never lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from harness_contract.content import multicast_content
from harness_contract.ids import b64
from harness_contract.kinds import PostKind

from gateway.engine.effects import Certified, Effects
from gateway.store.memory import MemoryStore
from gateway.store.records import IntentRow
from tests.unit.endpoint.support import BOUNDED, Daemon, daemon

BOUND = 10.0
"""Seconds a step that is due at once may take on a loaded machine."""

RECORD = "rch_" + b64(b"\x07" * 32)


class ReadHoldingStore(MemoryStore):
    """A `MemoryStore` whose intent reads, once `hold` is set, take their row and then wait
    for the test: what a real read does when the row changes while its answer is in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: asyncio.Event | None = None
        self.reading = asyncio.Event()

    async def intent(self, agent_id: str, post_id: str) -> IntentRow | None:
        row = await super().intent(agent_id, post_id)
        if self.hold is not None:
            self.reading.set()
            await self.hold.wait()
        return row


@pytest.fixture
async def world() -> AsyncIterator[Daemon]:
    async with daemon(ReadHoldingStore()) as built:
        yield built


async def test_an_outcome_released_while_the_intent_is_read_still_settles_the_post(world):
    alice = await world.host("alice")
    await world.start()
    carol = await world.register("carol")  # not hosted: the post stays open
    descriptor = alice.posting.membership_with([carol.card])
    [handle] = await alice.posting.bind_posts(
        [(descriptor, multicast_content("hi"))], within=BOUNDED.attach
    )
    # The send gave up (delivery-pending): its own waiters are gone, the intent goes on.
    world.network.forget(handle)
    store = world.store
    assert isinstance(store, ReadHoldingStore)
    store.hold = asyncio.Event()

    settling = asyncio.ensure_future(alice.posting.settled(handle.post_id))
    await asyncio.wait_for(store.reading.wait(), BOUND)
    # The promotion commits and its outcome is released while the read above is in flight:
    # the row it answers with still says open.
    world.network.release(
        Effects(
            certified=[
                Certified(
                    agent_id=alice.agent_id,
                    post_id=handle.post_id,
                    record_hash=RECORD,
                    bound_at=0.0,
                    kind=PostKind.DIRECT,
                )
            ]
        )
    )
    store.hold.set()
    latch = await asyncio.wait_for(settling, BOUND)

    assert latch.done()
    assert latch.result() == RECORD


async def test_a_post_certified_before_anyone_waits_is_settled_at_once(world):
    alice = await world.host("alice")
    bob = await world.host("bob")
    await world.start()
    descriptor = alice.posting.membership_with([bob.identity.card])
    [handle] = await alice.posting.bind_posts(
        [(descriptor, multicast_content("hi"))], within=BOUNDED.attach
    )
    record_hash = await alice.posting.await_certified(handle)

    latch = await alice.posting.settled(handle.post_id)

    assert latch.done()
    assert latch.result() == record_hash

"""The certification protocol on several members in one process: real signatures and
votes through the in-process Router, stores in memory (engine.md §5, §10 vectors)."""

from __future__ import annotations

import asyncio

from harness_contract.codec import message_from_json
from harness_contract.content import multicast_content
from harness_contract.jsonvalue import parse_canonical_json

from gateway.engine import protocol as p
from gateway.engine.network import Network, NetworkObserver, RouterAttachment
from gateway.identity.keys import VerifyCache
from gateway.registry import MemoryRegistry, RegistryClient
from gateway.registry.verifier import RegistryEnvelopeVerifier
from gateway.router import InProcessRouter
from gateway.store.memory import MemoryStore
from gateway.store.records import DeliveryState
from tests.support import eventually
from tests.unit.engine.support import BOUND, World, records_of, started


async def test_a_direct_post_certifies_with_both_members_signatures(world):
    await started(world, "alice", "bob")
    post_id, record_hash = await world.post("alice", "hi", "bob")
    alice = await records_of(world, "alice", "bob")
    bob = await records_of(world, "bob", "alice")
    assert [row.record_hash for row in alice] == [record_hash]
    assert [row.record_hash for row in bob] == [record_hash]
    record = p.decode(bob[0].record, p.CertifiedRecord)
    descriptor = world.descriptor("alice", "bob")
    p.check_certified_record(record, membership=descriptor)
    assert len(record.action_certified_record.action_certificate.entries) == 2
    assert record.action_certified_record.record_core.action.post_intent.post_id == post_id


async def test_the_recipient_gets_one_pending_delivery_and_the_author_none(world):
    await started(world, "alice", "bob")
    await world.post("alice", "hi", "bob")
    bob = world.members["bob"]
    alice = world.members["alice"]
    deliveries = await eventually(lambda: world.store.pending_deliveries(bob.agent_id, 10))
    assert len(deliveries) == 1
    assert deliveries[0].state is DeliveryState.PENDING
    assert await world.store.pending_deliveries(alice.agent_id, 10) == []


async def test_posts_chain_and_every_member_holds_the_same_hashes_in_order(world):
    await started(world, "alice", "bob", "carol", "dave")
    hashes = []
    for index, author in enumerate(["alice", "bob", "carol", "dave", "alice"]):
        others = [name for name in ("alice", "bob", "carol", "dave") if name != author]
        hashes.append((await world.post(author, f"m{index}", *others))[1])
    for name in ("alice", "bob", "carol", "dave"):
        others = [other for other in ("alice", "bob", "carol", "dave") if other != name]
        rows = await records_of(world, name, *others, count=len(hashes))
        assert [row.record_hash for row in rows] == hashes


async def test_concurrent_sends_of_one_author_certify_in_bind_order(world):
    await started(world, "alice", "bob")
    certifier = world.members["alice"]
    descriptor = world.descriptor("alice", "bob")
    post_ids = []
    latches = []
    for index in range(5):
        post_id, effects = certifier.bind(descriptor, multicast_content(f"n{index}"), now=0.0)
        latches.append(world.network.latch(post_id))
        post_ids.append(post_id)
        await world.network.commit(effects)
    await asyncio.wait_for(asyncio.gather(*latches), BOUND)
    rows = await records_of(world, "bob", "alice", count=5)
    assert [row.post_id for row in rows] == post_ids


async def test_two_authors_opening_one_cold_conversation_both_certify(world):
    await started(world, "alice", "bob", "carol")
    a = world.members["alice"]
    b = world.members["bob"]
    descriptor = world.descriptor("alice", "bob", "carol")
    post_a, effects_a = a.bind(descriptor, multicast_content("from a"), now=0.0)
    post_b, effects_b = b.bind(descriptor, multicast_content("from b"), now=0.0)
    latch_a, latch_b = world.network.latch(post_a), world.network.latch(post_b)
    await world.network.commit(effects_a)
    await world.network.commit(effects_b)
    await asyncio.wait_for(asyncio.gather(latch_a, latch_b), BOUND)
    rows = await records_of(world, "carol", "alice", "bob", count=2)
    assert sorted(row.post_id for row in rows) == sorted([post_a, post_b])
    assert rows[0].depth == 1
    assert rows[1].depth == 2


async def test_a_group_post_projects_the_canonical_address_and_every_member(world):
    await started(world, "alice", "bob", "carol")
    await world.post("bob", "hello", "alice", "carol")
    carol = world.members["carol"]
    [delivery] = await eventually(lambda: world.store.pending_deliveries(carol.agent_id, 10))
    message = message_from_json(parse_canonical_json(delivery.projection))
    assert message.address == "group:alice,bob,carol"
    assert message.sender == "agent:bob"
    assert message.members == ("agent:alice", "agent:bob", "agent:carol")  # type: ignore[union-attr]


class FlakyRouter:
    """An in-process Router whose first reads and sends fail, like an unreachable one."""

    def __init__(self, inner: InProcessRouter, failures: int) -> None:
        self.inner = inner
        self.poll_failures = failures
        self.send_failures = failures

    async def instance_id(self) -> str:
        return await self.inner.instance_id()

    async def send(self, expected_instance_id, mode, signed_envelope):
        if self.send_failures > 0:
            self.send_failures -= 1
            raise ConnectionError("router unreachable")
        return await self.inner.send(expected_instance_id, mode, signed_envelope)

    async def poll(self, recipients, cursor, *, hold=25.0):
        if self.poll_failures > 0:
            self.poll_failures -= 1
            raise ConnectionError("router unreachable")
        return await self.inner.poll(recipients, cursor, hold=hold)

    def subscribe(self, recipients, cursor, *, hold=25.0):
        return self.inner.subscribe(recipients, cursor, hold=hold)

    async def close(self) -> None:
        await self.inner.close()


async def test_a_feed_that_fails_detaches_retries_and_certifies_once_the_router_answers():
    registry = MemoryRegistry()
    cache = VerifyCache()
    client = RegistryClient(
        registry, registry_public_key=registry.registry_public_key(), verify_cache=cache
    )
    router = FlakyRouter(InProcessRouter(RegistryEnvelopeVerifier(client, cache=cache)), failures=2)
    store = MemoryStore()
    states: list[RouterAttachment] = []
    network = Network(
        router=router,
        store=store,
        local_instance_id=store.local_instance_id,
        observer=NetworkObserver(on_attachment=states.append),
    )
    world = World(registry, client, cache, router.inner, store, network, {})
    try:
        await started(world, "alice", "bob")
        # As the send pipeline does: wait for the attachment, holding no lock.
        assert await network.wait_attached(10)
        await world.post("alice", "through a flaky router", "bob")
        assert RouterAttachment.DETACHED in states
        assert states[-1] is RouterAttachment.ACTIVE
    finally:
        await network.close()
        await router.close()
        await client.close()


class LossyAnswerRouter(FlakyRouter):
    """A Router that appends an envelope and then loses the answer (a timed-out call)."""

    def __init__(self, inner: InProcessRouter, losses: int) -> None:
        super().__init__(inner, failures=0)
        self.losses = losses
        self.modes: list[str] = []

    async def send(self, expected_instance_id, mode, signed_envelope):
        self.modes.append(mode.value)
        outcome = await self.inner.send(expected_instance_id, mode, signed_envelope)
        if self.losses > 0:
            self.losses -= 1
            raise ConnectionError("the answer was lost after the append")
        return outcome


async def test_an_ambiguous_send_is_retried_with_the_same_bytes_as_a_retry():
    registry = MemoryRegistry()
    cache = VerifyCache()
    client = RegistryClient(
        registry, registry_public_key=registry.registry_public_key(), verify_cache=cache
    )
    router = LossyAnswerRouter(
        InProcessRouter(RegistryEnvelopeVerifier(client, cache=cache)), losses=1
    )
    store = MemoryStore()
    network = Network(router=router, store=store, local_instance_id=store.local_instance_id)
    world = World(registry, client, cache, router.inner, store, network, {})
    try:
        await started(world, "alice", "bob")
        await world.post("alice", "once, even if the answer was lost", "bob")
        assert router.modes[:2] == ["initial", "retry"]
        rows = await records_of(world, "bob", "alice")
        assert len(rows) == 1
    finally:
        await network.close()
        await router.close()
        await client.close()

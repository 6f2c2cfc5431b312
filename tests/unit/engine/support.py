"""What the engine's unit tests share: members in one process on a store, a memory Registry
and the in-process Router (`World`), and the waits on what they certify."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from harness_contract.content import multicast_content

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.engine import protocol as p
from gateway.engine.certifier import Certifier
from gateway.engine.network import Network
from gateway.engine.sequencing import Sequencing
from gateway.engine.state import Identity
from gateway.identity.keys import SigningKey, VerifyCache
from gateway.registry import MemoryRegistry, Registered, RegistryClient
from gateway.registry.verifier import RegistryEnvelopeVerifier
from gateway.router import InProcessRouter
from gateway.store.memory import MemoryStore
from tests.support import eventually

BOUND = 10.0


@dataclass
class World:
    registry: MemoryRegistry
    client: RegistryClient
    cache: VerifyCache
    router: InProcessRouter
    store: MemoryStore
    network: Network
    members: dict[str, Certifier]

    async def add(self, name: str) -> Certifier:
        key = SigningKey.generate()
        outcome = await self.registry.register(name, key.public_key_b64)
        assert isinstance(outcome, Registered)
        certifier = Certifier(
            Identity(
                agent_id=outcome.card.card.agent_id, agent_name=name, key=key, card=outcome.card
            ),
            registry_public_key=self.registry.registry_public_key(),
            verify_cache=self.cache,
        )
        self.network.host(certifier)
        self.members[name] = certifier
        return certifier

    def descriptor(self, *names: str) -> p.MembershipDescriptor:
        return p.build_membership(self.members[name].identity.card for name in names)

    async def post(self, author: str, text: str, *names: str) -> tuple[str, str]:
        certifier = self.members[author]
        post_id, effects = certifier.bind(
            self.descriptor(author, *names), multicast_content(text), now=0.0
        )
        latch = self.network.latch(post_id)
        await self.network.commit(effects)
        record_hash = await asyncio.wait_for(latch, BOUND)
        return post_id, record_hash


@contextlib.asynccontextmanager
async def world_on(
    store: MemoryStore, *, clock: Clock = SYSTEM_CLOCK, sequencing: Sequencing | None = None
) -> AsyncIterator[World]:
    """Members in one process on `store`, a memory Registry and the in-process Router, with
    the network's timers on `clock` (and a cluster's order when `sequencing` is given)."""
    registry = MemoryRegistry()
    cache = VerifyCache()
    client = RegistryClient(
        registry, registry_public_key=registry.registry_public_key(), verify_cache=cache
    )
    router = InProcessRouter(RegistryEnvelopeVerifier(client, cache=cache))
    network = Network(
        router=router,
        store=store,
        local_instance_id=store.local_instance_id,
        clock=clock,
        sequencing=sequencing,
    )
    built = World(registry, client, cache, router, store, network, {})
    try:
        yield built
    finally:
        await network.close()
        await router.close()
        await client.close()


async def started(world: World, *names: str) -> World:
    for name in names:
        await world.add(name)
    await world.network.start()
    return world


async def records_of(world: World, name: str, *members: str, count: int = 1):
    """The member's certified records once it holds `count` of them."""
    certifier = world.members[name]
    conversation_id = world.descriptor(name, *members).conversation_id
    return await eventually(
        lambda: world.store.records(certifier.agent_id, conversation_id, 0, 100),
        lambda rows: len(rows) >= count,
    )

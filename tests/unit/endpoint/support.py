"""A daemon in one process for the endpoint's unit tests: hosted agents' `AgentRuntime`s on a
`MemoryStore`, a `MemoryRegistry`, the in-process Router and a `FakeClock`, wired as the
composition root wires them. Nothing opens a socket or a file."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from harness_contract.codec import item_from_json
from harness_contract.jsonvalue import parse_canonical_json
from harness_contract.values import InboundItem

from gateway.clock import FakeClock
from gateway.endpoint.inbox import AgentInbox
from gateway.endpoint.runtime import AgentParts, AgentRuntime, SendObserver, SendTimeouts
from gateway.engine.certifier import Certifier, Identity
from gateway.engine.network import Network, NetworkObserver
from gateway.identity.keys import SigningKey, VerifyCache
from gateway.registry import MemoryRegistry, Registered, RegistryClient
from gateway.registry.verifier import RegistryEnvelopeVerifier
from gateway.router import InProcessRouter
from gateway.store.errors import StoreError
from gateway.store.memory import MemoryStore
from gateway.store.records import PutIntent, Write

BOUNDED = SendTimeouts(attach=5.0, drain=5.0, certify=5.0)
"""Bounds a send that can certify here never reaches, even on a loaded machine."""

QUICK = SendTimeouts(attach=0.05, drain=0.05, certify=0.05)
"""Bounds short enough that a send that cannot certify answers at once."""


class FailingStore(MemoryStore):
    """A `MemoryStore` that refuses the next commit binding an intent with `refusal`."""

    def __init__(self) -> None:
        super().__init__()
        self.refusal: StoreError | None = None

    async def apply(self, writes: Sequence[Write]) -> None:
        if self.refusal is not None and any(isinstance(w, PutIntent) for w in writes):
            refusal, self.refusal = self.refusal, None
            raise refusal
        await super().apply(writes)


@dataclass
class Observed:
    """What the send pipeline reported through its observer."""

    sends: list[tuple[str, object]] = field(default_factory=list)
    published: list[str] = field(default_factory=list)
    consumed: list[str] = field(default_factory=list)

    def observer(self) -> SendObserver:
        return SendObserver(
            on_send=lambda op, outcome: self.sends.append((op, outcome)),
            on_delivery_published=self.published.append,
            on_record_consumed=self.consumed.append,
        )


@dataclass
class Daemon:
    """One daemon's agents and seams."""

    registry: MemoryRegistry
    client: RegistryClient
    cache: VerifyCache
    router: InProcessRouter
    store: MemoryStore
    network: Network
    clock: FakeClock
    runtimes: dict[str, AgentRuntime] = field(default_factory=dict)
    """By AgentId."""
    observed: dict[str, Observed] = field(default_factory=dict)
    """By agent name."""
    fatal: list[BaseException] = field(default_factory=list)
    """What was reported to the daemon's fatal path (it would stop)."""

    async def register(self, name: str) -> Identity:
        """Register a name with the Registry (an agent of another daemon, unless hosted)."""
        key = SigningKey.generate()
        outcome = await self.registry.register(name, key.public_key_b64)
        assert isinstance(outcome, Registered)
        return Identity(
            agent_id=outcome.card.card.agent_id, agent_name=name, key=key, card=outcome.card
        )

    async def host(self, name: str, *, timeouts: SendTimeouts = BOUNDED) -> AgentRuntime:
        """Register and host an agent, as `Gateway._host` does."""
        identity = await self.register(name)
        certifier = Certifier(
            identity,
            registry_public_key=self.registry.registry_public_key(),
            verify_cache=self.cache,
        )
        observed = Observed()
        runtime = AgentRuntime(
            AgentParts(
                identity=identity,
                certifier=certifier,
                network=self.network,
                registry=self.client,
                store=self.store,
                inbox=AgentInbox(
                    agent_id=identity.agent_id,
                    store=self.store,
                    next_seq=1,
                    window=16,
                    clock=self.clock.time,
                ),
                timeouts=timeouts,
                clock=self.clock,
            ),
            run_id="run-1",
            observer=observed.observer(),
        )
        self.runtimes[identity.agent_id] = runtime
        self.observed[name] = observed
        self.network.host(certifier)
        return runtime

    async def start(self) -> None:
        """Start the network, then every runtime's classification pass."""
        await self.network.start()
        for runtime in self.runtimes.values():
            await runtime.start()

    async def items(self, runtime: AgentRuntime) -> list[InboundItem]:
        """The agent's unacknowledged inbox items, in inbox order."""
        rows = await self.store.unread(runtime.agent_id, 0, 100)
        return [item_from_json(parse_canonical_json(row.item)) for row in rows]

    def _deliveries(self, agent_ids: set[str]) -> None:
        for agent_id in agent_ids:
            runtime = self.runtimes.get(agent_id)
            if runtime is not None:
                runtime.deliveries_ready()


@contextlib.asynccontextmanager
async def daemon(
    store: MemoryStore | None = None, *, beside: Daemon | None = None
) -> AsyncIterator[Daemon]:
    """A daemon on `store` (a fresh `MemoryStore` by default); closed on exit. `beside`
    another daemon: this one shares its Registry, Router and clock (their owner closes
    them), so posts between the two cross the Router."""
    store = store or MemoryStore()
    if beside is None:
        clock = FakeClock()
        registry = MemoryRegistry()
        cache = VerifyCache()
        client = RegistryClient(
            registry, registry_public_key=registry.registry_public_key(), verify_cache=cache
        )
        router = InProcessRouter(RegistryEnvelopeVerifier(client, cache=cache))
    else:
        clock, registry, cache = beside.clock, beside.registry, beside.cache
        client, router = beside.client, beside.router
    observer = NetworkObserver(
        on_deliveries=lambda agents: built._deliveries(agents),
        on_fatal=lambda error: built.fatal.append(error),
    )
    network = Network(
        router=router,
        store=store,
        local_instance_id=store.local_instance_id,
        observer=observer,
        clock=clock,
    )
    built = Daemon(registry, client, cache, router, store, network, clock)
    try:
        yield built
    finally:
        for runtime in built.runtimes.values():
            await runtime.close()
        await network.close()
        if beside is None:
            await router.close()
            await client.close()

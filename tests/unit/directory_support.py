"""An `AgentDirectory` and its `ManagementQueries` wired as the composition root wires them,
on a `MemoryStore`, a `MemoryRegistry` and the in-process Router: no socket, no file."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from gateway.agents import AgentDirectory, HostedAgents, Hosting
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.cluster.membership import MembershipStatus
from gateway.endpoint.inbox import NULL_INBOX_OBSERVER
from gateway.endpoint.runtime import SendObserver, SendTimeouts
from gateway.engine.network import Network, NetworkObserver
from gateway.identity.keys import VerifyCache
from gateway.management import ManagementQueries
from gateway.registry import MemoryRegistry, RegistryClient
from gateway.registry.verifier import RegistryEnvelopeVerifier
from gateway.router import InProcessRouter
from gateway.settings import Mode
from gateway.store.memory import MemoryStore

ADMIN_TOKEN = "hadm_" + "a" * 43
"""The operator token of the directory under test."""


@dataclass
class Directory:
    """The directory under test, its table, its queries, and the store beneath them."""

    hosted: HostedAgents
    agents: AgentDirectory
    management: ManagementQueries
    store: MemoryStore


@contextlib.asynccontextmanager
async def directory(
    store: MemoryStore | None = None,
    *,
    clock: Clock = SYSTEM_CLOCK,
    cluster: Callable[[], MembershipStatus | None] | None = None,
) -> AsyncIterator[Directory]:
    """A directory with no agent yet; every runtime, the network and the Router are closed
    on exit."""
    store = store or MemoryStore()
    registry = MemoryRegistry()
    cache = VerifyCache()
    client = RegistryClient(
        registry, registry_public_key=registry.registry_public_key(), verify_cache=cache
    )
    router = InProcessRouter(RegistryEnvelopeVerifier(client, cache=cache))
    hosted = HostedAgents()
    network = Network(
        router=router,
        store=store,
        local_instance_id=store.local_instance_id,
        observer=NetworkObserver(on_deliveries=hosted.deliveries_ready),
    )
    agents = AgentDirectory(
        hosted=hosted,
        store=store,
        local_instance_id=store.local_instance_id,
        network=network,
        registry=client,
        hosting=Hosting(
            registry_public_key=registry.registry_public_key(),
            verify_cache=cache,
            stream_window=16,
            timeouts=SendTimeouts(),
            history_export_dir=None,
            run_id="run-under-test",
            inbox_observer=NULL_INBOX_OBSERVER,
            send_observer=SendObserver(),
            clock=clock,
        ),
        admin_token=ADMIN_TOKEN,
    )
    management = ManagementQueries(
        hosted=hosted,
        store=store,
        network=network,
        mode=Mode.CLUSTER if cluster is not None else Mode.EMBEDDED,
        clock=clock,
        cluster=cluster,
    )
    built = Directory(hosted=hosted, agents=agents, management=management, store=store)
    try:
        yield built
    finally:
        await hosted.close()
        await network.close()
        await router.close()
        await client.close()

"""A three-replica cluster whose named agents are homed on different replicas (cluster.md §2, §4).

Agent ids are random, so a test cannot pick its agents' home partitions; it can pick which
replica rendezvous hashing assigns a partition to, by picking the replicas' ids. So
`homed_cluster(...)` starts one replica, registers the named agents through it at once (any
replica answers a registration, cluster.md §4.1, and its claims wait one lease TTL), chooses
two more replica ids for which the agents' home partitions fall on as many replicas as they
can (three, unless two agents share a partition), starts those two before the first claims,
and waits until every replica holds exactly its rendezvous share. The replicas sit behind a
`RoundRobinProxy`, the Service every client dials.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gateway.app import Gateway
from gateway.cluster.partitions import (
    assignment,
    home_partition,
    rendezvous_owner,
    rendezvous_score,
)
from gateway.cluster_parts import ClusterBase
from gateway.testing_cluster import TEST_TIMING, ClusterFiles, replica_settings
from gateway.testing_proxy import RoundRobinProxy
from tests.servers import PostgresServer
from tests.support import eventually

SETTLE_BOUND: Final = 40.0
"""Seconds the three replicas may take to hold exactly their rendezvous shares: one lease TTL
of fresh beats before any claim, and a share the first replica claimed before the others were
seen serving handed over after one more TTL and a surplus look (`TEST_TIMING`: 3 s and 1 s;
the bound leaves room for a loaded machine)."""

OWN_CONNECTION: Final = (("grpc.use_local_subchannel_pool", 1),)
"""Each Python client its own connection, so the proxy spreads them over the replicas."""

FIRST_REPLICA: Final = "replica-0"
CANDIDATES: Final = 4096
"""Replica ids tried for the second and third replica. The first replica's id is fixed, and
when its rendezvous scores for all three homes are low a random pair rarely lets it win one:
64 candidates ran out once (homes 40, 233, 636). The pairs are searched over scores computed
once per candidate, so even a long search hashes only 3 × 4,096 times."""


def cluster_of(gateway: Gateway) -> ClusterBase:
    """A replica's cluster parts (every gateway here is a replica)."""
    cluster = gateway.components.cluster
    assert cluster is not None, "not a cluster replica"
    return cluster


@dataclass(frozen=True, slots=True, kw_only=True)
class HomedCluster:
    """Three replicas behind a proxy, and the agents registered before the test."""

    files: ClusterFiles
    replicas: tuple[Gateway, ...]
    proxy: RoundRobinProxy
    tokens: dict[str, str]
    agent_ids: dict[str, str]

    @property
    def address(self) -> str:
        """The Service's address: the proxy."""
        return self.proxy.address

    def partition(self, name: str) -> int:
        """`name`'s home partition."""
        return home_partition(self.agent_ids[name], cluster_of(self.replicas[0]).meta.partitions)

    def home(self, name: str) -> Gateway:
        """The replica holding `name`'s home partition."""
        partition = self.partition(name)
        (home,) = [r for r in self.replicas if partition in cluster_of(r).membership.owned()]
        return home


def forwards(replica: Gateway) -> float:
    """The calls `replica` forwarded to another replica, whatever their outcome
    (`harness_cluster_forwards_total` in its own registry)."""
    return sum(
        sample.value
        for family in replica.metrics.registry.collect()
        for sample in family.samples
        if sample.name == "harness_cluster_forwards_total"
    )


def spread_ids(partitions: int, homes: Sequence[int]) -> tuple[str, str, str]:
    """Replica ids for which rendezvous puts the distinct `homes` on as many replicas as it
    can (all three when there are three or more distinct homes)."""
    distinct = sorted(set(homes))
    wanted = min(3, len(distinct))
    candidates = [f"replica-{index}" for index in range(1, CANDIDATES + 1)]
    scores = {
        replica_id: [rendezvous_score(partition, replica_id) for partition in distinct]
        for replica_id in (FIRST_REPLICA, *candidates)
    }

    def owners(ids: tuple[str, str, str]) -> int:
        # rendezvous_owner's rule: the highest score, equal scores to the larger id.
        return len({max(ids, key=lambda r: (scores[r][i], r)) for i in range(len(distinct))})

    for second, third in itertools.combinations(candidates, 2):
        ids = (FIRST_REPLICA, second, third)
        if owners(ids) == wanted and all(assignment(partitions, ids).values()):
            assert {rendezvous_owner(p, ids) for p in distinct} == {
                max(ids, key=lambda r: (scores[r][i], r)) for i in range(len(distinct))
            }
            return ids
    raise AssertionError(f"no replica ids among {CANDIDATES} spread homes {distinct}")


@contextlib.asynccontextmanager
async def homed_cluster(
    postgres_server: PostgresServer, folder: Path, names: Sequence[str]
) -> AsyncIterator[HomedCluster]:
    """Three replicas, `names` registered and homed on different replicas, a proxy before
    them; stopped on exit."""
    files = ClusterFiles.create(folder / "cluster")
    dsn = postgres_server.create_database("cluster")
    replicas: list[Gateway] = []
    try:
        first = await Gateway.start(
            replica_settings(files, dsn, replica_id=FIRST_REPLICA), cluster_timing=TEST_TIMING
        )
        replicas.append(first)
        registered = {name: await first.components.agents.register(name) for name in names}
        partitions = cluster_of(first).meta.partitions
        homes = [home_partition(r.agent_id, partitions) for r in registered.values()]
        ids = spread_ids(partitions, homes)
        # One at a time into `replicas`, so a start that fails stops the ones before it.
        for replica_id in ids[1:]:
            settings = replica_settings(files, dsn, replica_id=replica_id)
            replicas.append(await Gateway.start(settings, cluster_timing=TEST_TIMING))
        shares = assignment(partitions, ids)

        async def settled() -> bool:
            return all(
                set(cluster_of(r).membership.owned()) == shares[cluster_of(r).membership.replica_id]
                for r in replicas
            )

        await eventually(settled, within=SETTLE_BOUND)
        async with RoundRobinProxy([r.address for r in replicas]) as proxy:
            yield HomedCluster(
                files=files,
                replicas=tuple(replicas),
                proxy=proxy,
                tokens={name: r.token for name, r in registered.items()},
                agent_ids={name: r.agent_id for name, r in registered.items()},
            )
    finally:
        for replica in reversed(replicas):
            await replica.shutdown(skip_waits=True)


__all__ = [
    "OWN_CONNECTION",
    "HomedCluster",
    "cluster_of",
    "forwards",
    "homed_cluster",
    "spread_ids",
]

"""Who the gateway run's agents are, what each sender sends to, and which daemon hosts whom.

Also the run's topology (`Topology`): how many daemons, which Router joins them and where
their stores live, and the daemons' names. Pure code, so a unit test checks the layout and
the flag combinations without starting a process. The bench is a client of the API and does
not import the gateway: the group size bounds and the `group:` syntax below restate the
contract (contract/src/harness_contract/addresses.py), and a unit test pins
them to it.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

PAIR_SIZE: Final = 2
"""`--group-size` of the direct pair mode: a sender and one receiver."""
GROUP_MIN_MEMBERS: Final = 3
"""Fewest members of a group conversation, the sender included (the contract's bound)."""
GROUP_MAX_MEMBERS: Final = 32
"""Most members of a group conversation, the sender included (the contract's bound)."""
MAX_DAEMONS: Final = 8
"""Most daemons: every daemon is a process on this machine with its own connections, and
eight already share two cores with the bench, the Registry and the servers."""
NATS_NODE_COUNTS: Final = (1, 3)
"""`--nats-nodes`: one JetStream node (an R1 stream), or a 3-node cluster (an R3 stream)."""
SINGLE_NAME: Final = "gateway"
"""Process name of the one embedded daemon (in-process Router and Registry)."""
NETWORK_DAEMON_NAMES: Final = tuple(
    f"daemon-{letter}" for letter in string.ascii_lowercase[:MAX_DAEMONS]
)
"""Process names of joined daemons, in order: `daemon-a`, `daemon-b`, ... (the two-daemon
run's names from before there were more). Also each one's `--store-owner` in PostgreSQL."""
REPLICA_NAMES: Final = tuple(f"replica-{letter}" for letter in string.ascii_lowercase[:MAX_DAEMONS])
"""Process names of a cluster's replicas, in order; also each one's `--replica-id`."""
HUB_NAME: Final = "bench-hub"
"""The hub's name in the hub workload (`--hub`): the one sender of every conversation. The
name is a first try: the bench registers further candidates (`bench-hub-1`, ...) until one
has an AgentId below every receiver's (`bench.gateway_run`)."""
AGENT_PREFIX: Final = "agent:"
GROUP_PREFIX: Final = "group:"


class RouterKind(StrEnum):
    """What joins the daemons (`--router`)."""

    INPROCESS = "inprocess"
    """The embedded Router and Registry of one `harness-gateway serve` (one daemon only)."""
    GRPC = "grpc"
    """A standalone `harness-gateway router` and `harness-gateway registry`."""
    NATS = "nats"
    """A NATS JetStream cluster the bench starts, and a standalone Registry; no Router
    process."""
    CLUSTER = "cluster"
    """`--cluster N`: N `harness-gateway serve --cluster` replicas on one PostgreSQL
    database; no Router, no Registry process (cluster.md §13): the replicas forward each
    call to the agent's home and hand posts to the sequencing replica themselves."""


class StoreKind(StrEnum):
    """Where the daemons keep their rows (`--store`)."""

    SQLITE = "sqlite"
    """Each daemon's own SQLite file in its data directory (the Registry's likewise)."""
    POSTGRESQL = "postgresql"
    """One PostgreSQL database the bench starts, shared by the Registry and every daemon,
    each daemon under its own `--store-owner`."""


def default_router(daemons: int) -> RouterKind:
    """The Router when `--router` is not given: in-process for one daemon, the standalone
    gRPC Router for more (the bench's layouts from before `--router` existed)."""
    return RouterKind.INPROCESS if daemons == 1 else RouterKind.GRPC


@dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    """The gateway side of a run: its daemons, what joins them, where they store."""

    daemons: int
    router: RouterKind
    store: StoreKind
    nats_nodes: int | None = None
    """JetStream nodes (1 or 3) with the NATS Router; None with any other."""

    @property
    def daemon_names(self) -> tuple[str, ...]:
        """Each daemon's process name, in daemon index order."""
        if self.router is RouterKind.INPROCESS:
            return (SINGLE_NAME,)
        if self.router is RouterKind.CLUSTER:
            return REPLICA_NAMES[: self.daemons]
        return NETWORK_DAEMON_NAMES[: self.daemons]

    @property
    def standalone_registry(self) -> bool:
        """Whether a `harness-gateway registry` runs (every Router but the in-process one;
        a cluster's replicas keep the Registry in their shared database)."""
        return self.router not in (RouterKind.INPROCESS, RouterKind.CLUSTER)

    @property
    def is_cluster(self) -> bool:
        """Whether the daemons are the replicas of one cluster (`--cluster N`)."""
        return self.router is RouterKind.CLUSTER


def cluster_topology(replicas: int) -> Topology:
    """`--cluster N`: N replicas on one PostgreSQL database."""
    return Topology(daemons=replicas, router=RouterKind.CLUSTER, store=StoreKind.POSTGRESQL)


def router_path_topology(daemons: int) -> Topology:
    """What `--compare-router` runs beside `--cluster N`: N daemons joined through a
    one-node NATS JetStream Router, sharing one PostgreSQL database (issue 25's "today")."""
    return Topology(
        daemons=daemons, router=RouterKind.NATS, store=StoreKind.POSTGRESQL, nats_nodes=1
    )


def check_topology(topology: Topology) -> None:
    """Raise ValueError, saying which flags clash, for a topology the bench cannot run."""
    daemons, router = topology.daemons, topology.router
    if not 1 <= daemons <= MAX_DAEMONS:
        raise ValueError(f"--daemons must be 1..{MAX_DAEMONS}, not {daemons}")
    if router is RouterKind.INPROCESS and daemons != 1:
        raise ValueError(
            f"--router inprocess is one daemon's embedded Router; {daemons} daemons need "
            "--router grpc or --router nats"
        )
    if router is RouterKind.CLUSTER and topology.store is not StoreKind.POSTGRESQL:
        raise ValueError("--cluster keeps every replica's rows in PostgreSQL; not --store sqlite")
    if router is RouterKind.NATS:
        if topology.nats_nodes not in NATS_NODE_COUNTS:
            raise ValueError(
                f"--nats-nodes must be one of {', '.join(map(str, NATS_NODE_COUNTS))}, "
                f"not {topology.nats_nodes}"
            )
    elif topology.nats_nodes is not None:
        raise ValueError(f"--nats-nodes sizes the NATS cluster; --router is {router.value}")


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentPlan:
    """One agent to register: its name and the daemon (index) that hosts it."""

    name: str
    daemon: int

    @property
    def address(self) -> str:
        """`agent:<name>`."""
        return AGENT_PREFIX + self.name


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupPlan:
    """One sender and the agents it sends to: a direct pair (one receiver) or a group."""

    index: int
    sender: AgentPlan
    receivers: tuple[AgentPlan, ...]

    @property
    def address(self) -> str:
        """What the sender sends to: `agent:<receiver>` for a pair, else the group address."""
        if len(self.receivers) == 1:
            return self.receivers[0].address
        return group_address(receiver.name for receiver in self.receivers)


def group_address(others: Iterable[str]) -> str:
    """`group:<names>` naming the members other than the sender, sorted. The gateway adds
    the sender to the membership (engine.md §1.2), so this names the same conversation as
    the canonical address that lists the sender too."""
    return GROUP_PREFIX + ",".join(sorted(others))


def check_layout(*, group_size: int, daemons: int) -> None:
    """Raise ValueError for a conversation size or daemon count the bench cannot run."""
    if group_size != PAIR_SIZE and not GROUP_MIN_MEMBERS <= group_size <= GROUP_MAX_MEMBERS:
        raise ValueError(
            f"group size must be {PAIR_SIZE} (direct pairs) or {GROUP_MIN_MEMBERS}.."
            f"{GROUP_MAX_MEMBERS}, not {group_size}"
        )
    if not 1 <= daemons <= MAX_DAEMONS:
        raise ValueError(f"daemons must be 1..{MAX_DAEMONS}, not {daemons}")


def plan_groups(count: int, *, group_size: int, daemons: int) -> tuple[GroupPlan, ...]:
    """`count` conversations of `group_size` agents, spread round robin: conversation k's
    sender is on daemon `k mod daemons` and all its receivers on the next daemon
    (`(k + 1) mod daemons`). With one daemon every agent is on it; with more, every post
    crosses daemons, and each daemon sends about as many posts as it receives."""
    check_layout(group_size=group_size, daemons=daemons)
    plans: list[GroupPlan] = []
    for index in range(count):
        if group_size == PAIR_SIZE:
            # The pair mode's names predate groups; kept so runs stay comparable in logs.
            names = [f"bench-receiver-{index}"]
        else:
            names = [f"bench-receiver-{index}-{member}" for member in range(1, group_size)]
        sender_on = index % daemons
        receivers_on = (index + 1) % daemons
        plans.append(
            GroupPlan(
                index=index,
                sender=AgentPlan(name=f"bench-sender-{index}", daemon=sender_on),
                receivers=tuple(AgentPlan(name=name, daemon=receivers_on) for name in names),
            )
        )
    return tuple(plans)


def plan_cluster_groups(
    count: int, *, group_size: int, replicas: int, hub: bool, rng: random.Random
) -> tuple[GroupPlan, ...]:
    """`count` conversations of `group_size` agents for `--cluster`: each agent's client
    dials a replica drawn from `rng` (its home partition is drawn by the Registry, whose
    AgentIds are random, so members land on random homes whichever replica they dial). With
    `hub`, one agent (`HUB_NAME`) is the sender of every conversation (cluster.md §2: with the
    lowest AgentId it sequences them all)."""
    check_layout(group_size=group_size, daemons=replicas)
    the_hub = AgentPlan(name=HUB_NAME, daemon=rng.randrange(replicas)) if hub else None
    plans: list[GroupPlan] = []
    for index in range(count):
        if group_size == PAIR_SIZE:
            names = [f"bench-receiver-{index}"]
        else:
            names = [f"bench-receiver-{index}-{member}" for member in range(1, group_size)]
        sender = the_hub or AgentPlan(name=f"bench-sender-{index}", daemon=rng.randrange(replicas))
        plans.append(
            GroupPlan(
                index=index,
                sender=sender,
                receivers=tuple(
                    AgentPlan(name=name, daemon=rng.randrange(replicas)) for name in names
                ),
            )
        )
    return tuple(plans)

"""Where an agent's calls are answered in a cluster: the seam the RPC forwarder asks
(cluster.md §4.1).

A replica answers a call for an agent homed here and forwards any other to the agent's home.
The forwarder (`gateway/rpc/forward.py`) knows nothing of partitions, leases or tokens'
rows; it asks a `HomeRoutes` two questions:

- `await routes.home_of(token)`: where the agent this bearer token names is answered —
  `HERE` (this replica holds its home partition, or the token names no agent: the local
  handler then refuses it with the contract's typed error), or a `Remote` home with the
  (partition, epoch) the forwarded call must carry;
- `routes.holds(partition, epoch)`: whether a routed call that reached this replica may be
  answered here (NOT_OWNER otherwise, before any effect).

`routes.refresh()` is called after a home refused NOT_OWNER, so the next answer reflects the
partitions table as it is now, not as it was cached.

A holder whose beat is older than `ROUTE_BEAT_AGE` is not routed to (cluster.md §9.1): the
membership's `route(p)` answers as while no live replica holds p.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, Protocol


class Local(enum.Enum):
    """The call is answered by this replica."""

    HERE = "here"


HERE: Final = Local.HERE
"""Answer the call here."""

ROUTE_BEAT_AGE: Final = 3.0
"""Seconds since its last beat (database time, as the last view read it) past which a holder
gets no forwarded call and no hint (cluster.md §9.1). Two beat intervals (1.5 s) missed: a
home that vanished without resetting its connections (SIGSTOP, a lost node) is skipped well
before its lease (6 s) lets another replica claim its partitions. Its agents' calls are then
answered as while nobody holds their partition: UNAVAILABLE `NOT_OWNER` before any effect,
and the client retries until the new home has claimed it."""


@dataclass(frozen=True, slots=True)
class Remote:
    """The agent's home is another replica: forward the call there."""

    address: str
    """The home's advertised `HOST:PORT` (cluster.md §4.2)."""
    partition: int
    """The agent's home partition."""
    epoch: int
    """The partition's epoch the home must still hold for the call to be answered."""


Placement = Local | Remote
"""Where a call is answered."""


class HomeRoutes(Protocol):
    """What the forwarder asks of the cluster (cluster.md §4.1)."""

    async def home_of(self, token: str) -> Placement:
        """Where the agent this token names is answered; `HERE` for a token naming no agent
        (the local handler refuses it) and for an agent homed on this replica."""
        ...

    async def home_of_name(self, name: str) -> Placement:
        """Where the agent of this name is answered (management calls, cluster.md §4.1);
        `HERE` for a name naming no agent (the local handler refuses it)."""
        ...

    def holds(self, partition: int, epoch: int) -> bool:
        """Whether this replica holds `partition` at exactly `epoch`."""
        ...

    def refresh(self) -> None:
        """Forget cached routes: a home refused NOT_OWNER."""
        ...


def route_text(partition: int, epoch: int) -> str:
    """The `harness-route` metadata value of a forwarded call: `<partition>/<epoch>`."""
    return f"{partition}/{epoch}"


def parse_route(text: str) -> tuple[int, int] | None:
    """(partition, epoch) of a `harness-route` value, None when malformed."""
    partition, slash, epoch = text.partition("/")
    if not slash or not partition.isdigit() or not epoch.isdigit():
        return None
    if len(partition) > 9 or len(epoch) > 18:
        return None
    return int(partition), int(epoch)


__all__ = [
    "HERE",
    "ROUTE_BEAT_AGE",
    "HomeRoutes",
    "Local",
    "Placement",
    "Remote",
    "parse_route",
    "route_text",
]

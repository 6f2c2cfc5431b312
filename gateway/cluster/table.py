"""The seam between cluster membership and its table: what `Membership` asks of the database.

`gateway/cluster/` holds no SQL; `gateway/store/postgres/membership.py` implements
`MembershipTable` on the `replicas` and `partitions` tables (cluster.md §3.1, §3.2, §3.6), and
tests may implement it in memory. Callers may rely on:

- **Database time judges liveness.** A replica row is `live` when it is not fenced and its
  beat is at most the lease TTL old *in the database's clock* (`now() - beat <= ttl`); no
  replica's own clock enters that judgement.
- **A view is one snapshot**: every replica row and every partition row as of one instant, so
  a route never pairs a holder with an address from another moment.
- **A claim commits or claims nothing of a partition**: `claim` returns exactly the partitions
  whose compare-and-set committed, with their new epochs. It fences a holder's incarnation
  only when that holder is dead in database time (its in-flight group finishes first), and it
  never takes a partition from a live holder.
- `MembershipUnavailable` means the database could not be asked; for `claim` (a COMMIT whose
  answer was lost) the partitions may or may not have been claimed, which the next view shows.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Protocol


class MembershipUnavailable(Exception):
    """The membership table could not be read or written (PostgreSQL unreachable, a lost
    connection, a bounded wait that ran out). Try again later; a replica whose own beats keep
    failing loses its lease on its monotonic clock (cluster.md §3.5)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Joined:
    """A replica's new incarnation, from `MembershipTable.join`."""

    incarnation: int
    """The incarnation this start writes as (the fence, cluster.md §3.1)."""
    database_time: datetime.datetime
    """The database's `now()` of the join, which is also the incarnation's first beat."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaRow:
    """One `replicas` row as a view saw it."""

    replica_id: str
    incarnation: int
    """The replica's current incarnation (its newest start)."""
    address: str
    """The advertised address its calls are forwarded to (cluster.md §4.2)."""
    serving: bool
    """Whether it counts for assignment (cluster.md §3.2: only SERVING replicas do)."""
    fenced: bool
    """Whether a claimer fenced this incarnation: nothing it writes commits any more."""
    beat_age: float
    """Seconds since its last beat, in database time (negative never; 0 at best)."""
    live: bool
    """Not fenced, and `beat_age` at most the view's TTL."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRow:
    """One `partitions` row as a view saw it."""

    partition: int
    holder: str | None
    """The holding replica's id, None when nobody holds the partition."""
    incarnation: int | None
    """The holder's incarnation when it claimed; None with no holder."""
    epoch: int
    """Raised by one at each claim (0 for a partition never claimed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """Every replica and partition row, read in one snapshot (routing, claims, status)."""

    database_time: datetime.datetime
    replicas: Mapping[str, ReplicaRow]
    """By replica id."""
    partitions: tuple[PartitionRow, ...]
    """Every partition, ordered by number: `partitions[p].partition == p`."""

    def live_holder(self, row: PartitionRow) -> ReplicaRow | None:
        """The holder of `row` if it is live and still the incarnation that claimed it."""
        if row.holder is None:
            return None
        replica = self.replicas.get(row.holder)
        if replica is None or not replica.live or replica.incarnation != row.incarnation:
            return None
        return replica


class MembershipTable(Protocol):
    """What cluster membership reads and writes (cluster.md §3.1, §3.2)."""

    async def join(self, replica_id: str, address: str) -> Joined:
        """Start a fresh incarnation of `replica_id` (larger than any incarnation before, of
        any replica id, and never reused):
        not fenced, not serving, beating now, advertising `address`. The previous
        incarnation's writes stop committing once this commits.

        Raises:
            MembershipUnavailable: the database could not be asked.
        """
        ...

    async def beat(self, replica_id: str, incarnation: int) -> datetime.datetime | None:
        """Refresh the incarnation's beat; the database time of the beat, or None when the
        row no longer matches (fenced, or a newer incarnation joined): the lease is lost.

        Raises:
            MembershipUnavailable: the database could not be asked.
        """
        ...

    async def set_serving(self, replica_id: str, incarnation: int, serving: bool) -> bool:
        """Mark the incarnation serving (it joins assignment) or not; False when the row no
        longer matches (the lease is lost).

        Raises:
            MembershipUnavailable: the database could not be asked.
        """
        ...

    async def read_view(self, lease_ttl: float) -> View:
        """Every replica and partition row in one snapshot, liveness judged against
        `lease_ttl` seconds in database time.

        Raises:
            MembershipUnavailable: the database could not be asked.
        """
        ...

    async def claim(
        self, replica_id: str, incarnation: int, partitions: Collection[int], lease_ttl: float
    ) -> dict[int, int]:
        """Claim for this incarnation those of `partitions` whose holder is none, dead
        (`now() - beat > lease_ttl`), fenced or an older incarnation, in one transaction;
        the partitions claimed, each with its new epoch. Claims nothing when this
        incarnation is itself fenced, and nothing that another claimer took first.

        Raises:
            MembershipUnavailable: the database could not be asked, or COMMIT's answer was
                lost (the claim may have committed: the next view says).
        """
        ...

    async def forget_gone(self, silent_for: float) -> int:
        """Delete the rows of replicas that have not beaten for `silent_for` seconds (database
        time) and hold no partition; how many were deleted.

        Raises:
            MembershipUnavailable: the database could not be asked.
        """
        ...

    async def release(self, partition: int, replica_id: str, incarnation: int) -> bool:
        """Release `partition` if this incarnation holds it (the direct form; a replica's
        writer releases through its own group instead). Whether it was held.

        Raises:
            MembershipUnavailable: the database could not be asked.
        """
        ...


__all__ = [
    "Joined",
    "MembershipTable",
    "MembershipUnavailable",
    "PartitionRow",
    "ReplicaRow",
    "View",
]

"""Partitions of a cluster: an agent's home, a conversation's sequencer, who should hold what.

Pure functions over identifiers (cluster.md §2, §3.2); no I/O and no state. Callers may rely
on:

- **Every replica computes the same numbers.** Both hashes are SHA-256 over fixed byte
  strings, pinned by test vectors (`tests/unit/cluster/test_partitions.py`); never Python's
  `hash()`, which is salted per process. Two replicas disagreeing about a partition would run
  two sequencers for one conversation that no fence separates.
- `home_partition(agent_id, P)`: the first 4 bytes, big-endian, of SHA-256 over the AgentId's
  16 bytes (decoded with the contract's `RandomId.AGENT`), modulo P.
- `sequencing_partition(members, P)`: the home partition of the first member in AgentId byte
  order (`agent_id_order_key`), so a conversation whose members share a home partition is
  certified inside one replica.
- `rendezvous_owner(p, replicas)`: the replica with the highest score, the first 8 bytes,
  big-endian, of SHA-256(replica id in UTF-8 ‖ 0x00 ‖ p as 4 bytes big-endian); equal scores
  go to the larger replica id (UTF-8 byte order, which is code point order). Removing a
  replica moves only the partitions it was assigned; adding one moves only partitions to it.
- `assignment(P, replicas)`: every given replica id mapped to the partitions it is assigned
  (possibly none). Rendezvous says who *should* hold a partition; who *does* is the
  `partitions` table, and nobody claims from a live holder (cluster.md §3.2).
- Malformed input is a `ValueError`: an AgentId that does not decode, P < 1, no members.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Collection, Iterable
from typing import Final

from harness_contract.ids import RandomId, agent_id_order_key

DEFAULT_PARTITIONS: Final = 1024
"""Partitions of a new cluster (P), fixed when its database is set up.

1024 rather than 256: with the chart's largest replica count (12) the busiest replica holds
about 18% more partitions than the mean instead of about 40% (cluster-review finding 20), and a
partition costs one row, since fencing is per replica incarnation."""

MAX_PARTITIONS: Final = 1 << 16
"""The most partitions a cluster may have: a partition number fits the 4 bytes of the
rendezvous score, and more than this only makes every routing refresh slower."""

_SEPARATOR: Final = b"\x00"


def _check_partitions(partitions: int) -> None:
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(f"a cluster has 1 to {MAX_PARTITIONS} partitions, not {partitions}")


def home_partition(agent_id: str, partitions: int) -> int:
    """The home partition of `agent_id` among `partitions` (cluster.md §2).

    Raises:
        ValueError: `agent_id` is not an AgentId, or `partitions` is out of range.
    """
    _check_partitions(partitions)
    data = RandomId.AGENT.decode(agent_id)
    if data is None:
        raise ValueError("not an AgentId")
    return int.from_bytes(hashlib.sha256(data).digest()[:4], "big") % partitions


def sequencing_partition(member_agent_ids: Iterable[str], partitions: int) -> int:
    """The sequencing partition of a conversation with these members: the home partition of
    its first member in AgentId byte order (cluster.md §2).

    Raises:
        ValueError: no members, a member that is not an AgentId, or `partitions` out of range.
    """
    members = list(member_agent_ids)
    if not members:
        raise ValueError("a conversation has at least one member")
    return home_partition(min(members, key=agent_id_order_key), partitions)


def rendezvous_score(partition: int, replica_id: str) -> int:
    """`replica_id`'s score for `partition`: the first 8 bytes, big-endian, of
    SHA-256(replica id in UTF-8 ‖ 0x00 ‖ partition as 4 bytes big-endian)."""
    digest = hashlib.sha256(
        replica_id.encode() + _SEPARATOR + partition.to_bytes(4, "big")
    ).digest()
    return int.from_bytes(digest[:8], "big")


def rendezvous_owner(partition: int, replica_ids: Iterable[str]) -> str | None:
    """The replica rendezvous hashing assigns `partition` to, or None without replicas.

    Highest score wins; equal scores go to the larger replica id."""
    best: tuple[int, str] | None = None
    for replica_id in replica_ids:
        candidate = (rendezvous_score(partition, replica_id), replica_id)
        if best is None or candidate > best:
            best = candidate
    return None if best is None else best[1]


def assignment(partitions: int, replica_ids: Collection[str]) -> dict[str, frozenset[int]]:
    """Each of `replica_ids` mapped to the partitions of `range(partitions)` it is assigned.

    Raises:
        ValueError: `partitions` is out of range.
    """
    _check_partitions(partitions)
    return dict(_assignment(partitions, tuple(sorted(set(replica_ids)))))


@functools.lru_cache(maxsize=16)
def _assignment(
    partitions: int, replica_ids: tuple[str, ...]
) -> tuple[tuple[str, frozenset[int]], ...]:
    # Cached: every replica recomputes the assignment each routing refresh, and the set of
    # live serving replicas changes rarely (P × N hashes each time otherwise).
    assigned: dict[str, set[int]] = {replica_id: set() for replica_id in replica_ids}
    for partition in range(partitions):
        owner = rendezvous_owner(partition, replica_ids)
        if owner is not None:
            assigned[owner].add(partition)
    return tuple((replica_id, frozenset(found)) for replica_id, found in assigned.items())

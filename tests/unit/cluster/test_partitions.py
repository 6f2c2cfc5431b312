"""Partition hashes are pinned: every replica, on any Python, computes the same numbers
(cluster.md §2, §3.2)."""

from __future__ import annotations

import hashlib
import random

import pytest
from harness_contract.ids import RandomId, b64

from gateway.cluster.partitions import (
    DEFAULT_PARTITIONS,
    assignment,
    home_partition,
    rendezvous_owner,
    rendezvous_score,
    sequencing_partition,
)

ZERO = "agt_AAAAAAAAAAAAAAAAAAAAAA"
"""Sixteen zero bytes: SHA-256 begins 374708ff, so 0x374708ff mod 1024 = 255."""
ONES = "agt______________________w"
COUNTING = "agt_AAECAwQFBgcICQoLDA0ODw"
"""The bytes 0x00 to 0x0f."""
COUNTING_ON = "agt_EBESExQVFhcYGRobHB0eHw"
"""The bytes 0x10 to 0x1f."""
ALICE = "agt_K9gGyX8OAK8aH8Myj6djqQ"
BOB = "agt_gbY32PzSxtpjWeaWMROhFw"

HOME_VECTORS = [
    # (AgentId, home at P = 1024, home at P = 256)
    (ZERO, 255, 255),
    (ONES, 404, 148),
    (COUNTING, 806, 38),
    (COUNTING_ON, 115, 115),
    (ALICE, 252, 252),
    (BOB, 765, 253),
]

REPLICAS = ("replica-0", "replica-1", "replica-2")
OWNER_VECTORS = [
    (0, "replica-0"),
    (1, "replica-2"),
    (7, "replica-2"),
    (255, "replica-0"),
    (1023, "replica-0"),
]


def test_the_default_cluster_has_1024_partitions() -> None:
    assert DEFAULT_PARTITIONS == 1024


@pytest.mark.parametrize(("agent_id", "at_1024", "at_256"), HOME_VECTORS)
def test_home_partitions_match_the_pinned_vectors(agent_id: str, at_1024: int, at_256: int) -> None:
    assert home_partition(agent_id, 1024) == at_1024
    assert home_partition(agent_id, 256) == at_256


@pytest.mark.parametrize(("agent_id", "at_1024", "at_256"), HOME_VECTORS)
def test_the_home_partition_is_the_first_four_bytes_of_sha256_of_the_agent_id_bytes(
    agent_id: str, at_1024: int, at_256: int
) -> None:
    data = RandomId.AGENT.decode(agent_id)
    assert data is not None
    prefix = int.from_bytes(hashlib.sha256(data).digest()[:4], "big")
    assert (prefix % 1024, prefix % 256) == (at_1024, at_256)


def test_the_sha256_of_sixteen_zero_bytes_pins_the_zero_agent() -> None:
    assert hashlib.sha256(bytes(16)).hexdigest().startswith("374708ff")
    assert home_partition(ZERO, 1024) == 0x374708FF % 1024


def test_the_sequencing_partition_is_the_home_of_the_first_member_in_byte_order() -> None:
    assert sequencing_partition([COUNTING_ON, COUNTING], 1024) == 806
    assert sequencing_partition([ONES, ZERO, BOB], 256) == 255
    # "agt_-..." (0xf8...) sorts before "agt_A..." in ASCII text but after it in bytes.
    high = "agt_" + b64(b"\xfb" + bytes(15))
    assert high < ZERO
    assert sequencing_partition([high, ZERO], 1024) == home_partition(ZERO, 1024)


def test_malformed_input_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="AgentId"):
        home_partition("agt_short", 1024)
    with pytest.raises(ValueError, match="partitions"):
        home_partition(ZERO, 0)
    with pytest.raises(ValueError, match="member"):
        sequencing_partition([], 1024)


@pytest.mark.parametrize(("partition", "owner"), OWNER_VECTORS)
def test_rendezvous_owners_match_the_pinned_vectors(partition: int, owner: str) -> None:
    assert rendezvous_owner(partition, REPLICAS) == owner
    assert rendezvous_owner(partition, reversed(REPLICAS)) == owner


def test_the_rendezvous_score_is_the_first_eight_bytes_of_sha256_of_id_nul_partition() -> None:
    assert rendezvous_score(0, "replica-0") == 0xC5A2B569DCC3088D
    digest = hashlib.sha256(b"replica-1\x00" + (1023).to_bytes(4, "big")).digest()
    assert rendezvous_score(1023, "replica-1") == int.from_bytes(digest[:8], "big")


def test_no_replicas_means_no_owner() -> None:
    assert rendezvous_owner(3, []) is None


def test_assignment_names_every_replica_and_covers_each_partition_once() -> None:
    assigned = assignment(64, ["a", "b", "c", "d"])
    assert set(assigned) == {"a", "b", "c", "d"}
    every = [p for found in assigned.values() for p in found]
    assert sorted(every) == list(range(64))
    for replica, found in assigned.items():
        assert all(rendezvous_owner(p, "abcd") == replica for p in found)


@pytest.mark.parametrize("seed", range(5))
def test_removing_one_replica_moves_only_its_partitions(seed: int) -> None:
    rng = random.Random(seed)
    replicas = [f"pod-{rng.getrandbits(32):08x}" for _ in range(rng.randint(2, 9))]
    before = assignment(DEFAULT_PARTITIONS, replicas)
    gone = rng.choice(replicas)
    after = assignment(DEFAULT_PARTITIONS, [r for r in replicas if r != gone])
    assert gone not in after
    for replica in after:
        # Each survivor keeps everything it had and gains only some of the gone one's.
        assert before[replica] <= after[replica]
        assert after[replica] - before[replica] <= before[gone]
    assert set().union(*after.values()) == set(range(DEFAULT_PARTITIONS))


def test_a_replica_added_takes_partitions_only_for_itself() -> None:
    before = assignment(256, ["a", "b", "c"])
    after = assignment(256, ["a", "b", "c", "new"])
    for replica in ("a", "b", "c"):
        assert after[replica] <= before[replica]
    assert after["new"]

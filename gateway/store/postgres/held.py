"""The store seam of a cluster replica: a unit is written only as a partition held (cluster.md
§3.2, §3.3).

A replica hands a partition over by a `ReleasePartitions` unit in its own writer, after a
teardown that drops the partition's agents and conversations from memory. A call admitted
before the teardown may still submit a unit after the release unit; written, it would change
rows of a partition another replica may hold by then. `HeldPartitions` is what the writer
checks each unit against, in submission order:

- **Held** partitions are added when a claim commits (`claim`, called by the replica before
  any unit of the partition can be submitted) and removed by the release unit itself, when
  the writer reaches it, so every unit submitted after the release finds them gone.
- **A unit's scope** (`unit_scope`) is the set of partitions it writes as, by cluster.md
  §3.3's table, read from its writes: the agent's home partition for a home's write (token
  use, the intent insert, delivery state, inbox, `sends`, collective rows), the
  conversation's sequencing partition for a sequencer's write (the foundation and heads,
  records, pending-delivery inserts, intent completion, set-aside rows), nothing for an exempt
  one (the identity row and first token at registration, `replicas` and `partitions`).
  Reading the scope from the rows, rather than asking each submitter, keeps the engine's
  units and every caller of `Store.apply` as they are in every mode; the rows name the
  agents and conversations they touch.
- **Refused** (`PartitionNotHeld`, nothing written, the rest of the group commits): a unit
  with a partition of its scope not held, or claimed again after the unit was submitted
  (built from memory of an earlier holding, §3.2 "a claim builds state only from rows").

Only a cluster replica's store holds one, once the replica arms it (`PostgresStore.hold`):
embedded and network daemons and a cluster store no replica armed submit plain `UnitPlan`s
and the writer checks nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gateway.cluster.partitions import home_partition, sequencing_partition
from gateway.store import records
from gateway.store.errors import ConstraintViolation, PartitionNotHeld
from gateway.store.postgres.tables import UnitPlan

_HOME_WRITES = (
    records.PutToken,
    records.RevokeTokens,
    records.SetDeliveryState,
    records.PutInboxItem,
    records.AcknowledgeItem,
    records.ReplaceInboxItem,
    records.PutOperation,
    records.PutReceivedRequest,
    records.DeleteReceivedRequest,
    records.PutSend,
    records.BindSend,
    records.SetSendOutcome,
)
"""Writes of the agent's home (cluster.md §3.3), scoped by the home partition of the agent
whose row they write."""

_SEQUENCER_WRITES = (
    records.PutConversation,
    records.PutRecord,
    records.PutDelivery,
    records.SetAsideRow,
)
"""Writes of the conversation's sequencer (cluster.md §3.3, §5.4) besides the intent's
completion, scoped by the conversation's sequencing partition."""


@dataclass(frozen=True, slots=True)
class ScopedUnit:
    """A unit the writer checks before it runs: its plan, the partitions it writes as, the
    partitions it releases, and the claim generation current when it was submitted."""

    plan: UnitPlan
    scope: frozenset[int]
    releases: frozenset[int]
    generation: int


class HeldPartitions:
    """The partitions a cluster replica's writer may write as (module docstring).

    Changed only on the event loop: `claim` by the replica, `admit` by the writer as it
    reaches each unit of a group, in submission order."""

    def __init__(self, partitions: int) -> None:
        self._partitions = partitions
        self._held: dict[int, int] = {}
        """Each held partition and the claim generation that added it."""
        self._generation = 0

    def claim(self, partitions: Iterable[int]) -> None:
        """These partitions were claimed (or held when the seam was armed): units submitted
        from now on may write as them."""
        self._generation += 1
        for partition in partitions:
            self._held[partition] = self._generation

    def scoped(self, plan: UnitPlan, writes: Sequence[records.Write]) -> UnitPlan | ScopedUnit:
        """The unit to submit for `writes`: `plan` itself when it writes as no partition and
        releases none (nothing to check), else a `ScopedUnit` stamped with the current claim
        generation."""
        releases = frozenset(
            partition
            for write in writes
            if isinstance(write, records.ReleasePartitions)
            for partition in write.partitions
        )
        scope = unit_scope(writes, self._partitions)
        if not scope and not releases:
            return plan
        return ScopedUnit(plan=plan, scope=scope, releases=releases, generation=self._generation)

    def admit(self, unit: ScopedUnit) -> PartitionNotHeld | None:
        """The writer reached `unit`: None if it may run, else why it is refused. A release
        unit gives its partitions up here, so units after it are refused."""
        refused = tuple(
            sorted(
                partition
                for partition in unit.scope
                if self._held.get(partition, unit.generation + 1) > unit.generation
            )
        )
        for partition in unit.releases:
            self._held.pop(partition, None)
        return PartitionNotHeld(refused) if refused else None


def unit_scope(writes: Sequence[records.Write], partitions: int) -> frozenset[int]:
    """The partitions a unit writes as (cluster.md §3.3): the home partitions of the agents
    whose home rows it writes and the sequencing partitions of the conversations whose
    sequencer rows it writes; empty for an exempt unit.

    A unit that puts an identity is a registration: its first token is exempt with it. A
    conversation's sequencing partition is that of its members, whose conversation rows
    every sequencer unit, every foundation and every set-aside writes; an intent naming its
    sequencing partition stands in for them. A sequencer's write of a conversation the unit
    says no more of is left unscoped, and so is `RefuseIntent`, which names no conversation:
    a unit of refusals alone is written as no partition (it only moves intents still open to
    refused).

    Raises:
        ConstraintViolation: an agent id that is not an AgentId (it has no partition).
    """
    homes: set[str] = set()
    registered: set[str] = set()
    sequenced: set[str] = set()
    members: dict[str, list[str]] = {}
    named: dict[str, int] = {}
    for write in writes:
        if isinstance(write, _HOME_WRITES):
            homes.add(write.agent_id)
        elif isinstance(write, records.PutIntent):
            if write.seq_partition is not None:
                named[write.conversation_id] = write.seq_partition
            if write.state is records.IntentState.COMPLETED:
                sequenced.add(write.conversation_id)
            else:
                homes.add(write.agent_id)
        elif isinstance(write, _SEQUENCER_WRITES):
            sequenced.add(write.conversation_id)
            if isinstance(write, records.PutConversation | records.SetAsideRow):
                members.setdefault(write.conversation_id, []).append(write.agent_id)
        elif isinstance(write, records.PutIdentity):
            registered.add(write.agent_id)
    scope: set[int] = set()
    try:
        scope.update(home_partition(agent_id, partitions) for agent_id in homes - registered)
        for conversation_id in sequenced:
            if conversation_id in members:
                scope.add(sequencing_partition(members[conversation_id], partitions))
            elif conversation_id in named:
                scope.add(named[conversation_id])
    except ValueError as error:
        raise ConstraintViolation(f"no partition: {error}") from None
    return frozenset(scope)


__all__ = ["HeldPartitions", "ScopedUnit", "unit_scope"]

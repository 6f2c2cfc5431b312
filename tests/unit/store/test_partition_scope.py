"""Which partitions a cluster unit writes as, read from its writes (cluster.md §3.2, §3.3), and
how the held partitions admit it: a home's writes by the agent's home partition, a sequencer's
by the conversation's sequencing partition, registration and releases exempt."""

from __future__ import annotations

import pytest
from harness_contract.ids import RandomId

from gateway.cluster.partitions import home_partition, sequencing_partition
from gateway.store.errors import ConstraintViolation, PartitionNotHeld
from gateway.store.postgres.held import HeldPartitions, ScopedUnit, unit_scope
from gateway.store.postgres.tables import UnitPlan
from gateway.store.records import (
    AcknowledgeItem,
    BindSend,
    DeliveryState,
    IntentState,
    PutConversation,
    PutDelivery,
    PutIdentity,
    PutIntent,
    PutRecord,
    PutSend,
    PutToken,
    RefuseIntent,
    ReleasePartitions,
    RevokeTokens,
    SetAsideRow,
    SetDeliveryState,
    Write,
)

P = 1024


def agents_in_distinct_partitions(count: int) -> list[str]:
    found: dict[int, str] = {}
    while len(found) < count:
        agent_id = RandomId.AGENT.mint()
        found.setdefault(home_partition(agent_id, P), agent_id)
    return list(found.values())


A, B, C = agents_in_distinct_partitions(3)


def intent(author: str, state: IntentState, seq_partition: int | None = None) -> PutIntent:
    return PutIntent(
        agent_id=author,
        post_id="pst-1",
        conversation_id="cnv-1",
        bind_seq=1,
        intent=b"i",
        state=state,
        record_hash=None if state is IntentState.OPEN else "rh",
        bound_at=1.0,
        seq_partition=seq_partition,
        descriptor=None if seq_partition is None else b"d",
    )


def conversation(member: str) -> PutConversation:
    return PutConversation(
        agent_id=member,
        conversation_id="cnv-1",
        descriptor=b"d",
        membership_hash="m",
        anchor=b"a",
        anchor_hash="ah",
        head="rh",
        depth=1,
    )


def sequencer_unit(author: str, members: list[str]) -> list[Write]:
    """What a sequencer's unit writes for one post: at every member the record, the author's
    intent completed, a pending delivery to every other member, every member's head."""
    writes: list[Write] = []
    for member in members:
        writes.append(
            PutRecord(
                agent_id=member,
                record_hash="rh",
                conversation_id="cnv-1",
                depth=1,
                author=author,
                post_id="pst-1",
                record=b"{}",
                commit_seq=None,
            )
        )
        if member == author:
            writes.append(intent(author, IntentState.COMPLETED))
        else:
            writes.append(
                PutDelivery(
                    agent_id=member,
                    token=f"dlv-{member}",
                    conversation_id="cnv-1",
                    record_hash="rh",
                    commit_seq=None,
                    projection=b"{}",
                    state=DeliveryState.PENDING,
                )
            )
    writes.extend(conversation(member) for member in members)
    return writes


def test_a_bind_is_scoped_by_its_authors_home_partition():
    writes: list[Write] = [
        intent(A, IntentState.OPEN, seq_partition=home_partition(B, P)),
        BindSend(agent_id=A, key="k", bound=b"{}"),
    ]
    assert unit_scope(writes, P) == {home_partition(A, P)}


def test_a_sequencers_unit_is_scoped_by_its_conversations_sequencing_partition_alone():
    members = [A, B, C]
    scope = unit_scope(sequencer_unit(C, members), P)
    assert scope == {sequencing_partition(members, P)}


def test_a_set_aside_is_scoped_by_the_sequencer_and_refusals_alone_by_nothing():
    members = [A, B, C]
    set_aside: list[Write] = [
        SetAsideRow(agent_id=member, conversation_id="cnv-1", reason="why") for member in members
    ]
    refusals: list[Write] = [RefuseIntent(agent_id=B, post_id="pst-1")]
    assert unit_scope([*set_aside, *refusals], P) == {sequencing_partition(members, P)}
    assert unit_scope(refusals, P) == frozenset()


def test_a_bind_that_certifies_in_its_own_unit_needs_the_home_and_the_sequencer():
    writes = [intent(B, IntentState.OPEN, seq_partition=3), *sequencer_unit(B, [A, B])]
    assert unit_scope(writes, P) == {home_partition(B, P), sequencing_partition([A, B], P)}


def test_a_delivery_classified_and_an_acknowledgment_are_scoped_by_the_recipients_home():
    writes: list[Write] = [
        SetDeliveryState(agent_id=B, token="dlv-1", state=DeliveryState.CLASSIFIED),
        AcknowledgeItem(agent_id=B, token="dlv-0", tombstone=None),
    ]
    assert unit_scope(writes, P) == {home_partition(B, P)}


def test_registration_and_a_release_are_exempt_but_a_token_rotation_is_the_homes():
    registration: list[Write] = [
        PutIdentity(agent_id=A, agent_name="a", signed_card=b"{}", seed=b"s", created_at="t"),
        PutToken(token_digest="digest", agent_id=A, created_at="t"),
    ]
    release: list[Write] = [ReleasePartitions(partitions=(1, 2), replica_id="r", incarnation=1)]
    rotation: list[Write] = [
        RevokeTokens(agent_id=A),
        PutToken(token_digest="digest-2", agent_id=A, created_at="t"),
    ]
    assert unit_scope(registration, P) == frozenset()
    assert unit_scope(release, P) == frozenset()
    assert unit_scope(rotation, P) == {home_partition(A, P)}


def test_an_agent_id_with_no_partition_is_refused_before_it_is_queued():
    with pytest.raises(ConstraintViolation):
        unit_scope(
            [PutSend(agent_id="not-an-agent", key="k", request=b"{}", run_id="r", outcome=None)], P
        )


PLAN = UnitPlan(statements=(), bodies=())


def test_held_partitions_refuse_a_unit_after_a_release_and_one_submitted_before_a_claim():
    held = HeldPartitions(P)
    held.claim([1, 2])
    early = ScopedUnit(plan=PLAN, scope=frozenset({2}), releases=frozenset(), generation=1)
    release = ScopedUnit(plan=PLAN, scope=frozenset(), releases=frozenset({1}), generation=1)
    after = ScopedUnit(plan=PLAN, scope=frozenset({1, 2}), releases=frozenset(), generation=1)
    assert held.admit(early) is None
    assert held.admit(release) is None
    refused = held.admit(after)
    assert isinstance(refused, PartitionNotHeld)
    assert refused.partitions == (1,)
    assert str(refused) == "partition 1 is not held by this replica"
    built_before = ScopedUnit(plan=PLAN, scope=frozenset({1}), releases=frozenset(), generation=1)
    held.claim([1])
    refused = held.admit(built_before)
    assert refused is not None
    assert refused.partitions == (1,)
    assert (
        held.admit(ScopedUnit(plan=PLAN, scope=frozenset({1}), releases=frozenset(), generation=2))
        is None
    )


def test_a_unit_that_writes_as_no_partition_is_submitted_as_its_plan():
    held = HeldPartitions(P)
    exempt: list[Write] = [
        PutIdentity(agent_id=A, agent_name="a", signed_card=b"{}", seed=b"s", created_at="t")
    ]
    assert held.scoped(PLAN, exempt) is PLAN
    scoped = held.scoped(PLAN, [ReleasePartitions(partitions=(4,), replica_id="r", incarnation=1)])
    assert isinstance(scoped, ScopedUnit)
    assert scoped.releases == {4}

"""`fold_unit_into_bind`: a bind and the unit certifying its post in one commit write each row
once (engine.md §5.10 Atomic unit, rule 2)."""

from __future__ import annotations

from gateway.engine.local import fold_unit_into_bind
from gateway.store.records import (
    DeliveryState,
    IntentState,
    PutConversation,
    PutDelivery,
    PutIntent,
    Write,
)


def intent(state: IntentState, **extra: object) -> PutIntent:
    return PutIntent(
        agent_id="a",
        post_id="p1",
        conversation_id="c1",
        bind_seq=1,
        intent=b"{}",
        state=state,
        record_hash=None if state is IntentState.OPEN else "r1",
        bound_at=1.0,
        **extra,  # type: ignore[arg-type]
    )


def conversation(
    agent: str, head: str | None, depth: int, moved_from: int | None
) -> PutConversation:
    return PutConversation(
        agent_id=agent,
        conversation_id="c1",
        descriptor=b"d",
        membership_hash="m",
        anchor=b"a",
        anchor_hash="ah",
        head=head,
        depth=depth,
        moved_from=moved_from,
    )


def delivery() -> PutDelivery:
    return PutDelivery(
        agent_id="b",
        token="t1",
        conversation_id="c1",
        record_hash="r1",
        commit_seq=1,
        projection=b"{}",
        state=DeliveryState.PENDING,
    )


def test_the_completed_intent_and_the_moved_heads_replace_the_open_intent_and_the_foundation() -> (
    None
):
    bind: list[Write] = [
        conversation("a", None, 0, None),
        conversation("b", None, 0, None),
        intent(IntentState.OPEN),
    ]
    unit: list[Write] = [
        intent(IntentState.COMPLETED),
        delivery(),
        conversation("a", "r1", 1, None),
        conversation("b", "r1", 1, None),
    ]

    folded = fold_unit_into_bind(bind, unit)

    assert folded == [
        conversation("a", "r1", 1, None),
        conversation("b", "r1", 1, None),
        intent(IntentState.COMPLETED),
        delivery(),
    ]


def test_a_cluster_fold_keeps_the_binds_conditions_and_drops_the_open_guard() -> None:
    bind: list[Write] = [conversation("a", None, 0, 0), intent(IntentState.OPEN, seq_partition=7)]
    unit: list[Write] = [
        intent(IntentState.COMPLETED, from_open=True),
        conversation("a", "r1", 1, 0),
    ]

    folded = fold_unit_into_bind(bind, unit)

    assert folded == [
        conversation("a", "r1", 1, 0),
        intent(IntentState.COMPLETED, seq_partition=7),
    ]


def test_writes_of_other_rows_are_appended_in_order() -> None:
    bind: list[Write] = [intent(IntentState.OPEN)]
    unit: list[Write] = [delivery(), conversation("a", "r1", 5, None)]

    assert fold_unit_into_bind(bind, unit) == [intent(IntentState.OPEN), *unit]

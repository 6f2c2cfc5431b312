"""The requester's side of the collectives through their seams (collectives.md §1-§4): a
gather or all_gather asked through a fake `PostingPort`, answers counted as the endpoint's
classification hands them over, and deadlines passed by advancing a `FakeClock`."""

from __future__ import annotations

import asyncio

import pytest
from harness_contract.addresses import group_address
from harness_contract.collective_part import ClosePart, read_collective
from harness_contract.errors import (
    CollectiveError,
    MembersUnreachable,
    RequestNone,
    SendError,
    SendErrorReason,
    UnreachableMember,
)
from harness_contract.ids import HashId
from harness_contract.values import (
    Answered,
    CollectiveOp,
    CollectiveResultItem,
    Decline,
    Declined,
    Invalid,
    MemberResult,
    NoAnswer,
    OperationFailedItem,
)

from gateway.collectives.port import CollectiveRefusal
from gateway.collectives.runtime import Collectives
from tests.support import eventually
from tests.unit.collectives.fakes import Agent, agent, answer, ask, cards_of, results, settle

THIRTY_DAYS = 2_592_000


@pytest.fixture
async def alice() -> Agent:
    return agent("alice", await cards_of("alice", "bob", "carol", "dave"))


async def test_a_gather_completes_with_every_answer_once_each_member_has_answered(alice):
    operation_id = await ask(alice, CollectiveOp.GATHER, "group:bob,carol")
    assert alice.collectives.open_counts() == {"gather": 1, "all_gather": 0}
    assert len(alice.posting.posts) == 2  # one direct request post per member

    first = answer(alice, operation_id, "bob", slot="tue")
    assert first.consumed == "answer"
    assert first.published == ()
    last = answer(alice, operation_id, "carol", slot=None)

    assert last.published == ("collectiveResult",)
    [item] = alice.posting.item_of(last.writes)
    assert item == CollectiveResultItem(
        op=CollectiveOp.GATHER,
        id=operation_id,
        to=group_address(["alice", "bob", "carol"]),
        question="when?",
        outcomes=(
            MemberResult(member="agent:bob", outcome=Answered(content={"slot": "tue"})),
            MemberResult(member="agent:carol", outcome=Declined()),
        ),
    )
    assert alice.collectives.open_counts() == {"gather": 0, "all_gather": 0}
    assert alice.outcomes.results == [("gather", "settled")]
    assert alice.outcomes.members == [("gather", "answered"), ("gather", "declined")]


async def test_a_gather_completes_at_its_deadline_with_no_answer_for_a_silent_member(alice):
    operation_id = await ask(alice, CollectiveOp.GATHER, "group:bob,carol", deadline=60)
    answer(alice, operation_id, "bob")
    alice.clock.advance(59)
    await settle()
    assert results(alice) == []

    alice.clock.advance(1)
    [result] = await eventually(lambda: asyncio.sleep(0, results(alice)))

    assert [member.outcome for member in result.outcomes] == [
        Answered(content={"slot": "mon"}),
        NoAnswer(),
    ]
    assert alice.outcomes.results == [("gather", "deadline")]
    assert alice.posting.published_kinds == ["collectiveResult"]


async def test_a_thirty_day_deadline_completes_as_soon_as_the_clock_passes_it(alice):
    await ask(alice, CollectiveOp.GATHER, "agent:bob", deadline=THIRTY_DAYS)
    alice.clock.advance(THIRTY_DAYS - 1)
    await settle()
    assert results(alice) == []

    alice.clock.advance(1)
    [result] = await eventually(lambda: asyncio.sleep(0, results(alice)))
    assert result.outcomes == (MemberResult(member="agent:bob", outcome=NoAnswer()),)


async def test_a_gather_whose_members_are_all_unknown_is_refused_before_anything_is_posted():
    alice = agent("alice", await cards_of("alice"))
    with pytest.raises(CollectiveRefusal) as refused:
        await ask(alice, CollectiveOp.GATHER, "group:bob,carol")

    error = refused.value.error
    assert isinstance(error, CollectiveError)
    assert error.failure == MembersUnreachable(
        members=(
            UnreachableMember(member="agent:bob", reason=SendErrorReason.UNKNOWN_AGENT),
            UnreachableMember(member="agent:carol", reason=SendErrorReason.UNKNOWN_AGENT),
        )
    )
    assert refused.value.operation_id == error.id
    assert refused.value.to == group_address(["alice", "bob", "carol"])
    assert alice.posting.posts == []
    assert alice.collectives.open_counts() == {"gather": 0, "all_gather": 0}


async def test_a_gather_whose_every_request_post_is_refused_leaves_nothing_open(alice):
    alice.posting.bind_failure = SendError(SendErrorReason.PERSISTENCE_FAILED)
    with pytest.raises(CollectiveRefusal) as refused:
        await ask(alice, CollectiveOp.GATHER, "group:bob,carol")

    error = refused.value.error
    assert isinstance(error, CollectiveError)
    assert isinstance(error.failure, MembersUnreachable)
    assert {member.reason for member in error.failure.members} == {
        SendErrorReason.PERSISTENCE_FAILED
    }
    assert alice.collectives.open_counts() == {"gather": 0, "all_gather": 0}
    assert alice.clock.sleepers == 0  # its deadline timer was stopped


async def test_a_gather_with_one_member_unreachable_still_asks_the_others(alice):
    alice.posting.refusals["carol"] = SendError(SendErrorReason.NETWORK_UNAVAILABLE)
    operation_id = await ask(alice, CollectiveOp.GATHER, "group:bob,carol")

    assert len(alice.posting.posts) == 1
    done = answer(alice, operation_id, "bob")
    [item] = alice.posting.item_of(done.writes)
    assert isinstance(item, CollectiveResultItem)
    assert [member.outcome for member in item.outcomes] == [
        Answered(content={"slot": "mon"}),
        NoAnswer(),
    ]


@pytest.mark.parametrize("deadline", [0, THIRTY_DAYS + 1])
async def test_a_deadline_outside_one_second_to_thirty_days_is_refused_content_invalid(
    alice, deadline
):
    with pytest.raises(CollectiveRefusal) as refused:
        await ask(alice, CollectiveOp.GATHER, "agent:bob", deadline=deadline)
    error = refused.value.error
    assert isinstance(error, SendError)
    assert error.send_reason is SendErrorReason.CONTENT_INVALID


async def test_an_all_gather_to_a_direct_conversation_is_refused_membership_invalid(alice):
    with pytest.raises(CollectiveRefusal) as refused:
        await ask(alice, CollectiveOp.ALL_GATHER, "agent:bob")
    error = refused.value.error
    assert isinstance(error, SendError)
    assert error.send_reason is SendErrorReason.MEMBERSHIP_INVALID


async def test_only_a_members_first_answer_in_its_own_conversation_counts(alice):
    operation_id = await ask(alice, CollectiveOp.GATHER, "group:bob,carol")
    answer(alice, operation_id, "bob", slot="tue")
    again = answer(alice, operation_id, "bob", slot="mon")
    elsewhere = answer(alice, operation_id, "carol", to=group_address(["alice", "bob", "carol"]))
    stranger = answer(alice, operation_id, "dave")

    assert again.writes == elsewhere.writes == stranger.writes == ()
    assert alice.collectives.open_counts() == {"gather": 1, "all_gather": 0}
    done = answer(alice, operation_id, "carol")
    [item] = alice.posting.item_of(done.writes)
    assert isinstance(item, CollectiveResultItem)
    assert item.outcomes[0].outcome == Answered(content={"slot": "tue"})


async def test_an_answer_outside_the_form_counts_as_invalid(alice):
    operation_id = await ask(alice, CollectiveOp.GATHER, "agent:bob")
    done = answer(alice, operation_id, "bob", slot="sun")
    [item] = alice.posting.item_of(done.writes)
    assert isinstance(item, CollectiveResultItem)
    assert isinstance(item.outcomes[0].outcome, Invalid)
    assert alice.outcomes.members == [("gather", "invalid")]


async def test_an_all_gather_shares_its_close_and_emits_the_result_once_the_close_certifies(
    alice,
):
    group = group_address(["alice", "bob", "carol"])
    operation_id = await ask(alice, CollectiveOp.ALL_GATHER, "group:bob,carol")
    [request] = alice.posting.posts
    alice.posting.auto_certify = False

    answer(alice, operation_id, "bob", to=group)
    answer(alice, operation_id, "carol", to=group, slot=None)
    close = await eventually(lambda: asyncio.sleep(0, alice.posting.posts[1:]))
    [posted] = close
    assert posted.descriptor == request.descriptor
    assert read_collective(posted.content).part == ClosePart(
        id=operation_id, included=(HashId.RECORD.of("bob"), HashId.RECORD.of("carol"))
    )
    assert results(alice) == []

    alice.posting.certify(posted.handle.post_id)
    [result] = await eventually(lambda: asyncio.sleep(0, results(alice)))
    assert [member.outcome for member in result.outcomes] == [
        Answered(content={"slot": "mon"}),
        Declined(),
    ]
    assert alice.outcomes.results == [("all_gather", "settled")]


async def test_an_all_gather_whose_close_cannot_be_bound_reports_operation_failed(alice):
    group = group_address(["alice", "bob", "carol"])
    operation_id = await ask(alice, CollectiveOp.ALL_GATHER, "group:bob,carol")
    alice.posting.bind_failure = SendError(SendErrorReason.NETWORK_UNAVAILABLE)

    answer(alice, operation_id, "bob", to=group)
    answer(alice, operation_id, "carol", to=group)
    [failed] = await eventually(lambda: asyncio.sleep(0, alice.posting.committed_items()))

    assert isinstance(failed, OperationFailedItem)
    assert failed.id == operation_id
    assert failed.to == group
    assert failed.error.startswith(
        "all_gather failed: the result could not be shared with the group: "
    )
    assert alice.outcomes.results == [("all_gather", "failed")]
    assert alice.posting.published_kinds == ["operationFailed"]


async def test_a_gather_whose_every_request_post_a_sequencer_refused_is_refused_unreachable(
    alice,
):
    alice.posting.auto_certify = False
    asked = asyncio.ensure_future(ask(alice, CollectiveOp.GATHER, "group:bob,carol"))
    posts = await eventually(lambda: asyncio.sleep(0, alice.posting.posts), lambda p: len(p) == 2)
    for posted in posts:
        alice.posting.refuse(posted.handle.post_id)
    with pytest.raises(CollectiveRefusal) as refused:
        await asked

    error = refused.value.error
    assert isinstance(error, CollectiveError)
    assert isinstance(error.failure, MembersUnreachable)
    assert {member.reason for member in error.failure.members} == {
        SendErrorReason.CERTIFICATION_UNAVAILABLE
    }
    assert alice.collectives.open_counts() == {"gather": 0, "all_gather": 0}


async def test_a_gather_member_whose_request_post_was_refused_counts_as_no_answer(alice):
    alice.posting.auto_certify = False
    asked = asyncio.ensure_future(ask(alice, CollectiveOp.GATHER, "group:bob,carol"))
    to_bob, to_carol = await eventually(
        lambda: asyncio.sleep(0, alice.posting.posts), lambda p: len(p) == 2
    )
    alice.posting.certify(to_bob.handle.post_id)
    alice.posting.refuse(to_carol.handle.post_id)
    operation_id = await asked

    done = answer(alice, operation_id, "bob")
    [item] = alice.posting.item_of(done.writes)
    assert isinstance(item, CollectiveResultItem)
    assert [member.outcome for member in item.outcomes] == [
        Answered(content={"slot": "mon"}),
        NoAnswer(),
    ]


async def test_an_all_gather_whose_close_a_sequencer_refused_reports_operation_failed(alice):
    group = group_address(["alice", "bob", "carol"])
    operation_id = await ask(alice, CollectiveOp.ALL_GATHER, "group:bob,carol")
    alice.posting.auto_certify = False

    answer(alice, operation_id, "bob", to=group)
    answer(alice, operation_id, "carol", to=group)
    [close] = await eventually(lambda: asyncio.sleep(0, alice.posting.posts[1:]))
    alice.posting.refuse(close.handle.post_id)
    [failed] = await eventually(lambda: asyncio.sleep(0, alice.posting.committed_items()))

    assert isinstance(failed, OperationFailedItem)
    assert failed.id == operation_id
    assert alice.outcomes.results == [("all_gather", "failed")]
    assert results(alice) == []


async def test_a_restored_open_operation_completes_at_its_deadline_after_a_restart(alice):
    operation_id = await ask(alice, CollectiveOp.GATHER, "group:bob,carol", deadline=600)
    # The endpoint commits what classification wrote: the counted answer is in the row.
    await alice.posting.commit(answer(alice, operation_id, "bob").writes)
    await alice.collectives.close()

    restarted = Collectives(
        alice.posting,
        agent_name="alice",
        agent_id=alice.posting.me.card.agent_id,
        clock=alice.clock,
    )
    restarted.restore(alice.posting.operation_rows(), [])
    await restarted.resume()
    assert restarted.open_counts() == {"gather": 1, "all_gather": 0}
    try:
        alice.clock.advance(600)
        [result] = await eventually(lambda: asyncio.sleep(0, results(alice)))
    finally:
        await restarted.close()
    assert result.id == operation_id
    assert [member.outcome for member in result.outcomes] == [
        Answered(content={"slot": "mon"}),
        NoAnswer(),
    ]


async def test_an_undecodable_stored_row_is_skipped_at_restore(alice):
    restarted = Collectives(alice.posting, agent_name="alice", agent_id="id", clock=alice.clock)
    restarted.restore([b"not a row"], [b"{}"])
    await restarted.resume()
    assert restarted.open_counts() == {"gather": 0, "all_gather": 0}


async def test_closing_stops_every_deadline_timer(alice):
    await ask(alice, CollectiveOp.GATHER, "agent:bob")
    await ask(alice, CollectiveOp.ALL_GATHER, "group:bob,carol")
    await settle()
    assert alice.clock.sleepers == 2

    await alice.collectives.close()

    assert alice.clock.sleepers == 0


@pytest.mark.parametrize(
    ("op", "to", "answered_at"),
    [
        (CollectiveOp.GATHER, "group:bob,carol", "agent:bob"),
        (CollectiveOp.ALL_GATHER, "group:bob,carol", "group:alice,bob,carol"),
    ],
)
async def test_the_asker_answering_its_own_question_is_told_it_is_its_own(
    alice, op, to, answered_at
):
    await ask(alice, op, to)
    with pytest.raises(CollectiveRefusal) as own:
        await alice.collectives.responder.answer(to=answered_at, response=Decline())
    assert isinstance(own.value.error, CollectiveError)
    assert own.value.error.failure == RequestNone(own_question=True)
    # Where alice asked nothing, nothing is open, as before.
    with pytest.raises(CollectiveRefusal) as none_open:
        await alice.collectives.responder.answer(to="agent:dave", response=Decline())
    assert isinstance(none_open.value.error, CollectiveError)
    assert none_open.value.error.failure == RequestNone()
    # Past its deadline the question is no longer open.
    alice.clock.advance(THIRTY_DAYS + 1)
    with pytest.raises(CollectiveRefusal) as expired:
        await alice.collectives.responder.answer(to=answered_at, response=Decline())
    assert isinstance(expired.value.error, CollectiveError)
    assert expired.value.error.failure == RequestNone()

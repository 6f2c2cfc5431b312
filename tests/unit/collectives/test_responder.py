"""The member's side of the collectives through their seams (collectives.md §1.5, §2.5, §3.1,
§4.3): received requests classified, answered once, and all_gather closes applied, on a fake
`PostingPort` and a `FakeClock`."""

from __future__ import annotations

import asyncio

import pytest
from harness_contract.addresses import group_address
from harness_contract.collective_part import (
    ClosePart,
    RequestPart,
    ResponsePart,
    read_collective,
)
from harness_contract.errors import (
    AnswerInvalid,
    CollectiveError,
    CollectiveFailure,
    RequestAmbiguous,
    RequestAnswered,
    RequestExpired,
    RequestNone,
    SendError,
    SendErrorReason,
)
from harness_contract.ids import HashId, RandomId, mint_collective
from harness_contract.values import (
    Accept,
    Answered,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    Decline,
    MemberResult,
    NoAnswer,
)

from gateway.collectives.port import CollectiveRefusal
from gateway.collectives.runtime import Collectives
from gateway.collectives.state import Request, RequestState
from gateway.engine import protocol as p
from gateway.store.records import DeleteReceivedRequest, PutReceivedRequest
from tests.support import eventually
from tests.unit.collectives.fakes import SCHEMA, Agent, agent, cards_of

HOUR_MS = 3_600_000
GROUP = group_address(["alice", "bob", "carol"])


class Bob:
    """bob, an asked member, and the conversations alice asks him in."""

    def __init__(self, member: Agent, cards: dict[str, p.SignedAgentCard]) -> None:
        self.member = member
        self.direct = member.posting.membership_with([cards["alice"]])
        self.group = member.posting.membership_with([cards["alice"], cards["carol"]])

    @property
    def collectives(self) -> Collectives:
        return self.member.collectives

    def now_ms(self) -> int:
        return int(self.member.clock.time() * 1000)

    def receive(
        self,
        op: CollectiveOp = CollectiveOp.GATHER,
        *,
        deadline_ms: int = 60_000,
        requester: str = "alice",
        sender: str = "alice",
    ):
        """Classify a request `sender` posted (its id minted for `requester`)."""
        nonce, operation_id = mint_collective(f"agent:{requester}")
        part = RequestPart(
            op=op,
            id=operation_id,
            nonce=nonce,
            deadline_at=self.now_ms() + deadline_ms,
            requested_schema=SCHEMA,
        )
        gather = op is CollectiveOp.GATHER
        return self.collectives.responder.classify_request(
            part,
            sender=sender,
            conversation_id=(self.direct if gather else self.group).conversation_id,
            conversation_address=f"agent:{sender}" if gather else GROUP,
            group_members=None if gather else ("alice", "bob", "carol"),
            post_id=RandomId.POST.mint(),
            question="when?",
        )

    async def answer(self, to: str = "agent:alice", slot: str | None = "mon") -> str:
        response = Decline() if slot is None else Accept(content={"slot": slot})
        return await self.collectives.responder.answer(to=to, response=response)


@pytest.fixture
async def bob() -> Bob:
    cards = await cards_of("alice", "bob", "carol")
    return Bob(agent("bob", cards), cards)


async def refused(answering) -> CollectiveFailure | SendError:
    with pytest.raises(CollectiveRefusal) as refusal:
        await answering
    error = refusal.value.error
    return error.failure if isinstance(error, CollectiveError) else error  # type: ignore[return-value]


def stored_requests(bob: Bob) -> dict[str, Request]:
    return {
        request.id: request for request in map(Request.from_row, bob.member.posting.request_rows())
    }


async def test_a_received_request_is_recorded_and_delivered_as_a_collective_request(bob):
    classified = bob.receive()

    assert isinstance(classified.item, CollectiveRequestItem)
    assert classified.item.op is CollectiveOp.GATHER
    assert classified.item.sender == "agent:alice"
    assert classified.item.to == "agent:alice"
    assert classified.item.question == "when?"
    assert [type(write) for write in classified.writes] == [PutReceivedRequest]


@pytest.mark.parametrize(
    ("case", "kwargs"),
    [
        ("an id minted for another requester", {"requester": "carol"}),
        (
            "a deadline more than thirty days and an hour away",
            {"deadline_ms": 2_592_001_000 + HOUR_MS},
        ),
        ("a gather first seen after its deadline", {"deadline_ms": 0}),
        (
            "an all_gather first seen an hour after its deadline",
            {"op": CollectiveOp.ALL_GATHER, "deadline_ms": -HOUR_MS},
        ),
    ],
)
async def test_a_request_that_cannot_be_answered_is_consumed_and_never_delivered(bob, case, kwargs):
    classified = bob.receive(**kwargs)
    assert classified.item is None, case
    assert classified.consumed == "other"
    assert classified.writes == ()


async def test_an_all_gather_request_first_seen_after_its_deadline_is_kept_for_its_close(bob):
    classified = bob.receive(CollectiveOp.ALL_GATHER, deadline_ms=-1)
    assert classified.item is None
    assert classified.consumed == "other"
    assert [type(write) for write in classified.writes] == [PutReceivedRequest]


async def test_a_request_seen_a_second_time_is_consumed(bob):
    nonce, operation_id = mint_collective("agent:alice")
    part = RequestPart(
        op=CollectiveOp.GATHER,
        id=operation_id,
        nonce=nonce,
        deadline_at=bob.now_ms() + 60_000,
        requested_schema=SCHEMA,
    )
    first, second = (
        bob.collectives.responder.classify_request(
            part,
            sender="alice",
            conversation_id=bob.direct.conversation_id,
            conversation_address="agent:alice",
            group_members=None,
            post_id=RandomId.POST.mint(),
            question="when?",
        )
        for _ in range(2)
    )
    assert first.item is not None
    assert second.item is None
    assert second.consumed == "other"


async def test_an_answer_is_posted_once_and_a_second_answer_is_refused_request_answered(bob):
    bob.receive()
    operation_id = await bob.answer(slot="tue")

    [posted] = bob.member.posting.posts
    assert posted.descriptor == bob.direct
    assert read_collective(posted.content).part == ResponsePart(
        id=operation_id, content={"slot": "tue"}
    )
    assert stored_requests(bob)[operation_id].state is RequestState.ANSWERED
    assert await refused(bob.answer()) == RequestAnswered()


async def test_an_answer_outside_the_form_is_refused_and_the_request_stays_open(bob):
    bob.receive()
    failure = await refused(bob.answer(slot="sun"))
    assert isinstance(failure, AnswerInvalid)
    assert bob.member.posting.posts == []

    assert await bob.answer(slot=None)  # a decline always fits


async def test_an_answer_where_no_request_is_open_is_refused_request_none(bob):
    assert await refused(bob.answer()) == RequestNone()


async def test_an_answer_after_the_deadline_is_refused_request_expired(bob):
    bob.receive(deadline_ms=60_000)
    bob.member.clock.advance(60)
    assert await refused(bob.answer()) == RequestExpired()


async def test_two_requests_open_in_one_conversation_make_an_answer_ambiguous(bob):
    bob.receive()
    bob.receive()
    assert await refused(bob.answer()) == RequestAmbiguous()


async def test_an_answer_whose_post_is_refused_reopens_the_request(bob):
    bob.receive()
    bob.member.posting.bind_failure = SendError(SendErrorReason.NETWORK_UNAVAILABLE)
    failure = await refused(bob.answer())
    assert isinstance(failure, SendError)
    assert failure.send_reason is SendErrorReason.NETWORK_UNAVAILABLE

    bob.member.posting.bind_failure = None
    assert await bob.answer()


async def test_an_answer_whose_post_a_sequencer_refused_reopens_the_request(bob):
    bob.receive()
    bob.member.posting.auto_refuse = True
    failure = await refused(bob.answer())
    assert isinstance(failure, SendError)
    assert failure.send_reason is SendErrorReason.CERTIFICATION_UNAVAILABLE
    assert [request.state for request in stored_requests(bob).values()] == [RequestState.OPEN]

    bob.member.posting.auto_refuse = False
    assert await bob.answer()


async def test_an_answer_refused_after_its_send_gave_up_reopens_the_request(bob):
    bob.receive()
    bob.member.posting.auto_certify = False
    failure = await refused(bob.answer())
    assert isinstance(failure, SendError)
    assert failure.send_reason is SendErrorReason.DELIVERY_PENDING

    [posted] = bob.member.posting.posts
    bob.member.posting.refuse(posted.handle.post_id)
    await eventually(
        lambda: asyncio.sleep(0, list(stored_requests(bob).values())),
        lambda requests: requests[0].state is RequestState.OPEN,
    )
    bob.member.posting.auto_certify = True
    assert await bob.answer()
    await bob.collectives.close()


async def test_an_answer_still_certifying_keeps_its_request_claimed_until_it_certifies(bob):
    bob.receive()
    bob.member.posting.auto_certify = False
    failure = await refused(bob.answer())
    assert isinstance(failure, SendError)
    assert failure.send_reason is SendErrorReason.DELIVERY_PENDING
    assert await refused(bob.answer()) == RequestAnswered()

    [posted] = bob.member.posting.posts
    bob.member.posting.certify(posted.handle.post_id)
    answered = await eventually(
        lambda: asyncio.sleep(0, list(stored_requests(bob).values())),
        lambda requests: requests[0].state is RequestState.ANSWERED,
    )
    assert answered[0].answer_post_id == posted.handle.post_id
    await bob.collectives.close()


async def test_an_all_gather_member_emits_the_result_its_requesters_close_lists(bob):
    request = bob.receive(CollectiveOp.ALL_GATHER)
    assert isinstance(request.item, CollectiveRequestItem)
    operation_id = request.item.id
    carol_hash = HashId.RECORD.of("carol's answer")
    recorded = bob.collectives.classify_response(
        ResponsePart(id=operation_id, content={"slot": "tue"}),
        sender="carol",
        conversation_address=GROUP,
        is_group=True,
        record_hash=carol_hash,
    )
    assert recorded.consumed == "answer"
    assert [type(write) for write in recorded.writes] == [PutReceivedRequest]
    await bob.answer(to=GROUP, slot="mon")
    bob_hash = bob.member.posting.posts[0].handle.certified.result()

    closed = bob.collectives.responder.classify_close(
        ClosePart(id=operation_id, included=(bob_hash, carol_hash)),
        sender="alice",
        conversation_id=bob.group.conversation_id,
    )

    assert closed.consumed == "close"
    assert closed.published == ("collectiveResult",)
    [item] = bob.member.posting.item_of(closed.writes)
    assert item == CollectiveResultItem(
        op=CollectiveOp.ALL_GATHER,
        id=operation_id,
        to=GROUP,
        question="when?",
        outcomes=(
            MemberResult(member="agent:bob", outcome=Answered(content={"slot": "mon"})),
            MemberResult(member="agent:carol", outcome=Answered(content={"slot": "tue"})),
        ),
    )


async def test_a_close_not_from_the_requester_is_consumed_without_effect(bob):
    request = bob.receive(CollectiveOp.ALL_GATHER)
    assert request.item is not None
    closed = bob.collectives.responder.classify_close(
        ClosePart(id=request.item.id, included=()),
        sender="carol",
        conversation_id=bob.group.conversation_id,
    )
    assert closed.consumed == "close"
    assert closed.writes == ()


async def test_a_close_that_lists_the_members_own_uncertified_answer_waits_for_it(bob):
    request = bob.receive(CollectiveOp.ALL_GATHER)
    assert request.item is not None
    bob.member.posting.auto_certify = False
    await refused(bob.answer(to=GROUP))  # delivery-pending: still certifying
    [posted] = bob.member.posting.posts
    own_hash = HashId.RECORD.of("bob's answer")

    held = bob.collectives.responder.classify_close(
        ClosePart(id=request.item.id, included=(own_hash,)),
        sender="alice",
        conversation_id=bob.group.conversation_id,
    )
    assert held.published == ()
    bob.member.posting.certify(posted.handle.post_id, own_hash)

    [item] = await eventually(lambda: asyncio.sleep(0, bob.member.posting.committed_items()))
    assert isinstance(item, CollectiveResultItem)
    assert item.outcomes == (
        MemberResult(member="agent:bob", outcome=Answered(content={"slot": "mon"})),
        MemberResult(member="agent:carol", outcome=NoAnswer()),
    )
    assert bob.member.posting.published_kinds == ["collectiveResult"]


async def test_requests_an_hour_past_their_deadline_are_purged_at_the_next_request(bob):
    first = bob.receive(deadline_ms=1_000)
    assert first.item is not None
    bob.member.clock.advance(1 + HOUR_MS / 1000)

    second = bob.receive()

    assert (
        DeleteReceivedRequest(
            agent_id=bob.member.posting.me.card.agent_id, operation_id=first.item.id
        )
        in second.writes
    )


async def test_an_answer_that_certified_while_the_daemon_was_down_is_settled_at_resume(bob):
    classified = bob.receive()
    await bob.member.posting.commit(classified.writes)
    bob.member.posting.auto_certify = False
    await refused(bob.answer())
    await bob.collectives.close()
    [posted] = bob.member.posting.posts
    bob.member.posting.completed[posted.handle.post_id] = HashId.RECORD.of("answer")

    restarted = Collectives(
        bob.member.posting,
        agent_name="bob",
        agent_id=bob.member.posting.me.card.agent_id,
        clock=bob.member.clock,
    )
    restarted.restore([], bob.member.posting.request_rows())
    await restarted.resume()
    try:
        await eventually(
            lambda: asyncio.sleep(0, list(stored_requests(bob).values())),
            lambda requests: requests[0].state is RequestState.ANSWERED,
        )
    finally:
        await restarted.close()

"""The collectives' durable rows and how an answer counts (collectives.md §4.7, §6.4)."""

from __future__ import annotations

import pytest
from harness_contract.codec import CodecError
from harness_contract.ids import HashId
from harness_contract.kinds import CollectiveEnd
from harness_contract.values import Answered, CollectiveOp, Declined, Invalid

from gateway.collectives.state import (
    Operation,
    OperationState,
    RecordedAnswer,
    Request,
    RequestState,
    judge,
)
from tests.unit.collectives.fakes import SCHEMA


def test_an_operation_row_reads_back_as_the_operation_it_was_written_from():
    operation = Operation(
        op=CollectiveOp.ALL_GATHER,
        id="col_x",
        to="group:alice,bob,carol",
        question="when?",
        schema=dict(SCHEMA),
        deadline_at=1_700_000_060_000,
        members=("bob", "carol"),
        conversation_id="cnv_x",
        post_ids={"": "pst_x"},
        outcomes={"bob": Answered(content={"slot": "mon"}), "carol": Declined()},
        answer_hashes={"bob": HashId.RECORD.of("bob")},
        requests_settled=True,
        state=OperationState.CLOSING,
        close_post_id="pst_close",
        end=CollectiveEnd.SETTLED,
    )
    assert Operation.from_row(operation.to_row()).to_row() == operation.to_row()


def test_a_request_row_reads_back_as_the_request_it_was_written_from():
    request = Request(
        op=CollectiveOp.ALL_GATHER,
        id="col_x",
        post_id="pst_x",
        requester="alice",
        to="group:alice,bob,carol",
        conversation_id="cnv_x",
        question="when?",
        schema=dict(SCHEMA),
        deadline_at=1_700_000_060_000,
        members=("bob", "carol"),
        state=RequestState.SENDING,
        answer_post_id="pst_answer",
        answer_content={"slot": "tue"},
        answers={"carol": RecordedAnswer(record_hash=HashId.RECORD.of("carol"), content=None)},
        held_close=(HashId.RECORD.of("carol"),),
    )
    assert Request.from_row(request.to_row()).to_row() == request.to_row()


@pytest.mark.parametrize("row", [b"", b"[]", b'{"v":2}', b'{"v":1}'])
def test_a_row_of_another_shape_or_version_does_not_decode(row):
    with pytest.raises(CodecError):
        Operation.from_row(row)
    with pytest.raises(CodecError):
        Request.from_row(row)


def test_an_answer_counts_as_declined_answered_or_invalid_against_the_form():
    assert judge(dict(SCHEMA), None) == Declined()
    assert judge(dict(SCHEMA), {"slot": "mon"}) == Answered(content={"slot": "mon"})
    assert isinstance(judge(dict(SCHEMA), {"slot": "sun"}), Invalid)

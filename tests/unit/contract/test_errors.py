from __future__ import annotations

import pytest
from harness_contract.errors import (
    AnswerFieldIssue,
    AnswerFieldReason,
    AnswerInvalid,
    CollectiveError,
    CollectiveErrorKind,
    ConnectError,
    ConnectErrorReason,
    DeliveryAcknowledgeError,
    DeliveryAcknowledgeErrorReason,
    FirewallRefusal,
    FirewallSendError,
    IdempotencyConflictError,
    ListenError,
    ListenErrorReason,
    MembersUnreachable,
    MessageTextError,
    MessageTextOperation,
    RequestAmbiguous,
    RequestAnswered,
    RequestExpired,
    RequestNone,
    SchemaInvalid,
    SendError,
    SendErrorReason,
    StatusCode,
    UnreachableMember,
)
from harness_contract.guidance import CheckedGuidance

CONTRACT_SEND_REASONS = {
    "invalid-address",
    "unknown-agent",
    "membership-invalid",
    "content-invalid",
    "not-registered",
    "version-mismatch",
    "certification-unavailable",
    "persistence-failed",
    "network-unavailable",
    "delivery-pending",
    "outcome-unknown",
}

GATEWAY_SEND_REASONS = {"too-many-operations"}
"""The gateway's extensions of the contract's `SendError` reasons."""


def test_send_error_reasons_are_the_eleven_of_the_contract_and_the_gateways_extension():
    assert {reason.value for reason in SendErrorReason} == (
        CONTRACT_SEND_REASONS | GATEWAY_SEND_REASONS
    )


def test_every_send_reason_has_a_text_a_clause_and_a_status_code():
    for reason in SendErrorReason:
        assert reason.message_text
        assert reason.clause_text
        assert isinstance(reason.status_code, StatusCode)


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        (SendErrorReason.INVALID_ADDRESS, StatusCode.INVALID_ARGUMENT),
        (SendErrorReason.UNKNOWN_AGENT, StatusCode.NOT_FOUND),
        (SendErrorReason.NOT_REGISTERED, StatusCode.FAILED_PRECONDITION),
        (SendErrorReason.NETWORK_UNAVAILABLE, StatusCode.UNAVAILABLE),
        (SendErrorReason.DELIVERY_PENDING, StatusCode.DEADLINE_EXCEEDED),
        (SendErrorReason.OUTCOME_UNKNOWN, StatusCode.UNKNOWN),
        (SendErrorReason.TOO_MANY_OPERATIONS, StatusCode.RESOURCE_EXHAUSTED),
    ],
)
def test_send_reasons_travel_under_the_operations_table_codes(reason, code):
    assert reason.status_code is code


def test_a_send_error_message_uses_its_detail_else_the_reason_text():
    assert SendError(SendErrorReason.INVALID_ADDRESS).message == (
        "send failed: the address must be agent:<name> or group:<name>,<name>,..."
    )
    error = SendError(SendErrorReason.UNKNOWN_AGENT, "agent:bob is not registered with the gateway")
    assert error.message == "send failed: agent:bob is not registered with the gateway"
    assert error.error_info_reason == "UNKNOWN_AGENT"
    assert str(error) == error.message


def test_members_unreachable_names_unknown_members_as_not_known():
    error = CollectiveError(
        "col_x",
        MembersUnreachable(
            members=(
                UnreachableMember(
                    member="agent:gather-nobody", reason=SendErrorReason.UNKNOWN_AGENT
                ),
            )
        ),
    )
    assert error.message == "send failed: agent:gather-nobody is not a known agent"
    assert error.kind is CollectiveErrorKind.MEMBERS_UNREACHABLE
    assert error.error_info_reason == "MEMBERS_UNREACHABLE"
    assert error.status_code is StatusCode.FAILED_PRECONDITION


def test_members_unreachable_with_certification_unavailable_reads_as_in_scenario_a3():
    members = tuple(
        UnreachableMember(
            member=f"agent:all-gather-member-{letter}",
            reason=SendErrorReason.CERTIFICATION_UNAVAILABLE,
        )
        for letter in "abc"
    )
    message = CollectiveError("col_x", MembersUnreachable(members=members)).message
    assert message == (
        "send failed: agent:all-gather-member-a could not be reached: the gateway is "
        "unavailable (certification unavailable); agent:all-gather-member-b could not be "
        "reached: the gateway is unavailable (certification unavailable); "
        "agent:all-gather-member-c could not be reached: the gateway is unavailable "
        "(certification unavailable)"
    )


@pytest.mark.parametrize(
    ("failure", "message", "code"),
    [
        (
            SchemaInvalid(detail="required: expected an array of strings"),
            "send failed: the form is invalid (required: expected an array of strings)",
            StatusCode.INVALID_ARGUMENT,
        ),
        (
            RequestNone(),
            "reply failed: no question is open in this conversation",
            StatusCode.FAILED_PRECONDITION,
        ),
        (
            RequestNone(own_question=True),
            "reply failed: the question open in this conversation is your own; its members "
            "answer it, and their answers come to you as its result",
            StatusCode.FAILED_PRECONDITION,
        ),
        (
            RequestAmbiguous(),
            "reply failed: more than one question is open in this conversation; "
            "answering one of several is not supported",
            StatusCode.FAILED_PRECONDITION,
        ),
        (
            RequestAnswered(),
            "reply failed: the question was already answered",
            StatusCode.FAILED_PRECONDITION,
        ),
        (
            RequestExpired(),
            "reply failed: the question's deadline has passed",
            StatusCode.FAILED_PRECONDITION,
        ),
    ],
)
def test_collective_failures_have_the_spec_messages(failure, message, code):
    error = CollectiveError("col_x", failure)
    assert error.message == message
    assert error.status_code is code


def test_answer_invalid_joins_the_field_clauses():
    error = CollectiveError(
        "col_x",
        AnswerInvalid(
            fields=(
                AnswerFieldIssue(field="a", reason=AnswerFieldReason.MISSING),
                AnswerFieldIssue(
                    field="b",
                    reason=AnswerFieldReason.INVALID,
                    detail="enum: must be one of the allowed values",
                ),
                AnswerFieldIssue(field="z", reason=AnswerFieldReason.UNEXPECTED),
            )
        ),
    )
    assert error.message == (
        'reply failed: field "a" is missing; field "b" is invalid (enum: must be one of '
        'the allowed values); field "z" is not in the form'
    )
    assert error.status_code is StatusCode.INVALID_ARGUMENT


def test_the_other_closed_errors_have_their_prefixes_and_codes():
    assert ListenError(ListenErrorReason.ALREADY_LISTENING).message == (
        "listen failed: already-listening"
    )
    assert ListenError(ListenErrorReason.ALREADY_LISTENING).status_code is (
        StatusCode.FAILED_PRECONDITION
    )
    assert DeliveryAcknowledgeError(DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY).message == (
        "delivery acknowledgment failed: unknown-delivery"
    )
    assert ConnectError(ConnectErrorReason.DECODE_FAILED).message == (
        "connect failed: decode-failed"
    )
    refused = ConnectError(
        ConnectErrorReason.AUTHENTICATION_FAILED,
        address="gw:7770",
        detail="the gateway at gw:7770 does not know this agent token",
    )
    assert (
        refused.message == "connect failed: the gateway at gw:7770 does not know this agent token"
    )
    text_error = MessageTextError(MessageTextOperation.GATHER, "deadline: is missing")
    assert text_error.message == "gather not sent: deadline: is missing"
    assert text_error.status_code is StatusCode.INVALID_ARGUMENT
    conflict = IdempotencyConflictError("key-1")
    assert conflict.status_code is StatusCode.ALREADY_EXISTS
    assert conflict.error_info_reason == "IDEMPOTENCY_CONFLICT"


def test_a_firewall_refusal_names_its_refusal_and_instruction():
    error = FirewallSendError(
        check_id="chk_AAAAAAAAAAAAAAAAAAAAAA",
        refusal=FirewallRefusal.RATE_LIMITED,
        middleware_id="limits",
        rule_id="per-agent",
        instruction="wait 20 seconds before sending again",
        guidance=CheckedGuidance(
            check_id="chk_AAAAAAAAAAAAAAAAAAAAAA", subjects=(), instructions=()
        ),
    )
    assert error.message == (
        "send refused by the local firewall (rate-limited): wait 20 seconds before sending again"
    )
    assert error.status_code is StatusCode.PERMISSION_DENIED

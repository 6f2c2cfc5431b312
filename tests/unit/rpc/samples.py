"""One sample of every public value and every closed error, for the RPC layer's tests."""

from __future__ import annotations

from harness_contract.errors import (
    AnswerFieldIssue,
    AnswerFieldReason,
    AnswerInvalid,
    CollectiveError,
    ConnectError,
    ConnectErrorReason,
    DeliveryAcknowledgeError,
    DeliveryAcknowledgeErrorReason,
    FirewallRefusal,
    FirewallSendError,
    HarnessError,
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
    UnreachableMember,
)
from harness_contract.guidance import (
    CheckedGuidance,
    CollectiveGuidance,
    Expectation,
    ExpectationInstruction,
    GuidanceSubject,
    MemberGuidance,
    Uncertain,
    UncertainInstruction,
    Withheld,
)
from harness_contract.jsonvalue import JsonValue
from harness_contract.values import (
    Accept,
    Answered,
    AskOperation,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    DataPart,
    Decline,
    Declined,
    Delivery,
    DirectMessage,
    GroupMessage,
    InboundItem,
    Invalid,
    MemberResult,
    MessageInput,
    MulticastItem,
    MulticastOperation,
    NoAnswer,
    OperationFailedItem,
    ResponseInput,
    SendInput,
    SendResult,
    TextPart,
)

COLLECTIVE_ID = "col_" + "C" * 43
POST_ID = "pst_" + "P" * 43
TOKEN = "dlv_" + "D" * 43

SCHEMA: dict[str, JsonValue] = {
    "type": "object",
    "properties": {
        "slot": {"type": "string", "enum": ("mon", "tue")},
        "count": {"type": "number", "minimum": 1.0},
    },
    "required": ("slot",),
}

CHECKED = CheckedGuidance(
    check_id="chk_" + "K" * 22,
    subjects=(
        GuidanceSubject(id="out", sender="agent:alice", recipients=("agent:bob",), text="hi"),
    ),
    instructions=(
        ExpectationInstruction(
            middleware_id="turns",
            rule_id="answer",
            expectation=Expectation.REQUIRED,
            subjects=("out",),
            instruction="answer before the deadline",
        ),
        UncertainInstruction(
            middleware_id="classifier",
            rule_id="tone",
            uncertain=Uncertain(choice="rude", probability=0.25),
            instruction="might be rude",
        ),
    ),
)

COLLECTIVE_GUIDANCE = CollectiveGuidance(
    question=CHECKED,
    answers=(MemberGuidance(member="agent:bob", guidance=CHECKED),),
)

SEND_INPUTS: list[SendInput] = [
    MessageInput(to="agent:bob", text="hello"),
    MessageInput(to="agent:bob", text="hello", collective=MulticastOperation()),
    MessageInput(
        to="group:alice,bob,carol",
        text="when?",
        collective=AskOperation(op=CollectiveOp.GATHER, deadline=300, requested_schema=SCHEMA),
    ),
    MessageInput(
        to="group:alice,bob,carol",
        text="when?",
        collective=AskOperation(
            op=CollectiveOp.ALL_GATHER, deadline=2_592_000, requested_schema=SCHEMA
        ),
    ),
    ResponseInput(
        to="agent:alice",
        response=Accept(
            content={"slot": "tue", "count": 2.0, "sure": True, "also": ("wed", "thu")}
        ),
    ),
    ResponseInput(to="agent:alice", response=Decline()),
]

SEND_RESULTS = [
    SendResult(),
    SendResult(operation_id=COLLECTIVE_ID),
    SendResult(operation_id=COLLECTIVE_ID, guidance=CHECKED),
]

ITEMS: list[InboundItem] = [
    MulticastItem(
        message=DirectMessage(
            post_id=POST_ID,
            address="agent:bob",
            sender="agent:bob",
            content=(
                TextPart(text="hi ☃"),
                DataPart(value={"n": 1.5, "list": (None, True, "x", ()), "obj": {}}),
            ),
        )
    ),
    MulticastItem(
        message=GroupMessage(
            post_id=POST_ID,
            address="group:alice,bob,carol",
            sender="agent:carol",
            members=("agent:alice", "agent:bob", "agent:carol"),
            content=(TextPart(text="all"),),
        )
    ),
    CollectiveRequestItem(
        op=CollectiveOp.GATHER,
        id=COLLECTIVE_ID,
        post_id=POST_ID,
        sender="agent:alice",
        to="agent:alice",
        question="when?",
        requested_schema=SCHEMA,
        deadline_at=1_767_225_600_000,
    ),
    CollectiveResultItem(
        op=CollectiveOp.ALL_GATHER,
        id=COLLECTIVE_ID,
        to="group:alice,bob,carol,dave",
        question="when?",
        outcomes=(
            MemberResult(member="agent:bob", outcome=Answered(content={"slot": "tue"})),
            MemberResult(member="agent:carol", outcome=Declined()),
            MemberResult(member="agent:dave", outcome=Invalid(reason='field "slot" is missing')),
            MemberResult(member="agent:erin", outcome=NoAnswer()),
            MemberResult(
                member="agent:fred",
                outcome=Withheld(check_id="chk_x", reason=FirewallRefusal.CONTENT_BLOCKED),
            ),
        ),
    ),
    CollectiveResultItem(
        op=CollectiveOp.GATHER,
        id=COLLECTIVE_ID,
        to="agent:bob",
        question=Withheld(check_id="chk_y", reason=FirewallRefusal.RATE_LIMITED),
        outcomes=(MemberResult(member="agent:bob", outcome=NoAnswer()),),
    ),
    OperationFailedItem(id=COLLECTIVE_ID, to="agent:bob", error="send failed: nope"),
]

DELIVERIES = [
    Delivery(token=TOKEN, item=ITEMS[0]),
    Delivery(token=TOKEN, item=ITEMS[2], guidance=CHECKED),
    Delivery(token=TOKEN, item=ITEMS[3], guidance=COLLECTIVE_GUIDANCE),
    Delivery(
        token=TOKEN,
        item=ITEMS[3],
        guidance=CollectiveGuidance(question=None, answers=()),
    ),
]

FIREWALL_ERROR = FirewallSendError(
    check_id=CHECKED.check_id,
    refusal=FirewallRefusal.FORBIDDEN_RECIPIENT,
    middleware_id="turns",
    rule_id="answer",
    instruction="answer before the deadline",
    guidance=CHECKED,
)

COLLECTIVE_ERRORS = [
    CollectiveError(
        COLLECTIVE_ID,
        MembersUnreachable(
            members=(
                UnreachableMember(member="agent:zed", reason=SendErrorReason.UNKNOWN_AGENT),
                UnreachableMember(
                    member="agent:yan",
                    reason=SendErrorReason.NETWORK_UNAVAILABLE,
                    detail="the Router is down",
                ),
            )
        ),
    ),
    CollectiveError(COLLECTIVE_ID, SchemaInvalid(detail="type: expected object")),
    CollectiveError(
        COLLECTIVE_ID,
        AnswerInvalid(
            fields=(
                AnswerFieldIssue(field="slot", reason=AnswerFieldReason.MISSING),
                AnswerFieldIssue(field="x", reason=AnswerFieldReason.UNEXPECTED),
                AnswerFieldIssue(
                    field="count", reason=AnswerFieldReason.INVALID, detail="minimum 1"
                ),
            )
        ),
    ),
    CollectiveError(COLLECTIVE_ID, RequestNone()),
    CollectiveError(COLLECTIVE_ID, RequestNone(own_question=True)),
    CollectiveError(COLLECTIVE_ID, RequestAmbiguous()),
    CollectiveError(COLLECTIVE_ID, RequestAnswered()),
    CollectiveError(COLLECTIVE_ID, RequestExpired()),
]

SEND_ERRORS = [
    *(SendError(reason) for reason in SendErrorReason),
    SendError(SendErrorReason.UNKNOWN_AGENT, "agent:zed is not registered with the gateway"),
]

CLOSED_ERRORS: list[HarnessError] = [
    *SEND_ERRORS,
    *COLLECTIVE_ERRORS,
    FIREWALL_ERROR,
    IdempotencyConflictError("key-1"),
    *(MessageTextError(operation, "to: expected an address") for operation in MessageTextOperation),
    *(ListenError(reason) for reason in ListenErrorReason),
    *(DeliveryAcknowledgeError(reason) for reason in DeliveryAcknowledgeErrorReason),
    *(ConnectError(reason) for reason in ConnectErrorReason),
    ConnectError(
        ConnectErrorReason.AUTHENTICATION_FAILED,
        address="gw:7770",
        detail="the gateway at gw:7770 does not know this agent token",
    ),
]

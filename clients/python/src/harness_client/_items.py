"""The contract's public values as the client holds them: frozen, slotted dataclasses.

Each closed union is a `TypeAlias` of small records, so a host dispatches with `match`:

    match delivery.item:
        case MulticastItem(message=DirectMessage(sender=sender, content=content)):
            ...
        case CollectiveRequestItem(id=operation_id, question=question):
            ...

Field names are the contract's camelCase names in snake_case (`from` is `sender`, since
`from` is a Python keyword). JSON numbers are floats and JSON arrays tuples. Every value has
`to_json()`, the contract's camelCase JSON shape (what `harness --json` prints).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from harness_client._errors import SendFailure

JsonValue: TypeAlias = bool | float | str | Sequence["JsonValue"] | Mapping[str, "JsonValue"] | None
"""A JSON value: numbers are floats, arrays tuples (or lists), objects string-keyed maps."""


def json_value_to_json(value: JsonValue) -> Any:
    """A JsonValue as plain `json` module values (tuples become lists)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {key: json_value_to_json(item) for key, item in value.items()}
    return [json_value_to_json(item) for item in value]


class CollectiveOp(enum.StrEnum):
    """The two collective operations that ask a question."""

    GATHER = "gather"
    """One request post per member, each in its direct conversation with the requester."""
    ALL_GATHER = "all_gather"
    """One request post in the group conversation."""


class FailureDelivery(enum.StrEnum):
    """Where a refused gather, all_gather or answer is reported."""

    RESULT = "result"
    """`send` raises the refusal (the default)."""
    INBOUND = "inbound"
    """`send` returns the operation id and the refusal arrives as `operationFailed`."""


class Expectation(enum.StrEnum):
    """What the model is expected to do about an instruction's subjects."""

    REQUIRED = "required"
    """Act on these subjects (answer this question before its deadline)."""
    PERMITTED = "permitted"
    """You may respond."""
    WAIT = "wait"
    """Do not act on these subjects yet; the instruction says until when."""
    NONE = "none"
    """No action is expected."""


class FirewallRefusal(enum.StrEnum):
    """Why the local firewall refused a send or withheld text."""

    FORBIDDEN_RECIPIENT = "forbidden-recipient"
    """A recipient policy denies this sender and recipient."""
    CONTENT_BLOCKED = "content-blocked"
    """A content pattern refuses the text."""
    RATE_LIMITED = "rate-limited"
    """The agent sends faster than its rate limit allows."""
    MIDDLEWARE_UNAVAILABLE = "middleware-unavailable"
    """A fail-closed middleware could not be consulted."""


# --- content ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TextPart:
    """`{"type": "text", "text": ...}`."""

    text: str

    def to_json(self) -> dict[str, Any]:
        """`{"type": "text", "text": ...}`."""
        return {"type": "text", "text": self.text}


@dataclass(frozen=True, slots=True, kw_only=True)
class DataPart:
    """`{"type": "data", "value": <JsonValue>}`."""

    value: JsonValue

    def to_json(self) -> dict[str, Any]:
        """`{"type": "data", "value": ...}`."""
        return {"type": "data", "value": json_value_to_json(self.value)}


ContentPart: TypeAlias = TextPart | DataPart
Content: TypeAlias = tuple[ContentPart, ...]
"""A non-empty sequence of parts."""


def content_to_json(content: Content) -> list[dict[str, Any]]:
    """Content in the contract's shape."""
    return [part.to_json() for part in content]


def text_of(content: Content) -> str:
    """The text parts of `content` joined by newlines."""
    return "\n".join(part.text for part in content if isinstance(part, TextPart))


AnswerValue: TypeAlias = str | float | bool | tuple[str, ...]
AnswerContent: TypeAlias = Mapping[str, AnswerValue]
"""An answer's form fields: each a string, a finite number, a boolean or strings."""
RequestedSchema: TypeAlias = Mapping[str, JsonValue]
"""An MCP form-mode schema object (`{$schema?, type: "object", properties, required?}`)."""


def answer_content_to_json(content: AnswerContent) -> dict[str, Any]:
    """AnswerContent as a JSON object (string lists as arrays)."""
    return {
        key: list(value) if isinstance(value, tuple) else value for key, value in content.items()
    }


# --- guidance --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class GuidanceSubject:
    """One text a check looked at: `id` is `out` for a send, else a PostId or a member."""

    id: str
    sender: str
    recipients: tuple[str, ...]
    text: str

    def to_json(self) -> dict[str, Any]:
        """`{id, sender, recipients, text}`."""
        return {
            "id": self.id,
            "sender": self.sender,
            "recipients": list(self.recipients),
            "text": self.text,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpectationInstruction:
    """A rule's instruction with an expectation over some subjects."""

    middleware_id: str
    rule_id: str
    expectation: Expectation
    subjects: tuple[str, ...]
    instruction: str

    def to_json(self) -> dict[str, Any]:
        """`{middlewareId, ruleId, expectation, subjects, instruction}`."""
        return {
            "middlewareId": self.middleware_id,
            "ruleId": self.rule_id,
            "expectation": self.expectation.value,
            "subjects": list(self.subjects),
            "instruction": self.instruction,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Uncertain:
    """A middleware's judgement that is not a rule: a label and its confidence (0..1)."""

    choice: str
    probability: float


@dataclass(frozen=True, slots=True, kw_only=True)
class UncertainInstruction:
    """An instruction carrying a middleware's uncertain judgement."""

    middleware_id: str
    rule_id: str
    uncertain: Uncertain
    instruction: str

    def to_json(self) -> dict[str, Any]:
        """`{middlewareId, ruleId, uncertain: {choice, probability}, instruction}`."""
        return {
            "middlewareId": self.middleware_id,
            "ruleId": self.rule_id,
            "uncertain": {
                "choice": self.uncertain.choice,
                "probability": self.uncertain.probability,
            },
            "instruction": self.instruction,
        }


Instruction: TypeAlias = ExpectationInstruction | UncertainInstruction


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckedGuidance:
    """One firewall check's advice: its id, the subjects it saw and its instructions."""

    check_id: str
    subjects: tuple[GuidanceSubject, ...]
    instructions: tuple[Instruction, ...]

    def to_json(self) -> dict[str, Any]:
        """`{checkId, subjects, instructions}`."""
        return {
            "checkId": self.check_id,
            "subjects": [subject.to_json() for subject in self.subjects],
            "instructions": [instruction.to_json() for instruction in self.instructions],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberGuidance:
    """A collective result's guidance on one answered member's content."""

    member: str
    guidance: CheckedGuidance


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveGuidance:
    """The second `LocalGuidance` form, for a collective result."""

    question: CheckedGuidance | None
    answers: tuple[MemberGuidance, ...]

    def to_json(self) -> dict[str, Any]:
        """`{question?, answers: [CheckedGuidance & {member}]}`."""
        value: dict[str, Any] = {
            "answers": [
                {**answer.guidance.to_json(), "member": answer.member} for answer in self.answers
            ]
        }
        if self.question is not None:
            value["question"] = self.question.to_json()
        return value


LocalGuidance: TypeAlias = CheckedGuidance | CollectiveGuidance


@dataclass(frozen=True, slots=True, kw_only=True)
class Withheld:
    """Text the local firewall withheld from the runtime, never peer content."""

    check_id: str
    reason: FirewallRefusal

    def to_json(self) -> dict[str, Any]:
        """`{kind: "withheld", checkId, reason}`."""
        return {"kind": "withheld", "checkId": self.check_id, "reason": self.reason.value}


# --- send inputs and results -----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MulticastOperation:
    """`{op: "multicast"}`, stated explicitly (the same content as an omitted collective)."""

    def to_json(self) -> dict[str, Any]:
        """`{op: "multicast"}`."""
        return {"op": "multicast"}


@dataclass(frozen=True, slots=True, kw_only=True)
class AskOperation:
    """`{op: "gather" | "all_gather", deadline, requestedSchema}`."""

    op: CollectiveOp
    deadline: int
    """Whole seconds from now, 1 to 2,592,000 (30 days)."""
    requested_schema: RequestedSchema

    def to_json(self) -> dict[str, Any]:
        """`{op, deadline, requestedSchema}`."""
        return {
            "op": self.op.value,
            "deadline": self.deadline,
            "requestedSchema": json_value_to_json(self.requested_schema),
        }


CollectiveOperation: TypeAlias = MulticastOperation | AskOperation


@dataclass(frozen=True, slots=True, kw_only=True)
class Accept:
    """`{action: "accept", content}`."""

    content: AnswerContent

    def to_json(self) -> dict[str, Any]:
        """`{action: "accept", content}`."""
        return {"action": "accept", "content": answer_content_to_json(self.content)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Decline:
    """`{action: "decline"}`."""

    def to_json(self) -> dict[str, Any]:
        """`{action: "decline"}`."""
        return {"action": "decline"}


CollectiveResponse: TypeAlias = Accept | Decline


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageInput:
    """`{to, text, collective?}`: a multicast, or a gather or all_gather question."""

    to: str
    text: str
    collective: CollectiveOperation | None = None

    def to_json(self) -> dict[str, Any]:
        """`{to, text, collective?}`."""
        value: dict[str, Any] = {"to": self.to, "text": self.text}
        if self.collective is not None:
            value["collective"] = self.collective.to_json()
        return value


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseInput:
    """`{to, collectiveResponse}`: an answer to the one request open in `to`."""

    to: str
    response: CollectiveResponse

    def to_json(self) -> dict[str, Any]:
        """`{to, collectiveResponse}`."""
        return {"to": self.to, "collectiveResponse": self.response.to_json()}


SendInput: TypeAlias = MessageInput | ResponseInput


@dataclass(frozen=True, slots=True, kw_only=True)
class SendResult:
    """What a successful send returns."""

    operation_id: str | None = None
    """The CollectiveId of a gather, all_gather, answer or inbound-routed refusal."""
    guidance: CheckedGuidance | None = None
    """The local firewall's advice on the admitted send."""

    def to_json(self) -> dict[str, Any]:
        """`{operationId?, guidance?}`."""
        value: dict[str, Any] = {}
        if self.operation_id is not None:
            value["operationId"] = self.operation_id
        if self.guidance is not None:
            value["guidance"] = self.guidance.to_json()
        return value


# --- inbound ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectMessage:
    """A certified post in a direct conversation; `address` is the sender's `agent:`."""

    post_id: str
    address: str
    sender: str
    content: Content

    def to_json(self) -> dict[str, Any]:
        """`{kind: "direct", postId, address, sender, content}`."""
        return {
            "kind": "direct",
            "postId": self.post_id,
            "address": self.address,
            "sender": self.sender,
            "content": content_to_json(self.content),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMessage:
    """A certified post in a group; `members` lists every member in name order."""

    post_id: str
    address: str
    sender: str
    members: tuple[str, ...]
    content: Content

    def to_json(self) -> dict[str, Any]:
        """`{kind: "group", postId, address, sender, members, content}`."""
        return {
            "kind": "group",
            "postId": self.post_id,
            "address": self.address,
            "sender": self.sender,
            "members": list(self.members),
            "content": content_to_json(self.content),
        }


InboundMessage: TypeAlias = DirectMessage | GroupMessage


@dataclass(frozen=True, slots=True, kw_only=True)
class Answered:
    """The member's first answer fit the form."""

    content: AnswerContent

    def to_json(self) -> dict[str, Any]:
        """`{kind: "answered", content}`."""
        return {"kind": "answered", "content": answer_content_to_json(self.content)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Declined:
    """The member declined."""

    def to_json(self) -> dict[str, Any]:
        """`{kind: "declined"}`."""
        return {"kind": "declined"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Invalid:
    """The member's first answer did not fit the form; `reason` joins the field clauses."""

    reason: str

    def to_json(self) -> dict[str, Any]:
        """`{kind: "invalid", reason}`."""
        return {"kind": "invalid", "reason": self.reason}


@dataclass(frozen=True, slots=True, kw_only=True)
class NoAnswer:
    """No answer counted by the deadline (silent or unreachable)."""

    def to_json(self) -> dict[str, Any]:
        """`{kind: "no-answer"}`."""
        return {"kind": "no-answer"}


MemberOutcome: TypeAlias = Answered | Declined | Invalid | NoAnswer | Withheld


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberResult:
    """One member's outcome in a collective result."""

    member: str
    outcome: MemberOutcome

    def to_json(self) -> dict[str, Any]:
        """`{member, outcome}`."""
        return {"member": self.member, "outcome": self.outcome.to_json()}


@dataclass(frozen=True, slots=True, kw_only=True)
class MulticastItem:
    """`{kind: "multicast", message}`: an ordinary message."""

    message: InboundMessage

    def to_json(self) -> dict[str, Any]:
        """`{kind: "multicast", message}`."""
        return {"kind": "multicast", "message": self.message.to_json()}


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveRequestItem:
    """`{kind: "collectiveRequest", ...}`: a question this agent may answer once."""

    op: CollectiveOp
    id: str
    post_id: str
    sender: str
    """The requester's `agent:` address (the contract's `from`)."""
    to: str
    """The conversation the request arrived in; answers go there."""
    question: str
    requested_schema: RequestedSchema
    deadline_at: int
    """Epoch milliseconds."""

    def to_json(self) -> dict[str, Any]:
        """`{kind: "collectiveRequest", op, id, postId, from, to, question, ...}`."""
        return {
            "kind": "collectiveRequest",
            "op": self.op.value,
            "id": self.id,
            "postId": self.post_id,
            "from": self.sender,
            "to": self.to,
            "question": self.question,
            "requestedSchema": json_value_to_json(self.requested_schema),
            "deadlineAt": self.deadline_at,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveResultItem:
    """`{kind: "collectiveResult", ...}`: one outcome per member, in member order."""

    op: CollectiveOp
    id: str
    to: str
    question: str | Withheld
    outcomes: tuple[MemberResult, ...]

    def to_json(self) -> dict[str, Any]:
        """`{kind: "collectiveResult", op, id, to, question, outcomes}`."""
        return {
            "kind": "collectiveResult",
            "op": self.op.value,
            "id": self.id,
            "to": self.to,
            "question": self.question
            if isinstance(self.question, str)
            else self.question.to_json(),
            "outcomes": [entry.to_json() for entry in self.outcomes],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationFailedItem:
    """`{kind: "operationFailed", id, to, error}`: an operation ended without a result."""

    id: str
    to: str
    error: str

    def to_json(self) -> dict[str, Any]:
        """`{kind: "operationFailed", id, to, error}`."""
        return {"kind": "operationFailed", "id": self.id, "to": self.to, "error": self.error}


InboundItem: TypeAlias = (
    MulticastItem | CollectiveRequestItem | CollectiveResultItem | OperationFailedItem
)


async def _not_acknowledgeable(token: str) -> None:
    raise RuntimeError("this delivery was not received from an endpoint")


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundDelivery:
    """An item offered under its stable token; `await delivery.acknowledge()` retires it."""

    token: str
    item: InboundItem
    guidance: LocalGuidance | None = None
    _acknowledge: Callable[[str], Awaitable[None]] = field(
        default=_not_acknowledgeable, repr=False, compare=False
    )

    async def acknowledge(self) -> None:
        """Retire this delivery; raises `DeliveryAcknowledgeError`.

        Acknowledgments are batched (up to 100 tokens a call, or every 20 ms), and each
        waiter gets its own token's result. Acknowledging again succeeds."""
        await self._acknowledge(self.token)

    def to_json(self) -> dict[str, Any]:
        """`{token, item, guidance?}` (one `harness listen` line)."""
        value: dict[str, Any] = {"token": self.token, "item": self.item.to_json()}
        if self.guidance is not None:
            value["guidance"] = self.guidance.to_json()
        return value


# --- keyed send states -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SendAbsent:
    """No send was made under the key (or its row expired)."""

    def to_json(self) -> dict[str, Any]:
        """`{state: "absent"}`."""
        return {"state": "absent"}


@dataclass(frozen=True, slots=True, kw_only=True)
class SendPending:
    """The keyed send is running."""

    input: SendInput

    def to_json(self) -> dict[str, Any]:
        """`{state: "pending", input}`."""
        return {"state": "pending", "input": self.input.to_json()}


@dataclass(frozen=True, slots=True, kw_only=True)
class SendIndeterminate:
    """A restart cut the keyed send; it answers `outcome-unknown` for good."""

    input: SendInput

    def to_json(self) -> dict[str, Any]:
        """`{state: "indeterminate", input}`."""
        return {"state": "indeterminate", "input": self.input.to_json()}


@dataclass(frozen=True, slots=True, kw_only=True)
class SendReturned:
    """The keyed send returned this outcome, which every retry gets."""

    input: SendInput
    outcome: SendResult | SendFailure

    def to_json(self) -> dict[str, Any]:
        """`{state: "returned", input, outcome: {kind: "success", result} | {kind: "failure", error}}`."""
        outcome: dict[str, Any]
        if isinstance(self.outcome, SendResult):
            outcome = {"kind": "success", "result": self.outcome.to_json()}
        else:
            outcome = {"kind": "failure", "error": self.outcome.to_json()}
        return {"state": "returned", "input": self.input.to_json(), "outcome": outcome}


SendState: TypeAlias = SendAbsent | SendPending | SendIndeterminate | SendReturned


# --- management ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisteredAgent:
    """A registration; `token` is shown this once."""

    address: str
    agent_id: str
    token: str

    def to_json(self) -> dict[str, Any]:
        """`{address, token}` (the agent id is on `agents show`)."""
        return {"address": self.address, "token": self.token}


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentStatus:
    """What an operator sees of one agent."""

    name: str
    address: str
    agent_id: str
    public_key: str
    issued_at: str
    hosted: bool
    stream_attached: bool
    backlog: int
    oldest_unacked_age_seconds: float
    set_aside: tuple[SetAsideConversation, ...] = ()
    """Conversations the daemon stopped serving (a stored row failed a check)."""

    def to_json(self) -> dict[str, Any]:
        """The agent's card, hosting, stream and backlog."""
        return {
            "name": self.name,
            "address": self.address,
            "agentId": self.agent_id,
            "publicKey": self.public_key,
            "issuedAt": self.issued_at,
            "hosted": self.hosted,
            "streamAttached": self.stream_attached,
            "backlog": self.backlog,
            "oldestUnackedAgeSeconds": self.oldest_unacked_age_seconds,
            "setAside": [
                {"conversationId": item.conversation_id, "reason": item.reason}
                for item in self.set_aside
            ],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class SetAsideConversation:
    """A conversation the daemon set aside, and why."""

    conversation_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationSummary:
    """One conversation as a hosted agent holds it."""

    address: str
    kind: str
    """`direct` or `group`."""
    members: tuple[str, ...]
    head_record_hash: str | None
    depth: int

    def to_json(self) -> dict[str, Any]:
        """`{address, kind, members, headRecordHash?, depth}`."""
        value: dict[str, Any] = {
            "address": self.address,
            "kind": self.kind,
            "members": list(self.members),
            "depth": self.depth,
        }
        if self.head_record_hash is not None:
            value["headRecordHash"] = self.head_record_hash
        return value


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationRecord:
    """One certified record; `certified_record` is its exact RFC 8785 bytes."""

    record_hash: str
    post_id: str
    author: str
    depth: int
    content: Content
    certified_record: bytes

    def to_json(self) -> dict[str, Any]:
        """`{recordHash, postId, author, depth, content}` (the JCS bytes are left out)."""
        return {
            "recordHash": self.record_hash,
            "postId": self.post_id,
            "author": self.author,
            "depth": self.depth,
            "content": content_to_json(self.content),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayStatus:
    """The daemon's version, mode, hosted agents and Router state."""

    version: str
    mode: str
    hosted_agents: int
    router_state: str

    def to_json(self) -> dict[str, Any]:
        """`{version, mode, hostedAgents, routerState}`."""
        return {
            "version": self.version,
            "mode": self.mode,
            "hostedAgents": self.hosted_agents,
            "routerState": self.router_state,
        }

"""The public values of the HarnessEndpoint contract as frozen dataclasses.

Each closed union of the contract is a `TypeAlias` of small records dispatched with
`match`; field names are the contract's camelCase names in snake_case (`from` is
`sender`, since `from` is a Python keyword). Numbers inside JSON values are floats
(see `harness_contract.jsonvalue`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

from harness_contract.errors import DeliveryAcknowledgeErrorReason, SendFailure
from harness_contract.guidance import CheckedGuidance, LocalGuidance, Withheld
from harness_contract.jsonvalue import JsonValue


class CollectiveOp(enum.StrEnum):
    """The two collective operations that ask a question."""

    GATHER = "gather"
    """One request post per member, each in its direct conversation with the requester."""
    ALL_GATHER = "all_gather"
    """One request post in the group conversation; members see the result, not the answers."""


class FailureDelivery(enum.StrEnum):
    """Where a refused gather, all_gather or answer is reported (collectives.md §1.7)."""

    RESULT = "result"
    """The send returns the refusal (the default)."""
    INBOUND = "inbound"
    """The send returns the operation id and the refusal arrives as `operationFailed`."""


# --- Content ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TextPart:
    """`{"type": "text", "text": ...}`."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DataPart:
    """`{"type": "data", "value": <JsonValue>}`."""

    value: JsonValue


ContentPart: TypeAlias = TextPart | DataPart
Content: TypeAlias = tuple[ContentPart, ...]
"""A non-empty sequence of parts (the empty tuple is never valid content)."""

RequestedSchema: TypeAlias = Mapping[str, JsonValue]
"""An MCP form-mode schema object (`harness_contract.forms` admits and normalizes it)."""

AnswerValue: TypeAlias = str | float | bool | tuple[str, ...]
AnswerContent: TypeAlias = Mapping[str, AnswerValue]
"""An accepted answer: each field a string, a finite number, a boolean or strings."""


# --- SendInput -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MulticastOperation:
    """`{op: "multicast"}`, stated explicitly (the same content as an omitted collective)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AskOperation:
    """`{op: "gather" | "all_gather", deadline, requestedSchema}`."""

    op: CollectiveOp
    deadline: int
    """Whole seconds from now, 1 to 2,592,000 (30 days)."""
    requested_schema: RequestedSchema


CollectiveOperation: TypeAlias = MulticastOperation | AskOperation


@dataclass(frozen=True, slots=True, kw_only=True)
class Accept:
    """`{action: "accept", content}`."""

    content: AnswerContent


@dataclass(frozen=True, slots=True, kw_only=True)
class Decline:
    """`{action: "decline"}`."""


CollectiveResponse: TypeAlias = Accept | Decline


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageInput:
    """`{to, text, collective?}`: a multicast, or a gather or all_gather question."""

    to: str
    text: str
    collective: CollectiveOperation | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseInput:
    """`{to, collectiveResponse}`: an answer to the one request open in `to`."""

    to: str
    response: CollectiveResponse


SendInput: TypeAlias = MessageInput | ResponseInput


@dataclass(frozen=True, slots=True, kw_only=True)
class SendResult:
    """What a successful send returns."""

    operation_id: str | None = None
    guidance: CheckedGuidance | None = None
    post_ids: tuple[str, ...] = ()
    """The PostIds of the posts the send certified, in the order it bound them: one for a
    message, one per member conversation for a gather, none for a refusal reported inbound.
    A gateway extension (the contract's `SendResult` has no such field)."""


# --- Inbound ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectMessage:
    """A certified post in a direct conversation; `address` is the sender's `agent:`."""

    post_id: str
    address: str
    sender: str
    content: Content


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMessage:
    """A certified post in a group; `members` lists every member in name order."""

    post_id: str
    address: str
    sender: str
    members: tuple[str, ...]
    content: Content


InboundMessage: TypeAlias = DirectMessage | GroupMessage


@dataclass(frozen=True, slots=True, kw_only=True)
class Answered:
    """The member's first answer fit the form."""

    content: AnswerContent


@dataclass(frozen=True, slots=True, kw_only=True)
class Declined:
    """The member declined."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Invalid:
    """The member's first answer did not fit the form; `reason` joins the field clauses."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NoAnswer:
    """No answer by the deadline (silent, unreachable, or its request post was refused)."""


MemberOutcome: TypeAlias = Answered | Declined | Invalid | NoAnswer | Withheld


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberResult:
    """One member's outcome in a collective result."""

    member: str
    outcome: MemberOutcome


@dataclass(frozen=True, slots=True, kw_only=True)
class MulticastItem:
    """`{kind: "multicast", message}`."""

    message: InboundMessage


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


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveResultItem:
    """`{kind: "collectiveResult", ...}`: one outcome per member, in member order."""

    op: CollectiveOp
    id: str
    to: str
    question: str | Withheld
    outcomes: tuple[MemberResult, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationFailedItem:
    """`{kind: "operationFailed", id, to, error}`."""

    id: str
    to: str
    error: str


InboundItem: TypeAlias = (
    MulticastItem | CollectiveRequestItem | CollectiveResultItem | OperationFailedItem
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """An inbox item offered on a stream under its stable delivery token."""

    token: str
    item: InboundItem
    guidance: LocalGuidance | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AcknowledgeResult:
    """One delivery token's acknowledgment: `error` is None when the item is (or already
    was) retired."""

    token: str
    error: DeliveryAcknowledgeErrorReason | None


# --- keyed send states (`ReadSend`) ------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SendAbsent:
    """No send used this key (or its row expired)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SendPending:
    """The keyed send is running."""

    input: SendInput


@dataclass(frozen=True, slots=True, kw_only=True)
class SendIndeterminate:
    """A restart cut the keyed send before the gateway recorded what it bound (a store from
    before that record, engine.md §9.1); it answers `outcome-unknown` for good. A send cut
    since is resumed instead, and reads `pending`."""

    input: SendInput


@dataclass(frozen=True, slots=True, kw_only=True)
class SendReturned:
    """The keyed send returned this outcome, which every retry gets."""

    input: SendInput
    outcome: SendResult | SendFailure


SendState: TypeAlias = SendAbsent | SendPending | SendIndeterminate | SendReturned
"""What `ReadSend` says of an idempotency key."""

"""The closed error vocabulary of the HarnessEndpoint contract.

Every failure the core reports is one of these, with a `reason` from a closed `StrEnum`,
typed fields, and one model-facing `message`. The core never imports grpc: each reason
declares its `StatusCode` (our mirror of gRPC's codes) and `gateway/rpc/` maps it once.

    HarnessError
    ├── SendError                 send failed: <detail, else the reason's text>
    ├── CollectiveError           members-unreachable, schema-invalid, answer-invalid, request-*
    ├── FirewallSendError         send refused by the local firewall (<refusal>): <instruction>
    ├── IdempotencyConflictError       the same key with different input (gateway extension)
    ├── MessageTextError          <operation> not sent: <detail>
    ├── ListenError               listen failed: <reason>
    ├── DeliveryAcknowledgeError  delivery acknowledgment failed: <reason>
    └── ConnectError              connect failed: <reason>

Texts come from `engine.md` §6 (SendError messages), `collectives.md` §3.2-§3.3
(CollectiveError messages and the short SendError clauses used inside them) and
`firewall.md` §3.

The module is long because it is one closed vocabulary (house-style.md §14): every failure
class with its reasons, texts and status codes, read and reviewed as one set. A reason is
added here once and `gateway/rpc/`, the wire mapping and both clients follow it; split
across modules, the set could no longer be seen whole, and the classes would import the
shared base and `_EqualByFields` from each other. Only `FirewallRefusal` lives elsewhere
(the leaf `guidance.py`, because `Withheld` carries it too).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias, assert_never

# The firewall's refusal vocabulary sits with the guidance values (a leaf, so guidance never
# imports this module); re-exported here, where every failure's reason is named.
from harness_contract.guidance import CheckedGuidance
from harness_contract.guidance import FirewallRefusal as FirewallRefusal


class StatusCode(enum.Enum):
    """Our mirror of gRPC's status codes, so the core can name one without importing grpc."""

    OK = 0
    """Success; never carried by a HarnessError."""
    CANCELLED = 1
    """The caller went away."""
    UNKNOWN = 2
    """outcome-unknown: the post may have been sent; never resend blindly."""
    INVALID_ARGUMENT = 3
    """The input can never succeed as given: address, content, form, answer or message text."""
    DEADLINE_EXCEEDED = 4
    """delivery-pending: the intent is bound and the post will still be sent; never resend."""
    NOT_FOUND = 5
    """unknown-agent: the address names an agent the Registry does not know."""
    ALREADY_EXISTS = 6
    """idempotency-conflict: the key already binds a different input."""
    PERMISSION_DENIED = 7
    """The local firewall refused the send, or a token of the wrong role was used."""
    RESOURCE_EXHAUSTED = 8
    """A limit was hit (message size, too-many-operations)."""
    FAILED_PRECONDITION = 9
    """The state forbids it now: not registered, version mismatch, no open question, listening."""
    ABORTED = 10
    """Not used by the contract."""
    OUT_OF_RANGE = 11
    """Not used by the contract."""
    UNIMPLEMENTED = 12
    """The method does not exist here."""
    INTERNAL = 13
    """A defect; the traceback is logged."""
    UNAVAILABLE = 14
    """The call had no effect; retrying it is always safe."""
    DATA_LOSS = 15
    """Not used by the contract."""
    UNAUTHENTICATED = 16
    """A missing, unknown or revoked token."""


class SendErrorReason(enum.StrEnum):
    """The closed `SendError` reasons: the contract's eleven and the gateway's
    `too-many-operations`."""

    INVALID_ADDRESS = "invalid-address"
    """The address is not `agent:<name>` or `group:<name>,...` by syntax."""
    UNKNOWN_AGENT = "unknown-agent"
    """The Registry answered not-found for a member."""
    MEMBERSHIP_INVALID = "membership-invalid"
    """Self only, a duplicate, or a group outside 3..32 members including self."""
    CONTENT_INVALID = "content-invalid"
    """The content breaks the JsonValue rules or exceeds 32,768 canonical bytes."""
    NOT_REGISTERED = "not-registered"
    """The sending agent has no committed identity in this daemon's store."""
    VERSION_MISMATCH = "version-mismatch"
    """The Registry or Router runs another protocol version; nothing was sent."""
    CERTIFICATION_UNAVAILABLE = "certification-unavailable"
    """The post could not be certified (policy refusal, membership clash); nothing was sent."""
    PERSISTENCE_FAILED = "persistence-failed"
    """A definite store failure before the intent was bound; nothing was sent."""
    NETWORK_UNAVAILABLE = "network-unavailable"
    """The Registry or Router cannot be reached, before binding; nothing was sent."""
    DELIVERY_PENDING = "delivery-pending"
    """The intent is bound and the post will still be sent; never resend."""
    OUTCOME_UNKNOWN = "outcome-unknown"
    """The send may or may not have happened."""
    TOO_MANY_OPERATIONS = "too-many-operations"
    """A gateway extension: the asking agent has as many gather and all_gather operations
    open as the gateway allows (`--max-open-operations`); nothing was sent. Asking again
    succeeds once one completes."""

    @property
    def status_code(self) -> StatusCode:
        """The gRPC status code this reason travels under (operations.md §3)."""
        return _SEND_ERROR_CODES[self]

    @property
    def message_text(self) -> str:
        """The model-facing text after `send failed: ` when there is no detail (engine.md §6)."""
        return _SEND_ERROR_TEXTS[self]

    @property
    def clause_text(self) -> str:
        """The short text used inside members-unreachable and close failures (collectives.md §3.3)."""
        return _SEND_ERROR_CLAUSES[self]


_SEND_ERROR_CODES: dict[SendErrorReason, StatusCode] = {
    SendErrorReason.INVALID_ADDRESS: StatusCode.INVALID_ARGUMENT,
    SendErrorReason.UNKNOWN_AGENT: StatusCode.NOT_FOUND,
    SendErrorReason.MEMBERSHIP_INVALID: StatusCode.INVALID_ARGUMENT,
    SendErrorReason.CONTENT_INVALID: StatusCode.INVALID_ARGUMENT,
    SendErrorReason.NOT_REGISTERED: StatusCode.FAILED_PRECONDITION,
    SendErrorReason.VERSION_MISMATCH: StatusCode.FAILED_PRECONDITION,
    SendErrorReason.CERTIFICATION_UNAVAILABLE: StatusCode.UNAVAILABLE,
    SendErrorReason.PERSISTENCE_FAILED: StatusCode.UNAVAILABLE,
    SendErrorReason.NETWORK_UNAVAILABLE: StatusCode.UNAVAILABLE,
    SendErrorReason.DELIVERY_PENDING: StatusCode.DEADLINE_EXCEEDED,
    SendErrorReason.OUTCOME_UNKNOWN: StatusCode.UNKNOWN,
    SendErrorReason.TOO_MANY_OPERATIONS: StatusCode.RESOURCE_EXHAUSTED,
}

_SEND_ERROR_TEXTS: dict[SendErrorReason, str] = {
    SendErrorReason.INVALID_ADDRESS: "the address must be agent:<name> or group:<name>,<name>,...",
    SendErrorReason.UNKNOWN_AGENT: "the address names an agent the gateway does not know",
    SendErrorReason.MEMBERSHIP_INVALID: (
        "the address must name one other agent, or a group of 3 to 32 different agents "
        "including you"
    ),
    SendErrorReason.CONTENT_INVALID: (
        "the message is not valid content or is larger than 32,768 bytes"
    ),
    SendErrorReason.NOT_REGISTERED: "this agent is not registered with the gateway yet",
    SendErrorReason.VERSION_MISMATCH: (
        "the gateway and the network run incompatible versions; nothing was sent"
    ),
    SendErrorReason.CERTIFICATION_UNAVAILABLE: (
        "the gateway could not get the message certified; nothing was sent"
    ),
    SendErrorReason.PERSISTENCE_FAILED: (
        "the gateway could not store the message; nothing was sent"
    ),
    SendErrorReason.NETWORK_UNAVAILABLE: (
        "the gateway cannot reach the network right now; nothing was sent"
    ),
    SendErrorReason.DELIVERY_PENDING: (
        "the message is saved and will be delivered as soon as the network allows; "
        "do not send it again"
    ),
    SendErrorReason.OUTCOME_UNKNOWN: (
        "the gateway lost track of this send; the message may or may not have been sent"
    ),
    SendErrorReason.TOO_MANY_OPERATIONS: (
        "this agent has too many gather and all_gather operations open; nothing was sent; "
        "wait for a result before asking again"
    ),
}

_SEND_ERROR_CLAUSES: dict[SendErrorReason, str] = {
    SendErrorReason.INVALID_ADDRESS: "the address is not a valid agent: or group: address",
    SendErrorReason.UNKNOWN_AGENT: "an agent the address names is not a known agent",
    SendErrorReason.MEMBERSHIP_INVALID: "the address does not name a valid set of agents",
    SendErrorReason.CONTENT_INVALID: "the message content is invalid",
    SendErrorReason.NOT_REGISTERED: "this agent is not registered with the gateway",
    SendErrorReason.VERSION_MISMATCH: "the gateway is unavailable (version mismatch)",
    SendErrorReason.CERTIFICATION_UNAVAILABLE: (
        "the gateway is unavailable (certification unavailable)"
    ),
    SendErrorReason.PERSISTENCE_FAILED: (
        "the gateway is unavailable (the message could not be stored)"
    ),
    SendErrorReason.NETWORK_UNAVAILABLE: "the gateway is unavailable (network unavailable)",
    SendErrorReason.DELIVERY_PENDING: (
        "the gateway is unavailable; the message is queued and will be delivered once the "
        "gateway is reachable"
    ),
    SendErrorReason.OUTCOME_UNKNOWN: (
        "the connection was lost; the message may or may not have been sent"
    ),
    SendErrorReason.TOO_MANY_OPERATIONS: "this agent has too many operations open",
}


class HarnessError(Exception):
    """Root of every contract failure. `reason` is closed; `message` is model-facing."""

    @property
    def reason(self) -> str:
        """The closed reason in the contract's kebab-case spelling."""
        raise NotImplementedError

    @property
    def message(self) -> str:
        """The text a host hands its model."""
        raise NotImplementedError

    @property
    def status_code(self) -> StatusCode:
        """The status the failure travels under over gRPC."""
        raise NotImplementedError

    @property
    def error_info_reason(self) -> str:
        """The `google.rpc.ErrorInfo` reason: the closed reason in UPPER_SNAKE."""
        return self.reason.upper().replace("-", "_")

    def __str__(self) -> str:
        return self.message


class _EqualByFields:
    """Mixed into a failure type that compares by value: equal to another of its own type
    with equal `_fields()`, and hashed by them (tests and kept outcomes compare failures).
    Not a `HarnessError` itself, so the vocabulary's types stay exactly the failures."""

    def _fields(self) -> tuple[object, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return isinstance(other, type(self)) and other._fields() == self._fields()

    def __hash__(self) -> int:
        return hash(self._fields())


class SendError(_EqualByFields, HarnessError):
    """A send failed with one of the closed reasons, with an optional detail."""

    def __init__(self, reason: SendErrorReason, detail: str | None = None) -> None:
        super().__init__(reason.value)
        self.send_reason = reason
        self.detail = detail

    @property
    def reason(self) -> SendErrorReason:
        return self.send_reason

    @property
    def message(self) -> str:
        return f"send failed: {self.detail if self.detail else self.send_reason.message_text}"

    @property
    def status_code(self) -> StatusCode:
        return self.send_reason.status_code

    def __repr__(self) -> str:
        return f"SendError({self.send_reason.value!r}, detail={self.detail!r})"

    def _fields(self) -> tuple[object, ...]:
        return (self.send_reason, self.detail)


# --- CollectiveError -------------------------------------------------------------------


class CollectiveErrorKind(enum.StrEnum):
    """The closed kinds of a `CollectiveError` failure (collectives.md §3.2)."""

    MEMBERS_UNREACHABLE = "members-unreachable"
    """A member is malformed or unknown, or every request post was refused; nothing starts."""
    SCHEMA_INVALID = "schema-invalid"
    """The requested form breaks the form-mode grammar."""
    ANSWER_INVALID = "answer-invalid"
    """The answer does not fit the request's form; nothing was sent, the request stays open."""
    REQUEST_NONE = "request-none"
    """No question is open in the conversation the answer names."""
    REQUEST_AMBIGUOUS = "request-ambiguous"
    """More than one question is open there."""
    REQUEST_ANSWERED = "request-answered"
    """The question was already answered (or an answer is being sent)."""
    REQUEST_EXPIRED = "request-expired"
    """The question's deadline has passed, or its all_gather closed."""

    @property
    def status_code(self) -> StatusCode:
        """The gRPC status code this kind travels under (operations.md §3)."""
        if self in (CollectiveErrorKind.SCHEMA_INVALID, CollectiveErrorKind.ANSWER_INVALID):
            return StatusCode.INVALID_ARGUMENT
        return StatusCode.FAILED_PRECONDITION


@dataclass(frozen=True, slots=True, kw_only=True)
class UnreachableMember:
    """One member of a members-unreachable failure: its `agent:` address and why."""

    member: str
    reason: SendErrorReason
    detail: str | None = None

    @property
    def clause(self) -> str:
        """`<member> is not a known agent`, or `<member> could not be reached: <text>`."""
        if self.reason is SendErrorReason.UNKNOWN_AGENT:
            return f"{self.member} is not a known agent"
        return f"{self.member} could not be reached: {self.detail or self.reason.clause_text}"


class AnswerFieldReason(enum.StrEnum):
    """Why one field of an answer does not fit the form."""

    MISSING = "missing"
    """A required field is absent."""
    UNEXPECTED = "unexpected"
    """The answer has a field the form does not declare."""
    INVALID = "invalid"
    """The field's value fails the form's keywords; `detail` lists them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerFieldIssue:
    """One field clause of an answer-invalid failure or an `invalid` outcome (§6.4)."""

    field: str
    reason: AnswerFieldReason
    detail: str | None = None

    @property
    def clause(self) -> str:
        """The field's clause text, as every party writes it."""
        match self.reason:
            case AnswerFieldReason.MISSING:
                return f'field "{self.field}" is missing'
            case AnswerFieldReason.UNEXPECTED:
                return f'field "{self.field}" is not in the form'
            case AnswerFieldReason.INVALID:
                return f'field "{self.field}" is invalid ({self.detail})'
            case _:
                assert_never(self.reason)


def answer_issues_text(issues: Sequence[AnswerFieldIssue]) -> str:
    """The clauses of an answer's issues joined by `; ` (an `invalid` outcome's reason)."""
    return "; ".join(issue.clause for issue in issues)


@dataclass(frozen=True, slots=True, kw_only=True)
class MembersUnreachable:
    """Members that cannot be asked, in member order (non-empty)."""

    members: tuple[UnreachableMember, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaInvalid:
    """The requested form was refused; `detail` joins every issue with `; `."""

    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerInvalid:
    """The answer does not fit the form; one issue per field, in §6.4 order (non-empty)."""

    fields: tuple[AnswerFieldIssue, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestNone:
    """No question is open in this conversation."""

    own_question: bool = False
    """The question open there is the answerer's own (an asker answering its gather or
    all_gather): its members answer it, and their answers come back as its result."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestAmbiguous:
    """More than one question is open in this conversation."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestAnswered:
    """The question was already answered."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestExpired:
    """The question's deadline has passed."""


CollectiveFailure: TypeAlias = (
    MembersUnreachable
    | SchemaInvalid
    | AnswerInvalid
    | RequestNone
    | RequestAmbiguous
    | RequestAnswered
    | RequestExpired
)


def collective_failure_kind(failure: CollectiveFailure) -> CollectiveErrorKind:
    """The closed kind of a collective failure payload."""
    match failure:
        case MembersUnreachable():
            return CollectiveErrorKind.MEMBERS_UNREACHABLE
        case SchemaInvalid():
            return CollectiveErrorKind.SCHEMA_INVALID
        case AnswerInvalid():
            return CollectiveErrorKind.ANSWER_INVALID
        case RequestNone():
            return CollectiveErrorKind.REQUEST_NONE
        case RequestAmbiguous():
            return CollectiveErrorKind.REQUEST_AMBIGUOUS
        case RequestAnswered():
            return CollectiveErrorKind.REQUEST_ANSWERED
        case RequestExpired():
            return CollectiveErrorKind.REQUEST_EXPIRED
        case _:
            assert_never(failure)


def collective_failure_message(failure: CollectiveFailure) -> str:
    """The model-facing message of a collective failure (collectives.md §3.2)."""
    match failure:
        case MembersUnreachable(members=members):
            return "send failed: " + "; ".join(member.clause for member in members)
        case SchemaInvalid(detail=detail):
            return f"send failed: the form is invalid ({detail})"
        case AnswerInvalid(fields=fields):
            return "reply failed: " + answer_issues_text(fields)
        case RequestNone(own_question=True):
            return (
                "reply failed: the question open in this conversation is your own; "
                "its members answer it, and their answers come to you as its result"
            )
        case RequestNone():
            return "reply failed: no question is open in this conversation"
        case RequestAmbiguous():
            return (
                "reply failed: more than one question is open in this conversation; "
                "answering one of several is not supported"
            )
        case RequestAnswered():
            return "reply failed: the question was already answered"
        case RequestExpired():
            return "reply failed: the question's deadline has passed"
        case _:
            assert_never(failure)


class CollectiveError(_EqualByFields, HarnessError):
    """A collective operation or answer was refused; `id` names the operation."""

    def __init__(self, id: str, failure: CollectiveFailure) -> None:
        super().__init__(collective_failure_kind(failure).value)
        self.id = id
        self.failure = failure

    @property
    def kind(self) -> CollectiveErrorKind:
        """The closed kind of `failure`."""
        return collective_failure_kind(self.failure)

    @property
    def reason(self) -> CollectiveErrorKind:
        return self.kind

    @property
    def message(self) -> str:
        return collective_failure_message(self.failure)

    @property
    def status_code(self) -> StatusCode:
        return self.kind.status_code

    def __repr__(self) -> str:
        return f"CollectiveError({self.id!r}, {self.failure!r})"

    def _fields(self) -> tuple[object, ...]:
        return (self.id, self.failure)


# --- FirewallSendError -----------------------------------------------------------------


class FirewallSendError(_EqualByFields, HarnessError):
    """The local firewall refused the send; nothing was bound and no post exists."""

    def __init__(
        self,
        *,
        check_id: str,
        refusal: FirewallRefusal,
        middleware_id: str,
        rule_id: str,
        instruction: str,
        guidance: CheckedGuidance,
    ) -> None:
        super().__init__(refusal.value)
        self.check_id = check_id
        self.refusal = refusal
        self.middleware_id = middleware_id
        self.rule_id = rule_id
        self.instruction = instruction
        self.guidance = guidance

    @property
    def reason(self) -> FirewallRefusal:
        return self.refusal

    @property
    def message(self) -> str:
        return f"send refused by the local firewall ({self.refusal.value}): {self.instruction}"

    @property
    def status_code(self) -> StatusCode:
        return StatusCode.PERMISSION_DENIED

    @property
    def error_info_reason(self) -> str:
        return "FIREWALL_" + self.refusal.value.upper().replace("-", "_")

    def _fields(self) -> tuple[object, ...]:
        return (
            self.check_id,
            self.refusal,
            self.middleware_id,
            self.rule_id,
            self.instruction,
            self.guidance,
        )


# --- Idempotency (gateway extension) ---------------------------------------------------


SendFailure: TypeAlias = SendError | CollectiveError | FirewallSendError
"""The closed failures a send returns (and a kept keyed outcome holds)."""


class IdempotencyConflictError(_EqualByFields, HarnessError):
    """The idempotency key already binds a different input; nothing ran (engine.md §9.1)."""

    def __init__(self, key: str) -> None:
        super().__init__("idempotency-conflict")
        self.key = key

    @property
    def reason(self) -> str:
        return "idempotency-conflict"

    @property
    def message(self) -> str:
        return "send failed: this send repeats an earlier send with different content"

    @property
    def status_code(self) -> StatusCode:
        return StatusCode.ALREADY_EXISTS

    def _fields(self) -> tuple[object, ...]:
        return (self.key,)


# --- MessageTextError ------------------------------------------------------------------


class MessageTextOperation(enum.StrEnum):
    """The operation a refused message text stated (collectives.md §5)."""

    MESSAGE = "message"
    """Plain text: only `to` can be wrong."""
    GATHER = "gather"
    """`{"gather": ...}`."""
    ALL_GATHER = "all_gather"
    """`{"all_gather": ...}`."""
    ANSWER = "answer"
    """`{"action": ...}`."""


class MessageTextError(_EqualByFields, HarnessError):
    """A message text stated an operation but does not fit its shape; nothing was sent."""

    def __init__(self, operation: MessageTextOperation, detail: str) -> None:
        super().__init__(f"{operation.value} not sent: {detail}")
        self.operation = operation
        self.detail = detail

    @property
    def reason(self) -> str:
        return "message-text-invalid"

    @property
    def message(self) -> str:
        return f"{self.operation.value} not sent: {self.detail}"

    @property
    def status_code(self) -> StatusCode:
        return StatusCode.INVALID_ARGUMENT

    def __repr__(self) -> str:
        return f"MessageTextError({self.operation.value!r}, {self.detail!r})"

    def _fields(self) -> tuple[object, ...]:
        return (self.operation, self.detail)


# --- Stream, acknowledgment and connection failures ------------------------------------


class ListenErrorReason(enum.StrEnum):
    """Why a `Messages` stream could not start or ended (engine.md §7)."""

    ALREADY_LISTENING = "already-listening"
    """Another stream is open for this agent, or a takeover ended this one."""
    INCOMPATIBLE_DAEMON = "incompatible-daemon"
    """The daemon speaks another `harness-version`."""
    TRANSPORT_FAILED = "transport-failed"
    """Client side: the stream could not be kept up."""
    DECODE_FAILED = "decode-failed"
    """Client side: a delivery could not be decoded."""


class DeliveryAcknowledgeErrorReason(enum.StrEnum):
    """Why one token of an `Acknowledge` call was not retired (engine.md §7)."""

    UNKNOWN_DELIVERY = "unknown-delivery"
    """No such token for this agent (another agent's token included)."""
    DELIVERY_CONFLICT = "delivery-conflict"
    """The item was replaced at a restart; its replacement has its own token."""
    PERSISTENCE_FAILED = "persistence-failed"
    """The store failed; the item stays unacknowledged, retry."""
    TRANSPORT_FAILED = "transport-failed"
    """Client side: the call did not complete."""


class ConnectErrorReason(enum.StrEnum):
    """Why a client could not acquire an endpoint (engine.md §7)."""

    TRANSPORT_FAILED = "transport-failed"
    """No channel to the address: refused, unresolved, a failed TLS handshake, no answer."""
    INCOMPATIBLE_DAEMON = "incompatible-daemon"
    """No `harness.v1` HarnessEndpointService, or another `harness-version`."""
    DECODE_FAILED = "decode-failed"
    """The daemon's answers could not be decoded."""
    AUTHENTICATION_FAILED = "authentication-failed"
    """A client extension: the gateway refused the agent token (missing, malformed, unknown,
    revoked, or the admin token); the `AuthenticationError` or `PermissionDeniedError` is
    the cause."""


class AuthenticationErrorReason(enum.StrEnum):
    """Why a call's bearer token was refused (UNAUTHENTICATED), on every API that takes one.

    A gateway extension outside the contract's unions: the RPC layer attaches it as the
    `harness.v1.AuthenticationError` detail, and clients read it back. A token of the other
    role is not among them (it is PERMISSION_DENIED `wrong-role`)."""

    MISSING = "missing"
    """The call has no `authorization` metadata."""
    MALFORMED = "malformed"
    """The metadata is not exactly one `Bearer <token>`."""
    UNKNOWN = "unknown"
    """The gateway never issued the token (or its agent is not hosted here)."""
    REVOKED = "revoked"
    """The agent token was revoked or replaced by a rotation."""


class ListenError(_EqualByFields, HarnessError):
    """A `Messages` stream failed."""

    def __init__(self, reason: ListenErrorReason) -> None:
        super().__init__(reason.value)
        self.listen_reason = reason

    @property
    def reason(self) -> ListenErrorReason:
        return self.listen_reason

    @property
    def message(self) -> str:
        return f"listen failed: {self.listen_reason.value}"

    @property
    def status_code(self) -> StatusCode:
        if self.listen_reason in (
            ListenErrorReason.ALREADY_LISTENING,
            ListenErrorReason.INCOMPATIBLE_DAEMON,
        ):
            return StatusCode.FAILED_PRECONDITION
        return StatusCode.UNAVAILABLE

    def _fields(self) -> tuple[object, ...]:
        return (self.listen_reason,)


class DeliveryAcknowledgeError(_EqualByFields, HarnessError):
    """One delivery could not be acknowledged."""

    def __init__(self, reason: DeliveryAcknowledgeErrorReason) -> None:
        super().__init__(reason.value)
        self.acknowledge_reason = reason

    @property
    def reason(self) -> DeliveryAcknowledgeErrorReason:
        return self.acknowledge_reason

    @property
    def message(self) -> str:
        return f"delivery acknowledgment failed: {self.acknowledge_reason.value}"

    @property
    def status_code(self) -> StatusCode:
        # Per-token failures are results in the Acknowledge response, never a status;
        # this code is used only when a client raises one on its own side.
        return StatusCode.FAILED_PRECONDITION

    def _fields(self) -> tuple[object, ...]:
        return (self.acknowledge_reason,)


class ConnectError(_EqualByFields, HarnessError):
    """A client could not acquire a HarnessEndpoint.

    `address` is the `HOST:PORT` dialled and `detail` what went wrong there, worded the same
    by both clients and the CLI (`connect_detail`); the message is `connect failed: <detail>`
    (`connect failed: <reason>` without one)."""

    def __init__(
        self, reason: ConnectErrorReason, *, address: str | None = None, detail: str | None = None
    ) -> None:
        super().__init__(reason.value)
        self.connect_reason = reason
        self.address = address
        self.detail = detail

    @property
    def reason(self) -> ConnectErrorReason:
        return self.connect_reason

    @property
    def message(self) -> str:
        return f"connect failed: {self.detail or self.connect_reason.value}"

    @property
    def status_code(self) -> StatusCode:
        return StatusCode.UNAVAILABLE

    def __repr__(self) -> str:
        return (
            f"ConnectError({self.connect_reason.value!r}, address={self.address!r}, "
            f"detail={self.detail!r})"
        )

    def _fields(self) -> tuple[object, ...]:
        return (self.connect_reason, self.address, self.detail)


# The details of a ConnectError, worded once: the Python client, its CLI and the TypeScript
# client (`errors.ts`, `connectDetail`) say the same for the same failure.

_TOKEN_REFUSALS: dict[AuthenticationErrorReason, str] = {
    AuthenticationErrorReason.MISSING: "the gateway at {address} received no {role}",
    AuthenticationErrorReason.MALFORMED: "the gateway at {address} cannot read this {role}",
    AuthenticationErrorReason.UNKNOWN: "the gateway at {address} does not know this {role}",
    AuthenticationErrorReason.REVOKED: "the gateway at {address} refused this {role}: it was revoked",
}


def token_refused_detail(
    address: str, refusal: AuthenticationErrorReason | None, *, role: str = "agent token"
) -> str:
    """An `authentication-failed` detail: `the gateway at HOST:PORT does not know this agent
    token`. `refusal` None is a token of the other role (PERMISSION_DENIED `wrong-role`);
    `role` is `agent token` or `admin token`."""
    if refusal is None:
        other = "the admin token" if role == "agent token" else "an agent's token"
        return f"the gateway at {address} refused this {role}: it is {other}"
    return _TOKEN_REFUSALS[refusal].format(address=address, role=role)


def unreachable_detail(address: str, cause: str) -> str:
    """A `transport-failed` detail: `cannot reach HOST:PORT: connection refused`."""
    return f"cannot reach {address}: {cause}"


def not_ready_detail(address: str, seconds: float) -> str:
    """A `transport-failed` detail when the address answers but never serves harness.v1."""
    return f"the gateway at {address} did not become ready within {seconds:g}s"


def incompatible_detail(address: str) -> str:
    """An `incompatible-daemon` detail."""
    return f"{address} does not serve this version of the harness.v1 API"


# --- Statuses outside the contract's unions ----------------------------------------------
#
# The gateway answers these before any contract operation runs: a refused token, a token of
# the other role, a gateway not serving, a request no conforming client sends. Each keeps
# the gateway's status text as its `message` (it never holds a token).


class _StatusText(_EqualByFields, HarnessError):
    """A failure whose message is the gateway's status text, with a closed reason."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self._message = message

    @property
    def message(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reason.value!r}, {self._message!r})"

    def _fields(self) -> tuple[object, ...]:
        return (self.reason, self._message)

    @property
    def reason(self) -> enum.StrEnum:
        raise NotImplementedError


class AuthenticationError(_StatusText):
    """The call's bearer token was refused (UNAUTHENTICATED); `reason` says why."""

    def __init__(self, reason: AuthenticationErrorReason, message: str) -> None:
        super().__init__(message)
        self.authentication_reason = reason

    @property
    def reason(self) -> AuthenticationErrorReason:
        return self.authentication_reason

    @property
    def status_code(self) -> StatusCode:
        return StatusCode.UNAUTHENTICATED


class PermissionDeniedReason(enum.StrEnum):
    """Why a valid token may not make the call (PERMISSION_DENIED)."""

    WRONG_ROLE = "wrong-role"
    """An agent token on the management API, or the admin token on the agent API."""


class PermissionDeniedError(_StatusText):
    """A token of the wrong role: valid, but for the other API."""

    def __init__(self, reason: PermissionDeniedReason, message: str) -> None:
        super().__init__(message)
        self.permission_reason = reason

    @property
    def reason(self) -> PermissionDeniedReason:
        return self.permission_reason

    @property
    def status_code(self) -> StatusCode:
        return StatusCode.PERMISSION_DENIED


class UnavailableReason(enum.StrEnum):
    """Why the gateway took no action (UNAVAILABLE, with a RetryInfo): retry later."""

    NOT_READY = "not-ready"
    """Starting or recovering."""
    SHUTTING_DOWN = "shutting-down"
    """Stopping; retry elsewhere or later."""
    NOT_OWNER = "not-owner"
    """A cluster replica that is not (or no longer) the agent's home for this call: its
    partition moved (cluster.md §4.1). Retry: the call reaches the new home."""
    HOME_UNREACHABLE = "home-unreachable"
    """A cluster replica could not reach the agent's home replica; nothing was sent.
    Retry: a lost home's partitions move within seconds (cluster.md §9.1)."""


class UnavailableError(_StatusText):
    """The gateway is not serving; the call had no effect."""

    def __init__(self, reason: UnavailableReason, message: str) -> None:
        super().__init__(message)
        self.unavailable_reason = reason

    @property
    def reason(self) -> UnavailableReason:
        return self.unavailable_reason

    @property
    def status_code(self) -> StatusCode:
        return StatusCode.UNAVAILABLE


class InvalidRequestReason(enum.StrEnum):
    """Why the gateway could not read a request (INVALID_ARGUMENT): a client defect, so the
    same request fails the same way again."""

    INVALID_REQUEST = "invalid-request"
    """A field no conforming client sends: an unset oneof, a NaN, an unknown enum value."""
    MALFORMED_REQUEST = "malformed-request"
    """The body does not decode as the method's protobuf message."""
    INVALID_IDEMPOTENCY_KEY = "invalid-idempotency-key"
    """An idempotency key is not 1 to 128 bytes of UTF-8 text without NUL."""


class InvalidRequestError(_StatusText):
    """A request no conforming client sends; nothing ran. Also what decoding a protobuf
    message that breaks the contract raises (`harness_contract.wire`)."""

    def __init__(
        self, reason: InvalidRequestReason, message: str, *, detail: str | None = None
    ) -> None:
        super().__init__(message)
        self.invalid_reason = reason
        self.detail = detail
        """What is wrong, when the error was raised here (not read from a status)."""

    @classmethod
    def of_field(cls, detail: str) -> InvalidRequestError:
        """`invalid-request` naming what is wrong (`detail` names the field)."""
        return cls(
            InvalidRequestReason.INVALID_REQUEST, f"invalid request: {detail}", detail=detail
        )

    @property
    def reason(self) -> InvalidRequestReason:
        return self.invalid_reason

    @property
    def status_code(self) -> StatusCode:
        return StatusCode.INVALID_ARGUMENT


class InvalidIdempotencyKeyError(InvalidRequestError):
    """An idempotency key is not 1 to 128 UTF-8 bytes without NUL; nothing ran."""

    def __init__(self) -> None:
        super().__init__(
            InvalidRequestReason.INVALID_IDEMPOTENCY_KEY,
            "send failed: an idempotency key is 1 to 128 bytes of UTF-8 text without NUL",
        )

"""The typed errors of the client, and `decode_status`, the one reader of status details.

    HarnessClientError
    ├── SendError                 send failed: <detail, else the reason's text>
    ├── CollectiveError           members-unreachable, schema-invalid, answer-invalid, request-*
    ├── FirewallSendError         send refused by the local firewall (<refusal>): <instruction>
    ├── IdempotencyConflictError  the key already binds a different send (gateway extension)
    ├── MessageTextError          <operation> not sent: <detail>
    ├── ListenError               listen failed: <reason>
    ├── DeliveryAcknowledgeError  delivery acknowledgment failed: <reason>
    ├── ConnectError              connect failed: <reason>
    ├── AuthenticationError       a missing, malformed, unknown or revoked token
    ├── PermissionDeniedError     a token of the wrong role
    ├── UnavailableError          the gateway is not ready or is shutting down (no effect)
    ├── ManagementError           not-found, name-taken, invalid-name, invalid-address
    ├── InvalidRequestError       the gateway could not read the request or its idempotency key
    └── TransportError            the call failed below the API (no typed status)

Each has a closed `reason` and a `message` that is exactly the gateway's model-facing text.
The contract's texts (engine.md §6, collectives.md §3) are repeated here, since the client
never imports the gateway; a test decodes every gateway error and compares the texts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, assert_never

import grpc
from google.protobuf import message as protobuf_message
from google.rpc import error_details_pb2, status_pb2
from harness_contract._gen.harness.v1 import errors_pb2
from harness_contract.errors import AuthenticationErrorReason

from harness_client._items import CheckedGuidance, FirewallRefusal

STATUS_DETAILS_KEY: Final = "grpc-status-details-bin"
"""The trailing metadata key holding the serialized `google.rpc.Status`."""

ERROR_DOMAIN: Final = "harness.v1"
"""The `ErrorInfo.domain` the gateway sets."""


class HarnessClientError(Exception):
    """Root of every error the client raises: a closed `reason` and a `message`."""

    @property
    def reason(self) -> str:
        """The closed reason, kebab-case."""
        raise NotImplementedError

    @property
    def message(self) -> str:
        """The text a host may hand its model."""
        raise NotImplementedError

    def fields(self) -> dict[str, Any]:
        """The typed fields beyond `reason`, in the contract's camelCase (for `--json`)."""
        return {}

    def to_json(self) -> dict[str, Any]:
        """`{type, reason, ...fields}`: every field of the typed error."""
        return {"type": type(self).__name__, "reason": str(self.reason), **self.fields()}

    def __str__(self) -> str:
        return self.message


# --- SendError -------------------------------------------------------------------------


class SendErrorReason(enum.StrEnum):
    """The eleven closed `SendError` reasons."""

    INVALID_ADDRESS = "invalid-address"
    """The address is not `agent:<name>` or `group:<name>,...` by syntax."""
    UNKNOWN_AGENT = "unknown-agent"
    """An agent the address names is not known."""
    MEMBERSHIP_INVALID = "membership-invalid"
    """Self only, a duplicate, or a group outside 3..32 members including self."""
    CONTENT_INVALID = "content-invalid"
    """The content is not valid or is larger than 32,768 bytes."""
    NOT_REGISTERED = "not-registered"
    """This agent has no committed identity in the gateway yet."""
    VERSION_MISMATCH = "version-mismatch"
    """The gateway and the network run incompatible versions; nothing was sent."""
    CERTIFICATION_UNAVAILABLE = "certification-unavailable"
    """The post could not be certified; nothing was sent."""
    PERSISTENCE_FAILED = "persistence-failed"
    """The store definitely failed; nothing was sent."""
    NETWORK_UNAVAILABLE = "network-unavailable"
    """The network (or the gateway) could not be reached; nothing was sent."""
    DELIVERY_PENDING = "delivery-pending"
    """The message will still be sent; never resend it."""
    OUTCOME_UNKNOWN = "outcome-unknown"
    """The message may have been sent."""


SEND_ERROR_TEXTS: Final[dict[SendErrorReason, str]] = {
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
}
"""The model-facing text after `send failed: ` when a SendError has no detail."""

SEND_ERROR_CLAUSES: Final[dict[SendErrorReason, str]] = {
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
}
"""The short texts used inside a members-unreachable failure."""


class SendError(HarnessClientError):
    """A send failed with one of the eleven closed reasons, with an optional detail."""

    def __init__(self, reason: SendErrorReason, detail: str | None = None) -> None:
        super().__init__(reason.value)
        self._reason = reason
        self.detail = detail

    @property
    def reason(self) -> SendErrorReason:
        return self._reason

    @property
    def message(self) -> str:
        return f"send failed: {self.detail if self.detail else SEND_ERROR_TEXTS[self._reason]}"

    def fields(self) -> dict[str, Any]:
        return {} if self.detail is None else {"detail": self.detail}

    def __repr__(self) -> str:
        return f"SendError({self._reason.value!r}, detail={self.detail!r})"


# --- CollectiveError -------------------------------------------------------------------


class CollectiveErrorKind(enum.StrEnum):
    """The closed kinds of a `CollectiveError`."""

    MEMBERS_UNREACHABLE = "members-unreachable"
    """A member is malformed or unknown, or every request post was refused."""
    SCHEMA_INVALID = "schema-invalid"
    """The requested form breaks the form-mode grammar."""
    ANSWER_INVALID = "answer-invalid"
    """The answer does not fit the request's form; the request stays open."""
    REQUEST_NONE = "request-none"
    """No question is open in the conversation."""
    REQUEST_AMBIGUOUS = "request-ambiguous"
    """More than one question is open there."""
    REQUEST_ANSWERED = "request-answered"
    """The question was already answered."""
    REQUEST_EXPIRED = "request-expired"
    """The question's deadline has passed."""


class AnswerFieldReason(enum.StrEnum):
    """Why one field of an answer does not fit the form."""

    MISSING = "missing"
    """A required field is absent."""
    UNEXPECTED = "unexpected"
    """The form does not declare the field."""
    INVALID = "invalid"
    """The value fails the field's keywords; `detail` lists them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UnreachableMember:
    """One member of a members-unreachable failure."""

    member: str
    reason: SendErrorReason
    detail: str | None = None

    @property
    def clause(self) -> str:
        """`<member> is not a known agent`, or `<member> could not be reached: <text>`."""
        if self.reason is SendErrorReason.UNKNOWN_AGENT:
            return f"{self.member} is not a known agent"
        return (
            f"{self.member} could not be reached: {self.detail or SEND_ERROR_CLAUSES[self.reason]}"
        )

    def to_json(self) -> dict[str, Any]:
        """`{member, reason, detail?}`."""
        value: dict[str, Any] = {"member": self.member, "reason": self.reason.value}
        if self.detail is not None:
            value["detail"] = self.detail
        return value


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerFieldIssue:
    """One field clause of an answer-invalid failure."""

    field: str
    reason: AnswerFieldReason
    detail: str | None = None

    @property
    def clause(self) -> str:
        """The field's clause text."""
        match self.reason:
            case AnswerFieldReason.MISSING:
                return f'field "{self.field}" is missing'
            case AnswerFieldReason.UNEXPECTED:
                return f'field "{self.field}" is not in the form'
            case AnswerFieldReason.INVALID:
                return f'field "{self.field}" is invalid ({self.detail})'
            case _:
                assert_never(self.reason)

    def to_json(self) -> dict[str, Any]:
        """`{field, reason, detail?}`."""
        value: dict[str, Any] = {"field": self.field, "reason": self.reason.value}
        if self.detail is not None:
            value["detail"] = self.detail
        return value


@dataclass(frozen=True, slots=True, kw_only=True)
class MembersUnreachable:
    """Members that cannot be asked, in member order."""

    members: tuple[UnreachableMember, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaInvalid:
    """The requested form was refused; `detail` joins every issue with `; `."""

    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerInvalid:
    """The answer does not fit the form; one issue per field."""

    fields: tuple[AnswerFieldIssue, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestNone:
    """No question is open in this conversation."""


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


def _failure_kind(failure: CollectiveFailure) -> CollectiveErrorKind:
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


def _failure_message(failure: CollectiveFailure) -> str:
    match failure:
        case MembersUnreachable(members=members):
            return "send failed: " + "; ".join(member.clause for member in members)
        case SchemaInvalid(detail=detail):
            return f"send failed: the form is invalid ({detail})"
        case AnswerInvalid(fields=fields):
            return "reply failed: " + "; ".join(issue.clause for issue in fields)
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


class CollectiveError(HarnessClientError):
    """A gather, all_gather or answer was refused; `id` names the operation."""

    def __init__(self, id: str, failure: CollectiveFailure) -> None:
        super().__init__(_failure_kind(failure).value)
        self.id = id
        self.failure = failure

    @property
    def kind(self) -> CollectiveErrorKind:
        """The closed kind of `failure`."""
        return _failure_kind(self.failure)

    @property
    def reason(self) -> CollectiveErrorKind:
        return self.kind

    @property
    def message(self) -> str:
        return _failure_message(self.failure)

    def fields(self) -> dict[str, Any]:
        value: dict[str, Any] = {"id": self.id}
        match self.failure:
            case MembersUnreachable(members=members):
                value["members"] = [member.to_json() for member in members]
            case SchemaInvalid(detail=detail):
                value["detail"] = detail
            case AnswerInvalid(fields=fields):
                value["fields"] = [issue.to_json() for issue in fields]
            case _:
                pass
        return value

    def __repr__(self) -> str:
        return f"CollectiveError({self.id!r}, {self.failure!r})"


# --- the other closed errors ----------------------------------------------------------


class FirewallSendError(HarnessClientError):
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

    def fields(self) -> dict[str, Any]:
        return {
            "checkId": self.check_id,
            "middlewareId": self.middleware_id,
            "ruleId": self.rule_id,
            "instruction": self.instruction,
            "guidance": self.guidance.to_json(),
        }


SendFailure: TypeAlias = SendError | CollectiveError | FirewallSendError
"""The closed failures of a send (and of a kept keyed outcome)."""


class IdempotencyConflictError(HarnessClientError):
    """The idempotency key already binds a different send; nothing ran."""

    def __init__(self, key: str) -> None:
        super().__init__("idempotency-conflict")
        self.key = key

    @property
    def reason(self) -> str:
        return "idempotency-conflict"

    @property
    def message(self) -> str:
        return "send failed: this send repeats an earlier send with different content"

    def fields(self) -> dict[str, Any]:
        return {"key": self.key}


class MessageTextOperation(enum.StrEnum):
    """The operation a refused message text stated."""

    MESSAGE = "message"
    """Plain text: only `to` can be wrong."""
    GATHER = "gather"
    """`{"gather": ...}`."""
    ALL_GATHER = "all_gather"
    """`{"all_gather": ...}`."""
    ANSWER = "answer"
    """`{"action": ...}`."""


class MessageTextError(HarnessClientError):
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

    def fields(self) -> dict[str, Any]:
        return {"operation": self.operation.value, "detail": self.detail}


class ListenErrorReason(enum.StrEnum):
    """Why a `messages()` iterator failed."""

    ALREADY_LISTENING = "already-listening"
    """Another stream is open for this agent, or took this one over."""
    INCOMPATIBLE_DAEMON = "incompatible-daemon"
    """The daemon speaks another `harness-version`."""
    TRANSPORT_FAILED = "transport-failed"
    """No stream for 5 minutes."""
    DECODE_FAILED = "decode-failed"
    """A delivery could not be decoded."""


class ListenError(HarnessClientError):
    """The delivery stream failed."""

    def __init__(self, reason: ListenErrorReason) -> None:
        super().__init__(reason.value)
        self._reason = reason

    @property
    def reason(self) -> ListenErrorReason:
        return self._reason

    @property
    def message(self) -> str:
        return f"listen failed: {self._reason.value}"


class DeliveryAcknowledgeErrorReason(enum.StrEnum):
    """Why one delivery was not acknowledged."""

    UNKNOWN_DELIVERY = "unknown-delivery"
    """No such token for this agent."""
    DELIVERY_CONFLICT = "delivery-conflict"
    """The item was replaced at a restart; its replacement has its own token."""
    PERSISTENCE_FAILED = "persistence-failed"
    """The store failed; the item stays, retry."""
    TRANSPORT_FAILED = "transport-failed"
    """The acknowledgment did not reach the daemon."""


class DeliveryAcknowledgeError(HarnessClientError):
    """One delivery could not be acknowledged."""

    def __init__(self, reason: DeliveryAcknowledgeErrorReason) -> None:
        super().__init__(reason.value)
        self._reason = reason

    @property
    def reason(self) -> DeliveryAcknowledgeErrorReason:
        return self._reason

    @property
    def message(self) -> str:
        return f"delivery acknowledgment failed: {self._reason.value}"


class ConnectErrorReason(enum.StrEnum):
    """Why `connect` failed."""

    TRANSPORT_FAILED = "transport-failed"
    """No channel, or authentication refused."""
    INCOMPATIBLE_DAEMON = "incompatible-daemon"
    """No `harness.v1.HarnessEndpointService`, or another `harness-version`."""
    DECODE_FAILED = "decode-failed"
    """The daemon's answers could not be decoded."""


class ConnectError(HarnessClientError):
    """`connect` could not acquire an endpoint."""

    def __init__(self, reason: ConnectErrorReason) -> None:
        super().__init__(reason.value)
        self._reason = reason

    @property
    def reason(self) -> ConnectErrorReason:
        return self._reason

    @property
    def message(self) -> str:
        return f"connect failed: {self._reason.value}"


# --- gateway statuses outside the contract ---------------------------------------------


class _ServerText(HarnessClientError):
    """An error whose message is the gateway's status text."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self._reason = reason
        self._message = message

    @property
    def reason(self) -> str:
        return self._reason

    @property
    def message(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._reason!r}, {self._message!r})"


class AuthenticationError(_ServerText):
    """The token was refused; `reason` says why: `missing`, `malformed`, `unknown` or
    `revoked` (the status's `harness.v1.AuthenticationError` detail). The message is the
    gateway's text, which never holds the token."""

    def __init__(self, reason: AuthenticationErrorReason, message: str) -> None:
        super().__init__(reason.value, message)
        self._auth_reason = reason

    @property
    def reason(self) -> AuthenticationErrorReason:
        return self._auth_reason


class PermissionDeniedError(_ServerText):
    """A token of the wrong role (`wrong-role`): an agent's on management, or the admin's
    on the agent API."""


class UnavailableError(_ServerText):
    """The gateway took no action: `not-ready` (starting) or `shutting-down`; retry later."""


class ManagementError(_ServerText):
    """A management call failed: `not-found`, `name-taken`, `invalid-name` or
    `invalid-address` (a conversation address that is not valid for the agent)."""


class InvalidRequestError(_ServerText):
    """The gateway could not read the request: `invalid-request` (a field no conforming
    client sends), `malformed-request` (the body is not the method's protobuf message) or
    `invalid-idempotency-key` (not 1 to 128 UTF-8 bytes without NUL). A client defect:
    nothing ran, and sending the same request again fails the same way."""


class TransportError(_ServerText):
    """The call failed below the API: `reason` is the gRPC code in kebab-case
    (`unavailable`, `deadline-exceeded`, `cancelled`, `internal`, ...), and the message the
    transport's own text. Whether the call had an effect is unknown unless the code says."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(code.name.lower().replace("_", "-"), message)
        self.code = code


class EndpointClosedError(_ServerText):
    """The endpoint or client was closed (`closed`); open a new one."""

    def __init__(self) -> None:
        super().__init__("closed", "the endpoint is closed")


# --- decoding --------------------------------------------------------------------------

_CLOSED_DETAILS: Final = {
    errors_pb2.SendError.DESCRIPTOR.full_name: errors_pb2.SendError,
    errors_pb2.CollectiveError.DESCRIPTOR.full_name: errors_pb2.CollectiveError,
    errors_pb2.FirewallSendError.DESCRIPTOR.full_name: errors_pb2.FirewallSendError,
    errors_pb2.ListenError.DESCRIPTOR.full_name: errors_pb2.ListenError,
    errors_pb2.DeliveryAcknowledgeError.DESCRIPTOR.full_name: errors_pb2.DeliveryAcknowledgeError,
    errors_pb2.ConnectError.DESCRIPTOR.full_name: errors_pb2.ConnectError,
    errors_pb2.MessageTextError.DESCRIPTOR.full_name: errors_pb2.MessageTextError,
    errors_pb2.IdempotencyConflict.DESCRIPTOR.full_name: errors_pb2.IdempotencyConflict,
    errors_pb2.AuthenticationError.DESCRIPTOR.full_name: errors_pb2.AuthenticationError,
}

_AUTH_REASONS: Final = {reason.name: reason for reason in AuthenticationErrorReason}
"""ErrorInfo reasons of a refused token, read when a status lacks the typed detail (a
gateway from before it)."""
_UNAVAILABLE_REASONS: Final = frozenset({"NOT_READY", "SHUTTING_DOWN"})
_MANAGEMENT_REASONS: Final = frozenset(
    {"NOT_FOUND", "NAME_TAKEN", "INVALID_NAME", "INVALID_ADDRESS"}
)
_INVALID_REQUEST_REASONS: Final = frozenset(
    {"INVALID_REQUEST", "MALFORMED_REQUEST", "INVALID_IDEMPOTENCY_KEY"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RichStatus:
    """What a non-OK status carried: the gateway's ErrorInfo reason, the closed detail, and
    RetryInfo's delay in seconds."""

    code: grpc.StatusCode
    message: str
    reason: str | None
    detail: protobuf_message.Message | None
    retry_delay: float | None


def read_status(error: grpc.aio.AioRpcError) -> RichStatus:
    """Read `grpc-status-details-bin`; a status without (readable) details keeps the rest."""
    code = error.code()
    message = error.details() or ""
    reason: str | None = None
    detail: protobuf_message.Message | None = None
    retry_delay: float | None = None
    for key, value in error.trailing_metadata() or ():
        if key != STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except protobuf_message.DecodeError:
            continue
        message = status.message or message
        for packed in status.details:
            type_name = packed.TypeName()
            if type_name in _CLOSED_DETAILS:
                unpacked = _CLOSED_DETAILS[type_name]()
                if packed.Unpack(unpacked):
                    detail = unpacked
            elif packed.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                packed.Unpack(info)
                if info.domain == ERROR_DOMAIN:
                    reason = info.reason
            elif packed.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                retry = error_details_pb2.RetryInfo()
                packed.Unpack(retry)
                retry_delay = retry.retry_delay.ToTimedelta().total_seconds()
    return RichStatus(
        code=code, message=message, reason=reason, detail=detail, retry_delay=retry_delay
    )


def decode_status(error: grpc.aio.AioRpcError) -> HarnessClientError:
    """The typed error a failed call stands for (the only reader of status details).

    A closed harness error detail decodes to its typed error; the gateway's other statuses
    by their ErrorInfo reason; anything else is a `TransportError`."""
    # Imported here: the protobuf decoders live with the other conversions.
    from harness_client._convert import DecodeFailed, error_from_detail

    status = read_status(error)
    if status.detail is not None:
        try:
            return error_from_detail(status.detail, status.message)
        except DecodeFailed:
            # An enum value from a newer gateway: nothing typed can be said about it.
            return TransportError(status.code, status.message)
    reason = status.reason
    if reason in _AUTH_REASONS and status.code is grpc.StatusCode.UNAUTHENTICATED:
        return AuthenticationError(_AUTH_REASONS[reason], status.message)
    if reason == "WRONG_ROLE":
        return PermissionDeniedError("wrong-role", status.message)
    if reason in _UNAVAILABLE_REASONS:
        return UnavailableError(_kebab(reason), status.message)
    if reason in _MANAGEMENT_REASONS:
        return ManagementError(_kebab(reason), status.message)
    if reason in _INVALID_REQUEST_REASONS:
        return InvalidRequestError(_kebab(reason), status.message)
    return TransportError(status.code, status.message)


def _kebab(reason: str | None) -> str:
    return (reason or "").lower().replace("_", "-")

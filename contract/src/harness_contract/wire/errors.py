"""The closed errors as their protobuf messages, both ways, and the one `ErrorDetail` a
status carries.
"""

from __future__ import annotations

from typing import TypeAlias, assert_never

from harness_contract._gen.harness.v1 import endpoint_pb2, errors_pb2
from harness_contract.errors import (
    AnswerFieldIssue,
    AnswerInvalid,
    AuthenticationError,
    CollectiveError,
    CollectiveFailure,
    ConnectError,
    DeliveryAcknowledgeError,
    FirewallSendError,
    HarnessError,
    IdempotencyConflictError,
    InvalidRequestError,
    ListenError,
    MembersUnreachable,
    MessageTextError,
    RequestAmbiguous,
    RequestAnswered,
    RequestExpired,
    RequestNone,
    SchemaInvalid,
    SendError,
    SendFailure,
    UnreachableMember,
)
from harness_contract.values import SendInput
from harness_contract.wire.bridges import (
    ACK_REASONS,
    AUTHENTICATION_REASONS,
    CONNECT_REASONS,
    FIELD_REASONS,
    LISTEN_REASONS,
    REFUSALS,
    SEND_REASONS,
    TEXT_OPERATIONS,
)
from harness_contract.wire.guidance import checked_guidance_from_proto, checked_guidance_to_proto
from harness_contract.wire.sends import send_input_from_proto, send_input_to_proto


def send_error_to_proto(error: SendError) -> errors_pb2.SendError:
    """A SendError with its optional detail."""
    result = errors_pb2.SendError(reason=SEND_REASONS.to_proto(error.send_reason))
    if error.detail is not None:
        result.detail = error.detail
    return result


def send_error_from_proto(error: errors_pb2.SendError) -> SendError:
    """A SendError."""
    return SendError(
        SEND_REASONS.from_proto(error.reason, "reason"),
        error.detail if error.HasField("detail") else None,
    )


def collective_error_to_proto(error: CollectiveError) -> errors_pb2.CollectiveError:
    """A CollectiveError: the operation id and its failure."""
    result = errors_pb2.CollectiveError(id=error.id)
    failure = error.failure
    match failure:
        case MembersUnreachable(members=members):
            result.members_unreachable.SetInParent()
            for member in members:
                entry = result.members_unreachable.members.add(
                    member=member.member, reason=SEND_REASONS.to_proto(member.reason)
                )
                if member.detail is not None:
                    entry.detail = member.detail
        case SchemaInvalid(detail=detail):
            result.schema_invalid.detail = detail
        case AnswerInvalid(fields=fields):
            result.answer_invalid.SetInParent()
            for issue in fields:
                field = result.answer_invalid.fields.add(
                    field=issue.field, reason=FIELD_REASONS.to_proto(issue.reason)
                )
                if issue.detail is not None:
                    field.detail = issue.detail
        case RequestNone(own_question=own_question):
            result.request_none.SetInParent()
            result.request_none.own_question = own_question
        case RequestAmbiguous():
            result.request_ambiguous.SetInParent()
        case RequestAnswered():
            result.request_answered.SetInParent()
        case RequestExpired():
            result.request_expired.SetInParent()
        case _:
            assert_never(failure)
    return result


def collective_error_from_proto(error: errors_pb2.CollectiveError) -> CollectiveError:
    """A CollectiveError; an unset failure is `InvalidRequestError`."""
    kind = error.WhichOneof("failure")
    failure: CollectiveFailure
    if kind == "members_unreachable":
        failure = MembersUnreachable(
            members=tuple(
                UnreachableMember(
                    member=member.member,
                    reason=SEND_REASONS.from_proto(member.reason, "members.reason"),
                    detail=member.detail if member.HasField("detail") else None,
                )
                for member in error.members_unreachable.members
            )
        )
    elif kind == "schema_invalid":
        failure = SchemaInvalid(detail=error.schema_invalid.detail)
    elif kind == "answer_invalid":
        failure = AnswerInvalid(
            fields=tuple(
                AnswerFieldIssue(
                    field=field.field,
                    reason=FIELD_REASONS.from_proto(field.reason, "fields.reason"),
                    detail=field.detail if field.HasField("detail") else None,
                )
                for field in error.answer_invalid.fields
            )
        )
    elif kind == "request_none":
        failure = RequestNone(own_question=error.request_none.own_question)
    elif kind == "request_ambiguous":
        failure = RequestAmbiguous()
    elif kind == "request_answered":
        failure = RequestAnswered()
    elif kind == "request_expired":
        failure = RequestExpired()
    else:
        raise InvalidRequestError.of_field("collective error: no failure")
    return CollectiveError(error.id, failure)


def firewall_error_to_proto(error: FirewallSendError) -> errors_pb2.FirewallSendError:
    """A FirewallSendError (its instruction travels inside `guidance`)."""
    return errors_pb2.FirewallSendError(
        check_id=error.check_id,
        refusal=REFUSALS.to_proto(error.refusal),
        middleware_id=error.middleware_id,
        rule_id=error.rule_id,
        guidance=checked_guidance_to_proto(error.guidance),
        instruction=error.instruction,
    )


def firewall_error_from_proto(error: errors_pb2.FirewallSendError) -> FirewallSendError:
    """A FirewallSendError (its `instruction` is the refusing rule's text)."""
    return FirewallSendError(
        check_id=error.check_id,
        refusal=REFUSALS.from_proto(error.refusal, "refusal"),
        middleware_id=error.middleware_id,
        rule_id=error.rule_id,
        instruction=error.instruction,
        guidance=checked_guidance_from_proto(error.guidance),
    )


def send_failure_to_proto(error: HarnessError) -> errors_pb2.SendFailure:
    """A kept send failure; only the three closed send failures can be one."""
    result = errors_pb2.SendFailure()
    match error:
        case SendError():
            result.send_error.CopyFrom(send_error_to_proto(error))
        case CollectiveError():
            result.collective_error.CopyFrom(collective_error_to_proto(error))
        case FirewallSendError():
            result.firewall_send_error.CopyFrom(firewall_error_to_proto(error))
        case _:
            raise ValueError(f"{type(error).__name__} is not a send failure")
    return result


def send_failure_from_proto(failure: errors_pb2.SendFailure) -> SendFailure:
    """A kept send failure."""
    kind = failure.WhichOneof("failure")
    if kind == "send_error":
        return send_error_from_proto(failure.send_error)
    if kind == "collective_error":
        return collective_error_from_proto(failure.collective_error)
    if kind == "firewall_send_error":
        return firewall_error_from_proto(failure.firewall_send_error)
    raise InvalidRequestError.of_field("send failure: no failure")


def listen_error_to_proto(error: ListenError) -> errors_pb2.ListenError:
    """A ListenError."""
    return errors_pb2.ListenError(reason=LISTEN_REASONS.to_proto(error.listen_reason))


def listen_error_from_proto(error: errors_pb2.ListenError) -> ListenError:
    """A ListenError."""
    return ListenError(LISTEN_REASONS.from_proto(error.reason, "reason"))


def acknowledge_error_to_proto(
    error: DeliveryAcknowledgeError,
) -> errors_pb2.DeliveryAcknowledgeError:
    """A DeliveryAcknowledgeError."""
    return errors_pb2.DeliveryAcknowledgeError(
        reason=ACK_REASONS.to_proto(error.acknowledge_reason)
    )


def acknowledge_error_from_proto(
    error: errors_pb2.DeliveryAcknowledgeError,
) -> DeliveryAcknowledgeError:
    """A DeliveryAcknowledgeError."""
    return DeliveryAcknowledgeError(ACK_REASONS.from_proto(error.reason, "reason"))


def connect_error_to_proto(error: ConnectError) -> errors_pb2.ConnectError:
    """A ConnectError."""
    return errors_pb2.ConnectError(
        reason=CONNECT_REASONS.to_proto(error.connect_reason),
        address=error.address,
        detail=error.detail,
    )


def connect_error_from_proto(error: errors_pb2.ConnectError) -> ConnectError:
    """A ConnectError."""
    return ConnectError(
        CONNECT_REASONS.from_proto(error.reason, "reason"),
        address=error.address if error.HasField("address") else None,
        detail=error.detail if error.HasField("detail") else None,
    )


def message_text_error_to_proto(error: MessageTextError) -> errors_pb2.MessageTextError:
    """A MessageTextError."""
    return errors_pb2.MessageTextError(
        operation=TEXT_OPERATIONS.to_proto(error.operation), detail=error.detail
    )


def message_text_error_from_proto(error: errors_pb2.MessageTextError) -> MessageTextError:
    """A MessageTextError."""
    return MessageTextError(TEXT_OPERATIONS.from_proto(error.operation, "operation"), error.detail)


def parse_result_to_proto(
    result: SendInput | MessageTextError,
) -> endpoint_pb2.ParseMessageTextResponse:
    """The contract's `Either<SendInput, MessageTextError>`: the send, or why the text fails."""
    match result:
        case MessageTextError():
            return endpoint_pb2.ParseMessageTextResponse(error=message_text_error_to_proto(result))
        case _:
            return endpoint_pb2.ParseMessageTextResponse(input=send_input_to_proto(result))


def authentication_error_to_proto(error: AuthenticationError) -> errors_pb2.AuthenticationError:
    """The detail of an UNAUTHENTICATED status (a gateway extension; never the token)."""
    return errors_pb2.AuthenticationError(
        reason=AUTHENTICATION_REASONS.to_proto(error.authentication_reason)
    )


def parse_result_from_proto(
    response: endpoint_pb2.ParseMessageTextResponse,
) -> SendInput | MessageTextError:
    """The send a text states, or why it fails."""
    kind = response.WhichOneof("result")
    if kind == "input":
        return send_input_from_proto(response.input)
    if kind == "error":
        return message_text_error_from_proto(response.error)
    raise InvalidRequestError.of_field("parse result: neither input nor error")


def idempotency_conflict_to_proto(
    error: IdempotencyConflictError,
) -> errors_pb2.IdempotencyConflict:
    """The conflicting key."""
    return errors_pb2.IdempotencyConflict(key=error.key)


def idempotency_conflict_from_proto(
    error: errors_pb2.IdempotencyConflict,
) -> IdempotencyConflictError:
    """The conflicting key."""
    return IdempotencyConflictError(error.key)


ErrorDetail: TypeAlias = (
    errors_pb2.SendError
    | errors_pb2.CollectiveError
    | errors_pb2.FirewallSendError
    | errors_pb2.ListenError
    | errors_pb2.DeliveryAcknowledgeError
    | errors_pb2.ConnectError
    | errors_pb2.MessageTextError
    | errors_pb2.IdempotencyConflict
    | errors_pb2.AuthenticationError
)
"""The closed protobuf errors a status may carry as its first detail."""


def error_to_proto(error: HarnessError) -> ErrorDetail | None:
    """The closed protobuf error a status carries for `error`, or None when it has none."""
    match error:
        case SendError():
            return send_error_to_proto(error)
        case CollectiveError():
            return collective_error_to_proto(error)
        case FirewallSendError():
            return firewall_error_to_proto(error)
        case ListenError():
            return listen_error_to_proto(error)
        case DeliveryAcknowledgeError():
            return acknowledge_error_to_proto(error)
        case ConnectError():
            return connect_error_to_proto(error)
        case MessageTextError():
            return message_text_error_to_proto(error)
        case IdempotencyConflictError():
            return idempotency_conflict_to_proto(error)
        case AuthenticationError():
            return authentication_error_to_proto(error)
        case _:
            return None


def error_from_proto(detail: ErrorDetail, message: str = "") -> HarnessError:
    """The typed error a closed protobuf error stands for; `message` is the status text
    (only an `AuthenticationError` keeps it: the others rebuild theirs from the fields)."""
    match detail:
        case errors_pb2.SendError():
            return send_error_from_proto(detail)
        case errors_pb2.CollectiveError():
            return collective_error_from_proto(detail)
        case errors_pb2.FirewallSendError():
            return firewall_error_from_proto(detail)
        case errors_pb2.ListenError():
            return listen_error_from_proto(detail)
        case errors_pb2.DeliveryAcknowledgeError():
            return acknowledge_error_from_proto(detail)
        case errors_pb2.ConnectError():
            return connect_error_from_proto(detail)
        case errors_pb2.MessageTextError():
            return message_text_error_from_proto(detail)
        case errors_pb2.IdempotencyConflict():
            return idempotency_conflict_from_proto(detail)
        case errors_pb2.AuthenticationError():
            return AuthenticationError(
                AUTHENTICATION_REASONS.from_proto(detail.reason, "reason"), message
            )
        case _:
            assert_never(detail)

"""Inbound messages, items, members' outcomes and deliveries, both ways."""

from __future__ import annotations

from typing import assert_never

from harness_contract._gen.harness.v1 import types_pb2
from harness_contract.errors import InvalidRequestError
from harness_contract.guidance import Withheld
from harness_contract.values import (
    Answered,
    CollectiveRequestItem,
    CollectiveResultItem,
    Declined,
    Delivery,
    DirectMessage,
    GroupMessage,
    InboundItem,
    InboundMessage,
    Invalid,
    MemberOutcome,
    MemberResult,
    MulticastItem,
    NoAnswer,
    OperationFailedItem,
)
from harness_contract.wire.bridges import OPS
from harness_contract.wire.guidance import (
    local_guidance_from_proto,
    local_guidance_to_proto,
    withheld_from_proto,
    withheld_to_proto,
)
from harness_contract.wire.jsonvalue import content_from_proto, content_to_proto, struct_to_proto
from harness_contract.wire.sends import (
    answer_content_from_proto,
    answer_content_to_proto,
    schema_from_proto,
)


def inbound_message_to_proto(message: InboundMessage) -> types_pb2.InboundMessage:
    """A direct or group message."""
    result = types_pb2.InboundMessage()
    match message:
        case DirectMessage():
            result.direct.post_id = message.post_id
            result.direct.address = message.address
            result.direct.sender = message.sender
            result.direct.content.CopyFrom(content_to_proto(message.content))
        case GroupMessage():
            result.group.post_id = message.post_id
            result.group.address = message.address
            result.group.sender = message.sender
            result.group.members.extend(message.members)
            result.group.content.CopyFrom(content_to_proto(message.content))
        case _:
            assert_never(message)
    return result


def inbound_message_from_proto(message: types_pb2.InboundMessage) -> InboundMessage:
    """A direct or group message."""
    kind = message.WhichOneof("kind")
    if kind == "direct":
        direct = message.direct
        return DirectMessage(
            post_id=direct.post_id,
            address=direct.address,
            sender=direct.sender,
            content=content_from_proto(direct.content),
        )
    if kind == "group":
        group = message.group
        return GroupMessage(
            post_id=group.post_id,
            address=group.address,
            sender=group.sender,
            members=tuple(group.members),
            content=content_from_proto(group.content),
        )
    raise InvalidRequestError.of_field("message: neither direct nor group")


def member_outcome_to_proto(outcome: MemberOutcome) -> types_pb2.CollectiveMemberOutcome:
    """One member's outcome, Withheld included."""
    result = types_pb2.CollectiveMemberOutcome()
    match outcome:
        case Answered(content=content):
            result.answered.content.CopyFrom(answer_content_to_proto(content))
        case Declined():
            result.declined.SetInParent()
        case Invalid(reason=reason):
            result.invalid.reason = reason
        case NoAnswer():
            result.no_answer.SetInParent()
        case Withheld():
            result.withheld.CopyFrom(withheld_to_proto(outcome))
        case _:
            assert_never(outcome)
    return result


def member_outcome_from_proto(outcome: types_pb2.CollectiveMemberOutcome) -> MemberOutcome:
    """One member's outcome."""
    kind = outcome.WhichOneof("kind")
    if kind == "answered":
        return Answered(content=answer_content_from_proto(outcome.answered.content))
    if kind == "declined":
        return Declined()
    if kind == "invalid":
        return Invalid(reason=outcome.invalid.reason)
    if kind == "no_answer":
        return NoAnswer()
    if kind == "withheld":
        return withheld_from_proto(outcome.withheld)
    raise InvalidRequestError.of_field("outcome: no kind")


def item_to_proto(item: InboundItem) -> types_pb2.InboundItem:
    """Any of the four item kinds (`sender` carries the contract's `from`)."""
    result = types_pb2.InboundItem()
    match item:
        case MulticastItem(message=message):
            result.multicast.message.CopyFrom(inbound_message_to_proto(message))
        case CollectiveRequestItem():
            request = result.collective_request
            request.op = OPS.to_proto(item.op)
            request.id = item.id
            request.post_id = item.post_id
            request.sender = item.sender
            request.to = item.to
            request.question = item.question
            request.requested_schema.CopyFrom(struct_to_proto(item.requested_schema))
            request.deadline_at = item.deadline_at
        case CollectiveResultItem():
            collective = result.collective_result
            collective.op = OPS.to_proto(item.op)
            collective.id = item.id
            collective.to = item.to
            if isinstance(item.question, str):
                collective.question.text = item.question
            else:
                collective.question.withheld.CopyFrom(withheld_to_proto(item.question))
            for entry in item.outcomes:
                collective.outcomes.add(
                    member=entry.member, outcome=member_outcome_to_proto(entry.outcome)
                )
        case OperationFailedItem():
            result.operation_failed.id = item.id
            result.operation_failed.to = item.to
            result.operation_failed.error = item.error
        case _:
            assert_never(item)
    return result


def item_from_proto(item: types_pb2.InboundItem) -> InboundItem:
    """Any of the four item kinds."""
    kind = item.WhichOneof("kind")
    if kind == "multicast":
        return MulticastItem(message=inbound_message_from_proto(item.multicast.message))
    if kind == "collective_request":
        request = item.collective_request
        return CollectiveRequestItem(
            op=OPS.from_proto(request.op, "op"),
            id=request.id,
            post_id=request.post_id,
            sender=request.sender,
            to=request.to,
            question=request.question,
            requested_schema=schema_from_proto(request.requested_schema),
            deadline_at=request.deadline_at,
        )
    if kind == "collective_result":
        collective = item.collective_result
        question_kind = collective.question.WhichOneof("kind")
        question: str | Withheld
        if question_kind == "text":
            question = collective.question.text
        elif question_kind == "withheld":
            question = withheld_from_proto(collective.question.withheld)
        else:
            raise InvalidRequestError.of_field("collective_result.question: no kind")
        return CollectiveResultItem(
            op=OPS.from_proto(collective.op, "op"),
            id=collective.id,
            to=collective.to,
            question=question,
            outcomes=tuple(
                MemberResult(member=entry.member, outcome=member_outcome_from_proto(entry.outcome))
                for entry in collective.outcomes
            ),
        )
    if kind == "operation_failed":
        failed = item.operation_failed
        return OperationFailedItem(id=failed.id, to=failed.to, error=failed.error)
    raise InvalidRequestError.of_field("item: no kind")


def delivery_to_proto(delivery: Delivery) -> types_pb2.InboundDelivery:
    """A delivery under its token; guidance only when the firewall gave some."""
    result = types_pb2.InboundDelivery(
        delivery_token=delivery.token, item=item_to_proto(delivery.item)
    )
    if delivery.guidance is not None:
        result.guidance.CopyFrom(local_guidance_to_proto(delivery.guidance))
    return result


def delivery_from_proto(delivery: types_pb2.InboundDelivery) -> Delivery:
    """A delivery."""
    return Delivery(
        token=delivery.delivery_token,
        item=item_from_proto(delivery.item),
        guidance=(
            local_guidance_from_proto(delivery.guidance) if delivery.HasField("guidance") else None
        ),
    )

"""The subjects of a check, from a send or an inbox item (firewall.md §2).

Send: one subject `out` — the message, the question (one check for every member of a
gather) or the answer's JSON text — from the agent to the canonical members other than
itself. Delivery: a message or request is one subject under its PostId, from its sender to
the conversation's other members; a collective result is checked as separate subjects, its
question (under the operation id) and each answered member's content (under the member's
address). `operationFailed` is local text and has none.

An answer's subject carries, beside its JSON text, every key and value of its content as
the text it is (`content_texts`): in JSON a newline is `\\n` and a quote `\\"`, so a pattern
written for messages (`secret\\s+plan`) would miss in the JSON what it refuses in a message.
A question's subject (a gather or all_gather sent, a request received) carries the question
and every key and value of its form: a form's field names, titles, descriptions and choices
reach the asked member's model as surely as the question does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Final

from harness_contract.addresses import GROUP_PREFIX, agent_address
from harness_contract.content import text_of
from harness_contract.guidance import GuidanceSubject
from harness_contract.jsonvalue import JsonValue, canonical_json
from harness_contract.values import (
    Answered,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    DirectMessage,
    InboundItem,
    MulticastItem,
    OperationFailedItem,
)

from gateway.firewall.model import Subject, SubjectRole

OUT: Final = "out"
"""The subject id of a send's text."""


def outgoing(
    agent: str,
    recipients: Sequence[str],
    text: str,
    *,
    content: Mapping[str, JsonValue] | None = None,
    form: Mapping[str, JsonValue] | None = None,
) -> Subject:
    """A send's subject: `agent`'s text to the named recipients (names, not addresses).

    `content` is an answer's content (empty for a decline), `text` then its JSON text;
    `form` a gather's or all_gather's requested schema, `text` then its question; both
    None when `text` is a message."""
    values: tuple[str, ...] | None = None
    if content is not None:
        values = content_texts(content)
    elif form is not None:
        values = question_texts(text, form)
    return Subject(
        subject=GuidanceSubject(
            id=OUT,
            sender=agent_address(agent),
            recipients=tuple(agent_address(name) for name in recipients),
            text=text,
        ),
        role=SubjectRole.OUTGOING,
        values=values,
    )


def question_texts(question: str, form: Mapping[str, JsonValue]) -> tuple[str, ...]:
    """A question and every key and value of its form (JSON-schema keywords included),
    each as the text it is."""
    return (question, *content_texts(form))


def content_texts(content: Mapping[str, JsonValue]) -> tuple[str, ...]:
    """Every key and every value of `content`, depth first in key order, each as the text
    it is: a string unescaped, a number, boolean or null as written in canonical JSON.

    Keys are included: the model reading an answer reads its field names too (an answer's
    are its form's, written by the asker), and a rule that should see them must not depend
    on where a word sits."""
    return tuple(_texts(dict(content)))


def _texts(value: JsonValue) -> Iterator[str]:
    match value:
        case str():
            yield value
        case Mapping():
            for key in sorted(value):
                yield key
                yield from _texts(value[key])
        case Sequence():
            for each in value:
                yield from _texts(each)
        case _:
            yield canonical_json(value).decode()


def of_item(agent: str, item: InboundItem, *, requester: str | None) -> tuple[Subject, ...]:
    """The subjects of an inbox item delivered to `agent`, in check order.

    `requester` names who asked a collective result's question (None: `agent` itself)."""
    me = agent_address(agent)
    match item:
        case MulticastItem(message=message):
            if isinstance(message, DirectMessage):
                return (_subject(message.post_id, message.sender, (me,), text_of(message.content)),)
            others = tuple(member for member in message.members if member != message.sender)
            return (
                Subject(
                    subject=GuidanceSubject(
                        id=message.post_id,
                        sender=message.sender,
                        recipients=others,
                        text=text_of(message.content),
                    ),
                    role=SubjectRole.GROUP,
                ),
            )
        case CollectiveRequestItem():
            recipients = (
                (me,)
                if item.op is CollectiveOp.GATHER
                else tuple(member for member in _group_members(item.to) if member != item.sender)
            )
            return (
                Subject(
                    subject=GuidanceSubject(
                        id=item.post_id,
                        sender=item.sender,
                        recipients=recipients,
                        text=item.question,
                    ),
                    role=SubjectRole.REQUEST,
                    deadline_at=item.deadline_at,
                    values=question_texts(item.question, item.requested_schema),
                ),
            )
        case CollectiveResultItem():
            return _result_subjects(item, agent_address(requester or agent))
        case OperationFailedItem():
            return ()


def _result_subjects(item: CollectiveResultItem, asker: str) -> tuple[Subject, ...]:
    members = tuple(result.member for result in item.outcomes)
    subjects: list[Subject] = []
    if isinstance(item.question, str):
        subjects.append(
            Subject(
                subject=GuidanceSubject(
                    id=item.id,
                    sender=asker,
                    recipients=tuple(member for member in members if member != asker),
                    text=item.question,
                ),
                role=SubjectRole.QUESTION,
            )
        )
    for result in item.outcomes:
        if not isinstance(result.outcome, Answered):
            continue
        recipients = (
            (asker,)
            if item.op is CollectiveOp.GATHER
            else tuple(member for member in (asker, *members) if member != result.member)
        )
        subjects.append(
            Subject(
                subject=GuidanceSubject(
                    id=result.member,
                    sender=result.member,
                    recipients=tuple(dict.fromkeys(recipients)),
                    text=canonical_json(dict(result.outcome.content)).decode(),
                ),
                role=SubjectRole.ANSWER,
                values=content_texts(result.outcome.content),
            )
        )
    return tuple(subjects)


def _subject(subject_id: str, sender: str, recipients: tuple[str, ...], text: str) -> Subject:
    return Subject(
        subject=GuidanceSubject(id=subject_id, sender=sender, recipients=recipients, text=text),
        role=SubjectRole.DIRECT,
    )


def _group_members(address: str) -> tuple[str, ...]:
    if not address.startswith(GROUP_PREFIX):
        return ()
    return tuple(agent_address(name) for name in address[len(GROUP_PREFIX) :].split(","))

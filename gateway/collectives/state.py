"""Collective state of one hosted agent, and its durable rows (collectives.md §4.7).

`Operation` is a requester's open gather or all_gather; `Request` is a member's received
request. Both are plain mutable records, owned by `gateway.collectives.runtime.Collectives`
(operations) and its `Responder` (requests), and persisted as canonical JSON rows in the
same transaction as the change that made them: the request intents (operation), the inbox
item or a classified answer (request), so a restart rebuilds exactly the state that was
committed. `judge` is how one answer counts against its operation's form, on either side.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from harness_contract.codec import (
    CodecError,
    answer_content_from_json,
    answer_content_to_json,
    outcome_from_json,
    outcome_to_json,
)
from harness_contract.errors import answer_issues_text
from harness_contract.forms import check_answer
from harness_contract.jsonvalue import JsonValue, canonical_json, parse_canonical_json
from harness_contract.kinds import CollectiveEnd
from harness_contract.values import (
    AnswerContent,
    Answered,
    CollectiveOp,
    Declined,
    Invalid,
    MemberOutcome,
)

ROW_VERSION: Final = 1
"""Version of the row shapes below; a row of another version is unreadable."""

RETENTION_MS: Final = 3_600_000
"""A member keeps a received request until one hour past its deadline (§4.6)."""


class OperationState(enum.StrEnum):
    """A requester's operation."""

    OPEN = "open"
    """Collecting answers."""
    CLOSING = "closing"
    """all_gather: completed, its close is being certified."""
    DONE = "done"
    """Its one result or refusal was emitted."""


class RequestState(enum.StrEnum):
    """A member's received request (collectives.md §1.5, §3.1)."""

    OPEN = "open"
    SENDING = "sending"
    ANSWERED = "answered"
    CLOSED = "closed"


def judge(schema: dict[str, JsonValue], content: AnswerContent | None) -> MemberOutcome:
    """How an answer counts: declined (no content), invalid against the form, or answered."""
    if content is None:
        return Declined()
    issues = check_answer(schema, content)
    if issues:
        return Invalid(reason=answer_issues_text(issues))
    return Answered(content=content)


@dataclass(eq=False)
class Operation:
    """A requester's gather or all_gather."""

    op: CollectiveOp
    id: str
    to: str
    """The canonical operation address."""
    question: str
    schema: dict[str, JsonValue]
    deadline_at: int
    members: tuple[str, ...]
    """Asked agents' names, member order."""
    conversation_id: str | None = None
    """all_gather: the group conversation (where the close goes)."""
    post_ids: dict[str, str] = field(default_factory=dict)
    """gather: member → request PostId; all_gather: `""` → the one request PostId."""
    outcomes: dict[str, MemberOutcome] = field(default_factory=dict)
    answer_hashes: dict[str, str] = field(default_factory=dict)
    """all_gather: member → record hash of its counted answer."""
    requests_settled: bool = False
    state: OperationState = OperationState.OPEN
    close_post_id: str | None = None
    end: CollectiveEnd | None = None
    """How it completed: `settled` or `deadline` (metrics)."""

    def to_row(self) -> bytes:
        return canonical_json(
            {
                "v": float(ROW_VERSION),
                "op": self.op.value,
                "id": self.id,
                "to": self.to,
                "question": self.question,
                "schema": self.schema,
                "deadlineAt": float(self.deadline_at),
                "members": self.members,
                "conversationId": self.conversation_id,
                "postIds": dict(self.post_ids),
                "outcomes": {
                    name: outcome_to_json(outcome) for name, outcome in self.outcomes.items()
                },
                "answerHashes": dict(self.answer_hashes),
                "requestsSettled": self.requests_settled,
                "state": self.state.value,
                "closePostId": self.close_post_id,
                "end": None if self.end is None else self.end.value,
            }
        )

    @classmethod
    def from_row(cls, data: bytes) -> Operation:
        """Read a row; raises `CodecError`."""
        value = _object(data)
        try:
            return cls(
                op=CollectiveOp(_str(value["op"])),
                id=_str(value["id"]),
                to=_str(value["to"]),
                question=_str(value["question"]),
                schema=dict(_mapping(value["schema"])),
                deadline_at=int(_number(value["deadlineAt"])),
                members=tuple(_str(name) for name in _list(value["members"])),
                conversation_id=_optional_str(value["conversationId"]),
                post_ids={key: _str(item) for key, item in _mapping(value["postIds"]).items()},
                outcomes={
                    key: outcome_from_json(item)
                    for key, item in _mapping(value["outcomes"]).items()
                },
                answer_hashes={
                    key: _str(item) for key, item in _mapping(value["answerHashes"]).items()
                },
                requests_settled=bool(value["requestsSettled"]),
                state=OperationState(_str(value["state"])),
                close_post_id=_optional_str(value["closePostId"]),
                end=None if value["end"] is None else CollectiveEnd(_str(value["end"])),
            )
        except (KeyError, ValueError, TypeError) as error:
            raise CodecError(f"operation row: {error}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedAnswer:
    """An all_gather member's record of a peer's first answer, by record hash."""

    record_hash: str
    content: AnswerContent | None
    """None for a decline."""


@dataclass(eq=False)
class Request:
    """A member's received request."""

    op: CollectiveOp
    id: str
    post_id: str
    requester: str
    """The requester's name."""
    to: str
    """The conversation it arrived in, as this member addresses it."""
    conversation_id: str
    question: str
    schema: dict[str, JsonValue]
    deadline_at: int
    members: tuple[str, ...]
    """The asked members (all_gather: the group minus the requester), member order."""
    state: RequestState = RequestState.OPEN
    answer_post_id: str | None = None
    answer_content: AnswerContent | None = None
    """This member's own answer while it is being sent (None: a decline)."""
    answers: dict[str, RecordedAnswer] = field(default_factory=dict)
    held_close: tuple[str, ...] | None = None
    closed: bool = False

    def to_row(self) -> bytes:
        return canonical_json(
            {
                "v": float(ROW_VERSION),
                "op": self.op.value,
                "id": self.id,
                "postId": self.post_id,
                "requester": self.requester,
                "to": self.to,
                "conversationId": self.conversation_id,
                "question": self.question,
                "schema": self.schema,
                "deadlineAt": float(self.deadline_at),
                "members": self.members,
                "state": self.state.value,
                "answerPostId": self.answer_post_id,
                "answerContent": None
                if self.answer_content is None
                else answer_content_to_json(self.answer_content),
                "answers": {
                    name: {
                        "recordHash": answer.record_hash,
                        "content": None
                        if answer.content is None
                        else answer_content_to_json(answer.content),
                    }
                    for name, answer in self.answers.items()
                },
                "heldClose": self.held_close,
                "closed": self.closed,
            }
        )

    @classmethod
    def from_row(cls, data: bytes) -> Request:
        """Read a row; raises `CodecError`."""
        value = _object(data)
        try:
            answers = {}
            for name, item in _mapping(value["answers"]).items():
                entry = _mapping(item)
                content = entry["content"]
                answers[name] = RecordedAnswer(
                    record_hash=_str(entry["recordHash"]),
                    content=None if content is None else answer_content_from_json(content),
                )
            held = value["heldClose"]
            return cls(
                op=CollectiveOp(_str(value["op"])),
                id=_str(value["id"]),
                post_id=_str(value["postId"]),
                requester=_str(value["requester"]),
                to=_str(value["to"]),
                conversation_id=_str(value["conversationId"]),
                question=_str(value["question"]),
                schema=dict(_mapping(value["schema"])),
                deadline_at=int(_number(value["deadlineAt"])),
                members=tuple(_str(name) for name in _list(value["members"])),
                state=RequestState(_str(value["state"])),
                answer_post_id=_optional_str(value["answerPostId"]),
                answer_content=None
                if value["answerContent"] is None
                else answer_content_from_json(value["answerContent"]),
                answers=answers,
                held_close=None if held is None else tuple(_str(item) for item in _list(held)),
                closed=bool(value["closed"]),
            )
        except (KeyError, ValueError, TypeError) as error:
            raise CodecError(f"request row: {error}") from None


def _object(data: bytes) -> Mapping[str, JsonValue]:
    try:
        value = parse_canonical_json(data)
    except ValueError as error:
        raise CodecError(f"row: {error}") from None
    if not isinstance(value, Mapping) or value.get("v") != ROW_VERSION:
        raise CodecError("row: not a collective row of this version")
    return value


def _mapping(value: JsonValue) -> Mapping[str, JsonValue]:
    if not isinstance(value, Mapping):
        raise TypeError("expected an object")
    return value


def _list(value: JsonValue) -> tuple[JsonValue, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise TypeError("expected an array")
    return tuple(value)


def _str(value: JsonValue) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _optional_str(value: JsonValue) -> str | None:
    return None if value is None else _str(value)


def _number(value: JsonValue) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("expected a number")
    return float(value)

"""What a firewall check sees and what a middleware answers (firewall.md §1-§3).

A check is one run of the pipeline over one or more subjects, with a fresh `checkId`. Each
subject is a contract `GuidanceSubject` plus the role it plays (which text of which item),
which the built-ins read: `turn-guidance` derives its expectation from the role, and a
withhold becomes `Withheld` only for a collective result's question or answer (a message
is never rewritten, firewall.md §2.2).

A middleware answers with one `Judgement`: `Allow` (zero or more instructions), `Refuse`
(a send only) or `Withhold` (a delivery only). The pipeline combines the judgements in the
configured order; the first refusal decides.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from harness_contract.errors import FirewallRefusal
from harness_contract.guidance import GuidanceSubject, Instruction


class Direction(enum.StrEnum):
    """Where a check runs (also the `direction` label of the firewall metrics)."""

    SEND = "send"
    """An outgoing send, before its intent is bound."""
    DELIVERY = "delivery"
    """An inbound item, before it is stored."""


class MiddlewareKind(enum.StrEnum):
    """The middleware kinds of firewall.md §4 (also the `kind` label of the metrics)."""

    RECIPIENT_POLICY = "recipient-policy"
    """Allow/deny rules over sender and recipient names."""
    RATE_LIMIT = "rate-limit"
    """A token bucket per agent."""
    CONTENT_PATTERN = "content-pattern"
    """RE2 patterns over the text."""
    TURN_GUIDANCE = "turn-guidance"
    """Derives expectations for inbound items."""
    EXTERNAL = "external"
    """An operator's middleware called over gRPC."""


class Verdict(enum.StrEnum):
    """One middleware's verdict on one check (the `verdict` label of the metrics)."""

    PASS = "pass"  # noqa: S105 - a verdict, not a password
    """Admitted with nothing to say."""
    GUIDANCE = "guidance"
    """Admitted with instructions."""
    REFUSED = "refused"
    """The send was refused."""
    WITHHELD = "withheld"
    """Inbound text was withheld (or the item dropped)."""
    ERROR = "error"
    """The middleware failed; its `on_error` decided."""


class SubjectRole(enum.StrEnum):
    """Which text a subject is."""

    OUTGOING = "outgoing"
    """A send's text: a message, a question, or an answer's JSON text with its content's
    texts as `values` (id `out`)."""
    DIRECT = "direct"
    """An inbound direct message (id: its PostId)."""
    GROUP = "group"
    """An inbound group message (id: its PostId)."""
    REQUEST = "request"
    """An inbound gather or all_gather request's question (id: its PostId)."""
    QUESTION = "question"
    """A collective result's question (id: the operation's CollectiveId)."""
    ANSWER = "answer"
    """A collective result's answered member's content (id: the member's address)."""

    @property
    def rewritable(self) -> bool:
        """True for the texts a withhold replaces by `Withheld` (a result's question and
        answers); a message or request is never rewritten, only marked or dropped."""
        return self in (SubjectRole.QUESTION, SubjectRole.ANSWER)


@dataclass(frozen=True, slots=True, kw_only=True)
class Subject:
    """One text a check looks at: the contract's subject and its role."""

    subject: GuidanceSubject
    role: SubjectRole
    deadline_at: int | None = None
    """A request's `deadlineAt` (epoch milliseconds); None for every other role."""
    values: tuple[str, ...] | None = None
    """The texts content patterns search by default, when the subject is more than its
    `text`: an answer's (whose `text` is its canonical JSON) every key and value as the text
    it is (`subjects.content_texts`); a question's (a gather sent, a request received) the
    question and every key and value of its form. None for a message, searched as it is."""

    @property
    def id(self) -> str:
        return self.subject.id


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckInput:
    """One check: its id, where it runs, the hosted agent, its subjects and the time."""

    check_id: str
    direction: Direction
    agent: str
    """The hosted agent's name: the sender of a send, the recipient of a delivery."""
    subjects: tuple[Subject, ...]
    now: float
    """Wall-clock seconds (epoch) at the check."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Allow:
    """Admit, with zero or more instructions (zero: a pass)."""

    instructions: tuple[Instruction, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Refuse:
    """Refuse the send (direction `send` only)."""

    refusal: FirewallRefusal
    rule_id: str
    instruction: str
    """The text in `send refused by the local firewall (<refusal>): <instruction>`."""
    instructions: tuple[Instruction, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Withhold:
    """Withhold subjects from the runtime (direction `delivery` only).

    A result's question or answer becomes `Withheld`; a message or request is marked with
    an `expectation: "none"` instruction carrying `instruction`, or dropped with `drop`."""

    subject_ids: tuple[str, ...]
    reason: FirewallRefusal
    rule_id: str
    instruction: str
    drop: bool = False
    instructions: tuple[Instruction, ...] = ()
    """Instructions about the subjects that remain."""


Judgement: TypeAlias = Allow | Refuse | Withhold


class MiddlewareError(Exception):
    """A middleware could not judge (unreachable, timed out, a malformed answer); its
    `on_error` decides. The message names the cause and never the checked text."""


class Middleware(Protocol):
    """A built-in middleware: judges a check synchronously, in microseconds."""

    @property
    def id(self) -> str:
        """The operator's `id`: `middlewareId` in guidance and errors."""
        ...

    @property
    def kind(self) -> MiddlewareKind: ...

    def selects(self, agent: str, direction: Direction) -> bool:
        """True when this middleware checks `agent`'s checks in `direction`."""
        ...

    def check(self, check: CheckInput) -> Judgement:
        """Judge the check's subjects."""
        ...


class ExternalCaller(Protocol):
    """The gRPC client of one operator middleware (`FirewallMiddlewareService/Check`),
    implemented in `gateway/rpc/`; the firewall never sees gRPC."""

    async def check(self, check: CheckInput, *, timeout: float) -> Judgement:  # noqa: ASYNC109 - the gRPC deadline travels to the middleware
        """One call within `timeout` seconds; raises `MiddlewareError` on any failure.

        Instructions in the answer carry the caller's configured middleware id."""
        ...

    async def close(self) -> None:
        """Close the channel."""
        ...

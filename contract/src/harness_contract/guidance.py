"""Local firewall guidance values of the contract (firewall.md §3).

These are the public shapes the firewall produces, which the contract, the protobuf API and
every item carry. The module is a leaf: `FirewallRefusal` lives here, beside `Withheld`, and
`errors.py` (whose `FirewallSendError` carries a refusal and a `CheckedGuidance`) imports it
from here and re-exports it, so the two modules never import each other
(`tests/unit/test_package_cycles.py`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeAlias


class FirewallRefusal(enum.StrEnum):
    """Why the local firewall refused a send or withheld text (firewall.md §3)."""

    FORBIDDEN_RECIPIENT = "forbidden-recipient"
    """A recipient policy denies this sender and recipient."""
    CONTENT_BLOCKED = "content-blocked"
    """A content pattern refuses the outgoing text."""
    RATE_LIMITED = "rate-limited"
    """The agent sends faster than its rate limit allows."""
    MIDDLEWARE_UNAVAILABLE = "middleware-unavailable"
    """An external middleware failed and is configured to fail closed."""


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


@dataclass(frozen=True, slots=True, kw_only=True)
class GuidanceSubject:
    """One text a check looked at: `id` is `out` for a send, else a PostId or member."""

    id: str
    sender: str
    recipients: tuple[str, ...]
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpectationInstruction:
    """A rule's instruction with an expectation over some subjects."""

    middleware_id: str
    rule_id: str
    expectation: Expectation
    subjects: tuple[str, ...]
    instruction: str


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


Instruction: TypeAlias = ExpectationInstruction | UncertainInstruction


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckedGuidance:
    """One firewall check's advice: its id, the subjects it saw, and its instructions."""

    check_id: str
    subjects: tuple[GuidanceSubject, ...]
    instructions: tuple[Instruction, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberGuidance:
    """A collective result's guidance for one answered member's content."""

    member: str
    guidance: CheckedGuidance


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveGuidance:
    """The second `LocalGuidance` form, for a collective result."""

    question: CheckedGuidance | None
    answers: tuple[MemberGuidance, ...]


LocalGuidance: TypeAlias = CheckedGuidance | CollectiveGuidance


@dataclass(frozen=True, slots=True, kw_only=True)
class Withheld:
    """Text the local firewall withheld from the runtime, never peer content."""

    check_id: str
    reason: FirewallRefusal

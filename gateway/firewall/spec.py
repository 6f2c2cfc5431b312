"""The firewall file, validated: one frozen record per middleware (firewall.md §4.1).

`config.py` reads the YAML into these; `pipeline.py` builds middlewares from them. Every
value here is already checked (globs, RE2 patterns, ranges), so building cannot fail.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from gateway.firewall.model import MiddlewareKind


class RuleAction(enum.StrEnum):
    """A recipient-policy rule's action."""

    ALLOW = "allow"
    DENY = "deny"


class RateAction(enum.StrEnum):
    """What an empty rate-limit bucket does to a send."""

    REFUSE = "refuse"
    """Refuse it: `rate-limited`."""
    GUIDE = "guide"
    """Admit it with a `wait` instruction saying until when."""


class PatternAction(enum.StrEnum):
    """What a content-pattern match does.

    Outbound: `refuse` (→ `content-blocked`) or `flag`. Inbound: `withhold`, `drop` or
    `flag`. In a `both` middleware a blocking action blocks both ways: `refuse` withholds
    inbound text, and `withhold` or `drop` refuse outbound text."""

    REFUSE = "refuse"
    WITHHOLD = "withhold"
    DROP = "drop"
    FLAG = "flag"


class PatternMatch(enum.StrEnum):
    """What of a structured subject (an answer's content) a content-pattern rule searches.

    A message, a question or a request is plain text, which both search as it is."""

    TEXT = "text"
    """Each key and each value on its own, as the text it is: a string unescaped (a newline
    is a newline, not `\\n`), a number or boolean as written in JSON. The default: a
    rule written against messages then holds for answers too."""
    JSON = "json"
    """The subject's canonical JSON text, as an external middleware sees it: for rules
    about the JSON itself (a key next to its value, `"plan":"AKIA`)."""


class OnError(enum.StrEnum):
    """What an external middleware's failure does."""

    ALLOW = "allow"
    """Fail open, with an instruction noting it."""
    REFUSE = "refuse"
    """Fail closed: `middleware-unavailable` (inbound: the text is withheld)."""


class Directions(enum.StrEnum):
    """The directions a middleware checks."""

    OUT = "out"
    IN = "in"
    BOTH = "both"


@dataclass(frozen=True, slots=True, kw_only=True)
class RecipientRule:
    """First match decides; no match allows."""

    id: str
    senders: tuple[str, ...]
    """Sender name globs (`from`); the rule matches a sender matching one."""
    recipients: tuple[str, ...] | None
    """Recipient name globs (`to`): every recipient must match one; None matches any."""
    action: RuleAction
    instruction: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RecipientPolicySpec:
    id: str
    agents: tuple[str, ...]
    rules: tuple[RecipientRule, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimitSpec:
    id: str
    agents: tuple[str, ...]
    rate_per_minute: float
    """Tokens added per minute (> 0)."""
    burst: int
    """Bucket size (>= 1); a new agent starts full."""
    action: RateAction
    instruction: str | None
    """Text for the model; None uses the built-in text."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PatternRule:
    id: str
    pattern: str
    """RE2 syntax, already compiled once by the validator."""
    action: PatternAction
    instruction: str
    match: PatternMatch = PatternMatch.TEXT
    """What of an answer's content the pattern searches (plain text is searched as is)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContentPatternSpec:
    id: str
    agents: tuple[str, ...]
    direction: Directions
    rules: tuple[PatternRule, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnGuidanceSpec:
    id: str
    agents: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ExternalSpec:
    id: str
    agents: tuple[str, ...]
    direction: Directions
    target: str
    """`host:port` (the scheme stripped)."""
    tls: bool
    """True for `grpcs://`."""
    tls_ca: Path | None
    """PEM roots for `grpcs://`; None uses the system's."""
    deadline_ms: int
    """Per-call deadline, 1 to 60,000 ms."""
    on_error: OnError


MiddlewareSpec: TypeAlias = (
    RecipientPolicySpec | RateLimitSpec | ContentPatternSpec | TurnGuidanceSpec | ExternalSpec
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FirewallSpec:
    """A validated firewall file."""

    source: Path
    content_logging: bool
    middlewares: tuple[MiddlewareSpec, ...]
    """In configured order; ids unique. Empty means no pipeline."""


def kind_of(spec: MiddlewareSpec) -> MiddlewareKind:
    """The kind a middleware's record configures."""
    match spec:
        case RecipientPolicySpec():
            return MiddlewareKind.RECIPIENT_POLICY
        case RateLimitSpec():
            return MiddlewareKind.RATE_LIMIT
        case ContentPatternSpec():
            return MiddlewareKind.CONTENT_PATTERN
        case TurnGuidanceSpec():
            return MiddlewareKind.TURN_GUIDANCE
        case ExternalSpec():
            return MiddlewareKind.EXTERNAL

"""The four built-in middlewares of firewall.md §4: recipient policy, rate limit, content
patterns and turn guidance.

Each is built once from its validated record in `spec.py` (`build_builtin`) and then judges
checks synchronously: every glob and pattern is compiled in the constructor, because `check`
runs on every send and every inbound item and must cost microseconds. Content patterns use
RE2, whose matching time is linear in the text, so an operator's pattern cannot stall the
event loop however the text is built.

A rate limit is the one middleware with state (its buckets). A reload builds a new
middleware from the new file; `build_builtin(previous=...)` hands the old rate limit's
buckets to the new one of the same id, so a SIGHUP does not refill every bucket.
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import math
import re
from collections.abc import Iterable
from typing import Final, Protocol, TypeAlias, assert_never, cast

import re2
from harness_contract.addresses import AGENT_PREFIX
from harness_contract.errors import FirewallRefusal
from harness_contract.formats import utc_millis_text
from harness_contract.guidance import Expectation, ExpectationInstruction, Instruction

from gateway.firewall.model import (
    Allow,
    CheckInput,
    Direction,
    Judgement,
    Middleware,
    MiddlewareKind,
    Refuse,
    Subject,
    SubjectRole,
    Withhold,
)
from gateway.firewall.spec import (
    ContentPatternSpec,
    Directions,
    PatternAction,
    PatternMatch,
    RateAction,
    RateLimitSpec,
    RecipientPolicySpec,
    RuleAction,
    TurnGuidanceSpec,
)

logger = logging.getLogger(__name__)

BuiltinSpec: TypeAlias = RecipientPolicySpec | RateLimitSpec | ContentPatternSpec | TurnGuidanceSpec

MAX_BUCKETS: Final = 10_000
"""Rate-limit buckets kept before full ones are dropped (entries).

A full bucket is the same as no bucket (a new agent starts full), so dropping it changes no
verdict; this only bounds the memory of agents that sent once and went quiet."""

SWEEP_SLACK: Final = 1_000
"""New agents admitted after a sweep that could not bring the buckets under MAX_BUCKETS
before the next sweep (entries); bounds the sweeps' cost when over 10,000 agents are all
still refilling, which only an unusually large, busy gateway reaches."""

RATE_RULE_ID: Final = "bucket"
"""The `ruleId` of a rate-limit refusal or `wait` instruction."""

REQUEST_RULE_ID: Final = "collective-request"
DIRECT_RULE_ID: Final = "direct-message"
GROUP_NAMED_RULE_ID: Final = "group-named"
GROUP_UNNAMED_RULE_ID: Final = "group-unnamed"

DIRECT_TEXT: Final = "a direct message to you; you may reply"
GROUP_NAMED_TEXT: Final = "a group message that names you; you may reply"
GROUP_UNNAMED_TEXT: Final = "a group message that does not name you; no reply is expected"

_NAMING_CACHE: Final = 4096
"""Agent names whose naming pattern turn guidance keeps compiled (entries); a gateway hosts
fewer agents than this, so each name's pattern is compiled once."""

_SEND: Final = frozenset({Direction.SEND})
_DELIVERY: Final = frozenset({Direction.DELIVERY})
_BOTH: Final = frozenset({Direction.SEND, Direction.DELIVERY})


class _Pattern(Protocol):
    """What this module uses of a compiled RE2 pattern (google-re2 ships no types)."""

    def search(self, text: str) -> object | None: ...


class _Globs:
    """A set of name globs, matched with `fnmatch.fnmatchcase` semantics in one regex."""

    __slots__ = ("_regex",)

    def __init__(self, globs: Iterable[str]) -> None:
        parts = [fnmatch.translate(glob) for glob in globs]
        # An empty list would join to "", which matches every name; it must match none.
        self._regex = re.compile("|".join(f"(?:{part})" for part in parts)) if parts else None

    def matches(self, name: str) -> bool:
        return self._regex is not None and self._regex.match(name) is not None


def _name(address: str) -> str:
    """The name of an `agent:<name>` address (anything else is matched as it stands)."""
    return address[len(AGENT_PREFIX) :] if address.startswith(AGENT_PREFIX) else address


def _directions(directions: Directions) -> frozenset[Direction]:
    match directions:
        case Directions.OUT:
            return _SEND
        case Directions.IN:
            return _DELIVERY
        case Directions.BOTH:
            return _BOTH
        case _:
            assert_never(directions)


class _Selection:
    """Which agents' checks, in which directions, a middleware looks at."""

    __slots__ = ("_agents", "_directions")

    def __init__(self, agents: Iterable[str], directions: frozenset[Direction]) -> None:
        self._agents = _Globs(agents)
        self._directions = directions

    def selects(self, agent: str, direction: Direction) -> bool:
        return direction in self._directions and self._agents.matches(agent)


# --- recipient-policy -------------------------------------------------------------------


class _RecipientRule:
    __slots__ = ("action", "id", "instruction", "recipients", "senders")

    def __init__(
        self,
        *,
        id: str,
        senders: _Globs,
        recipients: _Globs | None,
        action: RuleAction,
        instruction: str,
    ) -> None:
        self.id = id
        self.senders = senders
        self.recipients = recipients
        self.action = action
        self.instruction = instruction

    def matches(self, sender: str, recipients: tuple[str, ...]) -> bool:
        if not self.senders.matches(sender):
            return False
        if self.recipients is None:
            return True
        return all(self.recipients.matches(name) for name in recipients)


class RecipientPolicy:
    """Allow and deny rules over sender and recipient names; the first match decides and
    no match allows. A deny refuses the send with `forbidden-recipient`."""

    __slots__ = ("_id", "_rules", "_selection")

    def __init__(self, spec: RecipientPolicySpec) -> None:
        self._id = spec.id
        self._selection = _Selection(spec.agents, _SEND)
        self._rules = tuple(
            _RecipientRule(
                id=rule.id,
                senders=_Globs(rule.senders),
                recipients=None if rule.recipients is None else _Globs(rule.recipients),
                action=rule.action,
                instruction=rule.instruction,
            )
            for rule in spec.rules
        )

    @property
    def id(self) -> str:
        return self._id

    @property
    def kind(self) -> MiddlewareKind:
        return MiddlewareKind.RECIPIENT_POLICY

    def selects(self, agent: str, direction: Direction) -> bool:
        return self._selection.selects(agent, direction)

    def check(self, check: CheckInput) -> Judgement:
        for subject in check.subjects:
            if subject.role is not SubjectRole.OUTGOING:
                continue
            sender = _name(subject.subject.sender)
            recipients = tuple(_name(address) for address in subject.subject.recipients)
            refusal = self._decide(sender, recipients)
            if refusal is not None:
                return refusal
        return Allow()

    def _decide(self, sender: str, recipients: tuple[str, ...]) -> Refuse | None:
        for rule in self._rules:
            if not rule.matches(sender, recipients):
                continue
            match rule.action:
                case RuleAction.ALLOW:
                    return None
                case RuleAction.DENY:
                    return Refuse(
                        refusal=FirewallRefusal.FORBIDDEN_RECIPIENT,
                        rule_id=rule.id,
                        instruction=rule.instruction
                        or f"this agent may not message {', '.join(recipients)}",
                    )
                case _:
                    assert_never(rule.action)
        return None


# --- rate-limit -------------------------------------------------------------------------


class _Bucket:
    """One agent's tokens as of `stamp` (wall-clock seconds)."""

    __slots__ = ("stamp", "tokens")

    def __init__(self, *, tokens: float, stamp: float) -> None:
        self.tokens = tokens
        self.stamp = stamp


class RateLimit:
    """A token bucket per agent: `burst` tokens, refilled at `rate_per_minute`; a send takes
    one. An empty bucket refuses (`rate-limited`) or, with `action: guide`, admits the send
    with a `wait` instruction saying when a token is back (taking none)."""

    __slots__ = (
        "_action",
        "_buckets",
        "_burst",
        "_id",
        "_instruction",
        "_rate_per_minute",
        "_refill",
        "_selection",
        "_sweep_above",
    )

    def __init__(self, spec: RateLimitSpec, *, buckets: dict[str, _Bucket] | None = None) -> None:
        self._id = spec.id
        self._selection = _Selection(spec.agents, _SEND)
        self._burst = float(spec.burst)
        self._rate_per_minute = spec.rate_per_minute
        self._refill = spec.rate_per_minute / 60.0  # tokens per second
        self._action = spec.action
        self._instruction = spec.instruction
        # Shared, not copied, with the middleware this one replaces: a check still running
        # on the old pipeline during a reload then counts in the new one too.
        self._buckets: dict[str, _Bucket] = {} if buckets is None else buckets
        self._sweep_above = MAX_BUCKETS

    @property
    def id(self) -> str:
        return self._id

    @property
    def kind(self) -> MiddlewareKind:
        return MiddlewareKind.RATE_LIMIT

    @property
    def buckets(self) -> dict[str, _Bucket]:
        """The live buckets, for `build_builtin(previous=...)` to carry over."""
        return self._buckets

    def selects(self, agent: str, direction: Direction) -> bool:
        return self._selection.selects(agent, direction)

    def check(self, check: CheckInput) -> Judgement:
        now = check.now
        bucket = self._buckets.get(check.agent)
        if bucket is None:
            # Swept before the new bucket goes in: it is full, and must not be swept itself.
            if len(self._buckets) >= self._sweep_above:
                self._sweep(now)
            bucket = _Bucket(tokens=self._burst, stamp=now)
            self._buckets[check.agent] = bucket
        else:
            # A clock that went back refills nothing; the stamp follows it, so the agent
            # is not frozen until the clock passes the old stamp again.
            elapsed = max(0.0, now - bucket.stamp)
            bucket.tokens = min(self._burst, bucket.tokens + elapsed * self._refill)
            bucket.stamp = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return Allow()
        text = self._instruction or self._default_text(bucket, now)
        match self._action:
            case RateAction.REFUSE:
                return Refuse(
                    refusal=FirewallRefusal.RATE_LIMITED, rule_id=RATE_RULE_ID, instruction=text
                )
            case RateAction.GUIDE:
                return Allow(
                    instructions=(
                        ExpectationInstruction(
                            middleware_id=self._id,
                            rule_id=RATE_RULE_ID,
                            expectation=Expectation.WAIT,
                            subjects=tuple(subject.id for subject in check.subjects),
                            instruction=text,
                        ),
                    )
                )
            case _:
                assert_never(self._action)

    def _default_text(self, bucket: _Bucket, now: float) -> str:
        # Rounded up to the millisecond, so at the named moment the token is back.
        until_ms = math.ceil((now + (1.0 - bucket.tokens) / self._refill) * 1000)
        return (
            f"this agent sends faster than {self._rate_per_minute:g} messages a minute; "
            f"wait until {utc_millis_text(until_ms)} before sending again"
        )

    def _sweep(self, now: float) -> None:
        full = [
            agent
            for agent, bucket in self._buckets.items()
            if bucket.tokens + max(0.0, now - bucket.stamp) * self._refill >= self._burst
        ]
        for agent in full:
            del self._buckets[agent]
        # When the buckets are still refilling, the next sweep waits for SWEEP_SLACK more
        # agents, so each new agent does not pay a sweep over all of them.
        self._sweep_above = max(MAX_BUCKETS, len(self._buckets) + SWEEP_SLACK)
        logger.debug(
            "rate-limit buckets swept middleware=%s dropped=%d kept=%d",
            self._id,
            len(full),
            len(self._buckets),
        )


# --- content-pattern --------------------------------------------------------------------

_BLOCKING: Final = frozenset({PatternAction.REFUSE, PatternAction.WITHHOLD, PatternAction.DROP})


class _PatternRule:
    __slots__ = ("action", "blocking", "id", "instruction", "match", "regex")

    def __init__(
        self,
        *,
        id: str,
        regex: _Pattern,
        action: PatternAction,
        instruction: str,
        match: PatternMatch,
    ) -> None:
        self.id = id
        self.regex = regex
        self.action = action
        self.blocking = action in _BLOCKING
        self.instruction = instruction
        self.match = match


class _RuleSet:
    """Some of a middleware's rules, searched together: one RE2 set scan per text finds
    every rule whose pattern occurs in it (as positions in the middleware's rules).

    Every RE2 call releases the GIL, and taking it back costs up to a switch interval while
    another thread (the store's writer) runs Python: one call per text instead of one per
    rule keeps that to a minimum on the hot path."""

    __slots__ = ("_positions", "_rules", "_set")

    def __init__(self, rules: Iterable[tuple[int, _PatternRule, str]]) -> None:
        chosen = list(rules)
        self._positions = tuple(position for position, _, _ in chosen)
        self._rules = tuple(rule for _, rule, _ in chosen)
        self._set = _pattern_set(pattern for _, _, pattern in chosen) if chosen else None

    def found(self, text: str) -> Iterable[int]:
        """Positions of the rules whose pattern occurs in `text`."""
        if not self._rules:
            return ()
        if self._set is None:
            return [
                position
                for position, rule in zip(self._positions, self._rules, strict=True)
                if rule.regex.search(text) is not None
            ]
        # RE2's set answers None, not an empty list, when nothing matches.
        return [self._positions[index] for index in self._set.Match(text) or ()]


class ContentPattern:
    """RE2 patterns over each subject's text, rules in order.

    Plain text (a message, a question, a request) is searched as it is by every rule. An
    answer is searched by a `match: text` rule (the default) in each of its content's keys
    and values as the text it is, and by a `match: json` rule in its canonical JSON text
    (firewall.md §4).

    Outbound, a blocking match (`refuse`, `withhold`, `drop`) refuses with `content-blocked`
    and the first decides. Inbound, a blocking match withholds its subject (`drop` asks the
    pipeline to drop the item), `refuse` included: a `both` middleware's block holds both
    ways. `flag` only adds a `permitted` instruction carrying the rule's text."""

    __slots__ = ("_all", "_id", "_json", "_rules", "_selection", "_text")

    def __init__(self, spec: ContentPatternSpec) -> None:
        self._id = spec.id
        self._selection = _Selection(spec.agents, _directions(spec.direction))
        self._rules = tuple(
            _PatternRule(
                id=rule.id,
                regex=cast("_Pattern", re2.compile(rule.pattern)),
                action=rule.action,
                instruction=rule.instruction,
                match=rule.match,
            )
            for rule in spec.rules
        )
        indexed = [
            (position, compiled, spec.rules[position].pattern)
            for position, compiled in enumerate(self._rules)
        ]
        self._all = _RuleSet(indexed)
        self._text = _RuleSet(entry for entry in indexed if entry[1].match is PatternMatch.TEXT)
        self._json = _RuleSet(entry for entry in indexed if entry[1].match is PatternMatch.JSON)

    def _matching(self, subject: Subject) -> Iterable[_PatternRule]:
        """The rules whose pattern occurs in the subject, in rule order."""
        values = subject.values
        if values is None:
            # Plain text is what both kinds of rule search: one scan for them all.
            found = set(self._all.found(subject.subject.text))
        else:
            found = set(self._json.found(subject.subject.text))
            for value in values:
                found.update(self._text.found(value))
        return [self._rules[position] for position in sorted(found)]

    @property
    def id(self) -> str:
        return self._id

    @property
    def kind(self) -> MiddlewareKind:
        return MiddlewareKind.CONTENT_PATTERN

    def selects(self, agent: str, direction: Direction) -> bool:
        return self._selection.selects(agent, direction)

    def check(self, check: CheckInput) -> Judgement:
        match check.direction:
            case Direction.SEND:
                return self._check_send(check.subjects)
            case Direction.DELIVERY:
                return self._check_delivery(check.subjects)
            case _:
                assert_never(check.direction)

    def _flag(self, rule: _PatternRule, subject: Subject) -> ExpectationInstruction:
        return ExpectationInstruction(
            middleware_id=self._id,
            rule_id=rule.id,
            expectation=Expectation.PERMITTED,
            subjects=(subject.id,),
            instruction=rule.instruction,
        )

    def _check_send(self, subjects: tuple[Subject, ...]) -> Judgement:
        flags: list[Instruction] = []
        for subject in subjects:
            for rule in self._matching(subject):
                if rule.blocking:
                    return Refuse(
                        refusal=FirewallRefusal.CONTENT_BLOCKED,
                        rule_id=rule.id,
                        instruction=rule.instruction,
                        instructions=tuple(flags),
                    )
                flags.append(self._flag(rule, subject))
        return Allow(instructions=tuple(flags))

    def _check_delivery(self, subjects: tuple[Subject, ...]) -> Judgement:
        flags: list[Instruction] = []
        withheld: list[str] = []
        first: _PatternRule | None = None
        drop = False
        for subject in subjects:
            subject_flags: list[Instruction] = []
            blocked = False
            # Every matching rule counts, not only up to the first block: a later `drop`
            # rule that also matches must still drop the item.
            for rule in self._matching(subject):
                if rule.blocking:
                    blocked = True
                    drop = drop or rule.action is PatternAction.DROP
                    if first is None:
                        first = rule
                else:
                    subject_flags.append(self._flag(rule, subject))
            if blocked:
                withheld.append(subject.id)
            else:
                flags.extend(subject_flags)
        if first is None:
            return Allow(instructions=tuple(flags))
        return Withhold(
            subject_ids=tuple(withheld),
            reason=FirewallRefusal.CONTENT_BLOCKED,
            rule_id=first.id,
            instruction=first.instruction,
            drop=drop,
            instructions=tuple(flags),
        )


class _PatternSet(Protocol):
    """What this module uses of an RE2 set (google-re2 ships no types)."""

    def Match(self, text: str) -> list[int] | None: ...  # noqa: N802 - RE2's name


def _pattern_set(patterns: Iterable[str]) -> _PatternSet | None:
    """One RE2 set of every pattern, index = rule position; None if RE2 cannot build it
    within its memory budget (the rules are then searched one by one)."""
    pattern_set = re2.Set.SearchSet(re2.Options())
    try:
        for pattern in patterns:
            pattern_set.Add(pattern)
        pattern_set.Compile()
    except re2.error:
        logger.warning("RE2 could not build one set of a middleware's patterns; searching each")
        return None
    return cast("_PatternSet", pattern_set)


# --- turn-guidance ----------------------------------------------------------------------


@functools.lru_cache(maxsize=_NAMING_CACHE)
def _naming(name: str) -> re.Pattern[str]:
    """Finds `name` as a whole word (`@name` included): not inside `bobby` or `bob-2`.

    Names are `[a-z0-9-]`; a neighbouring word character of any case, or a hyphen, makes the
    occurrence part of a longer word."""
    return re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])")


class TurnGuidance:
    """Expectations derived from an inbound item's role: a collective request is `required`
    before its deadline, a direct message `permitted`, a group message `permitted` when it
    names the agent and `none` when it does not."""

    __slots__ = ("_id", "_selection")

    def __init__(self, spec: TurnGuidanceSpec) -> None:
        self._id = spec.id
        self._selection = _Selection(spec.agents, _DELIVERY)

    @property
    def id(self) -> str:
        return self._id

    @property
    def kind(self) -> MiddlewareKind:
        return MiddlewareKind.TURN_GUIDANCE

    def selects(self, agent: str, direction: Direction) -> bool:
        return self._selection.selects(agent, direction)

    def check(self, check: CheckInput) -> Judgement:
        instructions = tuple(
            instruction
            for subject in check.subjects
            if (instruction := self._guide(subject, check.agent)) is not None
        )
        return Allow(instructions=instructions)

    def _guide(self, subject: Subject, agent: str) -> ExpectationInstruction | None:
        match subject.role:
            case SubjectRole.REQUEST:
                text = (
                    "answer this question"
                    if subject.deadline_at is None
                    else f"answer this question before {utc_millis_text(subject.deadline_at)}"
                )
                return self._instruction(REQUEST_RULE_ID, Expectation.REQUIRED, subject, text)
            case SubjectRole.DIRECT:
                return self._instruction(
                    DIRECT_RULE_ID, Expectation.PERMITTED, subject, DIRECT_TEXT
                )
            case SubjectRole.GROUP:
                if _naming(agent).search(subject.subject.text) is not None:
                    return self._instruction(
                        GROUP_NAMED_RULE_ID, Expectation.PERMITTED, subject, GROUP_NAMED_TEXT
                    )
                return self._instruction(
                    GROUP_UNNAMED_RULE_ID, Expectation.NONE, subject, GROUP_UNNAMED_TEXT
                )
            case SubjectRole.QUESTION | SubjectRole.ANSWER | SubjectRole.OUTGOING:
                return None
            case _:
                assert_never(subject.role)

    def _instruction(
        self, rule_id: str, expectation: Expectation, subject: Subject, text: str
    ) -> ExpectationInstruction:
        return ExpectationInstruction(
            middleware_id=self._id,
            rule_id=rule_id,
            expectation=expectation,
            subjects=(subject.id,),
            instruction=text,
        )


def build_builtin(spec: BuiltinSpec, *, previous: Middleware | None = None) -> Middleware:
    """The middleware `spec` describes.

    `previous` is the middleware of the same id in the policy a reload replaces: a rate
    limit takes over its buckets when it is a rate limit too; otherwise it is ignored."""
    match spec:
        case RecipientPolicySpec():
            return RecipientPolicy(spec)
        case RateLimitSpec():
            carried = (
                previous.buckets
                if isinstance(previous, RateLimit) and previous.id == spec.id
                else None
            )
            return RateLimit(spec, buckets=carried)
        case ContentPatternSpec():
            return ContentPattern(spec)
        case TurnGuidanceSpec():
            return TurnGuidance(spec)
        case _:
            assert_never(spec)

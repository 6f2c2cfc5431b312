"""The firewall pipeline (firewall.md §2-§5) over specs built in the test: configured order,
the first refusal, concurrent externals and their `on_error`, fail-closed built-ins,
delivery withholds, the observer, and reloads. External middlewares are in-memory fakes
behind `ExternalCaller`; no socket is opened."""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import logging
import re
import time
from pathlib import Path

import pytest
from harness_contract.content import multicast_content
from harness_contract.errors import FirewallRefusal, FirewallSendError
from harness_contract.guidance import (
    CheckedGuidance,
    Expectation,
    ExpectationInstruction,
    GuidanceSubject,
    Withheld,
)
from harness_contract.ids import RandomId, collective_id
from harness_contract.values import (
    Answered,
    CollectiveOp,
    CollectiveResultItem,
    DirectMessage,
    MemberResult,
    MulticastItem,
)

from gateway.firewall import (
    CheckInput,
    Direction,
    ExternalCaller,
    Firewall,
    FirewallObserver,
    Judgement,
    MiddlewareError,
    MiddlewareKind,
    Subject,
    SubjectRole,
    Verdict,
)
from gateway.firewall.builtins import RecipientPolicy, TurnGuidance
from gateway.firewall.external import ON_ERROR_RULE
from gateway.firewall.model import Allow, Refuse
from gateway.firewall.pipeline import FAILED_RULE
from gateway.firewall.spec import (
    ContentPatternSpec,
    Directions,
    ExternalSpec,
    FirewallSpec,
    MiddlewareSpec,
    OnError,
    PatternAction,
    PatternRule,
    RateAction,
    RateLimitSpec,
    RecipientPolicySpec,
    RecipientRule,
    RuleAction,
    TurnGuidanceSpec,
)
from gateway.firewall.subjects import of_item, outgoing

T0 = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.UTC).timestamp()
BOUND = 5.0
"""Seconds a step that should be immediate may take before the test fails."""

CHECK_ID = re.compile(r"chk_[A-Za-z0-9_-]{22}")
POST_ID = "pst_" + "A" * 43
OPERATION_ID = collective_id("agent:alice", "N" * 43)


# --- specs ------------------------------------------------------------------------------


def firewall_spec(*middlewares: MiddlewareSpec) -> FirewallSpec:
    return FirewallSpec(
        source=Path("firewall.yaml"), content_logging=False, middlewares=middlewares
    )


def patterns(
    id: str,
    *rules: tuple[str, str, PatternAction],
    direction: Directions = Directions.BOTH,
    agents: tuple[str, ...] = ("*",),
) -> ContentPatternSpec:
    """A content-pattern middleware; each rule is (id, pattern, action), its instruction
    `<id> matched`."""
    return ContentPatternSpec(
        id=id,
        agents=agents,
        direction=direction,
        rules=tuple(
            PatternRule(
                id=rule_id, pattern=pattern, action=action, instruction=f"{rule_id} matched"
            )
            for rule_id, pattern, action in rules
        ),
    )


def deny(
    id: str, to: tuple[str, ...] | None = None, *, agents: tuple[str, ...] = ("*",)
) -> RecipientPolicySpec:
    """A recipient policy denying every sender (to `to`, or to anyone)."""
    return RecipientPolicySpec(
        id=id,
        agents=agents,
        rules=(
            RecipientRule(
                id="deny-rule",
                senders=("*",),
                recipients=to,
                action=RuleAction.DENY,
                instruction="you may not message them",
            ),
        ),
    )


def rate_limit(id: str, *, burst: int = 1, action: RateAction = RateAction.REFUSE) -> RateLimitSpec:
    return RateLimitSpec(
        id=id, agents=("*",), rate_per_minute=1.0, burst=burst, action=action, instruction=None
    )


def external(
    id: str,
    *,
    agents: tuple[str, ...] = ("*",),
    direction: Directions = Directions.BOTH,
    deadline_ms: int = 2_000,
    on_error: OnError = OnError.ALLOW,
) -> ExternalSpec:
    return ExternalSpec(
        id=id,
        agents=agents,
        direction=direction,
        target="127.0.0.1:7790",
        tls=False,
        tls_ca=None,
        deadline_ms=deadline_ms,
        on_error=on_error,
    )


def flag(middleware_id: str, rule_id: str, *subjects: str) -> ExpectationInstruction:
    """The instruction a content-pattern `flag` rule of `patterns` gives."""
    return ExpectationInstruction(
        middleware_id=middleware_id,
        rule_id=rule_id,
        expectation=Expectation.PERMITTED,
        subjects=subjects or ("out",),
        instruction=f"{rule_id} matched",
    )


# --- external fakes ---------------------------------------------------------------------


class FakeCaller:
    """An operator middleware in memory: answers `answer` (a judgement, or raises it when
    it is a `MiddlewareError`; None never answers), after `gate` opens if one is given."""

    def __init__(
        self, answer: Judgement | MiddlewareError | None, *, gate: asyncio.Event | None = None
    ) -> None:
        self.answer = answer
        self.gate = gate
        self.calls: list[CheckInput] = []
        self.timeouts: list[float] = []
        self.closes = 0
        self.started = asyncio.Event()
        self.finished = asyncio.Event()

    async def check(self, check: CheckInput, *, timeout: float) -> Judgement:  # noqa: ASYNC109 - the port's signature
        self.calls.append(check)
        self.timeouts.append(timeout)
        self.started.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
            match self.answer:
                case None:
                    await asyncio.Event().wait()
                    raise AssertionError("never answers")
                case MiddlewareError():
                    raise self.answer
                case _:
                    return self.answer
        finally:
            self.finished.set()

    async def close(self) -> None:
        self.closes += 1


class Callers:
    """The caller factory: a fresh `FakeCaller` per external spec built, scripted by id."""

    def __init__(
        self,
        answers: dict[str, Judgement | MiddlewareError | None] | None = None,
        *,
        gate: asyncio.Event | None = None,
    ) -> None:
        self.answers = answers or {}
        self.gate = gate
        self.made: dict[str, list[FakeCaller]] = collections.defaultdict(list)
        self.built: list[ExternalSpec] = []

    def __call__(self, spec: ExternalSpec) -> ExternalCaller:
        caller = FakeCaller(self.answers.get(spec.id, Allow()), gate=self.gate)
        self.built.append(spec)
        self.made[spec.id].append(caller)
        return caller

    def __getitem__(self, middleware_id: str) -> FakeCaller:
        """The caller built last for this middleware."""
        return self.made[middleware_id][-1]


class Recorded:
    """What the firewall told its observer."""

    def __init__(self) -> None:
        self.checks: list[tuple[MiddlewareKind, Direction, Verdict, float]] = []
        self.refusals: list[tuple[MiddlewareKind, FirewallRefusal]] = []

    def observer(self) -> FirewallObserver:
        return FirewallObserver(
            on_check=lambda kind, direction, verdict, seconds: self.checks.append(
                (kind, direction, verdict, seconds)
            ),
            on_refusal=lambda kind, refusal: self.refusals.append((kind, refusal)),
        )

    def verdicts(self) -> collections.Counter[tuple[MiddlewareKind, Direction, Verdict]]:
        return collections.Counter(
            (kind, direction, verdict) for kind, direction, verdict, _ in self.checks
        )


def make(
    spec: FirewallSpec, callers: Callers | None = None, recorded: Recorded | None = None
) -> Firewall:
    return Firewall(
        spec,
        caller_factory=callers or Callers(),
        observer=None if recorded is None else recorded.observer(),
        clock=lambda: T0,
    )


def said(text: str = "hello", *, to: str = "bob", sender: str = "alice") -> Subject:
    return outgoing(sender, [to], text)


def direct(text: str) -> tuple[Subject, ...]:
    """The subjects of a direct message from carol delivered to bob."""
    message = DirectMessage(
        post_id=POST_ID,
        address="agent:carol",
        sender="agent:carol",
        content=multicast_content(text)[:1],
    )
    return of_item("bob", MulticastItem(message=message), requester=None)


def result(question: str, **answers: str) -> tuple[Subject, ...]:
    """The subjects of alice's all_gather result (question, then each member's answer)."""
    item = CollectiveResultItem(
        op=CollectiveOp.ALL_GATHER,
        id=OPERATION_ID,
        to="group:alice,bob,carol",
        question=question,
        outcomes=tuple(
            MemberResult(member=f"agent:{name}", outcome=Answered(content={"text": text}))
            for name, text in answers.items()
        ),
    )
    subjects = of_item("alice", item, requester=None)
    assert [subject.role for subject in subjects] == [SubjectRole.QUESTION] + [
        SubjectRole.ANSWER
    ] * len(answers)
    return subjects


async def refused(firewall: Firewall, subject: Subject, agent: str = "alice") -> FirewallSendError:
    with pytest.raises(FirewallSendError) as raised:
        await asyncio.wait_for(firewall.check_send(agent, subject), BOUND)
    return raised.value


async def admitted(firewall: Firewall, subject: Subject, agent: str = "alice") -> CheckedGuidance:
    return await asyncio.wait_for(firewall.check_send(agent, subject), BOUND)


# --- activity and check ids -------------------------------------------------------------


async def test_an_empty_spec_is_no_pipeline():
    firewall = make(firewall_spec())
    assert not firewall.active
    assert not firewall.waits_on_deliveries
    assert firewall.spec == firewall_spec()


async def test_every_check_of_a_pipeline_has_a_fresh_check_id_and_the_subjects_it_saw():
    firewall = make(
        firewall_spec(patterns("quiet", ("never", "^never-matches$", PatternAction.FLAG)))
    )
    assert firewall.active
    subject = said("hello bob")
    ids: list[str] = []
    for _ in range(1_000):
        guidance = await firewall.check_send("alice", subject)
        assert guidance.subjects == (subject.subject,)
        assert guidance.instructions == ()
        ids.append(guidance.check_id)
    delivered = await firewall.check_delivery("bob", direct("hi"))
    ids.append(delivered.guidance.check_id)
    assert delivered.guidance.subjects == tuple(subject.subject for subject in direct("hi"))
    assert delivered.withheld == {}
    assert not delivered.drop
    assert all(CHECK_ID.fullmatch(check_id) for check_id in ids)
    assert all(RandomId.CHECK.is_valid(check_id) for check_id in ids)
    assert len(set(ids)) == len(ids) == 1_001


# --- configured order -------------------------------------------------------------------


async def test_instructions_accumulate_in_configured_order_externals_included():
    from_external = ExpectationInstruction(
        middleware_id="classifier",
        rule_id="tone",
        expectation=Expectation.PERMITTED,
        subjects=("out",),
        instruction="friendly",
    )
    callers = Callers({"classifier": Allow(instructions=(from_external,))})
    firewall = make(
        firewall_spec(
            patterns("first", ("hello", "hello", PatternAction.FLAG)),
            external("classifier"),
            patterns(
                "second", ("bob", "bob", PatternAction.FLAG), ("hel", "hel", PatternAction.FLAG)
            ),
        ),
        callers,
    )
    guidance = await admitted(firewall, said("hello bob"))
    assert guidance.instructions == (
        flag("first", "hello"),
        from_external,
        flag("second", "bob"),
        flag("second", "hel"),
    )


async def test_the_first_refusal_in_configured_order_decides_a_send():
    firewall = make(
        firewall_spec(
            patterns("flags", ("hello", "hello", PatternAction.FLAG)),
            deny("tenants"),
            patterns("secrets", ("aws", "AKIA", PatternAction.REFUSE)),
        )
    )
    subject = said("hello AKIA")
    error = await refused(firewall, subject)
    assert error.refusal is FirewallRefusal.FORBIDDEN_RECIPIENT
    assert error.middleware_id == "tenants"
    assert error.rule_id == "deny-rule"
    assert error.instruction == "you may not message them"
    assert error.message == (
        "send refused by the local firewall (forbidden-recipient): you may not message them"
    )
    assert str(error) == error.message
    assert CHECK_ID.fullmatch(error.check_id)
    assert error.guidance.check_id == error.check_id
    assert error.guidance.subjects == (subject.subject,)
    assert error.guidance.instructions == (
        flag("flags", "hello"),
        ExpectationInstruction(
            middleware_id="tenants",
            rule_id="deny-rule",
            expectation=Expectation.NONE,
            subjects=("out",),
            instruction="you may not message them",
        ),
    )


async def test_an_external_refusal_configured_before_a_built_in_one_decides():
    callers = Callers(
        {
            "classifier": Refuse(
                refusal=FirewallRefusal.CONTENT_BLOCKED,
                rule_id="toxic",
                instruction="be kind",
            )
        }
    )
    firewall = make(firewall_spec(external("classifier"), deny("tenants")), callers)
    error = await refused(firewall, said())
    assert (error.refusal, error.middleware_id, error.rule_id) == (
        FirewallRefusal.CONTENT_BLOCKED,
        "classifier",
        "toxic",
    )
    assert error.message == "send refused by the local firewall (content-blocked): be kind"
    assert [instruction.rule_id for instruction in error.guidance.instructions] == ["toxic"]


async def test_a_refusal_carries_the_instructions_its_middleware_gave_before_it():
    firewall = make(
        firewall_spec(
            patterns(
                "secrets",
                ("hello", "hello", PatternAction.FLAG),
                ("aws", "AKIA", PatternAction.REFUSE),
            )
        )
    )
    error = await refused(firewall, said("hello AKIA"))
    assert error.guidance.instructions[0] == flag("secrets", "hello")
    assert error.guidance.instructions[1].rule_id == "aws"
    assert len(error.guidance.instructions) == 2


async def test_a_rate_limited_send_is_refused_with_a_wait_instruction():
    firewall = make(firewall_spec(rate_limit("flood", burst=1)))
    await admitted(firewall, said())
    error = await refused(firewall, said())
    assert error.refusal is FirewallRefusal.RATE_LIMITED
    assert (error.middleware_id, error.rule_id) == ("flood", "bucket")
    assert error.message.startswith("send refused by the local firewall (rate-limited): ")
    [instruction] = error.guidance.instructions
    assert isinstance(instruction, ExpectationInstruction)
    assert instruction.expectation is Expectation.WAIT
    assert instruction.subjects == ("out",)
    assert instruction.instruction == error.instruction


async def test_middlewares_after_a_built_in_refusal_are_not_consulted():
    callers = Callers()
    firewall = make(
        firewall_spec(
            external("before"),
            deny("tenants", to=("mallory",)),
            rate_limit("flood", burst=1),
            external("after"),
        ),
        callers,
    )
    for _ in range(3):
        error = await refused(firewall, said(to="mallory"))
        assert error.middleware_id == "tenants"
    assert len(callers["before"].calls) == 3
    assert callers["after"].calls == []
    # The refused sends took no token: the one token of the bucket is still there.
    await admitted(firewall, said(to="bob"))
    assert len(callers["after"].calls) == 1
    error = await refused(firewall, said(to="bob"))
    assert error.refusal is FirewallRefusal.RATE_LIMITED


# --- externals --------------------------------------------------------------------------


async def test_external_middlewares_are_called_concurrently():
    gate = asyncio.Event()
    answers: dict[str, Judgement | MiddlewareError | None] = {
        name: Allow(
            instructions=(
                ExpectationInstruction(
                    middleware_id=name,
                    rule_id="seen",
                    expectation=Expectation.PERMITTED,
                    subjects=("out",),
                    instruction=name,
                ),
            )
        )
        for name in ("one", "two")
    }
    callers = Callers(answers, gate=gate)
    firewall = make(firewall_spec(external("one"), external("two", deadline_ms=3_000)), callers)
    check = asyncio.create_task(firewall.check_send("alice", said()))
    # Each call waits for the gate: the second starts only if the first is still running.
    await asyncio.wait_for(callers["one"].started.wait(), BOUND)
    await asyncio.wait_for(callers["two"].started.wait(), BOUND)
    assert not callers["one"].finished.is_set()
    assert not callers["two"].finished.is_set()
    assert not check.done()
    gate.set()
    guidance = await asyncio.wait_for(check, BOUND)
    assert [instruction.instruction for instruction in guidance.instructions] == ["one", "two"]
    assert callers["one"].timeouts == [2.0]
    assert callers["two"].timeouts == [3.0]
    assert callers["one"].calls[0].check_id == guidance.check_id


async def test_a_failing_external_with_on_error_allow_admits_with_a_note_without_the_cause():
    cause = MiddlewareError("unreachable: 10.1.2.3:7790 connection refused")
    firewall = make(
        firewall_spec(external("classifier", on_error=OnError.ALLOW)),
        Callers({"classifier": cause}),
    )
    guidance = await admitted(firewall, said())
    [instruction] = guidance.instructions
    assert isinstance(instruction, ExpectationInstruction)
    assert instruction.middleware_id == "classifier"
    assert instruction.rule_id == ON_ERROR_RULE == "on-error"
    assert instruction.expectation is Expectation.PERMITTED
    assert instruction.subjects == ("out",)
    assert "classifier" in instruction.instruction
    assert "unchecked" in instruction.instruction
    assert "10.1.2.3" not in instruction.instruction
    assert "refused" not in instruction.instruction

    delivered = await firewall.check_delivery("bob", direct("hi"))
    assert delivered.withheld == {}
    assert [i.rule_id for i in delivered.guidance.instructions] == [ON_ERROR_RULE]


async def test_a_failing_external_with_on_error_refuse_refuses_the_send():
    firewall = make(
        firewall_spec(external("classifier", on_error=OnError.REFUSE)),
        Callers({"classifier": MiddlewareError("status UNAVAILABLE from 10.1.2.3")}),
    )
    error = await refused(firewall, said())
    assert error.refusal is FirewallRefusal.MIDDLEWARE_UNAVAILABLE
    assert (error.middleware_id, error.rule_id) == ("classifier", ON_ERROR_RULE)
    assert error.message.startswith("send refused by the local firewall (middleware-unavailable): ")
    assert "10.1.2.3" not in error.message
    [instruction] = error.guidance.instructions
    assert isinstance(instruction, ExpectationInstruction)
    assert instruction.expectation is Expectation.NONE


async def test_a_failing_external_with_on_error_refuse_withholds_every_subject_of_a_delivery():
    firewall = make(
        firewall_spec(external("classifier", on_error=OnError.REFUSE)),
        Callers({"classifier": MiddlewareError("down")}),
    )
    subjects = result("which day?", bob="monday", carol="tuesday")
    verdict = await firewall.check_delivery("alice", subjects)
    check_id = verdict.guidance.check_id
    unavailable = Withheld(check_id=check_id, reason=FirewallRefusal.MIDDLEWARE_UNAVAILABLE)
    assert verdict.withheld == {
        OPERATION_ID: unavailable,
        "agent:bob": unavailable,
        "agent:carol": unavailable,
    }
    assert [subject.text for subject in verdict.guidance.subjects] == ["", "", ""]
    assert not verdict.drop

    message = await firewall.check_delivery("bob", direct("hi"))
    assert message.withheld == {}
    [instruction] = message.guidance.instructions
    assert isinstance(instruction, ExpectationInstruction)
    assert instruction.expectation is Expectation.NONE
    assert instruction.subjects == (POST_ID,)
    assert instruction.instruction.startswith(
        "withheld by the local firewall (middleware-unavailable): "
    )


async def test_an_external_refusal_of_a_delivery_withholds_every_subject():
    refusal = Refuse(refusal=FirewallRefusal.CONTENT_BLOCKED, rule_id="toxic", instruction="no")
    firewall = make(firewall_spec(external("classifier")), Callers({"classifier": refusal}))
    verdict = await firewall.check_delivery("alice", result("which day?", bob="monday"))
    blocked = Withheld(check_id=verdict.guidance.check_id, reason=FirewallRefusal.CONTENT_BLOCKED)
    assert verdict.withheld == {OPERATION_ID: blocked, "agent:bob": blocked}


@pytest.mark.parametrize("on_error", [OnError.ALLOW, OnError.REFUSE])
async def test_an_external_that_never_answers_gives_its_on_error_result_past_its_deadline(
    on_error: OnError,
):
    callers = Callers({"slow": None})
    firewall = make(firewall_spec(external("slow", deadline_ms=50, on_error=on_error)), callers)
    started = time.monotonic()
    outcome = await asyncio.wait_for(
        asyncio.gather(firewall.check_send("alice", said()), return_exceptions=True), BOUND
    )
    elapsed = time.monotonic() - started
    assert elapsed < 1.0
    assert callers["slow"].timeouts == [0.05]
    [answer] = outcome
    match on_error:
        case OnError.ALLOW:
            assert isinstance(answer, CheckedGuidance)
            assert [i.rule_id for i in answer.instructions] == [ON_ERROR_RULE]
        case OnError.REFUSE:
            assert isinstance(answer, FirewallSendError)
            assert answer.refusal is FirewallRefusal.MIDDLEWARE_UNAVAILABLE


# --- a built-in that raises -------------------------------------------------------------


def boom(self: object, check: CheckInput) -> Judgement:
    raise RuntimeError("a defect")


async def test_a_built_in_that_raises_fails_a_send_closed_and_logs_an_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    monkeypatch.setattr(RecipientPolicy, "check", boom)
    recorded = Recorded()
    callers = Callers()
    firewall = make(
        firewall_spec(deny("tenants", to=("mallory",)), external("after")), callers, recorded
    )
    with caplog.at_level(logging.ERROR, logger="gateway.firewall.pipeline"):
        error = await refused(firewall, said())
    assert error.refusal is FirewallRefusal.MIDDLEWARE_UNAVAILABLE
    assert (error.middleware_id, error.rule_id) == ("tenants", FAILED_RULE)
    assert callers["after"].calls == []
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.name == "gateway.firewall.pipeline"
    assert error.check_id in record.getMessage()
    assert "tenants" in record.getMessage()
    assert record.exc_info is not None
    assert recorded.verdicts() == {
        (MiddlewareKind.RECIPIENT_POLICY, Direction.SEND, Verdict.ERROR): 1
    }
    assert recorded.refusals == [
        (MiddlewareKind.RECIPIENT_POLICY, FirewallRefusal.MIDDLEWARE_UNAVAILABLE)
    ]


async def test_a_built_in_that_raises_withholds_a_delivery(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    monkeypatch.setattr(TurnGuidance, "check", boom)
    firewall = make(firewall_spec(TurnGuidanceSpec(id="turns", agents=("*",))))
    with caplog.at_level(logging.ERROR, logger="gateway.firewall.pipeline"):
        verdict = await firewall.check_delivery("alice", result("which day?", bob="monday"))
    assert set(verdict.withheld) == {OPERATION_ID, "agent:bob"}
    assert {w.reason for w in verdict.withheld.values()} == {FirewallRefusal.MIDDLEWARE_UNAVAILABLE}
    assert any(r.levelno == logging.ERROR for r in caplog.records)


# --- deliveries -------------------------------------------------------------------------


async def test_a_withheld_answer_is_a_withheld_entry_and_its_text_is_blanked():
    firewall = make(
        firewall_spec(
            patterns(
                "inbound", ("secret", "secret", PatternAction.WITHHOLD), direction=Directions.IN
            )
        )
    )
    subjects = result("which day?", bob="the secret is monday", carol="tuesday")
    verdict = await firewall.check_delivery("alice", subjects)
    assert verdict.withheld == {
        "agent:bob": Withheld(
            check_id=verdict.guidance.check_id, reason=FirewallRefusal.CONTENT_BLOCKED
        )
    }
    assert not verdict.drop
    texts = {subject.id: subject.text for subject in verdict.guidance.subjects}
    assert texts == {
        OPERATION_ID: "which day?",
        "agent:bob": "",
        "agent:carol": subjects[2].subject.text,
    }
    assert verdict.guidance.instructions == ()


async def test_a_withheld_question_is_a_withheld_entry():
    firewall = make(
        firewall_spec(patterns("inbound", ("secret", "secret", PatternAction.WITHHOLD)))
    )
    verdict = await firewall.check_delivery("alice", result("the secret question", bob="no"))
    assert set(verdict.withheld) == {OPERATION_ID}
    assert verdict.guidance.subjects[0] == GuidanceSubject(
        id=OPERATION_ID,
        sender="agent:alice",
        recipients=("agent:bob",),
        text="",
    )


async def test_a_withheld_message_is_marked_with_a_none_instruction_and_not_rewritten():
    firewall = make(
        firewall_spec(patterns("inbound", ("secret", "secret", PatternAction.WITHHOLD)))
    )
    subjects = direct("a secret for you")
    verdict = await firewall.check_delivery("bob", subjects)
    assert verdict.withheld == {}
    assert not verdict.drop
    assert verdict.guidance.subjects == (subjects[0].subject,)
    assert verdict.guidance.instructions == (
        ExpectationInstruction(
            middleware_id="inbound",
            rule_id="secret",
            expectation=Expectation.NONE,
            subjects=(POST_ID,),
            instruction="withheld by the local firewall (content-blocked): secret matched",
        ),
    )


async def test_a_drop_rule_drops_a_message_but_withholds_an_answer():
    firewall = make(firewall_spec(patterns("inbound", ("spam", "spam", PatternAction.DROP))))
    message = await firewall.check_delivery("bob", direct("buy spam"))
    assert message.drop
    assert message.withheld == {}
    answer = await firewall.check_delivery("alice", result("which day?", bob="spam"))
    assert not answer.drop
    assert set(answer.withheld) == {"agent:bob"}


# --- the observer -----------------------------------------------------------------------


async def test_the_observer_sees_each_consulted_middleware_once_with_its_verdict():
    recorded = Recorded()
    firewall = make(
        firewall_spec(
            deny("tenants", to=("mallory",)),
            patterns("flags", ("hello", "hello", PatternAction.FLAG)),
            external("classifier"),
            patterns(
                "secrets",
                ("aws", "AKIA", PatternAction.REFUSE),
                ("spam", "spam", PatternAction.WITHHOLD),
            ),
            TurnGuidanceSpec(id="turns", agents=("*",)),
            rate_limit("flood"),
        ),
        Callers(),
        recorded,
    )
    await refused(firewall, said("hello AKIA"))
    assert recorded.verdicts() == {
        (MiddlewareKind.RECIPIENT_POLICY, Direction.SEND, Verdict.PASS): 1,
        (MiddlewareKind.CONTENT_PATTERN, Direction.SEND, Verdict.GUIDANCE): 1,
        (MiddlewareKind.EXTERNAL, Direction.SEND, Verdict.PASS): 1,
        (MiddlewareKind.CONTENT_PATTERN, Direction.SEND, Verdict.REFUSED): 1,
    }
    assert all(seconds >= 0.0 for *_, seconds in recorded.checks)
    assert recorded.refusals == [(MiddlewareKind.CONTENT_PATTERN, FirewallRefusal.CONTENT_BLOCKED)]

    recorded.checks.clear()
    recorded.refusals.clear()
    await firewall.check_delivery("bob", direct("spam"))
    assert recorded.verdicts() == {
        (MiddlewareKind.CONTENT_PATTERN, Direction.DELIVERY, Verdict.PASS): 1,
        (MiddlewareKind.EXTERNAL, Direction.DELIVERY, Verdict.PASS): 1,
        (MiddlewareKind.CONTENT_PATTERN, Direction.DELIVERY, Verdict.WITHHELD): 1,
        (MiddlewareKind.TURN_GUIDANCE, Direction.DELIVERY, Verdict.GUIDANCE): 1,
    }
    assert recorded.refusals == [(MiddlewareKind.CONTENT_PATTERN, FirewallRefusal.CONTENT_BLOCKED)]


async def test_the_observer_counts_a_failed_external_as_an_error():
    recorded = Recorded()
    firewall = make(
        firewall_spec(
            external("open", on_error=OnError.ALLOW), external("closed", on_error=OnError.REFUSE)
        ),
        Callers({"open": MiddlewareError("down"), "closed": MiddlewareError("down")}),
        recorded,
    )
    await firewall.check_delivery("bob", direct("hi"))
    assert recorded.verdicts() == {
        (MiddlewareKind.EXTERNAL, Direction.DELIVERY, Verdict.ERROR): 2,
    }
    assert recorded.refusals == [(MiddlewareKind.EXTERNAL, FirewallRefusal.MIDDLEWARE_UNAVAILABLE)]


# --- reloads ----------------------------------------------------------------------------


async def test_a_reload_keeps_the_buckets_of_a_rate_limit_of_the_same_id():
    firewall = make(firewall_spec(rate_limit("flood", burst=1)))
    await admitted(firewall, said())
    await firewall.replace(
        firewall_spec(
            patterns("flags", ("x", "x", PatternAction.FLAG)), rate_limit("flood", burst=1)
        )
    )
    error = await refused(firewall, said())
    assert error.refusal is FirewallRefusal.RATE_LIMITED
    # A rate limit under another id is a new bucket, full.
    await firewall.replace(firewall_spec(rate_limit("other", burst=1)))
    await admitted(firewall, said())


async def test_a_reload_keeps_an_unchanged_external_and_closes_a_removed_or_changed_one():
    callers = Callers()
    firewall = make(
        firewall_spec(external("keep"), external("gone"), external("change", deadline_ms=100)),
        callers,
    )
    kept, gone, changed = callers["keep"], callers["gone"], callers["change"]
    assert len(callers.built) == 3
    await firewall.replace(
        firewall_spec(external("change", deadline_ms=200), external("keep"), external("fresh"))
    )
    assert [spec.id for spec in callers.built] == ["keep", "gone", "change", "change", "fresh"]
    assert callers["keep"] is kept
    assert (kept.closes, gone.closes, changed.closes) == (0, 1, 1)
    await admitted(firewall, said())
    assert len(kept.calls) == 1
    assert gone.calls == []
    assert changed.calls == []
    assert len(callers["change"].calls) == 1
    assert callers["change"].timeouts == [0.2]

    await firewall.close()
    assert (kept.closes, callers["change"].closes, callers["fresh"].closes) == (1, 1, 1)
    assert (gone.closes, changed.closes) == (1, 1)


async def test_selection_follows_the_new_specs_agents_after_a_reload():
    callers = Callers()
    firewall = make(
        firewall_spec(
            external("classifier", agents=("acme-*",)), deny("tenants", agents=("acme-*",))
        ),
        callers,
    )
    first = callers["classifier"]
    await admitted(firewall, said(sender="globex-bot"), agent="globex-bot")
    await refused(firewall, said(sender="acme-bot"), agent="acme-bot")
    assert [call.agent for call in first.calls] == ["acme-bot"]
    new = firewall_spec(
        external("classifier", agents=("globex-*",)), deny("tenants", agents=("globex-*",))
    )
    await firewall.replace(new)
    assert firewall.spec == new
    # The selections remembered for the old policy do not survive it.
    await admitted(firewall, said(sender="acme-bot"), agent="acme-bot")
    await refused(firewall, said(sender="globex-bot"), agent="globex-bot")
    assert callers["classifier"] is not first
    assert first.closes == 1
    assert [call.agent for call in first.calls] == ["acme-bot"]
    assert [call.agent for call in callers["classifier"].calls] == ["globex-bot"]

"""The firewall pipeline: one check over its subjects, through the configured middlewares.

firewall.md §2-§5. A check runs the middlewares that select the agent and direction, in
configured order. The built-ins judge synchronously, in order, until the first refusal;
the external middlewares configured before it are called concurrently, each bounded by its
own deadline. The judgements then combine in configured order: instructions accumulate, and
on a send the first refusal decides (`FirewallSendError`); on a delivery a withhold makes a
result's question or answer `Withheld`, and marks or drops a message or request.

A reload swaps the whole policy at once: a check in flight finishes on the policy it
started with. Rate-limit buckets carry over to the new policy by middleware id, and an
unchanged external middleware keeps its channel.

Every check is counted per middleware (`harness_firewall_checks_total`, the seconds it
took, refusals), and logged by `checkId`, middleware, rule and verdict — with the checked
text only when content logging is on.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, TypeAlias

from harness_contract.errors import FirewallRefusal, FirewallSendError
from harness_contract.guidance import (
    CheckedGuidance,
    Expectation,
    ExpectationInstruction,
    GuidanceSubject,
    Instruction,
    Withheld,
)
from harness_contract.ids import RandomId

from gateway.firewall.builtins import build_builtin
from gateway.firewall.external import External
from gateway.firewall.model import (
    Allow,
    CheckInput,
    Direction,
    ExternalCaller,
    Judgement,
    Middleware,
    MiddlewareKind,
    Refuse,
    Subject,
    Verdict,
    Withhold,
)
from gateway.firewall.spec import ExternalSpec, FirewallSpec

logger = logging.getLogger(__name__)

Stage: TypeAlias = Middleware | External

SELECTION_CACHE: Final = 8192
"""(agent, direction) pairs whose selected middlewares a policy remembers; a gateway hosts
fewer agents than half this, and the cache is emptied, not grown, past it."""

CHECK_ID_PREFIX, CHECK_ID_BYTES = RandomId.CHECK.value
CHECK_ID_POOL: Final = 256
"""Check ids minted from one read of random bytes."""

FAILED_RULE: Final = "failed"
"""The rule id of a built-in middleware that raised (a defect: it fails closed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FirewallObserver:
    """Metrics hooks of the firewall."""

    on_check: Callable[[MiddlewareKind, Direction, Verdict, float], None] = (
        lambda kind, direction, verdict, seconds: None
    )
    """One middleware judged one check: its kind, the direction, its verdict, seconds."""
    on_refusal: Callable[[MiddlewareKind, FirewallRefusal], None] = lambda kind, refusal: None
    """A middleware of this kind refused a send (or withheld text) for this reason."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryVerdict:
    """What one delivery check decided."""

    guidance: CheckedGuidance
    withheld: Mapping[str, Withheld]
    """Rewritable subjects (a result's question or answers) withheld, by subject id."""
    drop: bool = False
    """The item is consumed and never delivered (a message or request only)."""


class _Policy:
    """One firewall file's middlewares, ready to run."""

    def __init__(self, spec: FirewallSpec, stages: tuple[Stage, ...]) -> None:
        self.spec = spec
        self.stages = stages
        self._selected: dict[tuple[str, Direction], tuple[Stage, ...]] = {}
        self.waits_on_deliveries = any(
            isinstance(stage, External) and Direction.DELIVERY in stage.directions
            for stage in stages
        )
        """True when an external middleware checks deliveries (known once per policy)."""

    def selected(self, agent: str, direction: Direction) -> tuple[Stage, ...]:
        """The middlewares that check `agent` in `direction`, in order; matched once per
        agent and direction, not on every check."""
        key = (agent, direction)
        stages = self._selected.get(key)
        if stages is None:
            if len(self._selected) >= SELECTION_CACHE:
                self._selected.clear()
            stages = tuple(stage for stage in self.stages if stage.selects(agent, direction))
            self._selected[key] = stages
        return stages


class _CheckIds:
    """`chk_` + unpadded base64url of 16 random bytes, from a pool of random bytes.

    One `os.urandom` call per `CHECK_ID_POOL` ids rather than per check: a system call
    releases the GIL, and taking it back costs up to a switch interval while another thread
    runs Python."""

    def __init__(self) -> None:
        self._pool = b""
        self._offset = 0

    def mint(self) -> str:
        if self._offset >= len(self._pool):
            self._pool = os.urandom(CHECK_ID_BYTES * CHECK_ID_POOL)
            self._offset = 0
        chunk = self._pool[self._offset : self._offset + CHECK_ID_BYTES]
        self._offset += CHECK_ID_BYTES
        return CHECK_ID_PREFIX + base64.urlsafe_b64encode(chunk).rstrip(b"=").decode("ascii")


class Firewall:
    """The local firewall of one daemon: its policy, checks and reloads."""

    def __init__(
        self,
        spec: FirewallSpec,
        *,
        caller_factory: Callable[[ExternalSpec], ExternalCaller],
        observer: FirewallObserver | None = None,
        clock: Callable[[], float] = time.time,
        log_content: bool = False,
    ) -> None:
        self._caller_factory = caller_factory
        self._observer = observer or FirewallObserver()
        self._clock = clock
        self._log_content_setting = log_content
        self._check_ids = _CheckIds()
        self._policy = self._build(spec, previous=None)

    # --- policy ------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """True when the policy has middlewares: every send and item then carries guidance.
        An empty file means no pipeline and no guidance fields at all."""
        return bool(self._policy.stages)

    @property
    def waits_on_deliveries(self) -> bool:
        """True when an external middleware checks deliveries: an item's checks then wait
        on the network and run concurrently."""
        return self._policy.waits_on_deliveries

    @property
    def spec(self) -> FirewallSpec:
        """The policy in force."""
        return self._policy.spec

    def _build(self, spec: FirewallSpec, previous: _Policy | None) -> _Policy:
        old: dict[str, Stage] = {} if previous is None else {s.id: s for s in previous.stages}
        stages: list[Stage] = []
        for middleware in spec.middlewares:
            if isinstance(middleware, ExternalSpec):
                kept = old.get(middleware.id)
                if isinstance(kept, External) and kept.spec == middleware:
                    stages.append(kept)
                else:
                    stages.append(External(middleware, self._caller_factory(middleware)))
            else:
                stages.append(build_builtin(middleware, previous=_builtin(old.get(middleware.id))))
        return _Policy(spec, tuple(stages))

    async def replace(self, spec: FirewallSpec) -> None:
        """Put a new policy in force; checks in flight finish on the old one. The channels
        of external middlewares the new policy no longer has are closed."""
        previous = self._policy
        self._policy = self._build(spec, previous)
        kept = {id(stage) for stage in self._policy.stages}
        await asyncio.gather(
            *(
                stage.close()
                for stage in previous.stages
                if isinstance(stage, External) and id(stage) not in kept
            ),
            return_exceptions=True,
        )

    async def close(self) -> None:
        """Close every external middleware's channel."""
        await asyncio.gather(
            *(stage.close() for stage in self._policy.stages if isinstance(stage, External)),
            return_exceptions=True,
        )

    # --- checks ------------------------------------------------------------------------

    async def check_send(self, agent: str, subject: Subject) -> CheckedGuidance:
        """Check `agent`'s send; its guidance, or raises `FirewallSendError`."""
        policy = self._policy
        check = self._input(Direction.SEND, agent, (subject,))
        judged = await self._judge(policy, check)
        instructions: list[Instruction] = []
        for stage, judgement in judged:
            match judgement:
                case Allow():
                    instructions.extend(judgement.instructions)
                case Refuse() | Withhold():
                    refusal, rule_id, text = _refusal_of(judgement)
                    instructions.extend(judgement.instructions)
                    instructions.append(
                        ExpectationInstruction(
                            middleware_id=stage.id,
                            rule_id=rule_id,
                            expectation=Expectation.WAIT
                            if refusal is FirewallRefusal.RATE_LIMITED
                            else Expectation.NONE,
                            subjects=(subject.id,),
                            instruction=text,
                        )
                    )
                    self._observer.on_refusal(stage.kind, refusal)
                    self._log_verdict(policy, check, stage, rule_id, "refused")
                    raise FirewallSendError(
                        check_id=check.check_id,
                        refusal=refusal,
                        middleware_id=stage.id,
                        rule_id=rule_id,
                        instruction=text,
                        guidance=self._guidance(check, instructions, withheld={}),
                    )
        return self._guidance(check, instructions, withheld={})

    async def check_delivery(self, agent: str, subjects: Sequence[Subject]) -> DeliveryVerdict:
        """Check one item's subjects (one check) delivered to `agent`."""
        policy = self._policy
        check = self._input(Direction.DELIVERY, agent, tuple(subjects))
        judged = await self._judge(policy, check)
        roles = {subject.id: subject.role for subject in check.subjects}
        instructions: list[Instruction] = []
        withheld: dict[str, Withheld] = {}
        drop = False
        for stage, judgement in judged:
            if isinstance(judgement, Allow):
                instructions.extend(judgement.instructions)
                continue
            if isinstance(judgement, Refuse):
                # Only an external middleware can say this of a delivery, and its caller
                # refuses such an answer; were one to slip through, it withholds everything.
                judgement = Withhold(
                    subject_ids=tuple(roles),
                    reason=judgement.refusal,
                    rule_id=judgement.rule_id,
                    instruction=judgement.instruction,
                )
            marked: list[str] = []
            for subject_id in judgement.subject_ids:
                role = roles.get(subject_id)
                if role is None:
                    continue
                if role.rewritable:
                    withheld.setdefault(
                        subject_id, Withheld(check_id=check.check_id, reason=judgement.reason)
                    )
                elif judgement.drop:
                    drop = True
                else:
                    marked.append(subject_id)
            if marked:
                # A message is never rewritten: the runtime is told not to act on it.
                instructions.append(
                    ExpectationInstruction(
                        middleware_id=stage.id,
                        rule_id=judgement.rule_id,
                        expectation=Expectation.NONE,
                        subjects=tuple(marked),
                        instruction=f"withheld by the local firewall ({judgement.reason.value}): "
                        + judgement.instruction,
                    )
                )
            instructions.extend(judgement.instructions)
            self._observer.on_refusal(stage.kind, judgement.reason)
            self._log_verdict(
                policy, check, stage, judgement.rule_id, "dropped" if drop else "withheld"
            )
        return DeliveryVerdict(
            guidance=self._guidance(check, instructions, withheld=withheld),
            withheld=withheld,
            drop=drop,
        )

    def _input(self, direction: Direction, agent: str, subjects: tuple[Subject, ...]) -> CheckInput:
        return CheckInput(
            check_id=self._check_ids.mint(),
            direction=direction,
            agent=agent,
            subjects=subjects,
            now=self._clock(),
        )

    def _guidance(
        self,
        check: CheckInput,
        instructions: list[Instruction],
        *,
        withheld: Mapping[str, Withheld],
    ) -> CheckedGuidance:
        subjects: tuple[GuidanceSubject, ...] = tuple(
            # Withheld text never reaches the runtime, the guidance's copy included.
            replace(subject.subject, text="") if subject.id in withheld else subject.subject
            for subject in check.subjects
        )
        return CheckedGuidance(
            check_id=check.check_id, subjects=subjects, instructions=tuple(instructions)
        )

    async def _judge(self, policy: _Policy, check: CheckInput) -> list[tuple[Stage, Judgement]]:
        """Every selected middleware's judgement, in configured order, up to the first
        refusal of a send."""
        selected = policy.selected(check.agent, check.direction)
        judgements: list[Judgement | None] = [None] * len(selected)
        end = len(selected)
        for index, stage in enumerate(selected):
            if isinstance(stage, External):
                continue
            started = time.perf_counter()
            failed = False
            try:
                judgement = stage.check(check)
            except Exception:
                # A defect in a built-in: it fails closed, and the operator must know.
                logger.exception(
                    "firewall middleware raised check_id=%s middleware=%s",
                    check.check_id,
                    stage.id,
                )
                judgement = _failed(check)
                failed = True
            self._count(stage, check, judgement, failed, time.perf_counter() - started)
            judgements[index] = judgement
            if isinstance(judgement, Refuse) and check.direction is Direction.SEND:
                end = index
                break
        externals = [
            (index, stage)
            for index, stage in enumerate(selected[: end + 1])
            if isinstance(stage, External)
        ]
        if externals:
            answers = await asyncio.gather(*(self._call(stage, check) for _, stage in externals))
            for (index, _), judgement in zip(externals, answers, strict=True):
                judgements[index] = judgement
        return [
            (stage, judgement)
            for stage, judgement in zip(selected[: end + 1], judgements, strict=False)
            if judgement is not None
        ]

    async def _call(self, stage: External, check: CheckInput) -> Judgement:
        started = time.perf_counter()
        judgement, failed = await stage.check(check)
        self._count(stage, check, judgement, failed, time.perf_counter() - started)
        return judgement

    def _count(
        self, stage: Stage, check: CheckInput, judgement: Judgement, failed: bool, seconds: float
    ) -> None:
        verdict = Verdict.ERROR if failed else _verdict(judgement)
        self._observer.on_check(stage.kind, check.direction, verdict, seconds)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "firewall check check_id=%s direction=%s agent=%s middleware=%s verdict=%s",
                check.check_id,
                check.direction.value,
                check.agent,
                stage.id,
                verdict.value,
            )

    def _log_verdict(
        self, policy: _Policy, check: CheckInput, stage: Stage, rule_id: str, verdict: str
    ) -> None:
        # The checked text only when the operator turned content logging on.
        texts = (
            f" texts={[subject.subject.text for subject in check.subjects]!r}"
            if policy.spec.content_logging or self._log_content_setting
            else ""
        )
        logger.info(
            "firewall %s check_id=%s direction=%s agent=%s middleware=%s rule=%s%s",
            verdict,
            check.check_id,
            check.direction.value,
            check.agent,
            stage.id,
            rule_id,
            texts,
        )


def _builtin(stage: Stage | None) -> Middleware | None:
    return None if stage is None or isinstance(stage, External) else stage


def _verdict(judgement: Judgement) -> Verdict:
    match judgement:
        case Allow(instructions=instructions):
            return Verdict.GUIDANCE if instructions else Verdict.PASS
        case Refuse():
            return Verdict.REFUSED
        case Withhold():
            return Verdict.WITHHELD


def _refusal_of(judgement: Refuse | Withhold) -> tuple[FirewallRefusal, str, str]:
    match judgement:
        case Refuse():
            return judgement.refusal, judgement.rule_id, judgement.instruction
        case Withhold():
            return judgement.reason, judgement.rule_id, judgement.instruction


def _failed(check: CheckInput) -> Judgement:
    text = "the local firewall could not check this text"
    if check.direction is Direction.SEND:
        return Refuse(
            refusal=FirewallRefusal.MIDDLEWARE_UNAVAILABLE, rule_id=FAILED_RULE, instruction=text
        )
    return Withhold(
        subject_ids=tuple(subject.id for subject in check.subjects),
        reason=FirewallRefusal.MIDDLEWARE_UNAVAILABLE,
        rule_id=FAILED_RULE,
        instruction=text,
    )

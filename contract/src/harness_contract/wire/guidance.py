"""The local firewall's guidance and withheld text, both ways (firewall.md §3)."""

from __future__ import annotations

import math
from typing import assert_never

from harness_contract._gen.harness.v1 import guidance_pb2
from harness_contract.errors import InvalidRequestError
from harness_contract.guidance import (
    CheckedGuidance,
    CollectiveGuidance,
    ExpectationInstruction,
    GuidanceSubject,
    Instruction,
    LocalGuidance,
    MemberGuidance,
    Uncertain,
    UncertainInstruction,
    Withheld,
)
from harness_contract.wire.bridges import EXPECTATIONS, REFUSALS


def checked_guidance_to_proto(guidance: CheckedGuidance) -> guidance_pb2.CheckedGuidance:
    """One check's subjects and instructions."""
    result = guidance_pb2.CheckedGuidance(check_id=guidance.check_id)
    for subject in guidance.subjects:
        result.subjects.add(
            id=subject.id,
            sender=subject.sender,
            recipients=subject.recipients,
            text=subject.text,
        )
    for instruction in guidance.instructions:
        target = result.instructions.add()
        match instruction:
            case ExpectationInstruction():
                target.expectation.middleware_id = instruction.middleware_id
                target.expectation.rule_id = instruction.rule_id
                target.expectation.expectation = EXPECTATIONS.to_proto(instruction.expectation)
                target.expectation.subjects.extend(instruction.subjects)
                target.expectation.instruction = instruction.instruction
            case UncertainInstruction():
                target.uncertain.middleware_id = instruction.middleware_id
                target.uncertain.rule_id = instruction.rule_id
                target.uncertain.uncertain.choice = instruction.uncertain.choice
                target.uncertain.uncertain.probability = instruction.uncertain.probability
                target.uncertain.instruction = instruction.instruction
            case _:
                assert_never(instruction)
    return result


def checked_guidance_from_proto(guidance: guidance_pb2.CheckedGuidance) -> CheckedGuidance:
    """CheckedGuidance; an instruction of neither shape is `InvalidRequestError`."""
    instructions: list[Instruction] = []
    for instruction in guidance.instructions:
        kind = instruction.WhichOneof("kind")
        if kind == "expectation":
            raw = instruction.expectation
            instructions.append(
                ExpectationInstruction(
                    middleware_id=raw.middleware_id,
                    rule_id=raw.rule_id,
                    expectation=EXPECTATIONS.from_proto(raw.expectation, "expectation"),
                    subjects=tuple(raw.subjects),
                    instruction=raw.instruction,
                )
            )
        elif kind == "uncertain":
            judged = instruction.uncertain
            if not math.isfinite(judged.uncertain.probability):
                raise InvalidRequestError.of_field("uncertain.probability: numbers must be finite")
            instructions.append(
                UncertainInstruction(
                    middleware_id=judged.middleware_id,
                    rule_id=judged.rule_id,
                    uncertain=Uncertain(
                        choice=judged.uncertain.choice,
                        probability=judged.uncertain.probability,
                    ),
                    instruction=judged.instruction,
                )
            )
        else:
            raise InvalidRequestError.of_field("guidance.instructions: an instruction has no kind")
    return CheckedGuidance(
        check_id=guidance.check_id,
        subjects=tuple(
            GuidanceSubject(
                id=subject.id,
                sender=subject.sender,
                recipients=tuple(subject.recipients),
                text=subject.text,
            )
            for subject in guidance.subjects
        ),
        instructions=tuple(instructions),
    )


def local_guidance_to_proto(guidance: LocalGuidance) -> guidance_pb2.LocalGuidance:
    """Either LocalGuidance form."""
    result = guidance_pb2.LocalGuidance()
    match guidance:
        case CheckedGuidance():
            result.checked.CopyFrom(checked_guidance_to_proto(guidance))
        case CollectiveGuidance(question=question, answers=answers):
            result.collective.SetInParent()
            if question is not None:
                result.collective.question.CopyFrom(checked_guidance_to_proto(question))
            for answer in answers:
                result.collective.answers.add(
                    member=answer.member, guidance=checked_guidance_to_proto(answer.guidance)
                )
        case _:
            assert_never(guidance)
    return result


def local_guidance_from_proto(guidance: guidance_pb2.LocalGuidance) -> LocalGuidance:
    """Either LocalGuidance form; neither is `InvalidRequestError`."""
    kind = guidance.WhichOneof("kind")
    if kind == "checked":
        return checked_guidance_from_proto(guidance.checked)
    if kind == "collective":
        collective = guidance.collective
        return CollectiveGuidance(
            question=(
                checked_guidance_from_proto(collective.question)
                if collective.HasField("question")
                else None
            ),
            answers=tuple(
                MemberGuidance(
                    member=answer.member, guidance=checked_guidance_from_proto(answer.guidance)
                )
                for answer in collective.answers
            ),
        )
    raise InvalidRequestError.of_field("guidance: neither checked nor collective")


def withheld_to_proto(withheld: Withheld) -> guidance_pb2.Withheld:
    """`{kind: "withheld", checkId, reason}`."""
    return guidance_pb2.Withheld(
        check_id=withheld.check_id, reason=REFUSALS.to_proto(withheld.reason)
    )


def withheld_from_proto(withheld: guidance_pb2.Withheld) -> Withheld:
    """Withheld text."""
    return Withheld(
        check_id=withheld.check_id, reason=REFUSALS.from_proto(withheld.reason, "reason")
    )

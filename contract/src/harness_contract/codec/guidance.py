"""The JSON forms of the local firewall's guidance and of withheld text (firewall.md §3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import assert_never

from harness_contract.codec.strict import (
    CodecError,
    expect_enum,
    expect_list,
    expect_object,
    expect_str,
    expect_strs,
)
from harness_contract.errors import FirewallRefusal
from harness_contract.guidance import (
    CheckedGuidance,
    CollectiveGuidance,
    Expectation,
    ExpectationInstruction,
    GuidanceSubject,
    Instruction,
    LocalGuidance,
    MemberGuidance,
    Uncertain,
    UncertainInstruction,
    Withheld,
)
from harness_contract.jsonvalue import JsonValue


def checked_guidance_to_json(guidance: CheckedGuidance) -> dict[str, JsonValue]:
    """CheckedGuidance in the contract's shape."""
    return {
        "checkId": guidance.check_id,
        "subjects": tuple(
            {
                "id": subject.id,
                "sender": subject.sender,
                "recipients": subject.recipients,
                "text": subject.text,
            }
            for subject in guidance.subjects
        ),
        "instructions": tuple(_instruction_to_json(item) for item in guidance.instructions),
    }


def _instruction_to_json(instruction: Instruction) -> dict[str, JsonValue]:
    match instruction:
        case ExpectationInstruction():
            return {
                "middlewareId": instruction.middleware_id,
                "ruleId": instruction.rule_id,
                "expectation": instruction.expectation.value,
                "subjects": instruction.subjects,
                "instruction": instruction.instruction,
            }
        case UncertainInstruction():
            return {
                "middlewareId": instruction.middleware_id,
                "ruleId": instruction.rule_id,
                "uncertain": {
                    "choice": instruction.uncertain.choice,
                    "probability": instruction.uncertain.probability,
                },
                "instruction": instruction.instruction,
            }
        case _:
            assert_never(instruction)


def checked_guidance_from_json(value: JsonValue) -> CheckedGuidance:
    """Read CheckedGuidance."""
    obj = expect_object(value, "guidance", {"checkId", "subjects", "instructions"})
    subjects = []
    for item in expect_list(obj["subjects"], "subjects"):
        subject = expect_object(item, "subject", {"id", "sender", "recipients", "text"})
        subjects.append(
            GuidanceSubject(
                id=expect_str(subject["id"], "subject.id"),
                sender=expect_str(subject["sender"], "subject.sender"),
                recipients=expect_strs(subject["recipients"], "subject.recipients"),
                text=expect_str(subject["text"], "subject.text"),
            )
        )
    instructions: list[Instruction] = []
    for item in expect_list(obj["instructions"], "instructions"):
        if isinstance(item, Mapping) and "uncertain" in item:
            raw = expect_object(
                item, "instruction", {"middlewareId", "ruleId", "uncertain", "instruction"}
            )
            uncertain = expect_object(raw["uncertain"], "uncertain", {"choice", "probability"})
            probability = uncertain["probability"]
            if isinstance(probability, bool) or not isinstance(probability, int | float):
                raise CodecError("uncertain.probability: expected a number")
            instructions.append(
                UncertainInstruction(
                    middleware_id=expect_str(raw["middlewareId"], "middlewareId"),
                    rule_id=expect_str(raw["ruleId"], "ruleId"),
                    uncertain=Uncertain(
                        choice=expect_str(uncertain["choice"], "uncertain.choice"),
                        probability=float(probability),
                    ),
                    instruction=expect_str(raw["instruction"], "instruction"),
                )
            )
        else:
            raw = expect_object(
                item,
                "instruction",
                {"middlewareId", "ruleId", "expectation", "subjects", "instruction"},
            )
            instructions.append(
                ExpectationInstruction(
                    middleware_id=expect_str(raw["middlewareId"], "middlewareId"),
                    rule_id=expect_str(raw["ruleId"], "ruleId"),
                    expectation=expect_enum(Expectation, raw["expectation"], "expectation"),
                    subjects=expect_strs(raw["subjects"], "subjects"),
                    instruction=expect_str(raw["instruction"], "instruction"),
                )
            )
    return CheckedGuidance(
        check_id=expect_str(obj["checkId"], "checkId"),
        subjects=tuple(subjects),
        instructions=tuple(instructions),
    )


def local_guidance_to_json(guidance: LocalGuidance) -> dict[str, JsonValue]:
    """Either LocalGuidance form."""
    match guidance:
        case CheckedGuidance():
            return checked_guidance_to_json(guidance)
        case CollectiveGuidance(question=question, answers=answers):
            value: dict[str, JsonValue] = {
                "answers": tuple(
                    {**checked_guidance_to_json(answer.guidance), "member": answer.member}
                    for answer in answers
                )
            }
            if question is not None:
                value["question"] = checked_guidance_to_json(question)
            return value
        case _:
            assert_never(guidance)


def local_guidance_from_json(value: JsonValue) -> LocalGuidance:
    """Read either LocalGuidance form (the collective one has `answers`)."""
    if isinstance(value, Mapping) and "answers" in value:
        obj = expect_object(value, "guidance", {"answers"}, {"question"})
        answers = []
        for item in expect_list(obj["answers"], "answers"):
            if not isinstance(item, Mapping):
                raise CodecError("answers: expected objects")
            answers.append(
                MemberGuidance(
                    member=expect_str(item.get("member"), "answers.member"),
                    guidance=checked_guidance_from_json(
                        {key: entry for key, entry in item.items() if key != "member"}
                    ),
                )
            )
        question = obj.get("question")
        return CollectiveGuidance(
            question=None if question is None else checked_guidance_from_json(question),
            answers=tuple(answers),
        )
    return checked_guidance_from_json(value)


def withheld_to_json(withheld: Withheld) -> dict[str, JsonValue]:
    """`{kind: "withheld", checkId, reason}`."""
    return {"kind": "withheld", "checkId": withheld.check_id, "reason": withheld.reason.value}


def withheld_from_json(value: JsonValue) -> Withheld:
    obj = expect_object(value, "withheld", {"kind", "checkId", "reason"})
    if obj["kind"] != "withheld":
        raise CodecError("withheld.kind: expected withheld")
    return Withheld(
        check_id=expect_str(obj["checkId"], "checkId"),
        reason=expect_enum(FirewallRefusal, obj["reason"], "withheld.reason"),
    )

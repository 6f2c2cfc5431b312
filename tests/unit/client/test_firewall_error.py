"""A FirewallSendError decodes with the refusing rule's instruction: the daemon's
`instruction` field when it sends one, else (an older daemon) the instruction of the
refusing rule in the guidance, else the text after the refusal in the status message."""

from __future__ import annotations

from typing import Any, TypeVar

from harness_client import FirewallRefusal, FirewallSendError
from harness_client import _convert as client_convert
from harness_contract import errors as gateway_errors
from harness_contract._gen.harness.v1 import errors_pb2, guidance_pb2
from harness_contract.guidance import CheckedGuidance

from gateway.rpc import convert

T = TypeVar("T")
CHECK_ID = "chk_" + "F" * 22


def to_client(message: Any, client_type: type[T]) -> T:
    """The gateway's protobuf message as the client's, through the wire bytes."""
    return client_type.FromString(message.SerializeToString())  # type: ignore[attr-defined, no-any-return]


def refusal(*, instruction: str = "", guidance_instruction: str | None = None):
    """A client-side FirewallSendError message refused by `tenants/acme-out`."""
    guidance = guidance_pb2.CheckedGuidance(check_id=CHECK_ID)
    guidance.subjects.add(id="out", sender="agent:acme-1", recipients=["agent:zed"], text="hi")
    if guidance_instruction is not None:
        rule = guidance.instructions.add().expectation
        rule.middleware_id = "tenants"
        rule.rule_id = "acme-out"
        rule.expectation = guidance_pb2.EXPECTATION_NONE
        rule.subjects.append("out")
        rule.instruction = guidance_instruction
    return errors_pb2.FirewallSendError(
        check_id=CHECK_ID,
        refusal=guidance_pb2.FIREWALL_REFUSAL_FORBIDDEN_RECIPIENT,
        middleware_id="tenants",
        rule_id="acme-out",
        guidance=guidance,
        instruction=instruction,
    )


MESSAGE = "send refused by the local firewall (forbidden-recipient): from the status"


def test_the_instruction_field_wins_over_the_guidance_and_the_message():
    error = client_convert.error_from_detail(
        refusal(instruction="acme agents may only message acme", guidance_instruction="old"),
        MESSAGE,
    )
    assert isinstance(error, FirewallSendError)
    assert error.instruction == "acme agents may only message acme"
    assert error.refusal is FirewallRefusal.FORBIDDEN_RECIPIENT
    assert (error.check_id, error.middleware_id, error.rule_id) == (
        CHECK_ID,
        "tenants",
        "acme-out",
    )
    assert error.message == (
        "send refused by the local firewall (forbidden-recipient): "
        "acme agents may only message acme"
    )


def test_an_older_daemon_without_the_field_gives_the_refusing_rules_guidance_instruction():
    error = client_convert.firewall_error_from_proto(
        refusal(guidance_instruction="from the guidance"), MESSAGE
    )
    assert error.instruction == "from the guidance"


def test_an_older_daemon_without_a_guided_rule_gives_the_status_messages_text():
    error = client_convert.firewall_error_from_proto(refusal(), MESSAGE)
    assert error.instruction == "from the status"
    # A kept failure (ReadSend) has no status message: the instruction is empty.
    assert client_convert.firewall_error_from_proto(refusal()).instruction == ""


def test_the_gateways_error_arrives_with_its_instruction_and_every_field():
    sent = gateway_errors.FirewallSendError(
        check_id=CHECK_ID,
        refusal=gateway_errors.FirewallRefusal.RATE_LIMITED,
        middleware_id="flood",
        rule_id="bucket",
        instruction="wait 3 s before sending again",
        # The rate limiter's refusal carries no instruction of its own in the guidance.
        guidance=CheckedGuidance(check_id=CHECK_ID, subjects=(), instructions=()),
    )
    wire = to_client(convert.firewall_error_to_proto(sent), errors_pb2.FirewallSendError)
    error = client_convert.firewall_error_from_proto(wire)
    assert error.to_json() == {
        "type": "FirewallSendError",
        "reason": "rate-limited",
        "checkId": CHECK_ID,
        "middlewareId": "flood",
        "ruleId": "bucket",
        "instruction": "wait 3 s before sending again",
        "guidance": {"checkId": CHECK_ID, "subjects": [], "instructions": []},
    }
    assert error.message == sent.message


def test_a_kept_firewall_failure_decodes_with_its_instruction():
    failure = errors_pb2.SendFailure()
    failure.firewall_send_error.CopyFrom(refusal(instruction="kept"))
    decoded = client_convert.send_failure_from_proto(failure)
    assert isinstance(decoded, FirewallSendError)
    assert decoded.instruction == "kept"

"""`GrpcExternalCaller`: the gRPC client of one operator's firewall middleware (firewall.md §4).

An `external` middleware calls `harness.v1.FirewallMiddlewareService/Check` on the operator's
server with a deadline and turns the answer into a `Judgement`. The firewall sees only the
`ExternalCaller` Protocol of `gateway/firewall/model.py`; no gRPC type leaves this module.

The operator's server is trusted to judge, not to be well formed: its answer is checked as
strictly as a client's request (a verdict that fits the direction, subject ids of this check,
known enum values, a probability in [0, 1], bounded counts and lengths), and anything else is
a `MiddlewareError`, so the middleware's `on_error` decides exactly as for a server that is
down or slow. Error messages name the cause and never the checked text.

The channel opens on the first call, not in `__init__`: building a caller does no I/O, and
the channel binds to the event loop that uses it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from collections.abc import Iterable, Sequence
from typing import Final, assert_never

import grpc
from harness_contract._gen.harness.v1 import (
    firewall_middleware_pb2,
    firewall_middleware_pb2_grpc,
    guidance_pb2,
)
from harness_contract.addresses import agent_address
from harness_contract.errors import FirewallRefusal, InvalidRequestError
from harness_contract.guidance import ExpectationInstruction, Instruction, UncertainInstruction
from harness_contract.wire import REFUSALS, checked_guidance_from_proto

from gateway.firewall.model import (
    Allow,
    CheckInput,
    Direction,
    Judgement,
    MiddlewareError,
    Refuse,
    Withhold,
)
from gateway.firewall.spec import ExternalSpec
from gateway.rpc.tls import TlsConfigError, load_ca_bundle

logger = logging.getLogger(__name__)

MAX_RECEIVE_BYTES: Final = 1 << 20
"""Largest answer accepted from a middleware, in bytes (1 MiB): far above any sane verdict,
so a runaway server cannot make the gateway buffer megabytes per check."""
MAX_INSTRUCTIONS: Final = 64
"""Most instructions one answer may carry; more is a malformed answer."""
MAX_TEXT_CHARS: Final = 4096
"""Longest string (rule id, instruction, choice, subject id) an answer may carry, in
characters; the model reads these, so a longer one is a malformed answer, not truncated."""
MAX_DETAIL_CHARS: Final = 200
"""Characters of a failed call's status details kept in the error message (the operator's
server wrote them; the rest goes nowhere)."""
DEADLINE_GRACE: Final = 0.05
"""Seconds past the call's own gRPC deadline after which a backstop timer gives up on it, so
a check stays bounded by its deadline even if the gRPC deadline were not honoured."""
WITHHELD_TEXT: Final = "the operator's middleware judged it unfit to act on"
"""`Withhold.instruction` for a withhold from an external middleware (the protobuf
`Withhold` carries no text of its own); a marked message shows `withheld by the local
firewall (<reason>): ` and this."""

_DIRECTIONS: Final = {
    Direction.SEND: firewall_middleware_pb2.CHECK_DIRECTION_SEND,
    Direction.DELIVERY: firewall_middleware_pb2.CHECK_DIRECTION_DELIVERY,
}


class CallerState(enum.StrEnum):
    """Where a caller is in its life."""

    IDLE = "idle"
    """Built; no channel yet (it opens on the first call)."""
    OPEN = "open"
    """The channel is open."""
    CLOSED = "closed"
    """`close()` ran; every later call fails."""


class _Malformed(Exception):
    """An answer that breaks the protocol; becomes `MiddlewareError("malformed answer: ...")`."""


class GrpcExternalCaller:
    """Calls one operator middleware's `Check`; implements `ExternalCaller`.

    Every failure (unreachable, deadline exceeded, a failing status, a malformed answer, a
    closed caller) raises `MiddlewareError`; every instruction in a judgement carries the
    configured `spec.id` as its middleware id, whatever the server said."""

    __slots__ = ("_channel", "_spec", "_state", "_stub")

    def __init__(self, spec: ExternalSpec) -> None:
        self._spec = spec
        self._state = CallerState.IDLE
        self._channel: grpc.aio.Channel | None = None
        self._stub: firewall_middleware_pb2_grpc.FirewallMiddlewareServiceAsyncStub | None = None

    @property
    def state(self) -> CallerState:
        """IDLE until the first call, OPEN until `close()`, then CLOSED."""
        return self._state

    async def check(
        self,
        check: CheckInput,
        *,
        timeout: float,  # noqa: ASYNC109 - the Protocol's name; it is the call's gRPC deadline
    ) -> Judgement:
        """One `Check` call within `timeout` seconds; raises `MiddlewareError` on any failure."""
        try:
            return await self._call(check, timeout)
        except MiddlewareError as error:
            # The pipeline logs the verdict; this says which call failed, for debugging.
            logger.debug(
                "firewall middleware call failed middleware=%s check=%s cause=%s",
                self._spec.id,
                check.check_id,
                error,
            )
            raise

    async def _call(self, check: CheckInput, deadline: float) -> Judgement:
        stub = self._open()
        request = check_request_to_proto(check)
        try:
            async with asyncio.timeout(deadline + DEADLINE_GRACE):
                response = await stub.Check(request, timeout=deadline)
        except grpc.aio.AioRpcError as error:
            raise MiddlewareError(_describe_status(error)) from None
        except TimeoutError:
            raise MiddlewareError("deadline exceeded") from None
        try:
            return judgement_from_proto(response, check, middleware_id=self._spec.id)
        except _Malformed as error:
            raise MiddlewareError(f"malformed answer: {error}") from None

    async def close(self) -> None:
        """Close the channel, ending any call in flight; idempotent, safe before the first call."""
        if self._state is CallerState.CLOSED:
            return
        self._state = CallerState.CLOSED
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close()

    def _open(self) -> firewall_middleware_pb2_grpc.FirewallMiddlewareServiceAsyncStub:
        match self._state:
            case CallerState.OPEN:
                assert self._stub is not None
                return self._stub
            case CallerState.CLOSED:
                raise MiddlewareError("the caller is closed")
            case CallerState.IDLE:
                pass
            case _:
                assert_never(self._state)
        options = (("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),)
        if self._spec.tls:
            try:
                roots = None if self._spec.tls_ca is None else load_ca_bundle(self._spec.tls_ca)
            except TlsConfigError as error:
                # Not latched: a fixed file is picked up on the next call.
                raise MiddlewareError(f"tls_ca unusable: {error}") from None
            credentials = grpc.ssl_channel_credentials(root_certificates=roots)
            channel = grpc.aio.secure_channel(self._spec.target, credentials, options=options)
        else:
            channel = grpc.aio.insecure_channel(self._spec.target, options=options)
        stub = firewall_middleware_pb2_grpc.FirewallMiddlewareServiceStub(channel)
        self._channel, self._stub, self._state = channel, stub, CallerState.OPEN
        return stub


def _describe_status(error: grpc.aio.AioRpcError) -> str:
    """`deadline exceeded`, or the status code's name and the start of its details."""
    code = error.code()
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return "deadline exceeded"
    details = (error.details() or "")[:MAX_DETAIL_CHARS]
    return f"{code.name}: {details}" if details else code.name


def check_request_to_proto(check: CheckInput) -> firewall_middleware_pb2.CheckRequest:
    """The `CheckRequest` of one check: its id, direction, agent address and subjects."""
    return firewall_middleware_pb2.CheckRequest(
        check_id=check.check_id,
        direction=_DIRECTIONS[check.direction],
        agent=agent_address(check.agent),
        subjects=[
            guidance_pb2.GuidanceSubject(
                id=subject.subject.id,
                sender=subject.subject.sender,
                recipients=subject.subject.recipients,
                text=subject.subject.text,
            )
            for subject in check.subjects
        ],
    )


def judgement_from_proto(
    response: firewall_middleware_pb2.CheckResponse, check: CheckInput, *, middleware_id: str
) -> Judgement:
    """The judgement an answer gives `check`; raises `_Malformed` for an answer that breaks
    the protocol. Every instruction's middleware id becomes `middleware_id`."""
    subject_ids = frozenset(subject.id for subject in check.subjects)
    verdict = response.WhichOneof("verdict")
    if verdict == "allow":
        return Allow(
            instructions=_instructions(response.allow.instructions, subject_ids, middleware_id)
        )
    if verdict == "refuse":
        refuse = response.refuse
        if check.direction is not Direction.SEND:
            raise _Malformed("refuse on a delivery check")
        _check_rule_id(refuse.rule_id)
        _check_length("refuse.instruction", refuse.instruction)
        return Refuse(
            refusal=_refusal(refuse.refusal, "refuse.refusal"),
            rule_id=refuse.rule_id,
            instruction=refuse.instruction,
        )
    if verdict == "withhold":
        withhold = response.withhold
        if check.direction is not Direction.DELIVERY:
            raise _Malformed("withhold on a send check")
        if not withhold.subject_ids:
            raise _Malformed("withhold names no subject")
        if any(subject_id not in subject_ids for subject_id in withhold.subject_ids):
            raise _Malformed("withhold names a subject id not in the check")
        _check_rule_id(withhold.rule_id)
        reason = _refusal(withhold.reason, "withhold.reason")
        return Withhold(
            # A repeated id withholds the same text once.
            subject_ids=tuple(dict.fromkeys(withhold.subject_ids)),
            reason=reason,
            rule_id=withhold.rule_id,
            instruction=WITHHELD_TEXT,
            instructions=_instructions(withhold.instructions, subject_ids, middleware_id),
        )
    if verdict is None:
        raise _Malformed("no verdict")
    raise _Malformed(f"unknown verdict {verdict}")


def _refusal(number: guidance_pb2.FirewallRefusal.ValueType, where: str) -> FirewallRefusal:
    try:
        return REFUSALS.from_proto(number, where)
    except InvalidRequestError as error:
        raise _Malformed(error.detail) from None


def _check_rule_id(rule_id: str) -> None:
    if not rule_id:
        raise _Malformed("empty rule_id")
    _check_length("rule_id", rule_id)


def _check_length(where: str, text: str) -> None:
    if len(text) > MAX_TEXT_CHARS:
        raise _Malformed(f"{where} longer than {MAX_TEXT_CHARS} characters")


def _instructions(
    raw: Sequence[guidance_pb2.Instruction], subject_ids: frozenset[str], middleware_id: str
) -> tuple[Instruction, ...]:
    """Decoded and checked instructions, each carrying `middleware_id`."""
    if len(raw) > MAX_INSTRUCTIONS:
        raise _Malformed(f"more than {MAX_INSTRUCTIONS} instructions")
    try:
        # The shared decoder refuses an instruction of neither shape, an unspecified or
        # unknown expectation and a non-finite probability.
        decoded = checked_guidance_from_proto(guidance_pb2.CheckedGuidance(instructions=raw))
    except InvalidRequestError as error:
        raise _Malformed(error.detail) from None
    return tuple(
        _checked_instruction(instruction, subject_ids, middleware_id)
        for instruction in decoded.instructions
    )


def _checked_instruction(
    instruction: Instruction, subject_ids: frozenset[str], middleware_id: str
) -> Instruction:
    _check_length("instruction.rule_id", instruction.rule_id)
    _check_length("instruction.instruction", instruction.instruction)
    match instruction:
        case ExpectationInstruction(subjects=subjects):
            _check_subjects(subjects, subject_ids)
        case UncertainInstruction(uncertain=uncertain):
            _check_length("uncertain.choice", uncertain.choice)
            # NaN fails both comparisons, so it is refused here as well as by the decoder.
            if not 0.0 <= uncertain.probability <= 1.0:
                raise _Malformed("uncertain.probability outside [0, 1]")
        case _:
            assert_never(instruction)
    return dataclasses.replace(instruction, middleware_id=middleware_id)


def _check_subjects(subjects: Iterable[str], subject_ids: frozenset[str]) -> None:
    if any(subject not in subject_ids for subject in subjects):
        raise _Malformed("an expectation names a subject id not in the check")


__all__ = ["CallerState", "GrpcExternalCaller", "check_request_to_proto", "judgement_from_proto"]

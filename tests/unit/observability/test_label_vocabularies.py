"""Every label value a component can pass is in its metric's closed set, checked here.

Label sets are built from the components' own enums and the hooks take their members, so mypy
checks every value a component passes. These tests cover what types cannot: every
`HarnessError` type and reason against `harness_sends_total`, the enums that stand for another
(`AckResult` for `DeliveryAcknowledgeErrorReason`, ...) against it, and a scan proving no
string literal is handed to a metrics hook, where it would bypass the types.
"""

from __future__ import annotations

import ast
import enum
import logging
import typing
from collections.abc import Iterator
from pathlib import Path

import harness_contract.errors
import harness_contract.management
import pytest
from harness_contract import values
from harness_contract.errors import (
    AnswerFieldIssue,
    AnswerFieldReason,
    AnswerInvalid,
    CollectiveError,
    CollectiveErrorKind,
    CollectiveFailure,
    ConnectError,
    ConnectErrorReason,
    DeliveryAcknowledgeError,
    DeliveryAcknowledgeErrorReason,
    FirewallRefusal,
    FirewallSendError,
    HarnessError,
    IdempotencyConflictError,
    InvalidIdempotencyKeyError,
    InvalidRequestError,
    ListenError,
    ListenErrorReason,
    MembersUnreachable,
    MessageTextError,
    MessageTextOperation,
    RequestAmbiguous,
    RequestAnswered,
    RequestExpired,
    RequestNone,
    SchemaInvalid,
    SendError,
    SendErrorReason,
    StatusCode,
    UnreachableMember,
)
from harness_contract.guidance import CheckedGuidance
from harness_contract.kinds import (
    CollectiveEnd,
    ConsumedKind,
    DeliveryItem,
    MemberOutcomeKind,
    PostKind,
    PostOp,
    SendOp,
)
from harness_contract.values import CollectiveOp

import gateway
from gateway.endpoint.idempotency import KeyResolution
from gateway.endpoint.inbox import AckResult, StreamEndReason, StreamOpen
from gateway.engine.network import RouterEvent
from gateway.observability.metrics import (
    Metrics,
    Mode,
    RejectedRequestReason,
    SendOutcome,
    send_outcome,
)

Closed = type[enum.StrEnum]

GUIDANCE = CheckedGuidance(check_id="chk_1", subjects=(), instructions=())


def _failure_samples() -> dict[type[CollectiveFailure], CollectiveFailure]:
    return {
        MembersUnreachable: MembersUnreachable(
            members=(UnreachableMember(member="agent:bob", reason=SendErrorReason.UNKNOWN_AGENT),)
        ),
        SchemaInvalid: SchemaInvalid(detail="x"),
        AnswerInvalid: AnswerInvalid(
            fields=(AnswerFieldIssue(field="a", reason=AnswerFieldReason.MISSING),)
        ),
        RequestNone: RequestNone(),
        RequestAmbiguous: RequestAmbiguous(),
        RequestAnswered: RequestAnswered(),
        RequestExpired: RequestExpired(),
    }


def _samples() -> list[HarnessError]:
    """At least one instance of every HarnessError type, every reason of each."""
    return [
        *(SendError(reason) for reason in SendErrorReason),
        *(CollectiveError("op_1", failure) for failure in _failure_samples().values()),
        *(
            FirewallSendError(
                check_id="chk_1",
                refusal=refusal,
                middleware_id="m",
                rule_id="r",
                instruction="no",
                guidance=GUIDANCE,
            )
            for refusal in FirewallRefusal
        ),
        IdempotencyConflictError("key"),
        InvalidIdempotencyKeyError(),
        *(MessageTextError(operation, "bad") for operation in MessageTextOperation),
        *(ListenError(reason) for reason in ListenErrorReason),
        *(DeliveryAcknowledgeError(reason) for reason in DeliveryAcknowledgeErrorReason),
        *(ConnectError(reason) for reason in ConnectErrorReason),
        InvalidRequestError.of_field("field"),
    ]


SEND_FAILURE_TYPES = (
    SendError,
    CollectiveError,
    FirewallSendError,
    IdempotencyConflictError,
    InvalidIdempotencyKeyError,
)
"""What `AgentRuntime.send` can raise: each has its own `outcome` value."""


def _subclasses(root: type) -> set[type]:
    found: set[type] = set()
    child: type
    for child in root.__subclasses__():
        found |= {child, *_subclasses(child)}
    return found


def _values(closed: Closed) -> set[str]:
    return {member.value for member in closed}


@pytest.fixture
def metrics() -> Metrics:
    return Metrics("1.2.3", Mode.EMBEDDED)


NOT_FROM_SEND: frozenset[type] = frozenset(
    {
        harness_contract.errors.AuthenticationError,
        harness_contract.errors.PermissionDeniedError,
        harness_contract.errors.UnavailableError,
        harness_contract.errors._StatusText,
        harness_contract.management.ManagementError,
    }
)
"""Failures the RPC layer answers before a send runs, or the management API's."""


def test_the_samples_cover_every_harness_error_type_and_collective_failure():
    # A HarnessError type defined by a test module is not the gateway's vocabulary.
    gateway_types = {
        cls
        for cls in _subclasses(HarnessError)
        if cls.__module__.startswith(("gateway.", "harness_contract."))
    } - NOT_FROM_SEND
    assert gateway_types == {type(error) for error in _samples()}
    assert set(typing.get_args(CollectiveFailure)) == set(_failure_samples())


def test_every_send_failure_counts_under_its_own_outcome_never_other():
    for error in _samples():
        if not isinstance(error, SEND_FAILURE_TYPES):
            continue
        expected = "firewall-refused" if isinstance(error, FirewallSendError) else error.reason
        assert send_outcome(error) == expected, error


@pytest.mark.parametrize("op", list(SendOp))
def test_every_harness_error_is_counted_in_one_series_without_raising(metrics: Metrics, op: SendOp):
    for error in _samples():
        before = metrics.registry.get_sample_value(
            "harness_sends_total", {"op": op, "outcome": send_outcome(error)}
        )
        metrics.count_send(op, error)
        after = metrics.registry.get_sample_value(
            "harness_sends_total", {"op": op, "outcome": send_outcome(error)}
        )
        assert after == (before or 0) + 1, error


def test_an_invalid_idempotency_key_has_its_own_outcome(metrics: Metrics):
    metrics.count_send(SendOp.MULTICAST, InvalidIdempotencyKeyError())
    labels = {"op": "multicast", "outcome": "invalid-idempotency-key"}
    assert metrics.registry.get_sample_value("harness_sends_total", labels) == 1


class _UnlabelledError(HarnessError):
    """A failure type the send vocabulary does not know (defined here, as a new one would be)."""

    @property
    def reason(self) -> str:
        return "brand-new"

    @property
    def message(self) -> str:
        return "new"

    @property
    def status_code(self) -> StatusCode:
        return StatusCode.INVALID_ARGUMENT


def test_a_failure_outside_the_send_vocabulary_counts_as_other_with_one_warning(
    metrics: Metrics, caplog: pytest.LogCaptureFixture
):
    with caplog.at_level(logging.WARNING, logger="gateway.observability.metrics"):
        metrics.count_send(SendOp.ANSWER, _UnlabelledError())
        metrics.count_send(SendOp.ANSWER, _UnlabelledError())
    labels = {"op": "answer", "outcome": "other"}
    assert metrics.registry.get_sample_value("harness_sends_total", labels) == 2
    warnings = [record for record in caplog.records if "_UnlabelledError" in record.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING


def test_the_send_outcomes_are_exactly_the_send_vocabulary_plus_ok_and_other():
    assert _values(SendOutcome) == {
        "ok",
        "other",
        "firewall-refused",
        "idempotency-conflict",
        "invalid-idempotency-key",
        *_values(SendErrorReason),
        *_values(CollectiveErrorKind),
    }


def test_the_operation_labels_are_the_contract_operations():
    assert _values(SendOp) == {"multicast", "answer", *_values(values.CollectiveOp)}
    assert _values(CollectiveOp) == _values(values.CollectiveOp)
    assert _values(PostOp) == {*_values(SendOp), "close"}


def test_the_idempotency_results_are_the_ledger_resolutions(metrics: Metrics):
    assert _values(KeyResolution) == _values(KeyResolution)
    for resolution in KeyResolution:
        metrics.count_idempotency(resolution)


def test_the_member_outcomes_and_delivery_items_match_their_contract_unions():
    assert len(MemberOutcomeKind) == len(typing.get_args(values.MemberOutcome))
    assert len(DeliveryItem) == len(typing.get_args(values.InboundItem))


def test_the_rejected_request_reasons_all_have_a_series(metrics: Metrics):
    for reason in RejectedRequestReason:
        metrics.count_rejected_request(reason)
        labels = {"reason": reason.value}
        assert metrics.registry.get_sample_value("harness_rejected_requests_total", labels) == 1


# --- string literals handed to metrics hooks ----------------------------------------------

ROOT = Path(gateway.__file__).parent

CALL_LABELS: dict[str, dict[int | str, tuple[Closed, ...]]] = {
    "on_event": {0: (RouterEvent,)},
    "on_stream_open": {0: (StreamOpen,)},
    "on_stream_end": {0: (StreamEndReason,)},
    "published": {0: (DeliveryItem,)},
    "on_delivery_published": {0: (DeliveryItem,)},
    "on_record_consumed": {0: (ConsumedKind,)},
    "on_replayed": {0: (DeliveryItem,)},
    "on_acknowledged": {0: (DeliveryItem,)},
    "on_acknowledge_result": {0: (AckResult,)},
    "on_send": {0: (SendOp,), 1: (SendOutcome,)},
    "_on_result": {0: (CollectiveOp,), 1: (CollectiveEnd,)},
    "_on_member_outcome": {0: (CollectiveOp,), 1: (MemberOutcomeKind,)},
    "_complete": {"end": (CollectiveEnd,)},
    "_maybe_complete": {"end": (CollectiveEnd,)},
    "_complete_writes": {"end": (CollectiveEnd,)},
    "_begin_close": {"end": (CollectiveEnd,)},
    "Classified": {"consumed": (ConsumedKind,), "published": (DeliveryItem,)},
}
"""Hooks (by the name called) and, by position or keyword, the label sets of their values."""

RETURN_LABELS: dict[str, tuple[Closed, ...]] = {
    "_item_kind": (DeliveryItem,),
    "_item_kind_of": (DeliveryItem,),
    "_outcome_kind": (MemberOutcomeKind,),
    "post_op": (PostOp,),
    "_op_of": (SendOp,),
}
"""Functions whose returned literals become label values."""

TUPLE_RETURN_LABELS: dict[str, dict[int, tuple[Closed, ...]]] = {
    "_classify": {1: (DeliveryItem, ConsumedKind)},
}
"""Functions returning tuples, with the label sets of the literal at each position."""

DICT_KEY_LABELS: dict[str, tuple[Closed, ...]] = {
    "open_intents_by_kind": (PostKind,),
    "open_counts": (CollectiveOp,),
}
"""Functions building per-label dictionaries whose keys become gauge label values."""


def _strings(node: ast.AST | None) -> Iterator[str]:
    """The string literals `node` can evaluate to (constants, conditionals, tuples)."""
    match node:
        case ast.Constant(value=str() as text):
            yield text
        case ast.IfExp(body=body, orelse=orelse):
            yield from _strings(body)
            yield from _strings(orelse)
        case ast.Tuple(elts=elements) | ast.List(elts=elements):
            for element in elements:
                yield from _strings(element)
        case _:
            return


def _called_name(call: ast.Call) -> str | None:
    match call.func:
        case ast.Attribute(attr=name) | ast.Name(id=name):
            return name
        case _:
            return None


def _modules() -> Iterator[tuple[str, ast.AST]]:
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[0] == "_gen" or relative.as_posix() == "observability/metrics.py":
            continue
        yield relative.as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _literal_labels() -> Iterator[tuple[str, str, str, tuple[Closed, ...]]]:
    """(where, hook, literal, label sets) for every literal handed to a metrics hook."""
    for module, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (name := _called_name(node)) in CALL_LABELS:
                for key, closed in CALL_LABELS[name].items():
                    if isinstance(key, int):
                        value = node.args[key] if key < len(node.args) else None
                    else:
                        value = next((kw.value for kw in node.keywords if kw.arg == key), None)
                    for text in _strings(value):
                        yield f"{module}:{node.lineno}", name, text, closed
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield from _function_labels(module, node)


def _function_labels(
    module: str, function: ast.FunctionDef | ast.AsyncFunctionDef
) -> Iterator[tuple[str, str, str, tuple[Closed, ...]]]:
    name = function.name
    for node in ast.walk(function):
        where = f"{module}:{getattr(node, 'lineno', function.lineno)}"
        if isinstance(node, ast.Return) and name in RETURN_LABELS:
            for text in _strings(node.value):
                yield where, name, text, RETURN_LABELS[name]
        elif isinstance(node, ast.Return) and name in TUPLE_RETURN_LABELS:
            if isinstance(node.value, ast.Tuple):
                for index, closed in TUPLE_RETURN_LABELS[name].items():
                    for text in _strings(node.value.elts[index]):
                        yield where, name, text, closed
        elif isinstance(node, ast.Dict) and name in DICT_KEY_LABELS:
            for key in node.keys:
                for text in _strings(key):
                    yield where, name, text, DICT_KEY_LABELS[name]


def test_no_string_literal_is_handed_to_a_metrics_hook():
    # Producers pass members of the enums the label sets are built from, so mypy checks
    # every value; a literal would bypass that and could only fail at run time.
    found = [
        f"{where}: {hook}({text!r}) should be a member of {[c.__name__ for c in closed]}"
        for where, hook, text, closed in _literal_labels()
    ]
    assert found == []


def test_the_literal_scan_finds_a_literal_handed_to_a_hook():
    tree = ast.parse(
        "def _item_kind(item):\n    return 'multicast'\n"
        "observer.on_send('multicast', None)\n"
        "def _classify(row):\n    return [], 'other', ()\n"
    )
    module_labels = [
        (hook, text)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        for _, hook, text, _ in _function_labels("m.py", node)
    ]
    assert module_labels == [("_item_kind", "multicast"), ("_classify", "other")]


def test_the_literal_scan_still_finds_every_hook_it_names():
    # A renamed hook would silently leave the scan above with nothing to check.
    called: set[str] = set()
    defined: set[str] = set()
    for _, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (name := _called_name(node)) is not None:
                called.add(name)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                defined.add(node.name)
    assert set(CALL_LABELS) <= called
    assert {*RETURN_LABELS, *TUPLE_RETURN_LABELS, *DICT_KEY_LABELS} <= defined

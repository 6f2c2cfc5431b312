"""Idempotent sends (engine.md §9, architecture decision 9).

A key (1-128 UTF-8 bytes, no NUL, scoped to the agent) binds the exact input and failure
routing: `JCS({"input": <SendInput as decoded>, "failureDelivery": ...})`, compared byte for
byte. A reservation commits before the send runs; the invocation belongs to the daemon (a
task this ledger owns) and finishes even if every caller disconnects; concurrent callers
with the key join it; its outcome is stored and every later call returns exactly it, across
restarts.

The send's bind writes what it bound into the row in the bind's own transaction
(`BindSend`, engine.md §8.3), so a reservation a restart cut is *resumed* by the next call
(or `ReadSend`) under its key: with bound posts it awaits their outcome, with none it runs
the send again, nothing having been sent (engine.md §9.1). Only a row reserved before
schema 3, which recorded no binding, is indeterminate: `outcome-unknown` for good.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeAlias

from harness_contract.codec import (
    CodecError,
    error_from_json,
    error_to_json,
    send_input_from_json,
    send_input_to_json,
    send_result_from_json,
    send_result_to_json,
)
from harness_contract.errors import (
    CollectiveError,
    FirewallSendError,
    IdempotencyConflictError,
    InvalidIdempotencyKeyError,
    SendError,
    SendErrorReason,
    SendFailure,
)
from harness_contract.jsonvalue import JsonValueError, canonical_json, parse_canonical_json
from harness_contract.values import FailureDelivery, SendInput, SendResult

from gateway.endpoint.api import (
    SendAbsent,
    SendIndeterminate,
    SendPending,
    SendReturned,
    SendState,
)
from gateway.store.errors import PartitionNotHeld
from gateway.store.port import Store
from gateway.store.records import PutSend, SendRow, SetSendOutcome

logger = logging.getLogger(__name__)

KEY_MAX_BYTES: Final = 128
"""Longest idempotency key, in UTF-8 bytes."""


class KeyResolution(enum.StrEnum):
    """How a keyed send was resolved (`harness_send_idempotency_total`)."""

    EXECUTED = "executed"
    JOINED = "joined"
    REPLAYED = "replayed"
    CONFLICT = "conflict"
    INDETERMINATE = "indeterminate"
    RESUMED = "resumed"
    """The call resumed a reservation an earlier run left without an outcome."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Resumption:
    """A reservation an earlier run left without an outcome, to be finished in this one."""

    key: str
    send_input: SendInput
    failure_delivery: FailureDelivery
    bound: SendResult | None
    """What its bind wrote (`bound_bytes`): the bound PostIds, a collective's operation id,
    the firewall's guidance. None when nothing was bound: the send runs again."""
    deadline: float | None
    """The resuming call's deadline (seconds from now), None for a `ReadSend`."""


Resume: TypeAlias = Callable[[Resumption], Awaitable[SendResult]]
"""Finishes a resumption: the send's outcome, or raises its failure (`AgentRuntime`)."""


def check_key(key: str) -> None:
    """Raise `InvalidIdempotencyKeyError` unless the key is 1-128 UTF-8 bytes without NUL."""
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidIdempotencyKeyError() from None
    if not 1 <= size <= KEY_MAX_BYTES or "\x00" in key:
        raise InvalidIdempotencyKeyError()


def binding(send_input: SendInput, failure_delivery: FailureDelivery) -> bytes:
    """The bytes a key binds: the input as decoded and the routing, default written out."""
    return canonical_json(
        {"input": send_input_to_json(send_input), "failureDelivery": failure_delivery.value}
    )


def bound_bytes(bound: SendResult) -> bytes:
    """The row's `bound` column: the SendResult form of what a bind bound (its PostIds in
    `postIds`)."""
    return canonical_json(send_result_to_json(bound))


def _request_from_bytes(data: bytes) -> tuple[SendInput, FailureDelivery]:
    value = parse_canonical_json(data)
    if not isinstance(value, dict):
        raise CodecError("request: expected an object")
    routing = value.get("failureDelivery")
    if not isinstance(routing, str) or routing not in {f.value for f in FailureDelivery}:
        raise CodecError("request: failureDelivery")
    return send_input_from_json(value.get("input")), FailureDelivery(routing)


def _outcome_bytes(outcome: SendResult | SendFailure) -> bytes:
    if isinstance(outcome, SendResult):
        return canonical_json({"kind": "success", "result": send_result_to_json(outcome)})
    return canonical_json({"kind": "failure", "error": error_to_json(outcome)})


def _outcome_from_bytes(data: bytes) -> SendResult | SendFailure:
    value = parse_canonical_json(data)
    if not isinstance(value, dict):
        raise CodecError("outcome: expected an object")
    if value.get("kind") == "success":
        return send_result_from_json(value.get("result"))
    error = error_from_json(value.get("error"))
    if not isinstance(error, SendError | CollectiveError | FirewallSendError):
        raise CodecError(f"outcome: {type(error).__name__} is not a send failure")
    return error


class SendLedger:
    """One agent's idempotency keys."""

    def __init__(
        self,
        *,
        agent_id: str,
        store: Store,
        run_id: str,
        on_resolution: Callable[[KeyResolution], None] = lambda resolution: None,
        resume: Resume | None = None,
    ) -> None:
        """Without `resume`, a reservation an earlier run left is indeterminate."""
        self._agent_id = agent_id
        self._store = store
        self._run_id = run_id
        self._on_resolution = on_resolution
        self._resume = resume
        self._live: dict[str, tuple[bytes, asyncio.Task[SendResult | SendFailure]]] = {}
        self._reserving = asyncio.Lock()

    async def run(
        self,
        key: str,
        send_input: SendInput,
        failure_delivery: FailureDelivery,
        execute: Callable[[], Awaitable[SendResult]],
        *,
        deadline: float | None = None,
    ) -> SendResult:
        """Run a keyed send at most once; every call returns its one outcome. `deadline`
        (seconds from now) bounds a resumption this call starts, as `execute` is bounded."""
        check_key(key)
        request = binding(send_input, failure_delivery)
        async with self._reserving:
            live = self._live.get(key)
            if live is None:
                row = await self._store.send_row(self._agent_id, key)
                if row is not None:
                    if row.request != request:
                        self._on_resolution(KeyResolution.CONFLICT)
                        raise IdempotencyConflictError(key)
                    if row.outcome is not None:
                        self._on_resolution(KeyResolution.REPLAYED)
                        return _unwrap(_decode(row.outcome))
                    task = self._start_resumption(row, deadline)
                    if task is None:
                        self._on_resolution(KeyResolution.INDETERMINATE)
                        raise SendError(SendErrorReason.OUTCOME_UNKNOWN)
                    self._on_resolution(KeyResolution.RESUMED)
                else:
                    await self._put(key, request)
                    task = self._start(key, request, execute)
                    self._on_resolution(KeyResolution.EXECUTED)
            else:
                if live[0] != request:
                    self._on_resolution(KeyResolution.CONFLICT)
                    raise IdempotencyConflictError(key)
                self._on_resolution(KeyResolution.JOINED)
                task = live[1]
        # The invocation belongs to the daemon: a caller that goes away does not stop it.
        try:
            return _unwrap(await asyncio.shield(task))
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the caller itself was cancelled
            # `close()` stopped the invocation (a teardown, cluster.md §3.2, or a shutdown):
            # answer the caller now, never leave its call open until its deadline. The key
            # stays resumable, so a retry under it returns the outcome (engine.md §9.1).
            raise SendError(SendErrorReason.OUTCOME_UNKNOWN) from None

    def _start(
        self, key: str, request: bytes, execute: Callable[[], Awaitable[SendResult]]
    ) -> asyncio.Task[SendResult | SendFailure]:
        task = asyncio.ensure_future(self._invoke(key, execute))
        task.set_name("keyed-send")
        self._live[key] = (request, task)
        return task

    def _start_resumption(
        self, row: SendRow, deadline: float | None
    ) -> asyncio.Task[SendResult | SendFailure] | None:
        """Resume a row without an outcome that no invocation of this run holds (the
        caller holds `_reserving`); None when it cannot be: reserved before schema 3, no
        `resume` given, or its request or binding does not decode."""
        resume = self._resume
        if not row.resumable or resume is None:
            return None
        try:
            send_input, failure_delivery = _request_from_bytes(row.request)
            bound = (
                None
                if row.bound is None
                else send_result_from_json(parse_canonical_json(row.bound))
            )
        except (CodecError, JsonValueError):
            logger.exception("a kept send request or binding does not decode")
            return None
        resumption = Resumption(
            key=row.key,
            send_input=send_input,
            failure_delivery=failure_delivery,
            bound=bound,
            deadline=deadline,
        )
        logger.info("keyed send resumed bound=%s", bound is not None)
        return self._start(row.key, row.request, lambda: resume(resumption))

    async def _invoke(
        self, key: str, execute: Callable[[], Awaitable[SendResult]]
    ) -> SendResult | SendFailure:
        outcome: SendResult | SendFailure
        try:
            outcome = await execute()
        except (SendError, CollectiveError, FirewallSendError) as error:
            outcome = error
        except PartitionNotHeld:
            # The store refused the send's unit: this replica released the partition
            # meanwhile (cluster.md §3.2). No outcome is stored: the reservation stays
            # resumable, and the call, answered NOT_OWNER, resumes it at the new home (§8).
            self._live.pop(key, None)
            raise
        except Exception:
            logger.exception("a keyed send failed with a defect")
            outcome = SendError(SendErrorReason.OUTCOME_UNKNOWN)
        try:
            await self._store.apply(
                [SetSendOutcome(agent_id=self._agent_id, key=key, outcome=_outcome_bytes(outcome))]
            )
        finally:
            self._live.pop(key, None)
        return outcome

    async def _put(self, key: str, request: bytes) -> None:
        """Reserve the key: its row without an outcome, resumable, nothing bound yet."""
        await self._store.apply(
            [
                PutSend(
                    agent_id=self._agent_id,
                    key=key,
                    request=request,
                    run_id=self._run_id,
                    outcome=None,
                    resumable=True,
                )
            ]
        )

    async def close(self) -> None:
        """Cancel live invocations (shutdown); the next run resumes their keys."""
        tasks = [task for _, task in self._live.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._live.clear()

    async def read(self, key: str) -> SendState:
        """`ReadSend`: absent, pending, indeterminate or returned. A row an earlier run left
        without an outcome is resumed here, as a call would resume it, and is `pending`."""
        check_key(key)
        row = await self._store.send_row(self._agent_id, key)
        if row is None:
            return SendAbsent()
        try:
            send_input = send_input_from_json(parse_canonical_json(row.request)["input"])  # type: ignore[index,call-overload]
        except (CodecError, JsonValueError, KeyError, TypeError):
            logger.exception("a kept send request does not decode")
            raise SendError(SendErrorReason.OUTCOME_UNKNOWN) from None
        if row.outcome is not None:
            return SendReturned(input=send_input, outcome=_decode(row.outcome))
        if key in self._live:
            return SendPending(input=send_input)
        async with self._reserving:
            if key in self._live:
                return SendPending(input=send_input)
            # Read again under the lock: an invocation may have finished since.
            row = await self._store.send_row(self._agent_id, key)
            if row is not None and row.outcome is not None:
                return SendReturned(input=send_input, outcome=_decode(row.outcome))
            if row is not None and self._start_resumption(row, None) is not None:
                return SendPending(input=send_input)
        return SendIndeterminate(input=send_input)


def _decode(data: bytes) -> SendResult | SendFailure:
    try:
        return _outcome_from_bytes(data)
    except (CodecError, JsonValueError):
        logger.exception("a kept send outcome does not decode")
        return SendError(SendErrorReason.OUTCOME_UNKNOWN)


def _unwrap(outcome: SendResult | SendFailure) -> SendResult:
    if not isinstance(outcome, SendResult):
        raise outcome
    return outcome

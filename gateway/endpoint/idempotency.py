"""Idempotent sends (engine.md §9, architecture decision 9).

A key (1-128 UTF-8 bytes, no NUL, scoped to the agent) binds the exact input and failure
routing: `JCS({"input": <SendInput as decoded>, "failureDelivery": ...})`, compared byte for
byte. A reservation commits before the send runs; the invocation belongs to the daemon (a
task this ledger owns) and finishes even if every caller disconnects; concurrent callers
with the key join it; its outcome is stored and every later call returns exactly it, across
restarts. A reservation whose invocation a restart cut is indeterminate: `outcome-unknown`
for good, and it never runs again.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Final

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
from gateway.store.port import Store
from gateway.store.records import PutSend

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
    ) -> None:
        self._agent_id = agent_id
        self._store = store
        self._run_id = run_id
        self._on_resolution = on_resolution
        self._live: dict[str, tuple[bytes, asyncio.Task[SendResult | SendFailure]]] = {}
        self._reserving = asyncio.Lock()

    async def run(
        self,
        key: str,
        send_input: SendInput,
        failure_delivery: FailureDelivery,
        execute: Callable[[], Awaitable[SendResult]],
    ) -> SendResult:
        """Run a keyed send at most once; every call returns its one outcome."""
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
                    self._on_resolution(KeyResolution.INDETERMINATE)
                    raise SendError(SendErrorReason.OUTCOME_UNKNOWN)
                await self._put(key, request, outcome=None)
                task = asyncio.ensure_future(self._invoke(key, request, execute))
                task.set_name("keyed-send")
                self._live[key] = (request, task)
                self._on_resolution(KeyResolution.EXECUTED)
            else:
                if live[0] != request:
                    self._on_resolution(KeyResolution.CONFLICT)
                    raise IdempotencyConflictError(key)
                self._on_resolution(KeyResolution.JOINED)
                task = live[1]
        # The invocation belongs to the daemon: a caller that goes away does not stop it.
        return _unwrap(await asyncio.shield(task))

    async def _invoke(
        self, key: str, request: bytes, execute: Callable[[], Awaitable[SendResult]]
    ) -> SendResult | SendFailure:
        outcome: SendResult | SendFailure
        try:
            outcome = await execute()
        except (SendError, CollectiveError, FirewallSendError) as error:
            outcome = error
        except Exception:
            logger.exception("a keyed send failed with a defect")
            outcome = SendError(SendErrorReason.OUTCOME_UNKNOWN)
        try:
            await self._put(key, request, outcome=_outcome_bytes(outcome))
        finally:
            self._live.pop(key, None)
        return outcome

    async def _put(self, key: str, request: bytes, *, outcome: bytes | None) -> None:
        """Store the key's row: its reservation (`outcome` None) or its kept outcome."""
        await self._store.apply(
            [
                PutSend(
                    agent_id=self._agent_id,
                    key=key,
                    request=request,
                    run_id=self._run_id,
                    outcome=outcome,
                )
            ]
        )

    async def close(self) -> None:
        """Cancel live invocations (shutdown); their keys become indeterminate."""
        tasks = [task for _, task in self._live.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._live.clear()

    async def read(self, key: str) -> SendState:
        """`ReadSend`: absent, pending, indeterminate or returned."""
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
        if key in self._live and row.run_id == self._run_id:
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

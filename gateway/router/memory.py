"""The in-process Router: a volatile ring behind `RouterPort` (engine.md §4).

The default backend, and the one the standalone `harness-gateway router` serves over gRPC.
Each construction is a new instance with a fresh `RouterInstanceId`: nothing survives the
object, so restarting the process that holds it is a Router restart.

Concurrency: everything runs on one event loop. A send awaits its verification first, then
checks the retry identity, appends, evicts and wakes readers in one synchronous stretch
with no await in between, so two sends never interleave inside it and no lock is needed.
Readers wait on per-recipient futures that an append resolves; nothing polls or sleeps.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import logging
from collections.abc import AsyncGenerator, Iterable, Iterator
from dataclasses import dataclass
from typing import assert_never

from harness_contract.ids import RandomId

from gateway.closing import AsyncClosing
from gateway.router.port import (
    POLL_HOLD,
    SIGNED_ENVELOPE_MAX_BYTES,
    Accepted,
    Batch,
    Cursor,
    CursorInvalid,
    Entry,
    EnvelopeVerifier,
    FeedGap,
    IdempotencyConflict,
    MessageInvalid,
    PollOutcome,
    RetryIdentityUnknown,
    RouterClosedError,
    RouterRestarted,
    RouterState,
    SendMode,
    SendOutcome,
    VerifiedEnvelope,
    envelope_digest,
    routing_problem,
)
from gateway.router.settings import RingSettings

logger = logging.getLogger(__name__)

RetryIdentity = tuple[str, str]
"""(senderAgentId, messageId): what makes two sends the same send (engine.md §4 step 3)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RingStatus:
    """A snapshot of a ring, for status pages and tests."""

    instance_id: str
    state: RouterState
    tail: int
    """The greatest order appended; 0 before the first."""
    greatest_evicted: int
    """The greatest order evicted; 0 before the first eviction. A cursor below it is a gap."""
    entries: int
    """Entries retained: orders `greatest_evicted + 1` through `tail`."""
    retained_bytes: int
    """Signed-envelope bytes retained."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Stored:
    order: int
    signed_envelope: bytes
    recipients: tuple[str, ...]
    identity: RetryIdentity
    digest: str


class _OrderIndex:
    """The retained orders addressed to one recipient, ascending.

    Appends at the end and evicts from the front (eviction is oldest first, so the evicted
    entry is always the first here); the evicted prefix is dropped once it is at least half
    the list, which keeps eviction amortised O(1) and lookups a bisect."""

    __slots__ = ("_head", "_orders")

    def __init__(self) -> None:
        self._orders: list[int] = []
        self._head = 0

    def __len__(self) -> int:
        return len(self._orders) - self._head

    def append(self, order: int) -> None:
        self._orders.append(order)

    def evict_first(self) -> None:
        self._head += 1
        if self._head * 2 >= len(self._orders):
            del self._orders[: self._head]
            self._head = 0

    def after(self, order: int) -> Iterator[int]:
        """The retained orders greater than `order`. Consume before the ring changes."""
        orders = self._orders
        for position in range(bisect.bisect_right(orders, order, lo=self._head), len(orders)):
            yield orders[position]


class InProcessRouter(AsyncClosing):
    """A volatile ring implementing `RouterPort`; a new instance per construction.

    Construction does no I/O and needs no running loop; `close()` (or leaving `async with`)
    wakes held polls, which then raise `RouterClosedError`.
    """

    def __init__(self, verifier: EnvelopeVerifier, *, settings: RingSettings | None = None) -> None:
        self._verifier = verifier
        self._settings = settings if settings is not None else RingSettings()
        self._instance_id = RandomId.ROUTER_INSTANCE.mint()
        self._state = RouterState.OPEN
        self._ring: dict[int, _Stored] = {}
        """Retained entries by order: exactly `greatest_evicted + 1 .. tail`."""
        self._ring_bytes = 0
        self._tail = 0
        self._greatest_evicted = 0
        self._identities: dict[RetryIdentity, _Stored] = {}
        """Retry identities of retained entries, evicted with them."""
        self._index: dict[str, _OrderIndex] = {}
        """Per recipient, the retained orders addressed to it (absent when none)."""
        self._waiters: dict[str, set[asyncio.Future[int]]] = {}
        """Per recipient, the held polls to wake with the first order appended for it."""
        logger.info("router instance started instance=%s", self._instance_id)

    @property
    def state(self) -> RouterState:
        """OPEN until `close()`."""
        return self._state

    def status(self) -> RingStatus:
        """The ring's current bounds and size."""
        return RingStatus(
            instance_id=self._instance_id,
            state=self._state,
            tail=self._tail,
            greatest_evicted=self._greatest_evicted,
            entries=len(self._ring),
            retained_bytes=self._ring_bytes,
        )

    async def instance_id(self) -> str:
        """The instance id minted at construction; it never changes."""
        self._check_open()
        return self._instance_id

    async def close(self) -> None:
        """Drop the ring and wake every held poll; idempotent."""
        if self._state is RouterState.CLOSED:
            return
        self._state = RouterState.CLOSED
        waiters = {waiter for group in self._waiters.values() for waiter in group}
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(0)  # the woken poll sees CLOSED and raises
        self._ring.clear()
        self._identities.clear()
        self._index.clear()
        self._ring_bytes = 0
        logger.info("router instance closed instance=%s", self._instance_id)

    async def send(
        self, expected_instance_id: str, mode: SendMode, signed_envelope: bytes
    ) -> SendOutcome:
        """engine.md §4 Send, steps 1-4 in that order; see `RouterPort.send`."""
        self._check_open()
        # Step 1: "nothing is verified or appended".
        if expected_instance_id != self._instance_id:
            return RouterRestarted(instance_id=self._instance_id)
        # Step 2. The size bound comes first so a hostile blob is never parsed.
        if len(signed_envelope) > SIGNED_ENVELOPE_MAX_BYTES:
            return MessageInvalid(
                detail=f"the signed envelope exceeds {SIGNED_ENVELOPE_MAX_BYTES} bytes"
            )
        verified: VerifiedEnvelope
        match await self._verifier.verify(signed_envelope):
            case str(reason):
                return MessageInvalid(detail=reason)
            case VerifiedEnvelope() as verified:
                pass
        problem = routing_problem(verified)
        if problem is not None:
            return MessageInvalid(detail=problem)
        # From here to the answer there is no await: the identity check, the append and
        # the eviction are one step with respect to every other send and poll.
        self._check_open()
        identity = (verified.sender_agent_id, verified.message_id)
        retained = self._identities.get(identity)
        match mode:
            case SendMode.INITIAL:
                if retained is not None:
                    return IdempotencyConflict()
                return self._append(identity, verified.recipient_agent_ids, signed_envelope)
            case SendMode.RETRY:
                if retained is None:
                    return RetryIdentityUnknown()
                if retained.signed_envelope != signed_envelope:
                    return IdempotencyConflict()
                return Accepted(instance_id=self._instance_id, digest=retained.digest)
            case _:
                assert_never(mode)

    async def poll(
        self, recipients: frozenset[str], cursor: Cursor | None, *, hold: float = POLL_HOLD
    ) -> PollOutcome:
        """See `RouterPort.poll`."""
        self._check_open()
        if cursor is None:
            return self._batch(self._tail, ())
        if cursor.instance_id != self._instance_id or not 0 <= cursor.order <= self._tail:
            return CursorInvalid()
        if cursor.order < self._greatest_evicted:
            return FeedGap(instance_id=self._instance_id)
        batch = self._collect(recipients, cursor.order)
        if batch.entries or not hold > 0:
            return batch
        scanned = batch.cursor.order
        first = await self._wait_for_entry(recipients, min(hold, POLL_HOLD))
        self._check_open()
        if first is None:
            # No entry addressed to these recipients was appended since the scan, so the
            # cursor may pass everything appended meanwhile, evicted or not.
            return self._batch(self._tail, ())
        if first <= self._greatest_evicted:
            return FeedGap(instance_id=self._instance_id)
        return self._collect(recipients, scanned)

    async def subscribe(
        self, recipients: frozenset[str], cursor: Cursor | None, *, hold: float = POLL_HOLD
    ) -> AsyncGenerator[PollOutcome, None]:
        """See `RouterPort.subscribe`. `hold` must be positive (`ValueError`): a zero hold
        would make the stream a busy loop."""
        if not hold > 0:
            raise ValueError("a subscription needs a positive hold")
        while True:
            outcome = await self.poll(recipients, cursor, hold=hold)
            yield outcome
            match outcome:
                case Batch(cursor=after):
                    cursor = after
                case FeedGap() | CursorInvalid():
                    return
                case _:
                    assert_never(outcome)

    def _check_open(self) -> None:
        if self._state is not RouterState.OPEN:
            raise RouterClosedError(self._state)

    def _append(
        self, identity: RetryIdentity, recipients: tuple[str, ...], signed_envelope: bytes
    ) -> Accepted:
        order = self._tail + 1
        stored = _Stored(
            order=order,
            signed_envelope=signed_envelope,
            recipients=recipients,
            identity=identity,
            digest=envelope_digest(signed_envelope),
        )
        self._ring[order] = stored
        self._ring_bytes += len(signed_envelope)
        self._tail = order
        self._identities[identity] = stored
        for recipient in recipients:
            self._index.setdefault(recipient, _OrderIndex()).append(order)
        self._evict()
        for recipient in recipients:
            for waiter in self._waiters.get(recipient, ()):
                if not waiter.done():
                    waiter.set_result(order)
        return Accepted(instance_id=self._instance_id, digest=stored.digest)

    def _evict(self) -> None:
        limits = self._settings
        # Never the entry just appended: its sender is about to be told `accepted`.
        while len(self._ring) > 1 and (
            len(self._ring) > limits.max_entries or self._ring_bytes > limits.max_bytes
        ):
            order = self._greatest_evicted + 1
            stored = self._ring.pop(order)
            self._ring_bytes -= len(stored.signed_envelope)
            # "eviction removes the oldest entry and its retry identity together"
            del self._identities[stored.identity]
            for recipient in stored.recipients:
                index = self._index[recipient]
                index.evict_first()
                if not index:
                    del self._index[recipient]
            self._greatest_evicted = order

    def _batch(self, cursor_order: int, entries: Iterable[Entry]) -> Batch:
        return Batch(
            instance_id=self._instance_id,
            cursor=Cursor(instance_id=self._instance_id, order=cursor_order),
            entries=tuple(entries),
        )

    def _collect(self, recipients: frozenset[str], after: int) -> Batch:
        """The entries after `after` for `recipients`, within the batch limits."""
        limits = self._settings
        entries: list[Entry] = []
        size = 0
        for order in self._orders_after(recipients, after):
            stored = self._ring[order]
            entry_size = len(stored.signed_envelope)
            # Stop before (never skip) an entry that would not fit; the first always fits.
            if entries and (
                len(entries) >= limits.batch_max_entries
                or size + entry_size > limits.batch_max_bytes
            ):
                return self._batch(entries[-1].order, entries)
            entries.append(
                Entry(
                    order=order,
                    signed_envelope=stored.signed_envelope,
                    recipients=tuple(r for r in stored.recipients if r in recipients),
                )
            )
            size += entry_size
        # Everything up to the tail was scanned: the cursor passes entries for others too.
        return self._batch(self._tail, entries)

    def _orders_after(self, recipients: frozenset[str], after: int) -> Iterator[int]:
        """Ascending orders after `after` addressed to any of `recipients`, each once."""
        if len(recipients) <= len(self._index):
            indexes = [self._index[r] for r in recipients if r in self._index]
        else:
            indexes = [index for r, index in self._index.items() if r in recipients]
        previous = after
        # An entry addressed to several requested recipients is in several indexes.
        for order in heapq.merge(*(index.after(after) for index in indexes)):
            if order != previous:
                previous = order
                yield order

    async def _wait_for_entry(self, recipients: frozenset[str], hold: float) -> int | None:
        """The first order appended for `recipients` within `hold` seconds, else None."""
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        for recipient in recipients:
            self._waiters.setdefault(recipient, set()).add(waiter)
        try:
            async with asyncio.timeout(hold):
                return await waiter
        except TimeoutError:
            # A wake-up and the deadline can land in one loop iteration: the wake-up wins,
            # or its entry would be passed over by the advanced cursor.
            return waiter.result() if waiter.done() and not waiter.cancelled() else None
        finally:
            for recipient in recipients:
                group = self._waiters.get(recipient)
                if group is not None:
                    group.discard(waiter)
                    if not group:
                        del self._waiters[recipient]

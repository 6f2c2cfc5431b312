"""The JetStream Router's local window: the retained suffix of one stream's order.

A `JetStreamRouter` reads its stream in sequence order (`gateway.router.jetstream`) and
appends every stored message here, so polls and subscriptions are answered from memory
exactly as the in-process ring answers them: the same batch limits, the same holds, the
same `FeedGap` rule. The stream sequence is the order, so this window never assigns one.

Retention follows the ring's bounds (`RingSettings.max_entries` and `max_bytes`, counted in
signed-envelope bytes) plus whatever the stream evicted that this process never read (a
*blind* eviction: the reader fell behind the stream's own limits). A blind eviction wakes
every held poll, which then answers `FeedGap`: an entry it never saw may have been for it.

Everything runs on one event loop and nothing here awaits while changing state, so no
lock is needed; readers wait on futures that an append resolves.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gateway.router.memory import _OrderIndex  # the ring's per-recipient index, shared
from gateway.router.port import (
    POLL_HOLD,
    Batch,
    Cursor,
    Entry,
    FeedGap,
    PollOutcome,
    envelope_digest,
)
from gateway.router.settings import RingSettings


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredEntry:
    """One message of the stream as the reader found it."""

    order: int
    """Its stream sequence."""
    signed_envelope: bytes
    """The exact bytes published; empty for a message that is not a Harness entry."""
    recipients: tuple[str, ...]
    """The AgentIds it is addressed to (the `Harness-Recipients` header); empty for a
    message some other publisher put on the subject, which no reader receives."""
    stored_at: float
    """When the stream stored it (`Nats-Time-Stamp`), in seconds since the epoch."""
    stored_size: int
    """An upper bound of what the stream counts for it against `MaxBytes`."""

    @property
    def digest(self) -> str:
        """The `smd_` EnvelopeDigest of its bytes (computed, never taken from a header)."""
        return envelope_digest(self.signed_envelope)


class WindowState(enum.StrEnum):
    """Lifecycle of a window."""

    OPEN = "open"
    """Receiving appends and answering reads."""
    RETIRED = "retired"
    """Its instance was replaced (the stream was deleted or purged): reads end."""
    CLOSED = "closed"
    """The Router closed: reads end."""


class WindowRetired(Exception):
    """A read or wait on a window that was retired or closed meanwhile; `state` says which.

    The Router answers `CursorInvalid` (another instance is current) or raises
    `RouterClosedError`."""

    def __init__(self, state: WindowState) -> None:
        super().__init__(f"the window is {state.value}")
        self.state = state


class FeedWindow:
    """The retained entries `greatest_evicted + 1 .. tail` of one stream, for reading.

    `start` is the sequence before the first the reader will append (the stream's first
    sequence minus one, or its last sequence when it is empty): it counts as evicted, so a
    cursor below it is a gap and a cursor equal to it reads from the next entry."""

    def __init__(self, *, instance_id: str, limits: RingSettings, start: int) -> None:
        self.instance_id = instance_id
        self._limits = limits
        self._state = WindowState.OPEN
        self._entries: dict[int, StoredEntry] = {}
        """Retained entries by order: exactly `greatest_evicted + 1 .. tail`."""
        self._bytes = 0
        self._tail = start
        self._greatest_evicted = start
        self._index: dict[str, _OrderIndex] = {}
        self._waiters: dict[str, set[asyncio.Future[int]]] = {}
        """Per recipient, held polls to wake with the first order appended for it."""
        self._held: set[asyncio.Future[int]] = set()
        """Every held poll, whatever its recipients: a blind eviction or the end wakes all."""
        self._tail_waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        """A heap of (order, tie-breaker, future): waits for the tail to reach an order."""
        self._tie = itertools.count()

    @property
    def state(self) -> WindowState:
        return self._state

    @property
    def tail(self) -> int:
        """The greatest order read (or skipped by a blind eviction)."""
        return self._tail

    @property
    def greatest_evicted(self) -> int:
        """The greatest order no longer retained; a cursor below it is a gap."""
        return self._greatest_evicted

    @property
    def retained_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, order: int) -> StoredEntry | None:
        """The retained entry at `order`, if any."""
        return self._entries.get(order)

    def first(self) -> StoredEntry | None:
        """The oldest retained entry, if any."""
        return self._entries.get(self._greatest_evicted + 1)

    # --- changes (the reader's) ---

    def append(self, entry: StoredEntry) -> None:
        """Add the entry after the tail (`entry.order == tail + 1`; the caller evicts blind
        first when the stream skipped), evict past the bounds and wake its readers."""
        if self._state is not WindowState.OPEN:
            return
        if entry.order != self._tail + 1:
            raise ValueError(f"order {entry.order} does not follow the tail {self._tail}")
        self._entries[entry.order] = entry
        self._bytes += len(entry.signed_envelope)
        self._tail = entry.order
        for recipient in entry.recipients:
            self._index.setdefault(recipient, _OrderIndex()).append(entry.order)
        self._evict_over_bounds()
        for recipient in entry.recipients:
            for waiter in self._waiters.get(recipient, ()):
                if not waiter.done():
                    waiter.set_result(entry.order)
        self._release_tail_waiters()

    def evict_through(self, order: int) -> None:
        """The stream no longer holds anything up to `order`: drop it here too.

        Past the tail this is a blind eviction: the tail moves to `order`, and every held
        poll wakes to answer `FeedGap`, since an entry it never saw may have been for it."""
        if self._state is not WindowState.OPEN or order <= self._greatest_evicted:
            return
        while self._entries and self._greatest_evicted < min(order, self._tail):
            self._evict_first()
        if order > self._tail:
            self._tail = order
            self._greatest_evicted = order
            for waiter in self._held:
                if not waiter.done():
                    waiter.set_result(order)  # <= greatest_evicted: the poll gaps
            self._release_tail_waiters()

    def evict_stored_before(self, cutoff: float) -> None:
        """Drop the oldest entries stored at or before `cutoff` (the stream's `MaxAge`)."""
        while self._state is WindowState.OPEN:
            first = self.first()
            if first is None or first.stored_at > cutoff:
                return
            self._evict_first()

    def retire(self, state: WindowState) -> None:
        """End the window (`RETIRED` or `CLOSED`): every held read raises `WindowRetired`."""
        if self._state is not WindowState.OPEN:
            return
        self._state = state
        for waiter in self._held:
            if not waiter.done():
                waiter.set_result(0)
        for _, _, future in self._tail_waiters:
            if not future.done():
                future.set_result(None)
        self._tail_waiters.clear()
        self._entries.clear()
        self._index.clear()
        self._bytes = 0

    # --- reads ---

    async def poll(self, recipients: frozenset[str], after: int, *, hold: float) -> PollOutcome:
        """`RouterPort.poll` from `after` (0 <= after <= tail, checked by the caller).

        Raises `WindowRetired` when the window ends before the answer."""
        self._check_open()
        if after < self._greatest_evicted:
            return FeedGap(instance_id=self.instance_id)
        batch = self._collect(recipients, after)
        if batch.entries or not hold > 0:
            return batch
        scanned = batch.cursor.order
        first = await self._wait_for_entry(recipients, min(hold, POLL_HOLD))
        self._check_open()
        if first is None:
            # Nothing for these recipients was appended since the scan and nothing was
            # evicted blind, so the cursor may pass everything read meanwhile.
            return self._batch(self._tail, ())
        if first <= self._greatest_evicted:
            return FeedGap(instance_id=self.instance_id)
        return self._collect(recipients, scanned)

    async def wait_for_tail(self, order: int, bound: float) -> bool:
        """True once the tail reaches `order`, False when `bound` seconds pass first.

        Raises `WindowRetired` when the window ends first."""
        self._check_open()
        if self._tail >= order:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._tail_waiters, (order, next(self._tie), future))
        try:
            async with asyncio.timeout(bound):
                await future
        except TimeoutError:
            pass
        finally:
            future.cancel()  # a timed-out entry stays in the heap until the tail passes it
        self._check_open()
        return self._tail >= order

    def _check_open(self) -> None:
        if self._state is not WindowState.OPEN:
            raise WindowRetired(self._state)

    def _evict_over_bounds(self) -> None:
        limits = self._limits
        # Never the entry just appended, as in the ring.
        while len(self._entries) > 1 and (
            len(self._entries) > limits.max_entries or self._bytes > limits.max_bytes
        ):
            self._evict_first()

    def _evict_first(self) -> None:
        order = self._greatest_evicted + 1
        stored = self._entries.pop(order)
        self._bytes -= len(stored.signed_envelope)
        for recipient in stored.recipients:
            index = self._index[recipient]
            index.evict_first()
            if not index:
                del self._index[recipient]
        self._greatest_evicted = order

    def _release_tail_waiters(self) -> None:
        waiters = self._tail_waiters
        while waiters and waiters[0][0] <= self._tail:
            _, _, future = heapq.heappop(waiters)
            if not future.done():
                future.set_result(None)

    def _batch(self, cursor_order: int, entries: Iterable[Entry]) -> Batch:
        return Batch(
            instance_id=self.instance_id,
            cursor=Cursor(instance_id=self.instance_id, order=cursor_order),
            entries=tuple(entries),
        )

    def _collect(self, recipients: frozenset[str], after: int) -> Batch:
        """The entries after `after` for `recipients`, within the batch limits (the ring's
        rule: stop before, never skip, an entry that would not fit; the first always fits)."""
        limits = self._limits
        entries: list[Entry] = []
        size = 0
        for order in self._orders_after(recipients, after):
            stored = self._entries[order]
            entry_size = len(stored.signed_envelope)
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
        return self._batch(self._tail, entries)

    def _orders_after(self, recipients: frozenset[str], after: int) -> Iterator[int]:
        if len(recipients) <= len(self._index):
            indexes = [self._index[r] for r in recipients if r in self._index]
        else:
            indexes = [index for r, index in self._index.items() if r in recipients]
        previous = after
        for order in heapq.merge(*(index.after(after) for index in indexes)):
            if order != previous:
                previous = order
                yield order

    async def _wait_for_entry(self, recipients: frozenset[str], hold: float) -> int | None:
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._held.add(waiter)
        for recipient in recipients:
            self._waiters.setdefault(recipient, set()).add(waiter)
        try:
            async with asyncio.timeout(hold):
                return await waiter
        except TimeoutError:
            # A wake-up and the deadline in one loop iteration: the wake-up wins.
            return waiter.result() if waiter.done() and not waiter.cancelled() else None
        finally:
            self._held.discard(waiter)
            for recipient in recipients:
                group = self._waiters.get(recipient)
                if group is not None:
                    group.discard(waiter)
                    if not group:
                        del self._waiters[recipient]

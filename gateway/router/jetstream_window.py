"""The JetStream Router's local window: the retained suffix of one stream's order.

A `JetStreamRouter` reads its stream in sequence order (`gateway.router.jetstream`) and
appends every stored message here, so polls and subscriptions are answered from memory
exactly as the in-process ring answers them (`gateway.router.reading`, shared with it): the
same batch limits, the same holds, the same `FeedGap` rule. The stream sequence is the
order, so this window never assigns one.

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
from dataclasses import dataclass

from gateway.router.port import PollOutcome, envelope_digest
from gateway.router.reading import RetainedOrder
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
        self._state = WindowState.OPEN
        self._retained: RetainedOrder[StoredEntry] = RetainedOrder(
            instance_id=instance_id, limits=limits, start=start, check_open=self._check_open
        )
        """Retained entries, their per-recipient indexes and the held polls."""
        self._tail_waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        """A heap of (order, tie-breaker, future): waits for the tail to reach an order."""
        self._tie = itertools.count()

    @property
    def state(self) -> WindowState:
        return self._state

    @property
    def tail(self) -> int:
        """The greatest order read (or skipped by a blind eviction)."""
        return self._retained.tail

    @property
    def greatest_evicted(self) -> int:
        """The greatest order no longer retained; a cursor below it is a gap."""
        return self._retained.greatest_evicted

    @property
    def retained_bytes(self) -> int:
        return self._retained.retained_bytes

    def __len__(self) -> int:
        return len(self._retained)

    def entry(self, order: int) -> StoredEntry | None:
        """The retained entry at `order`, if any."""
        return self._retained.get(order)

    def first(self) -> StoredEntry | None:
        """The oldest retained entry, if any."""
        return self._retained.first()

    # --- changes (the reader's) ---

    def append(self, entry: StoredEntry) -> None:
        """Add the entry after the tail (`entry.order == tail + 1`; the caller evicts blind
        first when the stream skipped), evict past the bounds and wake its readers."""
        if self._state is not WindowState.OPEN:
            return
        self._retained.append(entry)
        self._release_tail_waiters()

    def evict_through(self, order: int) -> None:
        """The stream no longer holds anything up to `order`: drop it here too.

        Past the tail this is a blind eviction: the tail moves to `order`, and every held
        poll wakes to answer `FeedGap`, since an entry it never saw may have been for it."""
        retained = self._retained
        if self._state is not WindowState.OPEN or order <= retained.greatest_evicted:
            return
        while retained and retained.greatest_evicted < min(order, retained.tail):
            retained.evict_first()
        if order > retained.tail:
            retained.skip_through(order)
            self._release_tail_waiters()

    def evict_stored_before(self, cutoff: float) -> None:
        """Drop the oldest entries stored at or before `cutoff` (the stream's `MaxAge`)."""
        while self._state is WindowState.OPEN:
            first = self.first()
            if first is None or first.stored_at > cutoff:
                return
            self._retained.evict_first()

    def retire(self, state: WindowState) -> None:
        """End the window (`RETIRED` or `CLOSED`): every held read raises `WindowRetired`."""
        if self._state is not WindowState.OPEN:
            return
        self._state = state
        self._retained.end()
        for _, _, future in self._tail_waiters:
            if not future.done():
                future.set_result(None)
        self._tail_waiters.clear()

    # --- reads ---

    async def poll(self, recipients: frozenset[str], after: int, *, hold: float) -> PollOutcome:
        """`RouterPort.poll` from `after` (0 <= after <= tail, checked by the caller).

        Raises `WindowRetired` when the window ends before the answer."""
        self._check_open()
        return await self._retained.read(recipients, after, hold=hold)

    async def wait_for_tail(self, order: int, bound: float) -> bool:
        """True once the tail reaches `order`, False when `bound` seconds pass first.

        Raises `WindowRetired` when the window ends first."""
        self._check_open()
        if self.tail >= order:
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
        return self.tail >= order

    def _check_open(self) -> None:
        if self._state is not WindowState.OPEN:
            raise WindowRetired(self._state)

    def _release_tail_waiters(self) -> None:
        waiters = self._tail_waiters
        while waiters and waiters[0][0] <= self.tail:
            _, _, future = heapq.heappop(waiters)
            if not future.done():
                future.set_result(None)

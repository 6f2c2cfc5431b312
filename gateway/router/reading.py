"""Reading a Router's order: what the in-process ring and the JetStream window share.

Both keep the retained suffix of one order in memory and answer polls from it
(engine.md §4 "Reading"): the same batch limits, the same holds, the same `FeedGap` rule.
`RetainedOrder` holds the entries by order, the per-recipient indexes and the held reads;
its owner (`InProcessRouter`, `FeedWindow`) decides what is appended and when it ends.

Everything runs on one event loop and nothing here awaits while changing state, so no
lock is needed; readers wait on futures that an append resolves; nothing polls or sleeps.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Iterator
from typing import Generic, Protocol, TypeVar, assert_never

from gateway.router.port import (
    POLL_HOLD,
    Batch,
    Cursor,
    CursorInvalid,
    Entry,
    FeedGap,
    PollOutcome,
)
from gateway.router.settings import RingSettings


class RetainedEntry(Protocol):
    """What reading needs of a retained entry; each backend keeps more beside it."""

    @property
    def order(self) -> int: ...

    @property
    def signed_envelope(self) -> bytes: ...

    @property
    def recipients(self) -> tuple[str, ...]:
        """The AgentIds it is addressed to, in the envelope's order; empty for none."""
        ...


E = TypeVar("E", bound=RetainedEntry)


class Poll(Protocol):
    """A backend's `RouterPort.poll`."""

    def __call__(
        self, recipients: frozenset[str], cursor: Cursor | None, *, hold: float
    ) -> Awaitable[PollOutcome]: ...


async def subscribe_by_polling(
    poll: Poll, recipients: frozenset[str], cursor: Cursor | None, *, hold: float
) -> AsyncGenerator[PollOutcome, None]:
    """`RouterPort.subscribe` as repeated polls, each from the cursor of the one before.

    `hold` must be positive (`ValueError` at the first item): a zero hold would make the
    stream a busy loop."""
    if not hold > 0:
        raise ValueError("a subscription needs a positive hold")
    while True:
        outcome = await poll(recipients, cursor, hold=hold)
        yield outcome
        match outcome:
            case Batch(cursor=after):
                cursor = after
            case FeedGap() | CursorInvalid():
                return
            case _:
                assert_never(outcome)


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
        """The retained orders greater than `order`. Consume before the order changes."""
        orders = self._orders
        for position in range(bisect.bisect_right(orders, order, lo=self._head), len(orders)):
            yield orders[position]


class RetainedOrder(Generic[E]):
    """The retained entries `greatest_evicted + 1 .. tail` of one order, for reading.

    `start` is the order before the first that will be appended: it counts as evicted, so a
    cursor below it is a gap and a cursor equal to it reads from the next entry.
    `check_open` raises the owner's error once it has ended; a read calls it after every
    wait, so a read woken by `end` raises it."""

    def __init__(
        self,
        *,
        instance_id: str,
        limits: RingSettings,
        start: int,
        check_open: Callable[[], None],
    ) -> None:
        self._instance_id = instance_id
        self._limits = limits
        self._check_open = check_open
        self._entries: dict[int, E] = {}
        """Retained entries by order: exactly `greatest_evicted + 1 .. tail`."""
        self._bytes = 0
        self._tail = start
        self._greatest_evicted = start
        self._index: dict[str, _OrderIndex] = {}
        """Per recipient, the retained orders addressed to it (absent when none)."""
        self._waiters: dict[str, set[asyncio.Future[int]]] = {}
        """Per recipient, the held reads to wake with the first order appended for it."""
        self._held: set[asyncio.Future[int]] = set()
        """Every held read, whatever its recipients: a blind eviction or the end wakes all."""

    @property
    def tail(self) -> int:
        """The greatest order appended (or skipped); `start` before the first."""
        return self._tail

    @property
    def greatest_evicted(self) -> int:
        """The greatest order no longer retained; a cursor below it is a gap."""
        return self._greatest_evicted

    @property
    def retained_bytes(self) -> int:
        """Signed-envelope bytes retained."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, order: int) -> E | None:
        """The retained entry at `order`, if any."""
        return self._entries.get(order)

    def first(self) -> E | None:
        """The oldest retained entry, if any."""
        return self._entries.get(self._greatest_evicted + 1)

    # --- changes ---

    def append(self, entry: E) -> list[E]:
        """Add `entry` after the tail (`entry.order == tail + 1`), evict past the bounds and
        wake its readers; returns the entries evicted, oldest first."""
        if entry.order != self._tail + 1:
            raise ValueError(f"order {entry.order} does not follow the tail {self._tail}")
        self._entries[entry.order] = entry
        self._bytes += len(entry.signed_envelope)
        self._tail = entry.order
        for recipient in entry.recipients:
            self._index.setdefault(recipient, _OrderIndex()).append(entry.order)
        evicted = self._evict_over_bounds()
        for recipient in entry.recipients:
            for waiter in self._waiters.get(recipient, ()):
                if not waiter.done():
                    waiter.set_result(entry.order)
        return evicted

    def evict_first(self) -> E:
        """Drop the oldest retained entry (there must be one) and return it."""
        order = self._greatest_evicted + 1
        stored = self._entries.pop(order)
        self._bytes -= len(stored.signed_envelope)
        for recipient in stored.recipients:
            index = self._index[recipient]
            index.evict_first()
            if not index:
                del self._index[recipient]
        self._greatest_evicted = order
        return stored

    def skip_through(self, order: int) -> None:
        """Everything up to `order` (past the tail, nothing retained) is gone unread: the
        tail moves to it, and every held read wakes to answer `FeedGap`, since an entry it
        never saw may have been for it."""
        self._tail = order
        self._greatest_evicted = order
        self._wake_all(order)  # <= greatest_evicted: the read gaps

    def end(self) -> None:
        """Wake every held read (each then raises through `check_open`) and drop the
        entries; the bounds stay for status pages."""
        self._wake_all(0)
        self._entries.clear()
        self._index.clear()
        self._bytes = 0

    # --- reads ---

    def anchor(self) -> Batch:
        """The answer to a poll without a cursor: an empty batch at the tail."""
        return self._batch(self._tail, ())

    async def read(self, recipients: frozenset[str], after: int, *, hold: float) -> PollOutcome:
        """`RouterPort.poll` from `after` (0 <= after <= tail and the instance, checked by
        the caller): the entries after it, else an empty batch at the tail once `hold`
        (capped at `POLL_HOLD`) passes with nothing for `recipients`, or `FeedGap`."""
        if after < self._greatest_evicted:
            return FeedGap(instance_id=self._instance_id)
        batch = self._collect(recipients, after)
        if batch.entries or not hold > 0:
            return batch
        scanned = batch.cursor.order
        first = await self._wait_for_entry(recipients, min(hold, POLL_HOLD))
        self._check_open()
        if first is None:
            # No entry addressed to these recipients was appended since the scan and
            # nothing was evicted blind (that wakes every held read), so the cursor may
            # pass everything appended meanwhile, evicted or not.
            return self._batch(self._tail, ())
        if first <= self._greatest_evicted:
            return FeedGap(instance_id=self._instance_id)
        return self._collect(recipients, scanned)

    def _evict_over_bounds(self) -> list[E]:
        limits = self._limits
        evicted: list[E] = []
        # Never the entry just appended: its sender is about to be told `accepted`.
        while len(self._entries) > 1 and (
            len(self._entries) > limits.max_entries or self._bytes > limits.max_bytes
        ):
            evicted.append(self.evict_first())
        return evicted

    def _wake_all(self, order: int) -> None:
        for waiter in self._held:
            if not waiter.done():
                waiter.set_result(order)

    def _batch(self, cursor_order: int, entries: Iterable[Entry]) -> Batch:
        return Batch(
            instance_id=self._instance_id,
            cursor=Cursor(instance_id=self._instance_id, order=cursor_order),
            entries=tuple(entries),
        )

    def _collect(self, recipients: frozenset[str], after: int) -> Batch:
        """The entries after `after` for `recipients`, within the batch limits."""
        limits = self._limits
        entries: list[Entry] = []
        size = 0
        for order in self._orders_after(recipients, after):
            stored = self._entries[order]
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
        """The first order appended for `recipients` within `hold` seconds, else None; or
        what `skip_through` or `end` woke it with."""
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._held.add(waiter)
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
            self._held.discard(waiter)
            for recipient in recipients:
                group = self._waiters.get(recipient)
                if group is not None:
                    group.discard(waiter)
                    if not group:
                        del self._waiters[recipient]

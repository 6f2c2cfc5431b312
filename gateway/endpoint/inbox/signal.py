"""`InboxSignal`: the inbox's generation counter, which wakes a stream waiting for new items.

A publisher calls `notify()` once its items are durable. A reader notes `generation` before it
reads the store and, finding nothing, waits until the generation moves past the one it noted,
so an item committed between the read and the wait is never missed.
"""

from __future__ import annotations

import asyncio


class InboxSignal:
    """A counter that `notify()` advances, and a wait for it to move."""

    def __init__(self) -> None:
        self._generation = 0
        self._changed = asyncio.Event()

    @property
    def generation(self) -> int:
        """How many times `notify()` was called."""
        return self._generation

    def notify(self) -> None:
        """New items are durable: wake every waiter."""
        self._generation += 1
        self._changed.set()

    async def wait_past(self, seen: int) -> None:
        """Return once the generation differs from `seen` (at once if it already does)."""
        while self._generation == seen:
            self._changed.clear()
            await self._changed.wait()

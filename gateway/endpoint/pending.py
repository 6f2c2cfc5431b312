"""`PendingDeliveries`: which pending deliveries an agent's classifier takes next.

engine.md §7.2. A delivery the daemon committed itself reaches the classifier in memory,
as its commit returned (`committed`): no read of what the process just wrote. The store
stays the source of truth: after anything the memory cannot account for — the start, a
hint that rows were committed elsewhere (a cluster), a page whose commit failed, more than
`MEMORY_ROWS` waiting — `reread` makes the next pages come from the store, until a page
read finds the store drained and nothing was signalled while it read.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Final

from harness_contract.values import InboundMessage

from gateway.store.port import Store
from gateway.store.records import DeliveryRow

Pending = tuple[DeliveryRow, InboundMessage | None]
"""A pending delivery, with the message its projection encodes when it was handed over in
memory (the classifier then decodes nothing); None for a row read from the store."""

MEMORY_ROWS: Final = 4096
"""Most committed deliveries waiting in memory for one agent; beyond it the store is read."""


class PendingDeliveries:
    """One agent's pending deliveries, from memory while it holds every one of them."""

    def __init__(self, *, agent_id: str, store: Store, page: int) -> None:
        self._agent_id = agent_id
        self._store = store
        self._page = page
        self._memory: deque[Pending] | None = None
        """The committed pending deliveries in commit order; None while the store must be read."""
        self._rereads = 0
        """Bumped at every `reread`: a store read that saw it move may have missed rows."""
        self.more = True
        """Whether the last page may have left deliveries behind."""

    @property
    def from_memory(self) -> bool:
        """Whether the next page comes from memory."""
        return self._memory is not None

    def committed(self, rows: Iterable[tuple[DeliveryRow, InboundMessage]]) -> None:
        """Deliveries of this agent whose commit returned."""
        if self._memory is None:
            return  # the store read that comes next finds them
        self._memory.extend(rows)
        if len(self._memory) > MEMORY_ROWS:
            self.reread()

    def reread(self) -> None:
        """Take the next pages from the store (memory no longer holds every pending row)."""
        self._memory = None
        self._rereads += 1
        self.more = True

    async def page(self) -> list[Pending]:
        """The next page to classify, in commit order; `more` says whether more may wait."""
        if self._memory is not None:
            rows = [self._memory.popleft() for _ in range(min(self._page, len(self._memory)))]
            self.more = bool(self._memory)
            return rows
        seen = self._rereads
        stored = await self._store.pending_deliveries(self._agent_id, self._page)
        drained = len(stored) < self._page and self._rereads == seen
        if drained:
            # Every row committed before this read began is in it, and every later one was
            # handed to `committed` while nothing asked for a reread: memory holds them all.
            self._memory = deque()
        self.more = not drained
        return [(row, None) for row in stored]

"""`CommittedItems`: the inbox items this process committed and nobody acknowledged yet.

engine.md §7.3. The inbox's commits hand their items here as they return, so a stream's next
page and an acknowledgment's lookup need no read of what the process just wrote. The store
stays the source of truth, and this memory is used only where it provably holds everything:

- It is complete from `low` on: every committed, unacknowledged item with a sequence at or
  above `low` is here. `low` starts at the inbox's next sequence (older items are the
  store's), and moves up when the memory drops its oldest items (past `MEMORY_ITEMS`) or a
  commit's outcome is unknown.
- A sequence handed to a commit that has not answered yet is *unsettled*: pages end before
  the lowest one (`frontier`), so a stream never steps past an item committed late.
- Acknowledged items leave it once their acknowledgment commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from harness_contract.values import Delivery

from gateway.store.records import InboxRow

MEMORY_ITEMS: Final = 4096
"""Most committed, unacknowledged items kept per agent; older ones are read from the store."""


class CommittedItems:
    """One agent's committed, unacknowledged items from `low` on, by sequence and token."""

    def __init__(self, next_seq: int) -> None:
        self._rows: dict[int, InboxRow] = {}
        self._seq_of: dict[str, int] = {}
        self._low = next_seq
        self._next = next_seq
        self._unsettled: set[int] = set()
        self._deliveries: dict[int, Delivery] = {}

    @property
    def low(self) -> int:
        """Every committed, unacknowledged item at or above this sequence is here."""
        return self._low

    @property
    def frontier(self) -> int:
        """Every sequence below this one is settled: committed, or never will be."""
        return min(self._unsettled) if self._unsettled else self._next

    def sequenced(self, seqs: Iterable[int]) -> None:
        """These sequences were handed to a commit that has not answered yet."""
        for seq in seqs:
            self._unsettled.add(seq)
            self._next = max(self._next, seq + 1)

    def committed(
        self, rows: Sequence[InboxRow], deliveries: Sequence[Delivery | None] = ()
    ) -> None:
        """A commit of these items returned; `deliveries`, where given, are what each row
        holds, as made (a stream then decodes nothing)."""
        for index, row in enumerate(rows):
            self._unsettled.discard(row.seq)
            if row.seq >= self._low:
                self._rows[row.seq] = row
                self._seq_of[row.token] = row.seq
                delivery = deliveries[index] if index < len(deliveries) else None
                if delivery is not None:
                    self._deliveries[row.seq] = delivery
        if len(self._rows) > MEMORY_ITEMS:
            for seq in sorted(self._rows)[: len(self._rows) - MEMORY_ITEMS]:
                self._forget(seq)
                self._low = max(self._low, seq + 1)

    def failed(self, seqs: Iterable[int], *, written: bool) -> None:
        """A commit of these sequences failed; `written` when it may have committed anyway
        (its outcome is unknown): memory no longer knows what the store holds below."""
        for seq in seqs:
            self._unsettled.discard(seq)
        if written:
            self._rows.clear()
            self._seq_of.clear()
            self._deliveries.clear()
            self._low = self._next

    def acknowledged(self, tokens: Iterable[str]) -> None:
        """These items' acknowledgment committed."""
        for token in tokens:
            seq = self._seq_of.get(token)
            if seq is not None:
                self._forget(seq)

    def by_tokens(self, tokens: Sequence[str]) -> dict[str, InboxRow] | None:
        """The unacknowledged items of `tokens` when memory knows every one of them, else
        None (the store is asked)."""
        found: dict[str, InboxRow] = {}
        for token in tokens:
            seq = self._seq_of.get(token)
            if seq is None:
                return None
            found[token] = self._rows[seq]
        return found

    def after(self, after_seq: int, limit: int) -> list[InboxRow] | None:
        """Up to `limit` unacknowledged items after `after_seq`, in inbox order, when memory
        holds all of them (`after_seq` at or above `low - 1`), else None."""
        if after_seq + 1 < self._low:
            return None
        frontier = self.frontier
        found: list[InboxRow] = []
        for seq in sorted(seq for seq in self._rows if after_seq < seq < frontier):
            found.append(self._rows[seq])
            if len(found) == limit:
                break
        return found

    def delivery(self, seq: int) -> Delivery | None:
        """The delivery of an item as it was made, while memory holds it."""
        return self._deliveries.get(seq)

    def _forget(self, seq: int) -> None:
        self._deliveries.pop(seq, None)
        row = self._rows.pop(seq, None)
        if row is not None:
            self._seq_of.pop(row.token, None)

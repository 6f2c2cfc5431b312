"""`PendingDeliveries`: the classifier's pages come from memory while it holds every pending
row, and from the store after anything it cannot account for (engine.md §7.2)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from harness_contract.content import multicast_content
from harness_contract.values import DirectMessage, InboundMessage

from gateway.endpoint.pending import MEMORY_ROWS, PendingDeliveries
from gateway.store.records import DeliveryRow, DeliveryState

MESSAGE = DirectMessage(
    post_id="pst_" + "A" * 43,
    address="agent:bob",
    sender="agent:bob",
    content=multicast_content("hi")[:1],
)


def handed(seq: int) -> tuple[DeliveryRow, InboundMessage]:
    """A delivery handed over in memory, with its message."""
    return row(seq), MESSAGE


def stored(seq: int) -> tuple[DeliveryRow, None]:
    """A delivery read from the store: its message is decoded by the classifier."""
    return row(seq), None


def row(seq: int) -> DeliveryRow:
    return DeliveryRow(
        token=f"t{seq}",
        conversation_id="c",
        record_hash=f"r{seq}",
        commit_seq=seq,
        projection=b"{}",
        state=DeliveryState.PENDING,
    )


class StoredRows:
    """The store seam: pending rows by agent, and a hook run while a read is in flight."""

    def __init__(self, rows: Sequence[DeliveryRow] = ()) -> None:
        self.rows = list(rows)
        self.reads = 0
        self.during_read: list[object] = []

    async def pending_deliveries(self, agent_id: str, limit: int) -> list[DeliveryRow]:
        self.reads += 1
        found = self.rows[:limit]
        for hook in self.during_read:
            hook()  # type: ignore[operator]
        self.during_read.clear()
        await asyncio.sleep(0)
        return found


def where(pending: PendingDeliveries) -> tuple[str, str]:
    """Where the next page comes from, and whether more may wait."""
    return ("memory" if pending.from_memory else "store", "more" if pending.more else "drained")


def pending_over(store: StoredRows, page: int = 4) -> PendingDeliveries:
    return PendingDeliveries(agent_id="a", store=store, page=page)  # type: ignore[arg-type]


async def test_the_first_pages_come_from_the_store_then_committed_rows_from_memory() -> None:
    store = StoredRows([row(1), row(2)])
    pending = pending_over(store)

    assert await pending.page() == [stored(1), stored(2)]
    assert where(pending) == ("memory", "drained")
    store.rows = []
    pending.committed([handed(3), handed(4), handed(5), handed(6), handed(7)])

    assert await pending.page() == [handed(3), handed(4), handed(5), handed(6)]
    assert where(pending) == ("memory", "more")
    assert await pending.page() == [handed(7)]
    assert where(pending) == ("memory", "drained")
    assert store.reads == 1


async def test_a_full_store_page_keeps_reading_the_store() -> None:
    store = StoredRows([row(i) for i in range(1, 5)])
    pending = pending_over(store)

    assert len(await pending.page()) == 4
    assert where(pending) == ("store", "more")


async def test_a_reread_signalled_while_the_store_is_read_keeps_the_store_as_the_source() -> None:
    store = StoredRows([row(1)])
    pending = pending_over(store)
    # A cluster hint (rows committed elsewhere) arrives while the read is in flight: the
    # read may have missed them, so it does not switch to memory.
    store.during_read.append(pending.reread)

    assert await pending.page() == [stored(1)]
    assert where(pending) == ("store", "more")
    store.rows = [row(2)]
    assert await pending.page() == [stored(2)]
    assert pending.from_memory


async def test_rows_committed_while_the_store_is_the_source_are_left_to_the_store() -> None:
    store = StoredRows([row(i) for i in range(1, 5)])
    pending = pending_over(store)
    await pending.page()
    pending.committed([handed(9)])  # ignored: the next store read finds it

    store.rows = [row(9)]
    assert await pending.page() == [stored(9)]


async def test_too_many_rows_in_memory_send_the_classifier_back_to_the_store() -> None:
    store = StoredRows()
    pending = pending_over(store)
    await pending.page()
    assert pending.from_memory

    pending.committed(handed(i) for i in range(MEMORY_ROWS + 1))

    assert where(pending) == ("store", "more")
    store.rows = [row(1)]
    assert await pending.page() == [stored(1)]

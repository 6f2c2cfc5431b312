"""`CommittedItems`: pages and acknowledgment lookups from memory only where memory provably
holds everything (engine.md §7.3); and the inbox around it, over a real store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from gateway.endpoint.inbox import AgentInbox, coordinator
from gateway.endpoint.inbox.committed import MEMORY_ITEMS, CommittedItems
from gateway.endpoint.inbox.reader import decode_row
from gateway.store.errors import CommitAmbiguous, StoreUnavailable
from gateway.store.memory import MemoryStore
from gateway.store.records import InboxRow, InboxState, Write
from tests.unit.endpoint.inbox.support import AGENT, item, within_bound


def row(seq: int) -> InboxRow:
    return InboxRow(
        seq=seq,
        token=f"dlv_{seq}",
        item=b"{}",
        guidance=None,
        state=InboxState.UNREAD,
        replacement_token=None,
        created_at=0.0,
    )


def seqs(rows: list[InboxRow] | None) -> list[int] | None:
    return None if rows is None else [r.seq for r in rows]


def test_committed_items_are_paged_in_order_and_leave_once_acknowledged() -> None:
    items = CommittedItems(next_seq=1)
    items.sequenced([1, 2, 3])
    items.committed([row(1), row(2), row(3)])

    assert seqs(items.after(0, 10)) == [1, 2, 3]
    assert seqs(items.after(1, 1)) == [2]
    items.acknowledged(["dlv_2"])
    assert seqs(items.after(0, 10)) == [1, 3]


def test_a_page_stops_before_a_sequence_whose_commit_has_not_answered() -> None:
    items = CommittedItems(next_seq=1)
    items.sequenced([1])
    items.sequenced([2])
    items.committed([row(2)])  # the later commit answered first

    assert seqs(items.after(0, 10)) == []
    items.committed([row(1)])
    assert seqs(items.after(0, 10)) == [1, 2]


def test_items_older_than_memory_are_left_to_the_store() -> None:
    items = CommittedItems(next_seq=5)  # 1-4 were committed before the start
    items.sequenced([5])
    items.committed([row(5)])

    assert items.after(0, 10) is None
    assert items.after(3, 10) is None
    assert seqs(items.after(4, 10)) == [5]
    assert items.by_tokens(["dlv_5"]) == {"dlv_5": row(5)}
    assert items.by_tokens(["dlv_5", "dlv_3"]) is None


def test_a_commit_of_unknown_outcome_forgets_memory_and_a_refused_one_keeps_it() -> None:
    items = CommittedItems(next_seq=1)
    items.sequenced([1])
    items.committed([row(1)])
    items.sequenced([2])
    items.failed([2], written=False)
    assert seqs(items.after(0, 10)) == [1]

    items.sequenced([3])
    items.failed([3], written=True)
    assert items.after(0, 10) is None
    assert items.low == 4


def test_memory_drops_its_oldest_items_beyond_its_bound() -> None:
    items = CommittedItems(next_seq=1)
    count = MEMORY_ITEMS + 2
    items.sequenced(range(1, count + 1))
    items.committed([row(seq) for seq in range(1, count + 1)])

    assert items.low == 3
    assert items.after(1, 10) is None
    assert seqs(items.after(2, 2)) == [3, 4]


async def test_a_restarted_inbox_streams_the_stored_items_then_the_new_ones_in_order() -> None:
    store = MemoryStore()
    before = AgentInbox(agent_id=AGENT, store=store, next_seq=1, window=8)
    old = [await before.publish(item(f"old {n}")) for n in range(2)]
    restarted = AgentInbox(agent_id=AGENT, store=store, next_seq=3, window=8)
    new = [await restarted.publish(item(f"new {n}")) for n in range(2)]

    stream = await restarted.open_stream(takeover=False)
    got = [(await within_bound(anext(stream))).token for _ in range(4)]

    assert got == [*old, *new]
    later = await restarted.publish(item("later"))
    assert (await within_bound(anext(stream))).token == later


async def test_acknowledging_what_this_inbox_committed_reads_nothing_and_retires_the_item() -> None:
    store = MemoryStore()
    inbox = AgentInbox(agent_id=AGENT, store=store, next_seq=1, window=8)
    token = await inbox.publish(item("one"))
    reads: list[object] = []
    store_items = store.inbox_items

    async def counted(agent_id: str, tokens: Sequence[str]) -> dict[str, InboxRow]:
        reads.append(tokens)
        return await store_items(agent_id, tokens)

    store.inbox_items = counted  # type: ignore[method-assign]
    results = await inbox.acknowledge([token])

    assert [r.error for r in results] == [None]
    assert reads == []
    assert await store.unread(AGENT, 0, 10) == []
    # Acknowledged again: memory no longer has it, the store says it is acknowledged.
    assert [r.error for r in await inbox.acknowledge([token])] == [None]
    assert len(reads) == 1


class FailingStore(MemoryStore):
    """Fails the next `apply` with the chosen error, after (or without) writing."""

    failure: Exception | None = None
    write_anyway = False

    async def apply(self, writes: Sequence[Write]) -> None:
        failure, self.failure = self.failure, None
        if failure is not None and not self.write_anyway:
            raise failure
        await super().apply(writes)
        if failure is not None:
            raise failure


@pytest.mark.parametrize(
    ("failure", "written"),
    [(StoreUnavailable("down"), False), (CommitAmbiguous("in doubt"), True)],
)
async def test_an_item_whose_commit_failed_is_streamed_exactly_when_the_store_holds_it(
    failure: Exception, written: bool
) -> None:
    store = FailingStore()
    inbox = AgentInbox(agent_id=AGENT, store=store, next_seq=1, window=8)
    first = await inbox.publish(item("first"))
    store.failure, store.write_anyway = failure, written
    with pytest.raises(type(failure)):
        await inbox.publish(item("maybe"))
    last = await inbox.publish(item("last"))

    stream = await inbox.open_stream(takeover=False)
    count = 3 if written else 2
    got = [(await within_bound(anext(stream))).token for _ in range(count)]

    assert got[0] == first
    assert got[-1] == last
    waiter = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)
    assert not waiter.done()
    waiter.cancel()


async def test_an_item_this_inbox_committed_is_streamed_as_made_and_a_restart_decodes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryStore()
    inbox = AgentInbox(agent_id=AGENT, store=store, next_seq=1, window=8)
    token = await inbox.publish(item("made"))
    decoded: list[int] = []
    real = decode_row

    def counting(row: InboxRow) -> object:
        decoded.append(row.seq)
        return real(row)

    monkeypatch.setattr(coordinator, "decode_row", counting)
    stream = await inbox.open_stream(takeover=False)
    first = await within_bound(anext(stream))
    stream.close()

    restarted = AgentInbox(agent_id=AGENT, store=store, next_seq=2, window=8)
    again = await within_bound(anext(await restarted.open_stream(takeover=False)))

    assert (first.token, first.item) == (token, item("made"))
    assert again == first
    assert decoded == [1]  # only after the restart

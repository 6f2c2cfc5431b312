from __future__ import annotations

from gateway.endpoint.inbox.coordinator import AgentInbox
from gateway.endpoint.inbox.reader import STREAM_PAGE, InboxReader, store_source
from gateway.store.memory import MemoryStore
from tests.unit.endpoint.inbox.support import AGENT, OTHER_AGENT, item, undecodable_row


async def published(store: MemoryStore, count: int, *, agent_id: str = AGENT) -> list[str]:
    inbox = AgentInbox(agent_id=agent_id, store=store, next_seq=1, window=count or 1)
    return [await inbox.publish(item(str(index))) for index in range(count)]


def tokens_taken(reader: InboxReader) -> list[str]:
    taken = []
    while (request := reader.take()) is not None:
        taken.append(request.delivery.token)
    return taken


async def test_nothing_is_taken_before_a_page_is_read():
    store = MemoryStore()
    await published(store, 1)
    assert InboxReader(store_source(store, AGENT)).take() is None


async def test_a_page_hands_out_the_unread_rows_in_inbox_order_with_their_sequences():
    store = MemoryStore()
    tokens = await published(store, 3)
    reader = InboxReader(store_source(store, AGENT))
    assert await reader.read_page(10)
    first = reader.take()
    assert first is not None
    assert (first.seq, first.delivery.token, first.delivery.item) == (1, tokens[0], item("0"))
    assert tokens_taken(reader) == tokens[1:]
    assert reader.last_seq == 3


async def test_a_page_holds_no_more_rows_than_the_window_has_free_slots():
    store = MemoryStore()
    tokens = await published(store, 5)
    reader = InboxReader(store_source(store, AGENT))
    await reader.read_page(2)
    assert tokens_taken(reader) == tokens[:2]


async def test_a_page_holds_at_most_the_page_size_however_many_slots_are_free():
    store = MemoryStore()
    await published(store, STREAM_PAGE + 1)
    reader = InboxReader(store_source(store, AGENT))
    await reader.read_page(10 * STREAM_PAGE)
    assert len(tokens_taken(reader)) == STREAM_PAGE


async def test_the_next_page_starts_past_the_last_row_taken():
    store = MemoryStore()
    tokens = await published(store, 5)
    reader = InboxReader(store_source(store, AGENT))
    await reader.read_page(2)
    tokens_taken(reader)
    await reader.read_page(10)
    assert tokens_taken(reader) == tokens[2:]


async def test_reading_past_the_last_unread_row_finds_nothing():
    store = MemoryStore()
    await published(store, 1)
    reader = InboxReader(store_source(store, AGENT))
    await reader.read_page(10)
    tokens_taken(reader)
    assert not await reader.read_page(10)
    assert reader.take() is None


async def test_acknowledged_rows_and_other_agents_rows_are_not_read():
    store = MemoryStore()
    inbox = AgentInbox(agent_id=AGENT, store=store, next_seq=1, window=4)
    retired = await inbox.publish(item("retired"))
    kept = await inbox.publish(item("kept"))
    await published(store, 2, agent_id=OTHER_AGENT)
    await inbox.acknowledge([retired])
    reader = InboxReader(store_source(store, AGENT))
    await reader.read_page(10)
    assert tokens_taken(reader) == [kept]


async def test_a_row_that_does_not_decode_is_skipped_and_stays_unread():
    store = MemoryStore()
    await store.apply([undecodable_row(1, "dlv_bad")])
    inbox = AgentInbox(agent_id=AGENT, store=store, next_seq=2, window=4)
    good = await inbox.publish(item("good"))
    reader = InboxReader(store_source(store, AGENT))
    await reader.read_page(10)
    assert tokens_taken(reader) == [good]
    assert [row.token for row in await store.unread(AGENT, 0, 10)] == ["dlv_bad", good]

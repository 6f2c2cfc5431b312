from __future__ import annotations

from collections.abc import Sequence

import pytest
from harness_contract.errors import DeliveryAcknowledgeErrorReason
from harness_contract.values import AcknowledgeResult

from gateway.endpoint.inbox.acks import AckApplier
from gateway.endpoint.inbox.coordinator import AgentInbox
from gateway.store.errors import PartitionNotHeld, StoreFailed
from gateway.store.memory import MemoryStore
from gateway.store.records import InboxRow, InboxState, ReplaceInboxItem, Write
from tests.unit.endpoint.inbox.support import AGENT, OTHER_AGENT, Recorded, item

UNKNOWN = DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY
CONFLICT = DeliveryAcknowledgeErrorReason.DELIVERY_CONFLICT
FAILED = DeliveryAcknowledgeErrorReason.PERSISTENCE_FAILED
NEVER_ISSUED = "dlv_" + "B" * 43


class FailingReads(MemoryStore):
    async def inbox_items(self, agent_id: str, tokens: Sequence[str]) -> dict[str, InboxRow]:
        raise StoreFailed("read refused")


class FailingWrites(MemoryStore):
    refuse = False
    failure: Exception = StoreFailed("write refused")

    async def apply(self, writes: Sequence[Write]) -> None:
        if self.refuse:
            raise self.failure
        await super().apply(writes)


async def publish(store: MemoryStore, *texts: str, agent_id: str = AGENT) -> list[str]:
    inbox = AgentInbox(agent_id=agent_id, store=store, next_seq=1, window=4)
    return [await inbox.publish(item(text)) for text in texts]


def errors(results: list[AcknowledgeResult]) -> list[DeliveryAcknowledgeErrorReason | None]:
    return [result.error for result in results]


async def test_acknowledging_an_unread_item_retires_it_and_reports_ok():
    store, recorded = MemoryStore(), Recorded()
    [token] = await publish(store, "one")
    acks = AckApplier(agent_id=AGENT, store=store, observer=recorded.observer())
    assert await acks.apply([token]) == [AcknowledgeResult(token=token, error=None)]
    row = await store.inbox_item(AGENT, token)
    assert row is not None
    assert row.state is InboxState.ACKNOWLEDGED
    assert (recorded.acknowledged, recorded.results) == (["multicast"], ["ok"])


async def test_the_same_token_twice_in_one_call_is_retired_and_counted_once():
    store, recorded = MemoryStore(), Recorded()
    [token] = await publish(store, "one")
    acks = AckApplier(agent_id=AGENT, store=store, observer=recorded.observer())
    assert errors(await acks.apply([token, token])) == [None, None]
    assert recorded.acknowledged == ["multicast"]
    assert recorded.results == ["ok", "ok"]


async def test_acknowledging_again_succeeds_without_counting_a_second_retirement():
    store, recorded = MemoryStore(), Recorded()
    [token] = await publish(store, "one")
    acks = AckApplier(agent_id=AGENT, store=store, observer=recorded.observer())
    await acks.apply([token])
    assert errors(await acks.apply([token])) == [None]
    assert recorded.acknowledged == ["multicast"]


async def test_acknowledge_reports_unknown_delivery_for_a_token_never_issued_or_another_agents():
    store, recorded = MemoryStore(), Recorded()
    [theirs] = await publish(store, "for bob", agent_id=OTHER_AGENT)
    acks = AckApplier(agent_id=AGENT, store=store, observer=recorded.observer())
    assert errors(await acks.apply([NEVER_ISSUED, theirs])) == [UNKNOWN, UNKNOWN]
    assert recorded.results == ["unknown-delivery", "unknown-delivery"]
    row = await store.inbox_item(OTHER_AGENT, theirs)
    assert row is not None
    assert row.state is InboxState.UNREAD


async def test_acknowledging_a_replaced_item_is_a_delivery_conflict():
    store = MemoryStore()
    [token] = await publish(store, "one")
    await store.apply([ReplaceInboxItem(agent_id=AGENT, token=token, replacement_token="x")])
    acks = AckApplier(agent_id=AGENT, store=store, observer=Recorded().observer())
    assert errors(await acks.apply([token])) == [CONFLICT]


async def test_a_failed_read_is_persistence_failed_for_every_token():
    store = FailingReads()
    acks = AckApplier(agent_id=AGENT, store=store, observer=Recorded().observer())
    assert errors(await acks.apply(["a", "b", "a"])) == [FAILED, FAILED, FAILED]


async def test_a_failed_write_is_persistence_failed_only_for_the_items_it_would_have_retired():
    store, recorded = FailingWrites(), Recorded()
    retired, unread = await publish(store, "retired", "unread")
    acks = AckApplier(agent_id=AGENT, store=store, observer=recorded.observer())
    await acks.apply([retired])
    store.refuse = True
    assert errors(await acks.apply([unread, retired, NEVER_ISSUED])) == [FAILED, None, UNKNOWN]
    row = await store.inbox_item(AGENT, unread)
    assert row is not None
    assert row.state is InboxState.UNREAD
    assert recorded.acknowledged == ["multicast"]


async def test_a_write_refused_because_the_partition_was_released_fails_the_call_not_the_tokens():
    # cluster.md §3.2: the call answers NOT_OWNER and is retried at the new home.
    store = FailingWrites()
    [unread] = await publish(store, "unread")
    store.refuse, store.failure = True, PartitionNotHeld((3,))
    acks = AckApplier(agent_id=AGENT, store=store, observer=Recorded().observer())
    with pytest.raises(PartitionNotHeld):
        await acks.apply([unread])
    row = await store.inbox_item(AGENT, unread)
    assert row is not None
    assert row.state is InboxState.UNREAD

"""`ManagementQueries`: agent status without reading the backlog, history's closed errors,
and a gauge reading that holds every label value."""

from __future__ import annotations

import pytest
from harness_contract.kinds import PostKind
from harness_contract.management import ClusterReplica, ClusterStatus
from harness_contract.values import CollectiveOp

from gateway.cluster.membership import MembershipState, MembershipStatus, ReplicaStatus
from gateway.endpoint.api import ManagementError, ManagementErrorReason
from gateway.observability.metrics import (
    Listener,
)
from gateway.store.memory import MemoryStore
from gateway.store.records import InboxRow, PutInboxItem
from tests.unit.directory_support import directory


class CountingOnlyStore(MemoryStore):
    """A `MemoryStore` on which reading unread rows is a test failure."""

    async def unread(self, agent_id: str, after_seq: int, limit: int) -> list[InboxRow]:
        raise AssertionError(f"read up to {limit} unread rows instead of counting them")


def unread_item(agent_id: str, seq: int) -> PutInboxItem:
    return PutInboxItem(
        agent_id=agent_id, seq=seq, token=f"t{seq}", item=b"{}", guidance=None, created_at=1.0
    )


async def test_agent_status_counts_the_backlog_without_reading_its_rows():
    async with directory(CountingOnlyStore()) as built:
        registered = await built.agents.register("alice")
        await built.store.apply([unread_item(registered.agent_id, seq) for seq in (1, 2, 3)])
        status = await built.management.agent_status("alice")
        assert status.backlog == 3
        assert status.oldest_unacked_age_seconds > 0
        assert (status.address, status.hosted, status.stream_attached) == (
            "agent:alice",
            True,
            False,
        )


@pytest.mark.parametrize("address", ["bob", "agent:Bob", "group:bob", "agent:alice"])
async def test_history_of_an_address_naming_no_conversation_is_invalid_address(address):
    async with directory() as built:
        await built.agents.register("alice")
        with pytest.raises(ManagementError) as raised:
            await built.management.history("alice", address, after_record_hash=None, limit=50)
        assert raised.value.reason is ManagementErrorReason.INVALID_ADDRESS


async def test_history_of_a_conversation_not_stored_is_empty_and_an_unknown_agent_not_found():
    async with directory() as built:
        await built.agents.register("alice")
        assert (
            await built.management.history("alice", "agent:bob", after_record_hash=None, limit=50)
            == []
        )
        with pytest.raises(ManagementError) as raised:
            await built.management.history("nobody", "agent:bob", after_record_hash=None, limit=1)
        assert raised.value.reason is ManagementErrorReason.NOT_FOUND


async def test_agents_list_by_name_a_page_at_a_time():
    async with directory() as built:
        for name in ("carol", "alice", "bob", "alfred"):
            await built.agents.register(name)
        page, after = await built.management.list_agents(prefix="", after=None, limit=2)
        assert [status.address for status in page] == ["agent:alfred", "agent:alice"]
        assert after == "alice"
        page, after = await built.management.list_agents(prefix="", after=after, limit=2)
        assert [status.address for status in page] == ["agent:bob", "agent:carol"]
        assert after is None


async def test_a_gauge_reading_holds_every_label_value_and_the_backlog_by_listener():
    async with directory() as built:
        registered = await built.agents.register("alice")
        await built.store.apply([unread_item(registered.agent_id, 1)])
        reading = await built.management.read_gauges()
        assert reading.unacknowledged == {Listener.ATTACHED: 0, Listener.DETACHED: 1}
        assert set(reading.oldest_unacked_age) == set(Listener)
        assert reading.post_intents_pending == dict.fromkeys(PostKind, 0)
        assert reading.collectives_open == dict.fromkeys(CollectiveOp, 0)
        assert (reading.agents_hosted, reading.streams_active) == (1, 0)
        assert built.management.status().hosted_agents == 1


def membership_status() -> MembershipStatus:
    return MembershipStatus(
        replica_id="r1",
        incarnation=7,
        state=MembershipState.SERVING,
        lease_remaining=4.25,
        claiming=True,
        claim_passes=12,
        partitions=16,
        owned=9,
        offered=1,
        unowned=2,
        replicas=(
            ReplicaStatus(
                replica_id="r1",
                incarnation=7,
                address="10.0.0.1:7770",
                serving=True,
                fenced=False,
                live=True,
                beat_age=0.5,
                partitions=9,
            ),
            ReplicaStatus(
                replica_id="r2",
                incarnation=3,
                address="10.0.0.2:7770",
                serving=False,
                fenced=True,
                live=False,
                beat_age=12.0,
                partitions=5,
            ),
        ),
    )


async def test_the_status_outside_a_cluster_carries_no_cluster():
    async with directory() as built:
        status = built.management.status()
    assert status.mode == "embedded"
    assert status.cluster is None


async def test_a_cluster_replicas_status_carries_itself_its_lease_the_partitions_and_every_replica():
    async with directory(cluster=membership_status) as built:
        status = built.management.status()
    assert status.mode == "cluster"
    assert status.cluster == ClusterStatus(
        replica_id="r1",
        incarnation=7,
        state="serving",
        lease_remaining_seconds=4.25,
        claiming=True,
        partitions=16,
        owned_partitions=9,
        unowned_partitions=2,
        replicas=(
            ClusterReplica(
                replica_id="r1",
                incarnation=7,
                address="10.0.0.1:7770",
                serving=True,
                live=True,
                fenced=False,
                beat_age_seconds=0.5,
                partitions=9,
            ),
            ClusterReplica(
                replica_id="r2",
                incarnation=3,
                address="10.0.0.2:7770",
                serving=False,
                live=False,
                fenced=True,
                beat_age_seconds=12.0,
                partitions=5,
            ),
        ),
    )


async def test_a_cluster_replica_without_a_membership_yet_reports_no_cluster():
    async with directory(cluster=lambda: None) as built:
        assert built.management.status().cluster is None

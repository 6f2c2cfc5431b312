"""A cluster's sequencer through its seams (cluster.md §5.2, §5.4): intents of another
membership are refused and their sends answer `certification-unavailable`; a conversation
set aside is written into every member's row with its open intents refused; one found set
aside in its rows stays so, and nothing is written again."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence

import pytest
from harness_contract.content import multicast_content
from harness_contract.errors import SendError, SendErrorReason
from harness_contract.ids import RandomId

from gateway.engine import protocol as p
from gateway.engine.sequencing import OpenIntent
from gateway.engine.state import BindRefused
from gateway.identity.keys import SigningKey
from gateway.store.memory import MemoryStore
from gateway.store.records import (
    ConversationRow,
    IntentRow,
    IntentState,
    PutConversation,
    PutIntent,
    RefuseIntent,
    SetAsideRow,
    StoredConversation,
    Write,
)
from tests.support import eventually
from tests.unit.engine.support import BOUND, World, started, world_on


class ClusterRowsStore(MemoryStore):
    """A memory store that keeps a cluster's set-aside and refusal writes aside (only a
    cluster's PostgreSQL store takes them) and every conditional write it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster_writes: list[Write] = []
        self.conditional: list[Write] = []

    async def apply(self, writes: Sequence[Write]) -> None:
        kept = [w for w in writes if not isinstance(w, SetAsideRow | RefuseIntent)]
        self.cluster_writes.extend(w for w in writes if isinstance(w, SetAsideRow | RefuseIntent))
        self.conditional.extend(
            w
            for w in kept
            if (isinstance(w, PutConversation) and w.moved_from is not None)
            or (isinstance(w, PutIntent) and w.from_open)
        )
        if kept:
            await super().apply(kept)


class FakeSequencing:
    """Every conversation is sequenced here; its rows and open intents are what the test
    says; refusals go to the network as `ClusterReplica` wires them for agents homed here."""

    def __init__(self) -> None:
        self.world: World | None = None
        self.rows: dict[str, dict[str, ConversationRow]] = {}
        self.open: dict[str, list[OpenIntent]] = {}
        self.refusals: list[tuple[str, str]] = []

    def here(self, descriptor: p.MembershipDescriptor) -> bool:
        return True

    def key(self, agent_id: str) -> SigningKey:
        raise KeyError(agent_id)  # every member is hosted here

    async def prepare(self, descriptor: p.MembershipDescriptor) -> None:
        return None

    async def stored(self, conversation_id: str) -> dict[str, ConversationRow]:
        return self.rows.get(conversation_id, {})

    async def open_intents(self, conversation_id: str) -> list[OpenIntent]:
        return list(self.open.get(conversation_id, []))

    def intent_writes(self, write: Write, descriptor: p.MembershipDescriptor) -> list[Write]:
        return [write]

    def handed_off(self, descriptor: p.MembershipDescriptor) -> None:
        return None

    def refused(self, posts: list[tuple[str, str]]) -> None:
        self.refusals.extend(posts)
        assert self.world is not None
        for _author, post_id in posts:
            self.world.network.refuse(post_id)


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[World, FakeSequencing, ClusterRowsStore]]:
    sequencing = FakeSequencing()
    store = ClusterRowsStore()
    async with world_on(store, sequencing=sequencing) as world:
        sequencing.world = world
        await started(world, "alice", "bob", "carol")
        yield world, sequencing, store


def open_intent(
    world: World,
    author: str,
    descriptor: p.MembershipDescriptor,
    *,
    bound_at: float,
    membership: p.MembershipDescriptor | None = None,
    intent: bytes | None = None,
) -> OpenIntent:
    """An intent bound at another replica, as admission reads it."""
    agent_id = world.members[author].agent_id
    post_id = RandomId.POST.mint()
    body = p.PostIntent(
        conversation_id=descriptor.conversation_id,
        membership_hash=p.membership_hash(membership or descriptor),
        author_agent_id=agent_id,
        post_id=post_id,
        content=multicast_content("hello"),
    )
    row = IntentRow(
        post_id=post_id,
        conversation_id=descriptor.conversation_id,
        bind_seq=int(bound_at) + 1,
        intent=p.encode(body) if intent is None else intent,
        state=IntentState.OPEN,
        record_hash=None,
        bound_at=bound_at,
    )
    return OpenIntent(author_id=agent_id, row=row, descriptor=p.encode(descriptor))


async def test_an_intent_of_another_membership_is_refused_and_its_send_answers_unavailable(
    cluster,
):
    world, sequencing, store = cluster
    descriptor = world.descriptor("alice", "bob")
    other = world.descriptor("alice", "bob", "carol")  # the same members would hash alike
    first = open_intent(world, "alice", descriptor, bound_at=1.0)
    stray = open_intent(world, "bob", descriptor, bound_at=2.0, membership=other)
    sequencing.open[descriptor.conversation_id] = [first, stray]
    certified = world.network.latch(first.row.post_id)
    refused = world.network.latch(stray.row.post_id)
    await world.network.local.admit(descriptor.conversation_id)
    assert await asyncio.wait_for(certified, BOUND)
    with pytest.raises(SendError) as caught:
        await asyncio.wait_for(refused, BOUND)
    assert caught.value.reason is SendErrorReason.CERTIFICATION_UNAVAILABLE
    assert sequencing.refusals == [(stray.author_id, stray.row.post_id)]
    assert store.cluster_writes == [
        RefuseIntent(agent_id=stray.author_id, post_id=stray.row.post_id)
    ]
    # The unit moved heads only from GENESIS and completed its intent only while open.
    heads = [w for w in store.conditional if isinstance(w, PutConversation)]
    assert {(w.moved_from, w.depth) for w in heads} == {(0, 1)}
    assert [w.post_id for w in store.conditional if isinstance(w, PutIntent)] == [first.row.post_id]


async def test_a_conversation_set_aside_is_written_at_every_member_with_its_intents_refused(
    cluster,
):
    world, sequencing, store = cluster
    descriptor = world.descriptor("alice", "bob")
    first = open_intent(world, "alice", descriptor, bound_at=1.0)
    broken = open_intent(world, "bob", descriptor, bound_at=2.0, intent=b"not json")
    sequencing.open[descriptor.conversation_id] = [first, broken]
    waiting = world.network.latch(first.row.post_id)
    local = world.network.local
    await local.admit(descriptor.conversation_id)
    await eventually(lambda: asyncio.sleep(0, len(sequencing.refusals)), lambda n: n == 2)
    assert local.set_aside_count == 1
    rows = [w for w in store.cluster_writes if isinstance(w, SetAsideRow)]
    assert sorted(w.agent_id for w in rows) == sorted(descriptor.member_agent_ids)
    assert all(w.foundation is not None and w.foundation.moved_from == 0 for w in rows)
    refusals = {
        (w.agent_id, w.post_id) for w in store.cluster_writes if isinstance(w, RefuseIntent)
    }
    assert refusals == {(i.author_id, i.row.post_id) for i in (first, broken)}
    with pytest.raises(SendError):
        await asyncio.wait_for(waiting, BOUND)
    # An intent bound later (a home's view older than the row) is refused when admitted.
    late = open_intent(world, "alice", descriptor, bound_at=3.0)
    sequencing.open[descriptor.conversation_id] = [late]
    await local.admit(descriptor.conversation_id)
    assert RefuseIntent(agent_id=late.author_id, post_id=late.row.post_id) in store.cluster_writes


async def test_a_conversation_found_set_aside_in_its_rows_stays_so_and_refuses_binds(cluster):
    world, sequencing, store = cluster
    descriptor = world.descriptor("alice", "bob")
    stored = StoredConversation(
        conversation_id=descriptor.conversation_id,
        descriptor=p.encode(descriptor),
        membership_hash=p.membership_hash(descriptor),
        anchor=b"",
        anchor_hash="",
        head=None,
        depth=0,
        set_aside="an earlier holder's reason",
    )
    sequencing.rows[descriptor.conversation_id] = {
        agent_id: dataclasses.replace(stored) for agent_id in descriptor.member_agent_ids
    }
    local = world.network.local
    await local.prepare(descriptor)
    with pytest.raises(BindRefused):
        local.bind(world.members["alice"], descriptor, multicast_content("hi"), now=0.0)
    alice = world.members["alice"].agent_id
    assert [item.reason for item in local.set_aside_of(alice)] == ["an earlier holder's reason"]
    assert store.cluster_writes == []  # found so: nothing written again

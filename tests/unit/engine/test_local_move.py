"""Existing data (engine.md §5.10, §10 vector 17): conversations written by the Router path
move onto the store's local instance at start, every member at one head, nothing pending."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from harness_contract.content import multicast_content
from harness_contract.ids import RandomId

from gateway.engine import protocol as p
from gateway.engine.certifier import Certifier
from gateway.engine.local import LocalOrder
from gateway.engine.local_move import move_existing
from gateway.store.records import IntentState
from tests.unit.engine.support import BOUND, World, records_of, started


async def _restarted(world: World) -> tuple[dict[str, Certifier], LocalOrder]:
    """Every member rebuilt from the store as a restart rebuilds it, and a fresh local order."""
    await world.network.close()
    certifiers: dict[str, Certifier] = {}
    released: list[object] = []
    local = LocalOrder(
        store=world.store,
        instance_id=world.store.local_instance_id,
        certifiers=lambda: certifiers,
        release=released.append,
        on_fatal=lambda error: None,
    )
    for old in world.members.values():
        certifier = Certifier(
            old.identity,
            registry_public_key=world.registry.registry_public_key(),
            verify_cache=world.cache,
        )
        rows, intents = certifier.restore(
            await world.store.snapshot(old.agent_id),
            local_instance_id=world.store.local_instance_id,
        )
        local.restore(old.agent_id, rows, intents)
        certifiers[old.agent_id] = certifier
    return certifiers, local


async def test_router_path_conversations_move_onto_the_local_instance_with_one_head(world):
    await started(world, "alice", "bob", "carol")
    for index in range(2):
        await world.post("alice", f"direct {index}", "bob")
    await world.post("bob", "group", "alice", "carol")
    # (e) A bound intent whose proposal is still in the outbox when the daemon stops.
    alice = world.members["alice"]
    pending_id, effects = alice.bind(
        world.descriptor("alice", "bob"), multicast_content("pending"), now=0.0
    )
    await world.network.close()
    await world.store.apply(effects.writes)
    # (b) bob never promoted the second direct record (alice did): take it out of his store.
    bob = world.members["bob"]
    direct = world.descriptor("alice", "bob").conversation_id
    state = world.store._state.agent(bob.agent_id)
    [second] = [row for row in state.records.values() if row.depth == 2]
    del state.records[second.record_hash]
    state.deliveries = {
        token: row
        for token, row in state.deliveries.items()
        if row.record_hash != second.record_hash
    }
    state.conversations[direct] = replace(
        state.conversations[direct],
        head=next(row.record_hash for row in state.records.values() if row.depth == 1),
        depth=1,
    )

    certifiers, local = await _restarted(world)
    assert await move_existing(store=world.store, local=local, certifiers=certifiers) == 2
    local.start()
    try:
        for name in ("alice", "bob"):
            agent = world.members[name].agent_id
            [row] = [
                r for r in await world.store.conversations(agent) if r.conversation_id == direct
            ]
            anchor = p.decode(row.anchor, p.CompletedReanchor)
            assert anchor.reanchor.router_instance_id == world.store.local_instance_id
            assert len(anchor.certificate.entries) == 2
            assert row.depth == 2
            assert local.is_local(direct)
            assert all(not c.knows(direct) for c in certifiers.values())
        snapshot = await world.store.snapshot(bob.agent_id)
        assert (
            snapshot.locks == snapshot.staged == snapshot.evidence == snapshot.pending_outbox == ()
        )
        # bob got the missing record once, as a delivery; the pending intent certifies on
        # the local instance under its PostId, after the records every member now holds.
        assert [d.record_hash for d in snapshot.pending_deliveries].count(second.record_hash) == 1
        rows = await records_of(world, "bob", "alice", count=3)
        assert rows[2].post_id == pending_id
        record = p.decode(rows[2].record, p.CertifiedRecord)
        p.check_certified_record(record, membership=world.descriptor("alice", "bob"))
        assert record.action_certified_record.router_anchor == anchor
        intent = await world.store.intent(alice.agent_id, pending_id)
        assert intent is not None
        assert intent.state is IntentState.COMPLETED
        # A second start finds everything local already: nothing moves again.
        await local.close()
        certifiers, local = await _restarted(world)
        assert await move_existing(store=world.store, local=local, certifiers=certifiers) == 0
    finally:
        await asyncio.wait_for(local.close(), BOUND)


async def test_chains_that_differ_set_the_conversation_aside_at_every_member(world):
    await started(world, "alice", "bob")
    await world.post("alice", "one", "bob")
    await world.post("alice", "two", "bob")
    await world.network.close()
    bob = world.members["bob"]
    direct = world.descriptor("alice", "bob").conversation_id
    state = world.store._state.agent(bob.agent_id)
    state.conversations[direct] = replace(state.conversations[direct], head="rch_" + "A" * 43)
    certifiers, local = await _restarted(world)
    assert await move_existing(store=world.store, local=local, certifiers=certifiers) == 0
    assert [item.conversation_id for item in local.set_aside_of(bob.agent_id)] == [direct]
    assert not any(c.knows(direct) for c in certifiers.values())


async def test_members_on_different_anchors_after_a_crash_between_adoptions_move(world):
    await started(world, "alice", "bob")
    await world.post("alice", "one", "bob")
    await world.network.close()
    alice, bob = world.members["alice"], world.members["bob"]
    descriptor = world.descriptor("alice", "bob")
    direct = descriptor.conversation_id
    # (d) alice adopted a completed re-anchor onto another Router instance, bob did not.
    state = world.store._state.agent(alice.agent_id)
    row = state.conversations[direct]
    body = p.ReanchorBody(
        conversation_id=direct,
        membership_hash=row.membership_hash,
        previous_anchor_hash=row.anchor_hash,
        selected_record_hash=row.head or "",
        router_instance_id=RandomId.ROUTER_INSTANCE.mint(),
    )
    anchor_hash = p.anchor_hash(body)
    votes = tuple(
        p.sign_statement(
            member.identity.key,
            p.ReanchorVote(signer_agent_id=member.agent_id, anchor_hash=anchor_hash, reanchor=body),
        )
        for member in sorted(
            (alice, bob), key=lambda m: descriptor.member_agent_ids.index(m.agent_id)
        )
    )
    completed = p.CompletedReanchor(
        anchor_hash=anchor_hash,
        reanchor=body,
        certificate=p.Certificate(
            kind=p.CertificateKind.REANCHOR, subject=anchor_hash, entries=votes
        ),
    )
    state.conversations[direct] = replace(row, anchor=p.encode(completed), anchor_hash=anchor_hash)
    certifiers, local = await _restarted(world)
    assert await move_existing(store=world.store, local=local, certifiers=certifiers) == 1
    anchors = set()
    for member in (alice, bob):
        [moved] = await world.store.conversations(member.agent_id)
        now = p.decode(moved.anchor, p.CompletedReanchor)
        assert now.reanchor.previous_anchor_hash == anchor_hash
        assert now.reanchor.router_instance_id == world.store.local_instance_id
        anchors.add(moved.anchor_hash)
    assert len(anchors) == 1
    local.start()
    try:
        assert local.set_aside_of(bob.agent_id) == []
        assert local.is_local(direct)
    finally:
        await local.close()

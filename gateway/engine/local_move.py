"""Existing data (engine.md §5.10): at start, move conversations whose members are all hosted
here from a Router instance onto the store's local instance, one unit per conversation.

1. *Align.* The furthest position any member holds: its certified records and its current
   anchor. Every member's chain must be a prefix of it, else the conversation is set aside
   at every member. A behind member gets the missing records exactly as promotion from
   catch-up gives them (a pending delivery for a record another member authored, its own
   intent `completed`).
2. *Move.* Every member's locks, staged records, evidence, open re-anchor rows and pending
   outbox rows of the conversation go. Empty: the GenesisAnchor names the local instance.
   Non-empty: every member signs a `reanchor_vote` for {previous: the aligned anchor,
   selected: the aligned head, instance: local}; the CompletedReanchor (n votes) becomes the
   current anchor at every member.

A staged record or an open re-anchor that no member promoted or adopted is dropped, not
completed: no member can have shown or built on it, and the intents it carried stay open
and certify on the local instance under their PostIds. The move needs no Router and is
idempotent (a second start finds the conversation local already).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from harness_contract.codec import message_to_json
from harness_contract.ids import RandomId, agent_id_order_key
from harness_contract.jsonvalue import canonical_json

from gateway.engine import protocol as p
from gateway.engine.certifier import Certifier
from gateway.engine.local import LocalOrder
from gateway.engine.state import ConversationPosition, project
from gateway.store.port import Store
from gateway.store.records import (
    ConversationRow,
    DeliveryState,
    IntentState,
    MoveToLocal,
    PutConversation,
    PutDelivery,
    PutIntent,
    PutReanchor,
    PutRecord,
    RecordRow,
    Write,
)

logger = logging.getLogger(__name__)

ALIGN_PAGE: Final = 256
"""Records read at a time from the member that is furthest ahead."""


class _Misaligned(Exception):
    pass


async def move_existing(
    *, store: Store, local: LocalOrder, certifiers: dict[str, Certifier]
) -> int:
    """Move every all-hosted Router-path conversation onto the local instance; returns how
    many moved. A conversation that cannot be aligned is set aside at every member."""
    seen: set[str] = set()
    moved = 0
    for certifier in list(certifiers.values()):
        for conversation_id in certifier.conversation_ids():
            if conversation_id in seen:
                continue
            seen.add(conversation_id)
            descriptor = certifier.membership_of(conversation_id)
            assert descriptor is not None
            members = descriptor.member_agent_ids
            if any(member not in certifiers for member in members):
                continue  # crosses daemons: the Router path keeps it
            holders = [certifiers[member] for member in members]
            unloadable = [
                h.set_aside[conversation_id] for h in holders if conversation_id in h.set_aside
            ]
            if unloadable:
                # One member's rows failed a check: the conversation is set aside at all.
                for holder in holders:
                    holder.forget(conversation_id)
                local.set_aside(conversation_id, members, unloadable[0])
                continue
            try:
                await _move_one(store, local, descriptor, holders)
            except (_Misaligned, p.ProtocolError) as error:
                for holder in holders:
                    holder.forget(conversation_id)
                local.set_aside(conversation_id, members, f"existing data: {error}")
                continue
            moved += 1
    if moved:
        logger.warning("moved %d conversations onto local order", moved)
    return moved


async def _move_one(
    store: Store,
    local: LocalOrder,
    descriptor: p.MembershipDescriptor,
    holders: Sequence[Certifier],
) -> None:
    conversation_id = descriptor.conversation_id
    # A member that never stored the conversation (it missed the GENESIS) stands at 0.
    positions = {
        holder.agent_id: holder.position(conversation_id)
        for holder in holders
        if holder.knows(conversation_id)
    }
    leader = max(
        (holder for holder in holders if holder.agent_id in positions),
        key=lambda holder: positions[holder.agent_id].depth,
    )
    top = positions[leader.agent_id]
    membership_hash = p.membership_hash(descriptor)
    writes: list[Write] = []
    # 1. Align: every member's chain is a prefix of the leader's.
    for holder in holders:
        position = positions.get(holder.agent_id)
        if position is None or position.depth == 0:
            continue
        [at] = await store.records(leader.agent_id, conversation_id, position.depth - 1, 1)
        if at.record_hash != position.head:
            raise _Misaligned(f"the chains of two members differ at depth {position.depth}")
    anchor_hash = _aligned_anchor(positions, top.depth)
    for holder in holders:
        known = positions.get(holder.agent_id)
        after = 0 if known is None else known.depth
        while after < top.depth:
            rows = await store.records(leader.agent_id, conversation_id, after, ALIGN_PAGE)
            if not rows:
                raise _Misaligned("the leader's records end early")
            for row in rows:
                writes.extend(_promoted(holder, descriptor, row))
            after = rows[-1].depth
    # 2. Move.
    writes.extend(
        MoveToLocal(agent_id=h.agent_id, conversation_id=conversation_id) for h in holders
    )
    current: p.RouterAnchor
    if top.head is None:
        current = p.GenesisAnchor(
            conversation_id=conversation_id,
            membership_hash=membership_hash,
            router_instance_id=local.instance_id,
        )
        current_hash = p.anchor_hash(current)
    else:
        body = p.ReanchorBody(
            conversation_id=conversation_id,
            membership_hash=membership_hash,
            previous_anchor_hash=anchor_hash,
            selected_record_hash=top.head,
            router_instance_id=local.instance_id,
        )
        current_hash = p.anchor_hash(body)
        votes = tuple(
            p.sign_statement(
                holder.identity.key,
                p.ReanchorVote(
                    signer_agent_id=holder.agent_id, anchor_hash=current_hash, reanchor=body
                ),
            )
            for holder in sorted(holders, key=lambda h: agent_id_order_key(h.agent_id))
        )
        current = p.CompletedReanchor(
            anchor_hash=current_hash,
            reanchor=body,
            certificate=p.Certificate(
                kind=p.CertificateKind.REANCHOR, subject=current_hash, entries=votes
            ),
        )
        completed = p.encode(current)
        body_bytes = p.encode(body)
        writes.extend(
            PutReanchor(
                agent_id=holder.agent_id,
                conversation_id=conversation_id,
                previous_anchor_hash=anchor_hash,
                instance_id=local.instance_id,
                body=body_bytes,
                anchor_hash=current_hash,
                completed=completed,
            )
            for holder in holders
        )
    descriptor_bytes = p.encode(descriptor)
    anchor_bytes = p.encode(current)
    moved: dict[str, ConversationRow] = {}
    for holder in holders:
        stored = PutConversation(
            agent_id=holder.agent_id,
            conversation_id=conversation_id,
            descriptor=descriptor_bytes,
            membership_hash=membership_hash,
            anchor=anchor_bytes,
            anchor_hash=current_hash,
            head=top.head,
            depth=top.depth,
        )
        moved[holder.agent_id] = stored.row()
        writes.append(stored)
    await store.apply(writes)
    # Committed: the conversation leaves the Router path in memory and local order serves it.
    for holder in holders:
        intents = holder.forget(conversation_id)
        local.restore(holder.agent_id, [moved[holder.agent_id]], intents)
    logger.info("conversation moved onto local order conversation=%s", conversation_id)


def _aligned_anchor(positions: dict[str, ConversationPosition], depth: int) -> str:
    """The current anchor of the furthest member: every other member's anchor is it or
    the anchor it replaced (a crash between two members' adoptions)."""
    candidates = [pos for pos in positions.values() if pos.depth == depth]
    best = max(candidates, key=lambda pos: isinstance(pos.anchor, p.CompletedReanchor))
    for position in positions.values():
        if position.anchor_hash == best.anchor_hash:
            continue
        replaced = (
            best.anchor.reanchor.previous_anchor_hash
            if isinstance(best.anchor, p.CompletedReanchor)
            else None
        )
        if position.anchor_hash != replaced:
            raise _Misaligned("the members' anchors differ")
    return best.anchor_hash


def _promoted(holder: Certifier, descriptor: p.MembershipDescriptor, row: RecordRow) -> list[Write]:
    """A record another member holds, stored at a behind member as catch-up stores it."""
    record = p.decode(row.record, p.CertifiedRecord)
    intent = record.action_certified_record.record_core.action.post_intent
    commit_seq = holder.reserve_commit_seq()
    writes: list[Write] = [
        PutRecord(
            agent_id=holder.agent_id,
            record_hash=row.record_hash,
            conversation_id=row.conversation_id,
            depth=row.depth,
            author=row.author,
            post_id=row.post_id,
            record=row.record,
            commit_seq=commit_seq,
            membership=p.encode(descriptor),
        )
    ]
    if intent.author_agent_id == holder.agent_id:
        open_intent = holder.complete_open_intent(row.conversation_id, row.post_id)
        if open_intent is not None:
            writes.append(
                PutIntent(
                    agent_id=holder.agent_id,
                    post_id=open_intent.post_id,
                    conversation_id=open_intent.conversation_id,
                    bind_seq=open_intent.bind_seq,
                    intent=open_intent.intent,
                    state=IntentState.COMPLETED,
                    record_hash=row.record_hash,
                    bound_at=open_intent.bound_at,
                )
            )
    else:
        writes.append(
            PutDelivery(
                agent_id=holder.agent_id,
                token=RandomId.DELIVERY.mint(),
                conversation_id=row.conversation_id,
                record_hash=row.record_hash,
                commit_seq=commit_seq,
                projection=canonical_json(message_to_json(project(descriptor, intent))),
                state=DeliveryState.PENDING,
            )
        )
    return writes

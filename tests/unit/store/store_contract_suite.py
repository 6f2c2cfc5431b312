"""One contract suite for every `Store` implementation: one behaviour, several backends.

A module that runs the suite star-imports it and defines the `store` fixture for its backends
(`tests/unit/store/test_store_contract.py`: memory and SQLite;
`tests/integration/store/test_postgres_contract.py`: PostgreSQL). The module's name does not
start with `test_`, so pytest collects its tests only where they are imported.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.store.errors import ConstraintViolation
from gateway.store.records import (
    AcknowledgeItem,
    BindSend,
    DeliveryState,
    EvidenceKind,
    InboxState,
    IntentState,
    OutboxState,
    PutConversation,
    PutCursor,
    PutDelivery,
    PutEvidence,
    PutIdentity,
    PutInboxItem,
    PutIntent,
    PutLock,
    PutOutbox,
    PutRecord,
    PutSend,
    PutStaged,
    PutToken,
    ResetConversation,
    RevokeTokens,
    SetDeliveryState,
    SetOutboxState,
    SetSendOutcome,
)

A = "agt_AAAAAAAAAAAAAAAAAAAAAA"
B = "agt_f39_f39_f39_f39_f39_fw"
CNV = "cnv_qF0CzgWIvDEnr30lD2k820Oo1Hx_7hHXB5jv02vC5bQ"


def identity(agent_id: str, name: str) -> PutIdentity:
    return PutIdentity(
        agent_id=agent_id, agent_name=name, signed_card=b"{}", seed=b"s" * 32, created_at="t"
    )


def inbox_item(agent_id: str, seq: int, token: str) -> PutInboxItem:
    return PutInboxItem(
        agent_id=agent_id, seq=seq, token=token, item=b"{}", guidance=None, created_at=float(seq)
    )


async def test_identities_and_tokens_are_kept_and_tokens_can_be_revoked(store):
    await store.apply(
        [identity(A, "alice"), PutToken(token_digest="d1", agent_id=A, created_at="t")]
    )
    assert [row.agent_name for row in await store.identities()] == ["alice"]
    assert await store.token("d1") == (A, False)
    await store.apply([RevokeTokens(agent_id=A)])
    assert await store.token("d1") == (A, True)
    assert await store.token("missing") is None


async def test_a_failing_write_applies_none_of_its_batch(store):
    await store.apply([identity(A, "alice")])
    with pytest.raises(ConstraintViolation):
        await store.apply([inbox_item(A, 1, "t1"), identity(B, "alice")])
    assert await store.unread(A, 0, 10) == []


async def test_the_unread_count_is_the_agents_unread_items_and_drops_on_acknowledgment(store):
    assert await store.unread_count(A) == 0
    await store.apply(
        [inbox_item(A, seq, f"t{seq}") for seq in (1, 2, 3)] + [inbox_item(B, 1, "b1")]
    )
    assert await store.unread_count(A) == 3
    assert await store.unread_count(B) == 1
    await store.apply([AcknowledgeItem(agent_id=A, token="t2")])
    assert await store.unread_count(A) == 2
    assert await store.unread_count(A) == len(await store.unread(A, 0, 10))


async def test_inbox_reads_unread_items_in_order_and_acknowledgment_retires_them(store):
    await store.apply(
        [inbox_item(A, seq, f"t{seq}") for seq in (1, 2, 3)] + [inbox_item(B, 1, "b1")]
    )
    assert [row.token for row in await store.unread(A, 0, 10)] == ["t1", "t2", "t3"]
    assert [row.token for row in await store.unread(A, 1, 1)] == ["t2"]
    await store.apply([AcknowledgeItem(agent_id=A, token="t2")])
    assert [row.token for row in await store.unread(A, 0, 10)] == ["t1", "t3"]
    row = await store.inbox_item(A, "t2")
    assert row is not None
    assert row.state is InboxState.ACKNOWLEDGED
    assert await store.inbox_item(A, "b1") is None
    assert await store.oldest_unread(A) == 1.0
    found = await store.inbox_items(A, ["t1", "t2", "b1", "nope"])
    assert sorted(found) == ["t1", "t2"]
    assert found["t2"].state is InboxState.ACKNOWLEDGED


async def test_an_acknowledged_item_keeps_only_its_tombstone(store):
    await store.apply([inbox_item(A, 1, "t1")])
    await store.apply([AcknowledgeItem(agent_id=A, token="t1", tombstone=b'{"kind":"multicast"}')])
    row = await store.inbox_item(A, "t1")
    assert row is not None
    assert row.item == b'{"kind":"multicast"}'
    # Acknowledging again changes nothing.
    await store.apply([AcknowledgeItem(agent_id=A, token="t1", tombstone=b"{}")])
    again = await store.inbox_item(A, "t1")
    assert again is not None
    assert again.item == b'{"kind":"multicast"}'


async def test_a_token_is_never_reused_in_an_inbox(store):
    await store.apply([inbox_item(A, 1, "t1")])
    with pytest.raises(ConstraintViolation):
        await store.apply([inbox_item(A, 2, "t1")])


async def test_the_snapshot_holds_what_an_agent_rebuilds_from(store):
    await store.apply(
        [
            PutConversation(
                agent_id=A,
                conversation_id=CNV,
                descriptor=b"d",
                membership_hash="mbr_x",
                anchor=b"a",
                anchor_hash="anc_x",
                head=None,
                depth=0,
            ),
            PutIntent(
                agent_id=A,
                post_id="pst_1",
                conversation_id=CNV,
                bind_seq=1,
                intent=b"i",
                state=IntentState.OPEN,
                record_hash=None,
                bound_at=1.0,
            ),
            PutIntent(
                agent_id=A,
                post_id="pst_2",
                conversation_id=CNV,
                bind_seq=2,
                intent=b"i",
                state=IntentState.COMPLETED,
                record_hash="rch_x",
                bound_at=1.0,
            ),
            PutLock(
                agent_id=A, conversation_id=CNV, predecessor="", action_hash="ach_x", action=b"x"
            ),
            PutStaged(
                agent_id=A, record_hash="rch_s", conversation_id=CNV, predecessor="", record=b"r"
            ),
            PutEvidence(
                agent_id=A,
                conversation_id=CNV,
                subject="ach_x",
                signer=A,
                kind=EvidenceKind.ACTION,
                statement=b"s",
            ),
            PutOutbox(
                agent_id=A,
                row_id=1,
                conversation_id=CNV,
                post_id="pst_1",
                message_id="msg_x",
                envelope=b"e",
                state=OutboxState.PENDING,
            ),
            PutOutbox(
                agent_id=A,
                row_id=2,
                conversation_id=CNV,
                post_id=None,
                message_id="msg_y",
                envelope=b"e",
                state=OutboxState.PENDING,
            ),
            SetOutboxState(agent_id=A, row_id=2, state=OutboxState.ACCEPTED),
            PutDelivery(
                agent_id=A,
                token="dlv_1",
                conversation_id=CNV,
                record_hash="rch_r",
                commit_seq=4,
                projection=b"p",
                state=DeliveryState.PENDING,
            ),
            PutCursor(subscription="main", cursor=b"c1"),
            inbox_item(A, 7, "t7"),
        ]
    )
    snapshot = await store.snapshot(A)
    assert [row.post_id for row in snapshot.open_intents] == ["pst_1"]
    assert snapshot.max_bind_seq == 2
    assert [row.row_id for row in snapshot.pending_outbox] == [1]
    assert snapshot.max_outbox_row == 1  # the accepted row was pruned
    assert [row.token for row in snapshot.pending_deliveries] == ["dlv_1"]
    assert snapshot.max_inbox_seq == 7
    assert snapshot.unread == 1
    assert len(snapshot.locks) == len(snapshot.staged) == len(snapshot.evidence) == 1
    assert await store.cursor("main") == b"c1"
    await store.apply(
        [
            ResetConversation(agent_id=A, conversation_id=CNV),
            SetDeliveryState(agent_id=A, token="dlv_1", state=DeliveryState.CLASSIFIED),
        ]
    )
    after = await store.snapshot(A)
    assert after.locks == after.staged == after.evidence == after.pending_deliveries == ()
    assert len(after.open_intents) == 1


async def test_records_read_in_chain_order_and_one_per_depth(store):
    def record(depth: int, name: str) -> PutRecord:
        return PutRecord(
            agent_id=A,
            record_hash=name,
            conversation_id=CNV,
            depth=depth,
            author=B,
            post_id="pst_" + name,
            record=b"r",
            commit_seq=depth,
        )

    await store.apply([record(2, "rch_b"), record(1, "rch_a"), record(3, "rch_c")])
    assert [row.record_hash for row in await store.records(A, CNV, 0, 10)] == [
        "rch_a",
        "rch_b",
        "rch_c",
    ]
    assert [row.record_hash for row in await store.records(A, CNV, 1, 1)] == ["rch_b"]
    found = await store.record(A, "rch_c")
    assert found is not None
    assert found.depth == 3
    with pytest.raises(ConstraintViolation):
        await store.apply([record(3, "rch_other")])


def open_intent(post_id: str, bind_seq: int) -> PutIntent:
    return PutIntent(
        agent_id=A,
        post_id=post_id,
        conversation_id=CNV,
        bind_seq=bind_seq,
        intent=b"i",
        state=IntentState.OPEN,
        record_hash=None,
        bound_at=1.0,
    )


def reservation(key: str) -> PutSend:
    return PutSend(agent_id=A, key=key, request=b"{}", run_id="run-1", outcome=None, resumable=True)


async def test_a_keyed_sends_binding_commits_with_its_intent_and_its_outcome_keeps_it(store):
    await store.apply([reservation("k")])
    reserved = await store.send_row(A, "k")
    assert reserved is not None
    assert (reserved.outcome, reserved.bound, reserved.resumable) == (None, None, True)

    await store.apply([open_intent("pst_1", 1), BindSend(agent_id=A, key="k", bound=b"b")])
    bound = await store.send_row(A, "k")
    assert bound is not None
    assert (bound.outcome, bound.bound, bound.resumable) == (None, b"b", True)
    assert await store.intent(A, "pst_1") is not None

    await store.apply([SetSendOutcome(agent_id=A, key="k", outcome=b"o")])
    assert await store.send_row(A, "k") == replace(bound, outcome=b"o")


async def test_a_bind_that_fails_leaves_its_send_row_unbound(store):
    await store.apply([identity(A, "alice"), reservation("k")])
    with pytest.raises(ConstraintViolation):
        await store.apply(
            [
                open_intent("pst_1", 1),
                BindSend(agent_id=A, key="k", bound=b"b"),
                identity(B, "alice"),
            ]
        )
    row = await store.send_row(A, "k")
    assert row is not None
    assert row.bound is None
    assert await store.intent(A, "pst_1") is None


async def test_a_send_row_written_as_schema_2_wrote_it_is_not_resumable(store):
    await store.apply([PutSend(agent_id=A, key="old", request=b"{}", run_id="run-0", outcome=None)])
    row = await store.send_row(A, "old")
    assert row is not None
    assert (row.bound, row.resumable) == (None, False)

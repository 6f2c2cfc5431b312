"""One agent's endpoint through its seams (engine.md §6-§7, collectives.md §1.7): sends
bound and certified through local order or the in-process Router, their failures, and the
inbound classification pass, on a `MemoryStore` and a `FakeClock`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from harness_contract.codec import send_result_from_json
from harness_contract.content import text_of
from harness_contract.errors import (
    CollectiveError,
    MembersUnreachable,
    SendError,
    SendErrorReason,
)
from harness_contract.jsonvalue import parse_canonical_json
from harness_contract.values import (
    Accept,
    Answered,
    AskOperation,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    FailureDelivery,
    MessageInput,
    MulticastItem,
    OperationFailedItem,
    ResponseInput,
    SendResult,
)

from gateway.endpoint.idempotency import binding
from gateway.endpoint.runtime import AgentRuntime, SendTimeouts
from gateway.store.errors import CommitAmbiguous, ConstraintViolation
from gateway.store.records import BindSend, DeliveryState, PutDelivery, PutIntent, PutSend, Write
from tests.support import eventually
from tests.unit.collectives.fakes import SCHEMA
from tests.unit.endpoint.support import BOUNDED, QUICK, Daemon, FailingStore, daemon


@pytest.fixture
async def world() -> AsyncIterator[Daemon]:
    async with daemon(FailingStore()) as built:
        yield built


async def hosted(
    world: Daemon, *names: str, timeouts: SendTimeouts = BOUNDED
) -> list[AgentRuntime]:
    runtimes = [await world.host(name, timeouts=timeouts) for name in names]
    await world.start()
    return runtimes


async def send_failure(runtime: AgentRuntime, send_input, **kwargs) -> SendError:
    with pytest.raises(SendError) as failed:
        await runtime.send(send_input, **kwargs)
    return failed.value


async def inbox_of(world: Daemon, runtime: AgentRuntime, count: int = 1):
    return await eventually(lambda: world.items(runtime), lambda items: len(items) >= count)


def texts(items) -> list[str]:
    return [text_of(item.message.content) for item in items if isinstance(item, MulticastItem)]


async def test_a_multicast_to_a_co_hosted_agent_certifies_and_reaches_its_inbox(world):
    alice, bob = await hosted(world, "alice", "bob")

    result = await alice.send(MessageInput(to="agent:bob", text="hello"))

    [item] = await inbox_of(world, bob)
    assert isinstance(item, MulticastItem)
    assert result == SendResult(post_ids=(item.message.post_id,))
    assert item.message.sender == "agent:alice"
    assert texts([item]) == ["hello"]
    assert world.observed["alice"].sends == [("multicast", None)]
    assert world.observed["bob"].published == ["multicast"]


async def test_a_multicast_to_an_unknown_agent_fails_unknown_agent_and_binds_nothing(world):
    [alice] = await hosted(world, "alice")

    failure = await send_failure(alice, MessageInput(to="agent:nobody", text="hello"))

    assert failure.send_reason is SendErrorReason.UNKNOWN_AGENT
    assert alice.certifier.open_intents == 0
    assert world.observed["alice"].sends == [("multicast", failure)]


async def test_a_send_to_a_malformed_address_fails_invalid_address(world):
    [alice] = await hosted(world, "alice")
    failure = await send_failure(alice, MessageInput(to="bob", text="hello"))
    assert failure.send_reason is SendErrorReason.INVALID_ADDRESS


async def test_a_send_across_daemons_fails_network_unavailable_while_the_router_is_detached(
    world,
):
    alice = await world.host("alice", timeouts=QUICK)  # no start: no Router attachment
    await world.register("carol")

    failure = await send_failure(alice, MessageInput(to="agent:carol", text="hello"))

    assert failure.send_reason is SendErrorReason.NETWORK_UNAVAILABLE
    assert alice.certifier.open_intents == 0


async def test_a_send_across_daemons_answers_delivery_pending_and_its_intent_goes_on(world):
    [alice] = await hosted(world, "alice", timeouts=QUICK)
    await world.register("carol")  # hosted elsewhere: it never votes here

    failure = await send_failure(alice, MessageInput(to="agent:carol", text="hello"))

    assert failure.send_reason is SendErrorReason.DELIVERY_PENDING
    assert alice.certifier.open_intents == 1


async def test_a_send_whose_deadline_leaves_no_time_answers_delivery_pending_once_bound(world):
    [alice] = await hosted(world, "alice")
    await world.register("carol")

    failure = await send_failure(alice, MessageInput(to="agent:carol", text="hello"), deadline=0.5)

    assert failure.send_reason is SendErrorReason.DELIVERY_PENDING
    assert alice.certifier.open_intents == 1


async def test_a_send_to_a_set_aside_conversation_fails_certification_unavailable(world):
    alice, bob = await hosted(world, "alice", "bob")
    descriptor = alice.posting.membership_with([bob.identity.card])
    world.network.local.set_aside(
        descriptor.conversation_id, descriptor.member_agent_ids, "forced by the test"
    )

    failure = await send_failure(alice, MessageInput(to="agent:bob", text="hello"))

    assert failure.send_reason is SendErrorReason.CERTIFICATION_UNAVAILABLE
    assert failure.detail == "the conversation is set aside"


async def test_a_bind_that_does_not_commit_fails_persistence_failed_and_is_undone(world):
    alice, bob = await hosted(world, "alice", "bob")
    store = world.store
    assert isinstance(store, FailingStore)
    store.refusal = ConstraintViolation("forced by the test")

    failure = await send_failure(alice, MessageInput(to="agent:bob", text="lost"))

    assert failure.send_reason is SendErrorReason.PERSISTENCE_FAILED
    assert world.network.local.open_intents_by_kind(alice.agent_id) == {"direct": 0, "group": 0}
    # The conversation's foundation was undone with the bind: the next send founds it again.
    await alice.send(MessageInput(to="agent:bob", text="kept"))
    assert texts(await inbox_of(world, bob)) == ["kept"]


async def test_a_bind_whose_commit_is_ambiguous_fails_outcome_unknown(world):
    alice, _ = await hosted(world, "alice", "bob")
    store = world.store
    assert isinstance(store, FailingStore)
    store.refusal = CommitAmbiguous("forced by the test")

    failure = await send_failure(alice, MessageInput(to="agent:bob", text="maybe"))

    assert failure.send_reason is SendErrorReason.OUTCOME_UNKNOWN


async def test_a_refused_gather_with_inbound_failure_delivery_returns_its_operation_id(world):
    [alice] = await hosted(world, "alice")
    ask = MessageInput(
        to="agent:nobody",
        text="when?",
        collective=AskOperation(op=CollectiveOp.GATHER, deadline=60, requested_schema=SCHEMA),
    )

    result = await alice.send(ask, failure_delivery=FailureDelivery.INBOUND)

    [item] = await inbox_of(world, alice)
    assert isinstance(item, OperationFailedItem)
    assert item.id == result.operation_id
    assert item.to == "agent:nobody"
    assert world.observed["alice"].published == ["operationFailed"]


async def test_a_refused_gather_with_result_failure_delivery_raises_the_refusal(world):
    [alice] = await hosted(world, "alice")
    ask = MessageInput(
        to="agent:nobody",
        text="when?",
        collective=AskOperation(op=CollectiveOp.GATHER, deadline=60, requested_schema=SCHEMA),
    )
    with pytest.raises(CollectiveError) as refused:
        await alice.send(ask)
    assert isinstance(refused.value.failure, MembersUnreachable)
    assert await world.items(alice) == []


async def test_a_gather_between_co_hosted_agents_completes_when_the_member_answers(world):
    alice, bob = await hosted(world, "alice", "bob")
    ask = MessageInput(
        to="agent:bob",
        text="when?",
        collective=AskOperation(op=CollectiveOp.GATHER, deadline=60, requested_schema=SCHEMA),
    )
    asked = await alice.send(ask)

    [request] = await inbox_of(world, bob)
    assert isinstance(request, CollectiveRequestItem)
    assert request.id == asked.operation_id
    answered = await bob.send(
        ResponseInput(to="agent:alice", response=Accept(content={"slot": "tue"}))
    )
    assert answered.operation_id == asked.operation_id

    [result] = await inbox_of(world, alice)
    assert isinstance(result, CollectiveResultItem)
    assert [member.outcome for member in result.outcomes] == [Answered(content={"slot": "tue"})]
    assert world.observed["bob"].consumed == []
    assert "answer" in world.observed["alice"].consumed
    assert [op for op, _ in world.observed["bob"].sends] == ["answer"]


async def test_a_delivery_whose_projection_does_not_decode_is_consumed(world):
    alice, bob = await hosted(world, "alice", "bob")
    await alice.send(MessageInput(to="agent:bob", text="first"))
    await inbox_of(world, bob)
    await world.store.apply(
        [
            PutDelivery(
                agent_id=bob.agent_id,
                token="dlv_undecodable",
                conversation_id="cnv_x",
                record_hash="rch_x",
                commit_seq=10_000,
                projection=b"not json",
                state=DeliveryState.PENDING,
            )
        ]
    )

    bob.deliveries_ready()

    await eventually(
        lambda: world.store.pending_deliveries(bob.agent_id, 10), lambda rows: not rows
    )
    assert world.observed["bob"].consumed == ["other"]
    assert len(await world.items(bob)) == 1


async def test_a_keyed_send_runs_once_and_every_call_returns_its_one_outcome(world):
    alice, bob = await hosted(world, "alice", "bob")
    send = MessageInput(to="agent:bob", text="once")

    first = await alice.send(send, idempotency_key="k-1")
    again = await alice.send(send, idempotency_key="k-1")

    [item] = await inbox_of(world, bob)
    assert isinstance(item, MulticastItem)
    assert first == again == SendResult(post_ids=(item.message.post_id,))
    assert texts([item]) == ["once"]
    assert world.observed["alice"].sends == [("multicast", None), ("multicast", None)]


def recorded_units(store, monkeypatch) -> list[list[Write]]:
    """Every `apply` call's writes from here on, in order."""
    units: list[list[Write]] = []
    apply = store.apply

    async def recording(writes):
        units.append(list(writes))
        await apply(writes)

    monkeypatch.setattr(store, "apply", recording)
    return units


async def bound_of(world: Daemon, runtime: AgentRuntime, key: str) -> SendResult | None:
    row = await world.store.send_row(runtime.agent_id, key)
    assert row is not None
    return None if row.bound is None else send_result_from_json(parse_canonical_json(row.bound))


async def cut_by_a_restart(world: Daemon, runtime: AgentRuntime, key: str) -> None:
    """Forget the key's kept outcome, as a daemon killed before storing it would have."""
    row = await world.store.send_row(runtime.agent_id, key)
    assert row is not None
    await world.store.apply(
        [
            PutSend(
                agent_id=runtime.agent_id,
                key=key,
                request=row.request,
                run_id="run-before",
                outcome=None,
                bound=row.bound,
                resumable=True,
            )
        ]
    )


async def test_a_keyed_sends_bind_writes_its_post_ids_into_its_row_with_the_intent(
    world, monkeypatch
):
    alice, _ = await hosted(world, "alice", "bob")
    units = recorded_units(world.store, monkeypatch)

    result = await alice.send(MessageInput(to="agent:bob", text="hi"), idempotency_key="k-1")

    [bind] = [unit for unit in units if any(isinstance(w, PutIntent) for w in unit)]
    [written] = [w for w in bind if isinstance(w, BindSend)]
    assert written.key == "k-1"
    # A lone local post certifies in its bind's own unit: its intent is put open, then completed.
    assert {w.post_id for w in bind if isinstance(w, PutIntent)} == set(result.post_ids)
    assert await bound_of(world, alice, "k-1") == SendResult(post_ids=result.post_ids)


async def test_a_keyed_bind_that_does_not_commit_leaves_its_row_unbound(world):
    alice, _ = await hosted(world, "alice", "bob")
    store = world.store
    assert isinstance(store, FailingStore)
    store.refusal = ConstraintViolation("forced by the test")

    failure = await send_failure(alice, MessageInput(to="agent:bob", text="x"), idempotency_key="k")

    assert failure.send_reason is SendErrorReason.PERSISTENCE_FAILED
    assert await bound_of(world, alice, "k") is None


async def test_a_keyed_gather_and_its_keyed_answer_bind_their_operation_id(world):
    alice, bob = await hosted(world, "alice", "bob")
    ask = MessageInput(
        to="agent:bob",
        text="when?",
        collective=AskOperation(op=CollectiveOp.GATHER, deadline=60, requested_schema=SCHEMA),
    )
    asked = await alice.send(ask, idempotency_key="ask")
    await inbox_of(world, bob)
    answer = ResponseInput(to="agent:alice", response=Accept(content={"slot": "tue"}))
    answered = await bob.send(answer, idempotency_key="answer")

    asked_bound = await bound_of(world, alice, "ask")
    answered_bound = await bound_of(world, bob, "answer")
    assert asked_bound is not None
    assert answered_bound is not None
    assert asked_bound.operation_id == asked.operation_id
    assert len(asked_bound.post_ids) == 1
    assert answered_bound == SendResult(operation_id=asked.operation_id, post_ids=answered.post_ids)


async def test_a_keyed_send_cut_after_its_post_certified_answers_its_post_once_resumed(world):
    alice, bob = await hosted(world, "alice", "bob")
    send = MessageInput(to="agent:bob", text="once")
    first = await alice.send(send, idempotency_key="k")
    await cut_by_a_restart(world, alice, "k")

    again = await alice.send(send, idempotency_key="k")

    assert again == first
    assert texts(await inbox_of(world, bob)) == ["once"]
    assert alice.certifier.open_intents == 0
    row = await world.store.send_row(alice.agent_id, "k")
    assert row is not None
    assert row.outcome is not None


async def test_a_keyed_send_cut_before_its_bind_runs_again_once_resumed(world):
    alice, bob = await hosted(world, "alice", "bob")
    send = MessageInput(to="agent:bob", text="late")
    await world.store.apply(
        [
            PutSend(
                agent_id=alice.agent_id,
                key="k",
                request=binding(send, FailureDelivery.RESULT),
                run_id="run-before",
                outcome=None,
                resumable=True,
            )
        ]
    )

    result = await alice.send(send, idempotency_key="k")

    [item] = await inbox_of(world, bob)
    assert isinstance(item, MulticastItem)
    assert result == SendResult(post_ids=(item.message.post_id,))
    assert await bound_of(world, alice, "k") == result


async def test_a_resumed_send_whose_post_does_not_certify_answers_delivery_pending(world):
    [alice] = await hosted(world, "alice", timeouts=QUICK)
    await world.register("carol")  # hosted elsewhere: it never votes here
    send = MessageInput(to="agent:carol", text="hello")
    pending = await send_failure(alice, send, idempotency_key="k")
    assert pending.send_reason is SendErrorReason.DELIVERY_PENDING
    await cut_by_a_restart(world, alice, "k")

    again = await send_failure(alice, send, idempotency_key="k")

    assert again.send_reason is SendErrorReason.DELIVERY_PENDING
    assert alice.certifier.open_intents == 1  # the same intent: nothing was bound again

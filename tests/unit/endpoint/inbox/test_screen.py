"""The inbox's firewall check (firewall.md §2.2) through `AgentInbox.prepare` and `commit`
over a `MemoryStore`, with a real `Firewall` built from specs: an item is stored with its
guidance (and any withheld answers) and given its sequence at commit, a `drop` consumes
the delivery instead, and `operationFailed` or an empty policy stores no guidance."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from harness_contract.codec import item_from_json, local_guidance_from_json
from harness_contract.errors import FirewallRefusal
from harness_contract.guidance import (
    CheckedGuidance,
    CollectiveGuidance,
    Expectation,
    ExpectationInstruction,
    GuidanceSubject,
    LocalGuidance,
    Withheld,
)
from harness_contract.ids import RandomId, collective_id
from harness_contract.jsonvalue import canonical_json, parse_json
from harness_contract.values import (
    Answered,
    CollectiveOp,
    CollectiveResultItem,
    DirectMessage,
    GroupMessage,
    InboundItem,
    MemberResult,
    MulticastItem,
    OperationFailedItem,
    TextPart,
)

from gateway.endpoint.inbox import AgentInbox
from gateway.endpoint.inbox.screen import InboxScreen
from gateway.firewall import CheckInput, ExternalCaller, Firewall, Judgement
from gateway.firewall.model import Allow
from gateway.firewall.spec import (
    ContentPatternSpec,
    Directions,
    ExternalSpec,
    FirewallSpec,
    MiddlewareSpec,
    OnError,
    PatternAction,
    PatternRule,
    TurnGuidanceSpec,
)
from gateway.store import MemoryStore
from gateway.store.records import (
    DeliveryState,
    InboxRow,
    PutInboxItem,
    SetDeliveryState,
    Write,
)
from tests.unit.endpoint.inbox.support import AGENT, within_bound

AGENT_NAME = "bob"
"""The hosted agent whose inbox this is."""
POST_A = "pst_" + "A" * 43
POST_B = "pst_" + "B" * 43
OPERATION_ID = collective_id("agent:bob", "N" * 43)

INBOUND = ContentPatternSpec(
    id="inbound",
    agents=("*",),
    direction=Directions.IN,
    rules=(
        PatternRule(
            id="secret", pattern="secret", action=PatternAction.WITHHOLD, instruction="no secrets"
        ),
        PatternRule(id="spam", pattern="spam", action=PatternAction.DROP, instruction="no spam"),
    ),
)
TURNS = TurnGuidanceSpec(id="turns", agents=("*",))


def firewall_spec(*middlewares: MiddlewareSpec) -> FirewallSpec:
    return FirewallSpec(
        source=Path("firewall.yaml"), content_logging=False, middlewares=middlewares
    )


def no_externals(spec: ExternalSpec) -> ExternalCaller:
    raise AssertionError(f"no external middleware is configured, yet {spec.id} was built")


class RecordingStore(MemoryStore):
    """A `MemoryStore` that remembers every transaction it applied."""

    def __init__(self) -> None:
        super().__init__()
        self.applied: list[list[Write]] = []

    async def apply(self, writes: Sequence[Write]) -> None:
        self.applied.append(list(writes))
        await super().apply(writes)


def make_inbox(
    spec: FirewallSpec | None = None,
    *,
    caller_factory: Callable[[ExternalSpec], ExternalCaller] = no_externals,
    requester: str | None = None,
) -> tuple[AgentInbox, RecordingStore]:
    """Bob's inbox, screened by `spec` (by default: content patterns in, turn guidance);
    `requester` asked every collective result's question (None: bob)."""
    store = RecordingStore()
    inbox = AgentInbox(agent_id=AGENT, store=store, next_seq=1, window=4)
    firewall = Firewall(
        firewall_spec(INBOUND, TURNS) if spec is None else spec, caller_factory=caller_factory
    )
    inbox.screen = InboxScreen(firewall, agent=AGENT_NAME, requester_of=lambda _: requester)
    return inbox, store


def direct(text: str, post_id: str = POST_A) -> MulticastItem:
    return MulticastItem(
        message=DirectMessage(
            post_id=post_id,
            address="agent:carol",
            sender="agent:carol",
            content=(TextPart(text=text),),
        )
    )


def group(text: str, post_id: str = POST_B) -> MulticastItem:
    return MulticastItem(
        message=GroupMessage(
            post_id=post_id,
            address="group:bob,carol,dave",
            sender="agent:carol",
            members=("agent:bob", "agent:carol", "agent:dave"),
            content=(TextPart(text=text), TextPart(text="second part")),
        )
    )


def collective_result(**answers: str) -> CollectiveResultItem:
    return CollectiveResultItem(
        op=CollectiveOp.ALL_GATHER,
        id=OPERATION_ID,
        to="group:bob,carol,dave",
        question="which day suits you?",
        outcomes=tuple(
            MemberResult(member=f"agent:{name}", outcome=Answered(content={"day": day}))
            for name, day in answers.items()
        ),
    )


def guidance_of(row: InboxRow) -> LocalGuidance:
    assert row.guidance is not None
    return local_guidance_from_json(parse_json(row.guidance))


def item_of(row: InboxRow) -> InboundItem:
    return item_from_json(parse_json(row.item))


async def rows(store: MemoryStore) -> list[InboxRow]:
    return await store.unread(AGENT, 0, 100)


# --- messages ---------------------------------------------------------------------------


async def test_a_multicast_is_stored_with_its_checked_guidance_and_sequenced_at_commit():
    inbox, store = make_inbox()
    token, write = inbox.prepare(direct("hello bob"))
    assert write.seq == 0
    assert write.guidance is None
    assert await inbox.commit([write]) == frozenset()
    [row] = await rows(store)
    assert (row.seq, row.token) == (1, token)
    assert item_of(row) == direct("hello bob")
    guidance = guidance_of(row)
    assert isinstance(guidance, CheckedGuidance)
    assert RandomId.CHECK.is_valid(guidance.check_id)
    assert guidance.subjects == (
        GuidanceSubject(
            id=POST_A, sender="agent:carol", recipients=("agent:bob",), text="hello bob"
        ),
    )
    assert guidance.instructions == (
        ExpectationInstruction(
            middleware_id="turns",
            rule_id="direct-message",
            expectation=Expectation.PERMITTED,
            subjects=(POST_A,),
            instruction="a direct message to you; you may reply",
        ),
    )


async def test_a_group_message_is_checked_as_its_joined_text_to_the_other_members():
    inbox, store = make_inbox()
    _, write = inbox.prepare(group("a secret plan"))
    await inbox.commit([write])
    [row] = await rows(store)
    # Never rewritten: the item is stored as it came, marked for the runtime.
    assert item_of(row) == group("a secret plan")
    guidance = guidance_of(row)
    assert isinstance(guidance, CheckedGuidance)
    [subject] = guidance.subjects
    assert subject.text == "a secret plan\nsecond part"
    assert subject.recipients == ("agent:bob", "agent:dave")
    assert [(i.middleware_id, i.rule_id) for i in guidance.instructions] == [
        ("inbound", "secret"),
        ("turns", "group-unnamed"),
    ]
    marked = guidance.instructions[0]
    assert isinstance(marked, ExpectationInstruction)
    assert marked.expectation is Expectation.NONE
    assert marked.instruction == "withheld by the local firewall (content-blocked): no secrets"


async def test_a_write_another_inbox_prepared_is_checked_from_its_bytes():
    inbox, store = make_inbox()
    unscreened = AgentInbox(agent_id=AGENT, store=MemoryStore(), next_seq=1, window=4)
    token, write = unscreened.prepare(direct("hello from elsewhere"))
    assert inbox.screen is not None
    screened = await within_bound(inbox.screen.screen([write]))
    assert screened.dropped == frozenset()
    [checked] = screened.writes
    assert isinstance(checked, PutInboxItem)
    assert checked.item == write.item
    assert checked.guidance is not None
    guidance = local_guidance_from_json(parse_json(checked.guidance))
    assert isinstance(guidance, CheckedGuidance)
    assert [subject.text for subject in guidance.subjects] == ["hello from elsewhere"]
    assert [i.rule_id for i in guidance.instructions] == ["direct-message"]

    # Committed through the screened inbox, the same write is stored checked, in sequence.
    await inbox.commit([write])
    [row] = await rows(store)
    assert (row.seq, row.token) == (1, token)
    stored = guidance_of(row)
    assert isinstance(stored, CheckedGuidance)
    assert stored.subjects == guidance.subjects
    assert stored.check_id != guidance.check_id


async def test_a_dropped_item_is_not_stored_and_its_delivery_is_consumed():
    inbox, store = make_inbox()
    kept_token, kept = inbox.prepare(direct("hello", post_id=POST_B))
    token, write = inbox.prepare(direct("buy spam now"), token=RandomId.DELIVERY.mint())
    classified = SetDeliveryState(agent_id=AGENT, token=token, state=DeliveryState.CLASSIFIED)
    kept_state = SetDeliveryState(agent_id=AGENT, token=kept_token, state=DeliveryState.CLASSIFIED)
    dropped = await inbox.commit([classified, write, kept_state, kept])
    assert dropped == frozenset({token})
    [applied] = store.applied
    assert applied[0] == SetDeliveryState(agent_id=AGENT, token=token, state=DeliveryState.CONSUMED)
    assert applied[1] == kept_state
    assert len(applied) == 3
    assert isinstance(applied[2], PutInboxItem)
    assert applied[2].token == kept_token
    # The dropped item took no sequence.
    assert [(row.seq, row.token) for row in await rows(store)] == [(1, kept_token)]


async def test_an_operation_failed_item_is_stored_without_guidance():
    inbox, store = make_inbox()
    failed = OperationFailedItem(
        id=OPERATION_ID, to="group:bob,carol,dave", error="a secret error text"
    )
    token, write = inbox.prepare(failed)
    await inbox.commit([write])
    [row] = await rows(store)
    assert (row.seq, row.token, row.guidance) == (1, token, None)
    assert item_of(row) == failed


async def test_an_empty_policy_stores_items_without_guidance():
    inbox, store = make_inbox(firewall_spec())
    assert inbox.screen is not None
    assert not inbox.screen.active
    _, write = inbox.prepare(direct("a secret, buy spam"))
    assert await inbox.commit([write]) == frozenset()
    [row] = await rows(store)
    assert row.guidance is None
    assert item_of(row) == direct("a secret, buy spam")


# --- collective results -----------------------------------------------------------------


async def test_a_withheld_answer_becomes_the_members_withheld_outcome():
    inbox, store = make_inbox()
    item = collective_result(carol="monday", dave="the secret tuesday")
    _, write = inbox.prepare(item)
    await inbox.commit([write])
    [row] = await rows(store)
    guidance = guidance_of(row)
    assert isinstance(guidance, CollectiveGuidance)

    assert guidance.question is not None
    [question] = guidance.question.subjects
    assert question == GuidanceSubject(
        id=OPERATION_ID,
        sender="agent:bob",
        recipients=("agent:carol", "agent:dave"),
        text="which day suits you?",
    )

    assert [answer.member for answer in guidance.answers] == ["agent:carol", "agent:dave"]
    carol, dave = guidance.answers
    assert [subject.text for subject in carol.guidance.subjects] == [
        canonical_json({"day": "monday"}).decode()
    ]
    assert [subject.text for subject in dave.guidance.subjects] == [""]
    # Each text is its own check.
    check_ids = {guidance.question.check_id, carol.guidance.check_id, dave.guidance.check_id}
    assert len(check_ids) == 3

    withheld = Withheld(check_id=dave.guidance.check_id, reason=FirewallRefusal.CONTENT_BLOCKED)
    rewritten = dataclasses.replace(
        item,
        outcomes=(
            MemberResult(member="agent:carol", outcome=Answered(content={"day": "monday"})),
            MemberResult(member="agent:dave", outcome=withheld),
        ),
    )
    assert item_of(row) == rewritten
    assert b"tuesday" not in row.item


async def test_a_result_of_a_question_another_agent_asked_is_checked_from_its_requester():
    inbox, store = make_inbox(requester="alice")
    item = dataclasses.replace(
        collective_result(bob="monday", carol="friday"),
        id=collective_id("agent:alice", "M" * 43),
        to="group:alice,bob,carol",
    )
    _, write = inbox.prepare(item)
    await inbox.commit([write])
    [row] = await rows(store)
    guidance = guidance_of(row)
    assert isinstance(guidance, CollectiveGuidance)
    assert guidance.question is not None
    assert guidance.question.subjects[0].sender == "agent:alice"
    assert item_of(row) == item


# --- sequences --------------------------------------------------------------------------


async def test_sequences_follow_commit_order_not_prepare_order():
    inbox, store = make_inbox()
    token_a, a = inbox.prepare(direct("first prepared", post_id=POST_A))
    token_b, b = inbox.prepare(direct("second prepared", post_id=POST_B))
    await inbox.commit([b])
    await inbox.commit([a])
    stored = await rows(store)
    assert [(row.seq, row.token) for row in stored] == [(1, token_b), (2, token_a)]
    assert all(row.guidance is not None for row in stored)


class GatedCaller:
    """An external middleware that holds back checks of text containing `slow` until its
    gate opens, and admits everything."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.held = asyncio.Event()

    async def check(self, check: CheckInput, *, timeout: float) -> Judgement:  # noqa: ASYNC109 - the port's signature
        if any("slow" in subject.subject.text for subject in check.subjects):
            self.held.set()
            await self.gate.wait()
        return Allow()

    async def close(self) -> None:
        return None


async def test_a_commit_waiting_on_its_check_takes_its_sequence_after_a_later_commit():
    caller = GatedCaller()
    classifier = ExternalSpec(
        id="classifier",
        agents=("*",),
        direction=Directions.IN,
        target="127.0.0.1:7790",
        tls=False,
        tls_ca=None,
        deadline_ms=30_000,
        on_error=OnError.REFUSE,
    )
    inbox, store = make_inbox(firewall_spec(classifier, TURNS), caller_factory=lambda spec: caller)
    token_a, a = inbox.prepare(direct("a slow one", post_id=POST_A))
    token_b, b = inbox.prepare(direct("a quick one", post_id=POST_B))
    commit_a = asyncio.create_task(inbox.commit([a]))
    await within_bound(caller.held.wait())
    await within_bound(inbox.commit([b]))
    assert [(row.seq, row.token) for row in await rows(store)] == [(1, token_b)]
    assert not commit_a.done()
    caller.gate.set()
    await within_bound(commit_a)
    assert [(row.seq, row.token) for row in await rows(store)] == [(1, token_b), (2, token_a)]

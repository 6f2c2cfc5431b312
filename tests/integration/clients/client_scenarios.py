"""The bodies of the shared client scenarios (`clients/scenarios.txt`), for the Python client.

`test_client_scenarios.py` runs each against one gateway, `tests/integration/cluster/
test_cluster_scenarios.py` against a cluster: `scenario_<id>` here is `test_<id>` there.

Every Harness Gateway client passes the same list against a real gateway; this module is
the Python side, `clients/node/test/scenarios.test.ts` the TypeScript one, and
`tests/unit/test_client_scenarios_listed.py` keeps both equal to the list: one
`test_<id with - replaced by _>` per scenario, nothing else named `test_*`.

Each test starts a real gateway in this process on port 0 and talks to it only through the
public `harness_client` API (the agents are registered over `ManagementService`, as an
operator would). Every wait is bounded by `BOUND`; "never arrives" is proved by a later
marker arriving first, never by waiting and hoping.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass
from typing import Final, TypeAlias

import harness_client
import pytest
from harness_client import (
    Accept,
    AgentStatus,
    Answered,
    AnswerFieldIssue,
    AnswerFieldReason,
    AnswerInvalid,
    AskOperation,
    AuthenticationError,
    CollectiveError,
    CollectiveErrorKind,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    ConnectError,
    ConnectErrorReason,
    Decline,
    Declined,
    DeliveryAcknowledgeError,
    DeliveryAcknowledgeErrorReason,
    DirectMessage,
    Endpoint,
    GroupMessage,
    IdempotencyConflictError,
    InboundDelivery,
    InboundItem,
    InboundMessage,
    JsonValue,
    ListenError,
    ListenErrorReason,
    ManagementClient,
    MemberResult,
    MessageInput,
    MessageTextError,
    MessageTextOperation,
    MulticastItem,
    RequestNone,
    ResponseInput,
    SchemaInvalid,
    SendAbsent,
    SendError,
    SendErrorReason,
    SendReturned,
    TextPart,
)

from gateway.testing import RunningGateway
from gateway.testing_servers import free_port
from tests.support import eventually

BOUND: Final = 20.0
"""Seconds any single wait may take before the test fails."""

QUESTION: Final = "Which day works for the review?"
SCHEMA: Final[dict[str, JsonValue]] = {
    "type": "object",
    "properties": {"slot": {"type": "string", "enum": ["mon", "tue"]}},
    "required": ["slot"],
}
"""The form every gather here asks for: one closed choice."""

Stream: TypeAlias = AsyncGenerator[InboundDelivery, None]


# --- the setting -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """One real gateway, an operator's management client, and what the test opened on it
    (closed, newest first, before the gateway stops)."""

    gateway: RunningGateway
    management: ManagementClient
    stack: AsyncExitStack

    @property
    def address(self) -> str:
        """Where the test's clients connect (a cluster's run of these scenarios,
        `tests/integration/cluster/test_cluster_scenarios.py`, names its Service here)."""
        return self.gateway.address

    async def agent(self, name: str) -> Endpoint:
        """Register `name` and connect as it with the token registration returned."""
        registered = await self.management.register_agent(name)
        return await self.stack.enter_async_context(
            await harness_client.connect(self.address, token=registered.token)
        )

    async def stream(self, endpoint: Endpoint) -> Stream:
        """A `messages()` stream, closed at the end of the test unless closed before."""
        return await self.stack.enter_async_context(aclosing(endpoint.messages()))

    async def status_until(self, name: str, check: Callable[[AgentStatus], bool]) -> AgentStatus:
        """The agent's status once `check` accepts it, as the operator reads it."""
        return await eventually(lambda: self.management.agent_status(name), check, within=BOUND)


async def next_delivery(stream: Stream) -> InboundDelivery:
    return await asyncio.wait_for(anext(stream), BOUND)


async def next_item(stream: Stream) -> InboundItem:
    """The next item, acknowledged (so no later stream sees it again)."""
    delivery = await next_delivery(stream)
    await delivery.acknowledge()
    return delivery.item


def message_of(item: InboundItem) -> InboundMessage:
    match item:
        case MulticastItem(message=message):
            return message
        case _:
            raise AssertionError(f"expected a multicast item, got {item!r}")


def text_of(item: InboundItem) -> str:
    match message_of(item).content:
        case (TextPart(text=text),):
            return text
        case content:
            raise AssertionError(f"expected one text part, got {content!r}")


def gather(to: str, op: CollectiveOp = CollectiveOp.GATHER) -> MessageInput:
    return MessageInput(
        to=to,
        text=QUESTION,
        collective=AskOperation(op=op, deadline=120, requested_schema=SCHEMA),
    )


def request_of(item: InboundItem) -> CollectiveRequestItem:
    assert isinstance(item, CollectiveRequestItem), f"expected a request, got {item!r}"
    return item


# --- sends ---------------------------------------------------------------------------------


async def scenario_direct_send(setting: Setting) -> None:
    alice = await setting.agent("alice")
    bob = await setting.agent("bob")
    alice_stream, bob_stream = await setting.stream(alice), await setting.stream(bob)

    result = await alice.send(MessageInput(to="agent:bob", text="hello bob"))

    assert result.operation_id is None
    message = message_of(await next_item(bob_stream))
    records, _ = await setting.management.history("bob", "agent:alice")
    assert [record.post_id for record in records] == [message.post_id]
    assert result.post_ids == (message.post_id,)
    assert message == DirectMessage(
        post_id=records[0].post_id,
        address="agent:alice",
        sender="agent:alice",
        content=(TextPart(text="hello bob"),),
    )
    # The sender is not a recipient: the first thing alice receives is bob's later reply.
    await bob.send(MessageInput(to="agent:alice", text="hello alice"))
    assert text_of(await next_item(alice_stream)) == "hello alice"


async def scenario_group_send(setting: Setting) -> None:
    alice, bob, carol = [await setting.agent(name) for name in ("alice", "bob", "carol")]
    streams = [await setting.stream(endpoint) for endpoint in (alice, bob, carol)]

    # Out of order and without the sender: the gateway puts the address in canonical form.
    sent = await alice.send(MessageInput(to="group:carol,bob", text="hello both"))

    received = [message_of(await next_item(stream)) for stream in streams[1:]]
    records, _ = await setting.management.history("bob", "group:alice,bob,carol")
    assert [record.post_id for record in records] == [received[0].post_id]
    assert sent.post_ids == (received[0].post_id,)
    expected = GroupMessage(
        post_id=records[0].post_id,
        address="group:alice,bob,carol",
        sender="agent:alice",
        members=("agent:alice", "agent:bob", "agent:carol"),
        content=(TextPart(text="hello both"),),
    )
    assert received == [expected, expected]
    await bob.send(MessageInput(to="agent:alice", text="not the group post"))
    assert text_of(await next_item(streams[0])) == "not the group post"


# --- the stream ----------------------------------------------------------------------------


async def scenario_stream_and_acknowledge(setting: Setting) -> None:
    alice = await setting.agent("alice")
    bob = await setting.agent("bob")
    texts = ["first", "second", "third"]
    for text in texts:
        await alice.send(MessageInput(to="agent:bob", text=text))
    await setting.status_until("bob", lambda status: status.backlog == 3)

    stream = await setting.stream(bob)
    deliveries = [await next_delivery(stream) for _ in texts]

    assert [text_of(delivery.item) for delivery in deliveries] == texts
    assert len({delivery.token for delivery in deliveries}) == 3
    for delivery in deliveries:
        await delivery.acknowledge()
    await setting.status_until("bob", lambda status: status.backlog == 0)
    # Acknowledging a retired token again is accepted too.
    assert await bob.acknowledge([delivery.token for delivery in deliveries]) == [None] * 3


async def scenario_reconnect_replay(setting: Setting) -> None:
    alice = await setting.agent("alice")
    bob = await setting.agent("bob")
    await alice.send(MessageInput(to="agent:bob", text="item 1"))
    await alice.send(MessageInput(to="agent:bob", text="item 2"))

    first = await setting.stream(bob)
    item_1, item_2 = await next_delivery(first), await next_delivery(first)
    assert [text_of(item_1.item), text_of(item_2.item)] == ["item 1", "item 2"]
    await item_1.acknowledge()
    await setting.status_until("bob", lambda status: status.backlog == 1)
    await first.aclose()
    await setting.status_until("bob", lambda status: not status.stream_attached)

    second = await setting.stream(bob)
    replayed = await next_delivery(second)
    # Item 1 was acknowledged: the reopened stream starts at item 2, under its token.
    assert replayed.token == item_2.token
    assert replayed.item == item_2.item
    await alice.send(MessageInput(to="agent:bob", text="after the reconnect"))
    after = await next_delivery(second)
    assert text_of(after.item) == "after the reconnect"
    assert after.token not in {item_1.token, item_2.token}


# --- collectives ---------------------------------------------------------------------------


async def scenario_gather_answers(setting: Setting) -> None:
    alice, bob, carol = [await setting.agent(name) for name in ("alice", "bob", "carol")]
    alice_stream, bob_stream, carol_stream = [
        await setting.stream(endpoint) for endpoint in (alice, bob, carol)
    ]

    asked = await alice.send(gather("group:alice,bob,carol"))

    assert asked.operation_id is not None
    requests = [request_of(await next_item(stream)) for stream in (bob_stream, carol_stream)]
    for request in requests:
        assert (request.op, request.id, request.sender, request.to, request.question) == (
            CollectiveOp.GATHER,
            asked.operation_id,
            "agent:alice",
            "agent:alice",
            QUESTION,
        )
    bob_answer = await bob.send(
        ResponseInput(to=requests[0].to, response=Accept(content={"slot": "mon"}))
    )
    carol_answer = await carol.send(ResponseInput(to=requests[1].to, response=Decline()))
    assert bob_answer.operation_id == carol_answer.operation_id == asked.operation_id

    assert await next_item(alice_stream) == CollectiveResultItem(
        op=CollectiveOp.GATHER,
        id=asked.operation_id,
        to="group:alice,bob,carol",
        question=QUESTION,
        outcomes=(
            MemberResult(member="agent:bob", outcome=Answered(content={"slot": "mon"})),
            MemberResult(member="agent:carol", outcome=Declined()),
        ),
    )


async def scenario_all_gather_answers(setting: Setting) -> None:
    group = "group:alice,bob,carol"
    alice, bob, carol = [await setting.agent(name) for name in ("alice", "bob", "carol")]
    streams = [await setting.stream(endpoint) for endpoint in (alice, bob, carol)]

    asked = await alice.send(gather(group, CollectiveOp.ALL_GATHER))

    assert asked.operation_id is not None
    requests = [request_of(await next_item(stream)) for stream in streams[1:]]
    assert requests[0] == requests[1]
    assert (requests[0].op, requests[0].id, requests[0].to) == (
        CollectiveOp.ALL_GATHER,
        asked.operation_id,
        group,
    )
    await bob.send(ResponseInput(to=group, response=Accept(content={"slot": "tue"})))
    await carol.send(ResponseInput(to=group, response=Accept(content={"slot": "mon"})))

    expected = CollectiveResultItem(
        op=CollectiveOp.ALL_GATHER,
        id=asked.operation_id,
        to=group,
        question=QUESTION,
        outcomes=(
            MemberResult(member="agent:bob", outcome=Answered(content={"slot": "tue"})),
            MemberResult(member="agent:carol", outcome=Answered(content={"slot": "mon"})),
        ),
    )
    # The asker and every member receive the same result (the answers are never items).
    assert [await next_item(stream) for stream in streams] == [expected] * 3


# --- closed errors -------------------------------------------------------------------------


async def scenario_send_error_reasons(setting: Setting) -> None:
    alice = await setting.agent("alice")
    await setting.agent("bob")
    cases = [
        (
            MessageInput(to="agent:nobody", text="hello"),
            SendErrorReason.UNKNOWN_AGENT,
            "send failed: agent:nobody is not registered with the gateway",
        ),
        (
            MessageInput(to="bob", text="hello"),
            SendErrorReason.INVALID_ADDRESS,
            "send failed: the address must be agent:<name> or group:<name>,<name>,...",
        ),
        (
            MessageInput(to="agent:bob", text="x" * 40_000),
            SendErrorReason.CONTENT_INVALID,
            "send failed: the message is 40,112 bytes as canonical JSON; the limit is 32,768 bytes",
        ),
    ]
    for send_input, reason, message in cases:
        with pytest.raises(SendError) as raised:
            await alice.send(send_input)
        assert (raised.value.reason, raised.value.message) == (reason, message)
    # Nothing was sent: bob's inbox is empty.
    assert (await setting.management.agent_status("bob")).backlog == 0


async def scenario_collective_error_kinds(setting: Setting) -> None:
    alice = await setting.agent("alice")
    bob = await setting.agent("bob")
    bob_stream = await setting.stream(bob)

    with pytest.raises(CollectiveError) as none_open:
        await bob.send(ResponseInput(to="agent:alice", response=Decline()))
    assert none_open.value.kind is CollectiveErrorKind.REQUEST_NONE
    assert none_open.value.failure == RequestNone()

    bad_form = MessageInput(
        to="agent:bob",
        text=QUESTION,
        collective=AskOperation(
            op=CollectiveOp.GATHER, deadline=60, requested_schema={"type": "array"}
        ),
    )
    with pytest.raises(CollectiveError) as schema:
        await alice.send(bad_form)
    assert schema.value.kind is CollectiveErrorKind.SCHEMA_INVALID
    assert schema.value.failure == SchemaInvalid(
        detail='type: expected "object"; properties: expected an object'
    )

    asked = await alice.send(gather("agent:bob"))
    request = request_of(await next_item(bob_stream))
    with pytest.raises(CollectiveError) as answer:
        await bob.send(ResponseInput(to=request.to, response=Accept(content={"slot": "sun"})))
    assert answer.value.kind is CollectiveErrorKind.ANSWER_INVALID
    assert answer.value.id == asked.operation_id
    assert answer.value.failure == AnswerInvalid(
        fields=(
            AnswerFieldIssue(
                field="slot",
                reason=AnswerFieldReason.INVALID,
                detail="enum: must be one of the allowed values",
            ),
        )
    )
    # The request stays open after an invalid answer.
    answered = await bob.send(
        ResponseInput(to=request.to, response=Accept(content={"slot": "tue"}))
    )
    assert answered.operation_id == asked.operation_id


async def scenario_own_question(setting: Setting) -> None:
    alice = await setting.agent("alice")
    bob = await setting.agent("bob")
    carol = await setting.agent("carol")
    bob_stream = await setting.stream(bob)
    asked = await alice.send(gather("group:alice,bob,carol"))
    request = request_of(await next_item(bob_stream))

    # The asker answers in bob's conversation with it, where its own question is open.
    with pytest.raises(CollectiveError) as own:
        await alice.send(ResponseInput(to="agent:bob", response=Decline()))
    assert own.value.kind is CollectiveErrorKind.REQUEST_NONE
    assert own.value.failure == RequestNone(own_question=True)
    assert own.value.message == (
        "reply failed: the question open in this conversation is your own; its members "
        "answer it, and their answers come to you as its result"
    )
    # Where alice asked nothing, no question is open, as before.
    with pytest.raises(CollectiveError) as none_open:
        await carol.send(ResponseInput(to="agent:bob", response=Decline()))
    assert none_open.value.failure == RequestNone()
    # The refusal changed nothing: bob still answers.
    answered = await bob.send(ResponseInput(to=request.to, response=Decline()))
    assert answered.operation_id == asked.operation_id


async def scenario_oversized_message(setting: Setting) -> None:
    alice = await setting.agent("alice")
    await setting.agent("bob")
    # Over the 1 MiB the gateway reads in one call: refused before it is sent.
    with pytest.raises(SendError) as raised:
        await alice.send(MessageInput(to="agent:bob", text="x" * 2_000_000))
    assert (raised.value.reason, raised.value.message) == (
        SendErrorReason.CONTENT_INVALID,
        "send failed: the message is 2,000,025 bytes, more than the gateway reads in one "
        "call; the limit is 32,768 bytes as canonical JSON",
    )
    # Its text can be no send either: reading it as message text fails the same way.
    with pytest.raises(SendError) as parsed:
        await alice.parse_message_text("agent:bob", "x" * 2_000_000)
    assert (parsed.value.reason, parsed.value.message) == (
        SendErrorReason.CONTENT_INVALID,
        "send failed: the message is 2,000,015 bytes, more than the gateway reads in one "
        "call; the limit is 32,768 bytes as canonical JSON",
    )
    assert (await setting.management.agent_status("bob")).backlog == 0


async def scenario_listen_error_reason(setting: Setting) -> None:
    alice = await setting.agent("alice")
    bob = await setting.agent("bob")
    await alice.send(MessageInput(to="agent:bob", text="the first stream is open"))
    first = await setting.stream(bob)
    assert text_of(await next_item(first)) == "the first stream is open"

    with pytest.raises(ListenError) as raised:
        await next_delivery(await setting.stream(bob))

    assert raised.value.reason is ListenErrorReason.ALREADY_LISTENING
    # The refused stream took nothing from the open one.
    await alice.send(MessageInput(to="agent:bob", text="still listening"))
    assert text_of(await next_item(first)) == "still listening"


async def scenario_acknowledge_error_reason(setting: Setting) -> None:
    alice = await setting.agent("alice")
    bob = await setting.agent("bob")
    await alice.send(MessageInput(to="agent:bob", text="to acknowledge"))
    delivery = await next_delivery(await setting.stream(bob))

    results = await bob.acknowledge([delivery.token, "dlv_never_issued"])

    assert results[0] is None
    assert isinstance(results[1], DeliveryAcknowledgeError)
    assert results[1].reason is DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY
    await setting.status_until("bob", lambda status: status.backlog == 0)


async def scenario_message_text_error(setting: Setting) -> None:
    alice = await setting.agent("alice")
    # Plain text, even JSON-looking prose, is a message; a stated operation must fit its shape.
    assert await alice.parse_message_text("agent:bob", '{"note": 1}') == MessageInput(
        to="agent:bob", text='{"note": 1}'
    )
    cases = [
        (
            '{"gather": 1}',
            MessageTextOperation.GATHER,
            "gather: expected a string, actual 1; deadline: is missing; "
            "requestedSchema: is missing",
        ),
        (
            '{"action": "maybe"}',
            MessageTextOperation.ANSWER,
            'action: expected "accept" or "decline", actual "maybe"',
        ),
    ]
    for text, operation, detail in cases:
        with pytest.raises(MessageTextError) as raised:
            await alice.parse_message_text("agent:bob", text)
        assert (raised.value.operation, raised.value.detail) == (operation, detail)
        assert raised.value.message == f"{operation.value} not sent: {detail}"


async def scenario_authentication_error(setting: Setting) -> None:
    # A token the gateway never issued: `connect` checks it and names the failure and the
    # address; the gateway's refusal is its cause.
    address = setting.address
    with pytest.raises(ConnectError) as refused:
        await harness_client.connect(address, token="hat_never_issued")
    assert refused.value.reason is ConnectErrorReason.AUTHENTICATION_FAILED
    assert (refused.value.address, refused.value.message) == (
        address,
        f"connect failed: the gateway at {address} does not know this agent token",
    )
    cause = refused.value.__cause__
    assert isinstance(cause, AuthenticationError)
    assert (cause.reason, cause.message) == (
        "unknown",
        "authentication failed: the token is not known to this gateway",
    )

    # A token revoked while its endpoint is open: the next call fails with the reason.
    alice = await setting.agent("alice")
    await setting.management.revoke_token("alice")
    with pytest.raises(AuthenticationError) as revoked:
        await alice.send(MessageInput(to="agent:alice", text="after the revoke"))
    assert (revoked.value.reason, revoked.value.message) == (
        "revoked",
        "authentication failed: the token was revoked",
    )


async def scenario_connect_unreachable(setting: Setting) -> None:
    # A port nothing listens on: the failure names the address and the cause.
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(ConnectError) as unreachable:
        await harness_client.connect(address, token="hat_any", connect_timeout=2.0)
    assert unreachable.value.reason is ConnectErrorReason.TRANSPORT_FAILED
    assert (unreachable.value.address, unreachable.value.message) == (
        address,
        f"connect failed: cannot reach {address}: connection refused",
    )


# --- idempotency ---------------------------------------------------------------------------


async def scenario_idempotent_send(setting: Setting) -> None:
    alice = await setting.agent("alice")
    bob = await setting.agent("bob")
    bob_stream = await setting.stream(bob)
    question = gather("agent:bob")

    first = await alice.send(question, idempotency_key="review-day")
    again = await alice.send(question, idempotency_key="review-day")

    assert first.operation_id is not None
    assert again == first
    assert request_of(await next_item(bob_stream)).id == first.operation_id
    # One send ran: the next item after the one request is a later marker.
    await alice.send(MessageInput(to="agent:bob", text="marker"))
    assert text_of(await next_item(bob_stream)) == "marker"

    other = MessageInput(to="agent:bob", text="another send under the same key")
    with pytest.raises(IdempotencyConflictError) as conflict:
        await alice.send(other, idempotency_key="review-day")
    assert (conflict.value.reason, conflict.value.key) == ("idempotency-conflict", "review-day")


async def scenario_read_send(setting: Setting) -> None:
    alice = await setting.agent("alice")
    bob = await setting.agent("bob")
    sent = MessageInput(to="agent:bob", text="kept under a key")
    refused = MessageInput(to="agent:nobody", text="refused under a key")

    result = await alice.send(sent, idempotency_key="sent")
    with pytest.raises(SendError):
        await alice.send(refused, idempotency_key="refused")

    delivered = message_of(await next_item(await setting.stream(bob)))
    records, _ = await setting.management.history("bob", "agent:alice")
    assert [record.post_id for record in records] == [delivered.post_id]
    assert await alice.read_send("sent") == SendReturned(input=sent, outcome=result)
    kept_failure = await alice.read_send("refused")
    assert isinstance(kept_failure, SendReturned)
    assert kept_failure.input == refused
    assert isinstance(kept_failure.outcome, SendError)
    assert kept_failure.outcome.reason is SendErrorReason.UNKNOWN_AGENT
    assert await alice.read_send("never-used") == SendAbsent()

"""A small in-memory gateway core for the RPC layer's integration tests.

Endpoints keep real inboxes (`AgentInbox` over `MemoryStore`), so streams, the window,
replay and acknowledgments behave as the core's; sends deliver a direct multicast to a
registered recipient, or raise what a test scripted for the address.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness_contract.addresses import is_agent_name
from harness_contract.errors import (
    CollectiveError,
    FirewallSendError,
    HarnessError,
    IdempotencyConflictError,
    SendError,
    SendErrorReason,
    SendFailure,
)
from harness_contract.ids import RandomId
from harness_contract.values import (
    Content,
    DirectMessage,
    FailureDelivery,
    InboundItem,
    MessageInput,
    MulticastItem,
    SendInput,
    SendResult,
    TextPart,
)

from gateway.endpoint.api import (
    AgentStatus,
    AuthFailure,
    ConversationRecord,
    ConversationSummary,
    GatewayCore,
    GatewayState,
    GatewayStatus,
    ManagementError,
    ManagementErrorReason,
    RegisteredAgent,
    SendAbsent,
    SendReturned,
    SendState,
)
from gateway.endpoint.inbox import AcknowledgeResult, AgentInbox, MessageStream, StreamEndReason
from gateway.store.memory import MemoryStore

ADMIN_TOKEN = "admin-token-" + "a" * 40


@dataclass
class SendCall:
    """What one `send` was called with."""

    send_input: SendInput
    failure_delivery: FailureDelivery
    idempotency_key: str | None
    deadline: float | None


@dataclass
class _Kept:
    send_input: SendInput
    failure_delivery: FailureDelivery
    outcome: SendResult | SendFailure


class FakeEndpoint:
    """One hosted agent."""

    def __init__(self, core: FakeCore, name: str, agent_id: str) -> None:
        self._core = core
        self.agent_name = name
        self.agent_id = agent_id
        self.inbox = AgentInbox(agent_id=agent_id, store=core.store, next_seq=1, window=core.window)
        self.calls: list[SendCall] = []
        self._kept: dict[str, _Kept] = {}

    async def send(
        self,
        send_input: SendInput,
        *,
        failure_delivery: FailureDelivery = FailureDelivery.RESULT,
        idempotency_key: str | None = None,
        deadline: float | None = None,
    ) -> SendResult:
        self.calls.append(SendCall(send_input, failure_delivery, idempotency_key, deadline))
        if idempotency_key is not None and idempotency_key in self._kept:
            kept = self._kept[idempotency_key]
            if (kept.send_input, kept.failure_delivery) != (send_input, failure_delivery):
                raise IdempotencyConflictError(idempotency_key)
            if isinstance(kept.outcome, HarnessError):
                raise kept.outcome
            return kept.outcome
        try:
            outcome: SendResult | SendFailure = await self._run(send_input)
        except (SendError, CollectiveError, FirewallSendError) as error:
            outcome = error
        if idempotency_key is not None:
            self._kept[idempotency_key] = _Kept(send_input, failure_delivery, outcome)
        if isinstance(outcome, HarnessError):
            raise outcome
        return outcome

    async def _run(self, send_input: SendInput) -> SendResult:
        scripted = self._core.scripted.get(send_input.to)
        if scripted is not None:
            if isinstance(scripted, SendResult):
                return scripted
            raise scripted
        name = send_input.to.removeprefix("agent:")
        recipient = self._core.endpoints.get(name)
        if recipient is None or not send_input.to.startswith("agent:"):
            raise SendError(
                SendErrorReason.UNKNOWN_AGENT, f"{send_input.to} is not registered with the gateway"
            )
        text = send_input.text if isinstance(send_input, MessageInput) else "(answer)"
        await recipient.inbox.publish(
            MulticastItem(
                message=DirectMessage(
                    post_id=RandomId.POST.mint(),
                    address=f"agent:{self.agent_name}",
                    sender=f"agent:{self.agent_name}",
                    content=(TextPart(text=text),),
                )
            )
        )
        return SendResult()

    async def open_stream(self, *, takeover: bool) -> MessageStream:
        return await self.inbox.open_stream(takeover=takeover)

    async def acknowledge(self, tokens: Sequence[str]) -> list[AcknowledgeResult]:
        return await self.inbox.acknowledge(tokens)

    async def read_send(self, idempotency_key: str) -> SendState:
        kept = self._kept.get(idempotency_key)
        if kept is None:
            return SendAbsent()
        return SendReturned(input=kept.send_input, outcome=kept.outcome)


@dataclass
class FakeCore:
    """The gateway as the RPC layer sees it, in memory: one object playing the lifecycle,
    the agent directory and the management queries (`core` is the record servers take)."""

    lifecycle: GatewayState = GatewayState.SERVING
    refuse_next: int = 0
    """Calls still to see RECOVERING before `lifecycle` applies (a gateway getting ready)."""
    admin_token: str = ADMIN_TOKEN
    window: int = 256
    store: MemoryStore = field(default_factory=MemoryStore)
    endpoints: dict[str, FakeEndpoint] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    revoked: set[str] = field(default_factory=set)
    scripted: dict[str, SendResult | BaseException] = field(default_factory=dict)
    """What a send to an address answers instead of delivering."""
    conversation_list: list[ConversationSummary] = field(default_factory=list)
    records: list[ConversationRecord] = field(default_factory=list)
    auth_failures: list[AuthFailure] = field(default_factory=list)
    """Refusals the RPC layer reported (the auth-failure metric's input)."""

    @property
    def core(self) -> GatewayCore:
        """This fake as the record `build_server` takes."""
        return GatewayCore(
            lifecycle=self, agents=self, management=self, on_auth_refused=self.auth_refused
        )

    @property
    def state(self) -> GatewayState:
        if self.refuse_next > 0:
            self.refuse_next -= 1
            return GatewayState.RECOVERING
        return self.lifecycle

    async def authenticate(self, token: str) -> FakeEndpoint | AuthFailure:
        if token in self.revoked:
            return AuthFailure.REVOKED
        name = self.tokens.get(token)
        if name is None:
            return AuthFailure.UNKNOWN
        return self.endpoints[name]

    def is_admin(self, token: str) -> bool:
        return hmac.compare_digest(token.encode(), self.admin_token.encode())

    def auth_refused(self, failure: AuthFailure) -> None:
        self.auth_failures.append(failure)

    async def register(self, name: str) -> RegisteredAgent:
        if not is_agent_name(name):
            raise ManagementError(
                ManagementErrorReason.INVALID_NAME, f"{name!r} is not an agent name"
            )
        if name in self.endpoints:
            raise ManagementError(
                ManagementErrorReason.NAME_TAKEN, f"agent:{name} is already registered"
            )
        endpoint = FakeEndpoint(self, name, RandomId.AGENT.mint())
        self.endpoints[name] = endpoint
        token = RandomId.API_TOKEN.mint()
        self.tokens[token] = name
        return RegisteredAgent(address=f"agent:{name}", agent_id=endpoint.agent_id, token=token)

    def _endpoint(self, name: str) -> FakeEndpoint:
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            raise ManagementError(
                ManagementErrorReason.NOT_FOUND, f"agent:{name} is not hosted here"
            )
        return endpoint

    async def agent_status(self, name: str) -> AgentStatus:
        endpoint = self._endpoint(name)
        backlog = len(await self.store.unread(endpoint.agent_id, 0, 10_000))
        return AgentStatus(
            name=name,
            address=f"agent:{name}",
            agent_id=endpoint.agent_id,
            public_key="k" * 43,
            issued_at="2026-01-01T00:00:00Z",
            hosted=True,
            stream_attached=endpoint.inbox.listening,
            backlog=backlog,
            oldest_unacked_age_seconds=0.0,
        )

    async def list_agents(
        self, *, prefix: str, after: str | None, limit: int
    ) -> tuple[list[AgentStatus], str | None]:
        names = sorted(
            name
            for name in self.endpoints
            if name.startswith(prefix) and (after is None or name > after)
        )
        page = names[:limit]
        statuses = [await self.agent_status(name) for name in page]
        return statuses, (page[-1] if len(names) > limit else None)

    async def conversations(self, name: str) -> list[ConversationSummary]:
        self._endpoint(name)
        return list(self.conversation_list)

    async def history(
        self, name: str, address: str, *, after_record_hash: str | None, limit: int
    ) -> list[ConversationRecord]:
        self._endpoint(name)
        records = list(self.records)
        if after_record_hash is not None:
            hashes = [record.record_hash for record in records]
            records = records[hashes.index(after_record_hash) + 1 :]
        return records[:limit]

    async def rotate_token(self, name: str) -> str:
        await self.revoke_token(name)
        token = RandomId.API_TOKEN.mint()
        self.tokens[token] = name
        return token

    async def revoke_token(self, name: str) -> None:
        endpoint = self._endpoint(name)
        for token, owner in list(self.tokens.items()):
            if owner == name:
                self.revoked.add(token)
                del self.tokens[token]
        endpoint.inbox.end_stream(StreamEndReason.REVOKED)

    def status(self) -> GatewayStatus:
        return GatewayStatus(
            version="0.1.0",
            mode="embedded",
            hosted_agents=len(self.endpoints),
            router_state="active",
        )

    async def deliver(self, name: str, item: InboundItem) -> str:
        """Publish an item to an agent's inbox; returns its token."""
        return await self.endpoints[name].inbox.publish(item)


def text_item(text: str, sender: str = "agent:carol") -> MulticastItem:
    """A direct multicast item from `sender`."""
    content: Content = (TextPart(text=text),)
    return MulticastItem(
        message=DirectMessage(
            post_id=RandomId.POST.mint(), address=sender, sender=sender, content=content
        )
    )

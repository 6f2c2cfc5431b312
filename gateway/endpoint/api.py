"""What the gRPC layer calls: the gateway core's surface, in our own types.

`gateway/rpc/` turns protobuf into these values and back, and translates the closed errors
of `harness_contract.errors` into statuses; everything below it implements these
Protocols. The services receive one `GatewayCore` record naming the components that answer
(the lifecycle, the agent directory, the management queries), so no call is forwarded
through the composition root. Keeping the surface here lets the RPC layer be tested
against a fake core.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from harness_contract.management import AgentStatus as AgentStatus
from harness_contract.management import ConversationRecord as ConversationRecord
from harness_contract.management import ConversationSummary as ConversationSummary
from harness_contract.management import GatewayStatus as GatewayStatus
from harness_contract.management import ManagementError as ManagementError
from harness_contract.management import ManagementErrorReason as ManagementErrorReason
from harness_contract.management import RegisteredAgent as RegisteredAgent
from harness_contract.management import SetAsideConversation as SetAsideConversation
from harness_contract.values import (
    FailureDelivery,
    SendInput,
    SendResult,
)
from harness_contract.values import SendAbsent as SendAbsent
from harness_contract.values import SendIndeterminate as SendIndeterminate
from harness_contract.values import SendPending as SendPending
from harness_contract.values import SendReturned as SendReturned
from harness_contract.values import SendState as SendState

# The inbox's values the RPC layer needs, re-exported so that gateway/rpc/ reaches
# gateway.endpoint only through this module.
from gateway.endpoint.inbox import ACKNOWLEDGE_MAX_TOKENS as ACKNOWLEDGE_MAX_TOKENS
from gateway.endpoint.inbox import AcknowledgeResult as AcknowledgeResult
from gateway.endpoint.inbox import MessageStream as MessageStream
from gateway.endpoint.inbox import StreamEnded as StreamEnded
from gateway.endpoint.inbox import StreamEndReason as StreamEndReason


class GatewayState(enum.StrEnum):
    """A gateway's lifecycle: each state refuses the calls that make no sense in it."""

    STARTING = "starting"
    """Opening the store and the network."""
    RECOVERING = "recovering"
    """Rebuilding agents; calls are refused with UNAVAILABLE (`NOT_READY`)."""
    SERVING = "serving"
    """Taking calls."""
    STOPPING = "stopping"
    """Shutting down; new calls are refused with UNAVAILABLE (`SHUTTING_DOWN`)."""
    STOPPED = "stopped"
    """Everything is closed."""


class NotServing(Exception):
    """The gateway is not SERVING; `state` says whether it is starting or stopping."""

    def __init__(self, state: GatewayState) -> None:
        super().__init__(f"the gateway is {state.value}")
        self.state = state


class NotHome(Exception):
    """In a cluster: the call's agent is not homed on this replica (its home partition moved
    or has no holder yet); the call had no effect and is retried at the home
    (cluster.md §4.1)."""

    def __init__(self, agent_id: str) -> None:
        super().__init__(f"agent {agent_id} is not homed on this replica")
        self.agent_id = agent_id


class AuthFailure(enum.StrEnum):
    """Why a token was refused (the `harness_auth_failures_total` reasons)."""

    MISSING = "missing"
    """No `authorization` metadata."""
    MALFORMED = "malformed"
    """Not `Bearer <token>`."""
    UNKNOWN = "unknown"
    """No such token."""
    REVOKED = "revoked"
    """The token was revoked or rotated."""
    WRONG_ROLE = "wrong-role"
    """An agent token on the management API, or the admin token on the agent API."""


class Endpoint(Protocol):
    """One hosted agent's HarnessEndpoint, as the token's agent."""

    @property
    def agent_name(self) -> str:
        """The agent's name."""
        ...

    async def send(
        self,
        send_input: SendInput,
        *,
        failure_delivery: FailureDelivery = FailureDelivery.RESULT,
        idempotency_key: str | None = None,
        deadline: float | None = None,
    ) -> SendResult:
        """Run a send; `deadline` is the call's remaining seconds, if any.

        Raises `SendError`, `CollectiveError`, `FirewallSendError` or
        `IdempotencyConflictError`."""
        ...

    async def open_stream(self, *, takeover: bool) -> MessageStream:
        """Open the agent's one `Messages` stream (`AgentInbox.open_stream`: without
        `takeover` it may wait briefly for an open one to end); raises `ListenError`."""
        ...

    async def acknowledge(self, tokens: Sequence[str]) -> list[AcknowledgeResult]:
        """Retire deliveries, one result per token."""
        ...

    async def read_send(self, idempotency_key: str) -> SendState:
        """The state of an idempotency key."""
        ...


class Lifecycle(Protocol):
    """Whether the gateway takes calls (the composition root's lifecycle state)."""

    @property
    def state(self) -> GatewayState:
        """The lifecycle state; calls are taken only while SERVING."""
        ...


class AgentAccess(Protocol):
    """The hosted agents as the gRPC services reach them: tokens and registration (the
    `AgentDirectory`)."""

    async def authenticate(self, token: str) -> Endpoint | AuthFailure:
        """The endpoint an agent token names, or why it is refused."""
        ...

    def is_admin(self, token: str) -> bool:
        """True for the operator token (compared in constant time)."""
        ...

    async def register(self, name: str) -> RegisteredAgent:
        """Mint the agent's key and card, host it here, and return a fresh token.

        Raises `ManagementError` (`invalid-name`, `name-taken`)."""
        ...

    async def rotate_token(self, name: str) -> str:
        """Revoke the agent's tokens, end its stream, and return a new token; raises
        `ManagementError` `not-found`."""
        ...

    async def revoke_token(self, name: str) -> None:
        """Revoke the agent's tokens and end its stream; raises `ManagementError`
        `not-found`."""
        ...


class OperatorQueries(Protocol):
    """What an operator reads about the hosted agents and the daemon (the
    `ManagementQueries`)."""

    async def agent_status(self, name: str) -> AgentStatus:
        """What an operator sees about one agent; raises `ManagementError` `not-found`."""
        ...

    async def list_agents(
        self, *, prefix: str, after: str | None, limit: int
    ) -> tuple[list[AgentStatus], str | None]:
        """Hosted agents by name after `after`, and the next page's `after`."""
        ...

    async def conversations(self, name: str) -> list[ConversationSummary]:
        """Conversations one hosted agent stores; raises `ManagementError` `not-found`."""
        ...

    async def history(
        self, name: str, address: str, *, after_record_hash: str | None, limit: int
    ) -> list[ConversationRecord]:
        """Certified records of one of the agent's conversations, in chain order.

        Raises `ManagementError`: `invalid-address` for an address that names no valid
        conversation of the agent, `not-found` for an unknown agent or record."""
        ...

    def status(self) -> GatewayStatus:
        """Version, mode, hosted agents and Router state."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayCore:
    """The gateway as the gRPC services see it: the parts they call, each the component
    that does the work (the composition root builds this record once)."""

    lifecycle: Lifecycle
    """Whether calls are taken (the `Gateway`)."""
    agents: AgentAccess
    """Tokens and registration (the `AgentDirectory`)."""
    management: OperatorQueries
    """The operator's reads (the `ManagementQueries`)."""
    on_auth_refused: Callable[[AuthFailure], None]
    """Told of each refused token, by reason (counted; the token is never passed)."""

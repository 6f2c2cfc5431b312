"""The management API's values and its closed error (`harness agents ...`, `harness status`).

The operator's side of the contract: what a registration returns, what an agent's status,
a conversation and a certified record look like, and why a management call fails. Field
names follow `proto/harness/v1/management.proto`; the JSON forms are in `codec`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from harness_contract.errors import HarnessError, StatusCode, _EqualByFields
from harness_contract.values import Content


class ManagementErrorReason(enum.StrEnum):
    """Why a management call failed; each reason travels under its own status code."""

    NOT_FOUND = "not-found"
    """The agent is not hosted here, or the record is not in the conversation (NOT_FOUND)."""
    NAME_TAKEN = "name-taken"
    """Another agent holds the name, here or at the Registry (ALREADY_EXISTS)."""
    INVALID_NAME = "invalid-name"
    """Not 3 to 32 characters of a-z, 0-9 and inner hyphens (INVALID_ARGUMENT)."""
    INVALID_ADDRESS = "invalid-address"
    """The conversation address is not a valid `agent:` or `group:` one for the agent
    (INVALID_ARGUMENT)."""

    @property
    def status_code(self) -> StatusCode:
        """The status this reason travels under."""
        return _MANAGEMENT_STATUS[self]


_MANAGEMENT_STATUS = {
    ManagementErrorReason.NOT_FOUND: StatusCode.NOT_FOUND,
    ManagementErrorReason.NAME_TAKEN: StatusCode.ALREADY_EXISTS,
    ManagementErrorReason.INVALID_NAME: StatusCode.INVALID_ARGUMENT,
    ManagementErrorReason.INVALID_ADDRESS: StatusCode.INVALID_ARGUMENT,
}


class ManagementError(_EqualByFields, HarnessError):
    """A management call failed for a closed `reason`; `detail` is the operator's text."""

    def __init__(self, reason: ManagementErrorReason, detail: str) -> None:
        super().__init__(detail)
        self.management_reason = reason
        self.detail = detail

    @property
    def reason(self) -> ManagementErrorReason:
        return self.management_reason

    @property
    def message(self) -> str:
        return self.detail

    @property
    def status_code(self) -> StatusCode:
        return self.management_reason.status_code

    def __repr__(self) -> str:
        return f"ManagementError({self.management_reason.value!r}, {self.detail!r})"

    def _fields(self) -> tuple[object, ...]:
        return (self.management_reason, self.detail)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisteredAgent:
    """A registration's answer; `token` is shown this once."""

    address: str
    agent_id: str
    token: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SetAsideConversation:
    """A conversation the daemon stopped serving, and why (engine.md §5.10)."""

    conversation_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentStatus:
    """What an operator sees of one agent (`harness agents show`)."""

    name: str
    address: str
    agent_id: str
    public_key: str
    issued_at: str
    hosted: bool
    stream_attached: bool
    """Whether a `Messages` stream of the agent is open."""
    backlog: int
    """Inbox items not yet acknowledged."""
    oldest_unacked_age_seconds: float
    set_aside: tuple[SetAsideConversation, ...] = ()
    """Conversations of this agent the daemon stopped serving (a stored row failed a check)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationSummary:
    """One conversation a hosted agent stores."""

    address: str
    kind: str
    """`direct` or `group`."""
    members: tuple[str, ...]
    head_record_hash: str | None
    depth: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationRecord:
    """One certified record of a conversation, as the management API reads it."""

    record_hash: str
    post_id: str
    author: str
    depth: int
    content: Content
    certified_record: bytes
    """The record's exact RFC 8785 bytes, so a reader can verify every signature."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterReplica:
    """One replica of a cluster, as the answering replica's last view saw it."""

    replica_id: str
    incarnation: int
    address: str
    """The `HOST:PORT` other replicas and clients dial."""
    serving: bool
    """Counted for assignment."""
    live: bool
    """Beat within the lease TTL, in database time."""
    fenced: bool
    """Its incarnation was fenced by a claimer."""
    beat_age_seconds: float
    """Seconds since its last beat, in database time."""
    partitions: int
    """Partitions it holds."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterStatus:
    """A cluster replica's view of its cluster (`harness status`, cluster.md §10)."""

    replica_id: str
    """The answering replica."""
    incarnation: int
    state: str
    """`joined`, `serving`, `withdrawn`, `lost` or `closed`."""
    lease_remaining_seconds: float
    """Until the answering replica's own lease ends unless a beat renews it (≤ 0: ended)."""
    claiming: bool
    """Serving with fresh beats for one TTL: it may claim partitions."""
    partitions: int
    """P, fixed at set-up."""
    owned_partitions: int
    """Held by the answering replica."""
    unowned_partitions: int
    """Without a live holder."""
    replicas: tuple[ClusterReplica, ...]
    """By id, those that beat within the last minute or hold a partition."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayStatus:
    """The daemon's version, mode, hosted agents and Router state (`harness status`); a
    cluster replica adds its view of the cluster."""

    version: str
    mode: str
    hosted_agents: int
    router_state: str
    cluster: ClusterStatus | None = None
    """Set only by a cluster replica."""

"""The `Store` seam: what the engine and the endpoints need from durable storage.

Three implementations: `SqliteStore` (one file in the data directory), `PostgresStore`
(`gateway.store.postgres`: one database shared by several daemons, each owning its agents
under a lease) and `MemoryStore` (unit tests); one contract suite runs on all three.
Writes are typed (`gateway.store.records.Write`) and every `apply` call is atomic; reads
return typed rows. Nothing here speaks SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gateway.store.records import (
    AgentSnapshot,
    ConversationRow,
    DeliveryRow,
    IdentityRow,
    InboxRow,
    IntentRow,
    RecordRow,
    SendRow,
    Write,
)


class Store(Protocol):
    """One durable store for every hosted agent; every row is keyed by agent first."""

    async def apply(self, writes: Sequence[Write]) -> None:
        """Commit `writes` atomically, in order (grouped with other callers' writes).

        Raises `CommitAmbiguous` when the commit may or may not have happened, and a
        `StoreError` when it surely did not."""
        ...

    async def identities(self) -> list[IdentityRow]:
        """Every hosted agent's committed identity."""
        ...

    async def token(self, token_digest: str) -> tuple[str, bool] | None:
        """(AgentId, revoked) for an API token digest, or None."""
        ...

    async def cursor(self, subscription: str) -> bytes | None:
        """The stored Router cursor of a subscription."""
        ...

    async def snapshot(self, agent_id: str) -> AgentSnapshot:
        """Everything one agent rebuilds from at start."""
        ...

    async def unread(self, agent_id: str, after_seq: int, limit: int) -> list[InboxRow]:
        """Unread inbox items after `after_seq`, in inbox order, at most `limit`."""
        ...

    async def pending_deliveries(self, agent_id: str, limit: int) -> list[DeliveryRow]:
        """Deliveries not classified yet, in commit order."""
        ...

    async def inbox_item(self, agent_id: str, token: str) -> InboxRow | None:
        """One inbox item of this agent by token."""
        ...

    async def inbox_items(self, agent_id: str, tokens: Sequence[str]) -> dict[str, InboxRow]:
        """This agent's inbox items among `tokens`, by token (absent tokens are left out)."""
        ...

    async def unread_summary(self) -> dict[str, tuple[int, float]]:
        """Per agent with unread items: (count, creation time of the oldest)."""
        ...

    async def oldest_unread(self, agent_id: str) -> float | None:
        """Creation time (epoch seconds) of the agent's oldest unread item."""
        ...

    async def unread_count(self, agent_id: str) -> int:
        """How many of the agent's inbox items are unread (its backlog), counted without
        reading the rows."""
        ...

    async def conversations(self, agent_id: str) -> list[ConversationRow]:
        """Every conversation the agent stores."""
        ...

    async def records(
        self, agent_id: str, conversation_id: str, after_depth: int, limit: int
    ) -> list[RecordRow]:
        """Certified records of a conversation after `after_depth`, in chain order."""
        ...

    async def record(self, agent_id: str, record_hash: str) -> RecordRow | None:
        """One certified record by hash."""
        ...

    async def completed_reanchor(
        self, agent_id: str, conversation_id: str, previous_anchor_hash: str
    ) -> bytes | None:
        """The CompletedReanchor that replaced `previous_anchor_hash`, if this member has one."""
        ...

    async def intent(self, agent_id: str, post_id: str) -> IntentRow | None:
        """One post intent by PostId."""
        ...

    async def send_row(self, agent_id: str, key: str) -> SendRow | None:
        """An idempotency key's reservation or kept outcome."""
        ...

    async def close(self) -> None:
        """Flush and close; idempotent."""
        ...

"""`MemoryStore`: the `Store` seam in memory, for unit tests that open no file.

It keeps the same rows and enforces the same uniqueness as the SQLite tables, and the
store contract suite (`tests/unit/store/test_store_contract.py`) runs against both, so the
fake cannot drift from the real thing. `apply` is atomic: writes are applied to a copy that
replaces the state only when every write succeeded.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import assert_never

from harness_contract.ids import RandomId

from gateway.store.errors import ConstraintViolation, StoreClosed
from gateway.store.records import (
    NOT_A_CLUSTER,
    AcknowledgeItem,
    AgentSnapshot,
    BindSend,
    ConversationRow,
    DeleteReceivedRequest,
    DeleteStaged,
    DeliveryRow,
    DeliveryState,
    EvidenceKind,
    EvidenceRow,
    IdentityRow,
    InboxRow,
    InboxState,
    IntentRow,
    IntentState,
    LockRow,
    MoveToLocal,
    OutboxRow,
    OutboxState,
    PruneSettled,
    PutConversation,
    PutCursor,
    PutDelivery,
    PutEvidence,
    PutIdentity,
    PutInboxItem,
    PutIntent,
    PutLock,
    PutOperation,
    PutOutbox,
    PutReanchor,
    PutReceivedRequest,
    PutRecord,
    PutSend,
    PutStaged,
    PutToken,
    ReanchorRow,
    RecordRow,
    RefuseIntent,
    ReleasePartitions,
    ReplaceInboxItem,
    ResetConversation,
    RevokeTokens,
    SendRow,
    SetAsideRow,
    SetDeliveryState,
    SetOutboxState,
    SetSendOutcome,
    StagedRow,
    Write,
)


@dataclass
class _Agent:
    conversations: dict[str, ConversationRow] = field(default_factory=dict)
    intents: dict[str, IntentRow] = field(default_factory=dict)
    locks: dict[tuple[str, str], LockRow] = field(default_factory=dict)
    staged: dict[str, StagedRow] = field(default_factory=dict)
    evidence: dict[tuple[str, str, str], EvidenceRow] = field(default_factory=dict)
    records: dict[str, RecordRow] = field(default_factory=dict)
    reanchors: dict[tuple[str, str, str], ReanchorRow] = field(default_factory=dict)
    outbox: dict[int, OutboxRow] = field(default_factory=dict)
    deliveries: dict[str, DeliveryRow] = field(default_factory=dict)
    inbox: dict[int, InboxRow] = field(default_factory=dict)
    operations: dict[str, tuple[bool, bytes]] = field(default_factory=dict)
    requests: dict[str, bytes] = field(default_factory=dict)
    sends: dict[str, SendRow] = field(default_factory=dict)


@dataclass
class _State:
    identities: dict[str, IdentityRow] = field(default_factory=dict)
    tokens: dict[str, tuple[str, bool]] = field(default_factory=dict)
    cursors: dict[str, bytes] = field(default_factory=dict)
    agents: dict[str, _Agent] = field(default_factory=dict)

    def agent(self, agent_id: str) -> _Agent:
        return self.agents.setdefault(agent_id, _Agent())


class MemoryStore:
    """An in-memory `Store`."""

    def __init__(self) -> None:
        self._state = _State()
        self._closed = False
        self.local_instance_id = RandomId.ROUTER_INSTANCE.mint()
        """The store's durable local instance id (engine.md §5.10)."""

    async def apply(self, writes: Sequence[Write]) -> None:
        """Apply every write or none."""
        self._check_open()
        state = copy.deepcopy(self._state)
        for write in writes:
            _apply(state, write)
        self._state = state

    async def identities(self) -> list[IdentityRow]:
        self._check_open()
        return list(self._state.identities.values())

    async def token(self, token_digest: str) -> tuple[str, bool] | None:
        self._check_open()
        return self._state.tokens.get(token_digest)

    async def cursor(self, subscription: str) -> bytes | None:
        self._check_open()
        return self._state.cursors.get(subscription)

    async def snapshot(self, agent_id: str) -> AgentSnapshot:
        self._check_open()
        agent = self._state.agent(agent_id)
        return AgentSnapshot(
            conversations=tuple(agent.conversations[key] for key in sorted(agent.conversations)),
            open_intents=tuple(
                sorted(
                    (row for row in agent.intents.values() if row.state is IntentState.OPEN),
                    key=lambda row: row.bind_seq,
                )
            ),
            locks=tuple(agent.locks.values()),
            staged=tuple(agent.staged.values()),
            evidence=tuple(agent.evidence.values()),
            reanchors=tuple(agent.reanchors.values()),
            pending_outbox=tuple(
                agent.outbox[key]
                for key in sorted(agent.outbox)
                if agent.outbox[key].state is OutboxState.PENDING
            ),
            pending_deliveries=tuple(
                sorted(
                    (
                        row
                        for row in agent.deliveries.values()
                        if row.state is DeliveryState.PENDING
                    ),
                    key=lambda row: row.commit_seq,
                )
            ),
            open_operations=tuple(row for is_open, row in agent.operations.values() if is_open),
            received_requests=tuple(agent.requests.values()),
            max_bind_seq=max((row.bind_seq for row in agent.intents.values()), default=0),
            max_commit_seq=max((row.commit_seq for row in agent.records.values()), default=0),
            max_inbox_seq=max(agent.inbox, default=0),
            max_outbox_row=max(agent.outbox, default=0),
            unread=sum(1 for row in agent.inbox.values() if row.state is InboxState.UNREAD),
        )

    async def unread(self, agent_id: str, after_seq: int, limit: int) -> list[InboxRow]:
        self._check_open()
        inbox = self._state.agent(agent_id).inbox
        rows = [
            inbox[seq]
            for seq in sorted(inbox)
            if seq > after_seq and inbox[seq].state is InboxState.UNREAD
        ]
        return rows[:limit]

    async def pending_deliveries(self, agent_id: str, limit: int) -> list[DeliveryRow]:
        self._check_open()
        rows = sorted(
            (
                row
                for row in self._state.agent(agent_id).deliveries.values()
                if row.state is DeliveryState.PENDING
            ),
            key=lambda row: row.commit_seq,
        )
        return rows[:limit]

    async def inbox_item(self, agent_id: str, token: str) -> InboxRow | None:
        self._check_open()
        return next(
            (row for row in self._state.agent(agent_id).inbox.values() if row.token == token),
            None,
        )

    async def inbox_items(self, agent_id: str, tokens: Sequence[str]) -> dict[str, InboxRow]:
        self._check_open()
        wanted = set(tokens)
        return {
            row.token: row
            for row in self._state.agent(agent_id).inbox.values()
            if row.token in wanted
        }

    async def unread_summary(self) -> dict[str, tuple[int, float]]:
        self._check_open()
        summary: dict[str, tuple[int, float]] = {}
        for agent_id, agent in self._state.agents.items():
            unread = [
                row.created_at for row in agent.inbox.values() if row.state is InboxState.UNREAD
            ]
            if unread:
                summary[agent_id] = (len(unread), min(unread))
        return summary

    async def oldest_unread(self, agent_id: str) -> float | None:
        self._check_open()
        return min(
            (
                row.created_at
                for row in self._state.agent(agent_id).inbox.values()
                if row.state is InboxState.UNREAD
            ),
            default=None,
        )

    async def unread_count(self, agent_id: str) -> int:
        self._check_open()
        return sum(
            1
            for row in self._state.agent(agent_id).inbox.values()
            if row.state is InboxState.UNREAD
        )

    async def conversations(self, agent_id: str) -> list[ConversationRow]:
        self._check_open()
        conversations = self._state.agent(agent_id).conversations
        return [conversations[key] for key in sorted(conversations)]

    async def records(
        self, agent_id: str, conversation_id: str, after_depth: int, limit: int
    ) -> list[RecordRow]:
        self._check_open()
        rows = sorted(
            (
                row
                for row in self._state.agent(agent_id).records.values()
                if row.conversation_id == conversation_id and row.depth > after_depth
            ),
            key=lambda row: row.depth,
        )
        return rows[:limit]

    async def record(self, agent_id: str, record_hash: str) -> RecordRow | None:
        self._check_open()
        return self._state.agent(agent_id).records.get(record_hash)

    async def completed_reanchor(
        self, agent_id: str, conversation_id: str, previous_anchor_hash: str
    ) -> bytes | None:
        self._check_open()
        for row in self._state.agent(agent_id).reanchors.values():
            if (
                row.conversation_id == conversation_id
                and row.previous_anchor_hash == previous_anchor_hash
                and row.completed is not None
            ):
                return row.completed
        return None

    async def intent(self, agent_id: str, post_id: str) -> IntentRow | None:
        self._check_open()
        return self._state.agent(agent_id).intents.get(post_id)

    async def send_row(self, agent_id: str, key: str) -> SendRow | None:
        self._check_open()
        return self._state.agent(agent_id).sends.get(key)

    async def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("store", "closed")


def _drop_certification(agent: _Agent, conversation_id: str) -> None:
    """Drop the agent's locks, staged records and evidence of one conversation."""
    agent.locks = {k: v for k, v in agent.locks.items() if v.conversation_id != conversation_id}
    agent.staged = {k: v for k, v in agent.staged.items() if v.conversation_id != conversation_id}
    agent.evidence = {
        k: v for k, v in agent.evidence.items() if v.conversation_id != conversation_id
    }


def _prune_settled(agent: _Agent, conversation_id: str, head: str) -> None:
    agent.locks = {
        key: lock
        for key, lock in agent.locks.items()
        if lock.conversation_id != conversation_id or lock.predecessor == head
    }
    locked = {
        lock.action_hash for lock in agent.locks.values() if lock.conversation_id == conversation_id
    }
    staged = {
        row.record_hash for row in agent.staged.values() if row.conversation_id == conversation_id
    }
    open_reanchors = {
        row.anchor_hash
        for row in agent.reanchors.values()
        if row.conversation_id == conversation_id and row.completed is None
    }
    keep = {EvidenceKind.ACTION: locked, EvidenceKind.DURABILITY: staged}
    keep[EvidenceKind.REANCHOR] = open_reanchors
    agent.evidence = {
        key: row
        for key, row in agent.evidence.items()
        if row.conversation_id != conversation_id or row.subject in keep[row.kind]
    }


def _apply(state: _State, write: Write) -> None:
    match write:
        case PutIdentity():
            if write.agent_id in state.identities or any(
                row.agent_name == write.agent_name for row in state.identities.values()
            ):
                raise ConstraintViolation("identity exists")
            state.identities[write.agent_id] = write.row()
        case PutToken():
            if write.token_digest in state.tokens:
                raise ConstraintViolation("token exists")
            state.tokens[write.token_digest] = (write.agent_id, False)
        case RevokeTokens():
            for digest, (agent_id, _) in list(state.tokens.items()):
                if agent_id == write.agent_id:
                    state.tokens[digest] = (agent_id, True)
        case PutCursor():
            state.cursors[write.subscription] = write.cursor
        case PutConversation():
            state.agent(write.agent_id).conversations[write.conversation_id] = write.row()
        case PutIntent():
            agent = state.agent(write.agent_id)
            if any(
                row.bind_seq == write.bind_seq and row.post_id != write.post_id
                for row in agent.intents.values()
            ):
                raise ConstraintViolation("bind sequence reused")
            agent.intents[write.post_id] = write.row()
        case PutLock():
            state.agent(write.agent_id).locks[(write.conversation_id, write.predecessor)] = (
                write.row()
            )
        case PutStaged():
            state.agent(write.agent_id).staged[write.record_hash] = write.row()
        case DeleteStaged():
            state.agent(write.agent_id).staged.pop(write.record_hash, None)
        case PutEvidence():
            state.agent(write.agent_id).evidence.setdefault(
                (write.subject, write.signer, write.kind.value), write.row()
            )
        case PutRecord():
            agent = state.agent(write.agent_id)
            if write.record_hash in agent.records or any(
                row.conversation_id == write.conversation_id and row.depth == write.depth
                for row in agent.records.values()
            ):
                raise ConstraintViolation("record exists")
            agent.records[write.record_hash] = write.row()
        case PutReanchor():
            state.agent(write.agent_id).reanchors[
                (write.conversation_id, write.previous_anchor_hash, write.instance_id)
            ] = write.row()
        case ResetConversation():
            _drop_certification(state.agent(write.agent_id), write.conversation_id)
        case PutOutbox():
            state.agent(write.agent_id).outbox[write.row_id] = write.row()
        case SetOutboxState():
            outbox = state.agent(write.agent_id).outbox
            if write.row_id in outbox:
                if write.state is OutboxState.PENDING:
                    outbox[write.row_id] = replace(outbox[write.row_id], state=write.state)
                else:
                    del outbox[write.row_id]
        case MoveToLocal():
            agent = state.agent(write.agent_id)
            cid = write.conversation_id
            _drop_certification(agent, cid)
            agent.outbox = {k: v for k, v in agent.outbox.items() if v.conversation_id != cid}
            agent.reanchors = {
                k: v
                for k, v in agent.reanchors.items()
                if v.conversation_id != cid or v.completed is not None
            }
        case PruneSettled():
            _prune_settled(state.agent(write.agent_id), write.conversation_id, write.head or "")
        case PutDelivery():
            deliveries = state.agent(write.agent_id).deliveries
            if write.token in deliveries:
                raise ConstraintViolation("delivery exists")
            deliveries[write.token] = write.row()
        case SetDeliveryState():
            deliveries = state.agent(write.agent_id).deliveries
            if write.token in deliveries:
                pending = write.state is DeliveryState.PENDING
                delivery = deliveries[write.token]
                deliveries[write.token] = replace(
                    delivery,
                    state=write.state,
                    projection=delivery.projection if pending else b"",
                )
        case PutInboxItem():
            inbox = state.agent(write.agent_id).inbox
            if write.seq in inbox or any(row.token == write.token for row in inbox.values()):
                raise ConstraintViolation("inbox item exists")
            inbox[write.seq] = write.row()
        case AcknowledgeItem():
            inbox = state.agent(write.agent_id).inbox
            for seq, row in inbox.items():
                if row.token == write.token and row.state is InboxState.UNREAD:
                    item = row.item if write.tombstone is None else write.tombstone
                    inbox[seq] = replace(row, state=InboxState.ACKNOWLEDGED, item=item)
        case PutOperation():
            state.agent(write.agent_id).operations[write.operation_id] = (write.open, write.row)
        case PutReceivedRequest():
            state.agent(write.agent_id).requests[write.operation_id] = write.row
        case DeleteReceivedRequest():
            state.agent(write.agent_id).requests.pop(write.operation_id, None)
        case PutSend():
            state.agent(write.agent_id).sends[write.key] = write.row()
        case BindSend():
            sends = state.agent(write.agent_id).sends
            if write.key in sends:
                sends[write.key] = replace(sends[write.key], bound=write.bound)
        case SetSendOutcome():
            sends = state.agent(write.agent_id).sends
            if write.key in sends:
                sends[write.key] = replace(sends[write.key], outcome=write.outcome)
        case ReplaceInboxItem():
            inbox = state.agent(write.agent_id).inbox
            for seq, row in inbox.items():
                if row.token == write.token and row.state is InboxState.UNREAD:
                    inbox[seq] = replace(
                        row, state=InboxState.REPLACED, replacement_token=write.replacement_token
                    )
        case ReleasePartitions() | SetAsideRow() | RefuseIntent():
            raise ConstraintViolation(NOT_A_CLUSTER)
        case _:
            assert_never(write)

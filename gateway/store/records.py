"""The store's vocabulary: typed writes the engine and the endpoints submit, and typed rows
they read back (engine.md §8).

Canonical objects are kept as their JCS bytes, so the store never needs to understand the
protocol: it keys rows by agent first, then by the identifiers the spec names. A list of
writes passed to `Store.apply` commits atomically, in order. Sequence numbers (bind order,
commit order, inbox order, outbox rows) are assigned by the caller, which owns the agent's
counters after rehydration; the store only enforces uniqueness.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias, TypeVar

import orjson

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

RowT = TypeVar("RowT", bound="DataclassInstance")


class IntentState(enum.StrEnum):
    """A bound post intent's state."""

    OPEN = "open"
    """Bound, not yet certified: it is proposed until it certifies or is refused."""
    COMPLETED = "completed"
    """Certified; `record_hash` names its record."""
    REFUSED = "refused"
    """The author's own policy refused it; it is never proposed again."""


class OutboxState(enum.StrEnum):
    """An outbound envelope's state."""

    PENDING = "pending"
    """Queued; sent (again) until the Router accepts it."""
    ACCEPTED = "accepted"
    """The Router accepted it."""
    DISCARDED = "discarded"
    """No longer worth sending (stale after recovery, or refused as our defect)."""


class InboxState(enum.StrEnum):
    """An inbox item's state."""

    UNREAD = "unread"
    """Offered on every new stream until acknowledged."""
    ACKNOWLEDGED = "acknowledged"
    """Retired; the row stays as a tombstone so the token is never reused."""
    REPLACED = "replaced"
    """Replaced at a restart by another item under `replacement_token`."""


class DeliveryState(enum.StrEnum):
    """A pending delivery's state (a promoted remote-authored record)."""

    PENDING = "pending"
    """Not classified yet."""
    CLASSIFIED = "classified"
    """Turned into an inbox item under the same token."""
    CONSUMED = "consumed"
    """Consumed and acknowledged by the endpoint itself, never delivered."""


class EvidenceKind(enum.StrEnum):
    """Which certificate a stored statement belongs to."""

    ACTION = "action"
    DURABILITY = "durability"
    REANCHOR = "reanchor"


# --- writes ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PutIdentity:
    """A hosted agent's committed identity: its signed card and Ed25519 seed."""

    agent_id: str
    agent_name: str
    signed_card: bytes
    seed: bytes
    created_at: str

    def row(self) -> IdentityRow:
        """The identity this write stores."""
        return _row_of(IdentityRow, self)


@dataclass(frozen=True, slots=True, kw_only=True)
class PutToken:
    """An API token, stored only as its digest."""

    token_digest: str
    agent_id: str
    created_at: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RevokeTokens:
    """Revoke every token of an agent (rotation revokes, then puts the new one)."""

    agent_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PutCursor:
    """The Router subscription's cursor, after a fully processed batch."""

    subscription: str
    cursor: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class PutConversation:
    """A conversation's foundation, anchor and head (the whole row, upserted)."""

    agent_id: str
    conversation_id: str
    descriptor: bytes
    membership_hash: str
    anchor: bytes
    anchor_hash: str
    head: str | None
    depth: int
    moved_from: int | None = None
    """In a cluster (cluster.md §5.2): the stored depth this write moves the head from. The
    row is then never replaced: at 0 (GENESIS) the foundation is inserted `ON CONFLICT DO
    NOTHING`, and the head moves only `WHERE depth = moved_from` on this foundation, not set
    aside; where that matches no row the unit fails `ConstraintViolation` (it is stale).
    None (the embedded and network modes): the whole row is upserted. Only a cluster's
    PostgreSQL store reads it."""

    def row(self) -> ConversationRow:
        """The row this write puts."""
        return _row_of(ConversationRow, self)


@dataclass(frozen=True, slots=True, kw_only=True)
class PutIntent:
    """A post intent (upserted: binding puts it `open`, promotion `completed`)."""

    agent_id: str
    post_id: str
    conversation_id: str
    bind_seq: int
    intent: bytes
    state: IntentState
    record_hash: str | None
    bound_at: float
    seq_partition: int | None = None
    """In a cluster, an intent bound by a home that does not sequence its conversation: the
    sequencing partition whose holder admits it (cluster.md §5.1); None otherwise."""
    descriptor: bytes | None = None
    """With `seq_partition`: the JCS bytes of the conversation's MembershipDescriptor, so the
    sequencer can found a conversation no member has a row of yet."""
    from_open: bool = False
    """In a cluster (cluster.md §5.2): the sequencer completes the intent only `WHERE state =
    'open'`; where that matches no row the unit fails `ConstraintViolation` (it is stale).
    Only a cluster's PostgreSQL store reads it."""

    def row(self) -> IntentRow:
        """The row this write puts: a completed intent keeps no payload, since it is in its
        certified record and only open intents are read again."""
        return _row_of(
            IntentRow, self, intent=b"" if self.state is IntentState.COMPLETED else self.intent
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PutLock:
    """The durable proposal lock for (conversation, predecessor); `""` is GENESIS."""

    agent_id: str
    conversation_id: str
    predecessor: str
    action_hash: str
    action: bytes

    def row(self) -> LockRow:
        """The row this write puts."""
        return _row_of(LockRow, self)


@dataclass(frozen=True, slots=True, kw_only=True)
class PutStaged:
    """An action-certified record staged before this member's durability vote."""

    agent_id: str
    record_hash: str
    conversation_id: str
    predecessor: str
    record: bytes

    def row(self) -> StagedRow:
        """The row this write puts."""
        return _row_of(StagedRow, self)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteStaged:
    """Remove a staged record (it was promoted)."""

    agent_id: str
    record_hash: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PutEvidence:
    """A signed statement about a subject (ActionHash, RecordHash or AnchorHash)."""

    agent_id: str
    conversation_id: str
    subject: str
    signer: str
    kind: EvidenceKind
    statement: bytes

    def row(self) -> EvidenceRow:
        """The row this write puts (unless one with its key exists)."""
        return _row_of(EvidenceRow, self)


@dataclass(frozen=True, slots=True, kw_only=True)
class PutRecord:
    """A certified record, promoted; `commit_seq` orders records across conversations."""

    agent_id: str
    record_hash: str
    conversation_id: str
    depth: int
    author: str
    post_id: str
    record: bytes
    commit_seq: int | None
    """None in a cluster: the database assigns it at insert (cluster.md §5.2)."""
    membership: bytes | None = None
    """The JCS bytes of the record's MembershipDescriptor, when the caller has them: the
    store may then keep the descriptor once per conversation instead of in every record."""

    def row(self) -> RecordRow:
        """The record as it reads back (a store may keep its bytes apart)."""
        return _row_of(RecordRow, self)


@dataclass(frozen=True, slots=True, kw_only=True)
class PutReanchor:
    """A re-anchor candidate this member voted for, or its completion."""

    agent_id: str
    conversation_id: str
    previous_anchor_hash: str
    instance_id: str
    body: bytes
    anchor_hash: str
    completed: bytes | None

    def row(self) -> ReanchorRow:
        """The row this write puts."""
        return _row_of(ReanchorRow, self)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetConversation:
    """The empty-conversation genesis swap: drop locks, staged records and evidence."""

    agent_id: str
    conversation_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PruneSettled:
    """After a promotion or a re-anchor adoption: drop this member's locks at older
    predecessors and its own evidence on subjects that are settled now (the certificates
    inside the stored records hold it), so the tables stay the size of what is open."""

    agent_id: str
    conversation_id: str
    head: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MoveToLocal:
    """A conversation moves onto local order: drop this member's locks, staged records,
    evidence, open re-anchor rows and outbox rows of it (engine.md §5.10 Existing data)."""

    agent_id: str
    conversation_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PutOutbox:
    """An outbound signed envelope (upserted by row id; a re-wrap replaces its bytes)."""

    agent_id: str
    row_id: int
    conversation_id: str
    post_id: str | None
    message_id: str
    envelope: bytes
    state: OutboxState

    def row(self) -> OutboxRow:
        """The row this write puts."""
        return _row_of(OutboxRow, self)


@dataclass(frozen=True, slots=True, kw_only=True)
class SetOutboxState:
    """Mark an outbox row accepted or discarded: either way the row is pruned, since
    only pending rows are ever read again."""

    agent_id: str
    row_id: int
    state: OutboxState


@dataclass(frozen=True, slots=True, kw_only=True)
class PutDelivery:
    """A pending delivery created with a promotion (remote author)."""

    agent_id: str
    token: str
    conversation_id: str
    record_hash: str
    commit_seq: int | None
    """None in a cluster: the database assigns it at insert (cluster.md §5.2)."""
    projection: bytes
    state: DeliveryState

    def row(self) -> DeliveryRow:
        """The row this write puts."""
        return _row_of(DeliveryRow, self)


@dataclass(frozen=True, slots=True, kw_only=True)
class SetDeliveryState:
    """Classification's outcome for one delivery."""

    agent_id: str
    token: str
    state: DeliveryState


@dataclass(frozen=True, slots=True, kw_only=True)
class PutInboxItem:
    """An item made durable under its token before anyone sees it."""

    agent_id: str
    seq: int
    token: str
    item: bytes
    guidance: bytes | None
    created_at: float

    def row(self) -> InboxRow:
        """The row this write puts: a new item is unread and replaced by nothing."""
        return _row_of(InboxRow, self, state=InboxState.UNREAD, replacement_token=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class AcknowledgeItem:
    """Retire an unread item (acknowledging an acknowledged one changes nothing); the row
    keeps `tombstone` (the item's kind and ids) instead of the whole item."""

    agent_id: str
    token: str
    tombstone: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PutOperation:
    """A requester's collective operation row (collectives.md §4.7), upserted on change."""

    agent_id: str
    operation_id: str
    open: bool
    row: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class PutReceivedRequest:
    """A member's received collective request row, upserted on change."""

    agent_id: str
    operation_id: str
    row: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteReceivedRequest:
    """Purge a received request past its retention (deadline + 1 h)."""

    agent_id: str
    operation_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PutSend:
    """An idempotency key's reservation (outcome None) or its kept outcome (engine.md §9.1).

    A reservation of this build is `resumable` with nothing `bound`; the defaults are a row
    as schema 2 wrote it, which recorded no binding and so can never be resumed."""

    agent_id: str
    key: str
    request: bytes
    run_id: str
    outcome: bytes | None
    bound: bytes | None = None
    resumable: bool = False

    def row(self) -> SendRow:
        """The row this write puts."""
        return _row_of(SendRow, self)


@dataclass(frozen=True, slots=True, kw_only=True)
class BindSend:
    """A keyed send bound its posts: written in the bind's own transaction, beside the
    intents (engine.md §8.3), so a row holds `bound` exactly when its posts exist."""

    agent_id: str
    key: str
    bound: bytes
    """JCS of the SendResult form the send will answer: the bound PostIds, the operation id
    of a collective, the firewall's guidance (`gateway.endpoint.idempotency`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SetSendOutcome:
    """Keep a keyed send's outcome on its row (what was bound stays as it was)."""

    agent_id: str
    key: str
    outcome: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplaceInboxItem:
    """Mark an unread item replaced by another item (its own token)."""

    agent_id: str
    token: str
    replacement_token: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleasePartitions:
    """A cluster replica hands partitions over (cluster.md §3.2): a unit of its own, after
    the partitions' last units in the same writer, that clears their holder where this
    incarnation still holds them. Only a cluster's PostgreSQL store takes it; every other
    store refuses it (`ConstraintViolation`)."""

    partitions: tuple[int, ...]
    replica_id: str
    incarnation: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SetAsideRow:
    """A cluster's sequencer sets a conversation aside at one member (cluster.md §5.4): the
    member's `conversations` row keeps the reason, so homes refuse new binds to it and a later
    holder of its sequencing partition finds it set aside. A member without a row yet gets
    the foundation (`ON CONFLICT DO NOTHING`) first. Only a cluster's PostgreSQL store takes
    it; every other store refuses it (`ConstraintViolation`)."""

    agent_id: str
    conversation_id: str
    reason: str
    foundation: PutConversation | None = None
    """The member's foundation, for a conversation whose first unit never committed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RefuseIntent:
    """A cluster's sequencer refuses an open intent it will never certify (cluster.md §5.2,
    §5.4: its conversation is set aside, or it was bound with another membership): the
    intent becomes `refused` where it is still `open`, and nothing happens where it is not.
    Only a cluster's PostgreSQL store takes it; every other store refuses it."""

    agent_id: str
    post_id: str


NOT_A_CLUSTER: Final = (
    "releasing partitions and setting conversations aside as rows are a cluster's writes; "
    "this store is not a cluster's"
)
"""Why a store outside a cluster refuses `ReleasePartitions`, `SetAsideRow` and `RefuseIntent`
(a defect in its caller)."""


Write: TypeAlias = (
    PutIdentity
    | PutToken
    | RevokeTokens
    | PutCursor
    | PutConversation
    | PutIntent
    | PutLock
    | PutStaged
    | DeleteStaged
    | PutEvidence
    | PutRecord
    | PutReanchor
    | ResetConversation
    | PruneSettled
    | MoveToLocal
    | PutOutbox
    | SetOutboxState
    | PutDelivery
    | SetDeliveryState
    | PutInboxItem
    | AcknowledgeItem
    | PutOperation
    | PutReceivedRequest
    | DeleteReceivedRequest
    | PutSend
    | BindSend
    | SetSendOutcome
    | ReplaceInboxItem
    | ReleasePartitions
    | SetAsideRow
    | RefuseIntent
)


# --- rows ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class IdentityRow:
    """A hosted agent's identity."""

    agent_id: str
    agent_name: str
    signed_card: bytes
    seed: bytes
    created_at: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationRow:
    """A conversation as one member stores it."""

    conversation_id: str
    descriptor: bytes
    membership_hash: str
    anchor: bytes
    anchor_hash: str
    head: str | None
    depth: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredConversation(ConversationRow):
    """A member's row of a conversation as a cluster's read returns it: with the reason it
    was set aside (cluster.md §5.4), None while it is served."""

    set_aside: str | None = None


def set_aside_reason(rows: Iterable[ConversationRow]) -> str | None:
    """The reason a cluster's sequencer set this conversation aside, from any member's row
    (cluster.md §5.4); None when no row says so (every row outside a cluster)."""
    for row in rows:
        if isinstance(row, StoredConversation) and row.set_aside is not None:
            return row.set_aside
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class IntentRow:
    """A post intent."""

    post_id: str
    conversation_id: str
    bind_seq: int
    intent: bytes
    state: IntentState
    record_hash: str | None
    bound_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class LockRow:
    """A proposal lock."""

    conversation_id: str
    predecessor: str
    action_hash: str
    action: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class StagedRow:
    """A staged record."""

    record_hash: str
    conversation_id: str
    predecessor: str
    record: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class EvidenceRow:
    """A stored statement."""

    conversation_id: str
    subject: str
    signer: str
    kind: EvidenceKind
    statement: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordRow:
    """A certified record."""

    record_hash: str
    conversation_id: str
    depth: int
    author: str
    post_id: str
    record: bytes
    commit_seq: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReanchorRow:
    """A re-anchor candidate or completion."""

    conversation_id: str
    previous_anchor_hash: str
    instance_id: str
    body: bytes
    anchor_hash: str
    completed: bytes | None


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxRow:
    """An outbound envelope."""

    row_id: int
    conversation_id: str
    post_id: str | None
    message_id: str
    envelope: bytes
    state: OutboxState


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryRow:
    """A pending delivery."""

    token: str
    conversation_id: str
    record_hash: str
    commit_seq: int
    projection: bytes
    state: DeliveryState


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxRow:
    """An inbox item."""

    seq: int
    token: str
    item: bytes
    guidance: bytes | None
    state: InboxState
    replacement_token: str | None
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SendRow:
    """An idempotency key's row (engine.md §9.1)."""

    key: str
    request: bytes
    run_id: str
    outcome: bytes | None
    bound: bytes | None = None
    """What the send bound (`BindSend`), None while nothing is."""
    resumable: bool = False
    """Written by schema 3 or later, so `bound` says whether anything was bound; a row
    reserved before (schema 2) is not, and stays indeterminate without an outcome."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSnapshot:
    """Everything an agent's engine and endpoint rebuild from at start (engine.md §8)."""

    conversations: tuple[ConversationRow, ...]
    open_intents: tuple[IntentRow, ...]
    locks: tuple[LockRow, ...]
    staged: tuple[StagedRow, ...]
    evidence: tuple[EvidenceRow, ...]
    reanchors: tuple[ReanchorRow, ...]
    pending_outbox: tuple[OutboxRow, ...]
    pending_deliveries: tuple[DeliveryRow, ...]
    open_operations: tuple[bytes, ...]
    received_requests: tuple[bytes, ...]
    max_bind_seq: int
    max_commit_seq: int
    max_inbox_seq: int
    max_outbox_row: int
    unread: int


def _row_of(row_type: type[RowT], write: DataclassInstance, **fixed: object) -> RowT:
    """The row a write puts: each field of `row_type` is the write's field of the same name
    (a write is its agent key and its row's fields), unless `fixed` gives it."""
    values = {name: getattr(write, name) for name in _field_names(row_type) if name not in fixed}
    values.update(fixed)
    return row_type(**values)


@functools.cache
def _field_names(row_type: type[DataclassInstance]) -> tuple[str, ...]:
    # Looked up once per row type: every write of every commit builds its row through here.
    return tuple(field.name for field in dataclasses.fields(row_type))


def inbox_tombstone(item: bytes) -> bytes:
    """What an acknowledged item keeps: its kind and the ids that name its payload."""
    return tombstone_of(parsed_item(item))


def parsed_item(item: bytes) -> object:
    """A stored item's JSON value, read without the canonical-form proof (the gateway's own
    bytes, read for its tombstone and metrics); None when it does not parse."""
    try:
        return orjson.loads(item)
    except orjson.JSONDecodeError:
        pass
    try:  # what orjson refuses and Python reads (an integer past 64 bits)
        return json.loads(item)
    except ValueError:
        return None


def tombstone_of(value: object) -> bytes:
    """`inbox_tombstone` of an item already parsed (`parsed_item`)."""
    if not isinstance(value, dict):
        return b"{}"
    kept: dict[str, object] = {"kind": value.get("kind")}
    message = value.get("message")
    if isinstance(message, dict) and "postId" in message:
        kept["message"] = {"postId": message["postId"]}
    if "id" in value:
        kept["id"] = value["id"]
    return json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()

"""One hosted agent's certification state machine (engine.md §5).

The `Certifier` is the functional core: synchronous, no I/O, no clock of its own. Each
call changes its in-memory state and appends to an `Effects` value what must happen next:
typed store writes, envelopes to send, posts certified, deliveries created, catch-up
lookups. The shell (`gateway.engine.network`) commits the writes and only then releases
the envelopes and resolves the waiting sends, so nothing leaves the daemon before the state
that produced it is durable (engine.md §5.4 step 5, §5.5). A store failure after the core
changed memory stops the daemon (engine.md §8), which is what makes this safe.

Every member processes its envelopes in Router order, its own proposals included; co-hosted
members of a conversation that crosses daemons take no shortcut. Conversations whose members
are all hosted here are not the Certifier's: `gateway.engine.local` orders them (§5.10).
What a member holds of a conversation and of a bound intent on both paths, with the records
built from them, is `gateway.engine.state`'s `ConversationState` and `BoundIntent`; each path
subclasses them with its own working state. The effect types are `gateway.engine.effects`'.

The module is long (some 1,380 lines) because the state machine is one: proposals,
signatures, staging, durability votes, promotion, re-anchoring and catch-up read and change
the same per-conversation working state (`_Conversation`: locks, evidence, staged records,
waiting proposals, the open re-anchor and catch-up round) under the same invariants (one
lock per predecessor, a durability vote only for a staged record, the head moving only when
a record is promoted), and a split along the protocol's phases would scatter each invariant
over files that then share that private state. What needs none of it lives apart: the
effects in `effects.py`, the state both paths share and the stateless record helpers
(intent rows, post ops, the projection) in `state.py`; only `packet_conversation_id`, which
the Router path alone needs, sits at the end.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar, assert_never

from harness_contract.codec import message_to_json
from harness_contract.ids import RandomId, agent_id_order_key
from harness_contract.jsonvalue import JsonValueError, canonical_json, parse_canonical_json
from harness_contract.kinds import PostKind
from harness_contract.values import Content

from gateway.engine import protocol as p
from gateway.engine.effects import (
    CatchUpQuery,
    Certified,
    Delivered,
    Effects,
    OutboundEnvelope,
)
from gateway.engine.state import (
    BindRefused,
    BoundIntent,
    ConversationPosition,
    ConversationState,
    Identity,
    project,
    router_anchor_from_bytes,
)
from gateway.identity.keys import VerifyCache
from gateway.store.records import (
    AgentSnapshot,
    ConversationRow,
    DeleteStaged,
    DeliveryState,
    EvidenceKind,
    IntentRow,
    IntentState,
    OutboxState,
    PruneSettled,
    PutConversation,
    PutDelivery,
    PutEvidence,
    PutLock,
    PutOutbox,
    PutReanchor,
    PutRecord,
    PutStaged,
    ResetConversation,
    Write,
)

logger = logging.getLogger(__name__)

__all__ = [
    "CATCH_UP_ROUND_TIMEOUT",
    "REPROPOSE_INTERVAL",
    "REPROPOSE_INTERVAL_MAX",
    "WAITING_SIGNATURE_SUBJECTS",
    "Certified",
    "Certifier",
    "Identity",
    "packet_conversation_id",
]
"""`Certified` and `Identity` (from `gateway.engine.effects` and `gateway.engine.state`) are
named here too: they are what a caller of the `Certifier` hands it and gets back."""

REPROPOSE_INTERVAL: Final = 30.0
"""Seconds before a live proposal that neither certified nor saw its head move is sent
again in a fresh envelope; doubles each time up to `REPROPOSE_INTERVAL_MAX` (§5.6)."""
REPROPOSE_INTERVAL_MAX: Final = 600.0
"""Ceiling of the re-proposal interval, in seconds."""
CATCH_UP_ROUND_TIMEOUT: Final = 10.0
"""Seconds a catch-up round waits for the other members' answers (§5.7)."""
WAITING_SIGNATURE_SUBJECTS: Final = 256
"""Action hashes per conversation whose signatures are kept before their proposal arrives.

The set is volatile and losing it is safe (§5.5): members re-send their evidence."""


# --- working state ------------------------------------------------------------------------


@dataclass(eq=False, kw_only=True)
class _Intent(BoundIntent):
    proposed_at: float | None = None
    interval: float = REPROPOSE_INTERVAL


@dataclass(eq=False)
class _Waiting:
    """A POST whose predecessor this member does not hold yet (§5.7)."""

    signed: p.SignedEnvelope
    action: p.PostAction


@dataclass(eq=False)
class _Reanchor:
    body: p.ReanchorBody
    anchor_hash: str
    votes: dict[str, p.SignedStatement] = field(default_factory=dict)


@dataclass(eq=False)
class _CatchUp:
    request: p.CatchUpRequest
    started_at: float
    answered: set[str] = field(default_factory=set)


@dataclass(eq=False, kw_only=True)
class _Conversation(ConversationState):
    locks: dict[str, str] = field(default_factory=dict)
    """Predecessor (`""` for GENESIS) → the ActionHash this member locked."""
    actions: dict[str, p.Action] = field(default_factory=dict)
    """Locked actions by ActionHash."""
    signatures: dict[str, dict[str, p.SignedStatement]] = field(default_factory=dict)
    staged: dict[str, p.ActionCertifiedRecord] = field(default_factory=dict)
    votes: dict[str, dict[str, p.SignedStatement]] = field(default_factory=dict)
    intents: list[_Intent] = field(default_factory=list)
    waiting: dict[str, _Waiting] = field(default_factory=dict)
    reanchor: _Reanchor | None = None
    pending_completions: dict[str, p.CompletedReanchor] = field(default_factory=dict)
    catch_up: _CatchUp | None = None
    recovering: bool = False
    encoded_descriptor: bytes | None = None
    """The descriptor's JCS bytes, encoded once (the store keeps them once per conversation)."""

    def descriptor_bytes(self) -> bytes:
        if self.encoded_descriptor is None:
            self.encoded_descriptor = p.encode(self.descriptor)
        return self.encoded_descriptor


class _ConversationScoped(Protocol):
    """A stored row that belongs to one conversation."""

    @property
    def conversation_id(self) -> str: ...


_RowT = TypeVar("_RowT", bound=_ConversationScoped)
_ObjectT = TypeVar("_ObjectT")


def _sorted_statements(statements: Iterable[p.SignedStatement]) -> tuple[p.SignedStatement, ...]:
    return tuple(sorted(statements, key=lambda item: agent_id_order_key(item.signer_agent_id)))


class Certifier:
    """One hosted agent's certification engine: pure, synchronous, Router-ordered."""

    def __init__(
        self,
        identity: Identity,
        *,
        registry_public_key: str,
        verify_cache: VerifyCache,
        next_bind_seq: int = 1,
        next_commit_seq: int = 1,
        next_outbox_row: int = 1,
    ) -> None:
        self.identity = identity
        self.agent_id = identity.agent_id
        self._registry_key = registry_public_key
        self._cache = verify_cache
        identity.key.remember_in(verify_cache)
        self._next_bind_seq = next_bind_seq
        self._next_commit_seq = next_commit_seq
        self._next_outbox_row = next_outbox_row
        self._conversations: dict[str, _Conversation] = {}
        self.pending_outbox: list[OutboundEnvelope] = []
        """Envelopes stored before a restart and not known accepted: sent again as retries."""
        self.instance_id: str | None = None
        """The Router instance this member reads from (None until anchored)."""
        self.set_aside: dict[str, str] = {}
        """Conversations whose stored rows failed a check at start, and why: never served."""
        self.is_local: Callable[[str], bool] = lambda conversation_id: False
        """Whether a conversation is in local order (§5.10 Keep-off: no Router step)."""

    def reserve_bind_seq(self) -> int:
        """The next bind sequence number (local order binds under this agent's counter)."""
        seq = self._next_bind_seq
        self._next_bind_seq += 1
        return seq

    def reserve_commit_seq(self) -> int:
        """The next commit sequence number; a gap left by a failed unit is harmless."""
        seq = self._next_commit_seq
        self._next_commit_seq += 1
        return seq

    def _reserve_outbox_row(self) -> int:
        row_id = self._next_outbox_row
        self._next_outbox_row += 1
        return row_id

    # --- rehydration ---------------------------------------------------------------------

    def restore(
        self, snapshot: AgentSnapshot, *, local_instance_id: str | None = None
    ) -> tuple[list[ConversationRow], list[IntentRow]]:
        """Rebuild memory from the store (engine.md §8 Rehydration).

        Returns the rows of conversations in local order (anchored on `local_instance_id`)
        and their open intents, which `LocalOrder` serves. A conversation any of whose rows
        fails a check is set aside (logged with agent and conversation); the rest is served.
        """
        self._next_bind_seq = snapshot.max_bind_seq + 1
        self._next_commit_seq = snapshot.max_commit_seq + 1
        self._next_outbox_row = snapshot.max_outbox_row + 1
        local: set[str] = set()
        local_rows: list[ConversationRow] = []
        for row in snapshot.conversations:
            try:
                loaded = self._conversation_from_row(row)
            except (p.ProtocolError, JsonValueError) as error:
                self._set_aside_at_start(row.conversation_id, "conversation", error)
                continue
            if self._anchor_instance(loaded) == local_instance_id:
                local.add(row.conversation_id)
                local_rows.append(row)
            else:
                self._conversations[row.conversation_id] = loaded
        for held, lock, action in self._restored_rows(
            snapshot.locks,
            "proposal lock",
            lambda lock: p.action_from_json(parse_canonical_json(lock.action)),
        ):
            held.locks[lock.predecessor] = lock.action_hash
            held.actions[lock.action_hash] = action
        for held, _, record in self._restored_rows(
            snapshot.staged,
            "staged record",
            lambda staged: p.decode(staged.record, p.ActionCertifiedRecord),
        ):
            held.staged[record.record_hash] = record
        for held, evidence, signed in self._restored_rows(
            snapshot.evidence,
            "evidence",
            lambda evidence: p.decode(evidence.statement, p.SignedStatement),
        ):
            if evidence.kind is EvidenceKind.ACTION:
                held.signatures.setdefault(evidence.subject, {})[evidence.signer] = signed
            elif evidence.kind is EvidenceKind.DURABILITY:
                held.votes.setdefault(evidence.subject, {})[evidence.signer] = signed
        for reanchor in snapshot.reanchors:
            conversation = self._conversations.get(reanchor.conversation_id)
            if (
                conversation is not None
                and reanchor.completed is None
                and reanchor.previous_anchor_hash == conversation.anchor_hash
            ):
                try:
                    body = p.decode(reanchor.body, p.ReanchorBody)
                except p.ProtocolError as error:
                    self._set_aside_at_start(reanchor.conversation_id, "re-anchor", error)
                    continue
                conversation.reanchor = _Reanchor(body=body, anchor_hash=reanchor.anchor_hash)
        self.pending_outbox = [
            OutboundEnvelope(
                agent_id=self.agent_id,
                row_id=row.row_id,
                conversation_id=row.conversation_id,
                post_id=row.post_id,
                signed_envelope=row.envelope,
                retry=True,
            )
            for row in snapshot.pending_outbox
            if row.conversation_id in self._conversations
        ]
        local_intents: list[IntentRow] = []
        for intent_row in snapshot.open_intents:
            if intent_row.conversation_id in local:
                local_intents.append(intent_row)
                continue
            conversation = self._conversations.get(intent_row.conversation_id)
            if conversation is None:
                if intent_row.conversation_id not in self.set_aside:
                    logger.error(
                        "open intent without its conversation agent=%s post_id=%s",
                        self.identity.agent_name,
                        intent_row.post_id,
                    )
                continue
            try:
                intent = p.decode(intent_row.intent, p.PostIntent)
            except p.ProtocolError as error:
                self._set_aside_at_start(intent_row.conversation_id, "post intent", error)
                continue
            conversation.intents.append(
                _Intent(
                    post_id=intent_row.post_id,
                    intent=intent,
                    bind_seq=intent_row.bind_seq,
                    bound_at=intent_row.bound_at,
                    resumed=True,
                )
            )
        return local_rows, local_intents

    def _restored_rows(
        self, rows: Iterable[_RowT], what: str, decode: Callable[[_RowT], _ObjectT]
    ) -> Iterator[tuple[_Conversation, _RowT, _ObjectT]]:
        """Each row of a conversation still being restored, with that conversation and the
        object `decode` read from the row; a row that fails to decode (`ProtocolError`, or
        `JsonValueError` before any object) sets its conversation aside as `what`."""
        for row in rows:
            conversation = self._conversations.get(row.conversation_id)
            if conversation is None:
                continue
            try:
                decoded = decode(row)
            except (p.ProtocolError, JsonValueError) as error:
                self._set_aside_at_start(row.conversation_id, what, error)
                continue
            yield conversation, row, decoded

    def _set_aside_at_start(self, conversation_id: str, what: str, error: Exception) -> None:
        """A stored row of this conversation fails a check: never serve it, say so loudly."""
        detail = getattr(error, "detail", str(error))
        self._conversations.pop(conversation_id, None)
        if conversation_id not in self.set_aside:
            self.set_aside[conversation_id] = f"stored {what} failed a check: {detail}"
            logger.error(
                "conversation set aside agent=%s conversation=%s: stored %s failed a check: %s",
                self.identity.agent_name,
                conversation_id,
                what,
                detail,
            )

    def _conversation_from_row(self, row: ConversationRow) -> _Conversation:
        descriptor = p.decode(row.descriptor, p.MembershipDescriptor)
        return _Conversation.from_row(row, descriptor, router_anchor_from_bytes(row.anchor))

    @property
    def open_intents(self) -> int:
        """Bound intents not yet certified."""
        return sum(len(conversation.intents) for conversation in self._conversations.values())

    def open_intents_by_kind(self) -> dict[PostKind, int]:
        """Bound intents not yet certified, by conversation kind."""
        counts = dict.fromkeys(PostKind, 0)
        for conversation in self._conversations.values():
            counts[conversation.kind] += len(conversation.intents)
        return counts

    def conversation_ids(self) -> list[str]:
        """Every conversation this member stores."""
        return list(self._conversations)

    def knows(self, conversation_id: str) -> bool:
        """True when the conversation's foundation is stored."""
        return conversation_id in self._conversations

    def membership_of(self, conversation_id: str) -> p.MembershipDescriptor | None:
        """The stored descriptor of a conversation."""
        conversation = self._conversations.get(conversation_id)
        return None if conversation is None else conversation.descriptor

    def position(self, conversation_id: str) -> ConversationPosition:
        """The member's head and current anchor in a stored conversation."""
        conversation = self._conversations[conversation_id]
        return ConversationPosition(
            head=conversation.head,
            depth=conversation.depth,
            anchor=conversation.anchor,
            anchor_hash=conversation.anchor_hash,
        )

    def forget(self, conversation_id: str) -> list[IntentRow]:
        """Drop a conversation from the Router path (it moved to local order or was set
        aside); returns its open intents as stored rows."""
        conversation = self._conversations.pop(conversation_id, None)
        if conversation is None:
            return []
        return [self._intent_row(intent) for intent in conversation.intents]

    def complete_open_intent(self, conversation_id: str, post_id: str) -> IntentRow | None:
        """Remove an open intent whose record another member already promoted."""
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            return None
        for intent in conversation.intents:
            if intent.post_id == post_id:
                conversation.intents.remove(intent)
                return self._intent_row(intent)
        return None

    def _intent_row(self, intent: _Intent) -> IntentRow:
        return IntentRow(
            post_id=intent.post_id,
            conversation_id=intent.intent.conversation_id,
            bind_seq=intent.bind_seq,
            intent=p.encode(intent.intent),
            state=IntentState.OPEN,
            record_hash=None,
            bound_at=intent.bound_at,
        )

    def rewrap(self, signed_envelope: bytes) -> tuple[bytes, str]:
        """The same body in a fresh outer envelope (new MessageId, re-signed), after the
        Router forgot the old retry identity (engine.md §4: inner statements are never
        re-signed). Returns the new bytes and MessageId."""
        signed = p.decode_signed_envelope(signed_envelope)
        envelope = dataclasses.replace(signed.envelope, message_id=RandomId.MESSAGE.mint())
        return p.encode(p.sign_envelope(self.identity.key, envelope)), envelope.message_id

    def was_proposed(self, post_id: str) -> bool:
        """True when the open intent's proposal was queued (it is or was live)."""
        return any(
            intent.post_id == post_id and intent.proposed_at is not None
            for conversation in self._conversations.values()
            for intent in conversation.intents
        )

    # --- binding (engine.md §6 steps 7-8) ------------------------------------------------

    def bind(
        self, descriptor: p.MembershipDescriptor, content: Content, *, now: float
    ) -> tuple[str, Effects]:
        """Mint a PostId and bind its intent; propose it if it is live.

        Returns the PostId and the effects to commit (the intent, the foundation of a new
        conversation, the proposal's outbox row). Raises `BindRefused` when the stored
        conversation has another membership. Call `unbind` if the commit definitely failed.
        """
        if self.instance_id is None:
            raise BindRefused("the member is not anchored on a Router instance")
        if descriptor.conversation_id in self.set_aside:
            raise BindRefused("the conversation is set aside")
        effects = Effects()
        conversation = self._conversations.get(descriptor.conversation_id)
        membership_hash = p.membership_hash(descriptor)
        if conversation is None:
            conversation = _Conversation.genesis(descriptor, membership_hash, self.instance_id)
            self._conversations[conversation.id] = conversation
            effects.writes.append(self._conversation_write(conversation))
        elif conversation.membership_hash != membership_hash:
            raise BindRefused("the stored conversation has another membership")
        post_id = RandomId.POST.mint()
        intent = p.PostIntent(
            conversation_id=conversation.id,
            membership_hash=membership_hash,
            author_agent_id=self.agent_id,
            post_id=post_id,
            content=content,
        )
        bound = _Intent(
            post_id=post_id,
            intent=intent,
            bind_seq=self.reserve_bind_seq(),
            bound_at=now,
            resumed=False,
        )
        conversation.intents.append(bound)
        effects.writes.append(bound.write(self.agent_id, IntentState.OPEN, None))
        if conversation.intents[0] is bound and not conversation.recovering:
            self._propose(conversation, bound, effects, now=now)
        return post_id, effects

    def unbind(self, post_id: str) -> None:
        """Forget an intent whose bind definitely did not commit."""
        for conversation_id, conversation in list(self._conversations.items()):
            conversation.intents = [i for i in conversation.intents if i.post_id != post_id]
            if conversation.head is None and not conversation.intents and not conversation.locks:
                del self._conversations[conversation_id]

    def _conversation_write(self, conversation: _Conversation) -> Write:
        return PutConversation(
            agent_id=self.agent_id,
            conversation_id=conversation.id,
            descriptor=conversation.descriptor_bytes(),
            membership_hash=conversation.membership_hash,
            anchor=p.encode(conversation.anchor),
            anchor_hash=conversation.anchor_hash,
            head=conversation.head,
            depth=conversation.depth,
        )

    def _propose(
        self, conversation: _Conversation, intent: _Intent, effects: Effects, *, now: float
    ) -> None:
        """Queue the live intent's proposal on the current head under the current anchor."""
        action = conversation.action_on(conversation.head, intent.intent)
        if action is None:
            return  # an empty conversation is re-anchored by the genesis swap only
        intent.proposed_at = now
        self._send(conversation, p.ActionProposal(action=action), effects, post_id=intent.post_id)

    def _send(
        self,
        conversation: _Conversation,
        packet: p.Packet,
        effects: Effects,
        *,
        post_id: str | None = None,
    ) -> None:
        signed = p.seal_envelope(
            self.identity.key,
            sender_agent_id=self.agent_id,
            packet=packet,
            member_agent_ids=conversation.member_ids,
        )
        data = p.encode(signed)
        row_id = self._reserve_outbox_row()
        effects.writes.append(
            PutOutbox(
                agent_id=self.agent_id,
                row_id=row_id,
                conversation_id=conversation.id,
                post_id=post_id,
                message_id=signed.envelope.message_id,
                envelope=data,
                state=OutboxState.PENDING,
            )
        )
        effects.envelopes.append(
            OutboundEnvelope(
                agent_id=self.agent_id,
                row_id=row_id,
                conversation_id=conversation.id,
                post_id=post_id,
                signed_envelope=data,
            )
        )

    # --- receiving (engine.md §5.4-§5.5) -------------------------------------------------

    def receive(
        self, signed: p.SignedEnvelope, packet: p.Packet, effects: Effects, *, now: float
    ) -> None:
        """Process one envelope addressed to this member, in Router order.

        Invalid envelopes are dropped without a state change (logged at debug level), and
        so is anything about a local or set-aside conversation (§5.10 Keep-off)."""
        conversation_id = packet_conversation_id(signed, packet)
        if conversation_id in self.set_aside or self.is_local(conversation_id):
            logger.info(
                "envelope for a local or set-aside conversation dropped agent=%s conversation=%s",
                self.identity.agent_name,
                conversation_id,
            )
            return
        try:
            match packet:
                case p.ActionProposal(action=action):
                    self._on_proposal(signed, action, effects, now=now)
                case p.SignedStatement():
                    self._on_statement(signed, packet, effects, now=now)
                case p.CatchUpRequest():
                    self._on_catch_up_request(signed, packet, effects, now=now)
                case p.CatchUpPage() | p.CatchUpIncomplete():
                    self._on_catch_up_answer(signed, packet, effects, now=now)
                case p.CompletedReanchor():
                    self._on_completed_reanchor(signed, packet, effects, now=now)
                case _:
                    assert_never(packet)
        except p.ProtocolError as error:
            logger.debug("envelope dropped agent=%s: %s", self.identity.agent_name, error.detail)

    def _on_proposal(
        self, signed: p.SignedEnvelope, action: p.Action, effects: Effects, *, now: float
    ) -> None:
        conversation = self._conversations.get(action.conversation_id)
        new_conversation = False
        match action:
            case p.GenesisAction(membership=membership, anchor=anchor):
                if conversation is None:
                    p.verify_membership(membership, self._registry_key, cache=self._cache)
                    if membership.card_of(self.agent_id) is None:
                        raise p.ProtocolError("this agent is not a member")
                    self._check_proposal(signed, action, membership)
                    if anchor.router_instance_id != self.instance_id:
                        return  # not gap-free: another instance's GENESIS
                    conversation = _Conversation.founded(
                        membership, p.membership_hash(membership), anchor
                    )
                    new_conversation = True
                else:
                    self._check_proposal(signed, action, conversation.descriptor)
                    if conversation.head is not None or anchor != conversation.anchor:
                        return  # not gap-free
                predecessor = ""
            case p.PostAction(previous_record_hash=previous):
                if conversation is None:
                    return  # unknown conversation: a POST cannot start it
                self._check_proposal(signed, action, conversation.descriptor)
                if previous != conversation.head or action.anchor_hash != conversation.anchor_hash:
                    self._wait(conversation, signed, action, effects, now=now)
                    return
                predecessor = previous
            case _:
                assert_never(action)
        self._lock_and_sign(
            conversation, predecessor, action, effects, new_conversation=new_conversation, now=now
        )

    def _check_proposal(
        self, signed: p.SignedEnvelope, action: p.Action, membership: p.MembershipDescriptor
    ) -> None:
        p.check_action(action, membership)
        p.check_envelope(
            signed, p.ActionProposal(action=action), membership=membership, cache=self._cache
        )

    def _lock_and_sign(
        self,
        conversation: _Conversation,
        predecessor: str,
        action: p.Action,
        effects: Effects,
        *,
        new_conversation: bool,
        now: float,
    ) -> None:
        hash_ = p.action_hash(action)
        locked = conversation.locks.get(predecessor)
        if locked is not None and locked != hash_:
            return  # an honest member signs only the first candidate per predecessor
        if locked == hash_:
            # A proposal delivered again: re-queue the stored evidence, same bytes.
            own = conversation.signatures.get(hash_, {}).get(self.agent_id)
            if own is not None:
                self._send(conversation, own, effects)
            return
        if new_conversation:
            self._conversations[conversation.id] = conversation
            effects.writes.append(self._conversation_write(conversation))
        conversation.locks[predecessor] = hash_
        conversation.actions[hash_] = action
        statement = p.sign_statement(
            self.identity.key, p.ActionSignature(signer_agent_id=self.agent_id, action_hash=hash_)
        )
        effects.writes.append(
            PutLock(
                agent_id=self.agent_id,
                conversation_id=conversation.id,
                predecessor=predecessor,
                action_hash=hash_,
                action=p.encode(action),
            )
        )
        effects.writes.append(
            self._evidence_write(conversation, hash_, statement, EvidenceKind.ACTION)
        )
        conversation.signatures.setdefault(hash_, {})[self.agent_id] = statement
        self._send(conversation, statement, effects)
        self._maybe_stage(conversation, hash_, effects, now=now)

    def _evidence_write(
        self,
        conversation: _Conversation,
        subject: str,
        statement: p.SignedStatement,
        kind: EvidenceKind,
    ) -> Write:
        return PutEvidence(
            agent_id=self.agent_id,
            conversation_id=conversation.id,
            subject=subject,
            signer=statement.signer_agent_id,
            kind=kind,
            statement=p.encode(statement),
        )

    def _wait(
        self,
        conversation: _Conversation,
        signed: p.SignedEnvelope,
        action: p.PostAction,
        effects: Effects,
        *,
        now: float,
    ) -> None:
        """Keep a POST on a predecessor not held (one per author, the later replacing)."""
        author = action.post_intent.author_agent_id
        conversation.waiting[author] = _Waiting(signed=signed, action=action)
        self._maybe_catch_up_for_waiting(conversation, effects, now=now)

    def _maybe_catch_up_for_waiting(
        self, conversation: _Conversation, effects: Effects, *, now: float
    ) -> None:
        # Once faults_tolerated(n) + 1 distinct members signed a waiting proposal, at least
        # one correct member holds its predecessor: ask for it (§5.7).
        threshold = p.faults_tolerated(conversation.size) + 1
        for waiting in conversation.waiting.values():
            signers = conversation.signatures.get(p.action_hash(waiting.action), {})
            if (
                len(signers) >= threshold
                and waiting.action.previous_record_hash != conversation.head
            ):
                self._start_catch_up(conversation, effects, now=now)
                return

    def _on_statement(
        self,
        signed: p.SignedEnvelope,
        statement: p.SignedStatement,
        effects: Effects,
        *,
        now: float,
    ) -> None:
        conversation_id = p.conversation_id(signed.envelope.recipient_agent_ids)
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            return
        p.check_envelope(signed, statement, membership=conversation.descriptor, cache=self._cache)
        if not p.verify_member_statement(statement, conversation.descriptor, cache=self._cache):
            raise p.ProtocolError("statement signature invalid")
        inner = statement.statement
        signer = statement.signer_agent_id
        match inner:
            case p.ActionSignature(action_hash=hash_):
                held = conversation.signatures.setdefault(hash_, {})
                if signer in held:
                    return
                held[signer] = statement
                self._bound_waiting_signatures(conversation)
                if hash_ in conversation.actions:
                    self._maybe_stage(conversation, hash_, effects, now=now)
                else:
                    self._maybe_catch_up_for_waiting(conversation, effects, now=now)
            case p.DurabilityVote(record_hash=record_hash):
                if (
                    inner.conversation_id != conversation.id
                    or inner.membership_hash != conversation.membership_hash
                ):
                    raise p.ProtocolError("durability vote for another conversation")
                held = conversation.votes.setdefault(record_hash, {})
                if signer in held:
                    return
                held[signer] = statement
                self._maybe_promote(conversation, record_hash, effects, now=now)
            case p.ReanchorVote(anchor_hash=hash_, reanchor=body):
                self._on_reanchor_vote(conversation, statement, hash_, body, effects, now=now)
            case p.CatchUpAttestation():
                raise p.ProtocolError("an attestation travels only inside a catch-up answer")
            case _:
                assert_never(inner)

    def _bound_waiting_signatures(self, conversation: _Conversation) -> None:
        if len(conversation.signatures) <= WAITING_SIGNATURE_SUBJECTS:
            return
        for subject in list(conversation.signatures):
            if len(conversation.signatures) <= WAITING_SIGNATURE_SUBJECTS:
                break
            if subject not in conversation.actions:
                del conversation.signatures[subject]

    def _maybe_stage(
        self, conversation: _Conversation, hash_: str, effects: Effects, *, now: float
    ) -> None:
        action = conversation.actions.get(hash_)
        if action is None:
            return
        predecessor = action.previous_record_hash or ""
        if (conversation.head or "") != predecessor or conversation.locks.get(predecessor) != hash_:
            return
        if any(
            staged.record_core.action.previous_record_hash == action.previous_record_hash
            for staged in conversation.staged.values()
        ):
            return  # a member votes for at most one successor of a head
        if isinstance(action, p.PostAction) and action.anchor_hash != conversation.anchor_hash:
            return
        if conversation.reanchor is not None and conversation.head is not None:
            return  # after voting to re-anchor it never stages under the old anchor
        signers = conversation.signatures.get(hash_, {})
        if not p.action_quorum_met(action, signers.keys(), conversation.size):
            return
        staged = conversation.action_certified_record(
            action,
            p.Certificate(
                kind=p.CertificateKind.ACTION,
                subject=hash_,
                entries=_sorted_statements(signers.values()),
            ),
        )
        record_hash = staged.record_hash
        conversation.staged[record_hash] = staged
        vote = p.sign_statement(
            self.identity.key,
            p.DurabilityVote(
                signer_agent_id=self.agent_id,
                conversation_id=conversation.id,
                membership_hash=conversation.membership_hash,
                record_hash=record_hash,
            ),
        )
        conversation.votes.setdefault(record_hash, {})[self.agent_id] = vote
        effects.writes.append(
            PutStaged(
                agent_id=self.agent_id,
                record_hash=record_hash,
                conversation_id=conversation.id,
                predecessor=predecessor,
                record=p.encode(staged),
            )
        )
        effects.writes.append(
            self._evidence_write(conversation, record_hash, vote, EvidenceKind.DURABILITY)
        )
        self._send(conversation, vote, effects)
        self._maybe_promote(conversation, record_hash, effects, now=now)

    def _maybe_promote(
        self, conversation: _Conversation, record_hash: str, effects: Effects, *, now: float
    ) -> None:
        staged = conversation.staged.get(record_hash)
        if staged is None:
            return
        votes = conversation.votes.get(record_hash, {})
        if len(votes) < p.quorum(conversation.size):
            return
        record = p.CertifiedRecord(
            action_certified_record=staged,
            durability_certificate=p.Certificate(
                kind=p.CertificateKind.DURABILITY,
                subject=record_hash,
                entries=_sorted_statements(votes.values()),
            ),
        )
        effects.writes.append(DeleteStaged(agent_id=self.agent_id, record_hash=record_hash))
        self._promote(conversation, record, effects, now=now)

    def _promote(
        self,
        conversation: _Conversation,
        record: p.CertifiedRecord,
        effects: Effects,
        *,
        now: float,
    ) -> None:
        """Store a certified record as the new head (§5.5 promotion, also from catch-up)."""
        staged = record.action_certified_record
        record_hash = staged.record_hash
        action = staged.record_core.action
        intent = action.post_intent
        conversation.depth += 1
        conversation.head = record_hash
        commit_seq = self.reserve_commit_seq()
        effects.writes.append(
            PutRecord(
                agent_id=self.agent_id,
                record_hash=record_hash,
                conversation_id=conversation.id,
                depth=conversation.depth,
                author=intent.author_agent_id,
                post_id=intent.post_id,
                record=p.encode(record),
                commit_seq=commit_seq,
                membership=conversation.descriptor_bytes(),
            )
        )
        effects.writes.append(self._conversation_write(conversation))
        effects.writes.append(
            PruneSettled(agent_id=self.agent_id, conversation_id=conversation.id, head=record_hash)
        )
        if intent.author_agent_id == self.agent_id:
            finished = next((i for i in conversation.intents if i.post_id == intent.post_id), None)
            if finished is not None:
                conversation.intents.remove(finished)
                effects.writes.append(
                    finished.write(self.agent_id, IntentState.COMPLETED, record_hash)
                )
                effects.certified.append(
                    finished.certified(self.agent_id, record_hash, conversation.kind)
                )
            else:
                effects.certified.append(
                    Certified(
                        agent_id=self.agent_id,
                        post_id=intent.post_id,
                        record_hash=record_hash,
                        bound_at=now,
                        kind=conversation.kind,
                        resumed=True,
                    )
                )
        else:
            message = project(conversation.descriptor, intent)
            delivery = PutDelivery(
                agent_id=self.agent_id,
                token=RandomId.DELIVERY.mint(),
                conversation_id=conversation.id,
                record_hash=record_hash,
                commit_seq=commit_seq,
                projection=canonical_json(message_to_json(message)),
                state=DeliveryState.PENDING,
            )
            effects.writes.append(delivery)
            effects.delivered.append(Delivered(delivery, message))
            effects.deliveries.add(self.agent_id)
        # Everything about older heads is settled now.
        conversation.staged.clear()
        conversation.votes = {record_hash: conversation.votes.get(record_hash, {})}
        conversation.signatures = {
            hash_: signers
            for hash_, signers in conversation.signatures.items()
            if hash_ not in conversation.actions or hash_ == staged.record_core.action_hash
        }
        conversation.locks = {
            predecessor: locked
            for predecessor, locked in conversation.locks.items()
            if predecessor == record_hash
        }
        conversation.actions = {
            hash_: held
            for hash_, held in conversation.actions.items()
            if hash_ in conversation.locks.values()
        }
        self._after_head_moved(conversation, effects, now=now)

    def _after_head_moved(
        self, conversation: _Conversation, effects: Effects, *, now: float
    ) -> None:
        # Rebase: the live intent goes again on the new head with the same PostId (§5.6).
        if conversation.intents and not conversation.recovering:
            self._propose(conversation, conversation.intents[0], effects, now=now)
        # Waiting proposals whose predecessor is now held, in their original order.
        ready = [
            waiting
            for waiting in conversation.waiting.values()
            if waiting.action.previous_record_hash == conversation.head
            and waiting.action.anchor_hash == conversation.anchor_hash
        ]
        for waiting in ready:
            author = waiting.action.post_intent.author_agent_id
            conversation.waiting.pop(author, None)
            self._lock_and_sign(
                conversation,
                waiting.action.previous_record_hash,
                waiting.action,
                effects,
                new_conversation=False,
                now=now,
            )
        pending = conversation.pending_completions.pop(conversation.head or "", None)
        if pending is not None:
            self._adopt_reanchor(conversation, pending, effects, now=now)

    # --- Router restart and recovery (engine.md §5.9) ------------------------------------

    def anchor(self, instance_id: str) -> None:
        """Learn the Router instance this member reads from."""
        self.instance_id = instance_id

    def recover(
        self, instance_id: str, effects: Effects, *, now: float, resumed_cursor: bool
    ) -> None:
        """Recover every conversation after a restart or a new Router instance."""
        self.instance_id = instance_id
        for conversation in self._conversations.values():
            conversation.waiting.clear()
            conversation.catch_up = None
            if conversation.head is None:
                self._swap_genesis(conversation, effects, now=now)
            elif self._anchor_instance(conversation) != instance_id:
                # Catch up first (§5.9): another member may hold a record or a completed
                # re-anchor this one missed; the vote goes out meanwhile and is replaced
                # if catch-up moves the head or the anchor.
                self._start_catch_up(conversation, effects, now=now)
                self._start_reanchor(conversation, effects, now=now)
            else:
                if not resumed_cursor:
                    self._start_catch_up(conversation, effects, now=now)
                self._disseminate(conversation, effects, now=now)

    def _anchor_instance(self, conversation: _Conversation) -> str:
        match conversation.anchor:
            case p.GenesisAnchor(router_instance_id=instance):
                return instance
            case p.CompletedReanchor(reanchor=body):
                return body.router_instance_id
            case _:
                assert_never(conversation.anchor)

    def _swap_genesis(self, conversation: _Conversation, effects: Effects, *, now: float) -> None:
        """Empty conversation: one transaction drops locks, staged records and evidence,
        names the new instance in the GenesisAnchor and keeps every intent."""
        assert self.instance_id is not None
        if self._anchor_instance(conversation) != self.instance_id:
            anchor = p.GenesisAnchor(
                conversation_id=conversation.id,
                membership_hash=conversation.membership_hash,
                router_instance_id=self.instance_id,
            )
            conversation.anchor = anchor
            conversation.anchor_hash = p.anchor_hash(anchor)
            conversation.locks.clear()
            conversation.actions.clear()
            conversation.signatures.clear()
            conversation.staged.clear()
            conversation.votes.clear()
            effects.writes.append(
                ResetConversation(agent_id=self.agent_id, conversation_id=conversation.id)
            )
            effects.writes.append(self._conversation_write(conversation))
        conversation.recovering = False
        if conversation.intents:
            self._propose(conversation, conversation.intents[0], effects, now=now)

    def _start_reanchor(self, conversation: _Conversation, effects: Effects, *, now: float) -> None:
        """Non-empty conversation on an older instance: vote to re-anchor at the head."""
        assert self.instance_id is not None
        assert conversation.head is not None
        conversation.recovering = True
        body = p.ReanchorBody(
            conversation_id=conversation.id,
            membership_hash=conversation.membership_hash,
            previous_anchor_hash=conversation.anchor_hash,
            selected_record_hash=conversation.head,
            router_instance_id=self.instance_id,
        )
        hash_ = p.anchor_hash(body)
        if conversation.reanchor is None or conversation.reanchor.anchor_hash != hash_:
            conversation.reanchor = _Reanchor(body=body, anchor_hash=hash_)
        vote = p.sign_statement(
            self.identity.key,
            p.ReanchorVote(signer_agent_id=self.agent_id, anchor_hash=hash_, reanchor=body),
        )
        conversation.reanchor.votes[self.agent_id] = vote
        effects.writes.append(
            PutReanchor(
                agent_id=self.agent_id,
                conversation_id=conversation.id,
                previous_anchor_hash=body.previous_anchor_hash,
                instance_id=body.router_instance_id,
                body=p.encode(body),
                anchor_hash=hash_,
                completed=None,
            )
        )
        effects.writes.append(
            self._evidence_write(conversation, hash_, vote, EvidenceKind.REANCHOR)
        )
        self._send(conversation, vote, effects)
        self._maybe_complete_reanchor(conversation, effects, now=now)

    def _on_reanchor_vote(
        self,
        conversation: _Conversation,
        statement: p.SignedStatement,
        hash_: str,
        body: p.ReanchorBody,
        effects: Effects,
        *,
        now: float,
    ) -> None:
        if body.conversation_id != conversation.id or p.anchor_hash(body) != hash_:
            raise p.ProtocolError("re-anchor vote names another conversation or hash")
        if body.router_instance_id != self.instance_id:
            return
        if body.previous_anchor_hash != conversation.anchor_hash:
            # The voter re-anchors from an anchor this member does not hold: one of the two
            # is behind on a completed re-anchor (a crash between two adoptions). Catch-up
            # brings the one behind the CompletedReanchor; the one ahead answers it.
            self._start_catch_up(conversation, effects, now=now)
            return
        if body.selected_record_hash != conversation.head:
            # A vote naming a record this member lacks: catch up first (§5.9).
            self._start_catch_up(conversation, effects, now=now)
            return
        if conversation.reanchor is None:
            # Another member recovered first: this member follows on the same instance.
            self._start_reanchor(conversation, effects, now=now)
        if conversation.reanchor is None or conversation.reanchor.anchor_hash != hash_:
            return
        conversation.reanchor.votes[statement.signer_agent_id] = statement
        self._maybe_complete_reanchor(conversation, effects, now=now)

    def _maybe_complete_reanchor(
        self, conversation: _Conversation, effects: Effects, *, now: float
    ) -> None:
        reanchor = conversation.reanchor
        if reanchor is None or len(reanchor.votes) < p.quorum(conversation.size):
            return
        completed = p.CompletedReanchor(
            anchor_hash=reanchor.anchor_hash,
            reanchor=reanchor.body,
            certificate=p.Certificate(
                kind=p.CertificateKind.REANCHOR,
                subject=reanchor.anchor_hash,
                entries=_sorted_statements(reanchor.votes.values()),
            ),
        )
        self._adopt_reanchor(conversation, completed, effects, now=now)
        # Relayed once to all members, so a member that missed votes adopts it too.
        self._send(conversation, completed, effects)

    def _on_completed_reanchor(
        self,
        signed: p.SignedEnvelope,
        completed: p.CompletedReanchor,
        effects: Effects,
        *,
        now: float,
    ) -> None:
        conversation = self._conversations.get(completed.reanchor.conversation_id)
        if conversation is None:
            return
        p.check_envelope(signed, completed, membership=conversation.descriptor, cache=self._cache)
        p.check_completed_reanchor(completed, membership=conversation.descriptor, cache=self._cache)
        if completed.anchor_hash == conversation.anchor_hash:
            return
        if completed.reanchor.previous_anchor_hash != conversation.anchor_hash:
            return
        if completed.reanchor.selected_record_hash != conversation.head:
            conversation.pending_completions[completed.reanchor.selected_record_hash] = completed
            self._start_catch_up(conversation, effects, now=now)
            return
        self._adopt_reanchor(conversation, completed, effects, now=now)

    def _adopt_reanchor(
        self,
        conversation: _Conversation,
        completed: p.CompletedReanchor,
        effects: Effects,
        *,
        now: float,
    ) -> None:
        if completed.reanchor.previous_anchor_hash != conversation.anchor_hash:
            return
        conversation.anchor = completed
        conversation.anchor_hash = completed.anchor_hash
        conversation.reanchor = None
        conversation.recovering = False
        # A lock at the selected head naming an old-anchor action is superseded.
        head = conversation.head or ""
        locked = conversation.locks.get(head)
        if locked is not None:
            action = conversation.actions.get(locked)
            if isinstance(action, p.PostAction) and action.anchor_hash != completed.anchor_hash:
                del conversation.locks[head]
        conversation.staged.clear()
        effects.writes.append(
            PutReanchor(
                agent_id=self.agent_id,
                conversation_id=conversation.id,
                previous_anchor_hash=completed.reanchor.previous_anchor_hash,
                instance_id=completed.reanchor.router_instance_id,
                body=p.encode(completed.reanchor),
                anchor_hash=completed.anchor_hash,
                completed=p.encode(completed),
            )
        )
        effects.writes.append(self._conversation_write(conversation))
        effects.writes.append(
            PruneSettled(
                agent_id=self.agent_id, conversation_id=conversation.id, head=conversation.head
            )
        )
        if (
            self._anchor_instance(conversation) != self.instance_id
            and conversation.head is not None
        ):
            # Adopted late (by relay or catch-up) an anchor of an older instance: re-anchor
            # again on the instance this member reads from now.
            self._start_reanchor(conversation, effects, now=now)
            return
        if conversation.intents:
            self._propose(conversation, conversation.intents[0], effects, now=now)

    # --- dissemination obligations (§5.8) ------------------------------------------------

    def _disseminate(self, conversation: _Conversation, effects: Effects, *, now: float) -> None:
        """Re-send own evidence on unpromoted subjects, the staged re-anchor vote and the
        live proposal, as stored (receivers deduplicate)."""
        for signers in conversation.signatures.values():
            own = signers.get(self.agent_id)
            if own is not None:
                self._send(conversation, own, effects)
        for record_hash in conversation.staged:
            own = conversation.votes.get(record_hash, {}).get(self.agent_id)
            if own is not None:
                self._send(conversation, own, effects)
        if conversation.reanchor is not None:
            own = conversation.reanchor.votes.get(self.agent_id)
            if own is not None:
                self._send(conversation, own, effects)
        if conversation.intents and not conversation.recovering:
            self._propose(conversation, conversation.intents[0], effects, now=now)

    def tick(self, effects: Effects, *, now: float) -> None:
        """Timers: re-propose a stalled live intent (30 s doubling to 10 min) and end
        catch-up rounds that timed out."""
        for conversation in self._conversations.values():
            if (
                conversation.catch_up is not None
                and now - conversation.catch_up.started_at >= CATCH_UP_ROUND_TIMEOUT
            ):
                conversation.catch_up = None
            if not conversation.intents or conversation.recovering:
                continue
            live = conversation.intents[0]
            if live.proposed_at is None or now - live.proposed_at >= live.interval:
                if live.proposed_at is not None:
                    live.interval = min(live.interval * 2, REPROPOSE_INTERVAL_MAX)
                self._disseminate(conversation, effects, now=now)

    # --- catch-up (§5.7) ------------------------------------------------------------------

    def _start_catch_up(self, conversation: _Conversation, effects: Effects, *, now: float) -> None:
        if conversation.catch_up is not None:
            return
        request = p.CatchUpRequest(
            conversation_id=conversation.id,
            membership_hash=conversation.membership_hash,
            requester_agent_id=self.agent_id,
            known_record_hash=conversation.head,
            known_anchor_hash=conversation.anchor_hash if conversation.head is not None else None,
        )
        conversation.catch_up = _CatchUp(request=request, started_at=now)
        self._send(conversation, request, effects)

    def _on_catch_up_request(
        self, signed: p.SignedEnvelope, request: p.CatchUpRequest, effects: Effects, *, now: float
    ) -> None:
        conversation = self._conversations.get(request.conversation_id)
        if conversation is None:
            return
        p.check_envelope(signed, request, membership=conversation.descriptor, cache=self._cache)
        if request.requester_agent_id == self.agent_id:
            return
        if request.membership_hash != conversation.membership_hash:
            return
        effects.catch_up_queries.append(CatchUpQuery(agent_id=self.agent_id, request=request))
        # Another member is behind: our live proposal and evidence may be what it missed.
        self._disseminate(conversation, effects, now=now)

    def answer_catch_up(
        self,
        request: p.CatchUpRequest,
        item: p.CatchUpItem | None,
        has_more: bool,
        effects: Effects,
    ) -> None:
        """Answer a catch-up request with the item the shell found (None: incomplete)."""
        conversation = self._conversations.get(request.conversation_id)
        if conversation is None:
            return
        packet: p.Packet
        if item is None:
            attestation = p.CatchUpAttestation(
                signer_agent_id=self.agent_id,
                request=request,
                item_kind=p.CatchUpItemKind.INCOMPLETE,
                item_hash=None,
                has_more=False,
            )
            packet = p.CatchUpIncomplete(
                request=request, attestation=p.sign_statement(self.identity.key, attestation)
            )
        else:
            kind, item_hash = (
                (p.CatchUpItemKind.CERTIFIED_RECORD, item.record_hash)
                if isinstance(item, p.CertifiedRecord)
                else (p.CatchUpItemKind.COMPLETED_REANCHOR, item.anchor_hash)
            )
            attestation = p.CatchUpAttestation(
                signer_agent_id=self.agent_id,
                request=request,
                item_kind=kind,
                item_hash=item_hash,
                has_more=has_more,
            )
            packet = p.CatchUpPage(
                request=request,
                item=item,
                has_more=has_more,
                attestation=p.sign_statement(self.identity.key, attestation),
            )
        self._send(conversation, packet, effects)

    def _on_catch_up_answer(
        self,
        signed: p.SignedEnvelope,
        answer: p.CatchUpPage | p.CatchUpIncomplete,
        effects: Effects,
        *,
        now: float,
    ) -> None:
        conversation = self._conversations.get(answer.request.conversation_id)
        if conversation is None or answer.request.requester_agent_id != self.agent_id:
            return
        p.check_envelope(signed, answer, membership=conversation.descriptor, cache=self._cache)
        p.check_catch_up_answer(
            answer,
            sender_agent_id=signed.envelope.sender_agent_id,
            membership=conversation.descriptor,
            cache=self._cache,
        )
        round_ = conversation.catch_up
        if round_ is None or answer.request != round_.request:
            return
        match answer:
            case p.CatchUpIncomplete():
                round_.answered.add(signed.envelope.sender_agent_id)
                if len(round_.answered) >= conversation.size - 1:
                    conversation.catch_up = None
                return
            case p.CatchUpPage(item=item, has_more=has_more):
                applied = self._apply_catch_up_item(conversation, item, effects, now=now)
                if not applied:
                    return
                conversation.catch_up = None
                if has_more or conversation.waiting or conversation.pending_completions:
                    self._start_catch_up(conversation, effects, now=now)
            case _:
                assert_never(answer)

    def _apply_catch_up_item(
        self, conversation: _Conversation, item: p.CatchUpItem, effects: Effects, *, now: float
    ) -> bool:
        match item:
            case p.CertifiedRecord():
                action = item.action_certified_record.record_core.action
                if action.previous_record_hash != conversation.head:
                    return False
                if isinstance(action, p.GenesisAction):
                    # A verified GENESIS from catch-up replaces an empty foundation.
                    conversation.anchor = action.anchor
                    conversation.anchor_hash = p.anchor_hash(action.anchor)
                elif action.anchor_hash != conversation.anchor_hash:
                    return False
                self._promote(conversation, item, effects, now=now)
                return True
            case p.CompletedReanchor():
                if (
                    item.reanchor.previous_anchor_hash != conversation.anchor_hash
                    or item.reanchor.selected_record_hash != conversation.head
                ):
                    return False
                self._adopt_reanchor(conversation, item, effects, now=now)
                return True
            case _:
                assert_never(item)


def packet_conversation_id(signed: p.SignedEnvelope, packet: p.Packet) -> str:
    """The conversation an envelope is about (catch-up answers travel to two members only,
    so their recipients do not name it)."""
    match packet:
        case p.ActionProposal(action=action):
            return action.conversation_id
        case p.CatchUpRequest(conversation_id=conversation_id):
            return conversation_id
        case p.CatchUpPage(request=request) | p.CatchUpIncomplete(request=request):
            return request.conversation_id
        case p.CompletedReanchor(reanchor=body):
            return body.conversation_id
        case p.SignedStatement():
            return p.conversation_id(signed.envelope.recipient_agent_ids)
        case _:
            assert_never(packet)

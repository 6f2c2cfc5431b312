"""The closed protocol objects of the certification engine (engine.md §3, §5.1-§5.3).

Every object is a frozen, slotted, keyword-only dataclass whose `to_json()` gives the spec's
JSON shape, camelCase, with `"version": "harness/1"` added; `encode(obj)` is its JCS bytes and
every hash below is `HashId.X.of(obj.to_json())`.

Decoding is strict and happens before any state change. `from_json` (and `decode_packet`,
`decode_signed_envelope`, `decode`) raise exactly one error type, `ProtocolError`, for:
received bytes that are not exactly RFC 8785 (whitespace, key order, duplicate keys, ...), a
missing or extra field, an unknown `kind`, another `version`, a wrong JSON type, an identifier
with the wrong prefix, length or a non-canonical base64 spelling, invalid content, and the
invariants an object states about itself (member and signer order, a GENESIS predecessor of
null, both catch-up positions null or both set, the recipient list, the body bound).

Relationships that need hashing, keys or a second object (a card's signature, a certificate's
threshold, an action naming its membership) are checked by the pure `check_*`/`verify_*`
helpers, which take objects that may also have been built locally.

    decode / from_json          shape and in-object rules       -> ProtocolError
    verify_card                 Registry signature (gateway.identity.cards) -> bool
    verify_*_signature          one signature                   -> bool
    verify_membership           descriptor rules of §5.2        -> ProtocolError
    check_action                intent, hashes, anchor (§5.4.1) -> ProtocolError
    check_*_certificate         thresholds and entries (§5.1)   -> ProtocolError
    check_certified_record      a whole record                  -> ProtocolError
    check_catch_up_answer       page or incomplete + item       -> ProtocolError
    check_envelope              sender, signature, recipients   -> ProtocolError

The module is long (some 1,900 lines) on purpose: it is the engine's one closed vocabulary,
each object next to the rules that check it, in the order of the spec's sections, and the
decoders call one another; split, a reader would chase one object's rules across files. The
leaf `gateway.identity` holds what the Registry shares with it: cards, keys, the field readers.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, Self, TypeAlias, TypeVar, assert_never

from harness_contract.content import content_from_json, content_to_json
from harness_contract.errors import SendError
from harness_contract.ids import (
    HashId,
    RandomId,
    agent_id_order_key,
    b64,
    unb64,
)
from harness_contract.jsonvalue import JsonValue
from harness_contract.values import Content

# Cards and the object rules live in the leaf `gateway.identity`, which the Registry shares;
# the names the engine's callers use with the rest of this vocabulary are re-exported.
from gateway.identity.cards import AgentCard as AgentCard
from gateway.identity.cards import SignedAgentCard as SignedAgentCard
from gateway.identity.cards import verify_card
from gateway.identity.keys import SigningKey, VerifyCache, verify
from gateway.identity.objects import VERSION as VERSION
from gateway.identity.objects import ProtocolError as ProtocolError
from gateway.identity.objects import ProtocolObject as ProtocolObject
from gateway.identity.objects import (
    array_field,
    flag_field,
    hash_id_field,
    kind_of,
    null_field,
    object_fields,
    optional_hash_id_field,
    parse_object_bytes,
    random_id_field,
    show,
    signature_field,
    strictly_byte_ordered,
    text_field,
)
from gateway.identity.objects import decode as decode
from gateway.identity.objects import encode as encode

MIN_MEMBERS: Final = 2
"""Fewest members of a conversation (a direct one)."""

MAX_MEMBERS: Final = 32
"""Most members of a conversation, and so most entries of a certificate or recipient list."""

MAX_ENVELOPE_BODY_BYTES: Final = 262_144
"""Largest decoded envelope body (a packet's JCS bytes), per engine.md §4 and §6."""

_MAX_ENVELOPE_BODY_TEXT: Final = (MAX_ENVELOPE_BODY_BYTES * 4 + 2) // 3
"""Characters of unpadded base64url of the largest body; longer text is refused undecoded."""

# --- Conversations (§1.4, §5.2) ----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationIdentity:
    """`{kind:"conversation_identity", memberAgentIds}`: 2..32 AgentIds in byte order."""

    KIND: ClassVar[str] = "conversation_identity"
    member_agent_ids: tuple[str, ...]

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "memberAgentIds": list(self.member_agent_ids),
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "conversation_identity") -> Self:
        """Decode strictly, including the byte order; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("memberAgentIds",), at)
        items = array_field(obj, "memberAgentIds", at, least=MIN_MEMBERS, most=MAX_MEMBERS)
        ids = tuple(
            _agent_id_item(item, f"{at}.memberAgentIds[{i}]") for i, item in enumerate(items)
        )
        if not strictly_byte_ordered(ids):
            raise ProtocolError(f"{at}.memberAgentIds: not distinct and in AgentId byte order")
        return cls(member_agent_ids=ids)

    @classmethod
    def of(cls, agent_ids: Iterable[str]) -> Self:
        """The identity of a member set in any order.

        Raises `ProtocolError` for an invalid or repeated AgentId or a size outside 2..32.
        """
        ids = list(agent_ids)
        for index, agent_id in enumerate(ids):
            _agent_id_item(agent_id, f"memberAgentIds[{index}]")
        if len(set(ids)) != len(ids):
            raise ProtocolError("memberAgentIds: an AgentId is listed twice")
        if not MIN_MEMBERS <= len(ids) <= MAX_MEMBERS:
            raise ProtocolError(
                f"memberAgentIds: a conversation has 2 to 32 members, not {len(ids)}"
            )
        return cls(member_agent_ids=tuple(sorted(ids, key=agent_id_order_key)))


def _agent_id_item(value: object, at: str) -> str:
    if not RandomId.AGENT.is_valid(value):
        raise ProtocolError(f"{at}: not a valid agent identifier")
    assert isinstance(value, str)
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class MembershipDescriptor:
    """`{kind:"membership_descriptor", conversationId, members:[SignedAgentCard...]}`."""

    KIND: ClassVar[str] = "membership_descriptor"
    conversation_id: str
    members: tuple[SignedAgentCard, ...]
    """The members' cards in AgentId byte order, distinct ids and names."""

    @property
    def size(self) -> int:
        """n, the number of members."""
        return len(self.members)

    @property
    def member_agent_ids(self) -> tuple[str, ...]:
        """The members' AgentIds, in byte order."""
        return tuple(member.card.agent_id for member in self.members)

    def card_of(self, agent_id: str) -> AgentCard | None:
        """The card of member `agent_id`, or None when it is not a member."""
        for member in self.members:
            if member.card.agent_id == agent_id:
                return member.card
        return None

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "conversationId": self.conversation_id,
            "members": [member.to_json() for member in self.members],
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "membership_descriptor") -> Self:
        """Decode strictly, including member order and distinct ids and names.

        The cards' signatures and the conversationId are checked by `verify_membership`.
        """
        obj = object_fields(value, cls.KIND, ("conversationId", "members"), at)
        items = array_field(obj, "members", at, least=MIN_MEMBERS, most=MAX_MEMBERS)
        members = tuple(
            SignedAgentCard.from_json(item, at=f"{at}.members[{index}]")
            for index, item in enumerate(items)
        )
        descriptor = cls(
            conversation_id=hash_id_field(obj, "conversationId", HashId.CONVERSATION, at),
            members=members,
        )
        problem = _membership_order_problem(descriptor)
        if problem is not None:
            raise ProtocolError(f"{at}.members: {problem}")
        return descriptor


def _membership_order_problem(descriptor: MembershipDescriptor) -> str | None:
    if not MIN_MEMBERS <= descriptor.size <= MAX_MEMBERS:
        return f"a conversation has 2 to 32 members, not {descriptor.size}"
    if not strictly_byte_ordered(descriptor.member_agent_ids):
        return "not distinct AgentIds in byte order"
    names = {member.card.agent_name for member in descriptor.members}
    if len(names) != descriptor.size:
        return "an agent name is listed twice"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class PostIntent:
    """`{kind:"post_intent", conversationId, membershipHash, authorAgentId, postId, content}`.

    (author, PostId) names one immutable intent; its hash excludes predecessor, anchor and
    evidence, so a rebased proposal keeps it.
    """

    KIND: ClassVar[str] = "post_intent"
    conversation_id: str
    membership_hash: str
    author_agent_id: str
    post_id: str
    content: Content

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object (`content` in the contract's part shape)."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "conversationId": self.conversation_id,
            "membershipHash": self.membership_hash,
            "authorAgentId": self.author_agent_id,
            "postId": self.post_id,
            "content": content_to_json(self.content),
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "post_intent") -> Self:
        """Decode strictly, content validated as a send validates it (engine.md §2)."""
        obj = object_fields(
            value,
            cls.KIND,
            ("conversationId", "membershipHash", "authorAgentId", "postId", "content"),
            at,
        )
        try:
            content = content_from_json(obj["content"])
        except SendError as error:
            raise ProtocolError(f"{at}.content: {error.detail or 'invalid content'}") from None
        return cls(
            conversation_id=hash_id_field(obj, "conversationId", HashId.CONVERSATION, at),
            membership_hash=hash_id_field(obj, "membershipHash", HashId.MEMBERSHIP, at),
            author_agent_id=random_id_field(obj, "authorAgentId", RandomId.AGENT, at),
            post_id=random_id_field(obj, "postId", RandomId.POST, at),
            content=content,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class GenesisAnchor:
    """`{kind:"genesis_anchor", conversationId, membershipHash, routerInstanceId}`."""

    KIND: ClassVar[str] = "genesis_anchor"
    conversation_id: str
    membership_hash: str
    router_instance_id: str

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "conversationId": self.conversation_id,
            "membershipHash": self.membership_hash,
            "routerInstanceId": self.router_instance_id,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "genesis_anchor") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(
            value, cls.KIND, ("conversationId", "membershipHash", "routerInstanceId"), at
        )
        return cls(
            conversation_id=hash_id_field(obj, "conversationId", HashId.CONVERSATION, at),
            membership_hash=hash_id_field(obj, "membershipHash", HashId.MEMBERSHIP, at),
            router_instance_id=random_id_field(
                obj, "routerInstanceId", RandomId.ROUTER_INSTANCE, at
            ),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReanchorBody:
    """`{kind:"reanchor", conversationId, membershipHash, previousAnchorHash,
    selectedRecordHash, routerInstanceId}`."""

    KIND: ClassVar[str] = "reanchor"
    conversation_id: str
    membership_hash: str
    previous_anchor_hash: str
    selected_record_hash: str
    router_instance_id: str

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "conversationId": self.conversation_id,
            "membershipHash": self.membership_hash,
            "previousAnchorHash": self.previous_anchor_hash,
            "selectedRecordHash": self.selected_record_hash,
            "routerInstanceId": self.router_instance_id,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "reanchor") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(
            value,
            cls.KIND,
            (
                "conversationId",
                "membershipHash",
                "previousAnchorHash",
                "selectedRecordHash",
                "routerInstanceId",
            ),
            at,
        )
        return cls(
            conversation_id=hash_id_field(obj, "conversationId", HashId.CONVERSATION, at),
            membership_hash=hash_id_field(obj, "membershipHash", HashId.MEMBERSHIP, at),
            previous_anchor_hash=hash_id_field(obj, "previousAnchorHash", HashId.ANCHOR, at),
            selected_record_hash=hash_id_field(obj, "selectedRecordHash", HashId.RECORD, at),
            router_instance_id=random_id_field(
                obj, "routerInstanceId", RandomId.ROUTER_INSTANCE, at
            ),
        )


Anchor: TypeAlias = GenesisAnchor | ReanchorBody
"""What an AnchorHash is the hash of."""


# --- Actions and records (§5.2) ----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class GenesisAction:
    """`{kind:"GENESIS", conversationId, membership, anchor, previousRecordHash:null,
    postIntent, postIntentHash}`: the first record of a conversation, signed by all members."""

    KIND: ClassVar[str] = "GENESIS"
    conversation_id: str
    membership: MembershipDescriptor
    anchor: GenesisAnchor
    post_intent: PostIntent
    post_intent_hash: str

    @property
    def previous_record_hash(self) -> None:
        """Always null: GENESIS has no predecessor."""
        return None

    @property
    def author_agent_id(self) -> str:
        """The intent's author."""
        return self.post_intent.author_agent_id

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "conversationId": self.conversation_id,
            "membership": self.membership.to_json(),
            "anchor": self.anchor.to_json(),
            "previousRecordHash": None,
            "postIntent": self.post_intent.to_json(),
            "postIntentHash": self.post_intent_hash,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "GENESIS") -> Self:
        """Decode strictly (predecessor must be null); raises `ProtocolError`."""
        obj = object_fields(
            value,
            cls.KIND,
            (
                "conversationId",
                "membership",
                "anchor",
                "previousRecordHash",
                "postIntent",
                "postIntentHash",
            ),
            at,
        )
        null_field(obj, "previousRecordHash", at)
        return cls(
            conversation_id=hash_id_field(obj, "conversationId", HashId.CONVERSATION, at),
            membership=MembershipDescriptor.from_json(obj["membership"], at=f"{at}.membership"),
            anchor=GenesisAnchor.from_json(obj["anchor"], at=f"{at}.anchor"),
            post_intent=PostIntent.from_json(obj["postIntent"], at=f"{at}.postIntent"),
            post_intent_hash=hash_id_field(obj, "postIntentHash", HashId.POST_INTENT, at),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PostAction:
    """`{kind:"POST", conversationId, membershipHash, anchorHash, previousRecordHash,
    postIntent, postIntentHash}`: a successor of one certified record."""

    KIND: ClassVar[str] = "POST"
    conversation_id: str
    membership_hash: str
    anchor_hash: str
    previous_record_hash: str
    post_intent: PostIntent
    post_intent_hash: str

    @property
    def author_agent_id(self) -> str:
        """The intent's author."""
        return self.post_intent.author_agent_id

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "conversationId": self.conversation_id,
            "membershipHash": self.membership_hash,
            "anchorHash": self.anchor_hash,
            "previousRecordHash": self.previous_record_hash,
            "postIntent": self.post_intent.to_json(),
            "postIntentHash": self.post_intent_hash,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "POST") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(
            value,
            cls.KIND,
            (
                "conversationId",
                "membershipHash",
                "anchorHash",
                "previousRecordHash",
                "postIntent",
                "postIntentHash",
            ),
            at,
        )
        return cls(
            conversation_id=hash_id_field(obj, "conversationId", HashId.CONVERSATION, at),
            membership_hash=hash_id_field(obj, "membershipHash", HashId.MEMBERSHIP, at),
            anchor_hash=hash_id_field(obj, "anchorHash", HashId.ANCHOR, at),
            previous_record_hash=hash_id_field(obj, "previousRecordHash", HashId.RECORD, at),
            post_intent=PostIntent.from_json(obj["postIntent"], at=f"{at}.postIntent"),
            post_intent_hash=hash_id_field(obj, "postIntentHash", HashId.POST_INTENT, at),
        )


Action: TypeAlias = GenesisAction | PostAction
"""What an ActionHash is the hash of."""


def action_from_json(value: JsonValue, *, at: str = "action") -> Action:
    """Decode a GENESIS or POST action by its `kind`; raises `ProtocolError`."""
    match kind_of(value, at):
        case GenesisAction.KIND:
            return GenesisAction.from_json(value, at=at)
        case PostAction.KIND:
            return PostAction.from_json(value, at=at)
        case other:
            raise ProtocolError(f"{at}: unknown action kind {show(other)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordCore:
    """`{kind:"record_core", membership, anchorHash, action, actionHash}`.

    RecordHash covers this and no signature, so every valid signer subset gives one hash.
    """

    KIND: ClassVar[str] = "record_core"
    membership: MembershipDescriptor
    anchor_hash: str
    action: Action
    action_hash: str

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "membership": self.membership.to_json(),
            "anchorHash": self.anchor_hash,
            "action": self.action.to_json(),
            "actionHash": self.action_hash,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "record_core") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(
            value, cls.KIND, ("membership", "anchorHash", "action", "actionHash"), at
        )
        return cls(
            membership=MembershipDescriptor.from_json(obj["membership"], at=f"{at}.membership"),
            anchor_hash=hash_id_field(obj, "anchorHash", HashId.ANCHOR, at),
            action=action_from_json(obj["action"], at=f"{at}.action"),
            action_hash=hash_id_field(obj, "actionHash", HashId.ACTION, at),
        )


# --- Catch-up request (a packet, and part of an attestation) -------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchUpRequest:
    """`{kind:"catch_up_request", conversationId, membershipHash, requesterAgentId,
    knownRecordHash, knownAnchorHash}`: both positions null (asking for GENESIS) or both set."""

    KIND: ClassVar[str] = "catch_up_request"
    conversation_id: str
    membership_hash: str
    requester_agent_id: str
    known_record_hash: str | None
    known_anchor_hash: str | None

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "conversationId": self.conversation_id,
            "membershipHash": self.membership_hash,
            "requesterAgentId": self.requester_agent_id,
            "knownRecordHash": self.known_record_hash,
            "knownAnchorHash": self.known_anchor_hash,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "catch_up_request") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(
            value,
            cls.KIND,
            (
                "conversationId",
                "membershipHash",
                "requesterAgentId",
                "knownRecordHash",
                "knownAnchorHash",
            ),
            at,
        )
        known_record = optional_hash_id_field(obj, "knownRecordHash", HashId.RECORD, at)
        known_anchor = optional_hash_id_field(obj, "knownAnchorHash", HashId.ANCHOR, at)
        if (known_record is None) != (known_anchor is None):
            raise ProtocolError(
                f"{at}: knownRecordHash and knownAnchorHash are both null or both set"
            )
        return cls(
            conversation_id=hash_id_field(obj, "conversationId", HashId.CONVERSATION, at),
            membership_hash=hash_id_field(obj, "membershipHash", HashId.MEMBERSHIP, at),
            requester_agent_id=random_id_field(obj, "requesterAgentId", RandomId.AGENT, at),
            known_record_hash=known_record,
            known_anchor_hash=known_anchor,
        )


# --- Statements (§5.2) -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionSignature:
    """`{kind:"action_signature", signerAgentId, actionHash}`."""

    KIND: ClassVar[str] = "action_signature"
    signer_agent_id: str
    action_hash: str

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "signerAgentId": self.signer_agent_id,
            "actionHash": self.action_hash,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "action_signature") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("signerAgentId", "actionHash"), at)
        return cls(
            signer_agent_id=random_id_field(obj, "signerAgentId", RandomId.AGENT, at),
            action_hash=hash_id_field(obj, "actionHash", HashId.ACTION, at),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DurabilityVote:
    """`{kind:"durability_vote", signerAgentId, conversationId, membershipHash, recordHash}`."""

    KIND: ClassVar[str] = "durability_vote"
    signer_agent_id: str
    conversation_id: str
    membership_hash: str
    record_hash: str

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "signerAgentId": self.signer_agent_id,
            "conversationId": self.conversation_id,
            "membershipHash": self.membership_hash,
            "recordHash": self.record_hash,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "durability_vote") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(
            value, cls.KIND, ("signerAgentId", "conversationId", "membershipHash", "recordHash"), at
        )
        return cls(
            signer_agent_id=random_id_field(obj, "signerAgentId", RandomId.AGENT, at),
            conversation_id=hash_id_field(obj, "conversationId", HashId.CONVERSATION, at),
            membership_hash=hash_id_field(obj, "membershipHash", HashId.MEMBERSHIP, at),
            record_hash=hash_id_field(obj, "recordHash", HashId.RECORD, at),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReanchorVote:
    """`{kind:"reanchor_vote", signerAgentId, anchorHash, reanchor}`."""

    KIND: ClassVar[str] = "reanchor_vote"
    signer_agent_id: str
    anchor_hash: str
    reanchor: ReanchorBody

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "signerAgentId": self.signer_agent_id,
            "anchorHash": self.anchor_hash,
            "reanchor": self.reanchor.to_json(),
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "reanchor_vote") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("signerAgentId", "anchorHash", "reanchor"), at)
        return cls(
            signer_agent_id=random_id_field(obj, "signerAgentId", RandomId.AGENT, at),
            anchor_hash=hash_id_field(obj, "anchorHash", HashId.ANCHOR, at),
            reanchor=ReanchorBody.from_json(obj["reanchor"], at=f"{at}.reanchor"),
        )


class CatchUpItemKind(enum.StrEnum):
    """What a catch-up attestation vouches for."""

    CERTIFIED_RECORD = "certified_record"
    """A page holding a CertifiedRecord; `itemHash` is its RecordHash."""
    COMPLETED_REANCHOR = "completed_reanchor"
    """A page holding a CompletedReanchor; `itemHash` is its AnchorHash."""
    INCOMPLETE = "incomplete"
    """The responder has nothing further; `itemHash` is null and `hasMore` false."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchUpAttestation:
    """`{kind:"catch_up_attestation", signerAgentId, request, itemKind, itemHash, hasMore}`."""

    KIND: ClassVar[str] = "catch_up_attestation"
    signer_agent_id: str
    request: CatchUpRequest
    item_kind: CatchUpItemKind
    item_hash: str | None
    has_more: bool
    """A hint, never a safety input."""

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "signerAgentId": self.signer_agent_id,
            "request": self.request.to_json(),
            "itemKind": self.item_kind.value,
            "itemHash": self.item_hash,
            "hasMore": self.has_more,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "catch_up_attestation") -> Self:
        """Decode strictly, `itemHash` matching `itemKind`; raises `ProtocolError`."""
        obj = object_fields(
            value, cls.KIND, ("signerAgentId", "request", "itemKind", "itemHash", "hasMore"), at
        )
        raw_kind = text_field(obj, "itemKind", at)
        try:
            item_kind = CatchUpItemKind(raw_kind)
        except ValueError:
            raise ProtocolError(f"{at}.itemKind: unknown item kind {show(raw_kind)}") from None
        has_more = flag_field(obj, "hasMore", at)
        item_hash: str | None
        match item_kind:
            case CatchUpItemKind.CERTIFIED_RECORD:
                item_hash = hash_id_field(obj, "itemHash", HashId.RECORD, at)
            case CatchUpItemKind.COMPLETED_REANCHOR:
                item_hash = hash_id_field(obj, "itemHash", HashId.ANCHOR, at)
            case CatchUpItemKind.INCOMPLETE:
                null_field(obj, "itemHash", at)
                item_hash = None
                if has_more:
                    raise ProtocolError(f"{at}.hasMore: must be false for an incomplete answer")
            case _:
                assert_never(item_kind)
        return cls(
            signer_agent_id=random_id_field(obj, "signerAgentId", RandomId.AGENT, at),
            request=CatchUpRequest.from_json(obj["request"], at=f"{at}.request"),
            item_kind=item_kind,
            item_hash=item_hash,
            has_more=has_more,
        )


Statement: TypeAlias = ActionSignature | DurabilityVote | ReanchorVote | CatchUpAttestation
"""What a member signs as evidence; kinds are never interchangeable."""


def statement_from_json(value: JsonValue, *, at: str = "statement") -> Statement:
    """Decode any statement by its `kind`; raises `ProtocolError`."""
    match kind_of(value, at):
        case ActionSignature.KIND:
            return ActionSignature.from_json(value, at=at)
        case DurabilityVote.KIND:
            return DurabilityVote.from_json(value, at=at)
        case ReanchorVote.KIND:
            return ReanchorVote.from_json(value, at=at)
        case CatchUpAttestation.KIND:
            return CatchUpAttestation.from_json(value, at=at)
        case other:
            raise ProtocolError(f"{at}: unknown statement kind {show(other)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedStatement:
    """`{kind:"signed_statement", statement, signature}`: `SIG(signer, "statement", statement)`.

    Evidence, and a packet of its own (the envelope sender must be the signer).
    """

    KIND: ClassVar[str] = "signed_statement"
    statement: Statement
    signature: str

    @property
    def signer_agent_id(self) -> str:
        """The statement's signer."""
        return self.statement.signer_agent_id

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "statement": self.statement.to_json(),
            "signature": self.signature,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "signed_statement") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("statement", "signature"), at)
        return cls(
            statement=statement_from_json(obj["statement"], at=f"{at}.statement"),
            signature=signature_field(obj, "signature", at),
        )


def _entries(obj: Mapping[str, JsonValue], name: str, at: str) -> tuple[SignedStatement, ...]:
    items = array_field(obj, name, at, least=0, most=MAX_MEMBERS)
    entries = tuple(
        SignedStatement.from_json(item, at=f"{at}.{name}[{index}]")
        for index, item in enumerate(items)
    )
    if not strictly_byte_ordered([entry.signer_agent_id for entry in entries]):
        raise ProtocolError(f"{at}.{name}: not one entry per signer in AgentId byte order")
    return entries


# --- Certificates (§5.1-§5.2) ------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionCertificate:
    """`{kind:"action_certificate", actionHash, signatures:[SignedStatement...]}`."""

    KIND: ClassVar[str] = "action_certificate"
    action_hash: str
    signatures: tuple[SignedStatement, ...]

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "actionHash": self.action_hash,
            "signatures": [entry.to_json() for entry in self.signatures],
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "action_certificate") -> Self:
        """Decode strictly (entries one per signer, in byte order); raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("actionHash", "signatures"), at)
        return cls(
            action_hash=hash_id_field(obj, "actionHash", HashId.ACTION, at),
            signatures=_entries(obj, "signatures", at),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DurabilityCertificate:
    """`{kind:"durability_certificate", recordHash, votes:[SignedStatement...]}`."""

    KIND: ClassVar[str] = "durability_certificate"
    record_hash: str
    votes: tuple[SignedStatement, ...]

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "recordHash": self.record_hash,
            "votes": [entry.to_json() for entry in self.votes],
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "durability_certificate") -> Self:
        """Decode strictly (entries one per signer, in byte order); raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("recordHash", "votes"), at)
        return cls(
            record_hash=hash_id_field(obj, "recordHash", HashId.RECORD, at),
            votes=_entries(obj, "votes", at),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReanchorCertificate:
    """`{kind:"reanchor_certificate", anchorHash, votes:[SignedStatement...]}`."""

    KIND: ClassVar[str] = "reanchor_certificate"
    anchor_hash: str
    votes: tuple[SignedStatement, ...]

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "anchorHash": self.anchor_hash,
            "votes": [entry.to_json() for entry in self.votes],
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "reanchor_certificate") -> Self:
        """Decode strictly (entries one per signer, in byte order); raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("anchorHash", "votes"), at)
        return cls(
            anchor_hash=hash_id_field(obj, "anchorHash", HashId.ANCHOR, at),
            votes=_entries(obj, "votes", at),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletedReanchor:
    """`{kind:"completed_reanchor", anchorHash, reanchor, certificate}`; also a packet (relay)."""

    KIND: ClassVar[str] = "completed_reanchor"
    anchor_hash: str
    reanchor: ReanchorBody
    certificate: ReanchorCertificate

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "anchorHash": self.anchor_hash,
            "reanchor": self.reanchor.to_json(),
            "certificate": self.certificate.to_json(),
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "completed_reanchor") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("anchorHash", "reanchor", "certificate"), at)
        return cls(
            anchor_hash=hash_id_field(obj, "anchorHash", HashId.ANCHOR, at),
            reanchor=ReanchorBody.from_json(obj["reanchor"], at=f"{at}.reanchor"),
            certificate=ReanchorCertificate.from_json(obj["certificate"], at=f"{at}.certificate"),
        )


RouterAnchor: TypeAlias = GenesisAnchor | CompletedReanchor
"""The anchor a record was certified under: the GENESIS anchor, or a completed re-anchor."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionCertifiedRecord:
    """`{kind:"action_certified_record", recordHash, recordCore, routerAnchor,
    actionCertificate}`: what a member stages before voting durability."""

    KIND: ClassVar[str] = "action_certified_record"
    record_hash: str
    record_core: RecordCore
    router_anchor: RouterAnchor
    action_certificate: ActionCertificate

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "recordHash": self.record_hash,
            "recordCore": self.record_core.to_json(),
            "routerAnchor": self.router_anchor.to_json(),
            "actionCertificate": self.action_certificate.to_json(),
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "action_certified_record") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(
            value, cls.KIND, ("recordHash", "recordCore", "routerAnchor", "actionCertificate"), at
        )
        router_anchor: RouterAnchor
        anchor_at = f"{at}.routerAnchor"
        match kind_of(obj["routerAnchor"], anchor_at):
            case GenesisAnchor.KIND:
                router_anchor = GenesisAnchor.from_json(obj["routerAnchor"], at=anchor_at)
            case CompletedReanchor.KIND:
                router_anchor = CompletedReanchor.from_json(obj["routerAnchor"], at=anchor_at)
            case other:
                raise ProtocolError(f"{anchor_at}: unknown anchor kind {show(other)}")
        return cls(
            record_hash=hash_id_field(obj, "recordHash", HashId.RECORD, at),
            record_core=RecordCore.from_json(obj["recordCore"], at=f"{at}.recordCore"),
            router_anchor=router_anchor,
            action_certificate=ActionCertificate.from_json(
                obj["actionCertificate"], at=f"{at}.actionCertificate"
            ),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CertifiedRecord:
    """`{kind:"certified_record", actionCertifiedRecord, durabilityCertificate}`."""

    KIND: ClassVar[str] = "certified_record"
    action_certified_record: ActionCertifiedRecord
    durability_certificate: DurabilityCertificate

    @property
    def record_hash(self) -> str:
        """The record's RecordHash (as the record states it; `check_certified_record` proves it)."""
        return self.action_certified_record.record_hash

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "actionCertifiedRecord": self.action_certified_record.to_json(),
            "durabilityCertificate": self.durability_certificate.to_json(),
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "certified_record") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("actionCertifiedRecord", "durabilityCertificate"), at)
        return cls(
            action_certified_record=ActionCertifiedRecord.from_json(
                obj["actionCertifiedRecord"], at=f"{at}.actionCertifiedRecord"
            ),
            durability_certificate=DurabilityCertificate.from_json(
                obj["durabilityCertificate"], at=f"{at}.durabilityCertificate"
            ),
        )


# --- Packets (§5.3) ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionProposal:
    """`{kind:"action_proposal", action}`."""

    KIND: ClassVar[str] = "action_proposal"
    action: Action

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {"kind": self.KIND, "version": VERSION, "action": self.action.to_json()}

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "action_proposal") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("action",), at)
        return cls(action=action_from_json(obj["action"], at=f"{at}.action"))


CatchUpItem: TypeAlias = CertifiedRecord | CompletedReanchor
"""What one catch-up page carries."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchUpPage:
    """`{kind:"catch_up_page", request, item, hasMore, attestation}`."""

    KIND: ClassVar[str] = "catch_up_page"
    request: CatchUpRequest
    item: CatchUpItem
    has_more: bool
    attestation: SignedStatement

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "request": self.request.to_json(),
            "item": self.item.to_json(),
            "hasMore": self.has_more,
            "attestation": self.attestation.to_json(),
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "catch_up_page") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("request", "item", "hasMore", "attestation"), at)
        item: CatchUpItem
        item_at = f"{at}.item"
        match kind_of(obj["item"], item_at):
            case CertifiedRecord.KIND:
                item = CertifiedRecord.from_json(obj["item"], at=item_at)
            case CompletedReanchor.KIND:
                item = CompletedReanchor.from_json(obj["item"], at=item_at)
            case other:
                raise ProtocolError(f"{item_at}: unknown item kind {show(other)}")
        return cls(
            request=CatchUpRequest.from_json(obj["request"], at=f"{at}.request"),
            item=item,
            has_more=flag_field(obj, "hasMore", at),
            attestation=SignedStatement.from_json(obj["attestation"], at=f"{at}.attestation"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchUpIncomplete:
    """`{kind:"catch_up_incomplete", request, attestation}`."""

    KIND: ClassVar[str] = "catch_up_incomplete"
    request: CatchUpRequest
    attestation: SignedStatement

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "request": self.request.to_json(),
            "attestation": self.attestation.to_json(),
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "catch_up_incomplete") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("request", "attestation"), at)
        return cls(
            request=CatchUpRequest.from_json(obj["request"], at=f"{at}.request"),
            attestation=SignedStatement.from_json(obj["attestation"], at=f"{at}.attestation"),
        )


Packet: TypeAlias = (
    ActionProposal
    | SignedStatement
    | CatchUpRequest
    | CatchUpPage
    | CatchUpIncomplete
    | CompletedReanchor
)
"""What an envelope body carries (closed)."""


def packet_from_json(value: JsonValue, *, at: str = "packet") -> Packet:
    """Decode any packet by its `kind`; raises `ProtocolError`."""
    match kind_of(value, at):
        case ActionProposal.KIND:
            return ActionProposal.from_json(value, at=at)
        case SignedStatement.KIND:
            return SignedStatement.from_json(value, at=at)
        case CatchUpRequest.KIND:
            return CatchUpRequest.from_json(value, at=at)
        case CatchUpPage.KIND:
            return CatchUpPage.from_json(value, at=at)
        case CatchUpIncomplete.KIND:
            return CatchUpIncomplete.from_json(value, at=at)
        case CompletedReanchor.KIND:
            return CompletedReanchor.from_json(value, at=at)
        case other:
            raise ProtocolError(f"{at}: unknown packet kind {show(other)}")


# --- Envelopes (§5.3) --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    """`{kind:"envelope", senderAgentId, recipientAgentIds, messageId, body}`.

    `body` is `b64` of a packet's JCS bytes, at most 262,144 bytes decoded.
    """

    KIND: ClassVar[str] = "envelope"
    sender_agent_id: str
    recipient_agent_ids: tuple[str, ...]
    message_id: str
    body: str

    def body_bytes(self) -> bytes:
        """The decoded body. Raises `ProtocolError` when it is not canonical base64url."""
        data = unb64(self.body)
        if data is None:
            raise ProtocolError("envelope.body: not canonical unpadded base64url")
        return data

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "senderAgentId": self.sender_agent_id,
            "recipientAgentIds": list(self.recipient_agent_ids),
            "messageId": self.message_id,
            "body": self.body,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "envelope") -> Self:
        """Decode strictly: 1..32 distinct recipients in byte order, a bounded canonical body."""
        obj = object_fields(
            value, cls.KIND, ("senderAgentId", "recipientAgentIds", "messageId", "body"), at
        )
        items = array_field(obj, "recipientAgentIds", at, least=1, most=MAX_MEMBERS)
        recipients = tuple(
            _agent_id_item(item, f"{at}.recipientAgentIds[{index}]")
            for index, item in enumerate(items)
        )
        if not strictly_byte_ordered(recipients):
            raise ProtocolError(f"{at}.recipientAgentIds: not distinct and in AgentId byte order")
        body = text_field(obj, "body", at)
        if len(body) > _MAX_ENVELOPE_BODY_TEXT:
            raise ProtocolError(f"{at}.body: larger than {MAX_ENVELOPE_BODY_BYTES:,} bytes")
        if unb64(body) is None:
            raise ProtocolError(f"{at}.body: not canonical unpadded base64url")
        return cls(
            sender_agent_id=random_id_field(obj, "senderAgentId", RandomId.AGENT, at),
            recipient_agent_ids=recipients,
            message_id=random_id_field(obj, "messageId", RandomId.MESSAGE, at),
            body=body,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedEnvelope:
    """`{kind:"signed_envelope", envelope, signature}`: `SIG(sender, "envelope", envelope)`.

    It attributes a packet to its sender; it is never action evidence.
    """

    KIND: ClassVar[str] = "signed_envelope"
    envelope: Envelope
    signature: str

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "envelope": self.envelope.to_json(),
            "signature": self.signature,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "signed_envelope") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("envelope", "signature"), at)
        return cls(
            envelope=Envelope.from_json(obj["envelope"], at=f"{at}.envelope"),
            signature=signature_field(obj, "signature", at),
        )


def decode_packet(data: bytes) -> Packet:
    """Decode an envelope body: canonical JCS bytes of one packet; raises `ProtocolError`."""
    return packet_from_json(parse_object_bytes(data))


def decode_signed_envelope(data: bytes) -> SignedEnvelope:
    """Decode the exact bytes a Router carries; raises `ProtocolError`.

    Shapes only: the signature is checked by `verify_envelope_signature`.
    """
    return SignedEnvelope.from_json(parse_object_bytes(data))


# --- Hashes (§1.4) -----------------------------------------------------------------------


def conversation_id(member_agent_ids: Iterable[str]) -> str:
    """ConversationId of a member set given in any order (sorted by AgentId bytes).

    Raises `ProtocolError` for an invalid or repeated AgentId or a size outside 2..32.
    """
    return HashId.CONVERSATION.of(ConversationIdentity.of(member_agent_ids).to_json())


@functools.lru_cache(maxsize=4096)
def membership_hash(descriptor: MembershipDescriptor) -> str:
    """MembershipHash (`mbr_`) of a descriptor.

    Cached: every check of every statement needs it, and a descriptor carries up to 32
    signed cards; descriptors are immutable values, equal ones hash alike."""
    return HashId.MEMBERSHIP.of(descriptor.to_json())


def post_intent_hash(intent: PostIntent) -> str:
    """PostIntentHash (`pit_`) of an intent."""
    return HashId.POST_INTENT.of(intent.to_json())


def anchor_hash(anchor: Anchor) -> str:
    """AnchorHash (`anc_`) of a GenesisAnchor or a ReanchorBody."""
    return HashId.ANCHOR.of(anchor.to_json())


def action_hash(action: Action) -> str:
    """ActionHash (`ach_`) of a GENESIS or POST action."""
    return HashId.ACTION.of(action.to_json())


def record_hash(core: RecordCore) -> str:
    """RecordHash (`rch_`) of a RecordCore."""
    return HashId.RECORD.of(core.to_json())


def evidence_id(statement: Statement) -> str:
    """EvidenceId (`evd_`) of a statement; evidence is deduplicated by (signer, EvidenceId)."""
    return HashId.EVIDENCE.of(statement.to_json())


def envelope_digest(signed: SignedEnvelope) -> str:
    """EnvelopeDigest (`smd_`) of a signed envelope, as the Router's `accepted` names it."""
    return HashId.ENVELOPE_DIGEST.of(signed.to_json())


# --- Builders ----------------------------------------------------------------------------


def build_membership(cards: Iterable[SignedAgentCard]) -> MembershipDescriptor:
    """The descriptor of a member set: cards in AgentId byte order and the derived id.

    Raises `ProtocolError` for a repeated id or name or a size outside 2..32. The cards'
    signatures are not checked here (see `verify_membership`).
    """
    members = tuple(sorted(cards, key=lambda member: agent_id_order_key(member.card.agent_id)))
    descriptor = MembershipDescriptor(
        conversation_id=conversation_id(member.card.agent_id for member in members),
        members=members,
    )
    problem = _membership_order_problem(descriptor)
    if problem is not None:
        raise ProtocolError(f"members: {problem}")
    return descriptor


def build_genesis_action(
    *, membership: MembershipDescriptor, anchor: GenesisAnchor, intent: PostIntent
) -> GenesisAction:
    """The GENESIS action carrying `intent` under `anchor`."""
    return GenesisAction(
        conversation_id=membership.conversation_id,
        membership=membership,
        anchor=anchor,
        post_intent=intent,
        post_intent_hash=post_intent_hash(intent),
    )


def build_post_action(
    *, anchor_hash: str, previous_record_hash: str, intent: PostIntent
) -> PostAction:
    """The POST action carrying `intent` on `previous_record_hash` under `anchor_hash`."""
    return PostAction(
        conversation_id=intent.conversation_id,
        membership_hash=intent.membership_hash,
        anchor_hash=anchor_hash,
        previous_record_hash=previous_record_hash,
        post_intent=intent,
        post_intent_hash=post_intent_hash(intent),
    )


def build_record_core(*, membership: MembershipDescriptor, action: Action) -> RecordCore:
    """The RecordCore of `action`: GENESIS takes the hash of its own anchor, POST its
    `anchorHash` (§5.2)."""
    match action:
        case GenesisAction(anchor=anchor):
            core_anchor = anchor_hash(anchor)
        case PostAction(anchor_hash=post_anchor):
            core_anchor = post_anchor
        case _:
            assert_never(action)
    return RecordCore(
        membership=membership,
        anchor_hash=core_anchor,
        action=action,
        action_hash=action_hash(action),
    )


# --- Signatures --------------------------------------------------------------------------


STATEMENT_ARTIFACT: Final = "statement"
"""Artifact of a member's evidence signature."""
ENVELOPE_ARTIFACT: Final = "envelope"
"""Artifact of a sender's envelope signature."""


def sign_statement(key: SigningKey, statement: Statement) -> SignedStatement:
    """`statement` with `SIG(signer, "statement", statement)`; the key must be the signer's."""
    return SignedStatement(
        statement=statement, signature=key.sign(STATEMENT_ARTIFACT, statement.to_json())
    )


def verify_statement_signature(
    signed: SignedStatement, public_key: str, *, cache: VerifyCache | None = None
) -> bool:
    """True when `signed.signature` is the holder of `public_key`'s signature of the statement."""
    return verify(
        public_key, STATEMENT_ARTIFACT, signed.statement.to_json(), signed.signature, cache=cache
    )


def verify_member_statement(
    signed: SignedStatement, membership: MembershipDescriptor, *, cache: VerifyCache | None = None
) -> bool:
    """True when the signer is a member and the signature verifies under its card's key."""
    card = membership.card_of(signed.signer_agent_id)
    return card is not None and verify_statement_signature(signed, card.public_key, cache=cache)


def sign_envelope(key: SigningKey, envelope: Envelope) -> SignedEnvelope:
    """`envelope` with `SIG(sender, "envelope", envelope)`; the key must be the sender's."""
    return SignedEnvelope(
        envelope=envelope, signature=key.sign(ENVELOPE_ARTIFACT, envelope.to_json())
    )


def verify_envelope_signature(
    signed: SignedEnvelope, public_key: str, *, cache: VerifyCache | None = None
) -> bool:
    """True when the envelope carries the holder of `public_key`'s signature."""
    return verify(
        public_key, ENVELOPE_ARTIFACT, signed.envelope.to_json(), signed.signature, cache=cache
    )


# --- Membership (§5.2) -------------------------------------------------------------------


def verify_membership(
    descriptor: MembershipDescriptor,
    registry_public_key: str,
    *,
    cache: VerifyCache | None = None,
) -> None:
    """Check a descriptor: 2..32 members in AgentId byte order, distinct ids and names, each
    card signed by the Registry, and `conversationId` re-deriving from the member ids.

    Raises `ProtocolError` naming the first failure.
    """
    problem = _membership_order_problem(descriptor)
    if problem is not None:
        raise ProtocolError(f"membership: {problem}")
    if descriptor.conversation_id != conversation_id(descriptor.member_agent_ids):
        raise ProtocolError("membership: conversationId does not derive from the members")
    for index, member in enumerate(descriptor.members):
        if not verify_card(member, registry_public_key, cache=cache):
            raise ProtocolError(f"membership.members[{index}]: the Registry signature is invalid")


# --- Thresholds and certificates (§5.1) --------------------------------------------------


def q(n: int) -> int:
    """The quorum for n members: n when n < 4, else n - (n - 1) // 3."""
    if n < 1:
        raise ValueError("a conversation has at least one member")
    return n if n < 4 else n - (n - 1) // 3


def f(n: int) -> int:
    """The faults tolerated among n members: (n - 1) // 3."""
    if n < 1:
        raise ValueError("a conversation has at least one member")
    return (n - 1) // 3


def action_quorum_met(action: Action, signers: Collection[str], n: int) -> bool:
    """True when distinct member `signers` certify `action` (callers pass members only):
    GENESIS needs all n, POST at least q(n) with the author among them."""
    match action:
        case GenesisAction():
            return len(signers) == n
        case PostAction(post_intent=intent):
            return len(signers) >= q(n) and intent.author_agent_id in signers
        case _:
            assert_never(action)


_S = TypeVar("_S", ActionSignature, DurabilityVote, ReanchorVote)


def _check_entries(
    entries: Sequence[SignedStatement],
    *,
    statement_type: type[_S],
    names_subject: Callable[[_S], bool],
    membership: MembershipDescriptor,
    cache: VerifyCache | None,
    at: str,
) -> frozenset[str]:
    # Cheap checks on every entry first; signatures (the cost) only once the shape holds.
    previous: bytes | None = None
    for index, entry in enumerate(entries):
        statement = entry.statement
        where = f"{at}[{index}]"
        if not isinstance(statement, statement_type):
            raise ProtocolError(
                f"{where}: {statement.KIND} where {statement_type.KIND} is required"
            )
        if not RandomId.AGENT.is_valid(statement.signer_agent_id):
            raise ProtocolError(f"{where}: not a valid signer")
        key = agent_id_order_key(statement.signer_agent_id)
        if previous is not None and key <= previous:
            raise ProtocolError(f"{at}: not one entry per signer in AgentId byte order")
        previous = key
        if membership.card_of(statement.signer_agent_id) is None:
            raise ProtocolError(f"{where}: the signer is not a member")
        if not names_subject(statement):
            raise ProtocolError(f"{where}: the statement names another subject")
    for index, entry in enumerate(entries):
        if not verify_member_statement(entry, membership, cache=cache):
            raise ProtocolError(f"{at}[{index}]: the signature is invalid")
    return frozenset(entry.signer_agent_id for entry in entries)


def check_action(action: Action, membership: MembershipDescriptor) -> None:
    """Check an action against its (trusted, verified) membership, as §5.4 step 1 asks:
    conversation and membership hash, the intent's hash and fields, the author being a
    member, and for GENESIS the embedded descriptor and an anchor naming this conversation.

    Raises `ProtocolError` naming the first failure.
    """
    expected_hash = membership_hash(membership)
    intent = action.post_intent
    if action.conversation_id != membership.conversation_id:
        raise ProtocolError("action.conversationId is not the membership's conversation")
    match action:
        case GenesisAction(membership=embedded, anchor=anchor):
            if embedded != membership:
                raise ProtocolError("GENESIS.membership is not the conversation's descriptor")
            if anchor.conversation_id != membership.conversation_id:
                raise ProtocolError("GENESIS.anchor names another conversation")
            if anchor.membership_hash != expected_hash:
                raise ProtocolError("GENESIS.anchor names another membership")
        case PostAction(membership_hash=named):
            if named != expected_hash:
                raise ProtocolError("POST.membershipHash is not the membership's hash")
        case _:
            assert_never(action)
    if intent.conversation_id != membership.conversation_id:
        raise ProtocolError("postIntent.conversationId is not the membership's conversation")
    if intent.membership_hash != expected_hash:
        raise ProtocolError("postIntent.membershipHash is not the membership's hash")
    if membership.card_of(intent.author_agent_id) is None:
        raise ProtocolError("postIntent.authorAgentId is not a member")
    if action.post_intent_hash != post_intent_hash(intent):
        raise ProtocolError("action.postIntentHash is not the intent's hash")


def check_action_certificate(
    certificate: ActionCertificate,
    *,
    action: Action,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """Check an action certificate (§5.1): it names `action`'s hash; its entries are
    `action_signature`s naming that hash, one per member in AgentId byte order, each
    verifying; GENESIS has all n members, POST at least q(n) with the author among them.

    Raises `ProtocolError` naming the first failure.
    """
    if certificate.action_hash != action_hash(action):
        raise ProtocolError("action_certificate.actionHash is not the action's hash")
    signers = _check_entries(
        certificate.signatures,
        statement_type=ActionSignature,
        names_subject=lambda statement: statement.action_hash == certificate.action_hash,
        membership=membership,
        cache=cache,
        at="action_certificate.signatures",
    )
    if not action_quorum_met(action, signers, membership.size):
        match action:
            case GenesisAction():
                raise ProtocolError(
                    f"action_certificate: GENESIS needs all {membership.size} members, "
                    f"got {len(signers)}"
                )
            case PostAction():
                raise ProtocolError(
                    f"action_certificate: POST needs {q(membership.size)} members with the "
                    f"author, got {len(signers)}"
                    + ("" if action.author_agent_id in signers else " without the author")
                )
            case _:
                assert_never(action)


def check_durability_certificate(
    certificate: DurabilityCertificate,
    *,
    record_hash: str,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """Check a durability certificate (§5.1): it names `record_hash`; at least q(n)
    `durability_vote`s naming it, this conversation and membership, one per member in
    AgentId byte order, each verifying. Raises `ProtocolError`."""
    if certificate.record_hash != record_hash:
        raise ProtocolError("durability_certificate.recordHash is not the record's hash")
    expected_membership = membership_hash(membership)
    signers = _check_entries(
        certificate.votes,
        statement_type=DurabilityVote,
        names_subject=lambda vote: (
            vote.record_hash == record_hash
            and vote.conversation_id == membership.conversation_id
            and vote.membership_hash == expected_membership
        ),
        membership=membership,
        cache=cache,
        at="durability_certificate.votes",
    )
    if len(signers) < q(membership.size):
        raise ProtocolError(
            f"durability_certificate: needs {q(membership.size)} members, got {len(signers)}"
        )


def check_reanchor_certificate(
    certificate: ReanchorCertificate,
    *,
    reanchor: ReanchorBody,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """Check a re-anchor certificate (§5.1): it names `reanchor`'s hash; at least q(n)
    `reanchor_vote`s naming that hash and carrying that body, one per member in AgentId
    byte order, each verifying. Raises `ProtocolError`."""
    expected = anchor_hash(reanchor)
    if certificate.anchor_hash != expected:
        raise ProtocolError("reanchor_certificate.anchorHash is not the re-anchor's hash")
    signers = _check_entries(
        certificate.votes,
        statement_type=ReanchorVote,
        names_subject=lambda vote: vote.anchor_hash == expected and vote.reanchor == reanchor,
        membership=membership,
        cache=cache,
        at="reanchor_certificate.votes",
    )
    if len(signers) < q(membership.size):
        raise ProtocolError(
            f"reanchor_certificate: needs {q(membership.size)} members, got {len(signers)}"
        )


def check_completed_reanchor(
    completed: CompletedReanchor,
    *,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """Check a completed re-anchor: its body names this conversation and membership, its
    anchorHash is the body's hash, and its certificate holds. Raises `ProtocolError`."""
    body = completed.reanchor
    if body.conversation_id != membership.conversation_id:
        raise ProtocolError("completed_reanchor.reanchor names another conversation")
    if body.membership_hash != membership_hash(membership):
        raise ProtocolError("completed_reanchor.reanchor names another membership")
    if completed.anchor_hash != anchor_hash(body):
        raise ProtocolError("completed_reanchor.anchorHash is not the re-anchor's hash")
    check_reanchor_certificate(
        completed.certificate, reanchor=body, membership=membership, cache=cache
    )


def check_action_certified_record(
    record: ActionCertifiedRecord,
    *,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """Check a staged record against its (trusted, verified) membership: the core's
    membership is it, the hashes re-derive, the action holds (`check_action`), the
    anchor rules of §5.2 hold, and the action certificate is valid.

    GENESIS: `recordCore.anchorHash` is the hash of `action.anchor`, which is the
    `routerAnchor`. POST: `recordCore.anchorHash` is `action.anchorHash`, to which the
    `routerAnchor` (a GenesisAnchor, or a CompletedReanchor that must itself hold) hashes.
    Raises `ProtocolError`.
    """
    core = record.record_core
    if core.membership != membership:
        raise ProtocolError("recordCore.membership is not the conversation's descriptor")
    if record.record_hash != record_hash(core):
        raise ProtocolError("action_certified_record.recordHash is not the core's hash")
    if core.action_hash != action_hash(core.action):
        raise ProtocolError("recordCore.actionHash is not the action's hash")
    check_action(core.action, membership)
    match core.action:
        case GenesisAction(anchor=genesis_anchor):
            if core.anchor_hash != anchor_hash(genesis_anchor):
                raise ProtocolError("recordCore.anchorHash is not the GENESIS anchor's hash")
            if record.router_anchor != genesis_anchor:
                raise ProtocolError("routerAnchor is not the GENESIS anchor")
        case PostAction(anchor_hash=named_anchor):
            if core.anchor_hash != named_anchor:
                raise ProtocolError("recordCore.anchorHash is not the action's anchorHash")
            match record.router_anchor:
                case GenesisAnchor() as genesis:
                    if anchor_hash(genesis) != named_anchor:
                        raise ProtocolError("routerAnchor does not hash to the anchorHash")
                    if (
                        genesis.conversation_id != membership.conversation_id
                        or genesis.membership_hash != membership_hash(membership)
                    ):
                        raise ProtocolError("routerAnchor names another conversation")
                case CompletedReanchor() as completed:
                    if completed.anchor_hash != named_anchor:
                        raise ProtocolError("routerAnchor does not hash to the anchorHash")
                    check_completed_reanchor(completed, membership=membership, cache=cache)
                case _:
                    assert_never(record.router_anchor)
        case _:
            assert_never(core.action)
    check_action_certificate(
        record.action_certificate, action=core.action, membership=membership, cache=cache
    )


def check_certified_record(
    record: CertifiedRecord,
    *,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """Check a whole certified record: `check_action_certified_record` and a durability
    certificate for its RecordHash. For a GENESIS of a conversation not known yet, verify
    `recordCore.membership` with `verify_membership` first and pass it. Raises `ProtocolError`."""
    staged = record.action_certified_record
    check_action_certified_record(staged, membership=membership, cache=cache)
    check_durability_certificate(
        record.durability_certificate,
        record_hash=staged.record_hash,
        membership=membership,
        cache=cache,
    )


def check_catch_up_answer(
    answer: CatchUpPage | CatchUpIncomplete,
    *,
    sender_agent_id: str,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """Check a catch-up answer as the requester must before storing anything (§5.7): the
    request names this conversation; the attestation is a `catch_up_attestation` by the
    envelope sender, a member, over the byte-identical request, the item's kind and hash
    and `hasMore`, and verifies; a page's item holds (`check_certified_record` or
    `check_completed_reanchor`). Raises `ProtocolError`."""
    request = answer.request
    if request.conversation_id != membership.conversation_id:
        raise ProtocolError("catch-up request names another conversation")
    if request.membership_hash != membership_hash(membership):
        raise ProtocolError("catch-up request names another membership")
    statement = answer.attestation.statement
    if not isinstance(statement, CatchUpAttestation):
        raise ProtocolError(f"attestation: {statement.KIND} where catch_up_attestation is required")
    if statement.signer_agent_id != sender_agent_id:
        raise ProtocolError("attestation: the signer is not the envelope sender")
    if statement.request != request:
        raise ProtocolError("attestation: names another request")
    expected = _attested_item(answer)
    if (statement.item_kind, statement.item_hash, statement.has_more) != expected:
        raise ProtocolError("attestation: names another item")
    if not verify_member_statement(answer.attestation, membership, cache=cache):
        raise ProtocolError("attestation: the signature is invalid")
    match answer:
        case CatchUpPage(item=item):
            match item:
                case CertifiedRecord():
                    check_certified_record(item, membership=membership, cache=cache)
                case CompletedReanchor():
                    check_completed_reanchor(item, membership=membership, cache=cache)
                case _:
                    assert_never(item)
        case CatchUpIncomplete():
            pass
        case _:
            assert_never(answer)


def _attested_item(
    answer: CatchUpPage | CatchUpIncomplete,
) -> tuple[CatchUpItemKind, str | None, bool]:
    match answer:
        case CatchUpPage(item=item, has_more=has_more):
            match item:
                case CertifiedRecord():
                    return CatchUpItemKind.CERTIFIED_RECORD, item.record_hash, has_more
                case CompletedReanchor():
                    return CatchUpItemKind.COMPLETED_REANCHOR, item.anchor_hash, has_more
                case _:
                    assert_never(item)
        case CatchUpIncomplete():
            return CatchUpItemKind.INCOMPLETE, None, False
        case _:
            assert_never(answer)


# --- Envelope rules (§5.3) ---------------------------------------------------------------


def envelope_recipients(
    packet: Packet, *, sender_agent_id: str, member_agent_ids: Iterable[str]
) -> tuple[str, ...]:
    """The required recipient list: every member in AgentId byte order (sender included),
    except that a catch-up page or incomplete goes only to responder (the sender) and
    requester, in byte order."""
    match packet:
        case CatchUpPage(request=request) | CatchUpIncomplete(request=request):
            chosen: Iterable[str] = {sender_agent_id, request.requester_agent_id}
        case ActionProposal() | SignedStatement() | CatchUpRequest() | CompletedReanchor():
            chosen = set(member_agent_ids)
        case _:
            assert_never(packet)
    return tuple(sorted(chosen, key=agent_id_order_key))


def seal_envelope(
    key: SigningKey,
    *,
    sender_agent_id: str,
    packet: Packet,
    member_agent_ids: Iterable[str],
    message_id: str | None = None,
) -> SignedEnvelope:
    """Wrap `packet` for the Router: body `b64(JCS(packet))`, the required recipients, a
    fresh MessageId unless given, signed by the sender's key.

    Raises `ProtocolError` when the body would exceed 262,144 bytes.
    """
    body = encode(packet)
    if len(body) > MAX_ENVELOPE_BODY_BYTES:
        raise ProtocolError(
            f"envelope.body: {len(body):,} bytes is larger than {MAX_ENVELOPE_BODY_BYTES:,}"
        )
    envelope = Envelope(
        sender_agent_id=sender_agent_id,
        recipient_agent_ids=envelope_recipients(
            packet, sender_agent_id=sender_agent_id, member_agent_ids=member_agent_ids
        ),
        message_id=message_id if message_id is not None else RandomId.MESSAGE.mint(),
        body=b64(body),
    )
    return sign_envelope(key, envelope)


def envelope_packet(envelope: Envelope) -> Packet:
    """Decode the packet in an envelope's body; raises `ProtocolError`."""
    data = envelope.body_bytes()
    if len(data) > MAX_ENVELOPE_BODY_BYTES:
        raise ProtocolError(f"envelope.body: larger than {MAX_ENVELOPE_BODY_BYTES:,} bytes")
    return decode_packet(data)


def check_envelope(
    signed: SignedEnvelope,
    packet: Packet,
    *,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """The receiver's outer checks (§5.3) for `packet` decoded from `signed`'s body: the
    sender is a member, the recipients are exactly the required list, the sender is a
    statement's signer, a proposal's author (§5.4 step 1) or a catch-up request's
    requester, and the signature verifies under the sender's card.

    Raises `ProtocolError`; the receiver then drops the envelope without a state change.
    """
    envelope = signed.envelope
    card = membership.card_of(envelope.sender_agent_id)
    if card is None:
        raise ProtocolError("envelope: the sender is not a member")
    required = envelope_recipients(
        packet,
        sender_agent_id=envelope.sender_agent_id,
        member_agent_ids=membership.member_agent_ids,
    )
    if envelope.recipient_agent_ids != required:
        raise ProtocolError("envelope: the recipients differ from the required list")
    sender = envelope.sender_agent_id
    match packet:
        case ActionProposal(action=action) if action.author_agent_id != sender:
            raise ProtocolError("envelope: a proposal's sender must be its author")
        case SignedStatement() if packet.signer_agent_id != sender:
            raise ProtocolError("envelope: a statement's signer must be the sender")
        case CatchUpRequest(requester_agent_id=requester) if requester != sender:
            raise ProtocolError("envelope: a catch-up request's sender must be its requester")
        case _:
            pass
    if not verify_envelope_signature(signed, card.public_key, cache=cache):
        raise ProtocolError("envelope: the signature is invalid")

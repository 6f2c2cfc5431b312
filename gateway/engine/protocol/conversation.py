"""Conversation objects (engine.md §1.4, §5.2): who the members are and what they certify.

`ConversationIdentity` (the member set a ConversationId hashes) and the `MembershipDescriptor`
of the members' signed cards; the immutable `PostIntent`; the anchors a record is certified
under (`GenesisAnchor`, `ReanchorBody`); the two actions (`GenesisAction`, `PostAction`, read
by `action_from_json`); and the `RecordCore` a RecordHash covers. Decoding is strict (the
package docstring lists what is refused); rules that need a hash, a key or a second object
are in `rules.py` and `signatures.py`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, Final, Self, TypeAlias

from harness_contract.content import content_from_json, content_to_json
from harness_contract.errors import SendError
from harness_contract.ids import HashId, RandomId, agent_id_order_key
from harness_contract.jsonvalue import JsonValue
from harness_contract.values import Content

from gateway.identity.cards import AgentCard, SignedAgentCard
from gateway.identity.objects import (
    VERSION,
    ProtocolError,
    array_field,
    hash_id_field,
    kind_of,
    null_field,
    object_fields,
    random_id_field,
    show,
    strictly_byte_ordered,
)

MIN_MEMBERS: Final = 2
"""Fewest members of a conversation (a direct one)."""

MAX_MEMBERS: Final = 32
"""Most members of a conversation, and so most entries of a certificate or recipient list."""

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
            agent_id_item(item, f"{at}.memberAgentIds[{i}]") for i, item in enumerate(items)
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
            agent_id_item(agent_id, f"memberAgentIds[{index}]")
        if len(set(ids)) != len(ids):
            raise ProtocolError("memberAgentIds: an AgentId is listed twice")
        if not MIN_MEMBERS <= len(ids) <= MAX_MEMBERS:
            raise ProtocolError(
                f"memberAgentIds: a conversation has 2 to 32 members, not {len(ids)}"
            )
        return cls(member_agent_ids=tuple(sorted(ids, key=agent_id_order_key)))


def agent_id_item(value: object, at: str) -> str:
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
        problem = membership_order_problem(descriptor)
        if problem is not None:
            raise ProtocolError(f"{at}.members: {problem}")
        return descriptor


def membership_order_problem(descriptor: MembershipDescriptor) -> str | None:
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

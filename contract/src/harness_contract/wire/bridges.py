"""The closed enums both ways: `EnumBridge` and one bridge per closed value set, each
failing at import when a member is unmapped.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Generic, Protocol, TypeVar

from harness_contract._gen.harness.v1 import errors_pb2, guidance_pb2, management_pb2, types_pb2
from harness_contract.errors import (
    AnswerFieldReason,
    AuthenticationErrorReason,
    ConnectErrorReason,
    DeliveryAcknowledgeErrorReason,
    FirewallRefusal,
    InvalidRequestError,
    ListenErrorReason,
    MessageTextOperation,
    SendErrorReason,
)
from harness_contract.guidance import Expectation
from harness_contract.values import CollectiveOp, FailureDelivery

OursT = TypeVar("OursT")
E = TypeVar("E", bound=enum.Enum)
ProtoT = TypeVar("ProtoT", bound=int)
ProtoT_co = TypeVar("ProtoT_co", bound=int, covariant=True)


class _ProtoEnum(Protocol[ProtoT_co]):
    """What a generated protobuf enum (its `EnumTypeWrapper`) offers the bridge."""

    def Value(self, name: str) -> ProtoT_co:  # noqa: N802 - protobuf's name
        """The number of the member called `name`; ValueError when there is none."""
        ...

    def items(self) -> Sequence[tuple[str, ProtoT_co]]:
        """Every member's name and number."""
        ...


class EnumBridge(Generic[OursT, ProtoT]):
    """One closed value set of ours and its protobuf enum, value for value.

    Built by name: each of our values has a protobuf member `<prefix><name>`, and every
    protobuf member but `<prefix>UNSPECIFIED` has one of our values; a value missing on
    either side raises ValueError at import, so a renamed or added member never ships
    unmapped. UNSPECIFIED is never sent, and received it is refused like an unknown
    number, unless the contract gives the field a default (`unspecified`)."""

    __slots__ = ("_from", "_to", "_unspecified")

    def __init__(
        self,
        proto: _ProtoEnum[ProtoT],
        prefix: str,
        names: Mapping[OursT, str],
        *,
        unspecified: OursT | None = None,
    ) -> None:
        """`names` gives each of our values its protobuf name after `prefix`."""
        self._to: Final = {ours: proto.Value(prefix + name) for ours, name in names.items()}
        self._unspecified: Final = proto.Value(prefix + "UNSPECIFIED")
        self._from: Final = {number: ours for ours, number in self._to.items()}
        unmapped = [
            name
            for name, number in proto.items()
            if number not in self._from and number != self._unspecified
        ]
        if unmapped:
            raise ValueError(f"no value of ours for {', '.join(unmapped)}")
        if unspecified is not None:
            self._from[self._unspecified] = unspecified

    def to_proto(self, value: OursT) -> ProtoT:
        """The protobuf number of one of our values."""
        return self._to[value]

    def to_proto_or_unspecified(self, value: OursT) -> ProtoT:
        """The protobuf number of `value`, UNSPECIFIED for a value outside the set."""
        return self._to.get(value, self._unspecified)

    def from_proto(self, number: ProtoT, where: str) -> OursT:
        """Our value of a received number; UNSPECIFIED (unless it has a default) and
        numbers this version does not know are `InvalidRequestError` naming `where`."""
        try:
            return self._from[number]
        except KeyError:
            raise InvalidRequestError.of_field(
                f"{where}: unknown or unspecified value {number!r}"
            ) from None


def _members(
    ours: type[E], proto: _ProtoEnum[ProtoT], prefix: str, *, unspecified: E | None = None
) -> EnumBridge[E, ProtoT]:
    """The bridge of one of our enums whose member names are the protobuf names
    (`SendErrorReason.UNKNOWN_AGENT` is `SEND_ERROR_REASON_UNKNOWN_AGENT`)."""
    return EnumBridge(
        proto, prefix, {member: member.name for member in ours}, unspecified=unspecified
    )


def _words(words: Iterable[str], proto: _ProtoEnum[ProtoT], prefix: str) -> EnumBridge[str, ProtoT]:
    """The bridge of a closed set of lowercase words (`"direct"` is `..._DIRECT`)."""
    return EnumBridge(proto, prefix, {word: word.upper() for word in words})


SEND_REASONS: Final = _members(SendErrorReason, errors_pb2.SendErrorReason, "SEND_ERROR_REASON_")
FIELD_REASONS: Final = _members(
    AnswerFieldReason, errors_pb2.AnswerFieldReason, "ANSWER_FIELD_REASON_"
)
LISTEN_REASONS: Final = _members(
    ListenErrorReason, errors_pb2.ListenErrorReason, "LISTEN_ERROR_REASON_"
)
ACK_REASONS: Final = _members(
    DeliveryAcknowledgeErrorReason,
    errors_pb2.DeliveryAcknowledgeErrorReason,
    "DELIVERY_ACKNOWLEDGE_ERROR_REASON_",
)
CONNECT_REASONS: Final = _members(
    ConnectErrorReason, errors_pb2.ConnectErrorReason, "CONNECT_ERROR_REASON_"
)
TEXT_OPERATIONS: Final = _members(
    MessageTextOperation, errors_pb2.MessageTextOperation, "MESSAGE_TEXT_OPERATION_"
)
AUTHENTICATION_REASONS: Final = _members(
    AuthenticationErrorReason,
    errors_pb2.AuthenticationErrorReason,
    "AUTHENTICATION_ERROR_REASON_",
)
REFUSALS: Final = _members(FirewallRefusal, guidance_pb2.FirewallRefusal, "FIREWALL_REFUSAL_")
"""The closed refusals both ways (also for the external middleware's answers)."""
EXPECTATIONS: Final = _members(Expectation, guidance_pb2.Expectation, "EXPECTATION_")
OPS: Final = _members(CollectiveOp, types_pb2.CollectiveOp, "COLLECTIVE_OP_")
FAILURE_DELIVERIES: Final = _members(
    FailureDelivery,
    types_pb2.FailureDelivery,
    "FAILURE_DELIVERY_",
    # The contract's default: an unset failure delivery is `result`.
    unspecified=FailureDelivery.RESULT,
)
CONVERSATION_KINDS: Final = _words(
    ("direct", "group"), management_pb2.ConversationKind, "CONVERSATION_KIND_"
)
MODES: Final = _words(
    ("embedded", "joined", "cluster", "router", "registry"),
    management_pb2.GatewayMode,
    "GATEWAY_MODE_",
)
ROUTER_STATES: Final = _words(
    ("recovering", "active", "detached"), management_pb2.RouterAttachment, "ROUTER_ATTACHMENT_"
)
REPLICA_STATES: Final = _words(
    ("joined", "serving", "withdrawn", "lost", "closed"),
    management_pb2.ReplicaState,
    "REPLICA_STATE_",
)

"""Agent cards: what the Registry mints and signs, and how anyone checks the signature.

`AgentCard` binds an agent's name and id to its public key; `SignedAgentCard` carries the
Registry's `SIG(registryKey, "agent-card", card)`. The Registry signs (`sign_card`); every
daemon verifies against the pinned Registry key (`verify_card`) before it trusts a card.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final, Self

from harness_contract.addresses import is_agent_name
from harness_contract.ids import RandomId
from harness_contract.jsonvalue import JsonValue

from gateway.identity.keys import SigningKey, VerifyCache, is_public_key_text, verify
from gateway.identity.objects import (
    VERSION,
    ProtocolError,
    is_timestamp,
    object_fields,
    random_id_field,
    signature_field,
)

# --- Registry objects (engine.md §3) -----------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentCard:
    """`{kind:"agent_card", agentId, agentName, publicKey, issuedAt}`, minted by the Registry."""

    KIND: ClassVar[str] = "agent_card"
    agent_id: str
    agent_name: str
    public_key: str
    """`b64` of the 32-byte raw Ed25519 public key."""
    issued_at: str
    """UTC `YYYY-MM-DDTHH:MM:SSZ`."""

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "agentId": self.agent_id,
            "agentName": self.agent_name,
            "publicKey": self.public_key,
            "issuedAt": self.issued_at,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "agent_card") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("agentId", "agentName", "publicKey", "issuedAt"), at)
        name = obj["agentName"]
        if not is_agent_name(name):
            raise ProtocolError(f"{at}.agentName: not a valid agent name")
        assert isinstance(name, str)
        public_key = obj["publicKey"]
        if not is_public_key_text(public_key):
            raise ProtocolError(f"{at}.publicKey: not b64 of a 32-byte public key")
        assert isinstance(public_key, str)
        issued_at = obj["issuedAt"]
        if not is_timestamp(issued_at):
            raise ProtocolError(f"{at}.issuedAt: not a UTC YYYY-MM-DDTHH:MM:SSZ time")
        assert isinstance(issued_at, str)
        return cls(
            agent_id=random_id_field(obj, "agentId", RandomId.AGENT, at),
            agent_name=name,
            public_key=public_key,
            issued_at=issued_at,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedAgentCard:
    """`{kind:"signed_agent_card", card, signature}`: `SIG(registryKey, "agent-card", card)`."""

    KIND: ClassVar[str] = "signed_agent_card"
    card: AgentCard
    signature: str

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "card": self.card.to_json(),
            "signature": self.signature,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "signed_agent_card") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("card", "signature"), at)
        return cls(
            card=AgentCard.from_json(obj["card"], at=f"{at}.card"),
            signature=signature_field(obj, "signature", at),
        )


CARD_ARTIFACT: Final = "agent-card"
"""Artifact of the Registry's card signature."""


def sign_card(registry_key: SigningKey, card: AgentCard) -> SignedAgentCard:
    """The Registry's signed card."""
    return SignedAgentCard(card=card, signature=registry_key.sign(CARD_ARTIFACT, card.to_json()))


def verify_card(
    signed: SignedAgentCard, registry_public_key: str, *, cache: VerifyCache | None = None
) -> bool:
    """True when the card carries the pinned Registry key's signature."""
    return verify(
        registry_public_key, CARD_ARTIFACT, signed.card.to_json(), signed.signature, cache=cache
    )

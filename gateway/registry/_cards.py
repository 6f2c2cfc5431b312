"""Minting and reading Registry cards: shared by every in-process backend."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from gateway.identity.cards import AgentCard, SignedAgentCard, sign_card
from gateway.identity.keys import SigningKey
from gateway.identity.objects import ProtocolError, decode, format_timestamp
from gateway.registry.port import AgentIdMinter


def utc_now() -> dt.datetime:
    """The current UTC time (the default clock of the in-process backends)."""
    return dt.datetime.now(dt.UTC)


def mint_card(
    registry_key: SigningKey,
    *,
    agent_id: str,
    agent_name: str,
    public_key: str,
    issued_at: dt.datetime,
) -> SignedAgentCard:
    """A card for a new registration, signed with the Registry key."""
    card = AgentCard(
        agent_id=agent_id,
        agent_name=agent_name,
        public_key=public_key,
        issued_at=format_timestamp(issued_at),
    )
    return sign_card(registry_key, card)


def decode_stored_card(data: object) -> SignedAgentCard:
    """A card as a database column holds it (its encoded bytes), decoded.

    Raises `ProtocolError` for anything else: the backend reports the store as holding an
    undecodable card."""
    if not isinstance(data, bytes):
        raise ProtocolError("a stored card is not bytes")
    return decode(data, SignedAgentCard)


@dataclass(frozen=True, slots=True, kw_only=True)
class CardIssuer:
    """What a backend mints a registration's card with: the Registry key that signs it, the
    clock of its `issuedAt` and the AgentId minter (chosen in tests, random otherwise)."""

    signing_key: SigningKey
    clock: Callable[[], dt.datetime]
    mint_agent_id: AgentIdMinter

    def issue(self, agent_name: str, public_key: str) -> SignedAgentCard:
        """A new card for `agent_name` and `public_key`: a fresh AgentId, issued now."""
        return mint_card(
            self.signing_key,
            agent_id=self.mint_agent_id(),
            agent_name=agent_name,
            public_key=public_key,
            issued_at=self.clock(),
        )

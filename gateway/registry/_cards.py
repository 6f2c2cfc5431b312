"""Minting Registry cards: shared by every in-process backend."""

from __future__ import annotations

import datetime as dt

from gateway.identity.cards import AgentCard, SignedAgentCard, sign_card
from gateway.identity.keys import SigningKey
from gateway.identity.objects import format_timestamp


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

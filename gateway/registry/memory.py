"""`MemoryRegistry`: the in-memory Registry for unit tests, behaving as `SqliteRegistry`."""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Callable

from harness_contract.ids import RandomId, agent_id_order_key

from gateway.identity.cards import SignedAgentCard
from gateway.identity.keys import SigningKey
from gateway.registry._backend import CardMinter, CardRegistry
from gateway.registry._cards import CardIssuer, utc_now
from gateway.registry.port import (
    AgentIdMinter,
    KeyAlreadyRegistered,
    NameTaken,
    Registered,
    RegisterOutcome,
)


class MemoryRegistry(CardRegistry):
    """A `RegistryPort` held in dictionaries; nothing survives the object."""

    def __init__(
        self,
        signing_key: SigningKey | None = None,
        *,
        clock: Callable[[], dt.datetime] = utc_now,
        mint_agent_id: AgentIdMinter = RandomId.AGENT.mint,
    ) -> None:
        super().__init__(
            CardIssuer(
                signing_key=signing_key if signing_key is not None else SigningKey.generate(),
                clock=clock,
                mint_agent_id=mint_agent_id,
            )
        )
        self._by_id: dict[bytes, SignedAgentCard] = {}
        """By the AgentId's 16 bytes (its canonical text is one to one with them)."""
        self._by_name: dict[str, SignedAgentCard] = {}
        self._by_key: dict[str, SignedAgentCard] = {}
        self._order: list[bytes] = []
        """Every AgentId's bytes, kept sorted: the listing order."""

    async def _register(
        self, agent_name: str, public_key: str, mint: CardMinter
    ) -> RegisterOutcome:
        # The key is checked before the name, as `existing_outcome` does for stored rows.
        existing = self._by_key.get(public_key)
        if existing is not None:
            if existing.card.agent_name == agent_name:
                return Registered(card=existing)
            return KeyAlreadyRegistered()
        if agent_name in self._by_name:
            return NameTaken()
        card = mint()
        agent_id = agent_id_order_key(card.card.agent_id)
        if agent_id in self._by_id:
            raise ValueError("the AgentId minter repeated an id")
        self._by_id[agent_id] = card
        self._by_name[agent_name] = card
        self._by_key[public_key] = card
        bisect.insort(self._order, agent_id)
        return Registered(card=card)

    async def _card_by_id(self, agent_id: bytes) -> SignedAgentCard | None:
        return self._by_id.get(agent_id)

    async def _card_by_name(self, agent_name: str) -> SignedAgentCard | None:
        return self._by_name.get(agent_name)

    async def _cards_after(self, bound: bytes, limit: int) -> tuple[SignedAgentCard, ...]:
        # bisect_right: an entry equal to the bound is skipped (the bound is exclusive).
        start = bisect.bisect_right(self._order, bound)
        return tuple(self._by_id[agent_id] for agent_id in self._order[start : start + limit])

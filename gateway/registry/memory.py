"""`MemoryRegistry`: the in-memory Registry for unit tests, behaving as `SqliteRegistry`."""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Callable

from harness_contract.addresses import is_agent_name
from harness_contract.ids import RandomId, agent_id_order_key

from gateway.identity.cards import SignedAgentCard
from gateway.identity.keys import SigningKey
from gateway.registry._cards import mint_card, utc_now
from gateway.registry.port import (
    LIST_LIMIT_MAX,
    AgentIdMinter,
    KeyAlreadyRegistered,
    NameTaken,
    Registered,
    RegisterOutcome,
    check_list_arguments,
    check_registration,
)


class MemoryRegistry:
    """A `RegistryPort` held in dictionaries; nothing survives the object."""

    def __init__(
        self,
        signing_key: SigningKey | None = None,
        *,
        clock: Callable[[], dt.datetime] = utc_now,
        mint_agent_id: AgentIdMinter = RandomId.AGENT.mint,
    ) -> None:
        self._key = signing_key if signing_key is not None else SigningKey.generate()
        self._clock = clock
        self._mint_agent_id = mint_agent_id
        self._by_id: dict[str, SignedAgentCard] = {}
        self._by_name: dict[str, SignedAgentCard] = {}
        self._by_key: dict[str, SignedAgentCard] = {}
        self._order: list[tuple[bytes, str]] = []
        """(AgentId bytes, AgentId), kept sorted: the listing order."""

    def registry_public_key(self) -> str:
        """`b64` of the Registry's public key."""
        return self._key.public_key_b64

    async def register(self, agent_name: str, public_key: str) -> RegisterOutcome:
        """See `RegistryPort.register`."""
        check_registration(agent_name, public_key)
        existing = self._by_key.get(public_key)
        if existing is not None:
            if existing.card.agent_name == agent_name:
                return Registered(card=existing)
            return KeyAlreadyRegistered()
        if agent_name in self._by_name:
            return NameTaken()
        agent_id = self._mint_agent_id()
        if agent_id in self._by_id:
            raise ValueError("the AgentId minter repeated an id")
        card = mint_card(
            self._key,
            agent_id=agent_id,
            agent_name=agent_name,
            public_key=public_key,
            issued_at=self._clock(),
        )
        self._by_id[agent_id] = card
        self._by_name[agent_name] = card
        self._by_key[public_key] = card
        bisect.insort(self._order, (agent_id_order_key(agent_id), agent_id))
        return Registered(card=card)

    async def lookup_by_id(self, agent_id: str) -> SignedAgentCard | None:
        """See `RegistryPort.lookup_by_id`."""
        return self._by_id.get(agent_id) if RandomId.AGENT.is_valid(agent_id) else None

    async def lookup_by_name(self, agent_name: str) -> SignedAgentCard | None:
        """See `RegistryPort.lookup_by_name`."""
        return self._by_name.get(agent_name) if is_agent_name(agent_name) else None

    async def list(
        self, after_agent_id: str | None = None, limit: int = LIST_LIMIT_MAX
    ) -> tuple[SignedAgentCard, ...]:
        """See `RegistryPort.list`."""
        check_list_arguments(after_agent_id, limit)
        start = 0
        if after_agent_id is not None:
            # bisect_right: an entry equal to the bound is skipped (the bound is exclusive).
            start = bisect.bisect_right(
                self._order, agent_id_order_key(after_agent_id), key=lambda entry: entry[0]
            )
        return tuple(self._by_id[agent_id] for _, agent_id in self._order[start : start + limit])

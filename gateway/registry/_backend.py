"""What every in-process Registry backend does the same, whatever holds its cards.

`CardRegistry` is the `RegistryPort` half that is not storage: it checks a registration's
arguments and has its card minted (`CardIssuer`: AgentId, `issuedAt`, the Registry's
signature), decodes a lookup's id or name (a malformed one finds nothing without touching
storage), and checks `list`'s bound and limit. A backend implements four storage steps on
what is already checked; `DatabaseRegistry` adds the OPEN/CLOSED lifecycle of a backend
with a database behind it. `existing_outcome` is the registration decision given what a
database holds, so the rule "the key is checked before the name" (engine.md §3) is
written once for the SQL backends.
"""

from __future__ import annotations

import abc
import enum
import functools
from collections.abc import Callable
from typing import TypeAlias

from harness_contract.addresses import is_agent_name
from harness_contract.ids import RandomId, agent_id_order_key

from gateway.closing import AsyncClosing
from gateway.identity.cards import SignedAgentCard
from gateway.registry._cards import CardIssuer, decode_stored_card
from gateway.registry.port import (
    LIST_LIMIT_MAX,
    KeyAlreadyRegistered,
    NameTaken,
    Registered,
    RegisterOutcome,
    RegistryUnavailable,
    check_list_arguments,
    check_registration,
)

CardMinter: TypeAlias = Callable[[], SignedAgentCard]
"""Mints the card of the registration in hand (a fresh AgentId, the clock's `issuedAt`)."""


class RegistryState(enum.Enum):
    """Lifecycle of a Registry backend with a database (`SqliteRegistry`, `PostgresRegistry`)."""

    OPEN = "open"
    """Serving calls."""
    CLOSED = "closed"
    """Closed; every call raises `RegistryUnavailable`."""


class CardRegistry(abc.ABC):
    """A `RegistryPort` whose storage steps a subclass supplies.

    The public methods check and decode their arguments, then call the step; a step sees
    only well-formed input, so it needs no check of its own."""

    def __init__(self, issuer: CardIssuer) -> None:
        self._issuer = issuer

    def registry_public_key(self) -> str:
        """`b64` of the Registry's public key."""
        return self._issuer.signing_key.public_key_b64

    async def register(self, agent_name: str, public_key: str) -> RegisterOutcome:
        """See `RegistryPort.register`."""
        check_registration(agent_name, public_key)
        mint = functools.partial(self._issuer.issue, agent_name, public_key)
        return await self._register(agent_name, public_key, mint)

    async def lookup_by_id(self, agent_id: str) -> SignedAgentCard | None:
        """See `RegistryPort.lookup_by_id`."""
        key = RandomId.AGENT.decode(agent_id)
        if key is None:
            return None
        return await self._card_by_id(key)

    async def lookup_by_name(self, agent_name: str) -> SignedAgentCard | None:
        """See `RegistryPort.lookup_by_name`."""
        if not is_agent_name(agent_name):
            return None
        return await self._card_by_name(agent_name)

    async def list(
        self, after_agent_id: str | None = None, limit: int = LIST_LIMIT_MAX
    ) -> tuple[SignedAgentCard, ...]:
        """See `RegistryPort.list`."""
        check_list_arguments(after_agent_id, limit)
        # Every AgentId is 16 bytes, so the empty bound admits them all.
        bound = b"" if after_agent_id is None else agent_id_order_key(after_agent_id)
        return await self._cards_after(bound, limit)

    @abc.abstractmethod
    async def _register(
        self, agent_name: str, public_key: str, mint: CardMinter
    ) -> RegisterOutcome:
        """Register a checked name and key: the existing card's answer (`existing_outcome`),
        else `mint()`'s card stored and `Registered`, atomically: of two registrations
        racing for one name or key, one stores its card and the other answers with it."""

    @abc.abstractmethod
    async def _card_by_id(self, agent_id: bytes) -> SignedAgentCard | None:
        """The card whose AgentId has these 16 bytes, or None."""

    @abc.abstractmethod
    async def _card_by_name(self, agent_name: str) -> SignedAgentCard | None:
        """The card of this well-formed name, or None."""

    @abc.abstractmethod
    async def _cards_after(self, bound: bytes, limit: int) -> tuple[SignedAgentCard, ...]:
        """Up to `limit` cards whose AgentId bytes sort strictly after `bound`, in that order."""


class DatabaseRegistry(CardRegistry, AsyncClosing):
    """A `CardRegistry` with a database to close: OPEN until `close`, then every storage
    step refuses with `RegistryUnavailable` (a subclass calls `_check_open` first)."""

    _state: RegistryState = RegistryState.OPEN
    """OPEN from construction (a class default); the first `close` sets CLOSED."""

    @property
    def state(self) -> RegistryState:
        """OPEN until `close`."""
        return self._state

    async def close(self) -> None:
        """Close the database; idempotent."""
        if self._state is RegistryState.CLOSED:
            return
        self._state = RegistryState.CLOSED
        await self._close_database()

    def _check_open(self) -> None:
        if self._state is not RegistryState.OPEN:
            raise RegistryUnavailable(f"the registry is {self._state.value}")

    @abc.abstractmethod
    async def _close_database(self) -> None:
        """Release the connection or pool; called once, by the first `close`."""


def existing_outcome(
    agent_name: str, key_holder: tuple[object, object] | None, *, name_held: bool
) -> RegisterOutcome | None:
    """What the stored cards answer for registering `agent_name`, None when a new card is due.

    `key_holder` is (its name, its stored card bytes) of the card holding the key, if any;
    `name_held` says whether a card holds `agent_name` (read only when no card holds the
    key). The key is checked before the name (engine.md §3): the same name and key again
    is the existing card; the key under another name is `KeyAlreadyRegistered`."""
    if key_holder is not None:
        held_name, stored_card = key_holder
        if held_name != agent_name:
            return KeyAlreadyRegistered()
        return Registered(card=decode_stored_card(stored_card))
    return NameTaken() if name_held else None

"""`RegistryClient`: how the daemon resolves agents (engine.md §3).

Every card a backend returns is verified against the pinned Registry public key and must
answer the question asked (the same id or name). Verified cards are cached by id and name
in a bounded LRU for the process lifetime (cards are immutable, so an eviction only costs
a refetch); `not_found` and failures are never cached. Concurrent lookups of one key share
one backend call, which has a 10-second deadline.

Outcomes map onto the send pipeline: `NotFound` → `unknown-agent`; `RegistryUnavailable`
→ `network-unavailable`; `RegistryVersionMismatch` → `version-mismatch`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeAlias, TypeVar, assert_never

from gateway.identity.cards import SignedAgentCard, verify_card
from gateway.identity.keys import VerifyCache
from gateway.registry.port import (
    LIST_LIMIT_MAX,
    KeyAlreadyRegistered,
    NameTaken,
    Registered,
    RegisterOutcome,
    RegistryError,
    RegistryPort,
    RegistryUnavailable,
)

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

REGISTRY_DEADLINE: Final = 10.0
"""Seconds one Registry call may take before it fails `RegistryUnavailable` (engine.md §6)."""

REGISTRY_CARD_CACHE_SIZE: Final = 4_096
"""Verified cards the client keeps (each under its id and its name).

Cards are immutable, so the bound only trades memory for refetches."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Found:
    """`found{card}`: a verified card answering the question."""

    card: SignedAgentCard


@dataclass(frozen=True, slots=True, kw_only=True)
class NotFound:
    """`not_found`, or a verified card for another name or id: `unknown-agent`."""


LookupOutcome: TypeAlias = Found | NotFound


class _Field(enum.Enum):
    ID = "id"
    NAME = "name"


_Key: TypeAlias = tuple[_Field, str]


class RegistryClientState(enum.Enum):
    """Lifecycle of a `RegistryClient`."""

    OPEN = "open"
    """Answering lookups."""
    CLOSED = "closed"
    """Closed; calls raise `RegistryUnavailable` and in-flight lookups were cancelled."""


class RegistryClient:
    """Verifying, caching, single-flight access to one `RegistryPort`."""

    def __init__(
        self,
        registry: RegistryPort,
        *,
        registry_public_key: str,
        cache_size: int = REGISTRY_CARD_CACHE_SIZE,
        deadline: float = REGISTRY_DEADLINE,
        verify_cache: VerifyCache | None = None,
    ) -> None:
        """Wrap `registry`, trusting only cards signed by `registry_public_key` (the pinned
        key: configured, or the in-process Registry's own in the embedded mode)."""
        if cache_size < 1:
            raise ValueError("the card cache holds at least one card")
        self._registry = registry
        self._pinned_key = registry_public_key
        self._capacity = cache_size * 2
        self._deadline = deadline
        self._verify_cache = verify_cache
        self._cards: OrderedDict[_Key, SignedAgentCard] = OrderedDict()
        self._inflight: dict[_Key, asyncio.Task[LookupOutcome]] = {}
        self._state = RegistryClientState.OPEN

    @property
    def state(self) -> RegistryClientState:
        """OPEN until `close`."""
        return self._state

    async def close(self) -> None:
        """Cancel and await in-flight lookups; idempotent."""
        self._state = RegistryClientState.CLOSED
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._inflight.clear()

    async def lookup_by_id(self, agent_id: str) -> LookupOutcome:
        """Resolve an AgentId. Raises `RegistryUnavailable` or `RegistryVersionMismatch`."""
        return await self._lookup((_Field.ID, agent_id), self._registry.lookup_by_id)

    async def lookup_by_name(self, agent_name: str) -> LookupOutcome:
        """Resolve an agent name. Raises `RegistryUnavailable` or `RegistryVersionMismatch`."""
        return await self._lookup((_Field.NAME, agent_name), self._registry.lookup_by_name)

    async def register(self, agent_name: str, public_key: str) -> RegisterOutcome:
        """Register through the backend and verify the card it returns.

        A returned card must carry the pinned signature, the asked name and key. Raises
        `RegistryUnavailable` (also for a card failing those checks, which is logged),
        `RegistryVersionMismatch`, or `ValueError` for a malformed name or key.
        """
        self._check_open()
        outcome = await self._call(lambda: self._registry.register(agent_name, public_key))
        match outcome:
            case Registered(card=card):
                self._check_card(card)
                if card.card.agent_name != agent_name or card.card.public_key != public_key:
                    logger.error("registry returned a card for another registration")
                    raise RegistryUnavailable("the registry returned a card for another request")
                self._remember(card)
            case NameTaken() | KeyAlreadyRegistered():
                pass
            case _:
                assert_never(outcome)
        return outcome

    async def list(
        self, after_agent_id: str | None = None, limit: int = LIST_LIMIT_MAX
    ) -> tuple[SignedAgentCard, ...]:
        """One verified page of the listing (AgentId byte order, exclusive bound).

        Raises `RegistryUnavailable` (also when a card fails verification),
        `RegistryVersionMismatch`, or `ValueError` for malformed arguments.
        """
        self._check_open()
        cards = await self._call(lambda: self._registry.list(after_agent_id, limit))
        for card in cards:
            self._check_card(card)
        for card in cards:
            self._remember(card)
        return cards

    def _check_open(self) -> None:
        if self._state is not RegistryClientState.OPEN:
            raise RegistryUnavailable(f"the registry client is {self._state.value}")

    async def _lookup(
        self, key: _Key, fetch: Callable[[str], Awaitable[SignedAgentCard | None]]
    ) -> LookupOutcome:
        self._check_open()
        cached = self._cards.get(key)
        if cached is not None:
            self._cards.move_to_end(key)
            return Found(card=cached)
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.create_task(
                self._fetch(key, fetch), name=f"registry-lookup-{key[0].value}"
            )
            self._inflight[key] = task
            task.add_done_callback(lambda done: self._forget(key, done))
        try:
            # shield: a caller that goes away must not cancel the call the others share.
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and (current is None or current.cancelling() == 0):
                # The shared call was cancelled by `close`, not this caller.
                raise RegistryUnavailable("the registry client closed") from None
            raise

    def _forget(self, key: _Key, task: asyncio.Task[LookupOutcome]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled():
            # Mark the outcome retrieved: every caller may have gone away.
            task.exception()

    async def _fetch(
        self, key: _Key, fetch: Callable[[str], Awaitable[SignedAgentCard | None]]
    ) -> LookupOutcome:
        field, wanted = key
        card = await self._call(lambda: fetch(wanted))
        if card is None:
            return NotFound()
        self._check_card(card)
        match field:
            case _Field.ID:
                answers = card.card.agent_id == wanted
            case _Field.NAME:
                answers = card.card.agent_name == wanted
            case _:
                assert_never(field)
        if not answers:
            # engine.md §3: a card for another name is `unknown-agent`, never cached.
            logger.warning("registry answered a %s lookup with another agent's card", field.value)
            return NotFound()
        self._remember(card)
        return Found(card=card)

    async def _call(self, call: Callable[[], Awaitable[_T]]) -> _T:
        try:
            async with asyncio.timeout(self._deadline):
                return await call()
        except TimeoutError:
            raise RegistryUnavailable(
                f"the registry did not answer within {self._deadline:g} s"
            ) from None
        except (RegistryError, ValueError):
            raise
        except Exception as error:
            logger.warning("registry call failed error=%s", type(error).__name__, exc_info=True)
            raise RegistryUnavailable(
                f"the registry call failed: {type(error).__name__}"
            ) from error

    def _check_card(self, card: SignedAgentCard) -> None:
        if not verify_card(card, self._pinned_key, cache=self._verify_cache):
            logger.error("registry card failed verification agent_id=%s", card.card.agent_id)
            raise RegistryUnavailable("a registry card failed verification")

    def _remember(self, card: SignedAgentCard) -> None:
        for key in ((_Field.ID, card.card.agent_id), (_Field.NAME, card.card.agent_name)):
            self._cards[key] = card
            self._cards.move_to_end(key)
        while len(self._cards) > self._capacity:
            self._cards.popitem(last=False)

"""The Registry seam (engine.md §3): what every Registry backend answers.

Names map to immutable Registry-signed cards. A backend mints the AgentId and `issuedAt`,
signs the card with the Registry key, and never rotates, revokes or issues a second card
for an AgentId. The in-process backends are `SqliteRegistry` and `MemoryRegistry`; a
remote one lives in `gateway/rpc/`. Callers resolve names through `RegistryClient`, which
verifies every card against the pinned Registry key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol, TypeAlias

from harness_contract.addresses import is_agent_name
from harness_contract.ids import RandomId

from gateway.identity.cards import SignedAgentCard
from gateway.identity.keys import is_public_key_text

LIST_LIMIT_MAX: Final = 100
"""Most cards one `list` call returns (engine.md §3)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Registered:
    """`registered{card}`: a new card, or the existing one for the same name and key."""

    card: SignedAgentCard


@dataclass(frozen=True, slots=True, kw_only=True)
class NameTaken:
    """`name_taken`: another key holds the name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyAlreadyRegistered:
    """`key_already_registered`: the key holds another name (checked before the name)."""


RegisterOutcome: TypeAlias = Registered | NameTaken | KeyAlreadyRegistered


class RegistryError(Exception):
    """A Registry call failed; `detail` says why (never a key)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class RegistryUnavailable(RegistryError):
    """Any Registry failure but a version mismatch: unreachable, deadline, a store error,
    a card failing verification. A send maps it to `network-unavailable`."""


class RegistryVersionMismatch(RegistryError):
    """The Registry runs another `harness-version` or returned an object of another
    version. A send maps it to `version-mismatch`."""


class RegistryPort(Protocol):
    """One Registry backend.

    Methods raise `RegistryUnavailable` or `RegistryVersionMismatch` for a failed call and
    `ValueError` for arguments no Registry accepts (a caller defect); lookups of a
    malformed id or name simply find nothing.
    """

    def registry_public_key(self) -> str:
        """`b64` of the Registry's 32-byte Ed25519 public key, which signs every card."""
        ...

    async def register(self, agent_name: str, public_key: str) -> RegisterOutcome:
        """Register `public_key` (`b64` of 32 raw bytes) under `agent_name`.

        The key is checked before the name: a key already registered under this name
        returns its existing card, under another name `KeyAlreadyRegistered`; then a name
        held by another key is `NameTaken`; otherwise a new card is minted.
        """
        ...

    async def lookup_by_id(self, agent_id: str) -> SignedAgentCard | None:
        """The card of `agent_id`, or None (`not_found`)."""
        ...

    async def lookup_by_name(self, agent_name: str) -> SignedAgentCard | None:
        """The card named `agent_name` (compared byte for byte), or None (`not_found`)."""
        ...

    async def list(
        self, after_agent_id: str | None = None, limit: int = LIST_LIMIT_MAX
    ) -> tuple[SignedAgentCard, ...]:
        """Up to `limit` (1..100) cards in AgentId byte order, strictly after
        `after_agent_id` when given (an exclusive bound, registered or not)."""
        ...


def check_registration(agent_name: str, public_key: str) -> None:
    """Raise `ValueError` unless the name is an AgentName and the key `b64` of 32 bytes."""
    if not is_agent_name(agent_name):
        raise ValueError("not a valid agent name")
    if not is_public_key_text(public_key):
        raise ValueError("the public key must be b64 of 32 raw bytes")


def check_list_arguments(after_agent_id: str | None, limit: int) -> None:
    """Raise `ValueError` for a malformed bound or a limit outside 1..100."""
    if after_agent_id is not None and not RandomId.AGENT.is_valid(after_agent_id):
        raise ValueError("after_agent_id is not an AgentId")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIST_LIMIT_MAX:
        raise ValueError(f"limit must be 1 to {LIST_LIMIT_MAX}")


AgentIdMinter: TypeAlias = Callable[[], str]
"""Mints AgentIds; `RandomId.AGENT.mint` except in tests that need chosen byte orders."""

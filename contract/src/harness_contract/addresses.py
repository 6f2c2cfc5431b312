"""Agent names, addresses and their canonical form (engine.md §1.1-§1.2).

`canonicalize(address, local)` applies the checks in the spec's order, the first failure
deciding: prefix, then names, then duplicates, self insertion and the 3..32 group size.
Registry resolution runs only on a canonical address, through `check_known`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, TypeAlias

from harness_contract.errors import SendError, SendErrorReason

AGENT_PREFIX: Final = "agent:"
GROUP_PREFIX: Final = "group:"

GROUP_MIN_MEMBERS: Final = 3
"""Fewest members of a group, the local agent included."""
GROUP_MAX_MEMBERS: Final = 32
"""Most members of any conversation, the local agent included."""

_AGENT_NAME: Final = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_AGENT_NAME_MIN: Final = 3
_AGENT_NAME_MAX: Final = 32

MEMBERSHIP_SELF_ONLY_DETAIL: Final = "the address names only you"
"""Detail of `membership-invalid` for `agent:<self>` (engine.md §1.2)."""


def is_agent_name(name: object) -> bool:
    """3 to 32 ASCII characters of `[a-z0-9]+(-[a-z0-9]+)*`, nothing trimmed or folded."""
    return (
        isinstance(name, str)
        and _AGENT_NAME_MIN <= len(name) <= _AGENT_NAME_MAX
        # fullmatch: `re.match` with `$` would let a trailing newline through.
        and _AGENT_NAME.fullmatch(name) is not None
    )


def agent_address(name: str) -> str:
    """`agent:<name>`."""
    return AGENT_PREFIX + name


def group_address(names: Iterable[str]) -> str:
    """The canonical `group:` address of a complete membership (sorted, byte order)."""
    return GROUP_PREFIX + ",".join(sorted(names))


def name_of(address: str) -> str | None:
    """The name of an `agent:` address, or None when it is not one."""
    if address.startswith(AGENT_PREFIX) and is_agent_name(address[len(AGENT_PREFIX) :]):
        return address[len(AGENT_PREFIX) :]
    return None


def is_address_syntax(address: object) -> bool:
    """True for a MessageAddressInput by syntax: `agent:<name>` or `group:` valid names."""
    if not isinstance(address, str):
        return False
    if address.startswith(AGENT_PREFIX):
        return is_agent_name(address[len(AGENT_PREFIX) :])
    if address.startswith(GROUP_PREFIX):
        rest = address[len(GROUP_PREFIX) :]
        return bool(rest) and all(is_agent_name(name) for name in rest.split(","))
    return False


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectConversation:
    """The two-member conversation of `local` and `peer`."""

    local: str
    peer: str

    @property
    def members(self) -> tuple[str, ...]:
        """Both names in byte order."""
        return tuple(sorted((self.local, self.peer)))

    @property
    def others(self) -> tuple[str, ...]:
        """The members other than the local agent."""
        return (self.peer,)

    @property
    def address(self) -> str:
        """The canonical address from the local agent's side: `agent:<peer>`."""
        return agent_address(self.peer)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupConversation:
    """A 3..32 member group; `members` is the complete membership in byte order."""

    local: str
    members: tuple[str, ...]

    @property
    def others(self) -> tuple[str, ...]:
        """The members other than the local agent, in member order."""
        return tuple(name for name in self.members if name != self.local)

    @property
    def address(self) -> str:
        """The canonical `group:` address (the local agent included)."""
        return GROUP_PREFIX + ",".join(self.members)


Conversation: TypeAlias = DirectConversation | GroupConversation


def canonicalize(address: object, local: str) -> Conversation:
    """Put a send's address in canonical form for local agent `local`.

    Raises `SendError` `invalid-address` or `membership-invalid` (engine.md §1.2).
    """
    if not isinstance(address, str):
        raise SendError(SendErrorReason.INVALID_ADDRESS)
    if address.startswith(AGENT_PREFIX):
        peer = address[len(AGENT_PREFIX) :]
        if not is_agent_name(peer):
            raise SendError(SendErrorReason.INVALID_ADDRESS)
        if peer == local:
            raise SendError(SendErrorReason.MEMBERSHIP_INVALID, MEMBERSHIP_SELF_ONLY_DETAIL)
        return DirectConversation(local=local, peer=peer)
    if not address.startswith(GROUP_PREFIX):
        raise SendError(SendErrorReason.INVALID_ADDRESS)
    names = address[len(GROUP_PREFIX) :].split(",")
    if not all(is_agent_name(name) for name in names):
        # Covers `group:` (one empty element), `group:bob,,carol` and invalid names.
        raise SendError(SendErrorReason.INVALID_ADDRESS)
    if len(set(names)) != len(names):
        raise SendError(SendErrorReason.MEMBERSHIP_INVALID)
    members = set(names) | {local}
    # A group naming one other agent is never rewritten to the direct conversation.
    if not GROUP_MIN_MEMBERS <= len(members) <= GROUP_MAX_MEMBERS:
        raise SendError(SendErrorReason.MEMBERSHIP_INVALID)
    return GroupConversation(local=local, members=tuple(sorted(members)))


def unknown_agent_error(name: str) -> SendError:
    """The `unknown-agent` failure naming one member."""
    return SendError(
        SendErrorReason.UNKNOWN_AGENT,
        f"{agent_address(name)} is not registered with the gateway",
    )


def check_known(conversation: Conversation, is_known: Callable[[str], bool]) -> None:
    """Raise `unknown-agent` for the first other member, in name order, the resolver
    does not know."""
    for name in conversation.others:
        if not is_known(name):
            raise unknown_agent_error(name)

"""Where local order runs for a conversation, and with which keys (cluster.md §5).

In the embedded and network modes every member of a local conversation is hosted by the one
daemon: its keys are its certifiers' and it sequences every local conversation
(`engine.md` §5.10). In a cluster a conversation is sequenced by the replica holding its
sequencing partition, which signs with every member's key although most members are homed
elsewhere, and an author homed elsewhere binds only its intent. `LocalOrder` asks a
`Sequencing` (absent outside a cluster) these questions; the cluster's implementation answers
from the partitions it holds and the rows of the shared database.

Callers may rely on: `here`, `key` and `intent_writes` never wait; everything that reads
rows is a coroutine, called only where `LocalOrder` may wait (before a bind, in admission).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gateway.engine import protocol as p
from gateway.identity.keys import SigningKey
from gateway.store.records import ConversationRow, IntentRow, Write


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenIntent:
    """An open intent of a conversation as the sequencer admits it (cluster.md §5.2)."""

    author_id: str
    row: IntentRow
    descriptor: bytes
    """The JCS bytes of the conversation's MembershipDescriptor, bound with the intent so
    the sequencer can found a conversation no member has a row of yet."""


class Sequencing(Protocol):
    """What local order needs to know in a cluster (cluster.md §5)."""

    def here(self, descriptor: p.MembershipDescriptor) -> bool:
        """Whether this replica holds the conversation's sequencing partition."""
        ...

    def key(self, agent_id: str) -> SigningKey:
        """A member's signing key, loaded by `prepare` (KeyError when it was not)."""
        ...

    async def prepare(self, descriptor: p.MembershipDescriptor) -> None:
        """Load what a bind or a unit of this conversation needs: every member's key here;
        raise `BindRefused` when a stored foundation of the conversation (sequenced
        elsewhere) has another membership or is set aside."""
        ...

    async def stored(self, conversation_id: str) -> dict[str, ConversationRow]:
        """The members' stored rows of the conversation (none before its first unit)."""
        ...

    async def open_intents(self, conversation_id: str) -> list[OpenIntent]:
        """The conversation's open intents, any author, read now."""
        ...

    def intent_writes(self, write: Write, descriptor: p.MembershipDescriptor) -> list[Write]:
        """The writes that bind an intent whose conversation is sequenced elsewhere: the
        intent row `write`, with what the sequencer needs to admit it."""
        ...

    def handed_off(self, descriptor: p.MembershipDescriptor) -> None:
        """Intents of this conversation were bound here and committed: hint its sequencer."""
        ...

    def refused(self, posts: list[tuple[str, str]]) -> None:
        """These (author, PostId) intents were refused and the refusal committed: their
        authors' homes answer their sends `certification-unavailable` (cluster.md §5.2,
        §5.4)."""
        ...


__all__ = ["OpenIntent", "Sequencing"]

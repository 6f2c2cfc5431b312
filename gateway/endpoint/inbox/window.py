"""`DeliveryWindow`: the deliveries one stream yielded and the client has not acknowledged.

The window is bounded by the stream window setting: a stream holds a token when it yields it,
an acknowledgment releases it, and while the window is full the stream waits, leaving the rest
of the inbox in the store rather than in memory.
"""

from __future__ import annotations

import asyncio


class DeliveryWindow:
    """Tokens a stream yielded and the client has not acknowledged, bounded by `size`."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._outstanding: set[str] = set()
        self._freed = asyncio.Event()

    @property
    def full(self) -> bool:
        """True when the stream must wait for acknowledgments."""
        return len(self._outstanding) >= self.size

    @property
    def free(self) -> int:
        """Slots left."""
        return max(0, self.size - len(self._outstanding))

    def hold(self, token: str) -> None:
        """A token was yielded."""
        self._outstanding.add(token)

    def release(self, token: str) -> None:
        """A token was acknowledged; a token the window does not hold is ignored."""
        if token in self._outstanding:
            self._outstanding.discard(token)
            self._freed.set()

    async def wait_for_space(self) -> None:
        """Wait until a slot frees up (return at once when one is free)."""
        while self.full:
            self._freed.clear()
            await self._freed.wait()

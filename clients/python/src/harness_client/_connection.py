"""`ConnectionState`: the agent's link to the gateway as its endpoint sees it, and who watches.

The `messages()` loop (`_stream.py`) reports it, `Endpoint.close()` ends it; the agent reads
`Endpoint.connection_state` or subscribes with `Endpoint.on_connection_state(callback)`
(operations.md §10). The TypeScript client has the same four states under the same names
(`connectionState`, `onConnectionState`).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import TypeAlias

logger = logging.getLogger(__name__)


class ConnectionState(enum.StrEnum):
    """Whether the agent is reachable through its `messages()` stream."""

    CONNECTING = "connecting"
    """No stream is open yet: before the first `messages()` stream opens, while its first
    attempts fail, and after a `messages()` loop ended (the next one opens a stream again)."""
    READY = "ready"
    """A stream is open: the gateway sent its headers (`harness-stream: open`) or a
    delivery."""
    RECONNECTING = "reconnecting"
    """The open stream was lost (the gateway restarted, a replica handed the agent over, the
    network failed) and the loop is opening a new one."""
    CLOSED = "closed"
    """The endpoint was closed; the state never changes again."""


ConnectionListener: TypeAlias = Callable[[ConnectionState], None]
"""Called with each new state, synchronously, on the event loop that changed it."""


class _ConnectionStates:
    """The current `ConnectionState` and the callbacks told of each change."""

    def __init__(self) -> None:
        self._state = ConnectionState.CONNECTING
        self._listeners: dict[int, ConnectionListener] = {}
        self._next_id = 0

    @property
    def state(self) -> ConnectionState:
        """The current state."""
        return self._state

    def subscribe(self, listener: ConnectionListener) -> Callable[[], None]:
        """Call `listener` on every change from now on; returns the unsubscribe (idempotent)."""
        key = self._next_id
        self._next_id += 1
        self._listeners[key] = listener

        def unsubscribe() -> None:
            self._listeners.pop(key, None)

        return unsubscribe

    def report(self, state: ConnectionState) -> None:
        """Move to `state` and tell every listener; nothing once CLOSED, nothing unchanged."""
        if self._state is ConnectionState.CLOSED or state is self._state:
            return
        self._state = state
        for listener in tuple(self._listeners.values()):
            try:
                listener(state)
            except Exception:
                # A listener's defect must not end the stream that reported the change.
                logger.exception("a connection state listener failed state=%s", state)
        if state is ConnectionState.CLOSED:
            self._listeners.clear()

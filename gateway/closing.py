"""`async with` for components that close: one definition of enter-and-close-on-exit.

Stores, writers, Routers, Registries and their gRPC clients all release what they hold in an
idempotent `close()`; this mixin gives each the same context-manager behaviour, so `async
with` closes on every exit, an exception included, and the exception still propagates.
"""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Self


class AsyncClosing(abc.ABC):
    """Mixin: `async with component:` returns the component and closes it on the way out."""

    __slots__ = ()

    @abc.abstractmethod
    async def close(self) -> None:
        """Release what the component holds; idempotent."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

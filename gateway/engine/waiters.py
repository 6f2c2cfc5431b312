"""The futures that wait for one event of each post (a send's certification latch, a
proposal's drain), one per waiter (engine.md §6 steps 9-10)."""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

_T = TypeVar("_T")


class Waiters(Generic[_T]):
    """The futures waiting for one event of each post, one per waiter: a waiter that stops
    waiting drops its own future and cancels no one else's (a send that answered
    `delivery-pending` must not end the task that settles the same post later)."""

    def __init__(self) -> None:
        self._by_post: dict[str, list[asyncio.Future[_T]]] = {}

    def add(self, post_id: str) -> asyncio.Future[_T]:
        """A new future for this post, resolved with the next `resolve`."""
        future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
        self._by_post.setdefault(post_id, []).append(future)
        return future

    def resolve(self, post_id: str, value: _T) -> None:
        """Resolve and drop every future waiting for this post."""
        for future in self._by_post.pop(post_id, ()):
            if not future.done():
                future.set_result(value)

    def fail(self, post_id: str, error: BaseException) -> None:
        """Fail and drop every future waiting for this post (the error marked retrieved: a
        waiter that gave up meanwhile logs nothing)."""
        for future in self._by_post.pop(post_id, ()):
            if not future.done():
                future.set_exception(error)
                future.exception()

    def drop(self, post_id: str, future: asyncio.Future[_T]) -> None:
        """One waiter is gone: cancel its future (if still pending) and forget it."""
        if not future.done():
            future.cancel()
        waiting = self._by_post.get(post_id)
        if waiting is not None and future in waiting:
            waiting.remove(future)
            if not waiting:
                del self._by_post[post_id]

    def posts(self) -> list[str]:
        """Every post with a waiter."""
        return list(self._by_post)

    def cancel_all(self) -> None:
        """Shutdown: cancel every pending future (they are kept; nothing resolves them)."""
        for waiting in self._by_post.values():
            for future in waiting:
                if not future.done():
                    future.cancel()


__all__ = ["Waiters"]

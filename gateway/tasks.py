"""`OwnedTasks`: the background tasks one component starts, held until it closes.

No task runs unowned (house style): a component that starts work on its own — the network's
recovery and drain steps, the collectives' answers and closes, a cluster replica's claims,
releases and hints — spawns it here, so it keeps a strong reference to every running task,
learns of each failure at once, and cancels and awaits them all when it closes. What a failure
means differs per owner (a warning, an error, or the daemon stopping), so the owner says it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable


class OwnedTasks:
    """A component's running background tasks.

    `on_failure(task, error)` is called on the event loop for each task that ends with an
    exception (not for a cancelled one); it must not raise."""

    __slots__ = ("_on_failure", "_prefix", "_tasks")

    def __init__(
        self,
        on_failure: Callable[[asyncio.Task[None], BaseException], None],
        *,
        prefix: str = "",
    ) -> None:
        self._on_failure = on_failure
        self._prefix = prefix
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coroutine: Coroutine[object, object, None], name: str) -> None:
        """Run `coroutine` as a task named `<prefix><name>`, owned until it ends or is
        cancelled by `cancel_all`."""
        task = asyncio.ensure_future(coroutine)
        task.set_name(f"{self._prefix}{name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def __len__(self) -> int:
        return len(self._tasks)

    async def cancel_all(self, also: Iterable[asyncio.Task[None]] = ()) -> None:
        """Cancel every owned task (and `also`, tasks the owner keeps apart, such as timers
        or a poll loop) and wait for all of them to end; idempotent."""
        tasks = [*self._tasks, *also]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._on_failure(task, error)


__all__ = ["OwnedTasks"]

"""The `Clock` seam: wall time, monotonic time and sleeping, injected through constructors.

Deadlines on the wire are wall-clock epoch milliseconds (a collective's `deadlineAt`), send
bounds are monotonic seconds, and timers sleep; reading all three through one object lets a
test drive them. `SystemClock` is the daemon's; `FakeClock` is the in-memory one tests
advance, so a 30-day deadline passes without waiting. A leaf module: it imports only the
standard library.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time as _time
from typing import Final, Protocol


class Clock(Protocol):
    """What the gateway reads the time through."""

    def time(self) -> float:
        """Wall-clock seconds since the epoch (deadlines, `boundAt`)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (send bounds)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once `seconds` of this clock have passed (at once for zero or less)."""
        ...


class SystemClock:
    """The operating system's clocks and the event loop's sleep.

    The clock functions are the builtins themselves, not methods wrapping them: the send
    path reads the clock several times per post, and a wrapper would add a Python frame to
    each read."""

    time = staticmethod(_time.time)
    """`time.time()`."""
    monotonic = staticmethod(_time.monotonic)
    """`time.monotonic()`."""

    async def sleep(self, seconds: float) -> None:
        """`asyncio.sleep(seconds)`."""
        await asyncio.sleep(seconds)


SYSTEM_CLOCK: Final = SystemClock()
"""The default of every constructor that takes a clock."""


class FakeClock:
    """A clock that moves only when `advance` is called; sleepers wake as it passes them."""

    def __init__(self, *, wall: float = 1_700_000_000.0, monotonic: float = 0.0) -> None:
        self._wall = wall
        self._monotonic = monotonic
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        # Breaks ties between sleepers due at the same instant (futures do not compare).
        self._order = itertools.count()

    def time(self) -> float:
        """The fake wall clock."""
        return self._wall

    def monotonic(self) -> float:
        """The fake monotonic clock."""
        return self._monotonic

    @property
    def sleepers(self) -> int:
        """Sleeps still waiting (a test's sign that a timer is armed)."""
        return sum(1 for _, _, future in self._sleepers if not future.done())

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock has been advanced by `seconds`; a zero sleep yields once."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._monotonic + seconds, next(self._order), future))
        await future

    def advance(self, seconds: float) -> None:
        """Move both clocks forward and wake every sleeper now due."""
        self._wall += seconds
        self._monotonic += seconds
        while self._sleepers and self._sleepers[0][0] <= self._monotonic:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

"""Shared test helpers: bounded polling instead of sleep-and-hope."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

EVENTUALLY_BOUND = 10.0
"""Default seconds a condition may take to hold."""


async def eventually(
    probe: Callable[[], Awaitable[T]],
    check: Callable[[T], bool] = bool,
    *,
    within: float = EVENTUALLY_BOUND,
    interval: float = 0.01,
) -> T:
    """Await `probe()` until `check` accepts its value, at most `within` seconds.

    Raises AssertionError with the last value when the bound passes."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if check(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition did not hold within {within} s; last value: {value!r}")
        await asyncio.sleep(interval)

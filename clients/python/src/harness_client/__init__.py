"""Typed asyncio client for the Harness Gateway (`harness.v1`)."""

from __future__ import annotations

__all__: list[str] = []

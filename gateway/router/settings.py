"""Bounds of a Router's ring and of its batches (engine.md §4 "Ring and gaps", "Reading").

The in-process ring takes them directly; the standalone Router serves the same ring, and a
JetStream backend maps the ring bounds to `MaxMsgs`/`MaxBytes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

RING_MAX_ENTRIES: Final = 4_096
"""Entries a ring retains before evicting the oldest (engine.md §4)."""

RING_MAX_BYTES: Final = 64 * 1024 * 1024
"""Bytes of signed envelopes a ring retains before evicting the oldest (64 MiB, §4)."""

BATCH_MAX_ENTRIES: Final = 256
"""Most entries in one batch (engine.md §4 "Reading")."""

BATCH_MAX_BYTES: Final = 4 * 1024 * 1024
"""Most signed-envelope bytes in one batch (4 MiB, §4), well under gRPC's message limit
once tags and framing are added."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RingSettings:
    """Retention and batch bounds; every field is at least 1 (`ValueError` otherwise)."""

    max_entries: int = RING_MAX_ENTRIES
    """Entries retained; past it the oldest entry and its retry identity are evicted."""
    max_bytes: int = RING_MAX_BYTES
    """Signed-envelope bytes retained; past it the oldest entries are evicted, but never the
    entry just appended, so one envelope larger than this is kept alone until the next."""
    batch_max_entries: int = BATCH_MAX_ENTRIES
    """Entries per batch."""
    batch_max_bytes: int = BATCH_MAX_BYTES
    """Signed-envelope bytes per batch (recipient tags and framing not counted). A batch
    stops before an entry that would pass it, except that an entry larger than the bound
    is delivered alone: skipping it would lose it, and holding it forever would stall."""

    def __post_init__(self) -> None:
        for name in ("max_entries", "max_bytes", "batch_max_entries", "batch_max_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"RingSettings.{name} must be at least 1")

"""What the store reports to metrics (operations.md §2.3, the `harness_store_*` family).

`StoreObserver` is the seam; `gateway/observability/` implements it with the backend label
(`sqlite` here). Every method is called on the event loop thread, is expected to return at
once, and must not raise: an exception is logged and otherwise ignored, so a metrics defect
never stops writes.
"""

from __future__ import annotations

from typing import Protocol


class StoreObserver(Protocol):
    """Receives the commit writer's measurements."""

    def on_commit(self, batch_size: int, commit_seconds: float) -> None:
        """A group committed.

        Args:
            batch_size: units in the group, those that raised included
                (`harness_store_commit_batch_size`).
            commit_seconds: from BEGIN to the end of COMMIT, its sync included
                (`harness_store_commit_seconds`).
        """

    def on_write_done(self, wait_seconds: float) -> None:
        """One unit's caller was answered; `wait_seconds` runs from its submit, a wait for
        room in the queue included, to its answer (`harness_store_write_wait_seconds`)."""

    def on_queue_depth(self, depth: int) -> None:
        """Units now waiting for a commit (`harness_store_queue_depth`)."""

    def on_commit_failure(self) -> None:
        """A group did not commit: its BEGIN or COMMIT failed, or a fatal error abandoned
        it (`harness_store_commit_failures_total`)."""


class NullStoreObserver:
    """A `StoreObserver` that records nothing; the default."""

    def on_commit(self, batch_size: int, commit_seconds: float) -> None:
        """Ignore a commit."""

    def on_write_done(self, wait_seconds: float) -> None:
        """Ignore an answered unit."""

    def on_queue_depth(self, depth: int) -> None:
        """Ignore the queue depth."""

    def on_commit_failure(self) -> None:
        """Ignore a failed group."""

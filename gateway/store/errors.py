"""The store's own failures, each a typed `StoreError`.

These never cross the RPC boundary as they are: the engine turns them into contract
reasons (`persistence-failed`, `outcome-unknown`). What each one tells its caller about
the write it concerns is the point of the tree:

    StoreError                  base of every failure raised by `gateway.store`
    ├── DataDirLocked           another process holds `<data-dir>/LOCK`; nothing was opened
    ├── StoreClosed             refused: the store is closing or closed; nothing was written
    │   └── PartitionNotHeld    refused: a cluster replica's unit for a partition it does not hold
    ├── StoreFailed             refused or abandoned after a fatal store error; nothing written
    │   ├── StoreUnavailable    PostgreSQL could not take the write; nothing written, retry later
    │   ├── StoreLeaseLost      another daemon took this owner's lease; this one must stop
    │   └── StoreFenced         a cluster replica's incarnation was fenced; this one must stop
    ├── CommitAmbiguous         the group's COMMIT failed: the write may or may not be durable
    ├── ConstraintViolation     a write broke a uniqueness rule; its batch was not applied
    ├── StoreCorrupt            `PRAGMA quick_check` failed or the file is not a database
    ├── SchemaVersionMismatch   the file's version is not this build's; the file is untouched
    │   └── DatabaseSchemaMismatch  the same for a PostgreSQL store, with what to do about it
    ├── StoreLeaseHeld          another daemon holds this owner's lease; nothing was opened
    ├── ClusterModeMismatch     the database is not in the mode asked for; nothing was changed
    └── StoreDsnInvalid         the PostgreSQL DSN is not a connection string (also a ValueError)

A write unit's own exception (anything it raises itself) reaches its caller as it is,
never wrapped: only that unit's writes were rolled back.
"""

from __future__ import annotations

from pathlib import Path


class StoreError(Exception):
    """Base of every failure raised by `gateway.store`."""


class DataDirLocked(StoreError):
    """Another open of `<data-dir>/LOCK` holds the exclusive lock (engine.md §8).

    Usually another harness-gateway process; a second `DataDirLock.acquire` in the same
    process conflicts too, since `flock` locks belong to an open file description.
    """

    directory: Path
    holder_pid: int | None
    """The pid the holder wrote into `LOCK`, when it could be read."""

    def __init__(self, directory: Path, holder_pid: int | None = None) -> None:
        self.directory = directory
        self.holder_pid = holder_pid
        holder = (
            "another harness-gateway process"
            if holder_pid is None
            else f"another harness-gateway process (pid {holder_pid})"
        )
        super().__init__(
            f"{holder} holds the lock on {directory}: a data directory runs in one daemon at a time"
        )


class StoreClosed(StoreError):
    """The store refused a call because it is closing or closed; nothing was written.

    `state` names the state that refused the call, so the message says why, not only that.
    """

    state: str

    def __init__(self, what: str, state: str) -> None:
        self.state = state
        super().__init__(f"{what} is {state}")


class PartitionNotHeld(StoreClosed):
    """A cluster replica's store refused a unit that writes as a partition this replica does
    not hold (cluster.md §3.2, the store seam): it was released by a unit submitted before
    this one, or claimed again after this one was submitted (memory from an earlier holding).
    Nothing of the unit was written; the rest of its group commits.

    The store is closed to those partitions, hence a `StoreClosed`: whoever stops quietly at
    a closing store (the sequencer, the classification pass) stops here too. A call whose
    unit it was answers UNAVAILABLE `NOT_OWNER`, so the forwarder retries it at the new home;
    a keyed send's reservation stays resumable (cluster.md §8). `partitions` are those of
    the unit not held.
    """

    partitions: tuple[int, ...]

    def __init__(self, partitions: tuple[int, ...]) -> None:
        self.partitions = partitions
        shown = ", ".join(str(partition) for partition in partitions)
        noun = "partition" if len(partitions) == 1 else "partitions"
        super().__init__(f"{noun} {shown}", "not held by this replica")


class StoreFailed(StoreError):
    """A fatal store error stopped the writer; this write was not committed.

    Raised for units refused after the writer failed, and for units of a group that a
    fatal error abandoned before its COMMIT ran (their transaction was rolled back).
    `__cause__` is the underlying error when there is one.
    """


class StoreUnavailable(StoreFailed):
    """PostgreSQL could not take this write before its COMMIT was sent: the server was
    unreachable, the connection was lost, or the server failed the whole transaction (a
    deadlock, a full disk). The write was not committed, and the store is not FAILED.

    A network store's outage is expected and transient: later writes and reads reconnect
    and succeed once the server is back. Reads raise it too (nothing was read).
    """


class ConstraintViolation(StoreError):
    """A write broke a uniqueness rule (a reused token, a second record at one depth).

    The whole batch of that `Store.apply` call was rolled back; other callers' writes in the
    same group commit are unaffected. It signals a defect in the caller, never a disk fault.
    """


class CommitAmbiguous(StoreError):
    """The COMMIT of this write's group failed, or its transaction ended unexpectedly.

    The write may or may not be durable: callers treat it as "may have committed"
    (engine.md §8 "a failed COMMIT leaves the whole group in doubt"). `__cause__` is the
    underlying error.
    """


class StoreCorrupt(StoreError):
    """`PRAGMA quick_check` reported problems, or the file is not an SQLite database.

    The file was not modified; `detail` is SQLite's own report (the first lines of it).
    """

    path: Path
    detail: str

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(f"store file {path} failed its integrity check: {detail}")


class SchemaVersionMismatch(StoreError):
    """The file's `meta` names a version this build does not know; nothing was changed.

    `key` is the `meta` key that differed (`schema_version` or `protocol_version`);
    `found` is the file's value (None when the file has tables but no `meta` entry) and
    `expected` this build's. The store fails closed: no migration, no write.
    """

    path: Path | str
    """The store file; for a PostgreSQL store, its DSN without the password."""
    key: str
    found: str | None
    expected: str

    def __init__(self, path: Path, *, key: str, found: str | None, expected: str) -> None:
        self.path = path
        self.key = key
        self.found = found
        self.expected = expected
        shown = f"no {key}" if found is None else f"{key} {found}"
        super().__init__(
            f"store file {path} has {shown} but this harness-gateway expects {expected}; "
            "refusing to open it (the file was left untouched)"
        )


class DatabaseSchemaMismatch(SchemaVersionMismatch):
    """A PostgreSQL store's `harness_meta` is not this build's, or the database holds
    tables but no `harness_meta`; nothing was changed.

    `path` is the DSN without its password; `advice` says what the operator can do (run
    `harness-gateway migrate` for an older schema this build can migrate).
    """

    advice: str

    def __init__(
        self, store: str, *, key: str, found: str | None, expected: str, advice: str
    ) -> None:
        self.path = store
        self.key = key
        self.found = found
        self.expected = expected
        self.advice = advice
        shown = f"no {key}" if found is None else f"{key} {found}"
        StoreError.__init__(
            self,
            f"PostgreSQL store {store} has {shown} but this harness-gateway expects "
            f"{expected}; refusing to open it (the database was left untouched): {advice}",
        )


class StoreLeaseHeld(StoreError):
    """Another daemon holds the lease of `owner` in the PostgreSQL store (engine.md §8
    Exclusive ownership); nothing was opened or written.

    `holder` is what the holder wrote into its lease row (its run id, host and pid), when
    there is one.
    """

    owner: str
    holder: str | None

    def __init__(self, owner: str, holder: str | None) -> None:
        self.owner = owner
        self.holder = holder
        by = "another daemon" if not holder else f"another daemon ({holder})"
        super().__init__(
            f"{by} holds the lease of store owner {owner!r}: "
            "one daemon owns an owner's agents at a time"
        )


class StoreLeaseLost(StoreFailed):
    """Another daemon took this daemon's lease: its fencing token is no longer the lease's.

    Every write checks the fence, so nothing was written past the loss; the writer is
    FAILED and `on_fatal` stops the daemon (the new holder owns the agents now).
    `found` is the lease's fence now (None when its row is gone).
    """

    owner: str
    fence: int
    found: int | None

    def __init__(self, owner: str, *, fence: int, found: int | None) -> None:
        self.owner = owner
        self.fence = fence
        self.found = found
        now = "no lease row" if found is None else f"fence {found}"
        super().__init__(
            f"the lease of store owner {owner!r} was taken (this daemon holds fence {fence}, "
            f"the lease has {now}): stopping writes"
        )


class StoreFenced(StoreFailed):
    """A cluster replica's group found its incarnation fenced or replaced (cluster.md §3.5):
    nothing of the group committed, the writer is FAILED and `on_fatal` ends the replica
    (its supervisor starts a new incarnation)."""

    replica_id: str
    incarnation: int

    def __init__(self, replica_id: str, incarnation: int) -> None:
        self.replica_id = replica_id
        self.incarnation = incarnation
        super().__init__(
            f"cluster replica {replica_id!r} incarnation {incarnation} was fenced or replaced: "
            "stopping writes"
        )


class ClusterModeMismatch(StoreError):
    """The PostgreSQL database is not in the mode the caller asked for (cluster.md §12.1:
    each mode refuses a database of the other), or not ready for it; nothing was changed.
    The message says what to do."""

    def __init__(self, store: str, reason: str) -> None:
        self.store = store
        self.reason = reason
        super().__init__(f"PostgreSQL store {store}: {reason}")


class StoreDsnInvalid(StoreError, ValueError):
    """The PostgreSQL store's DSN is not a connection string libpq accepts; the message
    shows it without its password. Nothing was opened."""

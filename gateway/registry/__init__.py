"""The Registry: names mapped to immutable Registry-signed agent cards (engine.md §3).

`RegistryPort` is the seam every backend implements: `SqliteRegistry` (in-process,
its own SQLite file), `MemoryRegistry` (unit tests), `PostgresRegistry` (replicas sharing
one PostgreSQL database; import `gateway.registry.postgres` itself, so psycopg loads only
where it is used), and a gRPC client in `gateway/rpc/`.
The daemon resolves agents through `RegistryClient`, which verifies, caches and
collapses lookups.
"""

from __future__ import annotations

from gateway.registry._backend import RegistryState
from gateway.registry.client import (
    REGISTRY_DEADLINE,
    Found,
    LookupOutcome,
    NotFound,
    RegistryClient,
    RegistryClientState,
)
from gateway.registry.memory import MemoryRegistry
from gateway.registry.port import (
    LIST_LIMIT_MAX,
    KeyAlreadyRegistered,
    NameTaken,
    Registered,
    RegisterOutcome,
    RegistryError,
    RegistryPort,
    RegistryUnavailable,
    RegistryVersionMismatch,
)
from gateway.registry.sqlite import SqliteRegistry

__all__ = [
    "LIST_LIMIT_MAX",
    "REGISTRY_DEADLINE",
    "Found",
    "KeyAlreadyRegistered",
    "LookupOutcome",
    "MemoryRegistry",
    "NameTaken",
    "NotFound",
    "RegisterOutcome",
    "Registered",
    "RegistryClient",
    "RegistryClientState",
    "RegistryError",
    "RegistryPort",
    "RegistryState",
    "RegistryUnavailable",
    "RegistryVersionMismatch",
    "SqliteRegistry",
]

"""The store in PostgreSQL (engine.md §8), for daemons that share one database.

Imported on its own (`import gateway.store.postgres`), never by `gateway.store`, so an
embedded daemon on SQLite does not load psycopg.

- `PostgresStore`: the `Store` seam on PostgreSQL, one owner's agents under a lease.
- `migrate`, `schema_status`, `SCHEMA_VERSION`: the schema's version, checked at every open
  and moved on by `harness-gateway migrate`.
- `redact_dsn`: a DSN without its password, the only form to log or show.
- `LeaseState`, `StoreState`: where a store's lease and the store are in their lives.
- `setup_cluster`, `ClusterMeta`, `CLUSTER_OWNER`: a cluster's database set up once
  (cluster.md §12.1) and read back; `PostgresStore.open_cluster` is a replica's store.
"""

from __future__ import annotations

from gateway.store.postgres.connection import CONNECT_TIMEOUT, redact_dsn
from gateway.store.postgres.lease import LEASE_RETRY_INTERVAL, LeaseState
from gateway.store.postgres.schema import (
    CLUSTER_OWNER,
    SCHEMA_VERSION,
    ClusterMeta,
    SchemaState,
    SchemaStatus,
    migrate,
    schema_status,
    setup_cluster,
)
from gateway.store.postgres.store import READ_POOL_SIZE, PostgresStore, StoreState

__all__ = [
    "CLUSTER_OWNER",
    "CONNECT_TIMEOUT",
    "LEASE_RETRY_INTERVAL",
    "READ_POOL_SIZE",
    "SCHEMA_VERSION",
    "ClusterMeta",
    "LeaseState",
    "PostgresStore",
    "SchemaState",
    "SchemaStatus",
    "StoreState",
    "migrate",
    "redact_dsn",
    "schema_status",
    "setup_cluster",
]

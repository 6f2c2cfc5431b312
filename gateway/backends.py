"""The store and Router backends the settings choose, opened for the composition root.

- Store: SQLite in the data directory (the default), or PostgreSQL with `--store
  postgresql://...` (`gateway.store.postgres`: this daemon's agents under `--store-owner`,
  held under a lease whose fencing token every write checks).
- Router: the in-process ring (the default, built by `gateway.app` because it may also be
  served to other daemons), a standalone Router over gRPC (`grpc://`, `grpcs://`), or a NATS
  JetStream cluster (`nats://`, `tls://`; `gateway.router.jetstream`).

The PostgreSQL and NATS modules are imported only when chosen, so an embedded daemon never
loads psycopg or nats-py. Each opener returns an object that `close()`s; the caller owns it.
"""

from __future__ import annotations

import os
import socket
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from gateway.router import RingSettings
from gateway.router.port import EnvelopeVerifier, RouterPort
from gateway.settings import Settings, nats_servers
from gateway.store import CommitWriterSettings, SqliteStore
from gateway.store.observer import StoreObserver
from gateway.store.writer import FatalHandler

if TYPE_CHECKING:
    from gateway.store.postgres import PostgresStore

STORE_FILE: Final = "gateway.sqlite3"
"""The SQLite store's file in the data directory."""


def store_owner(settings: Settings) -> str:
    """The name this daemon's agents are kept under in a shared store: `--store-owner`, else
    the host name (a StatefulSet pod's name, stable across its restarts)."""
    return settings.store_owner or socket.gethostname()


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreWiring:
    """What every store backend is given: group commit, measurements, the fatal path."""

    writer_settings: CommitWriterSettings
    observer: StoreObserver
    on_fatal: FatalHandler
    run_id: str
    """This process's run id, written into a PostgreSQL lease so a refused daemon can say
    who holds it."""


async def open_store(settings: Settings, wiring: StoreWiring) -> SqliteStore | PostgresStore:
    """The daemon's store: PostgreSQL when `settings.store` names it, else the SQLite file
    in the (already locked) data directory."""
    if settings.store is not None:
        from gateway.store.postgres import PostgresStore

        return await PostgresStore.open(
            settings.store,
            owner=store_owner(settings),
            holder=f"run {wiring.run_id} on {socket.gethostname()} pid {os.getpid()}",
            writer_settings=wiring.writer_settings,
            observer=wiring.observer,
            on_fatal=wiring.on_fatal,
        )
    path = settings.data_dir / STORE_FILE
    # The store holds agents' private seeds: create the file owner-only before SQLite opens
    # it (its -wal and -shm files copy the database file's mode).
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    return await SqliteStore.open(
        path,
        writer_settings=wiring.writer_settings,
        observer=wiring.observer,
        on_fatal=wiring.on_fatal,
    )


def nats_tls_context(settings: Settings) -> ssl.SSLContext | None:
    """TLS for the NATS connection: with a `tls://` URL or any `--nats-tls-*` file; the CA
    file (else the system's roots) verifies the servers, the certificate is ours for mTLS."""
    wanted = (settings.router or "").startswith("tls://") or any(
        path is not None for path in (settings.nats_tls_ca_file, settings.nats_tls_cert_file)
    )
    if not wanted:
        return None
    context = ssl.create_default_context(
        cafile=None if settings.nats_tls_ca_file is None else str(settings.nats_tls_ca_file)
    )
    if settings.nats_tls_cert_file is not None and settings.nats_tls_key_file is not None:
        context.load_cert_chain(str(settings.nats_tls_cert_file), str(settings.nats_tls_key_file))
    return context


async def open_nats_router(settings: Settings, verifier: EnvelopeVerifier) -> RouterPort:
    """A JetStream Router on the servers `settings.router` lists (`RouterUnavailable` when
    none answers in time: the daemon does not start, its supervisor retries)."""
    from gateway.router.jetstream import JetStreamRouter, JetStreamSettings

    assert settings.router is not None  # the caller checked `settings.router_is_nats`
    return await JetStreamRouter.connect(
        nats_servers(settings.router),
        verifier=verifier,
        settings=RingSettings(
            max_entries=settings.ring_max_entries, max_bytes=settings.ring_max_bytes
        ),
        options=JetStreamSettings(
            subject_prefix=settings.nats_subject_prefix,
            max_age=settings.nats_max_age,
            duplicate_window=settings.nats_duplicate_window,
            replicas=settings.nats_replicas,
            creds_file=settings.nats_creds_file,
            name=f"harness-gateway {socket.gethostname()}",
        ),
        tls=nats_tls_context(settings),
    )

from __future__ import annotations

import gateway.store


def test_the_store_package_exports_exactly_its_public_names() -> None:
    assert set(gateway.store.__all__) == {
        "PROTOCOL_VERSION",
        "CommitAmbiguous",
        "CommitWriter",
        "CommitWriterSettings",
        "CommitWriterState",
        "ConstraintViolation",
        "DataDirLock",
        "DataDirLocked",
        "DatabaseState",
        "FatalHandler",
        "MemoryStore",
        "NullStoreObserver",
        "Schema",
        "SchemaVersionMismatch",
        "SqliteDatabase",
        "SqliteStore",
        "Store",
        "StoreClosed",
        "StoreCorrupt",
        "StoreError",
        "StoreFailed",
        "StoreObserver",
        "open_database",
    }
    assert len(gateway.store.__all__) == len(set(gateway.store.__all__))
    for name in gateway.store.__all__:
        assert hasattr(gateway.store, name)


def test_every_store_error_is_a_store_error() -> None:
    for name in (
        "CommitAmbiguous",
        "ConstraintViolation",
        "DataDirLocked",
        "SchemaVersionMismatch",
        "StoreClosed",
        "StoreCorrupt",
        "StoreFailed",
    ):
        assert issubclass(getattr(gateway.store, name), gateway.store.StoreError)


def test_the_null_observer_satisfies_the_observer_protocol() -> None:
    observer: gateway.store.StoreObserver = gateway.store.NullStoreObserver()
    observer.on_commit(1, 0.001)
    observer.on_write_done(0.001)
    observer.on_queue_depth(0)
    observer.on_commit_failure()

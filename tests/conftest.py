"""Suite-wide test settings."""

from __future__ import annotations

import collections.abc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.servers import NatsCluster, PostgresServer

# Timings belong in benchmarks, not in tests that fail on a slow or busy machine: property
# tests run without a per-example deadline, and a slow data generator is not a failure.
settings.register_profile("harness", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("harness")

LONG_MARKS = frozenset({"e2e", "slow"})
"""Markers of the tests that take seconds each: real processes, servers killed and restarted."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the Router contract tests written for the other retry-identity rule than
    their backend's (`tests/unit/router/contract_suite.py`): each backend runs its own
    variant of those behaviours, and nothing shows as skipped."""
    from tests.unit.router.contract_suite import runs_on

    kept, dropped = [], []
    for item in items:
        cls = getattr(item, "cls", None)
        function = getattr(item, "function", None)
        if cls is not None and function is not None and not runs_on(function, cls):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    # The long tests (real processes, node kills) start first: under pytest-xdist the last
    # test to start sets the wall time, and one long test handed out last would run alone
    # on one core while the other workers have finished (a stable sort keeps the rest in order).
    kept.sort(key=lambda item: 0 if LONG_MARKS & {mark.name for mark in item.iter_markers()} else 1)
    items[:] = kept


# --- real servers, started once per session when a test asks (tests/servers.py) -------------


@pytest.fixture(scope="session")
def postgres_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> collections.abc.Iterator[PostgresServer]:
    """One PostgreSQL 15 for the session; tests take a database each (`create_database`)."""
    server = PostgresServer.start(Path(tmp_path_factory.mktemp("postgres")))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> collections.abc.Iterator[NatsCluster]:
    """One JetStream node for the session; tests keep apart by subject prefix."""
    cluster = NatsCluster.start(Path(tmp_path_factory.mktemp("nats")), nodes=1)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def nats_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> collections.abc.Iterator[NatsCluster]:
    """A 3-node JetStream cluster for the session (tests that kill nodes start their own)."""
    cluster = NatsCluster.start(Path(tmp_path_factory.mktemp("nats-cluster")), nodes=3)
    try:
        yield cluster
    finally:
        cluster.close()

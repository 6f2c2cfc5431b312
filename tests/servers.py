"""The real NATS and PostgreSQL servers tests start (`gateway.testing_servers`)."""

from __future__ import annotations

from gateway.testing_servers import (
    NatsCluster,
    NatsNode,
    PostgresServer,
    free_port,
    nats_server_binary,
)

__all__ = ["NatsCluster", "NatsNode", "PostgresServer", "free_port", "nats_server_binary"]

"""Running a cluster in tests: its shared files, its replicas, in-process (cluster.md).

`ClusterFiles.create(folder)` writes what every replica of one cluster shares — the seed key,
the Registry's signing key, the admin token and the peer token, each owner-only — and
`replica_settings(...)` names them for one replica on a fixed port. `run_replicas(...)` starts
replicas as real in-process gateways on one PostgreSQL database and stops them on exit.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gateway.app import Gateway
from gateway.cluster.membership import MembershipSettings
from gateway.cluster.seeds import SeedKey
from gateway.registry.postgres import ensure_signing_seed
from gateway.secret_file import ensure_secret
from gateway.settings import Settings
from gateway.testing_servers import free_port

TEST_TIMING: Final = MembershipSettings(
    beat_interval=0.5, lease_ttl=4.0, claim_interval=0.25, safety_margin=1.0, surplus_interval=1.0
)
"""Membership timings of in-process test replicas: a shorter lease than the shipped one (4 s,
not 6 s), so a test cluster is claimed sooner, yet a beat may still be 3 s late before a
replica loses its lease. Three replicas share one event loop in a test process, on a machine
busy with the rest of the suite: a 2 s margin was measured to run out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterFiles:
    """The files every replica of one test cluster shares."""

    folder: Path
    seed_key: Path
    registry_key: Path
    admin_token: Path
    peer_token: Path

    @classmethod
    def create(cls, folder: Path) -> ClusterFiles:
        """Write a fresh set into `folder` (created owner-only)."""
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        files = cls(
            folder=folder,
            seed_key=folder / "seed-key",
            registry_key=folder / "registry-key",
            admin_token=folder / "admin-token",
            peer_token=folder / "peer-token",
        )
        SeedKey.generate().write(files.seed_key)
        ensure_signing_seed(files.registry_key)
        ensure_secret(files.admin_token, what="admin token", prefix="hadm_")
        ensure_secret(files.peer_token, what="peer token", prefix="")
        return files

    def admin(self) -> str:
        """The admin token."""
        return self.admin_token.read_text(encoding="utf-8").strip()


def replica_settings(
    files: ClusterFiles, dsn: str, *, replica_id: str, port: int | None = None
) -> Settings:
    """One replica's settings: its own data directory and port, the cluster's files."""
    port = port or free_port()
    data_dir = files.folder / replica_id
    data_dir.mkdir(exist_ok=True, mode=0o700)
    return Settings(
        cluster=True,
        replica_id=replica_id,
        listen=f"127.0.0.1:{port}",
        metrics_listen=None,
        data_dir=data_dir,
        store=dsn,
        seed_key_file=files.seed_key,
        registry_key_file=files.registry_key,
        admin_token_file=files.admin_token,
        peer_token_file=files.peer_token,
        shutdown_grace=2.0,
    )


@contextlib.asynccontextmanager
async def run_replicas(files: ClusterFiles, dsn: str, count: int) -> AsyncIterator[list[Gateway]]:
    """`count` replicas of one cluster, in-process, started one after another."""
    gateways: list[Gateway] = []
    try:
        for index in range(count):
            settings = replica_settings(files, dsn, replica_id=f"replica-{index}")
            gateways.append(await Gateway.start(settings, cluster_timing=TEST_TIMING))
        yield gateways
    finally:
        for gateway in reversed(gateways):
            await gateway.shutdown(skip_waits=True)


def random_name(prefix: str) -> str:
    """An agent name unique to one test."""
    return f"{prefix}-{secrets.token_hex(3)}"


__all__ = ["ClusterFiles", "random_name", "replica_settings", "run_replicas"]

"""JetStream Router tests: routers on real nats-servers, each test on subjects of its own.

`streams` gives a test a `Streams`: it makes `JetStreamRouter`s under a fresh subject
prefix per call (so no two tests, or two instances of one test, share a stream), holds a
raw admin connection for looking at and tampering with streams, and deletes every stream
bound to its prefixes when the test ends.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import nats
import nats.js.errors
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from gateway.router import EnvelopeVerifier, RingSettings
from gateway.router.jetstream import JetStreamRouter, JetStreamSettings
from tests.servers import NatsCluster
from tests.unit.router.fakes import FakeVerifier

CHECK_INTERVAL = 0.2
"""Seconds between a test router's checks of its stream, so deletions and purges show
quickly."""


@dataclass
class Streams:
    """Routers on one NATS cluster, and the streams they made."""

    cluster: NatsCluster
    admin: Client
    prefixes: list[str] = field(default_factory=list)
    _numbers: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def js(self) -> JetStreamContext:
        return self.admin.jetstream(timeout=10)

    def new_prefix(self) -> str:
        prefix = f"t{secrets.token_hex(4)}n{next(self._numbers)}"
        self.prefixes.append(prefix)
        return prefix

    @contextlib.asynccontextmanager
    async def router(
        self,
        *,
        settings: RingSettings | None = None,
        verifier: EnvelopeVerifier | None = None,
        prefix: str | None = None,
        **options: object,
    ) -> AsyncIterator[JetStreamRouter]:
        """A router on its own prefix, closed on exit and its stream deleted (each stream
        reserves its `MaxBytes` of the servers' storage); or on `prefix`, to share another
        router's stream, which is then left for the test's end."""
        own = prefix is None
        subject_prefix = self.new_prefix() if prefix is None else prefix
        router = await JetStreamRouter.connect(
            self.cluster.urls,
            verifier=verifier if verifier is not None else FakeVerifier(),
            settings=settings,
            options=JetStreamSettings(
                subject_prefix=subject_prefix,
                check_interval=CHECK_INTERVAL,
                **options,  # type: ignore[arg-type]
            ),
        )
        try:
            async with router:
                yield router
        finally:
            if own:
                await self.clean(subject_prefix)

    async def bound_stream(self, prefix: str) -> str | None:
        try:
            return await self.js.find_stream_name_by_subject(f"{prefix}.envelopes")
        except nats.js.errors.NotFoundError:
            return None

    async def clean(self, *prefixes: str) -> None:
        """Delete the streams bound to `prefixes` (all this test's by default)."""
        for prefix in prefixes or self.prefixes:
            name = await self.bound_stream(prefix)
            if name is not None:
                with contextlib.suppress(nats.js.errors.NotFoundError):
                    await self.js.delete_stream(name)


@contextlib.asynccontextmanager
async def streams_on(cluster: NatsCluster) -> AsyncIterator[Streams]:
    admin = await nats.connect(cluster.urls, name="harness-test-admin")
    streams = Streams(cluster=cluster, admin=admin)
    try:
        yield streams
    finally:
        try:
            await streams.clean()
        finally:
            await admin.close()


@pytest.fixture
async def streams(nats_server: NatsCluster) -> AsyncIterator[Streams]:
    """Routers on the session's single JetStream node."""
    async with streams_on(nats_server) as made:
        yield made


@pytest.fixture
async def cluster_streams(nats_cluster: NatsCluster) -> AsyncIterator[Streams]:
    """Routers on the session's 3-node JetStream cluster."""
    async with streams_on(nats_cluster) as made:
        yield made

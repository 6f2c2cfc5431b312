"""The Router contract suite against `JetStreamRouter`: one JetStream node, and a 3-node
cluster with R3 streams. Every router gets a stream of its own (a fresh subject prefix),
deleted when the test ends."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest
from hypothesis import HealthCheck, given, settings

from gateway.router import EnvelopeVerifier, RingSettings, RouterPort
from tests.integration.router.conftest import Streams
from tests.unit.router.contract_suite import RouterContract, RouterFactory, _plans, check_one_order

CLUSTER_EXAMPLES = 30
"""One-order examples on the cluster: an R3 stream each, about 30 ms to create and elect."""


def factory_of(streams: Streams) -> RouterFactory:
    def make(
        *, settings: RingSettings | None = None, verifier: EnvelopeVerifier | None = None
    ) -> AbstractAsyncContextManager[RouterPort]:
        return streams.router(settings=settings, verifier=verifier)

    return make


class TestJetStreamRouterOnOneNode(RouterContract):
    """The whole contract on one node: window deduplication instead of exact identities."""

    exact_retry_identities = False

    @pytest.fixture
    def router_factory(self, streams: Streams) -> RouterFactory:
        return factory_of(streams)


@pytest.mark.slow
class TestJetStreamRouterOnACluster(RouterContract):
    """The whole contract on three nodes with R3 streams (fewer one-order examples: each
    is a stream elected across the cluster)."""

    exact_retry_identities = False

    @pytest.fixture
    def router_factory(self, cluster_streams: Streams) -> RouterFactory:
        return factory_of(cluster_streams)

    @settings(
        max_examples=CLUSTER_EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(plan=_plans)
    async def test_every_reader_sees_the_restriction_of_one_global_order_under_any_interleaving(
        self, router_factory, plan
    ):
        await check_one_order(router_factory, plan)

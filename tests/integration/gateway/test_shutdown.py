"""The shutdown order's waits: a second signal cuts the grace of a drain already running."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.app import Gateway
from gateway.settings import Settings


async def test_a_second_shutdown_with_skip_waits_cuts_a_long_grace_short(tmp_path):
    settings = replace(
        Settings(),
        listen="127.0.0.1:0",
        metrics_listen=None,
        data_dir=tmp_path,
        shutdown_grace=60.0,
    )
    gateway = await Gateway.start(settings)
    async with grpc.aio.insecure_channel(gateway.address) as channel:
        # A health watch is a call the drain waits for: nothing else ends it.
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""))
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
        started = time.monotonic()
        first = asyncio.create_task(gateway.shutdown())
        # Step 2 turned readiness NOT_SERVING; the drain that waits on this watch follows.
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
        await gateway.shutdown(skip_waits=True)
        await first
        assert time.monotonic() - started < 20.0
        watch.cancel()

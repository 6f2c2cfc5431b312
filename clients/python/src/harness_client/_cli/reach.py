"""Dialling the gateway once before a command's first call.

An address where nothing listens then fails at once, naming the address and the cause
(`cannot reach 127.0.0.1:7770: connection refused`), instead of after the whole connect
timeout. The words come from `failures.reach_cause`; this module holds the I/O.
"""

from __future__ import annotations

import asyncio
from typing import Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from harness_client._channel import open_channel, parse_target
from harness_client._cli.failures import ReachCause, Unreachable, reach_cause

DIAGNOSE_TIMEOUT: Final = 1.0
"""Seconds for the one health call that reads why a connection failed (gRPC reports the
cause only on a call; it fails at once on a channel in TRANSIENT_FAILURE)."""


async def reach(url: str, credentials: grpc.ChannelCredentials | None, bound: float) -> None:
    """Connect to `url` once, or raise `Unreachable` naming the address and the cause.

    `connect` waits out its whole timeout on a refused connection, since a daemon may still
    be starting; a command should say at once that nothing listens. A channel reports a
    failure only as TRANSIENT_FAILURE, so one health call reads gRPC's text of the cause."""
    address = parse_target(url)[0]
    channel = open_channel(url, credentials=credentials)
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + bound
    try:
        state = channel.get_state(try_to_connect=True)
        while state is not grpc.ChannelConnectivity.READY:
            if state is grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                details = await _failure_details(channel)
                if details is not None:
                    cause, words = reach_cause(details)
                    raise Unreachable(address, cause, words)
            remaining = give_up_at - loop.time()
            try:
                await asyncio.wait_for(channel.wait_for_state_change(state), remaining)
            except TimeoutError:
                raise Unreachable(
                    address, ReachCause.TIMED_OUT, f"no answer within {bound:g}s"
                ) from None
            state = channel.get_state(try_to_connect=True)
    finally:
        await channel.close()


async def _failure_details(channel: grpc.aio.Channel) -> str | None:
    """gRPC's text of why `channel` cannot connect, or None when it connected meanwhile."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=DIAGNOSE_TIMEOUT)
    except grpc.aio.AioRpcError as error:
        if error.code() is grpc.StatusCode.UNAVAILABLE:
            return str(error.details() or "")
    return None

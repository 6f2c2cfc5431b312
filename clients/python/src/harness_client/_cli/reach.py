"""Dialling the gateway once before a command's first call.

An address where nothing listens then fails at once, naming the address and the cause
(`connect failed: cannot reach 127.0.0.1:7770: connection refused`), instead of after the
whole connect timeout. The words are the client library's (`_channel.unreachable`), so the
CLI and `connect` say the same; this module holds the I/O.
"""

from __future__ import annotations

import asyncio

import grpc

from harness_client._channel import failure_details, open_channel, parse_target, unreachable


async def reach(url: str, credentials: grpc.ChannelCredentials | None, bound: float) -> None:
    """Connect to `url` once, or raise `ConnectError` `transport-failed` naming the address
    and the cause.

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
                details = await failure_details(channel)
                if details is not None:
                    raise unreachable(address, details, bound)
            remaining = give_up_at - loop.time()
            try:
                await asyncio.wait_for(channel.wait_for_state_change(state), remaining)
            except TimeoutError:
                raise unreachable(address, None, bound) from None
            state = channel.get_state(try_to_connect=True)
    finally:
        await channel.close()

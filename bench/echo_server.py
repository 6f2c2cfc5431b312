"""The baseline peer: a bare `grpc.aio` unary echo server, run as its own process.

    python -m bench.echo_server

One method, `/bench.Echo/Echo`, answers its request bytes unchanged, through grpc's generic
handlers (no proto, no serialization). It listens on 127.0.0.1:0 under uvloop, like the
gateway, prints one JSON line `{"msg": "ready", "listen": "127.0.0.1:PORT"}` on stdout, and
stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Final

import grpc  # noqa: TID251 - the baseline is bare gRPC, outside the gateway's layering
import uvloop

SERVICE: Final = "bench.Echo"
"""The echo service's full name."""
METHOD: Final = "Echo"
"""The echo method's name."""
METHOD_PATH: Final = f"/{SERVICE}/{METHOD}"
"""The path a client calls."""
STOP_GRACE: Final = 1.0
"""Seconds in-flight echoes get at shutdown."""


async def _echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return request


async def serve() -> int:
    """Serve until SIGTERM or SIGINT; returns the exit code."""
    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        SERVICE, {METHOD: grpc.unary_unary_rpc_method_handler(_echo)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(json.dumps({"msg": "ready", "listen": f"127.0.0.1:{port}"}), flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop(STOP_GRACE)
    return 0


def main() -> int:
    """Run the echo server under uvloop."""
    return uvloop.run(serve())


if __name__ == "__main__":
    sys.exit(main())

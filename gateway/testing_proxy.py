"""A round-robin TCP proxy on loopback that stands for a Kubernetes Service in cluster tests.

`async with RoundRobinProxy([a, b]) as proxy:` listens on `proxy.address`
(`127.0.0.1:<free_port()>`) and sends each accepted connection to the next backend in turn,
the way kube-proxy spreads new connections over a Service's endpoints. Callers may rely on:

- **Round robin over connections, never requests**: a gRPC channel is one TCP connection,
  so every call of one channel reaches the backend its connection went to; a new channel (with
  its own subchannel pool, `grpc.use_local_subchannel_pool`) takes the next backend. Without
  that option channels of one process to one target share a connection, and so a backend.
  A closed grpc.aio channel lets go of its socket only when the channel object is collected,
  so `open_connections` of a closed channel's backend may stay up until then.
- **A backend that refuses is skipped**: the connection is offered to the following backends
  in order, each at most once (`refusals` counts the refusals); when none accepts, the
  client's connection is closed (`unrouted` counts those), as a Service without a ready
  endpoint resets it.
- **Bytes are piped both ways unchanged** until either side closes or fails; then both sides
  are closed. Each direction reads at most `PIPE_CHUNK` bytes and waits for the other side
  to drain before reading more, so nothing buffers without bound.
- **`set_backends(...)` changes the list live** (a scale-out or a pod removed): connections
  already open keep their backend until they close, as kube-proxy leaves established
  connections alone; only new connections see the new list.
- **Counters for assertions**: `connections[backend]` counts the connections piped to each
  backend, `open_connections(backend)` those still open.
- **Ownership**: every connection's task is the proxy's; leaving the `async with` block stops
  accepting, closes every open pipe and awaits every task.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import errno
import itertools
import logging
from collections.abc import Sequence
from types import TracebackType
from typing import Final, Self

from gateway.testing_servers import free_port

logger = logging.getLogger(__name__)

LISTEN_HOST: Final = "127.0.0.1"
"""Where the proxy listens: loopback only, like every server the tests start."""

PIPE_CHUNK: Final = 65_536
"""Most bytes one direction of a pipe reads before writing them on (bytes): one socket
buffer's worth, and the most a pipe holds in flight per direction."""

CONNECT_BOUND: Final = 5.0
"""Seconds a connection to one backend may take before it counts as refused. Loopback
answers at once; the bound only keeps a backend that accepts nothing (a stopped process's
port taken by nobody, a full backlog) from holding the client forever."""

BIND_ATTEMPTS: Final = 10
"""Ports `start` tries before giving up: a `free_port()` can be taken between its probe
and the proxy's bind by a server another test starts at the same moment."""


class ProxyState(enum.StrEnum):
    """Where a `RoundRobinProxy` is in its life."""

    NEW = "new"
    """Made, not listening yet."""
    SERVING = "serving"
    """Listening and piping."""
    STOPPED = "stopped"
    """Closed: no listener, no pipe, no task."""


def _split(address: str) -> tuple[str, int]:
    """`HOST:PORT` (the host may be a bracketed IPv6 address) as the pair `open_connection`
    takes."""
    host, separator, port = address.rpartition(":")
    if not separator or not host or not port.isdigit():
        raise ValueError(f"a backend is HOST:PORT, not {address!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


class RoundRobinProxy:
    """An asyncio TCP proxy spreading new connections over `backends` in turn."""

    def __init__(self, backends: Sequence[str]) -> None:
        self._backends: tuple[str, ...] = ()
        self.set_backends(backends)
        self._turn = itertools.count()
        self._state = ProxyState.NEW
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._open: collections.Counter[str] = collections.Counter()
        self.connections: collections.Counter[str] = collections.Counter()
        """Connections piped to each backend, by its address (open or since closed)."""
        self.refusals: collections.Counter[str] = collections.Counter()
        """Times each backend refused (or did not answer within `CONNECT_BOUND`) a
        connection offered to it."""
        self.unrouted = 0
        """Client connections closed because no backend accepted them."""

    @property
    def state(self) -> ProxyState:
        """Where the proxy is in its life."""
        return self._state

    @property
    def address(self) -> str:
        """`127.0.0.1:PORT`, where clients connect. Only while serving."""
        if self._state is not ProxyState.SERVING or self._port is None:
            raise RuntimeError(f"the proxy has no address while {self._state}")
        return f"{LISTEN_HOST}:{self._port}"

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends new connections go to, in round-robin order."""
        return self._backends

    def set_backends(self, backends: Sequence[str]) -> None:
        """Send new connections to `backends` from now on; open connections keep theirs.

        Raises `ValueError` for an address that is not `HOST:PORT`. An empty list is
        allowed: new connections are then closed at once (`unrouted`)."""
        for backend in backends:
            _split(backend)
        self._backends = tuple(backends)

    def open_connections(self, backend: str) -> int:
        """Connections to `backend` that are piping right now."""
        return self._open[backend]

    async def start(self) -> None:
        """Listen on a free loopback port. Only once, from `NEW`."""
        if self._state is not ProxyState.NEW:
            raise RuntimeError(f"the proxy cannot start while {self._state}")
        last: OSError | None = None
        for _ in range(BIND_ATTEMPTS):
            port = free_port()
            try:
                self._server = await asyncio.start_server(self._accepted, LISTEN_HOST, port)
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise
                last = error
                continue
            self._port = port
            self._state = ProxyState.SERVING
            logger.debug("proxy serving address=%s backends=%s", self.address, self._backends)
            return
        raise RuntimeError(f"no free port for the proxy after {BIND_ATTEMPTS} tries: {last}")

    async def close(self) -> None:
        """Stop accepting, close every open pipe and await every connection's task.
        Idempotent, and safe before `start`."""
        if self._state is ProxyState.STOPPED:
            return
        self._state = ProxyState.STOPPED
        server, self._server = self._server, None
        if server is not None:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        # Each task closes both of its sockets in `finally`; none raises but cancellation.
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: piped by a task the proxy owns, so that `close` can cancel
        and await it (a coroutine callback would run in a task `asyncio.start_server` owns)."""
        if self._state is not ProxyState.SERVING:
            writer.close()
            return
        task = asyncio.create_task(self._connection(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Route one client connection, then close it whatever happened."""
        try:
            await self._route(reader, writer)
        except Exception:
            # No one awaits a finished connection's task: a bug here must still be seen.
            logger.exception("proxy connection failed")
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _route(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        """Offer the connection to each backend once, starting at this connection's turn."""
        backends = self._backends
        start = next(self._turn)
        for offset in range(len(backends)):
            backend = backends[(start + offset) % len(backends)]
            host, port = _split(backend)
            try:
                backend_reader, backend_writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port), CONNECT_BOUND
                )
            except (OSError, TimeoutError):
                self.refusals[backend] += 1
                continue
            self.connections[backend] += 1
            self._open[backend] += 1
            try:
                await self._pipe(client_reader, client, backend_reader, backend_writer)
            finally:
                self._open[backend] -= 1
                backend_writer.close()
                with contextlib.suppress(OSError):
                    await backend_writer.wait_closed()
            return
        self.unrouted += 1
        logger.debug("proxy connection unrouted backends=%s", backends)

    async def _pipe(
        self,
        client_reader: asyncio.StreamReader,
        client: asyncio.StreamWriter,
        backend_reader: asyncio.StreamReader,
        backend: asyncio.StreamWriter,
    ) -> None:
        """Copy both ways until either direction ends; the caller closes both sockets."""
        directions = {
            asyncio.create_task(_copy(client_reader, backend)),
            asyncio.create_task(_copy(backend_reader, client)),
        }
        try:
            await asyncio.wait(directions, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in directions:
                task.cancel()
            await asyncio.gather(*directions, return_exceptions=True)


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Write what `source` reads to `sink` until end of file or a socket error."""
    with contextlib.suppress(OSError):
        while chunk := await source.read(PIPE_CHUNK):
            sink.write(chunk)
            await sink.drain()

"""The round-robin proxy that stands for a Service, on plain TCP servers of the test's own:
bytes both ways unchanged, new connections in turn, refusing backends skipped, a dropped
backend's open connection left alone, and every pipe closed when the proxy stops."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from gateway.testing_proxy import PIPE_CHUNK, ProxyState, RoundRobinProxy
from gateway.testing_servers import free_port
from tests.support import eventually

BOUND = 10.0
"""Seconds any single wait in these tests may take before it fails."""

LINE_LIMIT = 1 << 21
"""Longest line the echo servers and clients read (bytes): room for the large exchange."""


@contextlib.asynccontextmanager
async def tagged_echo(tag: bytes) -> AsyncIterator[str]:
    """A TCP server on 127.0.0.1:0 that answers each line with `tag` and the line, so a
    client can tell which backend its connection reached."""
    handlers: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            while line := await reader.readline():
                writer.write(tag + b" " + line)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            handlers.discard(task)
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, limit=LINE_LIMIT)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.close()
        for task in list(handlers):
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


class Client:
    """One connection through the proxy."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, address: str) -> Client:
        host, port = address.rsplit(":", 1)
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), limit=LINE_LIMIT), BOUND
        )
        return cls(reader, writer)

    async def ask(self, line: bytes) -> bytes:
        self.writer.write(line + b"\n")
        await self.writer.drain()
        return await asyncio.wait_for(self.reader.readline(), BOUND)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


async def test_successive_connections_go_to_the_backends_in_turn_and_bytes_come_back_unchanged():
    async with (
        tagged_echo(b"a") as a,
        tagged_echo(b"b") as b,
        RoundRobinProxy([a, b]) as proxy,
    ):
        answers = []
        for index in range(4):
            client = await Client.connect(proxy.address)
            answers.append(await client.ask(b"hello %d" % index))
            await client.close()
        assert answers == [b"a hello 0\n", b"b hello 1\n", b"a hello 2\n", b"b hello 3\n"]
        assert proxy.connections == {a: 2, b: 2}


async def test_a_large_exchange_passes_whole_in_both_directions():
    payload = bytes(range(256)).replace(b"\n", b"") * (4 * PIPE_CHUNK // 255)
    async with tagged_echo(b"a") as a, RoundRobinProxy([a]) as proxy:
        client = await Client.connect(proxy.address)
        try:
            assert await client.ask(payload) == b"a " + payload + b"\n"
        finally:
            await client.close()


async def test_a_backend_that_refuses_is_skipped_and_counted():
    nobody = f"127.0.0.1:{free_port()}"
    async with tagged_echo(b"a") as a, RoundRobinProxy([nobody, a]) as proxy:
        for _ in range(3):
            client = await Client.connect(proxy.address)
            assert await client.ask(b"x") == b"a x\n"
            await client.close()
        assert proxy.connections == {a: 3}
        assert proxy.refusals[nobody] >= 2
        assert proxy.unrouted == 0


async def test_a_connection_no_backend_accepts_is_closed_and_counted_as_unrouted():
    async with RoundRobinProxy([f"127.0.0.1:{free_port()}"]) as proxy:
        client = await Client.connect(proxy.address)
        try:
            assert await asyncio.wait_for(client.reader.read(), BOUND) == b""
        finally:
            await client.close()
        assert proxy.unrouted == 1
        proxy.set_backends([])
        client = await Client.connect(proxy.address)
        try:
            assert await asyncio.wait_for(client.reader.read(), BOUND) == b""
        finally:
            await client.close()
        assert proxy.unrouted == 2


async def test_an_open_connection_keeps_its_dropped_backend_and_new_ones_go_to_the_new_list():
    async with (
        tagged_echo(b"a") as a,
        tagged_echo(b"b") as b,
        RoundRobinProxy([a]) as proxy,
    ):
        kept = await Client.connect(proxy.address)
        assert await kept.ask(b"before") == b"a before\n"
        proxy.set_backends([b])
        assert proxy.backends == (b,)
        assert await kept.ask(b"after") == b"a after\n"
        fresh = await Client.connect(proxy.address)
        assert await fresh.ask(b"new") == b"b new\n"
        assert proxy.open_connections(a) == 1
        await kept.close()
        await eventually(lambda: _value(proxy.open_connections(a)), lambda n: n == 0)
        await fresh.close()


async def test_stopping_the_proxy_closes_its_open_pipes_and_awaits_their_tasks():
    async with tagged_echo(b"a") as a:
        proxy = RoundRobinProxy([a])
        await proxy.start()
        try:
            client = await Client.connect(proxy.address)
            assert await client.ask(b"x") == b"a x\n"
        finally:
            await proxy.close()
        # The proxy stopped with the pipe open: the client sees its connection end.
        assert await asyncio.wait_for(client.reader.read(), BOUND) == b""
        await client.close()
        assert proxy.open_connections(a) == 0
        assert proxy.state is ProxyState.STOPPED


async def test_a_backend_that_goes_away_ends_the_clients_connection():
    async with tagged_echo(b"b") as b:
        async with tagged_echo(b"a") as a:
            proxy = RoundRobinProxy([a, b])
            await proxy.start()
            client = await Client.connect(proxy.address)
            assert await client.ask(b"x") == b"a x\n"
        # `a` stopped and closed its side: the proxy closes the client's.
        assert await asyncio.wait_for(client.reader.read(), BOUND) == b""
        await client.close()
        await eventually(lambda: _value(proxy.open_connections(a)), lambda n: n == 0)
        await proxy.close()


async def test_the_proxy_has_no_address_before_start_or_after_close_and_closes_twice():
    proxy = RoundRobinProxy(["127.0.0.1:1"])
    with pytest.raises(RuntimeError, match="new"):
        _ = proxy.address
    await proxy.close()
    await proxy.close()
    assert proxy.state is ProxyState.STOPPED
    with pytest.raises(RuntimeError, match="stopped"):
        await proxy.start()


@pytest.mark.parametrize("backend", ["nohost", "127.0.0.1:", ":80", "127.0.0.1:http"])
def test_a_backend_that_is_not_host_and_port_is_refused(backend):
    with pytest.raises(ValueError, match="HOST:PORT"):
        RoundRobinProxy([backend])


async def _value(value: int) -> int:
    return value

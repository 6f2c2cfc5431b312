"""The Python client rides out a gateway restart (issue 25 item 5; operations.md §10).

A real embedded gateway is stopped and started again on the same port and data directory,
as a restarted pod behind its Service is: the `messages()` loop resumes on its own and
reports READY, RECONNECTING, READY; a keyed send retried across the restart returns the
first outcome and posts once; a revoked token ends the loop with its typed error. That the
loop never gives up however long the gateway stays away is proven on a fake clock in
`tests/unit/client/test_stream_loop.py` (minutes of backoff steps cost no time there).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Final

import harness_client
import pytest
from harness_client import (
    AuthenticationError,
    AuthenticationErrorReason,
    ConnectionState,
    EndpointClosedError,
    InboundDelivery,
    MessageInput,
    MulticastItem,
    SendResult,
    text_of,
)

from gateway.testing import RunningGateway, run_gateway
from tests.support import eventually

BOUND: Final = 20.0
"""Seconds any single wait in these tests may take before it fails."""

INBOX_QUEUE: Final = 100
"""Deliveries a listener holds for its test before it waits (more than any test sends)."""


class Listener:
    """An agent's `messages()` loop running in a task, each delivery acknowledged and kept,
    and every `ConnectionState` change it reported."""

    def __init__(self, endpoint: harness_client.Endpoint) -> None:
        self.endpoint = endpoint
        self.states: list[ConnectionState] = []
        self.deliveries: asyncio.Queue[InboundDelivery] = asyncio.Queue(maxsize=INBOX_QUEUE)
        self.unsubscribe = endpoint.on_connection_state(self.states.append)
        self.task = asyncio.create_task(self._listen())

    async def _listen(self) -> None:
        async for delivery in self.endpoint.messages():
            await delivery.acknowledge()
            await self.deliveries.put(delivery)

    async def state_is(self, state: ConnectionState) -> None:
        async def current() -> ConnectionState:
            if self.task.done():
                self.task.result()  # the loop's failure, rather than a timeout
            return self.endpoint.connection_state

        await eventually(current, lambda seen: seen is state, within=BOUND)

    async def texts_until(self, last: str) -> list[str]:
        """The texts of the deliveries up to and including the one whose text is `last`."""
        texts: list[str] = []
        while not texts or texts[-1] != last:
            delivery = await asyncio.wait_for(self.deliveries.get(), BOUND)
            assert isinstance(delivery.item, MulticastItem)
            texts.append(text_of(delivery.item.message.content))
        return texts

    async def stop(self) -> None:
        """Cancel the loop if it still runs (a loop that ended has told its test how)."""
        self.unsubscribe()
        if self.task.done():
            return
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def state_of(endpoint: harness_client.Endpoint) -> ConnectionState:
    """The endpoint's state now (a call, so mypy does not keep an earlier assert's narrowing)."""
    return endpoint.connection_state


@contextlib.asynccontextmanager
async def listening(endpoint: harness_client.Endpoint) -> AsyncIterator[Listener]:
    listener = Listener(endpoint)
    try:
        yield listener
    finally:
        await listener.stop()


@contextlib.asynccontextmanager
async def restartable_gateway() -> AsyncIterator[RunningGateway]:
    """A gateway whose restarts keep its port, so clients dial the same address again."""
    async with run_gateway() as gw:
        gw.settings = replace(gw.settings, listen=gw.address)
        yield gw


async def test_a_listening_loop_resumes_after_a_restart_on_the_same_port_ready_reconnecting_ready():
    async with restartable_gateway() as gw:
        alice_token, bob_token = await gw.register("alice"), await gw.register("bob")
        async with (
            await harness_client.connect(gw.address, token=alice_token) as alice,
            await harness_client.connect(gw.address, token=bob_token) as bob,
        ):
            assert bob.connection_state is ConnectionState.CONNECTING
            async with listening(bob) as listener:
                await listener.state_is(ConnectionState.READY)
                await alice.send(MessageInput(to="agent:bob", text="before"))
                assert await listener.texts_until("before") == ["before"]

                await gw.gateway.shutdown(skip_waits=True)
                await listener.state_is(ConnectionState.RECONNECTING)
                await gw.restart_stopped()
                await listener.state_is(ConnectionState.READY)

                await alice.send(MessageInput(to="agent:bob", text="after"))
                assert await listener.texts_until("after") == ["after"]
                assert listener.states == [
                    ConnectionState.READY,
                    ConnectionState.RECONNECTING,
                    ConnectionState.READY,
                ]
        assert state_of(bob) is ConnectionState.CLOSED


async def test_a_keyed_send_retried_across_a_restart_returns_the_first_result_and_posts_once(
    caplog: pytest.LogCaptureFixture,
):
    async with restartable_gateway() as gw:
        alice_token, bob_token = await gw.register("alice"), await gw.register("bob")
        order = MessageInput(to="agent:bob", text="order 42 shipped")
        async with (
            await harness_client.connect(gw.address, token=alice_token) as alice,
            await harness_client.connect(gw.address, token=bob_token) as bob,
        ):
            first = await alice.send(order, idempotency_key="order-42")
            assert isinstance(first, SendResult)
            assert len(first.post_ids) == 1

            async def client_log() -> str:
                return caplog.text

            await gw.gateway.shutdown(skip_waits=True)
            with caplog.at_level(logging.DEBUG, logger="harness_client._endpoint"):
                again = asyncio.create_task(
                    alice.send(order, idempotency_key="order-42", deadline=BOUND)
                )
                # The retry meets the stopped gateway at least once before it comes back.
                await eventually(client_log, lambda text: "sending again" in text, within=BOUND)
                assert not again.done()
                await gw.restart_stopped()
                assert await asyncio.wait_for(again, BOUND) == first

            await alice.send(MessageInput(to="agent:bob", text="done"))
            async with listening(bob) as listener:
                texts = await listener.texts_until("done")
        assert texts == ["order 42 shipped", "done"]


async def test_a_revoked_token_ends_the_listening_loop_with_the_typed_error():
    async with run_gateway() as gw:
        bob_token = await gw.register("bob")
        async with (
            await harness_client.connect(gw.address, token=bob_token) as bob,
            await harness_client.connect_management(
                gw.address, admin_token=gw.admin_token
            ) as operator,
        ):
            listener = Listener(bob)
            try:
                await listener.state_is(ConnectionState.READY)
                await operator.revoke_token("bob")
                with pytest.raises(AuthenticationError) as raised:
                    await asyncio.wait_for(listener.task, BOUND)
            finally:
                await listener.stop()
            assert raised.value.reason is AuthenticationErrorReason.REVOKED
            # The loop ended: no stream is open and none is being opened.
            assert bob.connection_state is ConnectionState.CONNECTING
            assert listener.states == [ConnectionState.READY, ConnectionState.CONNECTING]


async def test_closing_the_endpoint_while_the_gateway_is_away_ends_the_loop_closed():
    async with restartable_gateway() as gw:
        bob = await harness_client.connect(gw.address, token=await gw.register("bob"))
        async with listening(bob) as listener:
            await listener.state_is(ConnectionState.READY)
            await gw.gateway.shutdown(skip_waits=True)
            await listener.state_is(ConnectionState.RECONNECTING)
            await bob.close()
            with pytest.raises(EndpointClosedError):
                await asyncio.wait_for(listener.task, BOUND)
            assert listener.states == [
                ConnectionState.READY,
                ConnectionState.RECONNECTING,
                ConnectionState.CLOSED,
            ]

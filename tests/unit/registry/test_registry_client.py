from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest

from gateway.identity.cards import SignedAgentCard, sign_card
from gateway.identity.keys import SigningKey
from gateway.registry import (
    Found,
    KeyAlreadyRegistered,
    MemoryRegistry,
    NameTaken,
    NotFound,
    Registered,
    RegisterOutcome,
    RegistryClient,
    RegistryClientState,
    RegistryUnavailable,
    RegistryVersionMismatch,
)


class CountingRegistry:
    """A `RegistryPort` over `MemoryRegistry` that counts calls and can hold or break them."""

    def __init__(self) -> None:
        self.inner = MemoryRegistry()
        self.calls: list[tuple[str, str]] = []
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()
        self.failures: list[BaseException] = []
        self.substitute: SignedAgentCard | None = None

    def registry_public_key(self) -> str:
        return self.inner.registry_public_key()

    async def _enter(self, call: str, argument: str) -> None:
        self.calls.append((call, argument))
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.failures:
            raise self.failures.pop(0)

    async def register(self, agent_name: str, public_key: str) -> RegisterOutcome:
        await self._enter("register", agent_name)
        outcome = await self.inner.register(agent_name, public_key)
        if self.substitute is not None and isinstance(outcome, Registered):
            return Registered(card=self.substitute)
        return outcome

    async def lookup_by_id(self, agent_id: str) -> SignedAgentCard | None:
        await self._enter("id", agent_id)
        return self.substitute or await self.inner.lookup_by_id(agent_id)

    async def lookup_by_name(self, agent_name: str) -> SignedAgentCard | None:
        await self._enter("name", agent_name)
        return self.substitute or await self.inner.lookup_by_name(agent_name)

    async def list(self, after_agent_id: str | None = None, limit: int = 100):
        await self._enter("list", after_agent_id or "")
        cards = await self.inner.list(after_agent_id, limit)
        return (self.substitute, *cards[1:]) if self.substitute and cards else cards


@pytest.fixture
async def port() -> CountingRegistry:
    return CountingRegistry()


@pytest.fixture
async def client(port):
    registry_client = RegistryClient(port, registry_public_key=port.registry_public_key())
    yield registry_client
    await registry_client.close()


async def register(port: CountingRegistry, name: str) -> SignedAgentCard:
    outcome = await port.inner.register(name, SigningKey.generate().public_key_b64)
    assert isinstance(outcome, Registered)
    return outcome.card


async def test_a_verified_card_is_cached_by_id_and_by_name(port, client):
    card = await register(port, "alice")
    assert await client.lookup_by_name("alice") == Found(card=card)
    assert await client.lookup_by_name("alice") == Found(card=card)
    assert await client.lookup_by_id(card.card.agent_id) == Found(card=card)
    assert port.calls == [("name", "alice")]


async def test_not_found_is_never_cached(port, client):
    assert await client.lookup_by_name("bob") == NotFound()
    card = await register(port, "bob")
    assert await client.lookup_by_name("bob") == Found(card=card)
    assert port.calls == [("name", "bob"), ("name", "bob")]


async def test_concurrent_lookups_of_one_key_share_one_call(port, client):
    card = await register(port, "alice")
    port.gate = asyncio.Event()
    lookups = [asyncio.create_task(client.lookup_by_name("alice")) for _ in range(5)]
    await port.started.wait()
    port.gate.set()
    assert await asyncio.gather(*lookups) == [Found(card=card)] * 5
    assert port.calls == [("name", "alice")]


async def test_lookups_of_different_keys_do_not_share_a_call(port, client):
    alice, bob = await register(port, "alice"), await register(port, "bob")
    outcomes = await asyncio.gather(
        client.lookup_by_name("alice"),
        client.lookup_by_name("bob"),
        client.lookup_by_id(alice.card.agent_id),
    )
    assert list(outcomes) == [Found(card=alice), Found(card=bob), Found(card=alice)]
    assert sorted(port.calls) == [("id", alice.card.agent_id), ("name", "alice"), ("name", "bob")]


async def test_a_caller_going_away_does_not_cancel_the_shared_call(port, client):
    card = await register(port, "alice")
    port.gate = asyncio.Event()
    first = asyncio.create_task(client.lookup_by_name("alice"))
    second = asyncio.create_task(client.lookup_by_name("alice"))
    await port.started.wait()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    port.gate.set()
    assert await second == Found(card=card)
    assert len(port.calls) == 1


async def test_a_failure_is_never_cached(port, client):
    card = await register(port, "alice")
    port.failures.append(RegistryUnavailable("down"))
    with pytest.raises(RegistryUnavailable, match="down"):
        await client.lookup_by_name("alice")
    assert await client.lookup_by_name("alice") == Found(card=card)
    assert len(port.calls) == 2


async def test_an_unexpected_backend_error_is_unavailable(port, client):
    port.failures.append(ConnectionResetError("reset"))
    with pytest.raises(RegistryUnavailable, match="ConnectionResetError"):
        await client.lookup_by_name("alice")


async def test_a_version_mismatch_passes_through(port, client):
    port.failures.append(RegistryVersionMismatch("harness/2"))
    with pytest.raises(RegistryVersionMismatch):
        await client.lookup_by_name("alice")


async def test_a_lookup_past_the_deadline_is_unavailable_and_not_cached(port):
    client = RegistryClient(port, registry_public_key=port.registry_public_key(), deadline=0.01)
    try:
        card = await register(port, "alice")
        port.gate = asyncio.Event()
        with pytest.raises(RegistryUnavailable, match="did not answer"):
            await client.lookup_by_name("alice")
        port.gate = None
        assert await client.lookup_by_name("alice") == Found(card=card)
        assert len(port.calls) == 2
    finally:
        await client.close()


async def test_a_card_failing_verification_is_logged_and_unavailable(port, caplog):
    await register(port, "alice")
    client = RegistryClient(port, registry_public_key=SigningKey.generate().public_key_b64)
    try:
        with (
            caplog.at_level(logging.ERROR, logger="gateway.registry.client"),
            pytest.raises(RegistryUnavailable, match="failed verification"),
        ):
            await client.lookup_by_name("alice")
        assert any(record.levelno == logging.ERROR for record in caplog.records)
        with pytest.raises(RegistryUnavailable):
            await client.lookup_by_name("alice")
        assert len(port.calls) == 2
    finally:
        await client.close()


async def test_a_tampered_card_fails_verification(port, client):
    card = await register(port, "alice")
    port.substitute = replace(card, card=replace(card.card, agent_name="alicia"))
    with pytest.raises(RegistryUnavailable, match="failed verification"):
        await client.lookup_by_name("alice")


async def test_a_valid_card_for_another_name_or_id_is_not_found_and_not_cached(port, client):
    await register(port, "alice")
    bob = await register(port, "bob")
    port.substitute = bob
    assert await client.lookup_by_name("alice") == NotFound()
    assert await client.lookup_by_id("agt_AAAAAAAAAAAAAAAAAAAAAA") == NotFound()
    assert await client.lookup_by_name("alice") == NotFound()
    assert len(port.calls) == 3


async def test_the_card_cache_is_bounded(port):
    client = RegistryClient(port, registry_public_key=port.registry_public_key(), cache_size=1)
    try:
        await register(port, "alice")
        await register(port, "bob")
        for name in ("alice", "bob", "alice"):
            assert isinstance(await client.lookup_by_name(name), Found)
        assert [name for _, name in port.calls] == ["alice", "bob", "alice"]
    finally:
        await client.close()


async def test_register_verifies_and_caches_the_new_card(port, client):
    public_key = SigningKey.generate().public_key_b64
    outcome = await client.register("alice", public_key)
    assert isinstance(outcome, Registered)
    assert await client.lookup_by_name("alice") == Found(card=outcome.card)
    assert await client.register("alice", SigningKey.generate().public_key_b64) == NameTaken()
    assert await client.register("bob", public_key) == KeyAlreadyRegistered()
    assert [call for call, _ in port.calls] == ["register", "register", "register"]


async def test_register_refuses_a_card_for_another_registration(port, client):
    other = await register(port, "mallory")
    port.substitute = other
    with pytest.raises(RegistryUnavailable, match="another request"):
        await client.register("alice", SigningKey.generate().public_key_b64)


async def test_register_refuses_a_card_the_registry_key_did_not_sign(port, client):
    card = await register(port, "alice")
    port.substitute = sign_card(SigningKey.generate(), card.card)
    with pytest.raises(RegistryUnavailable, match="failed verification"):
        await client.register("alice", card.card.public_key)


async def test_list_verifies_every_card(port, client):
    alice = await register(port, "alice")
    await register(port, "bob")
    cards = await client.list()
    assert alice in cards
    assert len(cards) == 2
    port.substitute = sign_card(SigningKey.generate(), alice.card)
    with pytest.raises(RegistryUnavailable, match="failed verification"):
        await client.list()


async def test_close_cancels_in_flight_lookups_and_refuses_later_calls(port):
    client = RegistryClient(port, registry_public_key=port.registry_public_key())
    port.gate = asyncio.Event()
    lookup = asyncio.create_task(client.lookup_by_name("alice"))
    await port.started.wait()
    await client.close()
    with pytest.raises(RegistryUnavailable, match="closed"):
        await lookup
    assert client.state is RegistryClientState.CLOSED
    with pytest.raises(RegistryUnavailable, match="closed"):
        await client.lookup_by_name("alice")
    await client.close()

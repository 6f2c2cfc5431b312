"""One contract suite for every Registry backend: one behaviour, several backends.

A module that runs the suite star-imports it and defines the `make_registry` fixture for its
backends (`tests/unit/registry/test_registry_contract.py`: memory and SQLite;
`tests/integration/registry/test_registry_contract_postgres.py`: PostgreSQL;
`tests/integration/rpc/test_registry_remote.py`: both behind a real gRPC server). The module's
name does not start with `test_`, so pytest collects its tests only where they are imported.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Protocol

import pytest
from harness_contract.ids import RandomId, agent_id_order_key, b64

from gateway.identity.cards import verify_card
from gateway.identity.keys import SigningKey
from gateway.identity.objects import format_timestamp, is_timestamp
from gateway.registry import (
    KeyAlreadyRegistered,
    NameTaken,
    Registered,
    RegistryPort,
)

ZERO = "agt_AAAAAAAAAAAAAAAAAAAAAA"
SEVEN_F = "agt_f39_f39_f39_f39_f39_fw"
F_B = "agt_-_v7-_v7-_v7-_v7-_v7-w"
NOW = dt.datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC)


class MakeRegistry(Protocol):
    async def __call__(
        self, *, mint_agent_id: Callable[[], str] = ..., clock: Callable[[], dt.datetime] = ...
    ) -> RegistryPort: ...


def key() -> str:
    return SigningKey.generate().public_key_b64


def ids_in(order: list[str]) -> Callable[[], str]:
    remaining: Iterator[str] = iter(order)
    return lambda: next(remaining)


async def registered(registry: RegistryPort, name: str, public_key: str | None = None):
    outcome = await registry.register(name, public_key or key())
    assert isinstance(outcome, Registered)
    return outcome.card


async def test_register_mints_a_registry_signed_card_for_the_name_and_key(make_registry):
    registry = await make_registry()
    public_key = key()
    card = await registered(registry, "alice", public_key)
    assert card.card.agent_name == "alice"
    assert card.card.public_key == public_key
    assert RandomId.AGENT.is_valid(card.card.agent_id)
    assert card.card.issued_at == format_timestamp(NOW) == "2026-05-06T07:08:09Z"
    assert is_timestamp(card.card.issued_at)
    assert verify_card(card, registry.registry_public_key())


async def test_registering_the_same_name_and_key_again_returns_the_existing_card(make_registry):
    registry = await make_registry()
    public_key = key()
    first = await registered(registry, "alice", public_key)
    assert await registry.register("alice", public_key) == Registered(card=first)
    assert await registry.list() == (first,)


async def test_a_name_held_by_another_key_is_taken(make_registry):
    registry = await make_registry()
    await registered(registry, "alice")
    assert await registry.register("alice", key()) == NameTaken()


async def test_a_key_registered_under_another_name_is_refused(make_registry):
    registry = await make_registry()
    public_key = key()
    await registered(registry, "alice", public_key)
    assert await registry.register("bob", public_key) == KeyAlreadyRegistered()
    assert await registry.lookup_by_name("bob") is None


async def test_the_key_is_checked_before_the_name(make_registry):
    registry = await make_registry()
    await registered(registry, "alice")
    bobs_key = key()
    await registered(registry, "bob", bobs_key)
    # alice's name is taken and bob's key is registered: the key decides.
    assert await registry.register("alice", bobs_key) == KeyAlreadyRegistered()


@pytest.mark.parametrize(
    ("name", "public_key"),
    [
        ("Alice", None),
        ("al", None),
        ("alice\n", None),
        ("alice", "A" * 42),
        ("alice", "A" * 42 + "B"),
        ("alice", b64(b"\x00" * 31)),
    ],
)
async def test_register_refuses_a_malformed_name_or_key(make_registry, name, public_key):
    registry = await make_registry()
    with pytest.raises(ValueError, match=r"name|key"):
        await registry.register(name, public_key or key())


async def test_lookups_find_a_card_by_id_and_by_name(make_registry):
    registry = await make_registry()
    card = await registered(registry, "alice")
    await registered(registry, "bob")
    assert await registry.lookup_by_id(card.card.agent_id) == card
    assert await registry.lookup_by_name("alice") == card


@pytest.mark.parametrize(
    "query", ["carol", "Alice", "alice ", "", "agt_AAAAAAAAAAAAAAAAAAAAAB", ZERO]
)
async def test_lookups_of_an_unknown_or_malformed_id_or_name_find_nothing(make_registry, query):
    registry = await make_registry(mint_agent_id=ids_in([SEVEN_F]))
    await registered(registry, "alice")
    assert await registry.lookup_by_id(query) is None
    assert await registry.lookup_by_name(query) is None


async def test_list_returns_cards_in_agent_id_byte_order_not_text_order(make_registry):
    registry = await make_registry(mint_agent_id=ids_in([F_B, ZERO, SEVEN_F]))
    for name in ("carol", "alice", "bob"):
        await registered(registry, name)
    listed = [card.card.agent_id for card in await registry.list()]
    assert listed == [ZERO, SEVEN_F, F_B]
    assert sorted(listed) != listed


async def test_list_starts_strictly_after_the_exclusive_bound(make_registry):
    registry = await make_registry(mint_agent_id=ids_in([F_B, ZERO, SEVEN_F]))
    for name in ("carol", "alice", "bob"):
        await registered(registry, name)
    assert [c.card.agent_id for c in await registry.list(ZERO)] == [SEVEN_F, F_B]
    assert [c.card.agent_id for c in await registry.list(SEVEN_F)] == [F_B]
    assert await registry.list(F_B) == ()
    # A bound that names no card still orders by bytes: 0x10... sits between 0x00 and 0x7f.
    between = "agt_" + b64(b"\x10" * 16)
    assert [c.card.agent_id for c in await registry.list(between)] == [SEVEN_F, F_B]


async def test_list_pages_through_every_card_with_a_limit(make_registry):
    registry = await make_registry()
    for index in range(25):
        await registered(registry, f"agent-{index:02d}")
    seen: list[str] = []
    after: str | None = None
    while True:
        page = await registry.list(after, 10)
        assert len(page) <= 10
        if not page:
            break
        seen.extend(card.card.agent_id for card in page)
        after = page[-1].card.agent_id
    assert len(seen) == 25
    assert seen == sorted(seen, key=agent_id_order_key)


async def test_list_of_an_empty_registry_is_empty(make_registry):
    registry = await make_registry()
    assert await registry.list() == ()


@pytest.mark.parametrize(
    ("after", "limit"), [(None, 0), (None, 101), (None, -1), ("agt_short", 10), (None, True)]
)
async def test_list_refuses_a_malformed_bound_or_a_limit_outside_one_to_a_hundred(
    make_registry, after, limit
):
    registry = await make_registry()
    with pytest.raises(ValueError, match=r"limit|AgentId"):
        await registry.list(after, limit)


async def test_list_accepts_the_largest_limit(make_registry):
    registry = await make_registry()
    card = await registered(registry, "alice")
    assert await registry.list(None, 100) == (card,)

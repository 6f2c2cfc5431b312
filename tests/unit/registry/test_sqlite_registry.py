from __future__ import annotations

import sqlite3
import stat

import pytest

from gateway.identity.cards import verify_card
from gateway.identity.keys import SigningKey
from gateway.registry import Registered, RegistryState, RegistryUnavailable, SqliteRegistry


async def test_a_reopened_registry_keeps_its_key_and_cards(tmp_path):
    path = tmp_path / "registry.db"
    async with await SqliteRegistry.open(path) as registry:
        public_key = registry.registry_public_key()
        outcome = await registry.register("alice", SigningKey.generate().public_key_b64)
        assert isinstance(outcome, Registered)
    async with await SqliteRegistry.open(path) as reopened:
        assert reopened.registry_public_key() == public_key
        card = await reopened.lookup_by_name("alice")
        assert card == outcome.card
        assert card is not None
        assert verify_card(card, public_key)


async def test_the_given_seed_signs_and_another_seed_is_refused_on_reopen(tmp_path):
    path = tmp_path / "registry.db"
    seed = bytes(range(32))
    async with await SqliteRegistry.open(path, seed) as registry:
        assert registry.registry_public_key() == SigningKey(seed).public_key_b64
    async with await SqliteRegistry.open(path, seed) as registry:
        assert registry.registry_public_key() == SigningKey(seed).public_key_b64
    with pytest.raises(ValueError, match="another signing key"):
        await SqliteRegistry.open(path, bytes(32))


async def test_a_seed_of_the_wrong_length_is_refused(tmp_path):
    with pytest.raises(ValueError, match="32 bytes"):
        await SqliteRegistry.open(tmp_path / "registry.db", b"short")


async def test_the_database_is_owner_only_in_wal_mode(tmp_path):
    path = tmp_path / "registry.db"
    async with await SqliteRegistry.open(path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        connection = sqlite3.connect(path)
        try:
            assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            connection.close()


async def test_an_unknown_schema_version_fails_closed(tmp_path):
    path = tmp_path / "registry.db"
    async with await SqliteRegistry.open(path):
        pass
    connection = sqlite3.connect(path)
    try:
        with connection:
            connection.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    finally:
        connection.close()
    with pytest.raises(RegistryUnavailable, match="unknown schema"):
        await SqliteRegistry.open(path)


async def test_a_corrupt_stored_card_is_reported_as_unavailable(tmp_path):
    path = tmp_path / "registry.db"
    async with await SqliteRegistry.open(path) as registry:
        await registry.register("alice", SigningKey.generate().public_key_b64)
        connection = sqlite3.connect(path)
        try:
            with connection:
                connection.execute("UPDATE cards SET card = x'7b7d'")
        finally:
            connection.close()
        with pytest.raises(RegistryUnavailable, match="undecodable"):
            await registry.lookup_by_name("alice")


async def test_a_closed_registry_refuses_calls_and_closing_twice_is_fine(tmp_path):
    registry = await SqliteRegistry.open(tmp_path / "registry.db")
    assert registry.state is RegistryState.OPEN
    await registry.close()
    await registry.close()
    state: RegistryState = registry.state
    assert state is RegistryState.CLOSED
    with pytest.raises(RegistryUnavailable, match="closed"):
        await registry.lookup_by_name("alice")


async def test_a_directory_that_does_not_exist_is_unavailable(tmp_path):
    with pytest.raises(RegistryUnavailable, match="cannot open"):
        await SqliteRegistry.open(tmp_path / "missing" / "registry.db")

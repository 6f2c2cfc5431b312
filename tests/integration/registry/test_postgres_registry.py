"""`PostgresRegistry` beyond the contract suite: replicas sharing one database and one key,
exact registration races, the schema and key checks, outages, the signing key file."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from harness_contract.ids import RandomId, agent_id_order_key, b64

from gateway.identity.cards import verify_card
from gateway.identity.keys import SigningKey
from gateway.identity.objects import encode
from gateway.registry import (
    KeyAlreadyRegistered,
    NameTaken,
    Registered,
    RegisterOutcome,
    RegistryState,
    RegistryUnavailable,
    RegistryVersionMismatch,
)
from gateway.registry._cards import mint_card, utc_now
from gateway.registry.postgres import (
    SCHEMA_VERSION,
    PostgresRegistry,
    RegistryKeyMismatch,
    RegistrySchemaError,
    ensure_signing_seed,
    migrate_registry,
    read_signing_seed,
)
from gateway.secret_file import SecretFileError
from tests.servers import PostgresServer, free_port
from tests.support import eventually

PASSWORD = "s3cret-pw-never-shown"
"""A password put in DSNs to check it never reaches an error or a log (the test server's
`trust` authentication ignores it)."""


@pytest.fixture
def dsn(postgres_server: PostgresServer) -> str:
    return postgres_server.create_database("registry")


def with_password(dsn: str) -> str:
    return dsn.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@", 1)


@contextlib.asynccontextmanager
async def replica(dsn: str, seed: bytes, **options: float) -> AsyncIterator[PostgresRegistry]:
    registry = await PostgresRegistry.open(dsn, signing_seed=seed, pool_size=2, **options)  # type: ignore[arg-type]
    try:
        yield registry
    finally:
        await registry.close()


async def rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        cursor = await connection.execute(query)
        return await cursor.fetchall()


async def execute(dsn: str, statement: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        await connection.execute(statement)


async def snapshot(dsn: str) -> tuple[list[tuple[Any, ...]], ...]:
    """Everything the registry keeps, to show a refusal changed nothing."""
    return (
        await rows(dsn, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"),
        await rows(dsn, "SELECT key, value FROM registry_meta ORDER BY key"),
        await rows(dsn, "SELECT agent_id, agent_name, signed_card FROM registry_cards ORDER BY 1"),
    )


def public_key() -> str:
    return SigningKey.generate().public_key_b64


def seed() -> bytes:
    return SigningKey.generate().seed


# --- replicas ----------------------------------------------------------------------------


async def test_a_reopened_registry_keeps_its_cards_and_signs_with_the_seed_it_is_given(dsn):
    registry_seed = seed()
    async with replica(dsn, registry_seed) as registry:
        assert registry.registry_public_key() == SigningKey(registry_seed).public_key_b64
        outcome = await registry.register("alice", public_key())
        assert isinstance(outcome, Registered)
    async with replica(dsn, registry_seed) as reopened:
        card = await reopened.lookup_by_name("alice")
        assert card == outcome.card
        assert card is not None
        assert verify_card(card, reopened.registry_public_key())
    # The seed itself is never in the database: only the public key is recorded.
    meta = dict(await rows(dsn, "SELECT key, value FROM registry_meta"))
    assert meta == {
        "schema_version": str(SCHEMA_VERSION),
        "protocol_version": "harness/1",
        "registry_public_key": SigningKey(registry_seed).public_key_b64,
    }


async def test_two_replicas_share_cards_that_verify_under_one_registry_key(dsn):
    registry_seed = seed()
    async with replica(dsn, registry_seed) as first, replica(dsn, registry_seed) as second:
        assert first.registry_public_key() == second.registry_public_key()
        outcome = await first.register("alice", public_key())
        assert isinstance(outcome, Registered)
        by_name = await second.lookup_by_name("alice")
        by_id = await second.lookup_by_id(outcome.card.card.agent_id)
        assert by_name == by_id == outcome.card
        assert verify_card(outcome.card, second.registry_public_key())
        bob = await second.register("bob", public_key())
        assert isinstance(bob, Registered)
        assert await first.list() == await second.list()
        assert len(await first.list()) == 2


async def test_concurrent_registrations_of_one_name_through_two_replicas_give_exactly_one_card(
    dsn,
):
    registry_seed = seed()
    async with replica(dsn, registry_seed) as first, replica(dsn, registry_seed) as second:
        for index in range(20):
            name = f"agent-{index:02d}"
            outcomes = await asyncio.gather(
                first.register(name, public_key()), second.register(name, public_key())
            )
            assert sorted(type(outcome).__name__ for outcome in outcomes) == [
                "NameTaken",
                "Registered",
            ]
            winner = next(outcome for outcome in outcomes if isinstance(outcome, Registered))
            assert await first.lookup_by_name(name) == winner.card
        assert len(await second.list()) == 20


async def test_concurrent_registrations_of_one_key_under_two_names_give_exactly_one_card(dsn):
    registry_seed = seed()
    async with replica(dsn, registry_seed) as first, replica(dsn, registry_seed) as second:
        for index in range(10):
            key = public_key()
            outcomes = await asyncio.gather(
                first.register(f"left-{index}", key), second.register(f"right-{index}", key)
            )
            assert sorted(type(outcome).__name__ for outcome in outcomes) == [
                "KeyAlreadyRegistered",
                "Registered",
            ]
        assert len(await first.list()) == 10


async def test_concurrent_registrations_of_the_same_name_and_key_return_one_card(dsn):
    registry_seed = seed()
    async with replica(dsn, registry_seed) as first, replica(dsn, registry_seed) as second:
        for index in range(10):
            key = public_key()
            outcomes = await asyncio.gather(
                first.register(f"agent-{index}", key), second.register(f"agent-{index}", key)
            )
            assert isinstance(outcomes[0], Registered)
            assert outcomes[0] == outcomes[1]
        assert len(await first.list()) == 10


@pytest.mark.parametrize(
    ("other", "ending", "expected"),
    [
        ("same-name", "COMMIT", NameTaken),
        ("same-key", "COMMIT", KeyAlreadyRegistered),
        ("same-name-and-key", "COMMIT", Registered),
        ("same-name", "ROLLBACK", Registered),
    ],
)
async def test_a_registration_that_meets_another_in_flight_reads_back_what_won(
    dsn, other, ending, expected
):
    """Deterministically the race the unique constraints decide: another replica's insert
    is held open until this registration's own insert waits for it."""
    registry_seed = seed()
    async with replica(dsn, registry_seed) as registry:
        alices_key, bobs_key = public_key(), public_key()
        name, key = {
            "same-name": ("alice", bobs_key),
            "same-key": ("bob", alices_key),
            "same-name-and-key": ("alice", alices_key),
        }[other]
        held = mint_card(
            SigningKey(registry_seed),
            agent_id=RandomId.AGENT.mint(),
            agent_name="alice",
            public_key=alices_key,
            issued_at=utc_now(),
        )
        async with await psycopg.AsyncConnection.connect(dsn) as other_replica:
            await other_replica.execute(
                "INSERT INTO registry_cards (agent_id, agent_name, public_key, signed_card)"
                " VALUES (%s, %s, %s, %s)",
                (agent_id_order_key(held.card.agent_id), "alice", alices_key, encode(held)),
            )
            task = asyncio.create_task(registry.register(name, key))
            try:
                await eventually(
                    lambda: rows(
                        dsn,
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    ),
                    lambda found: found == [(1,)],
                )
                await other_replica.execute(ending)
                outcome: RegisterOutcome = await asyncio.wait_for(task, 10)
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, RegistryUnavailable):
                    await task
        assert isinstance(outcome, expected)
        if other == "same-name-and-key":
            assert outcome == Registered(card=held)
        listed = await registry.list()
        assert len(listed) == 1
        if ending == "ROLLBACK":
            assert isinstance(outcome, Registered)
            assert listed == (outcome.card,)


async def test_replicas_opening_an_empty_database_together_create_the_tables_once(dsn):
    registry_seed = seed()
    opened = await asyncio.gather(
        *(PostgresRegistry.open(dsn, signing_seed=registry_seed, pool_size=1) for _ in range(4))
    )
    try:
        outcome = await opened[0].register("alice", public_key())
        assert isinstance(outcome, Registered)
        assert await opened[3].lookup_by_name("alice") == outcome.card
    finally:
        for registry in opened:
            await registry.close()


async def test_replicas_with_different_keys_opening_an_empty_database_together_leave_one_key(
    dsn,
):
    seeds = [seed(), seed()]
    results = await asyncio.gather(
        *(PostgresRegistry.open(dsn, signing_seed=one, pool_size=1) for one in seeds),
        return_exceptions=True,
    )
    try:
        opened = [result for result in results if isinstance(result, PostgresRegistry)]
        refused = [result for result in results if isinstance(result, RegistryKeyMismatch)]
        assert len(opened) == len(refused) == 1
        assert refused[0].database_key == opened[0].registry_public_key()
    finally:
        for result in results:
            if isinstance(result, PostgresRegistry):
                await result.close()


async def test_a_replica_with_another_signing_key_is_refused_naming_both_public_keys(dsn):
    first_seed, other_seed = seed(), seed()
    async with replica(dsn, first_seed) as registry:
        await registry.register("alice", public_key())
        before = await snapshot(dsn)
        with pytest.raises(RegistryKeyMismatch) as refused:
            await PostgresRegistry.open(dsn, signing_seed=other_seed)
        # The first replica goes on serving.
        assert await registry.lookup_by_name("alice") is not None
    message = str(refused.value)
    assert SigningKey(first_seed).public_key_b64 in message
    assert SigningKey(other_seed).public_key_b64 in message
    for secret in (first_seed, other_seed):
        assert b64(secret) not in message
        assert secret.hex() not in message
    assert refused.value.database_key == SigningKey(first_seed).public_key_b64
    assert refused.value.replica_key == SigningKey(other_seed).public_key_b64
    assert await snapshot(dsn) == before


# --- schema ------------------------------------------------------------------------------


async def test_an_unknown_schema_version_is_refused_and_left_untouched(dsn):
    async with replica(dsn, seed()) as registry:
        await registry.register("alice", public_key())
    await execute(dsn, "UPDATE registry_meta SET value = '99' WHERE key = 'schema_version'")
    before = await snapshot(dsn)
    with pytest.raises(RegistrySchemaError, match=r"schema version 99.*harness-gateway migrate"):
        await PostgresRegistry.open(dsn, signing_seed=seed())
    with pytest.raises(RegistrySchemaError, match="newer"):
        await migrate_registry(dsn)
    assert await snapshot(dsn) == before


async def test_an_unreadable_schema_version_or_half_a_schema_is_refused(dsn):
    await execute(dsn, "CREATE TABLE registry_cards (agent_id BYTEA PRIMARY KEY)")
    with pytest.raises(RegistrySchemaError, match="only one of"):
        await PostgresRegistry.open(dsn, signing_seed=seed())
    await execute(dsn, "CREATE TABLE registry_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    with pytest.raises(RegistrySchemaError, match="no readable schema version"):
        await PostgresRegistry.open(dsn, signing_seed=seed())
    assert await rows(dsn, "SELECT count(*) FROM registry_meta") == [(0,)]


async def test_a_database_of_another_protocol_version_is_refused(dsn):
    async with replica(dsn, seed()):
        pass
    await execute(
        dsn, "UPDATE registry_meta SET value = 'harness/2' WHERE key = 'protocol_version'"
    )
    with pytest.raises(RegistryVersionMismatch, match="harness/2"):
        await PostgresRegistry.open(dsn, signing_seed=seed())


async def test_migrate_creates_the_tables_of_an_empty_database_and_the_first_open_records_the_key(
    dsn,
):
    assert await migrate_registry(dsn) == (None, SCHEMA_VERSION)
    assert await migrate_registry(dsn) == (SCHEMA_VERSION, SCHEMA_VERSION)
    assert dict(await rows(dsn, "SELECT key, value FROM registry_meta")) == {
        "schema_version": "1",
        "protocol_version": "harness/1",
    }
    first_seed = seed()
    async with replica(dsn, first_seed) as registry:
        assert await registry.list() == ()
    with pytest.raises(RegistryKeyMismatch):
        await PostgresRegistry.open(dsn, signing_seed=seed())
    assert await migrate_registry(dsn) == (SCHEMA_VERSION, SCHEMA_VERSION)


async def test_the_registry_tables_live_beside_the_stores_in_one_database(dsn):
    store_tables = (
        "CREATE TABLE harness_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        " INSERT INTO harness_meta VALUES ('schema_version', '7');"
        " CREATE TABLE identities (agent_name TEXT PRIMARY KEY);"
        " CREATE TABLE leases (name TEXT PRIMARY KEY)"
    )
    await execute(dsn, store_tables)
    async with replica(dsn, seed()) as registry:
        assert isinstance(await registry.register("alice", public_key()), Registered)
    assert await migrate_registry(dsn) == (SCHEMA_VERSION, SCHEMA_VERSION)
    tables = [
        name
        for (name,) in await rows(
            dsn, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
        )
    ]
    assert tables == [
        "harness_meta",
        "identities",
        "leases",
        "registry_cards",
        "registry_meta",
    ]
    assert await rows(dsn, "SELECT key, value FROM harness_meta") == [("schema_version", "7")]


# --- failures ----------------------------------------------------------------------------


async def test_an_unreachable_database_is_unavailable_and_its_password_is_never_shown(
    postgres_server, caplog
):
    caplog.set_level(logging.DEBUG)
    closed_port = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{free_port()}/registry"
    missing_database = with_password(postgres_server.dsn("no_such_database"))
    for target in (closed_port, missing_database):
        with pytest.raises(RegistryUnavailable, match="cannot open") as failed:
            await PostgresRegistry.open(target, signing_seed=seed(), connect_timeout=2)
        assert PASSWORD not in str(failed.value)
        assert PASSWORD not in str(failed.value.__cause__)
        with pytest.raises(RegistryUnavailable, match="cannot migrate") as failed:
            await migrate_registry(target, connect_timeout=2)
        assert PASSWORD not in str(failed.value)
    assert "no_such_database" in str(failed.value)
    assert PASSWORD not in caplog.text


async def test_a_malformed_dsn_or_seed_is_refused_without_quoting_the_dsn():
    with pytest.raises(ValueError, match="not a valid PostgreSQL connection string") as refused:
        await PostgresRegistry.open(f"host=x password {PASSWORD}", signing_seed=seed())
    assert PASSWORD not in str(refused.value)
    with pytest.raises(ValueError, match="32 bytes"):
        await PostgresRegistry.open("postgresql://x/y", signing_seed=b"short")


async def test_an_outage_makes_calls_unavailable_and_they_recover_when_the_server_is_back(
    postgres_server, dsn, caplog
):
    caplog.set_level(logging.DEBUG)
    async with replica(with_password(dsn), seed(), operation_timeout=1.0) as registry:
        outcome = await registry.register("alice", public_key())
        assert isinstance(outcome, Registered)
        postgres_server.stop()
        try:
            with pytest.raises(RegistryUnavailable) as failed:
                await registry.lookup_by_name("alice")
            assert PASSWORD not in str(failed.value)
            with pytest.raises(RegistryUnavailable):
                await registry.register("bob", public_key())
        finally:
            postgres_server.start_again()

        async def found() -> object:
            try:
                return await registry.lookup_by_name("alice")
            except RegistryUnavailable:
                return None

        assert await eventually(found, within=30, interval=0.2) == outcome.card
        assert isinstance(await registry.register("bob", public_key()), Registered)
    assert PASSWORD not in caplog.text


async def test_a_server_restart_between_calls_is_not_seen_by_the_next_call(postgres_server, dsn):
    async with replica(dsn, seed()) as registry:
        alice = await registry.register("alice", public_key())
        assert isinstance(alice, Registered)
        # Every pooled connection dies with the server; the next calls get fresh ones.
        postgres_server.stop()
        postgres_server.start_again()
        assert isinstance(await registry.register("bob", public_key()), Registered)
        postgres_server.stop()
        postgres_server.start_again()
        assert await registry.lookup_by_name("alice") == alice.card


async def test_a_corrupt_stored_card_is_reported_as_unavailable(dsn):
    async with replica(dsn, seed()) as registry:
        await registry.register("alice", public_key())
        await execute(dsn, "UPDATE registry_cards SET signed_card = '\\x7b7d'::bytea")
        with pytest.raises(RegistryUnavailable, match="undecodable"):
            await registry.lookup_by_name("alice")


async def test_a_closed_registry_refuses_calls_and_closing_twice_is_fine(dsn):
    registry = await PostgresRegistry.open(dsn, signing_seed=seed(), pool_size=1)
    assert registry.state is RegistryState.OPEN
    await registry.close()
    await registry.close()
    state: RegistryState = registry.state
    assert state is RegistryState.CLOSED
    with pytest.raises(RegistryUnavailable, match="closed"):
        await registry.lookup_by_name("alice")


# --- the signing key file ----------------------------------------------------------------


def test_a_signing_key_file_is_created_owner_only_once_and_read_back(tmp_path: Path):
    path = tmp_path / "registry-key"
    created_seed, created = ensure_signing_seed(path)
    assert created
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert ensure_signing_seed(path) == (created_seed, False)
    assert read_signing_seed(path) == created_seed
    assert len(created_seed) == 32
    assert path.read_text().strip() == b64(created_seed)


@pytest.mark.parametrize(
    ("content", "mode", "message"),
    [
        (b64(bytes(32)), 0o644, "readable or writable by others"),
        (b64(bytes(31)) + "AAAA", 0o600, "32-byte seed"),
        ("short", 0o600, "at least"),
    ],
)
def test_a_signing_key_file_open_to_others_or_not_a_seed_is_refused(
    tmp_path: Path, content, mode, message
):
    path = tmp_path / "registry-key"
    path.write_text(content + "\n")
    path.chmod(mode)
    with pytest.raises(SecretFileError, match=message) as refused:
        read_signing_seed(path)
    assert content not in str(refused.value)

"""`SqliteRegistry`: the in-process Registry persisted in its own SQLite file.

One dedicated thread owns the connection (plain `sqlite3`, WAL, `synchronous=FULL`); every
call runs there through `run_in_executor`, so the event loop never blocks on disk. The
Registry's signing seed is stored in the database on first open and read back afterwards,
so cards stay verifiable across restarts. AgentIds are stored as their 16 bytes, so
SQLite's `memcmp` order of BLOBs is the AgentId byte order `list` needs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final, Self, TypeVar

from harness_contract.ids import RandomId, agent_id_order_key

from gateway.identity.cards import SignedAgentCard
from gateway.identity.keys import SEED_SIZE, SigningKey
from gateway.identity.objects import VERSION, ProtocolError, encode
from gateway.registry._backend import CardMinter, DatabaseRegistry, RegistryState, existing_outcome
from gateway.registry._cards import CardIssuer, decode_stored_card, utc_now
from gateway.registry.port import AgentIdMinter, Registered, RegisterOutcome, RegistryUnavailable

logger = logging.getLogger(__name__)

SCHEMA_VERSION: Final = "1"
"""The layout this code reads and writes; another value fails closed, untouched."""

FILE_MODE: Final = 0o600
"""Permissions of a new database file: it holds the Registry's private seed."""

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS cards ("
    " agent_id BLOB PRIMARY KEY,"
    " agent_name TEXT NOT NULL UNIQUE,"
    " public_key TEXT NOT NULL UNIQUE,"
    " card BLOB NOT NULL)",
)

_T = TypeVar("_T")

# `RegistryState` lives with the parts every backend shares; it is named here too, where
# it was first defined.
__all__ = ["FILE_MODE", "SCHEMA_VERSION", "RegistryState", "SqliteRegistry"]


class SqliteRegistry(DatabaseRegistry):
    """A `RegistryPort` in one SQLite file. Create it with `await SqliteRegistry.open(path)`."""

    def __init__(
        self,
        *,
        connection: sqlite3.Connection,
        executor: ThreadPoolExecutor,
        issuer: CardIssuer,
    ) -> None:
        """Use `open`; this only wires what it prepared."""
        super().__init__(issuer)
        self._connection = connection
        self._executor = executor

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        signing_seed: bytes | None = None,
        *,
        clock: Callable[[], dt.datetime] = utc_now,
        mint_agent_id: AgentIdMinter = RandomId.AGENT.mint,
    ) -> Self:
        """Open (creating if needed) the Registry database at `path`.

        On first open the Registry key is `signing_seed`, or a fresh one, and is stored;
        later opens read it back. Raises `ValueError` when `signing_seed` differs from the
        stored seed, and `RegistryUnavailable` when the file cannot be opened or has an
        unknown schema.
        """
        if signing_seed is not None and len(signing_seed) != SEED_SIZE:
            raise ValueError("a Registry signing seed is exactly 32 bytes")
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-registry")
        loop = asyncio.get_running_loop()
        try:
            connection, seed = await loop.run_in_executor(
                executor, _open_database, os.fspath(path), signing_seed
            )
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(
            connection=connection,
            executor=executor,
            issuer=CardIssuer(
                signing_key=SigningKey(seed), clock=clock, mint_agent_id=mint_agent_id
            ),
        )

    async def _close_database(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._connection.close)
        finally:
            self._executor.shutdown(wait=True)

    async def _register(
        self, agent_name: str, public_key: str, mint: CardMinter
    ) -> RegisterOutcome:
        return await self._run(lambda db: _register(db, agent_name, public_key, mint))

    async def _card_by_id(self, agent_id: bytes) -> SignedAgentCard | None:
        return await self._run(
            lambda db: _card_where(db, "SELECT card FROM cards WHERE agent_id = ?", agent_id)
        )

    async def _card_by_name(self, agent_name: str) -> SignedAgentCard | None:
        return await self._run(
            lambda db: _card_where(db, "SELECT card FROM cards WHERE agent_name = ?", agent_name)
        )

    async def _cards_after(self, bound: bytes, limit: int) -> tuple[SignedAgentCard, ...]:
        def read(db: sqlite3.Connection) -> tuple[SignedAgentCard, ...]:
            # `> x''` admits every AgentId when there is no bound.
            rows = db.execute(
                "SELECT card FROM cards WHERE agent_id > ? ORDER BY agent_id LIMIT ?",
                (bound, limit),
            ).fetchall()
            return tuple(decode_stored_card(row[0]) for row in rows)

        return await self._run(read)

    async def _run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        self._check_open()
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, work, self._connection)
        except sqlite3.Error as error:
            logger.warning("registry store failed error=%s", type(error).__name__)
            raise RegistryUnavailable(f"the registry store failed: {error}") from error
        except ProtocolError as error:
            logger.error("registry store holds an undecodable card detail=%s", error.detail)
            raise RegistryUnavailable("the registry store holds an undecodable card") from error


def _open_database(path: str, signing_seed: bytes | None) -> tuple[sqlite3.Connection, bytes]:
    # Create the file owner-only before SQLite does: it will hold the private seed.
    try:
        if not os.path.exists(path):
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, FILE_MODE))
        connection = sqlite3.connect(path, isolation_level=None)
    except (OSError, sqlite3.Error) as error:
        raise RegistryUnavailable(f"cannot open the registry database: {error}") from error
    try:
        seed = _prepare(connection, signing_seed)
    except BaseException:
        connection.close()
        raise
    return connection, seed


def _prepare(connection: sqlite3.Connection, signing_seed: bytes | None) -> bytes:
    try:
        mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise RegistryUnavailable(f"the registry database cannot use WAL (mode {mode})")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA:
                connection.execute(statement)
            meta = dict(connection.execute("SELECT key, value FROM meta").fetchall())
            if not meta:
                seed = signing_seed if signing_seed is not None else SigningKey.generate().seed
                connection.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [
                        ("schema_version", SCHEMA_VERSION),
                        ("harness_version", VERSION),
                        ("signing_seed", seed),
                    ],
                )
            else:
                seed = _check_meta(meta, signing_seed)
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
    except sqlite3.Error as error:
        raise RegistryUnavailable(f"cannot open the registry database: {error}") from error
    return seed


def _check_meta(meta: dict[str, object], signing_seed: bytes | None) -> bytes:
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise RegistryUnavailable("the registry database has an unknown schema version")
    if meta.get("harness_version") != VERSION:
        raise RegistryUnavailable("the registry database belongs to another harness version")
    seed = meta.get("signing_seed")
    if not isinstance(seed, bytes) or len(seed) != SEED_SIZE:
        raise RegistryUnavailable("the registry database holds no valid signing seed")
    if signing_seed is not None and signing_seed != seed:
        raise ValueError("the registry database was created with another signing key")
    return seed


def _card_where(db: sqlite3.Connection, query: str, value: object) -> SignedAgentCard | None:
    row = db.execute(query, (value,)).fetchone()
    return None if row is None else decode_stored_card(row[0])


def _register(
    db: sqlite3.Connection,
    agent_name: str,
    public_key: str,
    mint: Callable[[], SignedAgentCard],
) -> RegisterOutcome:
    db.execute("BEGIN IMMEDIATE")
    try:
        outcome = _register_in_transaction(db, agent_name, public_key, mint)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return outcome


def _register_in_transaction(
    db: sqlite3.Connection,
    agent_name: str,
    public_key: str,
    mint: Callable[[], SignedAgentCard],
) -> RegisterOutcome:
    key_holder = db.execute(
        "SELECT agent_name, card FROM cards WHERE public_key = ?", (public_key,)
    ).fetchone()
    name_held = (
        key_holder is None
        and db.execute("SELECT 1 FROM cards WHERE agent_name = ?", (agent_name,)).fetchone()
        is not None
    )
    existing = existing_outcome(agent_name, key_holder, name_held=name_held)
    if existing is not None:
        return existing
    card = mint()
    db.execute(
        "INSERT INTO cards (agent_id, agent_name, public_key, card) VALUES (?, ?, ?, ?)",
        (agent_id_order_key(card.card.agent_id), agent_name, public_key, encode(card)),
    )
    return Registered(card=card)

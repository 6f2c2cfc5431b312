"""`PostgresRegistry`: the Registry's cards in PostgreSQL, shared by replicas (engine.md §3).

Several `harness-gateway registry` replicas may serve one database. They must all sign with
one key, so the Registry's seed is not in the database (as it is in `SqliteRegistry`): every
replica reads it from the same key file (`read_signing_seed`) and passes it to `open`. The
database records only the public key, on the first open; a replica opening with another key
is refused (`RegistryKeyMismatch`), since two keys would split the network into daemons that
trust one Registry's cards and not the other's.

Callers may rely on:

- the same answers as `SqliteRegistry` (one contract suite runs against both): the key is
  checked before the name, the same name and key again returns the existing card, `list`
  pages in AgentId byte order (AgentIds are stored as their 16 bytes, and PostgreSQL
  compares `bytea` byte by byte);
- exact registration across replicas: the unique constraints on name and key decide a race,
  and the loser reads back what won, in the same transaction: two replicas registering one
  name at once give one `Registered` and one `NameTaken`;
- tables that coexist with the store's in one database: every name starts `registry_`;
- an empty database gets the tables under a transaction-level advisory lock, so replicas
  starting together create them once; a database of another schema version is refused with
  nothing written (`RegistrySchemaError`), and `migrate_registry` is what `harness-gateway
  migrate` runs;
- a database that cannot be reached makes a call raise `RegistryUnavailable` within
  `operation_timeout` seconds, never hang or crash; the pool reconnects when the server is
  back;
- no error or log of this module holds the DSN's password.

This module imports psycopg, so `gateway.registry` does not import it: callers that use
PostgreSQL import `gateway.registry.postgres` themselves.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final, Self, TypeAlias, TypeVar

import psycopg
from harness_contract.ids import RandomId, agent_id_order_key, unb64
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from gateway.identity.cards import SignedAgentCard
from gateway.identity.keys import SEED_SIZE, SigningKey
from gateway.identity.objects import VERSION, ProtocolError, encode
from gateway.registry._backend import CardMinter, DatabaseRegistry, existing_outcome
from gateway.registry._cards import CardIssuer, decode_stored_card, utc_now
from gateway.registry.port import (
    AgentIdMinter,
    Registered,
    RegisterOutcome,
    RegistryError,
    RegistryUnavailable,
    RegistryVersionMismatch,
)
from gateway.secret_file import SecretFileError, ensure_secret, read_secret

logger = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 1
"""The layout of the `registry_*` tables this code reads and writes; another fails closed."""

POOL_SIZE: Final = 4
"""Connections each replica keeps open (a fixed pool).

Lookups are single indexed reads of about a millisecond, so a few connections serve the
resolution traffic of many daemons; each replica's connections count against the server's
`max_connections`."""

CONNECT_TIMEOUT: Final = 5.0
"""Seconds to establish one connection (libpq's `connect_timeout`, at least 2) and to fill
the pool at open."""

OPERATION_TIMEOUT: Final = 5.0
"""Seconds one Registry call may take, waiting for a connection included, before it raises
`RegistryUnavailable`: below `RegistryClient`'s 10-s deadline, so a remote caller gets the
typed failure rather than its own deadline."""

RECONNECT_TIMEOUT: Final = 10.0
"""Seconds the pool keeps retrying one lost connection (with backoff from 1 s) before it
starts afresh on the next call. Short, so a server that comes back after a long outage is
used within seconds rather than after a doubled delay of minutes."""

CLOSE_TIMEOUT: Final = 5.0
"""Seconds `close` lets the pool's connections finish before they are cut."""

SCHEMA_LOCK: Final = int.from_bytes(b"harn-reg", "big")
"""Transaction-level advisory lock (a bigint) that serialises schema creation and the
recording of the Registry key, so replicas starting together neither race nor both write."""

APPLICATION_NAME: Final = "harness-registry"
"""`application_name` of the connections (in `pg_stat_activity`), unless the DSN sets one."""

CONNECTION_DEFAULTS: Final[Mapping[str, str]] = {
    "application_name": APPLICATION_NAME,
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
}
"""libpq parameters applied where the DSN sets none: TCP keepalives (seconds, probes) find a
server that vanished without closing its sockets in about 25 s, so idle pooled connections to
it are dropped instead of hanging the next call."""

_SCHEMA: Final = (
    "CREATE TABLE registry_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # agent_id: the AgentId's 16 bytes, so `ORDER BY agent_id` is AgentId byte order.
    # agent_name: COLLATE "C" compares names byte for byte, whatever the database's locale.
    # seq: registration order, for operators reading the table; `list` never uses it.
    "CREATE TABLE registry_cards ("
    " agent_id BYTEA PRIMARY KEY CHECK (octet_length(agent_id) = 16),"
    ' agent_name TEXT COLLATE "C" NOT NULL UNIQUE,'
    " public_key TEXT NOT NULL UNIQUE,"
    " signed_card BYTEA NOT NULL,"
    " registered_at TIMESTAMPTZ NOT NULL DEFAULT now(),"
    " seq BIGSERIAL NOT NULL)",
)

_META_SCHEMA_VERSION: Final = "schema_version"
_META_PROTOCOL_VERSION: Final = "protocol_version"
_META_PUBLIC_KEY: Final = "registry_public_key"

_T = TypeVar("_T")

Connection: TypeAlias = psycopg.AsyncConnection[TupleRow]
Work: TypeAlias = Callable[[Connection], Awaitable[_T]]


class RegistrySchemaError(RegistryError):
    """The database holds `registry_*` tables of a layout this code does not read (another
    schema version, or half of the tables). Nothing was written; `harness-gateway migrate`
    (of the release that matches the version) brings the database to this code's layout."""


class RegistryKeyMismatch(RegistryError):
    """The database's cards are signed by another Registry key than this replica's.

    `database_key` and `replica_key` are `b64` public keys (public; never a seed)."""

    def __init__(self, *, database_key: str, replica_key: str) -> None:
        super().__init__(
            f"the registry database's cards are signed by registry key {database_key}, but "
            f"this replica's signing key is {replica_key}: every replica must use the one "
            "signing key file the database was first opened with"
        )
        self.database_key = database_key
        self.replica_key = replica_key


class PostgresRegistry(DatabaseRegistry):
    """A `RegistryPort` in PostgreSQL. Create it with `await PostgresRegistry.open(dsn, ...)`."""

    def __init__(
        self,
        *,
        pool: AsyncConnectionPool[Connection],
        issuer: CardIssuer,
        target: str,
        operation_timeout: float,
    ) -> None:
        """Use `open`; this only wires what it prepared."""
        super().__init__(issuer)
        self._pool = pool
        self._target = target
        self._operation_timeout = operation_timeout

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        signing_seed: bytes,
        pool_size: int = POOL_SIZE,
        connect_timeout: float = CONNECT_TIMEOUT,
        operation_timeout: float = OPERATION_TIMEOUT,
        clock: Callable[[], dt.datetime] = utc_now,
        mint_agent_id: AgentIdMinter = RandomId.AGENT.mint,
    ) -> Self:
        """Open the Registry in the database `dsn` (a libpq URI or key=value string).

        An empty database gets the tables; the first open records `signing_seed`'s public
        key, and later opens must bring the same seed. Raises `ValueError` for a seed that
        is not 32 bytes, a malformed DSN or a bad size or timeout; `RegistryUnavailable`
        when the database cannot be reached; `RegistrySchemaError` for tables of another
        layout; `RegistryVersionMismatch` for a database of another harness version;
        `RegistryKeyMismatch` when the database records another key. Connection parameters
        in the DSN win over `connect_timeout` and `CONNECTION_DEFAULTS`.
        """
        if not isinstance(signing_seed, bytes) or len(signing_seed) != SEED_SIZE:
            raise ValueError("a Registry signing seed is exactly 32 bytes")
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        if not connect_timeout > 0 or not operation_timeout > 0:
            raise ValueError("timeouts must be positive")
        key = SigningKey(signing_seed)
        conninfo, target, password = _conninfo(dsn, connect_timeout)
        try:
            async with asyncio.timeout(connect_timeout + operation_timeout):
                connection = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
                async with connection:
                    await _prepare(connection, key.public_key_b64, target)
        except TimeoutError:
            raise RegistryUnavailable(
                f"cannot open the registry database {target}: no answer in "
                f"{connect_timeout + operation_timeout:g} s"
            ) from None
        except psycopg.Error as error:
            raise RegistryUnavailable(
                f"cannot open the registry database {target}: {_redact(error, password)}"
            ) from error
        pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
            conninfo,
            kwargs={"autocommit": True},
            min_size=pool_size,
            max_size=pool_size,
            open=False,
            name=APPLICATION_NAME,
            timeout=operation_timeout,
            reconnect_timeout=RECONNECT_TIMEOUT,
        )
        try:
            await pool.open(wait=True, timeout=connect_timeout)
        except BaseException as error:
            await pool.close(timeout=CLOSE_TIMEOUT)
            if isinstance(error, psycopg.Error):
                raise RegistryUnavailable(
                    f"cannot open the registry database {target}: the connection pool did "
                    f"not fill in {connect_timeout:g} s"
                ) from error
            raise
        logger.info("registry database opened target=%s pool_size=%d", target, pool_size)
        return cls(
            pool=pool,
            issuer=CardIssuer(signing_key=key, clock=clock, mint_agent_id=mint_agent_id),
            target=target,
            operation_timeout=operation_timeout,
        )

    async def _close_database(self) -> None:
        await self._pool.close(timeout=CLOSE_TIMEOUT)

    async def _register(
        self, agent_name: str, public_key: str, mint: CardMinter
    ) -> RegisterOutcome:
        return await self._run(lambda db: _register(db, agent_name, public_key, mint))

    async def _card_by_id(self, agent_id: bytes) -> SignedAgentCard | None:
        return await self._run(
            lambda db: _card_where(
                db, "SELECT signed_card FROM registry_cards WHERE agent_id = %s", agent_id
            )
        )

    async def _card_by_name(self, agent_name: str) -> SignedAgentCard | None:
        return await self._run(
            lambda db: _card_where(
                db, "SELECT signed_card FROM registry_cards WHERE agent_name = %s", agent_name
            )
        )

    async def _cards_after(self, bound: bytes, limit: int) -> tuple[SignedAgentCard, ...]:
        async def read(db: Connection) -> tuple[SignedAgentCard, ...]:
            # `> ''::bytea` admits every AgentId when there is no bound.
            cursor = await db.execute(
                "SELECT signed_card FROM registry_cards WHERE agent_id > %s"
                " ORDER BY agent_id LIMIT %s",
                (bound, limit),
            )
            return tuple(decode_stored_card(row[0]) for row in await cursor.fetchall())

        return await self._run(read)

    async def _run(self, work: Work[_T]) -> _T:
        self._check_open()
        try:
            async with asyncio.timeout(self._operation_timeout):
                return await self._attempt(work)
        except TimeoutError:
            logger.warning(
                "registry database timed out target=%s seconds=%g",
                self._target,
                self._operation_timeout,
            )
            raise RegistryUnavailable(
                f"the registry database {self._target} did not answer in "
                f"{self._operation_timeout:g} s"
            ) from None
        except psycopg.Error as error:
            logger.warning(
                "registry database failed target=%s error=%s", self._target, type(error).__name__
            )
            raise RegistryUnavailable(
                f"the registry database {self._target} failed: {type(error).__name__}"
            ) from error
        except ProtocolError as error:
            logger.error("registry database holds an undecodable card detail=%s", error.detail)
            raise RegistryUnavailable("the registry database holds an undecodable card") from error

    async def _attempt(self, work: Work[_T]) -> _T:
        """`work` on a pooled connection, again on another when the first proves broken.

        A connection breaks when the server restarted since it was last used, and then every
        idle one may share its fate: each fails at once and the pool replaces it, so up to
        one more try than the pool holds lets a fresh connection answer. Every call is safe
        to repeat: lookups read, and a registration that committed before its connection
        broke is found by the repeat as the same name and key."""
        retries = self._pool.max_size
        for retry in range(retries + 1):
            async with self._pool.connection() as connection:
                try:
                    return await work(connection)
                except psycopg.OperationalError:
                    if retry == retries or not connection.broken:
                        raise
            # Leaving the block returned the broken connection, which the pool replaces.
            logger.info("registry database connection was broken, retrying target=%s", self._target)
        raise AssertionError("unreachable: the last try returns or raises")


# --- schema and meta --------------------------------------------------------------------


async def _prepare(connection: Connection, public_key: str, target: str) -> None:
    """Create the tables in an empty database, check them otherwise, and record or check
    the Registry key: one transaction under `SCHEMA_LOCK`, so a refusal writes nothing."""
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        version = await _schema_version(connection, target)
        if version is None:
            await _create_schema(connection)
            logger.info("registry database schema created target=%s", target)
        elif version != SCHEMA_VERSION:
            raise RegistrySchemaError(
                f"the registry database {target} has schema version {version}; this "
                f"harness-gateway reads version {SCHEMA_VERSION}: run `harness-gateway "
                "migrate` (a newer version needs a newer harness-gateway); nothing was changed"
            )
        cursor = await connection.execute("SELECT key, value FROM registry_meta")
        meta: dict[str, str] = {str(key): str(value) for key, value in await cursor.fetchall()}
        protocol = meta.get(_META_PROTOCOL_VERSION)
        if protocol != VERSION:
            raise RegistryVersionMismatch(
                f"the registry database {target} belongs to protocol version {protocol!r}, "
                f"not {VERSION!r}"
            )
        recorded = meta.get(_META_PUBLIC_KEY)
        if recorded is None:
            await connection.execute(
                "INSERT INTO registry_meta (key, value) VALUES (%s, %s)",
                (_META_PUBLIC_KEY, public_key),
            )
            logger.info(
                "registry key recorded target=%s registry_public_key=%s", target, public_key
            )
        elif recorded != public_key:
            raise RegistryKeyMismatch(database_key=recorded, replica_key=public_key)


async def _schema_version(connection: Connection, target: str) -> int | None:
    """The recorded schema version, None for a database without registry tables."""
    cursor = await connection.execute(
        "SELECT to_regclass('registry_meta') IS NOT NULL, to_regclass('registry_cards') IS NOT NULL"
    )
    row = await cursor.fetchone()
    assert row is not None
    has_meta, has_cards = bool(row[0]), bool(row[1])
    if not has_meta and not has_cards:
        return None
    if not has_meta or not has_cards:
        raise RegistrySchemaError(
            f"the registry database {target} has only one of registry_meta and "
            "registry_cards: not a layout this harness-gateway knows; nothing was changed"
        )
    cursor = await connection.execute(
        "SELECT value FROM registry_meta WHERE key = %s", (_META_SCHEMA_VERSION,)
    )
    found = await cursor.fetchone()
    text = None if found is None else str(found[0])
    if text is None or not text.isdecimal():
        raise RegistrySchemaError(
            f"the registry database {target} records no readable schema version "
            f"({text!r}): run `harness-gateway migrate`; nothing was changed"
        )
    return int(text)


async def _create_schema(connection: Connection) -> None:
    for statement in _SCHEMA:
        await connection.execute(statement)
    await connection.execute(
        "INSERT INTO registry_meta (key, value) VALUES (%s, %s), (%s, %s)",
        (_META_SCHEMA_VERSION, str(SCHEMA_VERSION), _META_PROTOCOL_VERSION, VERSION),
    )


async def migrate_registry(
    dsn: str, *, connect_timeout: float = CONNECT_TIMEOUT
) -> tuple[int | None, int]:
    """Bring the database's `registry_*` tables to `SCHEMA_VERSION`, for `harness-gateway
    migrate`. Returns (the version found, None for none; the version now).

    An empty database gets the tables (the Registry key is recorded by the first `open`).
    Version 1 is the first layout, so there is nothing older to migrate yet; a newer or
    unreadable version raises `RegistrySchemaError` with nothing changed. Raises
    `RegistryUnavailable` when the database cannot be reached, `ValueError` for a
    malformed DSN.
    """
    conninfo, target, password = _conninfo(dsn, connect_timeout)
    try:
        async with asyncio.timeout(connect_timeout + OPERATION_TIMEOUT):
            connection = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
            async with connection, connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                found = await _schema_version(connection, target)
                if found is None:
                    await _create_schema(connection)
                    logger.warning(
                        "registry database schema created target=%s schema_version=%d",
                        target,
                        SCHEMA_VERSION,
                    )
                elif found != SCHEMA_VERSION:
                    raise RegistrySchemaError(
                        f"the registry database {target} has schema version {found}, newer "
                        f"than this harness-gateway's {SCHEMA_VERSION}: migrate with the "
                        "release that wrote it; nothing was changed"
                    )
    except TimeoutError:
        raise RegistryUnavailable(
            f"cannot migrate the registry database {target}: no answer in "
            f"{connect_timeout + OPERATION_TIMEOUT:g} s"
        ) from None
    except psycopg.Error as error:
        raise RegistryUnavailable(
            f"cannot migrate the registry database {target}: {_redact(error, password)}"
        ) from error
    return found, SCHEMA_VERSION


async def registry_schema_version(
    dsn: str, *, connect_timeout: float = CONNECT_TIMEOUT
) -> int | None:
    """The `registry_*` tables' schema version at `dsn`, None for none, changing nothing
    (`harness-gateway migrate --registry --check`). Raises as `migrate_registry`."""
    conninfo, target, password = _conninfo(dsn, connect_timeout)
    try:
        async with asyncio.timeout(connect_timeout + OPERATION_TIMEOUT):
            connection = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
            async with connection:
                return await _schema_version(connection, target)
    except TimeoutError:
        raise RegistryUnavailable(
            f"cannot read the registry database {target}: no answer in "
            f"{connect_timeout + OPERATION_TIMEOUT:g} s"
        ) from None
    except psycopg.Error as error:
        raise RegistryUnavailable(
            f"cannot read the registry database {target}: {_redact(error, password)}"
        ) from error


# --- cards -------------------------------------------------------------------------------


async def _card_where(db: Connection, query: str, value: object) -> SignedAgentCard | None:
    cursor = await db.execute(query, (value,))
    row = await cursor.fetchone()
    return None if row is None else decode_stored_card(row[0])


async def _register(
    db: Connection,
    agent_name: str,
    public_key: str,
    mint: Callable[[], SignedAgentCard],
) -> RegisterOutcome:
    async with db.transaction():
        existing = await _existing(db, agent_name, public_key)
        if existing is not None:
            return existing
        card = mint()
        # Another replica may be inserting the same name or key right now. The unique
        # constraints decide: the INSERT waits for that transaction, then inserts nothing
        # if it committed, and the read below (a new snapshot, READ COMMITTED) sees the winner.
        cursor = await db.execute(
            "INSERT INTO registry_cards (agent_id, agent_name, public_key, signed_card)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING seq",
            (agent_id_order_key(card.card.agent_id), agent_name, public_key, encode(card)),
        )
        if await cursor.fetchone() is not None:
            return Registered(card=card)
        existing = await _existing(db, agent_name, public_key)
        if existing is not None:
            return existing
        raise ValueError("the AgentId minter repeated an id")


async def _existing(db: Connection, agent_name: str, public_key: str) -> RegisterOutcome | None:
    """What an existing card answers for this registration, None when none stands in its way.

    One read finds both the key's card and the name's; a row that is not the key's holds
    the name."""
    cursor = await db.execute(
        "SELECT agent_name, public_key, signed_card FROM registry_cards"
        " WHERE public_key = %s OR agent_name = %s",
        (public_key, agent_name),
    )
    rows = await cursor.fetchall()
    key_holder = next(((name, card) for name, key, card in rows if key == public_key), None)
    return existing_outcome(agent_name, key_holder, name_held=bool(rows))


# --- DSN and key file --------------------------------------------------------------------


def _conninfo(dsn: str, connect_timeout: float) -> tuple[str, str, str]:
    """(the conninfo to connect with, a password-free description, the password or "")."""
    try:
        params: dict[str, Any] = conninfo_to_dict(dsn)
    except psycopg.Error:
        # libpq's parse errors quote pieces of the string, which may be the password.
        raise ValueError("the registry DSN is not a valid PostgreSQL connection string") from None
    password = str(params.get("password") or "")
    target = (
        f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"
        f"/{params.get('dbname') or params.get('user') or ''}"
    )
    defaults = dict(CONNECTION_DEFAULTS)
    defaults["connect_timeout"] = str(max(2, math.ceil(connect_timeout)))
    extra = {name: value for name, value in defaults.items() if name not in params}
    return make_conninfo(dsn, **extra), target, password


def _redact(error: BaseException, password: str) -> str:
    text = " ".join(str(error).split())
    return text.replace(password, "***") if password else text


def read_signing_seed(path: Path) -> bytes:
    """The Registry's 32-byte seed from its key file: one line, `b64` of the seed.

    The file is checked as token files are (`gateway.secret_file`: owner-only, or root-owned
    and group-readable); raises `SecretFileError` (a `ValueError`) naming the file, never
    its content."""
    text = read_secret(path, what="registry signing key")
    seed = unb64(text)
    if seed is None or len(seed) != SEED_SIZE:
        raise SecretFileError(
            f"the registry signing key file {path} must hold b64 of a {SEED_SIZE}-byte seed"
        )
    return seed


def ensure_signing_seed(path: Path) -> tuple[bytes, bool]:
    """`read_signing_seed`, creating the file (a fresh seed, mode 0600) when it is missing.
    Returns the seed and whether this call created the file.

    Only for a first replica: others must be given this file, never make their own."""
    # `token_urlsafe(32)` with no prefix is exactly `b64` of 32 random bytes.
    _, created = ensure_secret(path, what="registry signing key", prefix="")
    return read_signing_seed(path), created

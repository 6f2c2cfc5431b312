"""Connecting to PostgreSQL: DSN checks and redaction, connection options, error kinds.

Every connection the store opens goes through `ConnectSettings.connect`: autocommit (the
store writes its own BEGIN and COMMIT), a bounded connect timeout, TCP keepalives (so a
silently dead peer is noticed while idle) and an `application_name` naming the role and the
owner (`harness-lease:<owner>`, `harness-writer:<owner>`, `harness-reader:<owner>`), which
is how an operator (and the tests) find a store's sessions in `pg_stat_activity`.

A DSN's password never reaches a log line or an error message: `redact_dsn` is the one way
to show a DSN, and errors raised here carry the redacted form only.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import dataclass
from typing import Any, Final, TypeAlias
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import conninfo as pg_conninfo

from gateway.store.errors import StoreDsnInvalid, StoreUnavailable

Connection: TypeAlias = psycopg.AsyncConnection[tuple[Any, ...]]
"""An async psycopg connection with tuple rows, as every part of the store uses it."""

CONNECT_TIMEOUT: Final = 3.0
"""Seconds one connection attempt may take before it fails (libpq `connect_timeout`,
bounded again on our side).

Short, because an outage must fail writes quickly (`persistence-failed`) rather than hold
them: the writer tries again at its next group, so service resumes when the server does."""

KEEPALIVE_OPTIONS: Final = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
}
"""libpq TCP keepalive options (seconds, probes) unless the DSN sets its own.

An idle lease connection issues no query, so only keepalives notice a peer that vanished
without closing the socket: within about 10 + 5 × 3 = 25 s."""

WRITER_ROLE: Final = "writer"
"""The write connection's role: its `application_name` is `harness-writer:<owner>`."""

APPLICATION_NAME_BYTES: Final = 63
"""PostgreSQL keeps at most NAMEDATALEN - 1 bytes of `application_name`."""

_URL_SCHEMES: Final = ("postgresql://", "postgres://")
_KEY_VALUE_PASSWORD: Final = re.compile(
    r"""password\s*=\s*('(?:[^'\\]|\\.)*'|\S*)""", re.IGNORECASE
)
_URL_PASSWORD: Final = re.compile(r"(://[^/?#@:]*):[^/?#@]*@")

_CONNECTION_CLASSES: Final = frozenset({"08", "57"})
"""SQLSTATE classes of a lost or refused connection (connection exception, operator
intervention: admin shutdown, crash shutdown, cannot connect now)."""

_CORRUPTION_STATES: Final = frozenset({"XX001", "XX002"})
"""SQLSTATEs that mean the server's data is damaged (data_corrupted, index_corrupted)."""


def redact_dsn(dsn: str) -> str:
    """`dsn` without its password, for logs and messages: the URL form keeps its user,
    hosts, database and options (`postgresql://user@host:5432/db`), the key=value form
    loses its `password=` pair."""
    if dsn.lower().startswith(_URL_SCHEMES):
        try:
            parts = urlsplit(dsn)
        except ValueError:
            return _URL_PASSWORD.sub(r"\1@", dsn)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hosts = netloc.rpartition("@")
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}@{hosts}" if user else hosts
        query = "&".join(
            pair
            for pair in parts.query.split("&")
            if pair and not pair.lower().startswith("password=")
        )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    return " ".join(_KEY_VALUE_PASSWORD.sub("", dsn).split())


def _scrub(text: str, dsn: str, password: str | None) -> str:
    """`text` (a libpq message about `dsn`) with anything that may be the password hidden."""
    candidates = {password} if password else set()
    match = _URL_PASSWORD.search(dsn)
    if match is not None:
        candidates.add(dsn[match.end(1) + 1 : match.end() - 1])
    for found in _KEY_VALUE_PASSWORD.finditer(dsn):
        candidates.add(found.group(1).strip("'"))
    for candidate in sorted(candidates - {""}, key=len, reverse=True):
        text = text.replace(candidate, "***")
    return text


def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for `pg_advisory_lock`, from a name."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def application_name(role: str, owner: str) -> str:
    """The `application_name` of `owner`'s sessions of `role` (`harness-<role>:<owner>`, cut
    to what PostgreSQL keeps)."""
    name = f"harness-{role}:{owner}".encode()[:APPLICATION_NAME_BYTES]
    return name.decode(errors="ignore")


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectSettings:
    """How the store connects: the checked DSN, its redacted form and the options."""

    dsn: str
    redacted: str
    """The DSN without its password: the only form a message or log shows."""
    owner: str
    connect_timeout: float
    options: tuple[tuple[str, str], ...]
    """libpq options added to the DSN's own (keepalives, unless the DSN sets them)."""
    password: str | None
    """Kept only to scrub it from libpq messages."""

    @classmethod
    def parse(
        cls, dsn: str, *, owner: str, connect_timeout: float = CONNECT_TIMEOUT
    ) -> ConnectSettings:
        """Check `dsn` and the owner name.

        Raises:
            StoreDsnInvalid: `dsn` is not a connection string libpq accepts.
            ValueError: `owner` is empty or `connect_timeout` not positive.
        """
        if not owner or not owner.strip():
            raise ValueError("a PostgreSQL store needs a non-empty owner name")
        if connect_timeout <= 0:
            raise ValueError(f"connect_timeout must be > 0 seconds, got {connect_timeout}")
        if not dsn.strip():
            raise StoreDsnInvalid("the store DSN is empty")
        try:
            parsed = pg_conninfo.conninfo_to_dict(dsn)
        except psycopg.Error as error:
            reason = _scrub(str(error).strip(), dsn, None)
            raise StoreDsnInvalid(
                f"the store DSN {redact_dsn(dsn)} is not a PostgreSQL connection string: {reason}"
            ) from None
        password = parsed.get("password")
        options = tuple(
            (key, value) for key, value in KEEPALIVE_OPTIONS.items() if key not in parsed
        )
        return cls(
            dsn=dsn,
            redacted=redact_dsn(dsn),
            owner=owner,
            connect_timeout=connect_timeout,
            options=options,
            password=None if password is None else str(password),
        )

    def kwargs(self, role: str) -> dict[str, Any]:
        """Connection keyword arguments for one role's connections (also the pool's)."""
        return {
            **dict(self.options),
            "autocommit": True,
            # libpq counts whole seconds and treats 1 as 2; our own bound is the float.
            "connect_timeout": max(2, round(self.connect_timeout)),
            "application_name": application_name(role, self.owner),
        }

    async def connect(self, role: str) -> Connection:
        """A new autocommit connection for `role`.

        Raises:
            StoreUnavailable: the server cannot be reached or refused us, within
                `connect_timeout` (the message names the DSN without its password).
        """
        kwargs = self.kwargs(role)
        try:
            # libpq bounds each host by whole seconds; ours bounds the whole attempt.
            async with asyncio.timeout(max(self.connect_timeout, kwargs["connect_timeout"]) + 1):
                return await psycopg.AsyncConnection.connect(self.dsn, **kwargs)
        except (psycopg.Error, OSError, TimeoutError) as error:
            raise self.unavailable(
                f"cannot connect to the PostgreSQL store {self.redacted}", error
            ) from None

    def unavailable(self, what: str, error: BaseException) -> StoreUnavailable:
        """A `StoreUnavailable` saying `what`, with the cause's text scrubbed of the password.

        The cause is kept as `__cause__` only when its text is clean of the password."""
        detail = self.describe(error)
        failure = StoreUnavailable(f"{what}: {detail}")
        if not self.password or self.password not in str(error):
            failure.__cause__ = error
        return failure

    def describe(self, error: BaseException) -> str:
        """One line about `error`, with the password hidden."""
        text = " ".join(str(error).split()) or type(error).__name__
        return _scrub(text, self.dsn, self.password)


def is_connection_error(error: BaseException, connection: Connection | None = None) -> bool:
    """Whether `error` means the connection is gone or never came up (not one statement's
    fault): the caller drops the connection and reconnects next time."""
    if connection is not None and (connection.closed or connection.broken):
        return True
    if isinstance(error, OSError | TimeoutError):
        return True
    if not isinstance(error, psycopg.OperationalError):
        return isinstance(error, psycopg.InterfaceError)
    state = error.sqlstate
    return state is None or state[:2] in _CONNECTION_CLASSES


def is_corruption(error: BaseException) -> bool:
    """Whether `error` reports damaged data on the server: memory and disk may diverge."""
    return isinstance(error, psycopg.Error) and error.sqlstate in _CORRUPTION_STATES

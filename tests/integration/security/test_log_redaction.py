"""No token in any log line, from grpc's loggers included (operations.md §6).

An `authorization` header whose value is not UTF-8 makes grpc log `Invalid encoding on
b'Bearer <the token>\\xe9'` at ERROR with a traceback, twice a call. The gateway's filter
turns that into one WARNING without the value, and redacts tokens from anything else grpc
logs. Sent with `tests/raw_h2.py`, since no gRPC client sends such a header.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Final

import harness_client
import pytest

from gateway.observability.logs import (
    INVALID_ENCODING_WARNING,
    JsonFormatter,
    install_grpc_log_filter,
)
from gateway.testing import run_daemon, run_gateway
from tests.raw_h2 import raw_call
from tests.support import eventually

AGENT_METHOD: Final = "/harness.v1.HarnessEndpointService/ReadSend"
MANAGEMENT_METHOD: Final = "/harness.v1.ManagementService/ListAgents"
CALLS: Final = 3
"""Bad calls sent to each API: one warning for all of them, the rest counted."""
UNAUTHENTICATED: Final = b"16"
CLIENT_SIDE: Final = ("hpack", "h2")
"""Loggers of the test's own raw HTTP/2 client, which logs the headers it sends."""


class Capture(logging.Handler):
    """Every record, as the gateway's JSON formatter writes it (exception text included)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.records: list[logging.LogRecord] = []
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(CLIENT_SIDE):
            return
        self.records.append(record)
        self.lines.append(self.format(record))


@pytest.fixture
def capture() -> Iterator[Capture]:
    handler = Capture()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    # The rate limit is process-wide: a warning another test caused must not hide ours.
    install_grpc_log_filter().reset()
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def bad_bearer(token: str) -> list[tuple[bytes, bytes]]:
    """`authorization: Bearer <token>` with one byte that is not UTF-8 after it."""
    return [(b"authorization", b"Bearer " + token.encode() + b"\xe9")]


def secrets_of(token: str) -> tuple[str, ...]:
    """What must never be logged: the token, and its random part without the prefix."""
    return (token, token.partition("_")[2])


async def send_bad_calls(address: str, agent_token: str, admin_token: str) -> None:
    for method, token in ((AGENT_METHOD, agent_token), (MANAGEMENT_METHOD, admin_token)):
        for _ in range(CALLS):
            answer = await asyncio.to_thread(raw_call, address, method, headers=bad_bearer(token))
            assert answer.get(b"grpc-status") == UNAUTHENTICATED, answer


async def test_a_header_that_is_not_utf8_logs_one_warning_and_never_the_token(
    capture: Capture,
):
    async with run_gateway() as gw:
        agent_token = await gw.register("alice")
        admin_token = gw.admin_token
        await send_bad_calls(gw.address, agent_token, admin_token)
    for secret in (*secrets_of(agent_token), *secrets_of(admin_token)):
        leaked = [line for line in capture.lines if secret in line]
        assert leaked == [], leaked
    errors = [
        line
        for record, line in zip(capture.records, capture.lines, strict=True)
        if record.levelno >= logging.ERROR
    ]
    assert errors == []
    warnings = [record for record in capture.records if record.msg == INVALID_ENCODING_WARNING]
    assert len(warnings) == 1, capture.lines
    assert warnings[0].levelno == logging.WARNING
    assert warnings[0].exc_info is None
    assert warnings[0].exc_text is None


@pytest.mark.e2e
@pytest.mark.timeout(90)
async def test_a_daemon_never_writes_the_token_of_a_header_that_is_not_utf8():
    async with run_daemon() as daemon:
        async with await harness_client.connect_management(
            daemon.address, admin_token=daemon.admin_token
        ) as operator:
            agent_token = (await operator.register_agent("alice")).token
        await send_bad_calls(daemon.address, agent_token, daemon.admin_token)

        async def logged() -> str:
            return daemon.stderr

        await eventually(logged, lambda text: "not UTF-8" in text)
    stderr = daemon.stderr
    for secret in (*secrets_of(agent_token), *secrets_of(daemon.admin_token)):
        assert secret not in stderr
    assert '"level": "error"' not in stderr

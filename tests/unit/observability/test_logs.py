"""The grpc log filter: redaction, and the `Invalid encoding` warning's rate limit."""

from __future__ import annotations

import logging
import sys

import pytest

from gateway.observability.logs import (
    INVALID_ENCODING_WARNING,
    REDACTED,
    GrpcLogFilter,
    JsonFormatter,
    install_grpc_log_filter,
    redact,
)

TOKEN = "hat_DKroFBMOh85PGd40OGdBZ4NP_yNWI1Avh7Qdx6J0f1g"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(msg: str, *args: object, name: str = "grpc._cython.cygrpc", exc: bool = False):
    exc_info = None
    if exc:
        try:
            raise UnicodeDecodeError("utf-8", b"\xe9", 0, 1, "unexpected end of data")
        except UnicodeDecodeError:
            exc_info = sys.exc_info()
    return logging.LogRecord(name, logging.ERROR, "grpc_string.pyx.pxi", 48, msg, args, exc_info)


def invalid_encoding():
    return record("Invalid encoding on %s", b"Bearer " + TOKEN.encode() + b"\xe9", exc=True)


@pytest.mark.parametrize(
    "text",
    [
        f"Invalid encoding on b'Bearer {TOKEN}\\xe9'",
        f"metadata (('authorization', 'Bearer {TOKEN}'),)",
        f'{{"authorization": "{TOKEN}"}}',
        f"authorization: Basic {TOKEN}",
        f"authorization={TOKEN}",
        f"token {TOKEN} and hadm_{TOKEN[4:]} and hpeer_{TOKEN[4:]}",
        f"Bearer {TOKEN[4:]}",
    ],
)
def test_redact_removes_every_rendering_of_a_token(text: str):
    redacted = redact(text)
    assert TOKEN[4:] not in redacted
    assert REDACTED in redacted


def test_redact_leaves_ordinary_text_alone():
    text = "Exception calling application: a hat is not a token; authorized peers only"
    assert redact(text) == text


def test_an_invalid_encoding_error_becomes_a_warning_without_value_or_traceback():
    entry = invalid_encoding()
    assert GrpcLogFilter(clock=FakeClock()).filter(entry)
    assert entry.levelno == logging.WARNING
    assert entry.levelname == "WARNING"
    assert entry.getMessage() == INVALID_ENCODING_WARNING
    assert entry.exc_info is None
    assert entry.exc_text is None
    assert TOKEN not in JsonFormatter().format(entry)


def test_invalid_encoding_warnings_come_once_a_minute_and_count_the_rest():
    clock = FakeClock()
    grpc_filter = GrpcLogFilter(clock=clock)
    assert grpc_filter.filter(invalid_encoding())
    clock.now += 30.0
    assert not grpc_filter.filter(invalid_encoding())
    assert not grpc_filter.filter(invalid_encoding())
    clock.now += 30.0
    entry = invalid_encoding()
    assert grpc_filter.filter(entry)
    assert entry.getMessage().endswith("; 2 more since the last such warning")
    clock.now += 60.0
    entry = invalid_encoding()
    assert grpc_filter.filter(entry)
    assert entry.getMessage() == INVALID_ENCODING_WARNING


def test_other_grpc_errors_stay_errors_but_lose_the_token():
    entry = record("Exception calling application: %s", f"('authorization', 'Bearer {TOKEN}')")
    try:
        raise RuntimeError(f"header {TOKEN}")
    except RuntimeError:
        entry.exc_info = sys.exc_info()
    assert GrpcLogFilter(clock=FakeClock()).filter(entry)
    line = JsonFormatter().format(entry)
    assert entry.levelno == logging.ERROR
    assert TOKEN[4:] not in line
    assert "RuntimeError: header hat_<redacted>" in line


def test_the_filter_is_on_grpc_loggers_before_any_handler_sees_a_record(
    caplog: pytest.LogCaptureFixture,
):
    install_grpc_log_filter()
    logging.getLogger("grpc_health.v1.later").addHandler(logging.NullHandler())
    install_grpc_log_filter()  # idempotent, and picks up loggers created since
    caplog.set_level(logging.DEBUG)
    for name in ("grpc._server", "grpc.aio._call", "grpc_health.v1.later"):
        logging.getLogger(name).error("token %s", TOKEN)
    assert len(caplog.records) == 3
    assert all(TOKEN not in entry.getMessage() for entry in caplog.records)
    assert logging.getLogger("grpc._server").filters.count(install_grpc_log_filter()) == 1

"""Logging: JSON lines on stderr (operations.md §6), or text on a terminal.

Fields: `ts` (RFC 3339 UTC), `level`, `logger`, `msg`, then any structured fields passed as
`extra=`, then `exc`. Nothing here ever formats a token, a key or message content: callers
never pass them, and content logging is a separate, explicit setting.

grpc's own Python loggers (`grpc._cython.cygrpc` and the rest) are another matter: they
quote what a client sent, e.g. `Invalid encoding on b'Bearer hat_…\xe9'` with a traceback
for a header value that is not UTF-8. `install_grpc_log_filter()` puts `GrpcLogFilter` on
every logger whose name starts with `grpc`, whether or not `configure_logging` ran: it
redacts authorization values and anything shaped like a token from each record's message,
arguments, exception and stack text, and turns the `Invalid encoding` record, a client's
mistake, into one WARNING a minute without the value or a traceback. The gateway and the
standalone roles install it as they start.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Final

LOG_AGENT: Final[contextvars.ContextVar[str | None]] = contextvars.ContextVar(
    "log_agent", default=None
)
"""The agent a call acts as, set at the RPC boundary once its token is accepted."""
LOG_RPC: Final[contextvars.ContextVar[str | None]] = contextvars.ContextVar("log_rpc", default=None)
"""The RPC method being served."""

REDACTED: Final = "<redacted>"
"""What stands in for a redacted value."""

_REDACTIONS: Final = (
    # The authorization header however it is rendered: `authorization: v`,
    # `('authorization', 'v')`, `"authorization": "v"`, `authorization=v`.
    re.compile(r"(?i)(authorization['\"]?\s*[:=,]\s*b?['\"]?)[^'\"\r\n]+"),
    re.compile(r"(?i)\b(bearer\s+)[^\s'\",;)\]}]+"),
    # Agent, admin and peer tokens by their prefixes.
    re.compile(r"\b(hat_|hadm_|hpeer_)[A-Za-z0-9_\-]+"),
)

INVALID_ENCODING_REPORT_INTERVAL: Final = 60.0
"""Seconds between two warnings about metadata that is not UTF-8; those in between are
counted, and the next warning says how many.

A client that sends such a header usually sends it on every call, and one line a minute
says as much as a line a call."""

INVALID_ENCODING_WARNING: Final = (
    "a call carried a metadata value that is not UTF-8, a client's mistake (grpc read it as "
    "latin-1; the value is not logged)"
)
"""The WARNING that replaces grpc's `Invalid encoding on <value>` ERROR."""
SUPPRESSED_SUFFIX: Final = "; %d more since the last such warning"
"""Added to `INVALID_ENCODING_WARNING` when warnings were suppressed since the last one."""

GRPC_LOGGER_NAMES: Final = (
    "grpc",
    "grpc._channel",
    "grpc._common",
    "grpc._cython.cygrpc",
    "grpc._observability",
    "grpc._plugin_wrapping",
    "grpc._server",
    "grpc._simple_stubs",
    "grpc._utilities",
    "grpc.aio._call",
    "grpc.framework.foundation.callable_util",
    "grpc.framework.foundation.logging_pool",
    "grpc.framework.foundation.stream_util",
    "grpc_reflection.v1alpha.proto_reflection_descriptor_database",
)
"""The loggers grpcio 1.85 and its add-ons log on, filtered even before they exist.

A logger's filters see only the records logged on that very logger, never those of its
children, so each one gets the filter; `install_grpc_log_filter` adds any other existing
logger whose name starts with `grpc`."""

_CYGRPC: Final = "grpc._cython.cygrpc"
_INVALID_ENCODING: Final = "Invalid encoding on "
_EXCEPTION_FORMATTER: Final = logging.Formatter()


_STANDARD: Final = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        agent, rpc = LOG_AGENT.get(), LOG_RPC.get()
        if agent is not None:
            entry["agent"] = agent
        if rpc is not None:
            entry["rpc"] = rpc
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text  # already formatted (and redacted) by a filter
        return json.dumps(entry, ensure_ascii=False)


def redact(text: str) -> str:
    """`text` with authorization values, `Bearer` credentials and tokens (`hat_…`,
    `hadm_…`, `hpeer_…`) replaced by `REDACTED`."""
    for pattern in _REDACTIONS:
        text = pattern.sub(lambda match: match.group(1) + REDACTED, text)
    return text


class GrpcLogFilter(logging.Filter):
    """Redacts grpc's records and tames its `Invalid encoding` ERROR (see the module
    docstring). Records are changed in place: the message is formatted and redacted (its
    arguments dropped), an exception becomes redacted `exc_text`."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval: float = INVALID_ENCODING_REPORT_INTERVAL,
    ) -> None:
        super().__init__()
        self._clock = clock
        self._interval = interval
        self._lock = threading.Lock()  # grpc logs from its own threads too
        self._last_report: float | None = None
        self._suppressed = 0

    def reset(self) -> None:
        """Forget the last `Invalid encoding` warning and the count since (for tests)."""
        with self._lock:
            self._last_report = None
            self._suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        """False drops the record (an `Invalid encoding` warning within the interval)."""
        if (
            record.name == _CYGRPC
            and isinstance(record.msg, str)
            and record.msg.startswith(_INVALID_ENCODING)
        ):
            return self._invalid_encoding(record)
        _redact_record(record)
        return True

    def _invalid_encoding(self, record: logging.LogRecord) -> bool:
        if not logging.getLogger(record.name).isEnabledFor(logging.WARNING):
            return False
        with self._lock:
            now = self._clock()
            if self._last_report is not None and now - self._last_report < self._interval:
                self._suppressed += 1
                return False
            suppressed, self._suppressed = self._suppressed, 0
            self._last_report = now
        record.levelno = logging.WARNING
        record.levelname = logging.getLevelName(logging.WARNING)
        record.msg = INVALID_ENCODING_WARNING + (SUPPRESSED_SUFFIX if suppressed else "")
        record.args = (suppressed,) if suppressed else None
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True


def _redact_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a record whose arguments do not fit its format
        message = f"{record.msg} {record.args!r}"
    record.msg = redact(message)
    record.args = None
    if record.exc_info:
        record.exc_text = redact(_EXCEPTION_FORMATTER.formatException(record.exc_info))
        record.exc_info = None
    elif record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)


_GRPC_FILTER: Final = GrpcLogFilter()


def install_grpc_log_filter() -> GrpcLogFilter:
    """Put the one `GrpcLogFilter` on every grpc logger (`GRPC_LOGGER_NAMES` and any other
    existing logger whose name starts with `grpc`); idempotent. Returns the filter."""
    existing = [name for name in logging.root.manager.loggerDict if name.startswith("grpc")]
    for name in (*GRPC_LOGGER_NAMES, *existing):
        logging.getLogger(name).addFilter(_GRPC_FILTER)
    return _GRPC_FILTER


def configure_logging(*, log_format: str, level: str) -> None:
    """Install the root handler on stderr (`auto` is text on a terminal, else JSON), and
    the grpc log filter."""
    install_grpc_log_filter()
    handler = logging.StreamHandler(sys.stderr)
    use_json = log_format == "json" or (log_format == "auto" and not sys.stderr.isatty())
    handler.setFormatter(
        JsonFormatter()
        if use_json
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

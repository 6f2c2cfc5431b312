"""Logging: JSON lines on stderr (operations.md §6), or text on a terminal.

Fields: `ts` (RFC 3339 UTC), `level`, `logger`, `msg`, then any structured fields passed as
`extra=`, then `exc`. Nothing here ever formats a token, a key or message content: callers
never pass them, and content logging is a separate, explicit setting.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
import sys
from typing import Final

LOG_AGENT: Final[contextvars.ContextVar[str | None]] = contextvars.ContextVar(
    "log_agent", default=None
)
"""The agent a call acts as, set at the RPC boundary once its token is accepted."""
LOG_RPC: Final[contextvars.ContextVar[str | None]] = contextvars.ContextVar("log_rpc", default=None)
"""The RPC method being served."""

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
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(*, log_format: str, level: str) -> None:
    """Install the root handler on stderr (`auto` is text on a terminal, else JSON)."""
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

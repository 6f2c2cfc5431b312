"""Where `harness` writes a result or a failure, and in which form (`-o text` or `-o json`).

`dumps` is the one JSON form of every printed value (compact, one line, integral floats as
integers); `Output` writes results to stdout and failures to stderr, flushing each line so
`listen` works through a pipe.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from harness_client._cli.failures import Failure


class OutputForm(enum.StrEnum):
    """The form of a command's result on stdout."""

    TEXT = "text"
    """Readable lines."""
    JSON = "json"
    """One compact JSON value per result (per delivery for `listen`)."""


def _plain(value: Any) -> Any:
    """JSON-ready values with integral floats written as integers (`5`, not `5.0`)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    """One compact JSON line, non-ASCII kept; `sort_keys` for a schema, whose key order
    does not survive the wire (a protobuf `Struct` is a map)."""
    return json.dumps(
        _plain(value), ensure_ascii=False, separators=(", ", ": "), sort_keys=sort_keys
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Output:
    """Where results and failures go, and in which form."""

    form: OutputForm
    """The result's form."""
    json_errors: bool
    """Failures as one JSON object (only when JSON was asked for by name)."""
    stdout: TextIO
    stderr: TextIO

    @property
    def json(self) -> bool:
        """Results are JSON."""
        return self.form is OutputForm.JSON

    def line(self, text: str) -> None:
        """One line of output, flushed (so `listen` works through a pipe)."""
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def value(self, value: Any) -> None:
        """A JSON value on one line."""
        self.line(dumps(value))

    def note(self, text: str) -> None:
        """A line for the person at the terminal, on stderr (never part of the result)."""
        self.stderr.write(text + "\n")
        self.stderr.flush()

    def failure(self, failure: Failure) -> None:
        """The headline, `cause: ...` and `reason=<reason>`, or `{"error": {...}}`."""
        if self.json_errors:
            self.stderr.write(dumps({"error": failure.error}) + "\n")
        else:
            self.stderr.write(failure.headline + "\n")
            if failure.cause is not None:
                self.stderr.write(f"cause: {failure.cause}\n")
            self.stderr.write(f"reason={failure.reason}\n")
        self.stderr.flush()

"""The optional history export (engine.md §9): one append-only JSON-lines file per agent.

`<export-dir>/<agentName>.jsonl`, mode 0600, created on first write; each line is
`JCS(record)` + newline with `at` in UTC `YYYY-MM-DDTHH:MM:SS.sssZ`. Inbound: once per item
per daemon process, when first offered, before the listener sees it. Outbound: every
completed send invocation before it returns, never a replayed keyed outcome. The first
failed append writes `export-failed` if it can and disables that agent's export for the
process; sending and delivery go on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

from harness_contract.codec import item_to_json, send_input_to_json
from harness_contract.formats import utc_millis_text
from harness_contract.jsonvalue import JsonValue, canonical_json
from harness_contract.values import InboundItem, SendInput

logger = logging.getLogger(__name__)


def _at() -> str:
    return utc_millis_text(time.time_ns() // 1_000_000)


class HistoryExport:
    """One agent's export file."""

    def __init__(self, directory: Path, agent_name: str) -> None:
        self.path = directory / f"{agent_name}.jsonl"
        self._directory = directory
        self._disabled = False
        self._exported_seq = 0

    @property
    def disabled(self) -> bool:
        """True after a failed append: the export stopped for this process."""
        return self._disabled

    def offered(self, seq: int, item: InboundItem) -> None:
        """An item is about to be offered on a stream: export it the first time."""
        if seq <= self._exported_seq:
            return
        self._exported_seq = seq
        self._append({"kind": "inbound", "item": item_to_json(item), "at": _at()})

    def sent(self, send_input: SendInput, post_ids: list[str], operation_id: str | None) -> None:
        """A send invocation completed."""
        outcome: dict[str, JsonValue] = {"kind": "sent", "postIds": tuple(post_ids)}
        if operation_id is not None:
            outcome["operationId"] = operation_id
        self._append(
            {
                "kind": "outbound",
                "input": send_input_to_json(send_input),
                "outcome": outcome,
                "at": _at(),
            }
        )

    def failed(self, send_input: SendInput, error: str) -> None:
        """A send invocation failed."""
        self._append(
            {
                "kind": "outbound",
                "input": send_input_to_json(send_input),
                "outcome": {"kind": "failed", "error": error},
                "at": _at(),
            }
        )

    def _append(self, record: dict[str, JsonValue]) -> None:
        if self._disabled:
            return
        try:
            self._write(canonical_json(record) + b"\n")
        except OSError as error:
            self._disabled = True
            logger.error("history export failed; disabled for this agent path=%s", self.path)
            with contextlib.suppress(OSError):
                self._write(
                    canonical_json({"kind": "export-failed", "reason": str(error), "at": _at()})
                    + b"\n"
                )

    def _write(self, line: bytes) -> None:
        self._directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(descriptor, line)
        finally:
            os.close(descriptor)

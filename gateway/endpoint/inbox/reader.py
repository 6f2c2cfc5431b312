"""`InboxReader`: one stream's pages of unread inbox rows, read from the store past the window.

A stream keeps at most one page in memory. The reader asks the store for no more unread rows
than the window has free slots (and at most `STREAM_PAGE`), after the last sequence it handed
out, and decodes them one at a time. A row this version cannot decode is logged and skipped;
it stays unread in the store for a fixed version to deliver.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, cast

from harness_contract.codec import CodecError, item_from_json, local_guidance_from_json
from harness_contract.jsonvalue import (
    JsonValue,
    JsonValueError,
    load_untrusted_json,
    parse_canonical_json,
)
from harness_contract.values import Delivery

from gateway.store.port import Store
from gateway.store.records import InboxRow

logger = logging.getLogger(__name__)

STREAM_PAGE: Final = 64
"""Inbox rows read from the store at a time (never more than the window's free slots)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliverRequest:
    """A row ready to be offered on the stream: its inbox sequence and its delivery."""

    seq: int
    delivery: Delivery


UnreadSource = Callable[[int, int], Awaitable[tuple[list[InboxRow], int]]]
"""`(after_seq, limit)` -> up to `limit` unread rows after `after_seq` in inbox order, and
the sequence the reader may count as read past when there are none (`AgentInbox.unread`)."""


def store_source(store: Store, agent_id: str) -> UnreadSource:
    """An `UnreadSource` that reads the store alone."""

    async def unread(after_seq: int, limit: int) -> tuple[list[InboxRow], int]:
        return await store.unread(agent_id, after_seq, limit), after_seq

    return unread


class InboxReader:
    """Reads one agent's unread rows in inbox order, a page at a time."""

    def __init__(
        self, source: UnreadSource, *, decode: Callable[[InboxRow], Delivery | None] | None = None
    ) -> None:
        """`decode` turns a row into its delivery (None: skipped); `decode_row` by default."""
        self._source = source
        self._decode = decode or decode_row
        self._last_seq = 0
        self._page: deque[InboxRow] = deque()

    @property
    def last_seq(self) -> int:
        """The sequence of the last row taken from a page (0 before the first)."""
        return self._last_seq

    def take(self) -> DeliverRequest | None:
        """The next decodable row of the current page, or None once the page is used up."""
        while self._page:
            row = self._page.popleft()
            self._last_seq = row.seq
            delivery = self._decode(row)
            if delivery is not None:
                return DeliverRequest(seq=row.seq, delivery=delivery)
        return None

    async def read_page(self, free: int) -> bool:
        """Read the next page, at most `free` rows, past the last row taken; False when none.

        Call it once `take()` returned None: rows still in the page are replaced."""
        rows, past = await self._source(self._last_seq, min(STREAM_PAGE, free))
        self._page = deque(rows)
        if not rows:
            self._last_seq = max(self._last_seq, past)
        return bool(rows)


def decode_row(row: InboxRow) -> Delivery | None:
    """The delivery a stored row holds; None (logged) for a row this version cannot read."""
    try:
        item = item_from_json(parse_canonical_json(row.item))
        # The guidance is this gateway's own writing, read on every delivery: its shape is
        # checked field by field, without the canonical-form proof protocol bytes need.
        guidance = (
            None
            if row.guidance is None
            else local_guidance_from_json(cast("JsonValue", load_untrusted_json(row.guidance)))
        )
    except (CodecError, JsonValueError):
        # A row this version cannot read is a defect; skipping it keeps the stream alive,
        # and the row stays unread for a fixed version to deliver.
        logger.exception("inbox row does not decode seq=%d", row.seq)
        return None
    return Delivery(token=row.token, item=item, guidance=guidance)

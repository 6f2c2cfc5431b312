"""Acknowledgment: `AckApplier` retires an agent's inbox items by token, one result each.

engine.md §7. Unknown tokens (another agent's included) are `unknown-delivery`; a replaced
item is `delivery-conflict`; acknowledging again succeeds; a store failure is
`persistence-failed` for every token it touched (the items stay, the client retries). The
applier reads and writes the store only; the inbox frees the stream's window slots from its
results.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from harness_contract.errors import DeliveryAcknowledgeErrorReason
from harness_contract.kinds import DeliveryItem
from harness_contract.values import AcknowledgeResult

from gateway.endpoint.inbox.committed import CommittedItems
from gateway.endpoint.inbox.observer import AckResult, InboxObserver
from gateway.store.errors import PartitionNotHeld, StoreError
from gateway.store.port import Store
from gateway.store.records import (
    AcknowledgeItem,
    InboxRow,
    InboxState,
    Write,
    parsed_item,
    tombstone_of,
)

logger = logging.getLogger(__name__)

ACKNOWLEDGE_MAX_TOKENS: Final = 1_000
"""Most tokens one `Acknowledge` call may carry (operations.md §3)."""


class AckApplier:
    """Applies one agent's acknowledgments to the store."""

    def __init__(
        self,
        *,
        agent_id: str,
        store: Store,
        observer: InboxObserver,
        committed: CommittedItems | None = None,
    ) -> None:
        self._agent_id = agent_id
        self._store = store
        self._observer = observer
        self._committed = committed or CommittedItems(0)

    async def apply(self, tokens: Sequence[str]) -> list[AcknowledgeResult]:
        """Retire items by token, one result per token in order."""
        rows: dict[str, InboxRow | None] = {}
        try:
            # Memory knows the items this process committed (engine.md §7.3); otherwise one
            # read for the whole call (the client batches acknowledgments).
            unique = list(dict.fromkeys(tokens))
            found = self._committed.by_tokens(unique)
            if found is None:
                found = await self._store.inbox_items(self._agent_id, unique)
            for token in dict.fromkeys(tokens):
                rows[token] = found.get(token)
        except StoreError:
            logger.exception("acknowledge read failed")
            return [
                AcknowledgeResult(
                    token=token, error=DeliveryAcknowledgeErrorReason.PERSISTENCE_FAILED
                )
                for token in tokens
            ]
        # Each item read once, for its tombstone and its kind (a metric).
        parsed = {
            token: parsed_item(row.item)
            for token, row in rows.items()
            if row is not None and row.state is InboxState.UNREAD
        }
        acks = [
            AcknowledgeItem(
                agent_id=self._agent_id, token=token, tombstone=tombstone_of(parsed[token])
            )
            for token, row in rows.items()
            if row is not None and row.state is InboxState.UNREAD
        ]
        writes: list[Write] = list(acks)
        failed = False
        if writes:
            try:
                await self._store.apply(writes)
            except PartitionNotHeld:
                # The agent's partition was released meanwhile (cluster.md §3.2): nothing
                # was written; the call answers NOT_OWNER and is retried at the new home.
                raise
            except StoreError:
                logger.exception("acknowledge write failed")
                failed = True
            else:
                self._committed.acknowledged(ack.token for ack in acks)
        results = []
        for token in tokens:
            row = rows[token]
            error: DeliveryAcknowledgeErrorReason | None
            if row is None:
                error, result = (
                    DeliveryAcknowledgeErrorReason.UNKNOWN_DELIVERY,
                    AckResult.UNKNOWN_DELIVERY,
                )
            elif row.state is InboxState.REPLACED:
                error, result = (
                    DeliveryAcknowledgeErrorReason.DELIVERY_CONFLICT,
                    AckResult.DELIVERY_CONFLICT,
                )
            elif failed and row.state is InboxState.UNREAD:
                error, result = (
                    DeliveryAcknowledgeErrorReason.PERSISTENCE_FAILED,
                    AckResult.PERSISTENCE_FAILED,
                )
            else:
                error, result = None, AckResult.OK
            if error is None and row is not None and row.state is InboxState.UNREAD:
                self._observer.on_acknowledged(_item_kind(parsed.get(token)))
                # The same token twice in one call is retired (and counted) once.
                rows[token] = replace(row, state=InboxState.ACKNOWLEDGED)
            self._observer.on_acknowledge_result(result)
            results.append(AcknowledgeResult(token=token, error=error))
        return results


_DELIVERY_ITEMS: Final = frozenset(DeliveryItem)


def _item_kind(value: object) -> DeliveryItem:
    """The top-level `kind` of a parsed stored item (for metrics); a message when unreadable."""
    kind = value.get("kind") if isinstance(value, dict) else None
    if isinstance(kind, str) and kind in _DELIVERY_ITEMS:
        return DeliveryItem(kind)
    return DeliveryItem.MULTICAST

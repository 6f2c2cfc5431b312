"""Shared pieces of the inbox tests: items, a recording observer, bounded waits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from harness_contract.content import multicast_content
from harness_contract.values import DirectMessage, MulticastItem

from gateway.endpoint.inbox import InboxObserver, StreamEndReason
from gateway.store.records import PutInboxItem

T = TypeVar("T")

AGENT = "agt_AAAAAAAAAAAAAAAAAAAAAA"
OTHER_AGENT = "agt_f39_f39_f39_f39_f39_fw"
BOUND = 5.0
"""Seconds a step that should be immediate may take before the test fails."""

READY_TASK_ROUNDS = 20
"""Loop turns that let every ready task run as far as it can (no time passes)."""


def item(text: str) -> MulticastItem:
    return MulticastItem(
        message=DirectMessage(
            post_id="pst_" + "A" * 43,
            address="agent:bob",
            sender="agent:bob",
            content=multicast_content(text)[:1],
        )
    )


def undecodable_row(seq: int, token: str) -> PutInboxItem:
    """An inbox row whose item this version cannot read."""
    return PutInboxItem(
        agent_id=AGENT, seq=seq, token=token, item=b"not json", guidance=None, created_at=0.0
    )


async def within_bound(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, BOUND)


async def let_ready_tasks_run() -> None:
    """Yield to the loop until the other tasks have run as far as they can without input."""
    for _ in range(READY_TASK_ROUNDS):
        await asyncio.sleep(0)


@dataclass
class Recorded:
    """What an inbox told its observer, hook by hook."""

    opens: list[str] = field(default_factory=list)
    ends: list[StreamEndReason] = field(default_factory=list)
    replayed: list[str] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)
    results: list[str] = field(default_factory=list)

    def observer(self) -> InboxObserver:
        return InboxObserver(
            on_stream_open=self.opens.append,
            on_stream_end=self.ends.append,
            on_replayed=self.replayed.append,
            on_acknowledged=self.acknowledged.append,
            on_acknowledge_result=self.results.append,
        )

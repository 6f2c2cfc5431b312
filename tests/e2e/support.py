"""Helpers of the end-to-end tests: operator calls against a daemon process, and a
read-only look at its store (engine.md §8 tables) once it stopped or between polls."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import harness_client
from harness_client import (
    ConversationRecord,
    InboundDelivery,
    ManagementClient,
    MulticastItem,
    RegisteredAgent,
    TextPart,
)

from gateway.testing import RunningDaemon

STORE_FILE: Final = "gateway.sqlite3"
"""The daemon's store inside its data directory."""

HISTORY_PAGE: Final = 50
"""Records per `ReadConversation` page (the gateway's maximum)."""


@contextlib.asynccontextmanager
async def management(daemon: RunningDaemon) -> AsyncIterator[ManagementClient]:
    """An operator client of the daemon's current process."""
    async with await harness_client.connect_management(
        daemon.address, admin_token=daemon.admin_token
    ) as client:
        yield client


async def register(daemon: RunningDaemon, *names: str) -> dict[str, RegisteredAgent]:
    """Register agents through the management API; their registrations by name."""
    async with management(daemon) as client:
        return {name: await client.register_agent(name) for name in names}


async def full_history(
    client: ManagementClient, agent_name: str, address: str
) -> list[ConversationRecord]:
    """Every certified record of one of the agent's conversations, in chain order."""
    records: list[ConversationRecord] = []
    after: str | None = None
    while True:
        page, has_more = await client.history(
            agent_name, address, after_record_hash=after, page_size=HISTORY_PAGE
        )
        records.extend(page)
        if not has_more or not page:
            return records
        after = page[-1].record_hash


def text_of(content: tuple[object, ...]) -> str:
    """The text parts of certified content (the collective data part left out)."""
    return "".join(part.text for part in content if isinstance(part, TextPart))


def delivered_post_id(delivery: InboundDelivery) -> str:
    item = delivery.item
    assert isinstance(item, MulticastItem), item
    return item.message.post_id


# --- the store, read-only -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IntentRow:
    post_id: str
    state: str
    record_hash: str | None


@dataclass(frozen=True, slots=True)
class RecordRow:
    record_hash: str
    post_id: str
    author: str
    depth: int


@dataclass(frozen=True, slots=True)
class InboxEntry:
    token: str
    state: str
    post_id: str | None


@contextlib.contextmanager
def read_only_store(data_dir: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the daemon's store (safe beside a running daemon: WAL)."""
    path = data_dir / STORE_FILE
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    try:
        yield connection
    finally:
        connection.close()


def intents(data_dir: Path, agent_id: str) -> list[IntentRow]:
    with read_only_store(data_dir) as db:
        rows = db.execute(
            "SELECT post_id, state, record_hash FROM post_intents WHERE agent_id = ?"
            " ORDER BY bind_seq",
            (agent_id,),
        ).fetchall()
    return [IntentRow(post_id=row[0], state=row[1], record_hash=row[2]) for row in rows]


def certified_records(data_dir: Path, agent_id: str) -> list[RecordRow]:
    with read_only_store(data_dir) as db:
        rows = db.execute(
            "SELECT record_hash, post_id, author, depth FROM certified_records"
            " WHERE agent_id = ? ORDER BY conversation_id, depth",
            (agent_id,),
        ).fetchall()
    return [
        RecordRow(record_hash=row[0], post_id=row[1], author=row[2], depth=row[3]) for row in rows
    ]


def inbox(data_dir: Path, agent_id: str) -> list[InboxEntry]:
    with read_only_store(data_dir) as db:
        rows = db.execute(
            "SELECT token, state, item FROM inbox WHERE agent_id = ? ORDER BY seq", (agent_id,)
        ).fetchall()
    entries = []
    for token, state, item in rows:
        value = json.loads(bytes(item))
        message = value.get("message") if isinstance(value, dict) else None
        post_id = message.get("postId") if isinstance(message, dict) else None
        entries.append(InboxEntry(token=token, state=state, post_id=post_id))
    return entries


async def open_intents(data_dir: Path, agent_id: str) -> list[IntentRow]:
    """The agent's intents not yet `completed` (read off the event loop)."""
    rows = await asyncio.to_thread(intents, data_dir, agent_id)
    return [row for row in rows if row.state != "completed"]


def anchor_hashes(data_dir: Path) -> dict[str, str]:
    """Each agent's current AnchorHash of its conversations, as `agent_id/conversation_id`
    keys (a quick read: tests poll it between a daemon's steps)."""
    with read_only_store(data_dir) as db:
        rows = db.execute("SELECT agent_id, conversation_id, anchor_hash FROM conversations")
        return {f"{agent}/{conversation}": anchor for agent, conversation, anchor in rows}


def diverged(anchors: dict[str, str]) -> bool:
    """True when the members of the (one) conversation stored different anchors."""
    return len(set(anchors.values())) > 1

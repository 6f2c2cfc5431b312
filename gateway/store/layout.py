"""What the SQLite and PostgreSQL tables share beyond their dialects (engine.md §8).

Both backends hold the same tables under the same names and store a certified record's
bytes once, in `record_bodies`, with its membership descriptor elided. The helpers that
write and read that stored form, the portable SQL that joins a record with its body and
descriptor, and the names both schemas use are defined here once, so the two backends
cannot drift apart on them. Everything with placeholders or dialect types stays in
`gateway.store.tables` (SQLite) and `gateway.store.postgres.tables`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from gateway.store import records

_MEMBERSHIP_KEY: Final = b'"membership":'
_ELIDED: Final = _MEMBERSHIP_KEY + b"\x00"
"""Stands for `"membership":<descriptor>` in a stored body. A NUL byte never appears in
JCS output (strings escape it), so the marker cannot collide with any record's bytes."""


def elide_membership(record: bytes, descriptor: bytes | None) -> bytes:
    """A record's stored body: its descriptor (known to the conversation) left out."""
    if descriptor is None:
        return record
    return record.replace(_MEMBERSHIP_KEY + descriptor, _ELIDED)


def restore_membership(body: bytes, descriptor: bytes) -> bytes:
    """The record's exact JCS bytes from its stored body and the conversation's descriptor."""
    if _ELIDED not in body:
        return body
    return body.replace(_ELIDED, _MEMBERSHIP_KEY + descriptor)


LOCAL_INSTANCE_KEY: Final = "local_instance_id"
"""Key of the durable local instance id (engine.md §5.10): in SQLite's `meta`, and in
PostgreSQL's `owner_meta` once per owner."""

CERTIFICATION_TABLES: Final = ("proposal_locks", "staged_records", "evidence")
"""A member's certification state of a conversation: what a genesis swap and a move onto
local order drop."""

RECORD_COLUMNS: Final = (
    "r.record_hash, r.conversation_id, r.depth, r.author, r.post_id, b.body, r.commit_seq, "
    "c.descriptor"
)
"""What a certified record is read as, in `record_row`'s order (with `RECORD_FROM`)."""

RECORD_FROM: Final = (
    "certified_records r JOIN record_bodies b ON b.record_hash = r.record_hash "
    "LEFT JOIN conversations c ON c.agent_id = r.agent_id AND c.conversation_id = r.conversation_id"
)
"""A certified record joined with its stored body and its conversation's descriptor."""


def record_row(row: Sequence[Any]) -> records.RecordRow:
    """The record of one `SELECT RECORD_COLUMNS FROM RECORD_FROM` result, whole again.

    The stored body elides the descriptor (`elide_membership`), which the join brings back;
    a record whose conversation row is gone is its stored body as it is."""
    body = bytes(row[5])
    return records.RecordRow(
        record_hash=row[0],
        conversation_id=row[1],
        depth=row[2],
        author=row[3],
        post_id=row[4],
        record=body if row[7] is None else restore_membership(body, bytes(row[7])),
        commit_seq=row[6],
    )

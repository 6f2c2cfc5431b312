"""One bound stream of the JetStream Router, and the checks that it is still one instance.

An `Instance` is the stream a `JetStreamRouter` is bound to and the `FeedWindow` of what
the process has read of it. `check_continuity` compares the stream with the window and
raises `StreamLost` when the instance has ended: the stream deleted, created again under
its name, no longer the one stream bound to the subject, or purged (entries gone that its
limits would have kept). The router then binds the next instance (engine.md §4: "Losing
continuity ... MUST produce a new instance id").

The purge check errs towards "explained": a missed purge only costs the readers it
affects a `FeedGap`, while a false one would cost every daemon a recovery. Every verdict
rests on the stream leader's answer, never on one replica's, and a purge must be seen
twice.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Final

from nats.js import JetStreamContext, api

from gateway.router import jetstream_stream as stream
from gateway.router.jetstream_window import FeedWindow, StoredEntry
from gateway.router.port import RouterUnavailable

PURGE_CONFIRM_DELAY: Final = 0.2
"""Seconds between the two looks at the stream that must both show a purge before this
process deletes the stream (one odd answer must never end an instance)."""

AGE_SLACK: Final = 60.0
"""Seconds of clock difference between this host and the servers the purge check allows
before it calls an entry too young to have aged out."""


class StreamLost(Exception):
    """The instance's continuity is gone; `delete` when the stream must be deleted first
    (it still exists but lost entries, or came back under the same name)."""

    def __init__(self, reason: str, *, delete: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.delete = delete


@dataclass(slots=True, kw_only=True, eq=False)
class Instance:
    """One bound stream and what this process has read of it."""

    bound: stream.BoundStream
    window: FeedWindow
    known_last: int
    behind_since: float | None = field(default=None)

    @property
    def instance_id(self) -> str:
        return self.bound.instance_id

    @property
    def stream_name(self) -> str:
        return self.bound.name

    def note_last(self, order: int) -> None:
        self.known_last = max(self.known_last, order)


async def stream_info_of(
    js: JetStreamContext, plan: stream.StreamPlan, instance: Instance
) -> api.StreamInfo:
    """The stream's info; `StreamLost` when it is confirmed absent."""
    try:
        return await stream.stream_info(js, instance.stream_name, subject=plan.envelopes_subject)
    except stream.StreamGone:
        raise StreamLost("the stream was deleted", delete=False) from None


async def check_continuity(
    js: JetStreamContext, plan: stream.StreamPlan, instance: Instance, *, seen_first: int = 0
) -> None:
    """Compare the stream with the window: `StreamLost` when it was deleted, created
    again under its name, or lost entries its limits would have kept (a purge, seen
    twice `PURGE_CONFIRM_DELAY` apart); otherwise follow its age eviction and evict
    blind what it dropped unread. `seen_first` is the sequence a replica answered
    after a hole at the tail."""
    confirmed = False
    while True:
        state = await leader_state(js, plan, instance)
        window = instance.window
        now = time.time()
        max_age = instance.bound.max_age
        if max_age > 0:
            window.evict_stored_before(now - max_age)
        first = state.first_seq if state.messages else state.last_seq + 1
        gone_through = first - 1
        if gone_through <= window.greatest_evicted:
            break
        newest_gone = window.entry(min(gone_through, window.tail))
        # Past the tail the newest gone entry is unknown, so its size is bounded.
        size = newest_gone.stored_size if newest_gone and gone_through <= window.tail else None
        if newest_gone is None or evicted_by_limits(instance, newest_gone, size, state, now):
            break
        if confirmed:
            raise StreamLost(
                f"entries through {gone_through} vanished that the stream's limits "
                "would have kept (purged)",
                delete=True,
            )
        confirmed = True
        await asyncio.sleep(PURGE_CONFIRM_DELAY)
    if gone_through > window.tail:
        window.evict_through(gone_through)
    # Entries the stream dropped under its own byte accounting (headers count there)
    # stay here until the window's bounds evict them.
    if seen_first > window.tail + 1:
        # The leader still holds what that replica skipped: read again, elsewhere.
        raise RouterUnavailable(f"a replica skipped orders {window.tail + 1}..{seen_first - 1}")


class StaleAnswer(RouterUnavailable):
    """The stream's info is older than what this process already read (seen under load: an
    info answered before the latest acknowledged entry shows in it). Nothing is wrong with
    the stream; the check is simply made again shortly."""


async def leader_state(
    js: JetStreamContext, plan: stream.StreamPlan, instance: Instance
) -> api.StreamState:
    """The stream's state as its leader has it; `StreamLost` when the stream is gone,
    was created again under its name, or is no longer the one stream bound to the
    subject; `RouterUnavailable` without a leader or for an answer that contradicts
    what this process saw."""
    info = await stream_info_of(js, plan, instance)
    if info.cluster is not None and not info.cluster.leader:
        raise RouterUnavailable("the stream has no leader (an election?)")
    created = instance.bound.created_at
    if created is not None and info.created is not None and info.created != created:
        raise StreamLost("the stream was deleted and created again", delete=True)
    names = await stream.bound_names(js, plan.envelopes_subject)
    if not names:
        raise RouterUnavailable(f"the stream {instance.stream_name} is bound to no subject")
    if names != [instance.stream_name]:
        winner = await stream.settle(js, plan, names)
        if winner != instance.stream_name:
            raise StreamLost(f"the subject is bound to {winner}", delete=False)
    state = info.state
    if state.last_seq < instance.known_last:
        raise StaleAnswer(
            f"the stream's last sequence {state.last_seq} is below {instance.known_last}"
        )
    instance.note_last(state.last_seq)
    return state


def evicted_by_limits(
    instance: Instance,
    entry: StoredEntry,
    size: int | None,
    state: api.StreamState,
    now: float,
) -> bool:
    """Whether the stream's limits explain that `entry` (and all before it) is gone.

    Eviction by count leaves the stream full; by bytes leaves no room for the evicted
    entry; by age only takes entries older than `MaxAge`. Any doubt is "explained":
    a missed purge only costs the readers it affects a `FeedGap`, a false one costs
    every daemon a recovery."""
    bound = instance.bound
    if bound.max_age > 0 and entry.stored_at + bound.max_age <= now + AGE_SLACK:
        return True
    if bound.max_msgs > 0 and state.messages >= bound.max_msgs:
        return True
    stored = size if size is not None else stream.MAX_STORED_SIZE
    return bound.max_bytes > 0 and state.bytes + stored > bound.max_bytes

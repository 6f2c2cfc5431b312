"""Hints between the replicas of a cluster (cluster.md §3.4).

PostgreSQL is the queue; a hint only says "rows are waiting for you" sooner than the owner's
poll (`POLL_INTERVAL`, 1 s) would find them. A hint carries nothing the rows do not, so a
lost, late or repeated hint costs at most one poll interval and never a post. Three kinds
travel in one `ClusterPeerService.Hint` call (`proto/harness/v1/cluster.proto`):

- `conversations`: to the sequencer, these conversations have new open intents (the
  hand-off, cluster.md §5.1);
- `settled_posts`: to the authors' home, these posts were decided, each as
  `<AgentId>/<PostId>` (`settled_post`, cluster.md §5.2);
- `delivery_agents`: to the recipients' home, these agents have pending deliveries
  (cluster.md §6).

Two sides, neither touching grpc (the gRPC server and client live in `gateway/rpc/`):

- `ClusterHintsPort`: what the receiving replica does with a hint. `on_hint` only schedules
  work (wakes a sequencer, a latch, a classifier) and returns; it is never awaited, so a
  slow owner never holds a peer's call.
- `HintSender`: what the sending replica calls after each commit. `hint()` never blocks and
  never raises: hints for one target replica within `HINT_DELAY` go in one call, at most one
  call per target is in flight, duplicates coalesce, at most `MAX_PENDING_HINTS` wait per
  target (beyond it the oldest are dropped: the poll finds them), and a failed call is a
  rate-limited log line, never an error to the committer.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeAlias

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.closing import AsyncClosing

logger = logging.getLogger(__name__)

HINT_DELAY: Final = 0.002
"""Seconds the sender gathers hints for one target before calling it, like the store's
commit window (2 ms): a burst of commits becomes one call, and 2 ms is nothing beside the
poll interval a hint saves."""

MAX_HINT_ITEMS: Final = 4096
"""Most entries (conversations, settled posts and delivery agents together) in one `Hint`
request; the servicer refuses more with INVALID_ARGUMENT. At ~60 bytes an entry a full
request is about 250 KB, far inside the peer message limit."""

MAX_PENDING_HINTS: Final = MAX_HINT_ITEMS
"""Most entries waiting for one target replica. Beyond it the oldest are dropped: they are
hints, and the owner's poll finds their rows within a second. Equal to `MAX_HINT_ITEMS`, so
whatever waits goes in one call."""

FAILURE_LOG_INTERVAL: Final = 30.0
"""Seconds between two WARNING lines about one target's failed hints; the calls in between
log at DEBUG and are counted. A replica that is down fails every hint to it until it is
fenced (`LEASE_TTL`, 6 s) and its partitions move, so one line a target is enough.

A target is remembered (for that count, and for the line saying hints reach it again) until
`FAILURES_REMEMBERED` intervals pass without a failure, so the log never grows with targets
that went away."""

FAILURES_REMEMBERED: Final = 10
"""Failure-log intervals without a failure after which a target is forgotten (five minutes
at the default interval): long enough that a target failing now and then keeps its count."""

SETTLED_SEPARATOR: Final = "/"
"""Between the author's `AgentId` and the `PostId` in a settled-post entry."""


class HintUnsent(ConnectionError):
    """A `Hint` call failed or timed out (the target may or may not have taken it). The
    sender logs it; the rows stay, and the target's poll finds them."""


class HintKind(enum.Enum):
    """Which field of a `Hint` request an entry travels in."""

    CONVERSATION = "conversation"
    """A conversation with new open intents (to its sequencer)."""
    SETTLED_POST = "settled_post"
    """A decided post, `<AgentId>/<PostId>` (to its author's home)."""
    DELIVERY_AGENT = "delivery_agent"
    """An agent with pending deliveries (to its home)."""


class ClusterHintsPort(Protocol):
    """What a replica does with a hint another sent it (the receiving side's seam)."""

    def on_hint(
        self,
        from_replica: str,
        conversations: tuple[str, ...],
        settled_posts: tuple[str, ...],
        delivery_agents: tuple[str, ...],
    ) -> None:
        """Schedule the work the hint names and return at once; never awaited long, never
        raising for a name it does not know or no longer owns (hints are advisory: the
        rows decide)."""
        ...


SendHint: TypeAlias = Callable[
    [str, tuple[str, ...], tuple[str, ...], tuple[str, ...]], Awaitable[None]
]
"""`send(address, conversations, settled_posts, delivery_agents)`: one `Hint` call to the
replica at `address`, bounded by its own deadline; `HintUnsent` (or any exception) is a
failed hint."""


def settled_post(agent_id: str, post_id: str) -> str:
    """The settled-post entry of the author `agent_id`'s post `post_id`."""
    return f"{agent_id}{SETTLED_SEPARATOR}{post_id}"


def parse_settled_post(entry: str) -> tuple[str, str] | None:
    """`(agent_id, post_id)` of a settled-post entry, or None when it is not two non-empty
    parts around one separator."""
    agent_id, separator, post_id = entry.partition(SETTLED_SEPARATOR)
    if not separator or not agent_id or not post_id or SETTLED_SEPARATOR in post_id:
        return None
    return agent_id, post_id


class HintSenderState(enum.StrEnum):
    """A `HintSender`'s lifecycle."""

    CREATED = "created"
    """Built; `hint()` refuses until `start()`."""
    RUNNING = "running"
    """Sending hints."""
    CLOSED = "closed"
    """Closed: hints are dropped (a commit racing shutdown), nothing is sent."""


@dataclass(slots=True)
class _Target:
    """One target replica: what waits for it and the task calling it."""

    pending: OrderedDict[tuple[HintKind, str], None] = field(default_factory=OrderedDict)
    """Entries not yet sent, oldest first (a repeated entry moves to the end)."""
    task: asyncio.Task[None] | None = None
    """The task gathering and sending this target's hints; None when idle."""


@dataclass(slots=True)
class _Failing:
    """A target whose hints failed lately, as the failure log remembers it."""

    last_warning: float
    """Monotonic time of the last WARNING about it."""
    last_failure: float
    """Monotonic time of its last failed call."""
    held_back: int = 0
    """Failed calls logged at DEBUG since that WARNING."""


class _FailureLog:
    """At most one WARNING per `interval` per target, counting what it held back.

    Kept apart from the targets, which are forgotten when idle: a target that is down fails
    every hint to it, each usually in a fresh batch. A target is remembered only while it
    failed within the last `FAILURES_REMEMBERED` intervals, so the log holds no more than the
    targets failing lately; its first success after a WARNING logs that hints reach it
    again."""

    def __init__(self, clock: Clock, interval: float) -> None:
        self._clock = clock
        self._interval = interval
        self._failing: dict[str, _Failing] = {}

    def failed(self, address: str, error: Exception, entries: int) -> None:
        now = self._clock.monotonic()
        for gone in [
            other
            for other, failing in self._failing.items()
            if now - failing.last_failure >= self._interval * FAILURES_REMEMBERED
        ]:
            del self._failing[gone]
        failing = self._failing.get(address)
        if failing is not None and now - failing.last_warning < self._interval:
            failing.held_back += 1
            failing.last_failure = now
            logger.debug(
                "cluster hint to %s failed (%d entries left to the poll): %s",
                address,
                entries,
                error,
            )
            return
        logger.warning(
            "cluster hint to %s failed (%d entries left to the poll, %d failed calls held "
            "back; one line per %.0f s per target): %s",
            address,
            entries,
            0 if failing is None else failing.held_back,
            self._interval,
            error,
        )
        self._failing[address] = _Failing(last_warning=now, last_failure=now)

    def succeeded(self, address: str) -> None:
        if self._failing.pop(address, None) is not None:
            logger.info("cluster hints reach %s again", address)


class HintSender(AsyncClosing):
    """Batches hints per target replica and sends them through `send`.

    `hint()` is called right after a commit, from the event loop; it records the entries and
    makes sure the target's task runs. Each target's task waits `delay` for more hints,
    takes everything pending (coalesced, at most `MAX_HINT_ITEMS`), awaits one `send`, and
    repeats while anything arrived meanwhile, so at most one call per target is in flight
    and a hint is never older than one call plus `delay` when it leaves. An idle target is
    forgotten. `close()` cancels every task and drops what waits."""

    def __init__(
        self,
        send: SendHint,
        *,
        clock: Clock = SYSTEM_CLOCK,
        delay: float = HINT_DELAY,
        max_pending: int = MAX_PENDING_HINTS,
        failure_log_interval: float = FAILURE_LOG_INTERVAL,
    ) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self._send = send
        self._clock = clock
        self._delay = delay
        self._max_pending = max_pending
        self._targets: dict[str, _Target] = {}
        self._failures = _FailureLog(clock, failure_log_interval)
        self._state = HintSenderState.CREATED
        self._dropped = 0

    @property
    def state(self) -> HintSenderState:
        """The lifecycle state."""
        return self._state

    @property
    def dropped(self) -> int:
        """Entries dropped because a target's pending set was full (the poll recovers them)."""
        return self._dropped

    def pending(self, address: str) -> int:
        """Entries waiting for `address` (not yet in a call)."""
        target = self._targets.get(address)
        return 0 if target is None else len(target.pending)

    def start(self) -> None:
        """Start sending; hints before this are refused, a second call is refused."""
        if self._state is not HintSenderState.CREATED:
            raise RuntimeError(f"the hint sender cannot start: it is {self._state.value}")
        self._state = HintSenderState.RUNNING

    def hint(
        self,
        address: str,
        *,
        conversations: tuple[str, ...] = (),
        settled_posts: tuple[str, ...] = (),
        delivery_agents: tuple[str, ...] = (),
    ) -> None:
        """Record hints for the replica at `address` (its advertised `HOST:PORT`); they leave
        within `delay` or after the call in flight to it. Never blocks, never raises once
        started; after `close()` the hints are dropped."""
        match self._state:
            case HintSenderState.CREATED:
                raise RuntimeError("the hint sender is created; start it before hinting")
            case HintSenderState.CLOSED:
                # A commit that finished while the replica shut down: its rows are the
                # record, and the owner's poll finds them.
                return
            case HintSenderState.RUNNING:
                pass
        entries = [
            *((HintKind.CONVERSATION, value) for value in conversations),
            *((HintKind.SETTLED_POST, value) for value in settled_posts),
            *((HintKind.DELIVERY_AGENT, value) for value in delivery_agents),
        ]
        if not entries:
            return
        target = self._targets.get(address)
        if target is None:
            target = self._targets[address] = _Target()
        pending = target.pending
        for entry in entries:
            if entry in pending:
                pending.move_to_end(entry)
                continue
            pending[entry] = None
            if len(pending) > self._max_pending:
                pending.popitem(last=False)
                self._dropped += 1
        if target.task is None:
            target.task = asyncio.create_task(
                self._target_loop(address, target), name=f"hints to {address}"
            )

    async def close(self) -> None:
        """Cancel every target's task (a call in flight ends) and drop what waits;
        idempotent, safe before `start()`."""
        if self._state is HintSenderState.CLOSED:
            return
        self._state = HintSenderState.CLOSED
        tasks = [target.task for target in self._targets.values() if target.task is not None]
        self._targets.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _target_loop(self, address: str, target: _Target) -> None:
        """Gather, send, repeat while anything waits; then forget the idle target."""
        try:
            await self._clock.sleep(self._delay)
            while target.pending:
                batch = self._take(target)
                await self._send_logged(address, batch)
        finally:
            target.task = None
            # Forgotten only if nothing arrived after the last take (the loop ended on an
            # empty set) and the target was not replaced; otherwise the next hint restarts it.
            if not target.pending and self._targets.get(address) is target:
                del self._targets[address]

    def _take(self, target: _Target) -> dict[HintKind, tuple[str, ...]]:
        """Remove up to `MAX_HINT_ITEMS` of the oldest pending entries, grouped by kind."""
        grouped: dict[HintKind, list[str]] = {kind: [] for kind in HintKind}
        for _ in range(min(len(target.pending), MAX_HINT_ITEMS)):
            (kind, value), _ = target.pending.popitem(last=False)
            grouped[kind].append(value)
        return {kind: tuple(values) for kind, values in grouped.items()}

    async def _send_logged(self, address: str, batch: dict[HintKind, tuple[str, ...]]) -> None:
        """One call; a failure is logged (rate-limited per target), never raised."""
        try:
            await self._send(
                address,
                batch[HintKind.CONVERSATION],
                batch[HintKind.SETTLED_POST],
                batch[HintKind.DELIVERY_AGENT],
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:  # any failure: the rows stay, the poll finds them
            self._failures.failed(address, error, sum(map(len, batch.values())))
        else:
            self._failures.succeeded(address)


__all__ = [
    "FAILURES_REMEMBERED",
    "FAILURE_LOG_INTERVAL",
    "HINT_DELAY",
    "MAX_HINT_ITEMS",
    "MAX_PENDING_HINTS",
    "ClusterHintsPort",
    "HintKind",
    "HintSender",
    "HintSenderState",
    "HintUnsent",
    "SendHint",
    "parse_settled_post",
    "settled_post",
]

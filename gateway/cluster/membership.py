"""A replica's membership of its cluster: its incarnation, its lease, the partitions it holds,
and where every other partition is answered (cluster.md §3.1, §3.2, §3.5).

`membership = await Membership.start(table, replica_id=..., address=..., on_lost=...,
on_claimed=..., on_surplus=...)` joins as a fresh incarnation and starts the one task it owns,
which runs three loops: beats, the lease watch and claim passes. Callers may rely on:

- **The lease** ends, on the injected monotonic clock, at the send time of the last beat that
  matched its row + `lease_ttl` − `safety_margin` (the join counts as the first beat): strictly
  before any other replica can judge this one dead in database time. Once it has ended, or a
  beat or serving mark matched no row (fenced or replaced), or a view shows a partition this
  incarnation holds held by another, `on_lost(reason)` is called exactly once, the loops stop
  and the state is LOST: the host then ends every stream UNAVAILABLE, accepts no call and exits
  non-zero (cluster.md §3.5). Nothing else is done for it: there is no "carry on without those
  partitions".
- **Claims** start only once SERVING (`serving()`) and once the incarnation's beats have been
  fresh for one TTL — no gap between two matched beats longer than two beat intervals (so a
  database that was away does not make the first replica back claim everyone's partitions,
  cluster.md §3.1, §9.4). The one exception: partitions held by an *older incarnation of this
  replica id* (a restart) are claimed at the first pass after `start`, even before
  `serving()`, since the join fenced that incarnation (cluster.md §3.1). Each pass (every
  `claim_interval`) reads a view, computes rendezvous over the live serving replicas, and
  claims every partition assigned here whose holder is none, dead, fenced or an older
  incarnation. `on_claimed({partition: epoch})` is called after the claim committed: the host
  builds a partition's state only from rows it reads after that call (cluster.md §3.5). A
  partition found held by this incarnation that it did not know of (a claim whose COMMIT answer
  was lost) is reported the same way.
- **Nothing is claimed from a live holder.** A partition this replica holds that rendezvous now
  assigns to another live serving replica — one this replica's views have shown live and
  serving for at least one TTL — is offered once through `on_surplus(partitions)`, looked for
  at most every `surplus_interval` (cluster.md §3.2 Hysteresis); after `withdraw()` every
  partition held is, at once. The host releases an offered partition through
  its writer after that partition's last unit (cluster.md §3.2) and then calls
  `released(partition)`; until then the partition stays here.
- **Routing**: `route(p)` answers from the last view (or from this replica's own holdings): the
  live holder's id, address and epoch, or None when no live replica holds p or its holder's
  beat is older than `ROUTE_BEAT_AGE` (cluster.md §9.1). The view is read
  every `claim_interval`; `await refresh()` reads one now (concurrent callers share a read that
  started after they asked), `refresh_soon()` asks the loop to read one at once. `holds(p,
  epoch)` says whether this incarnation holds p at exactly that epoch.
- Callbacks run on the event loop, in the membership's task or in the caller of `serving()`,
  `withdraw()` or `refresh()`; they must not block, and an exception they raise is logged.
- **Shutdown order** (cluster.md §9.3): `withdraw()` (the row leaves assignment and every held
  partition is offered), the host releases each through its writer and reports `released`,
  the host ends streams and closes its writer, then `close()` (stops the task, writes nothing:
  the row is left not serving), then the table's own close. `close()` is idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.cluster.partitions import assignment, rendezvous_owner
from gateway.cluster.routing import ROUTE_BEAT_AGE
from gateway.cluster.table import MembershipTable, MembershipUnavailable, View

logger = logging.getLogger(__name__)

T = TypeVar("T")

BEAT_INTERVAL: Final = 1.5
"""Seconds between beats (cluster.md §3.1).

A quarter of the TTL: three beats may fail or run late before the lease is at risk."""

LEASE_TTL: Final = 6.0
"""Seconds after its last beat, in database time, at which another replica judges a replica
dead (cluster.md §3.1).

Short enough that a lost replica's partitions move well within the 15 s failover goal (§9.1),
long enough to stay at least 4× the worst event-loop lag we measure."""

CLAIM_INTERVAL: Final = 1.0
"""Seconds between claim passes, which also refresh the routing view (cluster.md §3.2, §4.1).

A dead replica's partitions are claimed at most this long after its TTL ran out, and a cached
route is at most this old."""

SAFETY_MARGIN: Final = 1.0
"""Seconds by which a replica's own lease ends before the TTL its beat gives it (cluster.md
§3.1): covers the delay between sending a beat and the database stamping it, and clock rate
differences, so a replica stops before anyone can judge it dead and claim its partitions."""


SURPLUS_INTERVAL: Final = 5.0
"""Seconds between two looks for surplus partitions to hand over (cluster.md §3.2 Hysteresis).

With the rule that a partition goes only to a replica seen serving and fresh for one TTL, one
late beat does not make partitions travel back and forth."""

FORGET_AFTER: Final = 3600.0
"""Seconds without a beat (database time) after which a replica row that holds no partition is
deleted (cluster.md §3.1): a Deployment's pod names change at every restart, and every view
reads every row."""

FORGET_INTERVAL: Final = 60.0
"""Seconds between two deletions of rows of replicas gone for good (each replica runs it; it
is idempotent and cheap)."""

STATUS_RECENT: Final = 60.0
"""Seconds since its last beat within which `status()` still lists a replica that holds no
partition (cluster.md §3.1: rows of replicas gone for good are not shown)."""


class MembershipState(enum.Enum):
    """Where a `Membership` is in its life."""

    JOINED = "joined"
    """Beating as a fresh incarnation; not counted for assignment, claims nothing."""
    SERVING = "serving"
    """Counted for assignment; claims what rendezvous assigns here once warm."""
    WITHDRAWN = "withdrawn"
    """Left assignment for shutdown: claims nothing, offers everything it holds."""
    LOST = "lost"
    """The lease is lost and `on_lost` was called: the host exits."""
    CLOSED = "closed"
    """`close()` ran."""


class LeaseLoss(enum.Enum):
    """Why a replica's lease ended (what `on_lost` is given)."""

    EXPIRED = "expired"
    """No beat matched in time: the lease ran out on the monotonic clock."""
    FENCED = "fenced"
    """A beat or serving mark matched no row: a claimer fenced this incarnation, or a newer
    incarnation of the replica id joined."""
    TAKEN = "taken"
    """A view shows a partition this incarnation holds held by another (it was fenced)."""


class MembershipStateError(Exception):
    """A call the membership's state refuses (named in the message)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MembershipSettings:
    """Membership timings (seconds); the defaults are the module's constants."""

    beat_interval: float = BEAT_INTERVAL
    """Seconds between beats."""
    lease_ttl: float = LEASE_TTL
    """Seconds of database time after which a replica without a beat is dead."""
    claim_interval: float = CLAIM_INTERVAL
    """Seconds between claim passes and routing refreshes."""
    safety_margin: float = SAFETY_MARGIN
    """Seconds by which the own lease ends before the TTL."""
    surplus_interval: float = SURPLUS_INTERVAL
    """Seconds between two looks for surplus partitions."""
    forget_after: float = FORGET_AFTER
    """Seconds without a beat after which a replica row holding nothing is deleted."""
    forget_interval: float = FORGET_INTERVAL
    """Seconds between two such deletions."""

    def __post_init__(self) -> None:
        names = (
            "beat_interval",
            "lease_ttl",
            "claim_interval",
            "safety_margin",
            "surplus_interval",
            "forget_after",
            "forget_interval",
        )
        for name in names:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        if self.forget_after <= self.lease_ttl:
            raise ValueError(
                "forget_after must be above lease_ttl: only dead replicas are forgotten"
            )
        if self.beat_interval >= self.lease_ttl - self.safety_margin:
            raise ValueError(
                "beat_interval must be below lease_ttl - safety_margin, or the lease ends "
                "between two beats"
            )


@dataclass(frozen=True, slots=True)
class Route:
    """Where a partition is answered."""

    replica_id: str
    address: str
    """The holder's advertised address."""
    epoch: int
    """The epoch the holder holds the partition at; a forwarded call carries it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaStatus:
    """One replica as the last view saw it (for `harness status`)."""

    replica_id: str
    incarnation: int
    address: str
    serving: bool
    fenced: bool
    live: bool
    beat_age: float
    """Seconds since its last beat, in database time."""
    partitions: int
    """Partitions it holds (this incarnation)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MembershipStatus:
    """This replica's membership and the cluster as the last view saw it, as plain data."""

    replica_id: str
    incarnation: int
    state: MembershipState
    lease_remaining: float
    """Seconds until the own lease ends on the monotonic clock (≤ 0 once it has)."""
    claiming: bool
    """SERVING and warm: claim passes may claim."""
    claim_passes: int
    """Claim passes completed since start (those that read a view)."""
    partitions: int
    """P, the cluster's partition count."""
    owned: int
    """Partitions this incarnation holds."""
    offered: int
    """Of those, offered for hand-over and not yet released."""
    unowned: int
    """Partitions without a live holder in the last view."""
    replicas: tuple[ReplicaStatus, ...]
    """By id, the replicas that beat within `STATUS_RECENT` or hold a partition."""


class _LeaseEnded(Exception):
    """Ends the membership's loops after `on_lost` was called."""


OnLost = Callable[[LeaseLoss], None]
OnClaimed = Callable[[Mapping[int, int]], None]
OnSurplus = Callable[[frozenset[int]], None]


class Membership:
    """One replica incarnation's membership; obtain one with `await Membership.start(...)`."""

    def __init__(
        self,
        table: MembershipTable,
        *,
        replica_id: str,
        address: str,
        incarnation: int,
        joined_at: float,
        view: View,
        clock: Clock,
        settings: MembershipSettings,
        on_lost: OnLost,
        on_claimed: OnClaimed,
        on_surplus: OnSurplus,
    ) -> None:
        """Wrap a joined incarnation; use `Membership.start` instead."""
        self._table = table
        self.replica_id: Final = replica_id
        self.address: Final = address
        self.incarnation: Final = incarnation
        """This start's incarnation: the fence every group of its writer carries."""
        self._clock = clock
        self._settings = settings
        self._on_lost = on_lost
        self._on_claimed = on_claimed
        self._on_surplus = on_surplus
        self._state = MembershipState.JOINED
        self._joined_at = joined_at
        self._lease_end = joined_at + settings.lease_ttl - settings.safety_margin
        # The join is the first beat; freshness restarts after any gap over two intervals.
        self._last_beat = joined_at
        self._fresh_since = joined_at
        # Other replicas by id: (incarnation, when our views first showed it live and serving).
        self._serving_since: dict[str, tuple[int, float]] = {}
        self._surplus_looked: float | None = None
        self._forgot: float | None = None
        self._view = view
        self._partitions = len(view.partitions)
        self._owned: dict[int, int] = {}
        # Reads are numbered as they start; a partition's holding is judged only against views
        # read after it changed here (a view read before a claim committed still shows the old
        # holder, one read before a release was reported still shows us).
        self._reads_started = 0
        self._view_read = 0
        self._changed_at: dict[int, int] = {}
        self._offered: set[int] = set()
        self._passes = 0
        self._wake = asyncio.Event()
        self._refresh_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._loops: set[asyncio.Task[None]] = set()

    @classmethod
    async def start(
        cls,
        table: MembershipTable,
        *,
        replica_id: str,
        address: str,
        on_lost: OnLost,
        on_claimed: OnClaimed,
        on_surplus: OnSurplus,
        clock: Clock = SYSTEM_CLOCK,
        settings: MembershipSettings | None = None,
    ) -> Membership:
        """Join as a fresh incarnation, read the first view and start the membership's task.

        Raises:
            MembershipUnavailable: the database could not be asked (nothing is running).
            ValueError: an empty replica id or address, or a database without partitions.
        """
        if not replica_id.strip() or not address.strip():
            raise ValueError("a cluster replica needs a replica id and an advertised address")
        settings = settings or MembershipSettings()
        sent = clock.monotonic()
        joined = await table.join(replica_id, address)
        view = await table.read_view(settings.lease_ttl)
        if not view.partitions:
            raise ValueError("the database has no partitions: set the cluster up first")
        membership = cls(
            table,
            replica_id=replica_id,
            address=address,
            incarnation=joined.incarnation,
            joined_at=sent,
            view=view,
            clock=clock,
            settings=settings,
            on_lost=on_lost,
            on_claimed=on_claimed,
            on_surplus=on_surplus,
        )
        membership._task = asyncio.get_running_loop().create_task(
            membership._run(), name=f"harness-cluster-membership:{replica_id}"
        )
        return membership

    @property
    def state(self) -> MembershipState:
        """The membership's current state."""
        return self._state

    def owned(self) -> Mapping[int, int]:
        """The partitions this incarnation holds, each with its epoch (a copy)."""
        return dict(self._owned)

    def holds(self, partition: int, epoch: int) -> bool:
        """Whether this incarnation holds `partition` at exactly `epoch` and its lease holds."""
        live = self._state in (MembershipState.SERVING, MembershipState.WITHDRAWN)
        return live and self._owned.get(partition) == epoch

    def route(self, partition: int) -> Route | None:
        """Where `partition` is answered, or None when no live replica holds it or its
        holder's beat is older than `ROUTE_BEAT_AGE`."""
        epoch = self._owned.get(partition)
        if epoch is not None:
            return Route(self.replica_id, self.address, epoch)
        if not 0 <= partition < len(self._view.partitions):
            return None
        row = self._view.partitions[partition]
        holder = self._view.live_holder(row)
        if holder is None or holder.replica_id == self.replica_id:
            return None
        if holder.beat_age > ROUTE_BEAT_AGE:  # maybe a vanished node (cluster.md §9.1)
            return None
        return Route(holder.replica_id, holder.address, row.epoch)

    async def serving(self) -> None:
        """Mark this incarnation serving: it joins assignment and, once warm, claims.

        Raises:
            MembershipStateError: not JOINED.
            MembershipUnavailable: the database could not be asked (still JOINED).
        """
        self._require(MembershipState.JOINED, "serving")
        if not await self._table.set_serving(self.replica_id, self.incarnation, True):
            self._lose(LeaseLoss.FENCED)
            raise MembershipStateError("the lease was lost while marking the replica serving")
        if self._state is MembershipState.JOINED:
            self._state = MembershipState.SERVING
            logger.info(
                "cluster replica serving replica=%s incarnation=%d",
                self.replica_id,
                self.incarnation,
            )
            self._wake.set()

    async def withdraw(self) -> None:
        """Leave assignment for shutdown: the row is marked not serving, nothing more is
        claimed, and every held partition is offered through `on_surplus`.

        Raises:
            MembershipStateError: not JOINED or SERVING.
            MembershipUnavailable: the database could not be asked (the state is unchanged).
        """
        self._require(MembershipState.SERVING, "withdraw", also=MembershipState.JOINED)
        if not await self._table.set_serving(self.replica_id, self.incarnation, False):
            self._lose(LeaseLoss.FENCED)
            raise MembershipStateError("the lease was lost while leaving assignment")
        if self._state in (MembershipState.JOINED, MembershipState.SERVING):
            self._state = MembershipState.WITHDRAWN
            logger.info(
                "cluster replica withdrawn replica=%s incarnation=%d held=%d",
                self.replica_id,
                self.incarnation,
                len(self._owned),
            )
            self._offer(set(self._owned))

    def released(self, partition: int) -> None:
        """The host's writer committed the release of `partition`: it is no longer held."""
        if self._owned.pop(partition, None) is not None:
            self._changed_at[partition] = self._reads_started
            logger.info(
                "cluster partition released replica=%s partition=%d", self.replica_id, partition
            )
        self._offered.discard(partition)

    async def refresh(self) -> None:
        """Read a view now (after a NOT_OWNER); callers at once share one read.

        Raises:
            MembershipUnavailable: the database could not be asked.
        """
        asked = self._reads_started
        async with self._refresh_lock:
            if self._view_read > asked:
                return
            view, ticket = await self._read_view()
            self._apply(view, ticket)

    def refresh_soon(self) -> None:
        """Ask the membership's task to read a view at once (for callers that cannot wait)."""
        self._wake.set()

    def status(self) -> MembershipStatus:
        """This replica and the cluster as the last view saw them (`harness status`)."""
        view = self._view
        held: dict[str, int] = {}
        unowned = 0
        for row in view.partitions:
            holder = view.live_holder(row)
            if holder is None:
                unowned += 1
            else:
                held[holder.replica_id] = held.get(holder.replica_id, 0) + 1
        return MembershipStatus(
            replica_id=self.replica_id,
            incarnation=self.incarnation,
            state=self._state,
            lease_remaining=self._lease_end - self._clock.monotonic(),
            claiming=self._claiming(),
            claim_passes=self._passes,
            partitions=self._partitions,
            owned=len(self._owned),
            offered=len(self._offered),
            unowned=unowned,
            replicas=tuple(
                ReplicaStatus(
                    replica_id=row.replica_id,
                    incarnation=row.incarnation,
                    address=row.address,
                    serving=row.serving,
                    fenced=row.fenced,
                    live=row.live,
                    beat_age=row.beat_age,
                    partitions=held.get(row.replica_id, 0),
                )
                for row in sorted(view.replicas.values(), key=lambda r: r.replica_id)
                if row.beat_age <= STATUS_RECENT or held.get(row.replica_id, 0)
            ),
        )

    async def close(self) -> None:
        """Stop the membership's task; writes nothing. Idempotent."""
        if self._state is not MembershipState.LOST:
            self._state = MembershipState.CLOSED
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._state = MembershipState.CLOSED

    def _require(
        self, state: MembershipState, call: str, *, also: MembershipState | None = None
    ) -> None:
        if self._state is not state and self._state is not also:
            raise MembershipStateError(f"{call} refused: the membership is {self._state.value}")

    def _claiming(self) -> bool:
        now = self._clock.monotonic()
        fresh = now - self._last_beat <= 2 * self._settings.beat_interval
        warm = fresh and now - self._fresh_since >= self._settings.lease_ttl
        return self._state is MembershipState.SERVING and warm

    async def _run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                for loop in (self._beat_loop(), self._lease_loop(), self._claim_loop()):
                    self._loops.add(group.create_task(loop))
        except* _LeaseEnded:
            pass

    async def _lease_loop(self) -> None:
        while True:
            remaining = self._lease_end - self._clock.monotonic()
            if remaining <= 0:
                self._lose(LeaseLoss.EXPIRED)
                raise _LeaseEnded
            await self._clock.sleep(remaining)

    async def _beat_loop(self) -> None:
        while True:
            await self._clock.sleep(self._settings.beat_interval)
            sent = self._clock.monotonic()
            try:
                stamped = await self._table.beat(self.replica_id, self.incarnation)
            except MembershipUnavailable as error:
                logger.warning("cluster beat failed replica=%s: %s", self.replica_id, error)
                continue
            if stamped is None:
                self._lose(LeaseLoss.FENCED)
                raise _LeaseEnded
            end = sent + self._settings.lease_ttl - self._settings.safety_margin
            self._lease_end = max(self._lease_end, end)
            if sent - self._last_beat > 2 * self._settings.beat_interval:
                self._fresh_since = sent
            self._last_beat = sent

    def beat_committed(self, sent: float) -> None:
        """A write of this incarnation that also stamped its beat committed; `sent` is the
        monotonic time its statement left. It extends the lease as a beat does, so a beat
        waiting behind the writer's group (both lock the replica's row) costs no lease."""
        if self._state in (MembershipState.LOST, MembershipState.CLOSED):
            return
        end = sent + self._settings.lease_ttl - self._settings.safety_margin
        self._lease_end = max(self._lease_end, end)
        if sent > self._last_beat:
            if sent - self._last_beat > 2 * self._settings.beat_interval:
                self._fresh_since = sent
            self._last_beat = sent

    async def _claim_loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self._pass()
                await self._forget()
            except MembershipUnavailable as error:
                logger.warning("cluster claim pass failed replica=%s: %s", self.replica_id, error)
            await self._wait(self._settings.claim_interval)

    async def _forget(self) -> None:
        """Delete rows of replicas gone for good, at most every `forget_interval`."""
        now = self._clock.monotonic()
        if self._forgot is not None and now - self._forgot < self._settings.forget_interval:
            return
        self._forgot = now
        await self._table.forget_gone(self._settings.forget_after)

    async def _wait(self, seconds: float) -> None:
        """Sleep `seconds` on the clock, or less if `refresh_soon` or `serving` wakes us."""
        if self._wake.is_set():
            return
        sleeper = asyncio.ensure_future(self._clock.sleep(seconds))
        waker = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait((sleeper, waker), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in (sleeper, waker):
                waiting.cancel()
            await asyncio.gather(sleeper, waker, return_exceptions=True)

    async def _read_view(self) -> tuple[View, int]:
        self._reads_started += 1
        ticket = self._reads_started
        return await self._table.read_view(self._settings.lease_ttl), ticket

    async def _pass(self) -> None:
        """One claim pass: read a view, adopt and check holdings, claim, offer surplus."""
        async with self._refresh_lock:
            view, ticket = await self._read_view()
            self._apply(view, ticket)
        if self._state is MembershipState.LOST:
            raise _LeaseEnded
        self._passes += 1
        await self._reclaim(view)
        if not self._claiming():
            self._offer_surplus()
            return
        me = view.replicas.get(self.replica_id)
        if me is None or not me.live or me.incarnation != self.incarnation:
            # The database does not see our beat as fresh: the beat loop decides what that
            # means; claiming now could only race our own fencing.
            return
        assigned = self._assigned(view).get(self.replica_id, frozenset())
        wanted = [
            partition
            for partition in sorted(assigned)
            if partition not in self._owned and view.live_holder(view.partitions[partition]) is None
        ]
        if wanted:
            claimed = await self._table.claim(
                self.replica_id, self.incarnation, wanted, self._settings.lease_ttl
            )
            # The state may have moved while the claim ran (mypy keeps the narrowing).
            state: MembershipState = self._state
            if state is MembershipState.LOST:
                raise _LeaseEnded
            if state is not MembershipState.SERVING:
                # Withdrawn while the claim ran: what it claimed is offered at once.
                self._take(claimed)
                self._offer(set(claimed))
                return
            self._take(claimed)
        self._offer_surplus()

    async def _reclaim(self, view: View) -> None:
        """Claim what an older incarnation of this replica id held: the join fenced it."""
        if self._state not in (MembershipState.JOINED, MembershipState.SERVING):
            return
        older = [
            row.partition
            for row in view.partitions
            if row.holder == self.replica_id
            and row.incarnation is not None
            and row.incarnation < self.incarnation
        ]
        if older:
            claimed = await self._table.claim(
                self.replica_id, self.incarnation, older, self._settings.lease_ttl
            )
            state: MembershipState = self._state  # it may have moved while the claim ran
            if state is MembershipState.LOST:
                raise _LeaseEnded
            self._take(claimed)

    def _take(self, claimed: Mapping[int, int]) -> None:
        # A view read while the claim's answer travelled may have reported it first.
        new = {p: epoch for p, epoch in claimed.items() if self._owned.get(p) != epoch}
        if not new:
            return
        for partition, epoch in new.items():
            self._owned[partition] = epoch
            self._changed_at[partition] = self._reads_started
            self._offered.discard(partition)
        self._call("on_claimed", self._on_claimed, new)

    def _apply(self, view: View, ticket: int) -> None:
        """Take a view for routing and check this incarnation's holdings against it."""
        if ticket <= self._view_read:
            return
        if len(view.partitions) != self._partitions:
            logger.error(
                "cluster partition count changed under a running replica found=%d expected=%d",
                len(view.partitions),
                self._partitions,
            )
            return
        self._view_read = ticket
        self._view = view
        now = self._clock.monotonic()
        serving_since: dict[str, tuple[int, float]] = {}
        for replica in view.replicas.values():
            if replica.live and replica.serving:
                seen = self._serving_since.get(replica.replica_id)
                if seen is None or seen[0] != replica.incarnation:
                    seen = (replica.incarnation, now)
                serving_since[replica.replica_id] = seen
        self._serving_since = serving_since
        if self._state not in (MembershipState.SERVING, MembershipState.WITHDRAWN):
            return
        found: dict[int, int] = {}
        for row in view.partitions:
            partition = row.partition
            if ticket <= self._changed_at.get(partition, 0):
                continue  # read before our own claim or release of it was known here
            ours = row.holder == self.replica_id and row.incarnation == self.incarnation
            if ours and partition not in self._owned:
                found[partition] = row.epoch
            elif not ours and partition in self._owned:
                if partition in self._offered:
                    # Released through the writer, not yet reported: no longer ours.
                    self.released(partition)
                    continue
                logger.error(
                    "cluster partition held by another replica=%s partition=%d holder=%s",
                    self.replica_id,
                    partition,
                    row.holder,
                )
                self._lose(LeaseLoss.TAKEN)
                return
        if found:
            logger.warning(
                "cluster partitions found held by this incarnation replica=%s count=%d",
                self.replica_id,
                len(found),
            )
            self._take(found)

    def _assigned(self, view: View) -> dict[str, frozenset[int]]:
        serving = [row.replica_id for row in view.replicas.values() if row.live and row.serving]
        return assignment(self._partitions, serving)

    def _offer_surplus(self) -> None:
        if self._state is MembershipState.WITHDRAWN:
            self._offer(set(self._owned))
            return
        if self._state is not MembershipState.SERVING or not self._owned:
            return
        view = self._view
        me = view.replicas.get(self.replica_id)
        if me is None or not me.live or not me.serving or me.incarnation != self.incarnation:
            # A view that does not count us would offer everything; our lease decides that.
            return
        now = self._clock.monotonic()
        looked = self._surplus_looked
        if looked is not None and now - looked < self._settings.surplus_interval:
            return
        self._surplus_looked = now
        serving = [row.replica_id for row in view.replicas.values() if row.live and row.serving]
        settled = {
            replica_id
            for replica_id, (_, since) in self._serving_since.items()
            if now - since >= self._settings.lease_ttl
        }
        surplus: set[int] = set()
        for partition in self._owned:
            owner = rendezvous_owner(partition, serving)
            if owner is not None and owner != self.replica_id and owner in settled:
                surplus.add(partition)
        self._offer(surplus)

    def _offer(self, partitions: set[int]) -> None:
        new = partitions - self._offered
        if not new:
            return
        self._offered |= new
        logger.info(
            "cluster partitions offered for hand-over replica=%s count=%d",
            self.replica_id,
            len(new),
        )
        self._call("on_surplus", self._on_surplus, frozenset(new))

    def _lose(self, reason: LeaseLoss) -> None:
        if self._state in (MembershipState.LOST, MembershipState.CLOSED):
            return
        self._state = MembershipState.LOST
        logger.error(
            "cluster lease lost replica=%s incarnation=%d reason=%s",
            self.replica_id,
            self.incarnation,
            reason.value,
        )
        self._call("on_lost", self._on_lost, reason)
        # Inside a loop the caller raises `_LeaseEnded`, which ends its siblings; called from
        # the host (`serving`, `withdraw`, `refresh`) the loops are stopped from outside.
        task = self._task
        if task is not None and asyncio.current_task() not in self._loops:
            task.cancel()

    def _call(self, name: str, handler: Callable[[T], None], argument: T) -> None:
        try:
            handler(argument)
        except Exception:  # the host's defect must not stop the membership's loops
            logger.exception("cluster membership %s handler failed", name)


__all__ = [
    "BEAT_INTERVAL",
    "CLAIM_INTERVAL",
    "FORGET_AFTER",
    "FORGET_INTERVAL",
    "LEASE_TTL",
    "SAFETY_MARGIN",
    "STATUS_RECENT",
    "SURPLUS_INTERVAL",
    "LeaseLoss",
    "Membership",
    "MembershipSettings",
    "MembershipState",
    "MembershipStateError",
    "MembershipStatus",
    "ReplicaStatus",
    "Route",
]

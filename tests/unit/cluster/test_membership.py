"""`Membership` through its table seam, on a fake clock (cluster.md §3.1, §3.2, §3.5): the lease
on the monotonic clock, claims only once warm, a lost claim answer adopted from the next view,
and a lease lost exactly once. The real table is `tests/integration/cluster/`."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Collection, Mapping

import pytest

from gateway.clock import FakeClock
from gateway.cluster.membership import (
    LeaseLoss,
    Membership,
    MembershipSettings,
    MembershipState,
    MembershipStateError,
    Route,
)
from gateway.cluster.partitions import assignment
from gateway.cluster.routing import ROUTE_BEAT_AGE
from gateway.cluster.table import (
    Joined,
    MembershipUnavailable,
    PartitionRow,
    ReplicaRow,
    View,
)
from tests.support import eventually

SETTINGS = MembershipSettings(
    beat_interval=1.0, lease_ttl=6.0, claim_interval=1.0, safety_margin=1.0
)
P = 8


class FakeTable:
    """The membership tables in memory, database time read from the shared fake clock."""

    def __init__(self, clock: FakeClock, partitions: int = P) -> None:
        self.clock = clock
        self.replicas: dict[str, dict[str, object]] = {}
        self.rows: list[list[object]] = [[None, None, 0] for _ in range(partitions)]
        self.unavailable = False
        self.lose_claim_answer = False
        self.beats = 0
        self.incarnations = 0
        self.forgotten: list[float] = []

    def _now(self) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.clock.time(), datetime.UTC)

    def _check(self) -> None:
        if self.unavailable:
            raise MembershipUnavailable("the fake database is away")

    def _current(self, replica_id: str, incarnation: int) -> dict[str, object] | None:
        row = self.replicas.get(replica_id)
        if row is None or row["incarnation"] != incarnation or row["fenced"]:
            return None
        return row

    async def join(self, replica_id: str, address: str) -> Joined:
        self._check()
        self.incarnations += 1
        incarnation = self.incarnations
        self.replicas[replica_id] = {
            "incarnation": incarnation,
            "address": address,
            "beat": self.clock.time(),
            "serving": False,
            "fenced": False,
        }
        return Joined(incarnation=incarnation, database_time=self._now())

    async def beat(self, replica_id: str, incarnation: int) -> datetime.datetime | None:
        self._check()
        row = self._current(replica_id, incarnation)
        if row is None:
            return None
        self.beats += 1
        row["beat"] = self.clock.time()
        return self._now()

    async def set_serving(self, replica_id: str, incarnation: int, serving: bool) -> bool:
        self._check()
        row = self._current(replica_id, incarnation)
        if row is not None:
            row["serving"] = serving
        return row is not None

    async def read_view(self, lease_ttl: float) -> View:
        self._check()
        now = self.clock.time()
        return View(
            database_time=self._now(),
            replicas={
                replica_id: ReplicaRow(
                    replica_id=replica_id,
                    incarnation=int(str(row["incarnation"])),
                    address=str(row["address"]),
                    serving=bool(row["serving"]),
                    fenced=bool(row["fenced"]),
                    beat_age=now - float(str(row["beat"])),
                    live=not row["fenced"] and now - float(str(row["beat"])) <= lease_ttl,
                )
                for replica_id, row in self.replicas.items()
            },
            partitions=tuple(
                PartitionRow(
                    partition=p,
                    holder=None if h is None else str(h),
                    incarnation=None if i is None else int(str(i)),
                    epoch=int(str(e)),
                )
                for p, (h, i, e) in enumerate(self.rows)
            ),
        )

    async def claim(
        self, replica_id: str, incarnation: int, partitions: Collection[int], lease_ttl: float
    ) -> dict[int, int]:
        self._check()
        if self._current(replica_id, incarnation) is None:
            return {}
        view = await self.read_view(lease_ttl)
        claimed: dict[int, int] = {}
        for p in sorted(partitions):
            if view.live_holder(view.partitions[p]) is not None:
                continue
            self.rows[p] = [replica_id, incarnation, int(str(self.rows[p][2])) + 1]
            claimed[p] = int(str(self.rows[p][2]))
        if self.lose_claim_answer:
            self.lose_claim_answer = False
            raise MembershipUnavailable("the claim's COMMIT answer was lost")
        return claimed

    async def forget_gone(self, silent_for: float) -> int:
        self._check()
        self.forgotten.append(silent_for)
        return 0

    async def release(self, partition: int, replica_id: str, incarnation: int) -> bool:
        self._check()
        if self.rows[partition][:2] != [replica_id, incarnation]:
            return False
        self.rows[partition][:2] = [None, None]
        return True


class Host:
    def __init__(self) -> None:
        self.lost: list[LeaseLoss] = []
        self.claimed: list[dict[int, int]] = []
        self.offered: list[frozenset[int]] = []

    def on_lost(self, reason: LeaseLoss) -> None:
        self.lost.append(reason)

    def on_claimed(self, partitions: Mapping[int, int]) -> None:
        self.claimed.append(dict(partitions))

    def on_surplus(self, partitions: frozenset[int]) -> None:
        self.offered.append(partitions)


async def start(
    table: FakeTable, clock: FakeClock, host: Host, replica_id: str = "a"
) -> Membership:
    return await Membership.start(
        table,
        replica_id=replica_id,
        address=f"{replica_id}:7443",
        on_lost=host.on_lost,
        on_claimed=host.on_claimed,
        on_surplus=host.on_surplus,
        clock=clock,
        settings=SETTINGS,
    )


async def step(clock: FakeClock, seconds: float, *, by: float = 0.5) -> None:
    """Advance the clock in small steps, letting the loops run after each."""
    moved = 0.0
    await settle()
    while moved < seconds:
        clock.advance(by)
        moved += by
        await settle()


async def settle() -> None:
    """Let every ready coroutine run until it waits again (the fake table never blocks)."""
    for _ in range(20):
        await asyncio.sleep(0)


def test_settings_refuse_a_beat_interval_the_lease_cannot_cover() -> None:
    with pytest.raises(ValueError, match="beat_interval"):
        MembershipSettings(beat_interval=5.0, lease_ttl=6.0, safety_margin=1.0)
    with pytest.raises(ValueError, match="lease_ttl"):
        MembershipSettings(lease_ttl=0)
    with pytest.raises(ValueError, match="forget_after"):
        MembershipSettings(forget_after=5.0)


async def test_rows_of_replicas_gone_for_good_are_forgotten_once_a_minute() -> None:
    clock, host = FakeClock(), Host()
    table = FakeTable(clock)
    membership = await start(table, clock, host)
    try:
        await step(clock, 150.0, by=1.0)
        assert table.forgotten == [3600.0] * 3
        assert host.lost == []
    finally:
        await membership.close()


async def test_a_beating_replica_keeps_its_lease_and_claims_only_after_one_ttl() -> None:
    clock, host = FakeClock(), Host()
    table = FakeTable(clock)
    membership = await start(table, clock, host)
    try:
        await membership.serving()
        await step(clock, SETTINGS.lease_ttl - 1.0)
        assert membership.owned() == {}
        assert not membership.status().claiming
        await step(clock, 2.0)
        assert membership.owned() == dict.fromkeys(range(P), 1)
        assert host.claimed == [dict.fromkeys(range(P), 1)]
        await step(clock, 30.0)
        assert host.lost == []
        assert membership.status().lease_remaining > 0
        assert table.beats >= 30
    finally:
        await membership.close()
    assert membership.state is MembershipState.CLOSED


async def test_the_lease_ends_on_the_own_clock_ttl_less_the_margin_after_the_last_beat_sent() -> (
    None
):
    clock, host = FakeClock(), Host()
    table = FakeTable(clock)
    membership = await start(table, clock, host)
    try:
        table.unavailable = True
        # Joined at 0: the lease ends at 0 + 6 - 1 = 5, whatever the failing beats do.
        await step(clock, 4.5)
        assert host.lost == []
        await step(clock, 1.0)
        assert host.lost == [LeaseLoss.EXPIRED]
        assert membership.state is MembershipState.LOST
        await step(clock, 10.0)
        assert host.lost == [LeaseLoss.EXPIRED]
        with pytest.raises(MembershipStateError, match="lost"):
            await membership.serving()
    finally:
        await membership.close()


async def test_a_committed_write_group_counts_as_a_beat_while_the_beats_themselves_wait() -> None:
    clock, host = FakeClock(), Host()
    table = FakeTable(clock)
    membership = await start(table, clock, host)
    try:
        # The beats fail (as if waiting behind the writer's group on the replica's row), but
        # the writer's groups commit, each stamping the beat: the lease holds.
        table.unavailable = True
        for _ in range(8):
            await step(clock, 1.0)
            membership.beat_committed(clock.monotonic())
        assert host.lost == []
        # Once the groups stop too, the lease ends TTL less the margin after the last one.
        await step(clock, 4.5)
        assert host.lost == []
        await step(clock, 1.0)
        assert host.lost == [LeaseLoss.EXPIRED]
    finally:
        await membership.close()


async def test_a_beat_that_matches_no_row_loses_the_lease_once_and_stops_the_loops() -> None:
    clock, host = FakeClock(), Host()
    table = FakeTable(clock)
    membership = await start(table, clock, host)
    try:
        table.replicas["a"]["fenced"] = True
        await step(clock, 1.0)
        assert host.lost == [LeaseLoss.FENCED]
        beats = table.beats
        await step(clock, 10.0)
        assert host.lost == [LeaseLoss.FENCED]
        assert table.beats == beats
    finally:
        await membership.close()


async def test_a_claim_whose_answer_was_lost_is_found_in_the_next_view_and_reported_once() -> None:
    clock, host = FakeClock(), Host()
    table = FakeTable(clock)
    membership = await start(table, clock, host)
    try:
        await membership.serving()
        table.lose_claim_answer = True
        await step(clock, SETTINGS.lease_ttl + 3.0)
        assert membership.owned() == dict.fromkeys(range(P), 1)
        assert host.claimed == [dict.fromkeys(range(P), 1)]
        assert host.lost == []
    finally:
        await membership.close()


async def test_a_view_showing_a_held_partition_held_by_another_loses_the_lease() -> None:
    clock, host = FakeClock(), Host()
    table = FakeTable(clock)
    membership = await start(table, clock, host)
    try:
        await membership.serving()
        await step(clock, SETTINGS.lease_ttl + 1.0)
        assert len(membership.owned()) == P
        b = await table.join("b", "b:7443")
        table.rows[3] = ["b", b.incarnation, 2]
        await step(clock, 2.0)
        assert host.lost == [LeaseLoss.TAKEN]
        assert not membership.holds(3, 1)
    finally:
        await membership.close()


async def beating(table: FakeTable, clock: FakeClock, replica_id: str, seconds: float) -> None:
    """Let `seconds` pass while `replica_id` (no membership of its own here) keeps beating."""
    for _ in range(round(seconds / 0.5)):
        table.replicas[replica_id]["beat"] = clock.time()
        await step(clock, 0.5)


async def test_a_newcomer_is_offered_its_partitions_once_it_served_one_ttl_and_gets_them_on_release() -> (
    None
):
    clock, host = FakeClock(), Host()
    table = FakeTable(clock)
    membership = await start(table, clock, host)
    try:
        await membership.serving()
        await step(clock, SETTINGS.lease_ttl + 1.0)
        b = await table.join("b", "b:7443")
        await table.set_serving("b", b.incarnation, True)
        due = assignment(P, ["a", "b"])["b"]
        # Hysteresis: nothing moves to a replica seen serving for less than one TTL.
        await beating(table, clock, "b", SETTINGS.lease_ttl - 1.0)
        assert host.offered == []
        await beating(table, clock, "b", SETTINGS.lease_ttl + SETTINGS.surplus_interval)
        assert host.offered == [due]
        assert set(membership.owned()) == set(range(P))
        first = min(due)
        assert await table.release(first, "a", membership.incarnation)
        membership.released(first)
        assert first not in membership.owned()
        await membership.refresh()
        assert membership.route(first) is None
        assert membership.route(max(set(range(P)) - due)) == Route("a", "a:7443", 1)
        assert host.lost == []
    finally:
        await membership.close()


async def test_a_holder_whose_beat_is_older_than_three_seconds_is_not_routed_to() -> None:
    # cluster.md §9.1: a node that vanished (SIGSTOP, lost) is skipped before its lease ends.
    clock, host = FakeClock(), Host()
    table = FakeTable(clock)
    membership = await start(table, clock, host)
    try:
        b = await table.join("b", "b:7443")
        await table.set_serving("b", b.incarnation, True)
        table.rows[3] = ["b", b.incarnation, 1]
        await membership.refresh()
        assert membership.route(3) == Route("b", "b:7443", 1)
        await step(clock, ROUTE_BEAT_AGE - 0.5)
        await membership.refresh()
        assert membership.route(3) == Route("b", "b:7443", 1)
        await step(clock, 1.0)
        await membership.refresh()
        assert membership.route(3) is None
        assert membership.status().unowned == P - 1  # still live: nobody may claim it yet
        table.replicas["b"]["beat"] = clock.time()
        await membership.refresh()
        assert membership.route(3) == Route("b", "b:7443", 1)
        assert host.lost == []
    finally:
        await membership.close()


async def test_a_gap_in_the_beats_restarts_the_wait_before_claiming() -> None:
    clock, host = FakeClock(), Host()
    table = FakeTable(clock)
    membership = await start(table, clock, host)
    try:
        await membership.serving()
        await step(clock, 2.0)
        table.unavailable = True
        await step(clock, 2.5)
        table.unavailable = False
        # Joined at 0, but beats resumed only at about 5: not fresh for one TTL until about 11.
        await step(clock, 4.0)
        assert membership.owned() == {}
        await step(clock, 4.0)
        assert len(membership.owned()) == P
        assert host.lost == []
    finally:
        await membership.close()


async def test_a_restarted_replica_reclaims_its_older_incarnations_partitions_before_serving() -> (
    None
):
    clock, host = FakeClock(), Host()
    table = FakeTable(clock)
    old = await table.join("a", "a:7443")
    table.rows[2] = ["a", old.incarnation, 4]
    table.rows[5] = ["a", old.incarnation, 1]
    membership = await start(table, clock, host)
    try:
        await settle()
        assert membership.owned() == {2: 5, 5: 2}
        assert host.claimed == [{2: 5, 5: 2}]
        assert membership.state is MembershipState.JOINED
        assert not membership.holds(2, 5)
    finally:
        await membership.close()


async def test_an_on_lost_handler_that_raises_is_logged_and_the_lease_is_still_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    table = FakeTable(clock)
    host = Host()

    def broken(reason: LeaseLoss) -> None:
        host.lost.append(reason)
        raise RuntimeError("host defect")

    membership = await Membership.start(
        table,
        replica_id="a",
        address="a:7443",
        on_lost=broken,
        on_claimed=host.on_claimed,
        on_surplus=host.on_surplus,
        clock=clock,
        settings=SETTINGS,
    )
    try:
        table.replicas["a"]["fenced"] = True
        await step(clock, 1.0)

        async def state() -> MembershipState:
            return membership.state

        assert await eventually(state, lambda s: s is MembershipState.LOST) is MembershipState.LOST
        assert host.lost == [LeaseLoss.FENCED]
        assert "on_lost handler failed" in caplog.text
    finally:
        await membership.close()

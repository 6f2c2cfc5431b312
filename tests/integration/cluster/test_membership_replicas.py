"""Replicas' memberships on one real PostgreSQL (cluster.md §3.2, §3.5, §9.1, §9.2, §9.5):
partitions split by rendezvous with one holder each, a silent replica's partitions move after
its TTL in database time and it learns it is fenced, and a newcomer takes nothing from a live
holder before the holder released it."""

from __future__ import annotations

from gateway.cluster.membership import LeaseLoss, Membership, MembershipState, Route
from gateway.cluster.partitions import assignment
from gateway.store.postgres.membership import group_fence
from tests.integration.cluster.membership_support import (
    FAST,
    PacedClock,
    connect,
    holders,
    membership_database,
    paced,
    replica,
)
from tests.servers import PostgresServer
from tests.support import eventually

P = 16
WITHIN = 30.0
"""Seconds a membership change may take to show (a few TTLs, on a loaded machine)."""


async def group_fence_rows(dsn: str, membership: Membership) -> int:
    """Rows `GROUP_FENCE` of this incarnation matches, in a transaction of its own."""
    connection = await connect(dsn)
    try:
        async with connection.transaction():
            sql, parameters = group_fence(membership.replica_id, membership.incarnation, 1)
            return len(await (await connection.execute(sql, parameters)).fetchall())
    finally:
        await connection.close()


def split_as_assigned(a: Membership, b: Membership) -> bool:
    expected = assignment(P, [a.replica_id, b.replica_id])
    return set(a.owned()) == expected[a.replica_id] and set(b.owned()) == expected[b.replica_id]


async def test_two_replicas_split_the_partitions_by_rendezvous_with_one_holder_each(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, P)
    async with replica(dsn, "replica-a") as (a, host_a), replica(dsn, "replica-b") as (b, host_b):

        async def split() -> bool:
            return split_as_assigned(a, b)

        await eventually(split, within=WITHIN)
        rows = await holders(dsn)
        for partition, (holder, incarnation, epoch) in rows.items():
            owner = a if partition in a.owned() else b
            assert (holder, incarnation) == (owner.replica_id, owner.incarnation)
            assert owner.owned()[partition] == epoch
        assert not set(a.owned()) & set(b.owned())
        # Every claim was reported, and the routes agree with the rows.
        assert {p for claim in host_a.claimed for p in claim} >= set(a.owned())
        assert {p for claim in host_b.claimed for p in claim} >= set(b.owned())
        await a.refresh()
        for partition in b.owned():
            assert a.route(partition) == Route(
                "replica-b", "replica-b.cluster:7443", b.owned()[partition]
            )
            assert b.holds(partition, b.owned()[partition])
            assert not a.holds(partition, b.owned()[partition])
        status = a.status()
        assert status.unowned == 0
        assert {r.replica_id: r.partitions for r in status.replicas} == {
            "replica-a": len(a.owned()),
            "replica-b": len(b.owned()),
        }
        assert host_a.lost == []
        assert host_b.lost == []


async def test_a_silent_replica_is_fenced_its_partitions_move_and_it_learns_it_lost_its_lease(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, P)
    async with (
        paced() as pacer,
        replica(dsn, "replica-a") as (a, host_a),
        replica(dsn, "replica-b", clock=pacer.clock) as (b, host_b),
    ):

        async def split() -> bool:
            return split_as_assigned(a, b)

        await eventually(split, within=WITHIN)
        before = dict(b.owned())
        assert before
        # SIGSTOP: b's timers stop, so it neither beats nor claims.
        await pacer.pause()

        async def moved() -> bool:
            owned = a.owned()
            return all(owned.get(p) == epoch + 1 for p, epoch in before.items())

        await eventually(moved, within=WITHIN)
        assert len(a.owned()) == P
        rows = await holders(dsn)
        assert {rows[p][0] for p in before} == {"replica-a"}
        # b's incarnation is fenced: its writer's next group matches nothing ...
        assert await group_fence_rows(dsn, b) == 0
        # ... its beat matches no row ...
        assert await host_b.table.beat(b.replica_id, b.incarnation) is None
        # ... and on SIGCONT within its own lease it learns so from its next beat (FENCED)
        # or its next view (TAKEN), whichever answers first; once, either way.
        pacer.clock.advance(FAST.beat_interval)

        async def b_lost() -> list[LeaseLoss]:
            return host_b.lost

        assert await eventually(b_lost, within=WITHIN) in (
            [LeaseLoss.FENCED],
            [LeaseLoss.TAKEN],
        )
        assert b.state is MembershipState.LOST
        assert not b.holds(min(before), before[min(before)])
        assert host_a.lost == []


async def test_a_replica_whose_lease_runs_out_on_its_own_clock_loses_it_before_anyone_claims(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, P)
    async with paced() as pacer, replica(dsn, "replica-a", clock=pacer.clock) as (a, host):

        async def holds_everything() -> bool:
            return len(a.owned()) == P

        await eventually(holds_everything, within=WITHIN)
        await pacer.pause()
        # SIGCONT after a long pause: the monotonic clock jumped past the lease.
        pacer.clock.advance(FAST.lease_ttl)

        async def lost() -> list[LeaseLoss]:
            return host.lost

        assert await eventually(lost, within=WITHIN) == [LeaseLoss.EXPIRED]
        assert a.state is MembershipState.LOST
        # Judged only by its own clock: nobody has claimed anything from it yet.
        assert {row[0] for row in (await holders(dsn)).values()} == {"replica-a"}


async def test_a_joining_replica_takes_no_partition_from_a_live_holder_until_it_released_it(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, P)
    async with replica(dsn, "replica-a", release_offered=False) as (a, host_a):

        async def holds_everything() -> bool:
            return len(a.owned()) == P

        await eventually(holds_everything, within=WITHIN)
        epochs = dict(a.owned())
        async with replica(dsn, "replica-b") as (b, host_b):
            due = assignment(P, ["replica-a", "replica-b"])["replica-b"]

            async def offered() -> set[int]:
                return host_a.offered

            assert await eventually(offered, lambda found: found == due, within=WITHIN) == due

            # b claims as soon as it is warm; let it run several passes while claiming.
            async def claiming_passes() -> int:
                status = b.status()
                return status.claim_passes if status.claiming else -1

            start = await eventually(claiming_passes, lambda n: n >= 0, within=WITHIN)
            await eventually(claiming_passes, lambda n: n >= start + 3, within=WITHIN)
            assert b.owned() == {}
            assert host_b.claimed == []
            assert await holders(dsn) == {
                p: ("replica-a", a.incarnation, epoch) for p, epoch in epochs.items()
            }
            # a hands over one partition: b claims exactly that one, one epoch up.
            first = min(due)
            await host_a.release(first)

            async def b_owned() -> dict[int, int]:
                return dict(b.owned())

            assert await eventually(b_owned, bool, within=WITHIN) == {first: epochs[first] + 1}
            for partition in sorted(due - {first}):
                await host_a.release(partition)

            async def split() -> bool:
                return split_as_assigned(a, b)

            await eventually(split, within=WITHIN)
            assert all(b.owned()[p] == epochs[p] + 1 for p in due)
            assert all(a.owned()[p] == epochs[p] for p in set(range(P)) - due)
            assert host_a.lost == []
            assert host_b.lost == []


async def test_a_withdrawn_replica_offers_everything_and_its_partitions_move_as_it_releases(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, P)
    async with replica(dsn, "replica-a") as (a, host_a), replica(dsn, "replica-b") as (b, host_b):

        async def split() -> bool:
            return split_as_assigned(a, b)

        await eventually(split, within=WITHIN)
        await a.withdraw()
        assert a.state is MembershipState.WITHDRAWN

        async def b_has_all() -> int:
            return len(b.owned())

        await eventually(b_has_all, lambda n: n == P, within=WITHIN)
        assert a.owned() == {}
        assert host_a.lost == []
        assert host_b.lost == []


async def test_restarting_a_replica_gives_a_new_incarnation_and_fences_out_the_old_one(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, P)
    async with replica(dsn, "replica-a", serving=False) as (old, _):
        old_incarnation = old.incarnation
        async with replica(dsn, "replica-a", serving=False) as (new, _):
            assert new.incarnation > old_incarnation
            assert await group_fence_rows(dsn, old) == 0
            assert await group_fence_rows(dsn, new) == 1


async def test_a_restarted_replica_reclaims_its_partitions_at_once_without_waiting_for_a_ttl(
    postgres_server: PostgresServer,
) -> None:
    dsn = await membership_database(postgres_server, P)
    async with replica(dsn, "replica-a") as (a, _):

        async def holds_everything() -> bool:
            return len(a.owned()) == P

        await eventually(holds_everything, within=WITHIN)
        epochs = dict(a.owned())
    # The restarted process's clock never moves: it is neither warm nor serving, and nothing
    # has judged the old incarnation dead. Its join fenced that incarnation all the same.
    frozen = PacedClock()
    async with replica(dsn, "replica-a", clock=frozen.clock, serving=False) as (again, host):

        async def reclaimed() -> dict[int, int]:
            return dict(again.owned())

        expected = {p: epoch + 1 for p, epoch in epochs.items()}
        assert await eventually(reclaimed, lambda found: found == expected, within=WITHIN)
        assert again.state is MembershipState.JOINED
        assert host.lost == []
        rows = await holders(dsn)
        assert {rows[p][:2] for p in rows} == {("replica-a", again.incarnation)}

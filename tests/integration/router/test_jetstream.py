"""What only the JetStream Router adds to the contract: the stream as NATS sees it (name,
headers, replicas, limits), instances ending when the stream is deleted or purged, several
daemons reading one order, a daemon resuming its cursor, and NATS going away."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import nats
import pytest
from harness_contract.ids import RandomId
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.router import (
    POLL_HOLD,
    Accepted,
    Batch,
    Cursor,
    CursorInvalid,
    Entry,
    FeedGap,
    IdempotencyConflict,
    RingSettings,
    RouterClosedError,
    RouterPort,
    RouterRestarted,
    RouterUnavailable,
    SendMode,
    envelope_digest,
)
from gateway.router.jetstream import JetStreamRouter, JetStreamSettings
from gateway.router.jetstream_stream import METADATA_INSTANCE
from tests.integration.router.conftest import Streams, streams_on
from tests.servers import NatsCluster, free_port
from tests.support import eventually
from tests.unit.router.contract_suite import (
    PROPERTY_AGENTS,
    WAKE_BOUND,
    _message_id_of,
    anchor,
    expect_accepted,
    expect_batch,
    let_tasks_run,
    read_to_tail,
    send_all,
)
from tests.unit.router.fakes import FakeVerifier, agent_ids, crc_yields, rewrap, signed_envelope

# --- the stream as NATS sees it ---------------------------------------------------------


async def test_the_stream_name_and_metadata_carry_the_instance_and_publishes_carry_the_headers(
    streams: Streams,
):
    alice, bob = agent_ids(2)
    data = signed_envelope(sender=alice, recipients=[alice, bob])
    async with streams.router() as router:
        instance = await router.instance_id()
        await send_all(router, [data])
        prefix = streams.prefixes[-1]
        name = router.stream_name
        assert name == f"{prefix.upper()}_{instance}"
        assert await streams.bound_stream(prefix) == name
        info = await streams.js.stream_info(name)
        assert info.config.metadata is not None
        assert info.config.metadata[METADATA_INSTANCE] == instance
        stored = await streams.js.get_msg(name, 1)
        assert stored.data == data
        assert stored.headers is not None
        assert stored.headers["Nats-Msg-Id"] == f"{alice}:{_message_id_of(data)}"
        assert stored.headers["Nats-Expected-Stream"] == name
        assert stored.headers["Harness-Digest"] == envelope_digest(data)
        assert stored.headers["Harness-Recipients"] == f"{alice},{bob}"


async def test_the_stream_is_bounded_by_the_ring_settings_with_discard_old(streams: Streams):
    ring = RingSettings(max_entries=10, max_bytes=1_000_000)
    async with streams.router(settings=ring, max_age=3_600.0, duplicate_window=60.0) as router:
        info = await streams.js.stream_info(router.stream_name)
        config = info.config
        assert (config.max_msgs, config.max_bytes, config.max_age) == (10, 1_000_000, 3_600.0)
        assert config.duplicate_window == 60.0
        assert config.discard == nats.js.api.DiscardPolicy.OLD
        assert config.num_replicas == 1  # one server known: R1


@pytest.mark.slow
async def test_a_stream_on_a_three_node_cluster_is_r3(cluster_streams: Streams):
    alice, bob = agent_ids(2)
    async with cluster_streams.router() as router:
        await send_all(router, [signed_envelope(sender=alice, recipients=[alice, bob])])
        info = await cluster_streams.js.stream_info(router.stream_name)
        assert info.config.num_replicas == 3
        assert info.cluster is not None
        assert info.cluster.leader
        assert len(info.cluster.replicas or ()) == 2


# --- duplicates across daemons, retention --------------------------------------------------


async def test_a_duplicate_sent_through_another_daemon_is_the_original_or_a_conflict(
    streams: Streams,
):
    alice, bob = agent_ids(2)
    data = signed_envelope(sender=alice, recipients=[alice, bob])
    changed = rewrap(data, message_id=_message_id_of(data), body=b"changed")
    async with streams.router() as first:
        instance = await first.instance_id()
        original = expect_accepted(await first.send(instance, SendMode.INITIAL, data), data)
        async with streams.router(prefix=streams.prefixes[-1]) as second:
            assert await second.instance_id() == instance
            for mode in SendMode:
                assert await second.send(instance, mode, data) == original
                assert await second.send(instance, mode, changed) == IdempotencyConflict()
            entries, _ = await read_to_tail(
                second, frozenset({bob}), Cursor(instance_id=instance, order=0)
            )
            assert [entry.signed_envelope for entry in entries] == [data]


async def test_a_daemon_joining_after_evictions_starts_at_the_first_retained_sequence(
    streams: Streams,
):
    alice, bob = agent_ids(2)
    envelopes = [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(5)]
    async with streams.router(settings=RingSettings(max_entries=3)) as first:
        instance = await first.instance_id()
        await send_all(first, envelopes)
        info = await streams.js.stream_info(first.stream_name)
        assert (info.state.first_seq, info.state.last_seq) == (3, 5)
        async with streams.router(prefix=streams.prefixes[-1]) as joined:
            for order in (0, 1):
                outcome = await joined.poll(
                    frozenset({bob}), Cursor(instance_id=instance, order=order), hold=0
                )
                assert outcome == FeedGap(instance_id=instance)
            entries, cursor = await read_to_tail(
                joined, frozenset({bob}), Cursor(instance_id=instance, order=2)
            )
            assert [entry.signed_envelope for entry in entries] == envelopes[2:]
            assert cursor.order == 5


async def test_a_restarted_daemon_resumes_its_stored_cursor(streams: Streams):
    alice, bob = agent_ids(2)
    envelopes = [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(6)]
    prefix = streams.new_prefix()  # kept when the first process ends
    async with streams.router(prefix=prefix) as before:
        instance = await before.instance_id()
        await send_all(before, envelopes[:3])
        stored = expect_batch(
            await before.poll(frozenset({bob}), Cursor(instance_id=instance, order=0), hold=0)
        ).cursor
        await send_all(before, envelopes[3:])
    assert stored == Cursor(instance_id=instance, order=3)
    async with streams.router(prefix=prefix) as after:
        assert await after.instance_id() == instance
        # Polled at once, before the new process has read the stream: it waits for it.
        entries, _ = await read_to_tail(after, frozenset({bob}), stored)
        assert [entry.signed_envelope for entry in entries] == envelopes[3:]


async def test_daemons_connecting_at_once_to_a_new_subject_share_one_stream(streams: Streams):
    prefix = streams.new_prefix()
    async with contextlib.AsyncExitStack() as stack:
        routers = await asyncio.gather(
            *(stack.enter_async_context(streams.router(prefix=prefix)) for _ in range(3))
        )

        async def instances() -> set[str]:
            return {await router.instance_id() for router in routers}

        # nats-server may let concurrent creations both bind the subject; every daemon
        # then settles on the least name within a check of the stream.
        (instance,) = await eventually(instances, lambda found: len(found) == 1)
        assert await streams.bound_stream(prefix) == routers[0].stream_name
        assert routers[0].stream_name.endswith(instance)


async def test_a_message_another_publisher_puts_on_the_subject_is_passed_over(streams: Streams):
    alice, bob = agent_ids(2)
    data = signed_envelope(sender=alice, recipients=[alice, bob])
    async with streams.router() as router:
        instance = await router.instance_id()
        await streams.js.publish(f"{streams.prefixes[-1]}.envelopes", b"not an envelope")
        await send_all(router, [data])
        entries, cursor = await read_to_tail(
            router, frozenset({alice, bob}), Cursor(instance_id=instance, order=0)
        )
        assert entries == [Entry(order=2, signed_envelope=data, recipients=(alice, bob))]
        assert cursor.order == 2


# --- instances end with their stream ---------------------------------------------------------


async def test_deleting_the_stream_makes_a_new_instance_on_the_next_send(streams: Streams):
    alice, bob = agent_ids(2)
    async with streams.router() as router:
        old = await router.instance_id()
        await send_all(router, [signed_envelope(sender=alice, recipients=[alice, bob])])
        cursor = await anchor(router, frozenset({bob}))
        await streams.js.delete_stream(router.stream_name)
        data = signed_envelope(sender=alice, recipients=[alice, bob])
        restarted = await router.send(old, SendMode.INITIAL, data)
        assert isinstance(restarted, RouterRestarted)
        new = restarted.instance_id
        assert new != old
        assert RandomId.ROUTER_INSTANCE.is_valid(new)
        assert await router.instance_id() == new
        assert await streams.bound_stream(streams.prefixes[-1]) == router.stream_name
        assert await router.send(old, SendMode.RETRY, data) == RouterRestarted(instance_id=new)
        assert await router.poll(frozenset({bob}), cursor, hold=0) == CursorInvalid()
        # The new instance starts its order at 1.
        assert await router.send(new, SendMode.INITIAL, data) == Accepted(
            instance_id=new, digest=envelope_digest(data)
        )
        entries, _ = await read_to_tail(router, frozenset({bob}), Cursor(instance_id=new, order=0))
        assert [entry.order for entry in entries] == [1]


async def test_deleting_the_stream_ends_held_reads_and_every_daemon_moves_to_one_new_instance(
    streams: Streams,
):
    alice, bob = agent_ids(2)
    async with streams.router() as first:
        old = await first.instance_id()
        async with streams.router(prefix=streams.prefixes[-1]) as second:
            cursor = await anchor(second, frozenset({bob}))
            held = asyncio.create_task(second.poll(frozenset({bob}), cursor, hold=POLL_HOLD))
            try:
                await let_tasks_run()
                await streams.js.delete_stream(first.stream_name)
                # Nobody sends: each reader notices on its own.
                assert await asyncio.wait_for(held, WAKE_BOUND) == CursorInvalid()
            finally:
                held.cancel()

            async def instances() -> tuple[str, str]:
                return await first.instance_id(), await second.instance_id()

            # Both may create a stream at once; they settle on one within a check.
            new, _ = await eventually(instances, lambda found: old != found[0] == found[1])
            await send_all(first, [signed_envelope(sender=alice, recipients=[alice, bob])])
            entries, _ = await read_to_tail(
                second, frozenset({bob}), Cursor(instance_id=new, order=0)
            )
            assert len(entries) == 1


@pytest.mark.parametrize("keep", [None, 1], ids=["everything", "all but the last"])
async def test_purging_the_stream_makes_a_new_instance_and_deletes_the_purged_stream(
    streams: Streams, keep
):
    alice, bob = agent_ids(2)
    async with streams.router() as router:
        old, old_stream = await router.instance_id(), router.stream_name
        await send_all(
            router, [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(3)]
        )
        cursor = await anchor(router, frozenset({bob}))
        await streams.js.purge_stream(old_stream, keep=keep)
        new = await eventually(router.instance_id, lambda instance: instance != old)
        assert router.stream_name != old_stream
        assert await streams.bound_stream(streams.prefixes[-1]) == router.stream_name
        with pytest.raises(nats.js.errors.NotFoundError):
            await streams.js.stream_info(old_stream)
        assert await router.poll(frozenset({bob}), cursor, hold=0) == CursorInvalid()
        assert await router.send(old, SendMode.INITIAL, b"{}") == RouterRestarted(instance_id=new)


async def test_a_stream_deleted_and_created_again_under_its_name_is_a_new_instance(
    streams: Streams,
):
    alice, bob = agent_ids(2)
    async with streams.router() as router:
        old, name = await router.instance_id(), router.stream_name
        await send_all(router, [signed_envelope(sender=alice, recipients=[alice, bob])])
        config = (await streams.js.stream_info(name)).config
        await streams.js.delete_stream(name)
        await streams.js.add_stream(config)  # an operator restoring "the same" stream
        new = await eventually(router.instance_id, lambda instance: instance != old)
        assert router.stream_name.endswith(new)
        with pytest.raises(nats.js.errors.NotFoundError):
            await streams.js.stream_info(name)


async def test_eviction_by_the_stream_limits_is_not_taken_for_a_purge(streams: Streams):
    alice, bob = agent_ids(2)
    envelopes = [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(4)]
    size = len(envelopes[0])
    # The stream also counts subject and headers, so it keeps fewer entries than the
    # window, which counts envelope bytes as the ring does.
    async with streams.router(settings=RingSettings(max_bytes=3 * size)) as router:
        instance = await router.instance_id()
        await send_all(router, envelopes)
        info = await streams.js.stream_info(router.stream_name)
        assert info.state.first_seq > 2
        checks = router.status().checks
        await eventually(lambda: _checks(router), lambda done: done >= checks + 3)
        assert await router.instance_id() == instance
        entries, _ = await read_to_tail(
            router, frozenset({bob}), Cursor(instance_id=instance, order=1)
        )
        assert [entry.order for entry in entries] == [2, 3, 4]


# --- several daemons, one order ----------------------------------------------------------------

_two_daemon_sends = st.lists(
    st.tuples(
        st.integers(0, 1),  # through which daemon
        st.integers(0, len(PROPERTY_AGENTS) - 1),  # sender
        st.frozensets(st.integers(0, len(PROPERTY_AGENTS) - 1), min_size=1),
    ),
    min_size=1,
    max_size=24,
)
_reader_sets = st.lists(
    st.frozensets(st.integers(0, len(PROPERTY_AGENTS) - 1), min_size=1), min_size=1, max_size=3
)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(sends=_two_daemon_sends, readers=_reader_sets, spread=st.integers(1, 4))
async def test_two_daemons_each_read_the_restriction_of_the_one_order_with_identical_bytes(
    streams: Streams, sends, readers, spread
):
    """The "proven by a test" of engine.md §4: every daemon reads the one stream, so each
    of its readers gets the restriction of the one order, the same on every daemon."""
    envelopes = [
        signed_envelope(
            sender=PROPERTY_AGENTS[sender],
            recipients=[PROPERTY_AGENTS[index] for index in sorted(recipients)],
        )
        for _, sender, recipients in sends
    ]
    reader_sets = [frozenset(PROPERTY_AGENTS[index] for index in reader) for reader in readers]
    counts = [sum(1 for _, _, recipients in sends if recipients & reader) for reader in readers]
    verifier = FakeVerifier(yields=crc_yields(spread))

    async def read(router: RouterPort, recipients: frozenset[str], count: int) -> list[Entry]:
        cursor = await anchor(router, recipients)
        received: list[Entry] = []
        while len(received) < count:
            batch = expect_batch(await router.poll(recipients, cursor))
            received.extend(batch.entries)
            cursor = batch.cursor
        return received

    prefix = streams.new_prefix()
    try:
        async with (
            streams.router(prefix=prefix, verifier=verifier) as first,
            streams.router(prefix=prefix, verifier=verifier) as second,
        ):
            daemons = (first, second)
            instance = await first.instance_id()
            assert await second.instance_id() == instance
            async with asyncio.timeout(WAKE_BOUND * 2), asyncio.TaskGroup() as group:
                reads = [
                    [
                        group.create_task(read(daemon, recipients, count))
                        for recipients, count in zip(reader_sets, counts, strict=True)
                    ]
                    for daemon in daemons
                ]
                await let_tasks_run()
                sent = [
                    group.create_task(daemons[via].send(instance, SendMode.INITIAL, data))
                    for (via, _, _), data in zip(sends, envelopes, strict=True)
                ]
            for task, data in zip(sent, envelopes, strict=True):
                expect_accepted(task.result(), data)
            start = Cursor(instance_id=instance, order=0)
            everything, _ = await read_to_tail(first, frozenset(PROPERTY_AGENTS), start)
            assert [entry.order for entry in everything] == list(range(1, len(envelopes) + 1))
            assert sorted(entry.signed_envelope for entry in everything) == sorted(envelopes)
            for index, recipients in enumerate(reader_sets):
                expected = [
                    Entry(
                        order=entry.order,
                        signed_envelope=entry.signed_envelope,
                        recipients=tuple(r for r in entry.recipients if r in recipients),
                    )
                    for entry in everything
                    if recipients & set(entry.recipients)
                ]
                for daemon_reads in reads:
                    assert daemon_reads[index].result() == expected
    finally:
        await streams.clean(prefix)


async def _checks(router: JetStreamRouter) -> int:
    return router.status().checks


# --- connection and lifecycle ---------------------------------------------------------------


async def test_closing_ends_held_reads_with_router_closed_error_and_leaves_no_task(
    streams: Streams,
):
    (bob,) = agent_ids(1)
    await streams.bound_stream("warm")  # the admin connection's request task starts now
    before = asyncio.all_tasks()
    async with streams.router() as router:
        cursor = await anchor(router, frozenset({bob}))
        held = asyncio.create_task(router.poll(frozenset({bob}), cursor, hold=POLL_HOLD))
        stream = router.subscribe(frozenset({bob}), None)
        assert isinstance(await anext(stream), Batch)
        reading = asyncio.ensure_future(anext(stream))
        await let_tasks_run()
        await router.close()
        with pytest.raises(RouterClosedError):
            await asyncio.wait_for(held, WAKE_BOUND)
        with pytest.raises(RouterClosedError):
            await asyncio.wait_for(reading, WAKE_BOUND)
        await stream.aclose()
        with pytest.raises(RouterClosedError):
            await router.instance_id()
        await router.close()  # idempotent
    await let_tasks_run()
    assert asyncio.all_tasks() - before - {asyncio.current_task()} == set()


async def test_a_router_with_no_reachable_server_raises_router_unavailable_in_time():
    options = JetStreamSettings(connect_timeout=0.5)
    async with asyncio.timeout(WAKE_BOUND):
        with pytest.raises(RouterUnavailable, match="no NATS server answered"):
            await JetStreamRouter.connect(
                [f"nats://127.0.0.1:{free_port()}"], verifier=FakeVerifier(), options=options
            )


@pytest.mark.parametrize(
    "options",
    [
        {"subject_prefix": "harness.*"},
        {"subject_prefix": ""},
        {"subject_prefix": "a..b"},
        {"max_age": 0.0},
        {"duplicate_window": 0.0},
        {"max_age": 60.0, "duplicate_window": 120.0},
        {"replicas": 0},
        {"replicas": 6},
        {"connect_timeout": 0.0},
    ],
)
def test_settings_refuse_what_jetstream_would(options):
    with pytest.raises(ValueError):
        JetStreamSettings(**options)


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_sends_fail_unavailable_while_nats_is_down_and_reads_resume_after(tmp_path: Path):
    alice, bob = agent_ids(2)
    envelopes = [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(4)]
    cluster = NatsCluster.start(tmp_path / "nats", nodes=1)
    try:
        async with streams_on(cluster) as streams, streams.router() as router:
            instance = await router.instance_id()
            await send_all(router, envelopes[:2])
            cursor = await anchor(router, frozenset({bob}))
            held = asyncio.create_task(router.poll(frozenset({bob}), cursor, hold=POLL_HOLD))
            await let_tasks_run()
            await asyncio.to_thread(cluster.stop_node, "n0")
            with pytest.raises(RouterUnavailable):
                await router.send(instance, SendMode.INITIAL, envelopes[2])
            await asyncio.to_thread(cluster.restart, "n0")
            # The ambiguous send is retried with the same bytes, as the engine does.
            retried = await eventually(
                lambda: _send_or_none(router, instance, SendMode.RETRY, envelopes[2]),
                lambda outcome: outcome is not None,
                within=30.0,
            )
            expect_accepted(retried, envelopes[2])
            await send_all(router, envelopes[3:])
            batch = expect_batch(await asyncio.wait_for(held, WAKE_BOUND))
            rest, _ = await read_to_tail(router, frozenset({bob}), batch.cursor)
            got = [entry.signed_envelope for entry in (*batch.entries, *rest)]
            assert got == envelopes[2:]
            assert await router.instance_id() == instance
    finally:
        cluster.close()


async def _send_or_none(
    router: RouterPort, instance: str, mode: SendMode, data: bytes
) -> object | None:
    try:
        return await router.send(instance, mode, data)
    except RouterUnavailable:
        return None

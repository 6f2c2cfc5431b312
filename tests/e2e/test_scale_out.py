"""Scale-out on existing engines (docs/scale-out.md): three `harness-gateway serve` daemons on a
3-node NATS JetStream cluster (the Router, R3) and one PostgreSQL (every daemon's store, under
its own owner, and the Registry's cards), all real processes the tests start themselves.

- direct, group, gather and all_gather across the three daemons;
- the stream leader killed during 1,000 concurrent sends: every send that returned success
  is certified exactly once, every delivery is delivered once, in chain order;
- a second daemon claiming the same agents is refused; a daemon SIGKILLed and restarted on
  the same database claims its lease again and replays unacknowledged items;
- the stream purged: every daemon moves to a new instance, recovers (§5.9), and posts go on
  in one chain;
- PostgreSQL stopped briefly: sends fail with a closed reason, nothing is corrupted, and
  service resumes (a daemon whose store failed under it exits non-zero, as engine.md §8
  says, and its supervisor, here the test, starts it again).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

import harness_client
import nats
import pytest
from harness_client import (
    Accept,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    Decline,
    InboundDelivery,
    MessageInput,
    MulticastItem,
    ResponseInput,
    SendError,
)

from gateway.testing import GatewayProcess, ProcessFailed
from gateway.testing_network import NetworkProcess, RunningNetwork, run_network
from tests.e2e.network_support import BOUND, ask, print_logs, register
from tests.e2e.support import full_history
from tests.servers import NatsCluster, PostgresServer
from tests.support import eventually

T = TypeVar("T")

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

SENDS: Final = 1_000
"""Sends of the leader-kill scenario, split over its senders."""
IN_FLIGHT: Final = 25
"""Sends each sender keeps in flight in the leader-kill scenario."""
KILL_AFTER: Final = 250
"""Successful sends before the stream leader is killed."""
DRAIN_BOUND: Final = 120.0
"""Seconds every certified post may take to reach its receiver after the sends."""
CLOSED_FAILURES: Final = frozenset(
    {"delivery-pending", "persistence-failed", "outcome-unknown", "network-unavailable"}
)
"""SendError reasons a send may end with while an engine is away (engine.md §6)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """This module's own 3-node cluster: its tests kill nodes."""
    started = NatsCluster.start(Path(tmp_path_factory.mktemp("scale-out-nats")), nodes=3)
    try:
        yield started
    finally:
        started.close()


@dataclass(eq=False)
class Agent:
    """One registered agent on its daemon, with its endpoint and everything it received."""

    name: str
    daemon: NetworkProcess
    token: str
    endpoint: harness_client.Endpoint | None = None
    received: list[InboundDelivery] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _pump: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return f"agent:{self.name}"

    async def connect(self) -> None:
        self.endpoint = await harness_client.connect(self.daemon.address, token=self.token)
        self._pump = asyncio.create_task(self._run(self.endpoint), name=f"pump-{self.name}")

    async def _run(self, endpoint: harness_client.Endpoint) -> None:
        with contextlib.suppress(Exception):
            async for delivery in endpoint.messages():
                # Acknowledged first: an item the test has seen is one the daemon retired.
                await delivery.acknowledge()
                self.received.append(delivery)
                self.arrived.set()

    async def disconnect(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(BaseException):
                await self._pump
        if self.endpoint is not None:
            with contextlib.suppress(Exception):
                await self.endpoint.close()
        self._pump = None
        self.endpoint = None

    async def send(self, message: MessageInput | ResponseInput) -> harness_client.SendResult:
        assert self.endpoint is not None
        return await self.endpoint.send(message)

    def items(self) -> list[object]:
        return [delivery.item for delivery in self.received]

    async def next_item(self, after: int, within: float = BOUND) -> object:
        """The item received at index `after` (waiting for it at most `within` s)."""
        deadline = time.monotonic() + within
        while len(self.received) <= after:
            self.arrived.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{self.name} received no item #{after} in {within:g} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), remaining)
        return self.received[after].item


def post_ids(agent: Agent) -> list[str]:
    """Post ids of the multicast items an agent received, in arrival order."""
    return [item.message.post_id for item in agent.items() if isinstance(item, MulticastItem)]


@contextlib.asynccontextmanager
async def scale_out(
    cluster: NatsCluster,
    postgres: PostgresServer,
    names: Sequence[str],
    *,
    label: str,
    daemon_args: Sequence[str] = (),
) -> AsyncIterator[tuple[RunningNetwork, dict[str, Agent]]]:
    """A Registry and one daemon per name on `cluster` and a fresh database, each name
    registered and listening on its own daemon (with `daemon_args` besides)."""
    async with run_network(
        daemons=len(names),
        nats=cluster.url,
        store=postgres.create_database(),
        # A daemon that stops on a store failure is out of the way in seconds.
        daemon_args=["--shutdown-grace", "3s", *daemon_args],
    ) as network:
        agents: dict[str, Agent] = {}
        try:
            for name, daemon in zip(names, network.daemons, strict=True):
                agents[name] = Agent(name, daemon, await register(daemon, name))
                await agents[name].connect()
            yield network, agents
        except BaseException:
            hosts = {agent.daemon.name: name for name, agent in agents.items()}
            print_logs(network, label, hosts)
            raise
        finally:
            await asyncio.gather(*(agent.disconnect() for agent in agents.values()))


async def stream_leader(cluster: NatsCluster) -> str:
    """The node leading the Router stream (the one stream of the cluster's gateway)."""
    client = await nats.connect(cluster.urls)
    try:
        js = client.jetstream()
        names = [name async for name in _stream_names(js)]
        assert len(names) == 1, names
        info = await js.stream_info(names[0])
        assert info.cluster is not None
        assert info.cluster.leader is not None
        assert info.config.num_replicas == 3
        return info.cluster.leader
    finally:
        await client.close()


async def _stream_names(js: nats.js.JetStreamContext) -> AsyncIterator[str]:
    for info in await js.streams_info():
        yield info.config.name or ""


# --- the collectives across daemons -----------------------------------------------------------


async def test_direct_group_gather_and_all_gather_cross_three_daemons(
    cluster: NatsCluster, postgres_server: PostgresServer
) -> None:
    names = ("scale-alice", "scale-bob", "scale-carol")
    group = "group:" + ",".join(names)
    async with scale_out(cluster, postgres_server, names, label="collectives") as (_, agents):
        alice, bob, carol = (agents[name] for name in names)

        direct = await alice.send(MessageInput(to=bob.address, text="hello bob"))
        item = await bob.next_item(0)
        assert isinstance(item, MulticastItem)
        assert (item.message.post_id, item.message.sender) == (direct.post_ids[0], alice.address)

        posted = await alice.send(MessageInput(to=group, text="hello all"))
        for member in (bob, carol):
            item = await member.next_item(1 if member is bob else 0)
            assert isinstance(item, MulticastItem)
            assert item.message.post_id == posted.post_ids[0]

        # gather: each member answers the requester; the result reaches the requester.
        gathered = await alice.send(ask(group, 120))
        for member, after in ((bob, 2), (carol, 1)):
            request = await member.next_item(after)
            assert isinstance(request, CollectiveRequestItem), request
            assert request.id == gathered.operation_id
        await bob.send(ResponseInput(to=alice.address, response=Accept(content={"slot": "mon"})))
        await carol.send(ResponseInput(to=alice.address, response=Decline()))
        result = await alice.next_item(0)
        assert isinstance(result, CollectiveResultItem), result
        assert result.id == gathered.operation_id
        assert [outcome.member for outcome in result.outcomes] == [bob.address, carol.address]

        # all_gather: each member answers the group; everyone gets one identical result.
        all_gathered = await alice.send(ask(group, 120, CollectiveOp.ALL_GATHER))
        for member, after in ((bob, 3), (carol, 2)):
            request = await member.next_item(after)
            assert isinstance(request, CollectiveRequestItem), request
            assert request.id == all_gathered.operation_id
        await bob.send(ResponseInput(to=group, response=Accept(content={"slot": "tue"})))
        await carol.send(ResponseInput(to=group, response=Accept(content={"slot": "mon"})))
        results = [
            await alice.next_item(1),
            await bob.next_item(4),
            await carol.next_item(3),
        ]
        assert isinstance(results[0], CollectiveResultItem), results[0]
        assert results[0].id == all_gathered.operation_id
        assert results[1] == results[0]
        assert results[2] == results[0]


# --- the stream leader killed during 1,000 concurrent sends -----------------------------------


async def test_killing_the_stream_leader_during_1000_sends_certifies_each_success_once_in_order(
    cluster: NatsCluster, postgres_server: PostgresServer
) -> None:
    names = ("leader-alice", "leader-bob", "leader-carol")
    async with scale_out(cluster, postgres_server, names, label="leader-kill") as (net, agents):
        alice, bob, carol = (agents[name] for name in names)
        senders = (alice, bob)
        succeeded: dict[str, list[str]] = {sender.name: [] for sender in senders}
        failed: collections.Counter[str] = collections.Counter()
        remaining = {sender.name: SENDS // len(senders) for sender in senders}
        leader_killed = asyncio.Event()

        async def send_loop(sender: Agent, lane: int) -> None:
            while remaining[sender.name] > 0:
                remaining[sender.name] -= 1
                try:
                    sent = await sender.send(
                        MessageInput(to=carol.address, text=f"{sender.name} {lane}")
                    )
                except SendError as error:
                    assert error.reason in CLOSED_FAILURES, error
                    failed[error.reason] += 1
                    continue
                succeeded[sender.name].extend(sent.post_ids)

        async def kill_leader() -> str:
            await eventually(
                _async(lambda: sum(map(len, succeeded.values()))),
                lambda n: n >= KILL_AFTER,
                within=60,
            )
            leader = await stream_leader(cluster)
            cluster.kill(leader)
            leader_killed.set()
            return leader

        killer = asyncio.create_task(kill_leader())
        await asyncio.gather(
            *(send_loop(sender, lane) for sender in senders for lane in range(IN_FLIGHT))
        )
        leader = await killer
        assert leader_killed.is_set()
        cluster.restart(leader)
        total = sum(map(len, succeeded.values()))
        # Most sends succeed; a few may end delivery-pending around the election.
        assert total >= SENDS * 0.9, (total, failed)

        # Every success reaches carol, once.
        wanted = {post for posts in succeeded.values() for post in posts}
        await eventually(
            _async(lambda: set(post_ids(carol))), lambda got: wanted <= got, within=DRAIN_BOUND
        )
        delivered = post_ids(carol)
        assert len(delivered) == len(set(delivered)), "a post was delivered twice"

        # Certified exactly once, and delivered in chain order, at both ends.
        async with await harness_client.connect_management(
            carol.daemon.address, admin_token=carol.daemon.admin_token
        ) as operator:
            for sender in senders:
                chain = [
                    record.post_id
                    for record in await full_history(operator, carol.name, sender.address)
                ]
                assert len(chain) == len(set(chain)), "a post was certified twice"
                assert set(succeeded[sender.name]) <= set(chain)
                from_sender = [post for post in delivered if post in set(chain)]
                assert from_sender == chain[: len(from_sender)], "delivery order != chain order"
        async with await harness_client.connect_management(
            alice.daemon.address, admin_token=alice.daemon.admin_token
        ) as operator:
            alice_chain = [
                record.post_id for record in await full_history(operator, alice.name, carol.address)
            ]
        # The sender's chain is the receiver's: one order at both ends.
        async with await harness_client.connect_management(
            carol.daemon.address, admin_token=carol.daemon.admin_token
        ) as operator:
            carol_chain = [
                record.post_id for record in await full_history(operator, carol.name, alice.address)
            ]
        assert alice_chain == carol_chain
        assert len(net.daemons) == len(names)


def _async(probe: Callable[[], T]) -> Callable[[], Awaitable[T]]:
    """A synchronous probe as the coroutine function `eventually` polls."""

    async def run() -> T:
        return probe()

    return run


# --- a daemon SIGKILLed and restarted on the same database -------------------------------------


async def test_a_sigkilled_daemon_restarts_on_the_same_database_and_replays_unacknowledged(
    cluster: NatsCluster, postgres_server: PostgresServer
) -> None:
    names = ("restart-alice", "restart-bob")
    async with scale_out(cluster, postgres_server, names, label="restart") as (network, agents):
        alice, bob = (agents[name] for name in names)
        first = await alice.send(MessageInput(to=bob.address, text="before"))
        await bob.next_item(0)
        await bob.disconnect()
        # Certified while bob listens to nothing: the item waits unacknowledged in the store.
        second = await alice.send(MessageInput(to=bob.address, text="unread"))

        # A second daemon claiming bob's daemon's agents is refused, naming the holder.
        twin_dir = network.root / "twin"
        twin_dir.mkdir(mode=0o700)
        twin = GatewayProcess("serve", "twin", data_dir=twin_dir, args=bob.daemon.args)
        with pytest.raises(ProcessFailed) as refused:
            await twin.start()
        assert "lease" in refused.value.stderr
        assert "daemon-2" in refused.value.stderr

        assert await bob.daemon.kill() != 0
        await bob.daemon.start()  # the same owner and database: the lease is claimed again
        bob.received.clear()
        await bob.connect()
        replayed = await bob.next_item(0)
        assert isinstance(replayed, MulticastItem)
        assert replayed.message.post_id == second.post_ids[0]
        third = await alice.send(MessageInput(to=bob.address, text="after"))
        item = await bob.next_item(1)
        assert isinstance(item, MulticastItem)
        assert item.message.post_id == third.post_ids[0]
        assert first.post_ids != second.post_ids


# --- the stream purged: a new instance and recovery ---------------------------------------------


async def test_purging_the_stream_moves_every_daemon_to_a_new_instance_and_posts_go_on(
    cluster: NatsCluster, postgres_server: PostgresServer
) -> None:
    names = ("purge-alice", "purge-bob")
    async with scale_out(cluster, postgres_server, names, label="purge") as (_, agents):
        alice, bob = (agents[name] for name in names)
        first = await alice.send(MessageInput(to=bob.address, text="before the purge"))
        await bob.next_item(0)
        client = await nats.connect(cluster.urls)
        try:
            js = client.jetstream()
            (purged,) = [name async for name in _stream_names(js)]
            await js.purge_stream(purged)
            # Every daemon drops the purged stream and binds one new instance (§4).

            async def streams() -> list[str]:
                return await _names(js)

            await eventually(streams, lambda found: bool(found) and purged not in found, within=60)
        finally:
            await client.close()
        # Recovery (§5.9) re-anchors the conversation on the new instance; the next post is
        # certified there, after the first, in one chain at both ends.
        second = await alice.send(MessageInput(to=bob.address, text="after the purge"))
        item = await bob.next_item(1, within=60)
        assert isinstance(item, MulticastItem)
        assert item.message.post_id == second.post_ids[0]
        for agent, peer in ((alice, bob), (bob, alice)):
            async with await harness_client.connect_management(
                agent.daemon.address, admin_token=agent.daemon.admin_token
            ) as operator:
                chain = [
                    record.post_id
                    for record in await full_history(operator, agent.name, peer.address)
                ]
            assert chain == [first.post_ids[0], second.post_ids[0]]


async def _names(js: nats.js.JetStreamContext) -> list[str]:
    return [name async for name in _stream_names(js)]


# --- PostgreSQL stopped briefly -------------------------------------------------------------


async def test_postgresql_stopped_briefly_fails_sends_closed_and_service_resumes(
    cluster: NatsCluster, postgres_server: PostgresServer
) -> None:
    names = ("outage-alice", "outage-bob")
    # A send the outage holds up answers delivery-pending after 5 s, not the default 30 s.
    quick = ["--send-certify-timeout", "5s"]
    async with scale_out(cluster, postgres_server, names, label="outage", daemon_args=quick) as (
        network,
        agents,
    ):
        alice, bob = (agents[name] for name in names)
        before = await alice.send(MessageInput(to=bob.address, text="before the outage"))
        await bob.next_item(0)
        succeeded = list(before.post_ids)
        failures: collections.Counter[str] = collections.Counter()
        try:
            postgres_server.stop()
            for number in range(3):
                try:
                    sent = await asyncio.wait_for(
                        alice.send(MessageInput(to=bob.address, text=f"during {number}")), 60
                    )
                    succeeded.extend(sent.post_ids)
                except SendError as error:
                    assert error.reason in CLOSED_FAILURES, error
                    failures[error.reason] += 1
        finally:
            postgres_server.start_again()
        assert failures, "no send failed while PostgreSQL was down"

        async def resumed() -> bool:
            # The supervisor's part: a daemon whose store failed under it exits (engine.md
            # §8); start it again once it has.
            for agent in (alice, bob):
                if not agent.daemon.running:
                    await agent.disconnect()
                    await agent.daemon.start()
                    await agent.connect()
            try:
                sent = await alice.send(MessageInput(to=bob.address, text="after the outage"))
            except SendError:
                return False
            succeeded.extend(sent.post_ids)
            return True

        await eventually(resumed, within=60, interval=1.0)
        await eventually(
            _async(lambda: set(post_ids(bob))),
            lambda got: set(succeeded) <= got | set(before.post_ids),
            within=DRAIN_BOUND,
        )
        async with await harness_client.connect_management(
            bob.daemon.address, admin_token=bob.daemon.admin_token
        ) as operator:
            chain = [r.post_id for r in await full_history(operator, bob.name, alice.address)]
        assert len(chain) == len(set(chain))
        assert set(succeeded) <= set(chain)
        assert network.daemons

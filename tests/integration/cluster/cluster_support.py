"""Cluster replicas as real processes, a steady load of keyed messages, and its counting
(cluster.md §9).

`ProcessCluster` runs `harness-gateway serve --cluster` processes on one PostgreSQL database,
each on a fixed port (so a restarted replica comes back where the proxy and its peers look),
behind a `RoundRobinProxy` standing for the Service. `Load` drives agent pairs through the
proxy with the project's Python client: each agent sends numbered messages to its partner
under one idempotency key per message, retrying a failed send under the same key as the
client's documentation says, and acknowledges what it receives. `Ledger` counts every
message lost, duplicated or out of order; `chain_defects` compares every member's chain of
every conversation in the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Final

import harness_client
from harness_client import MessageInput, MulticastItem
from harness_contract.errors import (
    DeliveryAcknowledgeError,
    HarnessError,
    SendError,
    SendErrorReason,
)

from gateway.testing import GatewayProcess
from gateway.testing_cluster import ClusterFiles, random_name
from gateway.testing_proxy import RoundRobinProxy
from gateway.testing_servers import PostgresServer, free_port
from tests.support import eventually

CLAIM_BOUND: Final = 60.0
"""Seconds until every partition is held: a replica claims only after one lease TTL (6 s) of
fresh beats, and the replicas start on a shared 2-core machine."""

SEND_DEADLINE: Final = 30.0
"""Seconds one attempt of a send may take (the client retries inside it): longer than a
replica's lease (6 s) plus a claim, so a send of a killed replica's agent rides it out."""

SEND_ATTEMPTS: Final = 5
"""Attempts of one keyed message before the load gives it up (each under the same key)."""

SEND_PAUSE: Final = 0.05
"""Seconds an agent waits between two messages: a steady load that leaves the 2 shared cores
room for the replicas and PostgreSQL."""

RETRY_PAUSE: Final = 0.5
"""Seconds before a failed send is sent again under its key."""

DRAIN_BOUND: Final = 60.0
"""Seconds every sent message may take to reach its recipient once the load stopped."""

OWN_CONNECTION: Final = (("grpc.use_local_subchannel_pool", 1),)
"""Each client its own connection, so the proxy spreads them over the replicas."""


class ReplicaProcess(GatewayProcess):
    """One `serve --cluster` replica on a fixed port; the admin token file comes from
    `HARNESS_ADMIN_TOKEN_FILE` (no flag names it), set through `env` so the process that
    signals reach is the gateway itself (`env` execs it)."""

    def __init__(self, files: ClusterFiles, dsn: str, replica_id: str) -> None:
        data_dir = files.folder / replica_id
        data_dir.mkdir(exist_ok=True, mode=0o700)
        listen = f"127.0.0.1:{free_port()}"
        super().__init__(
            "serve",
            replica_id,
            data_dir=data_dir,
            args=[
                "--cluster",
                "--replica-id",
                replica_id,
                "--store",
                dsn,
                "--seed-key-file",
                str(files.seed_key),
                "--registry-key-file",
                str(files.registry_key),
                "--peer-token-file",
                str(files.peer_token),
            ],
            listen=listen,
        )
        self.files = files
        self.bound = listen
        """The fixed address: every start listens there, so the proxy and peers find it."""

    def command(self) -> list[str]:
        return ["env", f"HARNESS_ADMIN_TOKEN_FILE={self.files.admin_token}", *super().command()]

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets and sessions but runs nothing."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT."""
        self.process.send_signal(signal.SIGCONT)

    async def exited(self, within: float) -> int:
        """The status the process exits with by itself within `within` seconds."""
        return await asyncio.wait_for(asyncio.shield(self.process.wait()), within)


@dataclasses.dataclass
class ProcessCluster:
    """Replica processes of one cluster database behind one proxy."""

    postgres: PostgresServer
    files: ClusterFiles
    dsn: str
    proxy: RoundRobinProxy
    replicas: dict[str, ReplicaProcess] = dataclasses.field(default_factory=dict)

    @property
    def database(self) -> str:
        return self.dsn.rpartition("/")[2]

    async def add(self, replica_id: str) -> ReplicaProcess:
        """Start a replica (a new one, or one that stopped) and put it behind the proxy."""
        replica = self.replicas.get(replica_id)
        if replica is None:
            replica = ReplicaProcess(self.files, self.dsn, replica_id)
            self.replicas[replica_id] = replica
        await replica.start()
        self.proxy.set_backends(self.addresses())
        return replica

    def addresses(self) -> list[str]:
        return [replica.bound for replica in self.replicas.values() if replica.running]

    def remove(self, replica_id: str) -> ReplicaProcess:
        """Take a replica out of the proxy (its process is the caller's)."""
        replica = self.replicas[replica_id]
        self.proxy.set_backends([a for a in self.addresses() if a != replica.bound])
        return replica

    def held(self) -> dict[str, int]:
        """Partitions each replica's current incarnation holds, "" for those nobody holds or
        an incarnation fenced or replaced holds (cluster.md §3.2)."""
        rows = self.postgres.sql(
            "SELECT coalesce(r.replica_id, ''), count(*) FROM partitions p "
            "LEFT JOIN replicas r ON r.replica_id = p.holder AND r.incarnation = p.incarnation "
            "AND NOT r.fenced GROUP BY 1 ORDER BY 1",
            self.database,
        )
        held: dict[str, int] = {}
        for row in rows.splitlines():
            holder, _, count = row.rpartition("|")
            held[holder] = int(count)
        return held

    async def wait_held_by(self, names: Sequence[str], within: float = CLAIM_BOUND) -> None:
        """Until every partition is held and exactly `names` hold them."""
        await eventually(
            lambda: asyncio.to_thread(self.held),
            lambda held: sorted(held) == sorted(names) and all(held.values()),
            within=within,
        )

    def homes(self, names: Sequence[str]) -> dict[str, str]:
        """Agent name → the replica holding its home partition now."""
        listed = ",".join(f"'{name}'" for name in names)
        rows = self.postgres.sql(
            "SELECT i.agent_name, coalesce(p.holder, '') FROM identities i "
            "JOIN partitions p ON p.partition = i.home_partition "
            f"WHERE i.agent_name IN ({listed})",
            self.database,
        )
        return dict(row.split("|") for row in rows.splitlines() if row)

    def logs(self) -> str:
        return "\n".join(
            f"--- {name} stderr ---\n{replica.stderr}" for name, replica in self.replicas.items()
        )


@contextlib.asynccontextmanager
async def process_cluster(
    postgres: PostgresServer, folder: Path, names: Sequence[str]
) -> AsyncIterator[ProcessCluster]:
    """`names` replicas started (the first alone, since it sets the empty database up) and
    holding every partition between them; every process stopped when the block ends."""
    files = ClusterFiles.create(folder)
    dsn = postgres.create_database("faults")
    async with RoundRobinProxy(["127.0.0.1:1"]) as proxy:
        cluster = ProcessCluster(postgres=postgres, files=files, dsn=dsn, proxy=proxy)
        try:
            await cluster.add(names[0])
            await asyncio.gather(*(cluster.add(name) for name in names[1:]))
            await cluster.wait_held_by(names)
            yield cluster
        except BaseException:
            print(cluster.logs())  # pytest shows it with the failure
            raise
        finally:
            try:
                await asyncio.gather(
                    *(replica.close() for replica in cluster.replicas.values()),
                    return_exceptions=True,
                )
            finally:
                for replica in cluster.replicas.values():
                    if replica.running:
                        with contextlib.suppress(ProcessLookupError):
                            replica.process.send_signal(signal.SIGCONT)
                    replica.kill_now()


@dataclasses.dataclass
class Ledger:
    """Every message of the load: sent, received, failed."""

    sent: dict[tuple[str, str], set[int]] = dataclasses.field(default_factory=dict)
    """(author, recipient) → numbers answered sent or delivery-pending."""
    pending: int = 0
    """Sends answered delivery-pending (they must still be received)."""
    received: dict[tuple[str, str], dict[int, set[str]]] = dataclasses.field(default_factory=dict)
    """(author, recipient) → number → the delivery tokens it came under."""
    last_received: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    out_of_order: list[tuple[str, str, int, int]] = dataclasses.field(default_factory=list)
    """(author, recipient, number, after): `number` arrived after the larger `after`."""
    failures: list[tuple[float, str, int, str]] = dataclasses.field(default_factory=list)
    """(monotonic time, author, number, reason) of every failed attempt."""
    given_up: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    acknowledge_failures: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """(recipient, reason) of every acknowledgment that failed."""
    stream_failures: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """(recipient, failure) of every `messages()` loop that ended."""
    successes: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    """author → monotonic times its sends answered."""

    def lost(self) -> list[tuple[str, str, int]]:
        return [
            (author, recipient, number)
            for (author, recipient), numbers in self.sent.items()
            for number in sorted(numbers)
            if number not in self.received.get((author, recipient), {})
        ]

    def duplicated(self) -> list[tuple[str, str, int]]:
        return [
            (author, recipient, number)
            for (author, recipient), numbers in self.received.items()
            for number, tokens in numbers.items()
            if len(tokens) > 1
        ]

    def total_sent(self) -> int:
        return sum(len(numbers) for numbers in self.sent.values())

    def receive(self, author: str, recipient: str, number: int, token: str) -> None:
        pair = (author, recipient)
        tokens = self.received.setdefault(pair, {}).setdefault(number, set())
        first = not tokens
        tokens.add(token)
        if not first:
            return
        last = self.last_received.get(pair, 0)
        if number < last:
            self.out_of_order.append((author, recipient, number, last))
        else:
            self.last_received[pair] = number

    def recovery_after(self, moment: float) -> float:
        """Seconds from `moment` until every author had a send answer after it (the
        slowest author's first answer): how long the affected agents' sends stalled."""
        firsts = [
            min((t for t in times if t > moment), default=float("inf"))
            for times in self.successes.values()
        ]
        return max(firsts, default=float("inf")) - moment

    def summary(self) -> str:
        return (
            f"sent {self.total_sent()} (delivery-pending {self.pending}), "
            f"lost {len(self.lost())}, duplicated {len(self.duplicated())}, "
            f"out of order {len(self.out_of_order)}, failed attempts {len(self.failures)}, "
            f"given up {len(self.given_up)}, acknowledgments failed "
            f"{len(self.acknowledge_failures)}, streams ended {self.stream_failures[:10]}"
        )


@dataclasses.dataclass
class Agent:
    name: str
    token: str
    partner: str
    client: harness_client.Endpoint | None = None


class Load:
    """Agent pairs sending numbered keyed messages to each other through the proxy."""

    def __init__(self, cluster: ProcessCluster, pairs: int) -> None:
        self.cluster = cluster
        self.pairs = pairs
        self.ledger = Ledger()
        self.agents: list[Agent] = []
        self._stop = asyncio.Event()
        self._senders: list[asyncio.Task[None]] = []
        self._receivers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        names = [random_name(f"a{i}") for i in range(2 * self.pairs)]
        async with await harness_client.connect_management(
            self.cluster.proxy.address, admin_token=self.cluster.files.admin()
        ) as operator:
            tokens = {name: (await operator.register_agent(name)).token for name in names}
        for index, name in enumerate(names):
            partner = names[index + 1 if index % 2 == 0 else index - 1]
            agent = Agent(name=name, token=tokens[name], partner=partner)
            agent.client = await harness_client.connect(
                self.cluster.proxy.address, token=agent.token, options=OWN_CONNECTION
            )
            self.agents.append(agent)
        for agent in self.agents:
            self._receivers.append(asyncio.create_task(self._receive(agent)))
        for agent in self.agents:
            self._senders.append(asyncio.create_task(self._send(agent)))

    async def _send(self, agent: Agent) -> None:
        client = agent.client
        assert client is not None
        pair = (agent.name, agent.partner)
        self.ledger.sent[pair] = set()
        times = self.ledger.successes.setdefault(agent.name, [])
        number = 0
        while not self._stop.is_set():
            number += 1
            for _attempt in range(SEND_ATTEMPTS):
                try:
                    await client.send(
                        MessageInput(to=f"agent:{agent.partner}", text=f"{agent.name} {number}"),
                        idempotency_key=f"{agent.name}-{number}",
                        deadline=SEND_DEADLINE,
                    )
                except SendError as error:
                    if error.reason is SendErrorReason.DELIVERY_PENDING:
                        self.ledger.pending += 1
                        self.ledger.sent[pair].add(number)
                        times.append(time.monotonic())
                        break
                    self.ledger.failures.append(
                        (time.monotonic(), agent.name, number, str(error.reason))
                    )
                except HarnessError as error:
                    self.ledger.failures.append(
                        (time.monotonic(), agent.name, number, type(error).__name__)
                    )
                else:
                    self.ledger.sent[pair].add(number)
                    times.append(time.monotonic())
                    break
                await asyncio.sleep(RETRY_PAUSE)
            else:
                self.ledger.given_up.append((agent.name, number))
            await asyncio.sleep(SEND_PAUSE)

    async def _receive(self, agent: Agent) -> None:
        """The agent's deliveries, each acknowledged. An acknowledgment that fails (its
        home moving) is counted and left: the item stays unacknowledged, which loses nothing.
        A stream the client gives up on is counted and opened again."""
        client = agent.client
        assert client is not None
        while True:
            stream = client.messages()
            try:
                async for delivery in stream:
                    item = delivery.item
                    if isinstance(item, MulticastItem):
                        text = harness_client.text_of(item.message.content)
                        author, _, number = text.partition(" ")
                        self.ledger.receive(author, agent.name, int(number), delivery.token)
                    try:
                        await delivery.acknowledge()
                    except DeliveryAcknowledgeError as error:
                        self.ledger.acknowledge_failures.append((agent.name, str(error.reason)))
            except HarnessError as error:
                self.ledger.stream_failures.append((agent.name, repr(error)))
            finally:
                await stream.aclose()
            await asyncio.sleep(RETRY_PAUSE)

    async def run_for(self, seconds: float) -> None:
        """Let the load run (the senders are tasks; this only waits)."""
        await asyncio.sleep(seconds)

    async def stop_and_drain(self) -> None:
        """Stop sending, wait for the senders' last answers, then until every sent message
        was received (bounded)."""
        self._stop.set()
        await asyncio.gather(*self._senders)

        async def lost() -> int:
            return len(self.ledger.lost())

        # What is still lost after the bound is what the test reports.
        with contextlib.suppress(AssertionError):
            await eventually(lost, lambda count: count == 0, within=DRAIN_BOUND, interval=0.2)

    async def close(self) -> None:
        self._stop.set()
        for task in [*self._senders, *self._receivers]:
            task.cancel()
        await asyncio.gather(*self._senders, *self._receivers, return_exceptions=True)
        for agent in self.agents:
            if agent.client is not None:
                await agent.client.close()


@contextlib.asynccontextmanager
async def steady_load(cluster: ProcessCluster, pairs: int = 3) -> AsyncIterator[Load]:
    load = Load(cluster, pairs)
    try:
        await load.start()
        yield load
    finally:
        await load.close()


def chain_defects(cluster: ProcessCluster) -> list[str]:
    """Every conversation's chain compared across its members in the database: the same
    record hashes at the same depths, depths 1..n, no PostId twice."""
    rows = cluster.postgres.sql(
        "SELECT c.conversation_id, c.agent_id, coalesce(string_agg("
        "r.depth || ':' || r.record_hash || ':' || r.post_id, ',' ORDER BY r.depth), '') "
        "FROM conversations c LEFT JOIN certified_records r "
        "ON r.agent_id = c.agent_id AND r.conversation_id = c.conversation_id "
        "GROUP BY 1, 2 ORDER BY 1, 2",
        cluster.database,
    )
    chains: dict[str, dict[str, list[tuple[int, str, str]]]] = {}
    for row in rows.splitlines():
        conversation, agent, text = row.split("|")
        entries = []
        for entry in text.split(",") if text else []:
            depth, record_hash, post_id = entry.split(":")
            entries.append((int(depth), record_hash, post_id))
        chains.setdefault(conversation, {})[agent] = entries
    defects: list[str] = []
    for conversation, members in chains.items():
        first = next(iter(members.values()))
        if len(members) < 2:
            defects.append(f"{conversation}: one member only")
        for agent, chain in members.items():
            if chain != first:
                defects.append(f"{conversation}: {agent}'s chain differs")
            if [depth for depth, _, _ in chain] != list(range(1, len(chain) + 1)):
                defects.append(f"{conversation}: {agent}'s depths are not 1..{len(chain)}")
            if len({post_id for _, _, post_id in chain}) != len(chain):
                defects.append(f"{conversation}: {agent} holds a PostId twice")
    if not chains:
        defects.append("no conversation at all")
    return defects


def diagnosis(load: Load, cluster: ProcessCluster) -> str:
    """What the database holds for the recipients of lost messages, the partitions' holders,
    and the replicas' error lines: what a failure shows."""
    recipients = sorted({recipient for _, recipient, _ in load.ledger.lost()})
    if not recipients:
        return ""
    names = ",".join(f"'{name}'" for name in recipients)
    lines = [
        cluster.postgres.sql(
            "SELECT i.agent_name, i.home_partition, p.holder, p.incarnation, "
            "(SELECT string_agg(state || '=' || n, ' ') FROM (SELECT state, count(*) n "
            " FROM pending_deliveries d WHERE d.agent_id = i.agent_id GROUP BY 1) x), "
            "(SELECT string_agg(state || '=' || n, ' ') FROM (SELECT state, count(*) n "
            " FROM inbox b WHERE b.agent_id = i.agent_id GROUP BY 1) y) "
            f"FROM identities i JOIN partitions p ON p.partition = i.home_partition "
            f"WHERE i.agent_name IN ({names})",
            cluster.database,
        ),
        cluster.postgres.sql(
            "SELECT replica_id, incarnation, serving, fenced, now() - beat FROM replicas",
            cluster.database,
        ),
        # Intents not completed: a post bound but never certified is lost at its source.
        cluster.postgres.sql(
            "SELECT i.agent_name, pi.post_id, pi.state, pi.bind_seq, pi.seq_partition, "
            "p.holder, p.incarnation, p.epoch, "
            "EXISTS (SELECT 1 FROM certified_records r WHERE r.post_id = pi.post_id) "
            "FROM post_intents pi JOIN identities i ON i.agent_id = pi.agent_id "
            "LEFT JOIN partitions p ON p.partition = pi.seq_partition "
            "WHERE pi.state <> 'completed' OR pi.record_hash IS NULL",
            cluster.database,
        ),
    ]
    lines.extend(
        f"{agent.name}: {agent.client.connection_state}"
        for agent in load.agents
        if agent.client is not None
    )
    for name, replica in cluster.replicas.items():
        errors = [
            line
            for line in replica.log
            if any(f'"level": "{level}"' in line for level in ("warning", "error", "critical"))
        ]
        lines.append(f"--- {name}: {len(errors)} warnings and errors ---")
        lines.extend(line[:2000] for line in errors[-30:])
    return "\n".join(lines)


def assert_counts_zero(load: Load, cluster: ProcessCluster) -> None:
    ledger = load.ledger
    print(ledger.summary())
    print(diagnosis(load, cluster))
    assert ledger.total_sent() > 0, "the load sent nothing"
    assert not ledger.lost(), f"lost: {ledger.lost()[:20]}\n{ledger.summary()}"
    assert not ledger.duplicated(), f"duplicated: {ledger.duplicated()[:20]}"
    assert not ledger.out_of_order, f"out of order: {ledger.out_of_order[:20]}"
    defects = chain_defects(cluster)
    assert not defects, "\n".join(defects[:20])

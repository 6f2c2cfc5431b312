"""The gateway run: K conversations sending multicasts through real daemon processes.

`bench.deployment` starts the gateway side (one `harness-gateway serve`, or a Registry, a
Router or a NATS cluster, N daemons, and PostgreSQL when asked) in a temporary directory.
Each conversation (`bench.plan`) is one sender and its receivers, every agent on its own
connection to the daemon that hosts it: a direct pair, or a group whose sender sends to
`group:<the others>`. The receivers listen for
the whole run and acknowledge every delivery; after one warm-up message per conversation
(streams attached, conversations started) has reached every receiver, each sender keeps
`burst` sends in flight to its conversation (`burst` tasks, each one `Send` at a time) for
the timed window. A message's text is JSON `{"t": <sender's perf_counter_ns>, "phase": ...}`,
so every receiver measures send-to-delivery. Afterwards the receivers get a bounded time to
see every certified post, and every process is always stopped. A firewall file, when named,
is every daemon's `--firewall-config`; a delivery's guidance is not read (the bench counts
and times deliveries, it has no model to advise).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from harness_client import (
    ClusterStatus,
    DirectMessage,
    Endpoint,
    GroupMessage,
    HarnessError,
    InboundDelivery,
    ManagementClient,
    MessageInput,
    MulticastItem,
    TextPart,
    connect,
    connect_management,
)
from harness_contract.ids import agent_id_order_key

from bench.deployment import Deployment, deploy
from bench.metrics import CommitCounters, commit_rates, scrape_commit_counters, sum_counters
from bench.plan import AgentPlan, GroupPlan, Topology
from bench.processes import cpu_between, total_cpu

SEND_DEADLINE: Final = 30.0
"""Seconds one `Send` may take before the bench counts it as failed."""
WARMUP_TIMEOUT: Final = 60.0
"""Seconds for every conversation's warm-up message to be certified and delivered."""
DRAIN_TIMEOUT: Final = 30.0
"""Seconds the receivers get, after the timed window, to see every certified post."""
ACK_SETTLE_TIMEOUT: Final = 15.0
"""Seconds the receivers' acknowledgments get to finish before the receivers stop."""
CLUSTER_SETTLE_TIMEOUT: Final = 90.0
"""Seconds for a cluster's partitions to settle before agents register: every partition held,
each replica holding some. A replica claims only after one lease TTL of fresh beats and the
earlier replicas hand partitions over to it, on a shared 2-core machine."""
CLUSTER_SETTLE_POLL: Final = 0.5
"""Seconds between two readings of every replica's status while the partitions settle."""
HUB_CANDIDATES_PER_AGENT: Final = 32
"""Hub candidates registered per other agent at most: each has a chance of 1 in (others + 1)
to draw the lowest AgentId, so this bound fails with a probability of about e^-32."""
ACKS_IN_FLIGHT: Final = 256
"""Acknowledgments a receiver has pending before it stops reading (the stream window)."""
WARMUP: Final = "warmup"
"""The phase of a conversation's first message, sent before the clock starts, never measured."""
TIMED: Final = "timed"
"""The phase of every message sent in the timed window."""


class RunFailed(Exception):
    """The run could not be measured (the warm-up never completed, a cluster's partitions
    never settled)."""


def stamp_text(phase: str) -> str:
    """The text of one bench message: its phase and the sender's clock, JSON."""
    return json.dumps({"t": time.perf_counter_ns(), "phase": phase})


def read_stamp(text: str) -> tuple[str, int] | None:
    """`(phase, sent_ns)` of a bench message's text, or None when it is not one."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    phase, sent = value.get("phase"), value.get("t")
    if not isinstance(phase, str) or not isinstance(sent, int) or isinstance(sent, bool):
        return None
    return phase, sent


@dataclass(slots=True)
class Receiver:
    """One receiving agent and what it measured."""

    name: str
    endpoint: Endpoint
    changed: asyncio.Event
    """Set whenever a receiver's counts change; shared by every receiver of the run."""
    warmed: asyncio.Event = field(default_factory=asyncio.Event)
    received: int = 0
    delivery_latencies_ns: list[int] = field(default_factory=list)
    strangers: int = 0
    acks_pending: int = 0
    ack_failures: Counter[str] = field(default_factory=Counter)
    error: str | None = None


@dataclass(slots=True)
class Conversation:
    """One sender, the address it sends to, its receivers, and what the sender measured."""

    index: int
    sender: Endpoint
    address: str
    receivers: list[Receiver]
    sent: int = 0
    send_latencies_ns: list[int] = field(default_factory=list)
    send_failures: Counter[str] = field(default_factory=Counter)
    sender_daemon: int = 0
    """The index of the daemon hosting the sender: its posts are that daemon's."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessReport:
    """One gateway-side process: how it ended, what it cost, what it complained about."""

    name: str
    exit_code: int | None
    cpu_seconds: float | None
    """CPU it used over the measured span (Linux /proc), None where unreadable."""
    problems: tuple[str, ...]
    problem_count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DaemonLoad:
    """One daemon's share of the run."""

    name: str
    posts: int
    """Posts certified for the senders it hosts (with the round-robin layout it delivers
    about as many to its receivers)."""
    cpu_seconds: float | None
    """CPU it used over the measured span; None where unreadable."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerReport:
    """One NATS or PostgreSQL server process (with what it forked) over the measured span."""

    name: str
    cpu_seconds: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayOutcome:
    """The gateway run's measurements and everything that went wrong in it."""

    posts: int
    elapsed: float
    send_latencies_ns: list[int]
    delivery_latencies_ns: list[int]
    """One sample per receiver per post: a group post gives one from every receiver."""
    commits_per_second: float | None
    mean_commit_batch_size: float | None
    undelivered: int
    """Deliveries of certified posts (one per receiver) not seen within the drain bound."""
    send_failures: Mapping[str, int]
    ack_failures: Mapping[str, int]
    receiver_errors: tuple[str, ...]
    strangers: int
    processes: tuple[ProcessReport, ...]
    """Every gateway-side process, daemons first."""
    measured_over: float
    """Seconds from the start of the timed window to the end of the drain."""
    gateway_cpu_seconds: float | None
    """CPU all gateway-side processes used over `measured_over`; None when any is unknown."""
    bench_cpu_seconds: float
    """CPU this process used over `measured_over`."""
    daemon_loads: tuple[DaemonLoad, ...] = ()
    """Each daemon's posts and CPU, in daemon index order."""
    servers: tuple[ServerReport, ...] = ()
    """The NATS nodes and the PostgreSQL server, when the run had them."""
    server_cpu_seconds: float | None = None
    """CPU all servers used over `measured_over`; None when there were none or any is
    unknown."""


def _describe(error: HarnessError) -> str:
    return f"{type(error).__name__}:{error.reason}"


async def measure_gateway(
    *,
    gateway_bin: str,
    plans: Sequence[GroupPlan],
    topology: Topology,
    burst: int,
    seconds: float,
    firewall: Path | None = None,
    hub: bool = False,
) -> GatewayOutcome:
    """Start the gateway side (every daemon with the firewall file `firewall`, if any),
    drive the conversations of `plans` for `seconds` with `burst` sends in flight per
    sender, stop every process, report. With `hub`, the senders of `plans` are one agent,
    registered with the lowest AgentId of the run."""
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as scratch:
        async with deploy(
            gateway_bin=gateway_bin, topology=topology, scratch=Path(scratch), firewall=firewall
        ) as side:
            measured = await _drive(side, plans, burst, seconds, hub=hub)
        # Outside the block: every process stopped, so the exit codes are known.
        return _outcome(measured, side)


@dataclass(slots=True, kw_only=True)
class _Measured:
    conversations: list[Conversation]
    elapsed: float
    before: CommitCounters | None
    after: CommitCounters | None
    scraped_over: float
    undelivered: int
    gateway_cpu: dict[str, float | None]
    server_cpu: dict[str, float | None]
    bench_cpu_seconds: float


async def _scrape(side: Deployment) -> CommitCounters | None:
    scrapes = await asyncio.gather(
        *(scrape_commit_counters(daemon.metrics_address) for daemon in side.daemons)
    )
    return sum_counters(scrapes)


async def _drive(
    side: Deployment, plans: Sequence[GroupPlan], burst: int, seconds: float, *, hub: bool
) -> _Measured:
    async with contextlib.AsyncExitStack() as stack:
        managers: list[ManagementClient] = []
        for daemon in side.daemons:
            manager = await connect_management(daemon.target, admin_token=daemon.admin_token)
            stack.push_async_callback(manager.close)
            managers.append(manager)
        if side.cluster:
            await wait_partitions_settled(managers)

        async def connect_as(agent: AgentPlan, token: str) -> Endpoint:
            """Connect to the daemon (the replica) `agent` dials, as `agent`."""
            endpoint = await connect(side.daemons[agent.daemon].target, token=token)
            stack.push_async_callback(endpoint.close)
            return endpoint

        async def join(agent: AgentPlan) -> Endpoint:
            """Register `agent` on its daemon (any replica, in a cluster: the one it dials)
            and connect to that daemon as it."""
            registered = await managers[agent.daemon].register_agent(agent.name)
            agent_ids[agent.name] = registered.agent_id
            return await connect_as(agent, registered.token)

        agent_ids: dict[str, str] = {}
        changed = asyncio.Event()
        receivers_of = {
            plan.index: [
                Receiver(agent.name, await join(agent), changed) for agent in plan.receivers
            ]
            for plan in plans
        }
        hub_endpoint: Endpoint | None = None
        if hub:
            hub_plan = plans[0].sender
            token = await _register_lowest(
                managers[hub_plan.daemon], hub_plan.name, list(agent_ids.values())
            )
            hub_endpoint = await connect_as(hub_plan, token)
        conversations: list[Conversation] = []
        for plan in plans:
            sender = hub_endpoint or await join(plan.sender)
            receivers = receivers_of[plan.index]
            conversations.append(
                Conversation(
                    plan.index, sender, plan.address, receivers, sender_daemon=plan.sender.daemon
                )
            )
        everyone = [receiver for talk in conversations for receiver in talk.receivers]
        listening = _Receivers(everyone, changed)
        # Pushed after the endpoints, so the receivers stop before their endpoints close.
        stack.push_async_callback(listening.stop)
        listening.start()

        try:
            async with asyncio.timeout(WARMUP_TIMEOUT):
                for talk in conversations:
                    await talk.sender.send(
                        MessageInput(to=talk.address, text=stamp_text(WARMUP)),
                        deadline=SEND_DEADLINE,
                    )
                await asyncio.gather(*(receiver.warmed.wait() for receiver in everyone))
        except TimeoutError:
            cold = [receiver.name for receiver in everyone if not receiver.warmed.is_set()]
            raise RunFailed(
                f"warm-up messages to {cold} not delivered within {WARMUP_TIMEOUT:g} s"
            ) from None

        before = await _scrape(side)
        gateway_cpu_before = side.cpu_seconds()
        server_cpu_before = side.server_cpu_seconds()
        bench_cpu_before = time.process_time()
        scrape_started = time.perf_counter()
        started = time.perf_counter()
        stop_at = started + seconds
        async with asyncio.TaskGroup() as senders:
            for talk in conversations:
                for lane in range(burst):
                    senders.create_task(
                        _send_loop(talk, stop_at), name=f"sender-{talk.index}-{lane}"
                    )
        elapsed = time.perf_counter() - started

        undelivered = await _wait_delivered(conversations, changed)
        after = await _scrape(side)
        scraped_over = time.perf_counter() - scrape_started
        bench_cpu = time.process_time() - bench_cpu_before
        gateway_cpu = cpu_between(gateway_cpu_before, side.cpu_seconds())
        server_cpu = cpu_between(server_cpu_before, side.server_cpu_seconds())
        await listening.settle()
        return _Measured(
            conversations=conversations,
            elapsed=elapsed,
            before=before,
            after=after,
            scraped_over=scraped_over,
            undelivered=undelivered,
            gateway_cpu=gateway_cpu,
            server_cpu=server_cpu,
            bench_cpu_seconds=bench_cpu,
        )


async def wait_partitions_settled(
    managers: Sequence[ManagementClient], *, within: float = CLUSTER_SETTLE_TIMEOUT
) -> None:
    """Wait (bounded) until, in every replica's own view, no partition is unowned, and the
    replicas' holdings add up to P with each holding some: the cluster's load is spread
    before the first agent registers (cluster.md §3.2)."""

    async def settled() -> bool:
        views = await asyncio.gather(*(manager.status() for manager in managers))
        clusters = [view.cluster for view in views]
        if any(view is None for view in clusters):
            raise RunFailed("a --cluster replica's status has no cluster view")
        return partitions_settled([view for view in clusters if view is not None])

    try:
        async with asyncio.timeout(within):
            # Polled: the status is the replicas' own view, with no change to wait on.
            while True:
                if await settled():
                    return
                await asyncio.sleep(CLUSTER_SETTLE_POLL)
    except TimeoutError:
        raise RunFailed(f"the cluster's partitions did not settle within {within:g} s") from None


def partitions_settled(views: Sequence[ClusterStatus]) -> bool:
    """Whether the replicas' own views say every partition is held, each replica holds
    some, and their holdings add up to the cluster's P."""
    if not views:
        return False
    total = views[0].partitions
    return (
        all(view.unowned_partitions == 0 and view.owned_partitions > 0 for view in views)
        and sum(view.owned_partitions for view in views) == total
    )


async def _register_lowest(manager: ManagementClient, name: str, others: Sequence[str]) -> str:
    """Register `name`, then `name-1`, `name-2`, ... until one's AgentId is below each of
    `others` (cluster.md §2: the member with the lowest AgentId sequences the
    conversation); its token. The other candidates stay registered and idle."""
    below = min(agent_id_order_key(agent_id) for agent_id in others)
    attempts = HUB_CANDIDATES_PER_AGENT * (len(others) + 1)
    for attempt in range(attempts):
        registered = await manager.register_agent(name if attempt == 0 else f"{name}-{attempt}")
        if agent_id_order_key(registered.agent_id) < below:
            return registered.token
    raise RunFailed(f"no hub candidate of {attempts} drew an AgentId below every other agent's")


async def _send_loop(talk: Conversation, stop_at: float) -> None:
    """One of the sender's `burst` lanes: one `Send` at a time until the window closes."""
    while time.perf_counter() < stop_at:
        started = time.perf_counter_ns()
        message = MessageInput(to=talk.address, text=json.dumps({"t": started, "phase": TIMED}))
        try:
            await talk.sender.send(message, deadline=SEND_DEADLINE)
        except HarnessError as error:
            talk.send_failures[_describe(error)] += 1
            continue
        talk.send_latencies_ns.append(time.perf_counter_ns() - started)
        talk.sent += 1


async def _wait_until(condition: Callable[[], bool], changed: asyncio.Event, within: float) -> bool:
    """Wait until `condition()` holds, re-checking it each time `changed` is set; False when
    `within` seconds passed first."""
    try:
        async with asyncio.timeout(within):
            while not condition():
                # No await between the check and the clear: a change cannot slip past.
                changed.clear()
                await changed.wait()
    except TimeoutError:
        return condition()
    return True


def missing_deliveries(conversations: Sequence[Conversation]) -> int:
    """Deliveries still owed: for each receiver, the posts its sender certified that it has
    not seen (a group post is owed once to every receiver)."""
    return sum(
        max(0, talk.sent - receiver.received)
        for talk in conversations
        for receiver in talk.receivers
    )


async def _wait_delivered(conversations: list[Conversation], changed: asyncio.Event) -> int:
    """Wait (bounded) until each receiver saw as many timed posts as its sender certified,
    or a receiver failed; returns how many deliveries are still missing."""
    await _wait_until(
        lambda: (
            missing_deliveries(conversations) == 0
            or any(receiver.error for talk in conversations for receiver in talk.receivers)
        ),
        changed,
        DRAIN_TIMEOUT,
    )
    return missing_deliveries(conversations)


class _Receivers:
    """The receivers' tasks: started once, stopped (cancelled and awaited) once."""

    def __init__(self, receivers: list[Receiver], changed: asyncio.Event) -> None:
        self._receivers = receivers
        self._changed = changed
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(_receive_loop(receiver), name=f"receiver-{receiver.name}")
            for receiver in self._receivers
        ]

    async def settle(self) -> None:
        """Wait (bounded) for the acknowledgments in flight."""
        await _wait_until(
            lambda: not any(receiver.acks_pending for receiver in self._receivers),
            self._changed,
            ACK_SETTLE_TIMEOUT,
        )

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []


async def _receive_loop(receiver: Receiver) -> None:
    in_flight = asyncio.Semaphore(ACKS_IN_FLIGHT)
    try:
        async with (
            asyncio.TaskGroup() as acks,
            contextlib.aclosing(receiver.endpoint.messages()) as deliveries,
        ):
            async for delivery in deliveries:
                arrived = time.perf_counter_ns()
                note_delivery(receiver, delivery, arrived)
                await in_flight.acquire()
                receiver.acks_pending += 1
                acks.create_task(_acknowledge(receiver, delivery, in_flight))
    except* HarnessError as failures:
        # The stream gave up (`ListenError`) or the endpoint closed under it.
        receiver.error = ", ".join(
            _describe(error) if isinstance(error, HarnessError) else repr(error)
            for error in failures.exceptions
        )
    finally:
        receiver.changed.set()


def note_delivery(receiver: Receiver, delivery: InboundDelivery, arrived_ns: int) -> None:
    """Count one delivery at `receiver`: a timed bench message (direct or group) adds a
    latency sample, a warm-up one marks the receiver warm, anything else is a stranger."""
    match delivery.item:
        case MulticastItem(message=DirectMessage(content=content) | GroupMessage(content=content)):
            text = "\n".join(part.text for part in content if isinstance(part, TextPart))
            stamp = read_stamp(text)
        case _:
            stamp = None
    if stamp is None:
        receiver.strangers += 1
        return
    phase, sent_ns = stamp
    receiver.changed.set()
    if phase == WARMUP:
        receiver.warmed.set()
    elif phase == TIMED:
        receiver.received += 1
        receiver.delivery_latencies_ns.append(arrived_ns - sent_ns)
    else:
        receiver.strangers += 1


async def _acknowledge(
    receiver: Receiver, delivery: InboundDelivery, in_flight: asyncio.Semaphore
) -> None:
    try:
        await delivery.acknowledge()
    except HarnessError as error:
        receiver.ack_failures[_describe(error)] += 1
    finally:
        receiver.acks_pending -= 1
        in_flight.release()
        receiver.changed.set()


def _outcome(measured: _Measured, side: Deployment) -> GatewayOutcome:
    conversations = measured.conversations
    receivers = [receiver for talk in conversations for receiver in talk.receivers]
    commits_per_second, mean_batch = commit_rates(
        measured.before, measured.after, measured.scraped_over
    )
    send_failures: Counter[str] = Counter()
    ack_failures: Counter[str] = Counter()
    for talk in conversations:
        send_failures.update(talk.send_failures)
    for receiver in receivers:
        ack_failures.update(receiver.ack_failures)
    return GatewayOutcome(
        posts=sum(talk.sent for talk in conversations),
        elapsed=measured.elapsed,
        send_latencies_ns=[sample for talk in conversations for sample in talk.send_latencies_ns],
        delivery_latencies_ns=[
            sample for receiver in receivers for sample in receiver.delivery_latencies_ns
        ],
        commits_per_second=commits_per_second,
        mean_commit_batch_size=mean_batch,
        undelivered=measured.undelivered,
        send_failures=dict(send_failures),
        ack_failures=dict(ack_failures),
        receiver_errors=tuple(
            f"receiver {receiver.name}: {receiver.error}"
            for receiver in receivers
            if receiver.error is not None
        ),
        strangers=sum(receiver.strangers for receiver in receivers),
        processes=tuple(
            ProcessReport(
                name=child.name,
                exit_code=child.exit_code,
                cpu_seconds=measured.gateway_cpu.get(child.name),
                problems=tuple(child.problems.kept),
                problem_count=child.problems.count,
            )
            for child in side.processes
        ),
        measured_over=measured.scraped_over,
        gateway_cpu_seconds=total_cpu(measured.gateway_cpu),
        bench_cpu_seconds=measured.bench_cpu_seconds,
        daemon_loads=daemon_loads(
            conversations,
            [daemon.child.name for daemon in side.daemons],
            measured.gateway_cpu,
            shared=side.cluster,
        ),
        servers=tuple(
            ServerReport(name=name, cpu_seconds=spent)
            for name, spent in measured.server_cpu.items()
        ),
        server_cpu_seconds=total_cpu(measured.server_cpu),
    )


def daemon_loads(
    conversations: Sequence[Conversation],
    names: Sequence[str],
    cpu: Mapping[str, float | None],
    *,
    shared: bool = False,
) -> tuple[DaemonLoad, ...]:
    """Each daemon's (by index, named by `names`) certified posts, those of the senders it
    hosts, and its CPU from `cpu` (by name). With `shared` (a cluster's replicas, where any
    replica may carry any part of any post) every replica's posts are all the run's posts,
    so its cost per post is its share of each post."""
    posts = [0] * len(names)
    for talk in conversations:
        if shared:
            posts = [count + talk.sent for count in posts]
        else:
            posts[talk.sender_daemon] += talk.sent
    return tuple(
        DaemonLoad(name=name, posts=count, cpu_seconds=cpu.get(name))
        for name, count in zip(names, posts, strict=True)
    )

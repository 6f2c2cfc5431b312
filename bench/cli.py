"""`python -m bench` (`make bench`): certified multicasts against a bare gRPC echo.

Starts real `harness-gateway` processes (one daemon, or `--daemons N` joined through a
standalone Router or a NATS JetStream cluster and a standalone Registry, with SQLite or one
PostgreSQL database as the store; the bench starts and stops those servers too), drives K
conversations through them for a fixed time (direct pairs, or groups with `--group-size`;
`--burst` sends in flight per sender), then drives a bare `grpc.aio` unary echo server (its
own process) with as many calls in flight for as long, and prints ONE JSON line on stdout. Progress and any trouble go to stderr. `--firewall FILE` runs
every daemon with that firewall file; `--firewall-cost FILE` instead compares gateway runs
without and with it, alternating, and prints the comparison's line. `--cluster N` runs N
cluster replicas on one PostgreSQL database instead (cluster.md §13), `--hub` one hub agent
in every conversation, `--compare-router` the Router path beside it.
See bench/README.md for what each field means.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import shutil
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from bench.plan import (
    GROUP_MAX_MEMBERS,
    GROUP_MIN_MEMBERS,
    MAX_DAEMONS,
    NATS_NODE_COUNTS,
    PAIR_SIZE,
    RouterKind,
    StoreKind,
    Topology,
    check_topology,
    cluster_topology,
    default_router,
    router_path_topology,
)
from bench.result import (
    BenchResult,
    CpuPerPost,
    DaemonFigures,
    FirewallCostResult,
    Percentiles,
    RoundValues,
    RouterPathFigures,
    RunMode,
    ServerFigures,
    SideSummary,
    per_post_ms,
    rate,
    ratio,
    result_line,
    this_machine,
)

if TYPE_CHECKING:
    from bench.baseline import EchoOutcome
    from bench.gateway_run import GatewayOutcome

DEFAULT_PAIRS: Final = 8
"""Agent pairs (concurrent senders) of a full run."""
DEFAULT_SECONDS: Final = 10.0
"""Seconds of a full run's timed window (and of the baseline's)."""
QUICK_PAIRS: Final = 2
"""Agent pairs of a `--quick` run."""
QUICK_SECONDS: Final = 2.0
"""Seconds of a `--quick` run's timed window."""
MAX_PAIRS: Final = 256
"""Most pairs (or groups) accepted: each sender has its own gRPC connection in this process."""
MAX_AGENTS: Final = 2 * MAX_PAIRS
"""Most agents (pairs x group size) accepted: each agent holds a gRPC connection and a
stream in this one process, as the pair mode always allowed."""
MAX_BURST: Final = 256
"""Most sends one sender keeps in flight (`--burst`)."""
MAX_IN_FLIGHT: Final = 4096
"""Most calls in flight in all (pairs x burst): each is a task here, and the baseline runs
as many echo callers."""
MAX_SECONDS: Final = 3600.0
"""Longest timed window accepted, in seconds: an hour is past any useful run."""
DEFAULT_ROUNDS: Final = 3
"""Gateway runs per side of a `--firewall-cost` comparison."""
MAX_ROUNDS: Final = 50
"""Most rounds per side: 100 gateway runs of 10 s is already about 20 minutes."""
EXIT_FAILED: Final = 1
"""Exit code when the run could not be measured (the gateway or the echo server failed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FirewallComparison:
    """`--firewall-cost`: gateway runs alternately without and with `file`, `rounds` each
    (off, on, off, on, ...), so drift of the machine falls on both sides alike."""

    file: Path
    """Absolute, so that no daemon's working directory changes what it names."""
    rounds: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig:
    """What to run."""

    pairs: int
    """K: conversations, so K senders (pairs, or groups of `group_size`)."""
    seconds: float
    burst: int
    """Sends each sender keeps in flight."""
    group_size: int
    """Agents per conversation, the sender included: 2 is a direct pair."""
    topology: Topology
    """The daemons, what joins them, where they store."""
    gateway_bin: str
    firewall: Path | None = None
    """`--firewall`: every daemon's `--firewall-config` file (absolute); None: no firewall."""
    firewall_cost: FirewallComparison | None = None
    """`--firewall-cost`: measure the firewall's cost instead of a run against the echo."""
    hub: bool = False
    """`--hub` (with `--cluster`): one agent, with the lowest AgentId, sends in every
    conversation."""
    compare_router: bool = False
    """`--compare-router` (with `--cluster N`): also run N daemons on the Router path (NATS,
    PostgreSQL) in the same invocation, and report it beside the cluster."""

    @property
    def in_flight(self) -> int:
        """Calls in flight at once, in the gateway run and in the baseline alike."""
        return self.pairs * self.burst

    @property
    def daemons(self) -> int:
        """How many daemons host the agents."""
        return self.topology.daemons

    @property
    def mode(self) -> RunMode:
        """The result line's `mode`."""
        return RunMode(
            burst=self.burst,
            group_size=self.group_size,
            daemons=self.topology.daemons,
            router=self.topology.router.value,
            store=self.topology.store.value,
            nats_nodes=self.topology.nats_nodes,
            hub=self.hub,
        )


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def _between(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in `low..high`."""

    def parse(text: str) -> int:
        value = _whole_number(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, not {value}")
        return value

    return parse


def _group_size(text: str) -> int:
    value = _whole_number(text)
    if value != PAIR_SIZE and not GROUP_MIN_MEMBERS <= value <= GROUP_MAX_MEMBERS:
        # A group of two does not exist: `group:<one name>` is refused, never made direct.
        raise argparse.ArgumentTypeError(
            f"must be {PAIR_SIZE} (direct pairs) or {GROUP_MIN_MEMBERS} to "
            f"{GROUP_MAX_MEMBERS} (groups), not {value}"
        )
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be above 0 and at most {MAX_SECONDS:g}, not {value:g}"
        )
    return value


def _firewall_file(text: str) -> Path:
    """An argparse type: a file that exists, made absolute. Only the daemons read it (the
    bench is a client of the API): a bad file is a daemon that does not start."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no file at {text!r}")
    return path.absolute()


def _default_gateway_bin() -> str:
    beside = Path(sys.executable).parent / "harness-gateway"
    if beside.exists():
        return str(beside)
    return shutil.which("harness-gateway") or "harness-gateway"


def build_parser() -> argparse.ArgumentParser:
    """The `python -m bench` argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=(
            "Measure certified multicasts through real harness-gateway processes against "
            "a bare grpc.aio unary echo with as many calls in flight; print one JSON line."
        ),
    )
    parser.add_argument(
        "--pairs",
        type=_between(1, MAX_PAIRS),
        default=None,
        help=f"conversations, one sender each: sender/receiver pairs, or groups with "
        f"--group-size (default {DEFAULT_PAIRS}; {QUICK_PAIRS} with --quick)",
    )
    parser.add_argument(
        "--seconds",
        type=_positive_seconds,
        default=None,
        help=f"length of each timed window (default {DEFAULT_SECONDS:g}; "
        f"{QUICK_SECONDS:g} with --quick)",
    )
    parser.add_argument(
        "--burst",
        type=_between(1, MAX_BURST),
        default=1,
        help="sends each sender keeps in flight to its conversation (default 1); the baseline "
        "runs pairs x burst concurrent echo callers",
    )
    parser.add_argument(
        "--group-size",
        type=_group_size,
        default=PAIR_SIZE,
        help=f"agents per conversation, the sender included: {PAIR_SIZE} is direct pairs "
        f"(default), {GROUP_MIN_MEMBERS}..{GROUP_MAX_MEMBERS} makes each a group whose sender "
        "sends to group:<the others>",
    )
    parser.add_argument(
        "--daemons",
        type=_between(1, MAX_DAEMONS),
        default=1,
        help=f"daemons hosting the agents, 1..{MAX_DAEMONS} (default 1); with several, each "
        "conversation's sender is on one and its receivers on the next, round robin",
    )
    parser.add_argument(
        "--router",
        choices=[kind.value for kind in RouterKind],
        default=None,
        help="what joins the daemons: inprocess (one daemon's embedded Router and Registry), "
        "grpc (a standalone Router and Registry) or nats (a NATS JetStream cluster the bench "
        "starts, and a standalone Registry); default inprocess for 1 daemon, grpc for more",
    )
    parser.add_argument(
        "--store",
        choices=[kind.value for kind in StoreKind],
        default=None,
        help="sqlite: each daemon's own file (default); postgresql: one database on a "
        "PostgreSQL server the bench starts, shared by the Registry and every daemon",
    )
    parser.add_argument(
        "--nats-nodes",
        type=_whole_number,
        choices=NATS_NODE_COUNTS,
        default=None,
        help="with --router nats: 1 JetStream node (default) or a 3-node cluster (an R3 stream)",
    )
    parser.add_argument(
        "--cluster",
        type=_between(1, MAX_DAEMONS),
        default=None,
        metavar="N",
        help=f"N harness-gateway serve --cluster replicas (1..{MAX_DAEMONS}) on one PostgreSQL "
        "database the bench starts, every agent's client dialling a random replica; not with "
        "--daemons, --router, --store or --nats-nodes",
    )
    parser.add_argument(
        "--hub",
        action="store_true",
        help="with --cluster: one agent, registered with the lowest AgentId, is the sender of "
        "every conversation (its home replica sequences them all)",
    )
    parser.add_argument(
        "--compare-router",
        action="store_true",
        help="with --cluster N: also run --daemons N --router nats --store postgresql in the "
        "same invocation and report it beside the cluster (router_path)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a short smoke run: {QUICK_PAIRS} pairs for {QUICK_SECONDS:g} s unless "
        "--pairs or --seconds say otherwise",
    )
    parser.add_argument(
        "--gateway-bin",
        default=None,
        help="the harness-gateway executable (default: the one beside this Python)",
    )
    firewall = parser.add_mutually_exclusive_group()
    firewall.add_argument(
        "--firewall",
        type=_firewall_file,
        default=None,
        metavar="FILE",
        help="run every daemon with this --firewall-config file (default: no firewall)",
    )
    firewall.add_argument(
        "--firewall-cost",
        type=_firewall_file,
        default=None,
        metavar="FILE",
        help="instead of the run against the echo, run the gateway alternately without and "
        "with this firewall file (--rounds times each) and print the firewall's cost per post",
    )
    parser.add_argument(
        "--rounds",
        type=_between(1, MAX_ROUNDS),
        default=None,
        help=f"gateway runs per side with --firewall-cost (default {DEFAULT_ROUNDS})",
    )
    return parser


def parse_config(argv: Sequence[str] | None = None) -> BenchConfig:
    """The run `argv` asks for; exits 2 on invalid flags (argparse)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cluster is not None:
        given = [
            flag
            for flag, value in (
                ("--daemons", args.daemons != 1),
                ("--router", args.router is not None),
                ("--store", args.store is not None),
                ("--nats-nodes", args.nats_nodes is not None),
            )
            if value
        ]
        if given:
            parser.error(
                f"--cluster sets the replicas, their Router and their store; not with "
                f"{', '.join(given)}"
            )
        topology = cluster_topology(args.cluster)
    else:
        for flag, value in (("--hub", args.hub), ("--compare-router", args.compare_router)):
            if value:
                parser.error(f"{flag} needs --cluster N")
        router = default_router(args.daemons) if args.router is None else RouterKind(args.router)
        topology = Topology(
            daemons=args.daemons,
            router=router,
            store=StoreKind(args.store or StoreKind.SQLITE.value),
            nats_nodes=(
                args.nats_nodes
                if args.nats_nodes is not None or router is not RouterKind.NATS
                else NATS_NODE_COUNTS[0]
            ),
        )
    if args.hub and args.compare_router:
        # The Router path's layout is round robin; a hub there would measure another load.
        parser.error("--hub is a cluster workload; --compare-router runs the round-robin one")
    try:
        check_topology(topology)
    except ValueError as clash:
        parser.error(str(clash))
    if args.pairs is not None:
        pairs = args.pairs
    elif args.quick:
        # Every daemon sends: a quick run across many daemons has one sender on each.
        pairs = max(QUICK_PAIRS, 1 if topology.is_cluster else topology.daemons)
    else:
        pairs = DEFAULT_PAIRS
    if pairs < topology.daemons and not topology.is_cluster:
        parser.error(
            f"--pairs {pairs} with --daemons {topology.daemons} leaves "
            f"{topology.daemon_names[pairs]} without a sender; give at least one pair per daemon"
        )
    seconds = (
        args.seconds
        if args.seconds is not None
        else (QUICK_SECONDS if args.quick else DEFAULT_SECONDS)
    )
    # The flags are each in range; their products bound what this one process holds.
    if pairs * args.group_size > MAX_AGENTS:
        parser.error(
            f"--pairs {pairs} x --group-size {args.group_size} is "
            f"{pairs * args.group_size} agents, over {MAX_AGENTS}"
        )
    if pairs * args.burst > MAX_IN_FLIGHT:
        parser.error(
            f"--pairs {pairs} x --burst {args.burst} is {pairs * args.burst} calls in flight, "
            f"over {MAX_IN_FLIGHT}"
        )
    if args.rounds is not None and args.firewall_cost is None:
        parser.error("--rounds counts the runs of --firewall-cost; name its file")
    comparison = (
        None
        if args.firewall_cost is None
        else FirewallComparison(
            file=args.firewall_cost,
            rounds=args.rounds if args.rounds is not None else DEFAULT_ROUNDS,
        )
    )
    return BenchConfig(
        pairs=pairs,
        seconds=seconds,
        burst=args.burst,
        group_size=args.group_size,
        topology=topology,
        gateway_bin=args.gateway_bin or _default_gateway_bin(),
        firewall=args.firewall,
        firewall_cost=comparison,
        hub=args.hub,
        compare_router=args.compare_router,
    )


def describe_load(config: BenchConfig) -> str:
    """The gateway run's load in words, for stderr."""
    if config.group_size == PAIR_SIZE:
        shape = f"{config.pairs} pair{'s' if config.pairs != 1 else ''}"
    else:
        shape = f"{config.pairs} group{'s' if config.pairs != 1 else ''} of {config.group_size}"
    if config.burst > 1:
        shape += f", {config.burst} sends in flight per sender"
    if config.hub:
        shape += ", one hub (the lowest AgentId) sending in every conversation"
    return f"{shape}, {describe_topology(config.topology)}"


def describe_topology(topology: Topology) -> str:
    """The gateway side in words, for stderr."""
    store = {
        StoreKind.SQLITE: "SQLite",
        StoreKind.POSTGRESQL: "one PostgreSQL database",
    }[topology.store]
    if topology.router is RouterKind.INPROCESS:
        return f"one daemon (embedded Router and Registry, {store})"
    if topology.is_cluster:
        return (
            f"a cluster of {topology.daemons} replica(s) on {store}, each agent's client "
            "dialling a random replica"
        )
    router = {
        RouterKind.GRPC: "standalone Router",
        RouterKind.NATS: f"NATS JetStream Router ({topology.nats_nodes} node(s))",
    }[topology.router]
    if topology.daemons == 1:
        hosts = "one daemon"
    else:
        hosts = (
            f"{topology.daemons} daemons, each sender's receivers on the next daemon "
            "(senders and receivers on separate daemons)"
        )
    return f"{hosts}; {router}, standalone Registry, {store}"


def _say(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def _report_counts(title: str, counts: Mapping[str, int]) -> None:
    if counts:
        details = ", ".join(f"{name} x{count}" for name, count in sorted(counts.items()))
        _say(f"{title}: {details}")


async def measure(config: BenchConfig) -> BenchResult | FirewallCostResult:
    """The run `config` asks for: against the echo, or the firewall's cost."""
    if config.firewall_cost is not None:
        return await run_firewall_cost(config, config.firewall_cost)
    return await run(config)


async def run(config: BenchConfig) -> BenchResult:
    """Both measurements, one after the other (never competing for the CPUs)."""
    gateway = await _gateway_run(config, firewall=config.firewall, title="gateway run")
    router_path: RouterPathFigures | None = None
    if config.compare_router:
        beside = router_path_config(config)
        router_path = router_path_figures(
            beside,
            await _gateway_run(beside, firewall=config.firewall, title="router-path run"),
        )
    echo = await _echo_run(config)
    return assemble(config, gateway, echo, router_path=router_path)


def router_path_config(config: BenchConfig) -> BenchConfig:
    """What `--compare-router` runs beside `--cluster N`: the same load on N daemons joined
    through NATS, on PostgreSQL."""
    return dataclasses.replace(
        config,
        topology=router_path_topology(config.daemons),
        hub=False,
        compare_router=False,
    )


def router_path_figures(config: BenchConfig, gateway: GatewayOutcome) -> RouterPathFigures:
    """What the line keeps of the Router-path run."""
    return RouterPathFigures(
        mode=config.mode,
        certified_posts_per_second=rate(gateway.posts, gateway.elapsed),
        send_latency_ms=Percentiles.of_ns(gateway.send_latencies_ns),
        cpu_ms_per_post=CpuPerPost(
            gateway=per_post_ms(gateway.gateway_cpu_seconds, gateway.posts),
            servers=per_post_ms(gateway.server_cpu_seconds, gateway.posts),
        ),
    )


def _firewall_words(firewall: Path | None) -> str:
    return "no firewall" if firewall is None else f"firewall {firewall.name}"


async def _gateway_run(config: BenchConfig, *, firewall: Path | None, title: str) -> GatewayOutcome:
    """One gateway measurement, said on stderr under `title`: its load, its outcome, its
    CPU and whatever went wrong."""
    from bench.gateway_run import measure_gateway  # imported here, as in `_echo_run`
    from bench.plan import plan_cluster_groups, plan_groups

    _say(
        f"{title}: {describe_load(config)} for {config.seconds:g} s, "
        f"{_firewall_words(firewall)} ({config.gateway_bin})"
    )
    started = time.perf_counter()
    gateway = await measure_gateway(
        gateway_bin=config.gateway_bin,
        plans=(
            plan_cluster_groups(
                config.pairs,
                group_size=config.group_size,
                replicas=config.daemons,
                hub=config.hub,
                rng=random.Random(),  # a fresh draw of dialled replicas each run
            )
            if config.topology.is_cluster
            else plan_groups(config.pairs, group_size=config.group_size, daemons=config.daemons)
        ),
        topology=config.topology,
        burst=config.burst,
        seconds=config.seconds,
        firewall=firewall,
        hub=config.hub,
    )
    exits = ", ".join(f"{report.name} exit code {report.exit_code}" for report in gateway.processes)
    _say(
        f"{title} done in {time.perf_counter() - started:.1f} s: {gateway.posts} posts "
        f"in {gateway.elapsed:.2f} s, {exits}"
    )
    _say(_cpu_summary(gateway))
    if len(gateway.daemon_loads) > 1:
        _say(_daemon_summary(gateway))
    _report_counts("send failures", gateway.send_failures)
    _report_counts("acknowledge failures", gateway.ack_failures)
    for line in gateway.receiver_errors:
        _say(line)
    if gateway.undelivered:
        _say(
            f"{gateway.undelivered} delivery(ies) of certified posts not seen within the "
            "drain bound"
        )
    if gateway.strangers:
        _say(f"{gateway.strangers} delivery(ies) that were not bench messages")
    for report in gateway.processes:
        if report.problem_count:
            _say(f"{report.name} logged {report.problem_count} warning/error/non-JSON line(s):")
            for line in report.problems:
                print(f"  {line}", file=sys.stderr)
    if gateway.commits_per_second is None:
        _say(
            "no harness_store_commit_batch_size on some daemon's --metrics-listen: "
            "store fields are null"
        )
    return gateway


async def _echo_run(config: BenchConfig) -> EchoOutcome:
    """The baseline measurement, said on stderr."""
    # Imported here: `--help` and the unit tests need neither grpc nor the client.
    from bench.baseline import measure_echo
    from bench.gateway_run import TIMED, stamp_text

    callers = f"{config.in_flight} concurrent unary echo callers"
    if config.burst > 1:
        callers += f" ({config.pairs} channels x {config.burst})"
    _say(f"baseline run: {callers} for {config.seconds:g} s")
    payload = stamp_text(TIMED).encode()
    echo = await measure_echo(
        channels=config.pairs,
        callers_per_channel=config.burst,
        seconds=config.seconds,
        payload=payload,
    )
    _say(f"baseline run done: {echo.calls} echoes in {echo.elapsed:.2f} s")
    _report_counts("echo failures", echo.failures)
    if echo.server_problem_count:
        _say(f"echo server logged {echo.server_problem_count} trouble line(s):")
        for line in echo.server_problems:
            print(f"  {line}", file=sys.stderr)
    return echo


def _cpu_summary(gateway: GatewayOutcome) -> str:
    span = f"over {gateway.measured_over:.2f} s (timed window and drain)"
    bench = f"bench client {gateway.bench_cpu_seconds:.2f} CPU-s"
    if gateway.gateway_cpu_seconds is None:
        return f"CPU {span}: {bench}; gateway unknown (no /proc, or a process exited)"
    shares = ", ".join(
        f"{report.name} {report.cpu_seconds:.2f}"
        for report in gateway.processes
        if report.cpu_seconds is not None
    )
    # One process is the whole gateway; several are worth seeing apart.
    shares = f" ({shares})" if len(gateway.processes) > 1 else ""
    per_post_value = per_post_ms(gateway.gateway_cpu_seconds, gateway.posts)
    per_post = "" if per_post_value is None else f", {per_post_value:.1f} gateway CPU-ms per post"
    return (
        f"CPU {span}: gateway {gateway.gateway_cpu_seconds:.2f} CPU-s{shares}, "
        f"{bench}{per_post}{_servers_summary(gateway)}"
    )


def _servers_summary(gateway: GatewayOutcome) -> str:
    """The servers' share of the CPU summary: their own figures, never folded into the
    gateway's."""
    if not gateway.servers:
        return ""
    shares = ", ".join(
        f"{server.name} {_number(server.cpu_seconds, 2)}" for server in gateway.servers
    )
    per_post_value = per_post_ms(gateway.server_cpu_seconds, gateway.posts)
    per_post = "" if per_post_value is None else f", {per_post_value:.1f} server CPU-ms per post"
    return f"; servers {shares} CPU-s{per_post}"


def _daemon_summary(gateway: GatewayOutcome) -> str:
    """Each daemon's posts per second and CPU per post, for stderr."""
    figures = daemon_figures(gateway)
    return "per daemon: " + ", ".join(
        f"{daemon.name} {_number(daemon.posts_per_second, 1)} posts/s "
        f"{_number(daemon.cpu_ms_per_post, 2)} CPU-ms/post"
        for daemon in figures
    )


def _number(value: float | None, places: int) -> str:
    return "unknown" if value is None else f"{value:.{places}f}"


def daemon_figures(gateway: GatewayOutcome) -> tuple[DaemonFigures, ...]:
    """Each daemon's line entry: its senders' posts per second, its CPU per such post."""
    return tuple(
        DaemonFigures(
            name=load.name,
            posts=load.posts,
            posts_per_second=rate(load.posts, gateway.elapsed),
            cpu_ms_per_post=per_post_ms(load.cpu_seconds, load.posts),
        )
        for load in gateway.daemon_loads
    )


def assemble(
    config: BenchConfig,
    gateway: GatewayOutcome,
    echo: EchoOutcome,
    *,
    router_path: RouterPathFigures | None = None,
) -> BenchResult:
    """The result line's values from the measurements."""
    posts_per_second = rate(gateway.posts, gateway.elapsed)
    echo_per_second = rate(echo.calls, echo.elapsed)
    return BenchResult(
        machine=this_machine(),
        pairs=config.pairs,
        seconds=config.seconds,
        mode=config.mode,
        firewall=None if config.firewall is None else config.firewall.name,
        certified_posts_per_second=posts_per_second,
        send_latency_ms=Percentiles.of_ns(gateway.send_latencies_ns),
        send_to_delivery_ms=Percentiles.of_ns(gateway.delivery_latencies_ns),
        store_commits_per_second=gateway.commits_per_second,
        mean_commit_batch_size=gateway.mean_commit_batch_size,
        gateway_cpu_ms_per_post=per_post_ms(gateway.gateway_cpu_seconds, gateway.posts),
        baseline_unary_echo_per_second=echo_per_second,
        ratio_to_baseline=ratio(posts_per_second, echo_per_second),
        per_daemon=daemon_figures(gateway),
        servers=tuple(
            ServerFigures(
                name=server.name, cpu_ms_per_post=per_post_ms(server.cpu_seconds, gateway.posts)
            )
            for server in gateway.servers
        ),
        cpu_ms_per_post=CpuPerPost(
            gateway=per_post_ms(gateway.gateway_cpu_seconds, gateway.posts),
            servers=per_post_ms(gateway.server_cpu_seconds, gateway.posts),
        ),
        router_path=router_path,
    )


def cost_schedule(rounds: int) -> tuple[tuple[int, bool], ...]:
    """`(round, with the firewall)` of each gateway run of a comparison, in run order:
    without then with, round after round, so drift of the machine falls on both sides."""
    return tuple((number, on) for number in range(1, rounds + 1) for on in (False, True))


def round_values(gateway: GatewayOutcome) -> RoundValues:
    """What a comparison keeps of one gateway run."""
    return RoundValues(
        certified_posts_per_second=rate(gateway.posts, gateway.elapsed),
        gateway_cpu_ms_per_post=per_post_ms(gateway.gateway_cpu_seconds, gateway.posts),
        failed_sends=sum(gateway.send_failures.values()),
        undelivered=gateway.undelivered,
    )


def assemble_cost(
    config: BenchConfig,
    comparison: FirewallComparison,
    without_firewall: Sequence[RoundValues],
    with_firewall: Sequence[RoundValues],
) -> FirewallCostResult:
    """The `--firewall-cost` line's values from its rounds, each side in run order."""
    return FirewallCostResult(
        machine=this_machine(),
        pairs=config.pairs,
        seconds=config.seconds,
        mode=config.mode,
        firewall=comparison.file.name,
        without_firewall=SideSummary(rounds=tuple(without_firewall)),
        with_firewall=SideSummary(rounds=tuple(with_firewall)),
    )


def _describe_round(values: RoundValues) -> str:
    posts = values.certified_posts_per_second
    cpu = values.gateway_cpu_ms_per_post
    text = (
        f"{'unknown' if posts is None else f'{posts:.1f}'} certified posts/s, "
        f"{'unknown' if cpu is None else f'{cpu:.2f}'} gateway CPU-ms per post"
    )
    if values.failed_sends:
        text += f", {values.failed_sends} failed send(s)"
    if values.undelivered:
        text += f", {values.undelivered} undelivered"
    return text


async def run_firewall_cost(
    config: BenchConfig, comparison: FirewallComparison
) -> FirewallCostResult:
    """The gateway measurement without and with `comparison.file`, alternating, each run
    said on stderr; no echo baseline (the comparison is gateway against gateway)."""
    sides: dict[bool, list[RoundValues]] = {False: [], True: []}
    for number, on in cost_schedule(comparison.rounds):
        firewall = comparison.file if on else None
        title = f"round {number}/{comparison.rounds} {'with' if on else 'without'} firewall"
        values = round_values(await _gateway_run(config, firewall=firewall, title=title))
        _say(f"{title}: {_describe_round(values)}")
        sides[on].append(values)
    result = assemble_cost(config, comparison, sides[False], sides[True])
    _say(
        f"firewall cost of {comparison.file.name} (medians of {comparison.rounds} round(s) "
        f"each): CPU per post {_signed(result.cpu_overhead_pct)}, "
        f"throughput {_signed(result.throughput_change_pct)}"
    )
    return result


def _signed(pct: float | None) -> str:
    return "unknown" if pct is None else f"{pct:+.1f}%"


class Interrupted(Exception):
    """SIGTERM or SIGINT stopped the run (its children were still stopped)."""


async def _run_until_signalled(config: BenchConfig) -> BenchResult | FirewallCostResult:
    """`measure`, cancelled by the first SIGTERM or SIGINT so that every `finally` (which stops
    the children) runs; later signals are ignored, the stop being bounded anyway."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    received: list[signal.Signals] = []

    def on_signal(signum: signal.Signals) -> None:
        if not received:
            received.append(signum)
            task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        return await measure(config)
    except asyncio.CancelledError:
        if received:
            raise Interrupted(received[0].name) from None
        raise
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bench and print its line; returns the exit code."""
    config = parse_config(argv)
    from bench.processes import ChildFailed, quiet_grpc_fork_handlers

    quiet_grpc_fork_handlers()  # before anything imports grpc
    # uvloop in the bench's own process, as the gateway and the echo server use it.
    import uvloop
    from harness_client import HarnessError

    from bench.gateway_run import RunFailed

    try:
        result = uvloop.run(_run_until_signalled(config))
    except (ChildFailed, RunFailed, HarnessError) as failure:
        _say(f"failed: {type(failure).__name__}: {failure}")
        for note in getattr(failure, "__notes__", ()):
            print(note, file=sys.stderr)
        return EXIT_FAILED
    except Interrupted as signalled:
        _say(f"interrupted by {signalled}; children stopped")
        return EXIT_FAILED
    print(result_line(result), flush=True)
    return 0

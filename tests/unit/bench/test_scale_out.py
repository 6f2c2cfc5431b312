"""`python -m bench --daemons N --router ... --store ...`: flags, layout, command lines, CPU.

Pure: no process starts and no socket opens (the servers and daemons are `make bench`'s).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path
from typing import cast

import pytest
from harness_client import Endpoint

from bench import cli, plan
from bench.baseline import EchoOutcome
from bench.deployment import join_flags, registry_flags, store_flags
from bench.gateway_run import (
    Conversation,
    DaemonLoad,
    GatewayOutcome,
    Receiver,
    ServerReport,
    daemon_loads,
)
from bench.plan import RouterKind, StoreKind, Topology
from bench.processes import process_tree_cpu_seconds

# --- flags ---------------------------------------------------------------------------------


def test_the_router_defaults_to_in_process_for_one_daemon_and_grpc_for_more():
    assert cli.parse_config([]).topology == Topology(
        daemons=1, router=RouterKind.INPROCESS, store=StoreKind.SQLITE
    )
    assert cli.parse_config(["--daemons", "2"]).topology == Topology(
        daemons=2, router=RouterKind.GRPC, store=StoreKind.SQLITE
    )


def test_nats_and_postgresql_are_read_with_one_nats_node_unless_told():
    config = cli.parse_config(["--daemons", "4", "--router", "nats", "--store", "postgresql"])
    assert config.topology == Topology(
        daemons=4, router=RouterKind.NATS, store=StoreKind.POSTGRESQL, nats_nodes=1
    )
    three = cli.parse_config(["--daemons", "2", "--router", "nats", "--nats-nodes", "3"])
    assert three.topology.nats_nodes == 3
    assert three.mode.to_json() == {
        "burst": 1,
        "group_size": 2,
        "daemons": 2,
        "router": "nats",
        "store": "sqlite",
        "nats_nodes": 3,
        "hub": False,
    }


@pytest.mark.parametrize("daemons", [1, 2, 4, plan.MAX_DAEMONS])
def test_every_daemon_count_up_to_the_bound_runs_on_nats(daemons):
    config = cli.parse_config(["--daemons", str(daemons), "--router", "nats"])
    assert config.daemons == daemons
    assert len(config.topology.daemon_names) == daemons


def test_one_daemon_may_join_a_standalone_router_or_use_postgresql_embedded():
    joined = cli.parse_config(["--router", "grpc"])
    assert joined.topology.daemon_names == ("daemon-a",)
    assert joined.topology.standalone_registry
    embedded = cli.parse_config(["--store", "postgresql"])
    assert embedded.topology == Topology(
        daemons=1, router=RouterKind.INPROCESS, store=StoreKind.POSTGRESQL
    )
    assert embedded.topology.daemon_names == ("gateway",)
    assert not embedded.topology.standalone_registry


def test_a_quick_run_over_many_daemons_has_a_sender_on_each():
    assert cli.parse_config(["--quick", "--daemons", "4", "--router", "nats"]).pairs == 4
    assert cli.parse_config(["--quick", "--daemons", "2"]).pairs == 2
    assert cli.parse_config(["--quick"]).pairs == 2
    # The default 8 pairs give each of eight daemons one sender.
    assert cli.parse_config(["--daemons", "8"]).pairs == 8


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--daemons", "2", "--router", "inprocess"], "--router inprocess is one daemon's"),
        (["--daemons", "9"], "between 1 and 8"),
        (["--daemons", "0", "--router", "nats"], "between 1 and 8"),
        (["--nats-nodes", "3"], "--nats-nodes sizes the NATS cluster; --router is inprocess"),
        (["--daemons", "2", "--nats-nodes", "1"], "--router is grpc"),
        (["--router", "nats", "--nats-nodes", "2"], "invalid choice"),
        (["--router", "nats", "--nats-nodes", "three"], "not a whole number"),
        (["--router", "kafka"], "invalid choice"),
        (["--store", "mysql"], "invalid choice"),
        (["--daemons", "4", "--router", "nats", "--pairs", "2"], "leaves daemon-c without"),
    ],
)
def test_flags_that_clash_or_are_out_of_range_exit_2_saying_why(argv, said, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_config(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: python -m bench" in err
    assert said in err


def test_help_names_the_scale_out_flags(capsys):
    with pytest.raises(SystemExit):
        cli.parse_config(["--help"])
    out = capsys.readouterr().out
    for flag in ("--router", "--store", "--nats-nodes", "inprocess", "postgresql"):
        assert flag in out


def test_check_topology_refuses_what_the_flags_refuse():
    plan.check_topology(
        Topology(daemons=8, router=RouterKind.NATS, store=StoreKind.SQLITE, nats_nodes=3)
    )
    for bad in (
        Topology(daemons=2, router=RouterKind.INPROCESS, store=StoreKind.SQLITE),
        Topology(daemons=9, router=RouterKind.GRPC, store=StoreKind.SQLITE),
        Topology(daemons=1, router=RouterKind.NATS, store=StoreKind.SQLITE),  # no node count
        Topology(daemons=1, router=RouterKind.GRPC, store=StoreKind.SQLITE, nats_nodes=1),
    ):
        with pytest.raises(ValueError):
            plan.check_topology(bad)


# --- the layout across daemons ---------------------------------------------------------------


def test_joined_daemons_are_named_by_letter_and_the_embedded_one_is_the_gateway():
    names = Topology(daemons=4, router=RouterKind.GRPC, store=StoreKind.SQLITE).daemon_names
    assert names == ("daemon-a", "daemon-b", "daemon-c", "daemon-d")
    assert len(set(plan.NETWORK_DAEMON_NAMES)) == plan.MAX_DAEMONS
    assert Topology(
        daemons=1, router=RouterKind.INPROCESS, store=StoreKind.SQLITE
    ).daemon_names == ("gateway",)


@pytest.mark.parametrize("daemons", [2, 3, 4, 8])
@pytest.mark.parametrize("group_size", [2, 5])
def test_each_sender_is_on_one_daemon_and_its_receivers_on_the_next(daemons, group_size):
    plans = plan.plan_groups(16, group_size=group_size, daemons=daemons)
    for conversation in plans:
        assert conversation.sender.daemon == conversation.index % daemons
        assert {receiver.daemon for receiver in conversation.receivers} == {
            (conversation.index + 1) % daemons
        }
        # So every post crosses daemons.
        assert conversation.sender.daemon not in {r.daemon for r in conversation.receivers}


@pytest.mark.parametrize("daemons", [1, 2, 4, 8])
def test_with_as_many_conversations_per_daemon_each_sends_and_receives_alike(daemons):
    plans = plan.plan_groups(8, group_size=2, daemons=daemons)
    senders = Counter(conversation.sender.daemon for conversation in plans)
    receivers = Counter(r.daemon for conversation in plans for r in conversation.receivers)
    assert senders == receivers == dict.fromkeys(range(daemons), 8 // daemons)


def test_one_daemon_hosts_every_agent():
    plans = plan.plan_groups(3, group_size=3, daemons=1)
    assert {agent.daemon for p in plans for agent in (p.sender, *p.receivers)} == {0}


# --- command lines -------------------------------------------------------------------------------


NATS = Topology(daemons=4, router=RouterKind.NATS, store=StoreKind.POSTGRESQL, nats_nodes=3)
DSN = "postgresql://postgres@127.0.0.1:5432/bench_1_0"


def test_a_daemon_joins_the_nats_cluster_and_keeps_its_rows_under_its_own_name():
    flags = join_flags(
        topology=NATS,
        router_target="nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224",
        registry_target="grpc://127.0.0.1:7001",
        peer_token_file=Path("/s/peer-token"),
        store_dsn=DSN,
        name="daemon-c",
    )
    assert flags == [
        "--router",
        "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224",
        "--nats-replicas",
        "3",
        "--registry",
        "grpc://127.0.0.1:7001",
        "--peer-token-file",
        "/s/peer-token",
        "--store",
        DSN,
        "--store-owner",
        "daemon-c",
    ]


def test_a_daemon_joins_a_grpc_router_with_sqlite_as_before():
    flags = join_flags(
        topology=Topology(daemons=2, router=RouterKind.GRPC, store=StoreKind.SQLITE),
        router_target="grpc://127.0.0.1:7002",
        registry_target="grpc://127.0.0.1:7001",
        peer_token_file=Path("/s/peer-token"),
        store_dsn=None,
        name="daemon-a",
    )
    assert flags == [
        "--router",
        "grpc://127.0.0.1:7002",
        "--registry",
        "grpc://127.0.0.1:7001",
        "--peer-token-file",
        "/s/peer-token",
    ]


def test_the_registry_keeps_its_cards_in_the_shared_database_when_there_is_one():
    with_pg = registry_flags(
        data_dir=Path("/s/registry"), store_dsn=DSN, peer_token_file=Path("/s/peer-token")
    )
    assert with_pg[0] == "registry"
    assert with_pg[with_pg.index("--store") + 1] == DSN
    assert "--store-owner" not in with_pg  # a daemon's flag only
    assert with_pg[with_pg.index("--data-dir") + 1] == "/s/registry"
    assert with_pg[with_pg.index("--metrics-listen") + 1] == "off"
    sqlite = registry_flags(
        data_dir=Path("/s/registry"), store_dsn=None, peer_token_file=Path("/s/peer-token")
    )
    assert "--store" not in sqlite
    assert store_flags(None, "gateway") == []
    assert store_flags(DSN, "gateway") == ["--store", DSN, "--store-owner", "gateway"]


# --- CPU of a server and what it forked -------------------------------------------------------


def _stat(pid: int, parent: int, *, state: str = "S", ticks: tuple[int, int, int, int]) -> str:
    utime, stime, cutime, cstime = ticks
    # Fields 3.. after the name; the name may hold spaces and parentheses.
    rest = [state, str(parent), *["0"] * 9, str(utime), str(stime), str(cutime), str(cstime)]
    return f"{pid} (postgres: a (b) c) " + " ".join([*rest, *["0"] * 30]) + "\n"


def _fake_proc(root: Path, stats: dict[int, str]) -> Path:
    for pid, text in stats.items():
        (root / str(pid)).mkdir()
        (root / str(pid) / "stat").write_text(text, encoding="ascii")
    (root / "self").mkdir()  # not a process number: skipped
    return root


def test_a_servers_cpu_counts_every_live_descendant_and_what_each_reaped(tmp_path):
    hz = os.sysconf("SC_CLK_TCK")
    proc = _fake_proc(
        tmp_path,
        {
            100: _stat(100, 1, ticks=(10, 5, 20, 5)),  # postmaster, reaped backends 25
            101: _stat(101, 100, ticks=(30, 10, 0, 0)),  # a backend
            102: _stat(102, 100, ticks=(5, 5, 0, 0)),  # the checkpointer
            103: _stat(103, 101, state="Z", ticks=(2, 0, 0, 0)),  # exited, not yet reaped
            200: _stat(200, 1, ticks=(1000, 1000, 0, 0)),  # not ours
        },
    )
    assert process_tree_cpu_seconds(100, proc=proc) == pytest.approx((40 + 40 + 10 + 2) / hz)
    assert process_tree_cpu_seconds(101, proc=proc) == pytest.approx(42 / hz)


def test_a_server_that_exited_or_never_was_has_no_cpu_reading(tmp_path):
    proc = _fake_proc(tmp_path, {100: _stat(100, 1, state="Z", ticks=(1, 1, 0, 0))})
    assert process_tree_cpu_seconds(100, proc=proc) is None
    assert process_tree_cpu_seconds(999, proc=proc) is None
    assert process_tree_cpu_seconds(100, proc=tmp_path / "absent") is None


def test_this_process_tree_reads_from_proc_on_linux():
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc")
    used = process_tree_cpu_seconds(os.getpid())
    assert used is not None
    assert used >= 0.0


# --- per-daemon figures and the servers' share ---------------------------------------------------


def _talk(index: int, sent: int, sender_daemon: int) -> Conversation:
    no_endpoint = cast(Endpoint, object())  # never called: only the counters are used
    receiver = Receiver(f"bench-receiver-{index}", no_endpoint, asyncio.Event())
    talk = Conversation(index, no_endpoint, "agent:x", [receiver], sender_daemon=sender_daemon)
    talk.sent = sent
    return talk


def test_a_daemons_posts_are_those_of_the_senders_it_hosts():
    talks = [_talk(0, 100, 0), _talk(1, 120, 1), _talk(2, 80, 0), _talk(3, 0, 1)]
    loads = daemon_loads(
        talks, ["daemon-a", "daemon-b"], {"daemon-a": 1.8, "daemon-b": None, "registry": 0.1}
    )
    assert loads == (
        DaemonLoad(name="daemon-a", posts=180, cpu_seconds=1.8),
        DaemonLoad(name="daemon-b", posts=120, cpu_seconds=None),
    )


def _outcome(**overrides: object) -> GatewayOutcome:
    values: dict[str, object] = {
        "posts": 1000,
        "elapsed": 10.0,
        "send_latencies_ns": [1_000_000],
        "delivery_latencies_ns": [2_000_000],
        "commits_per_second": None,
        "mean_commit_batch_size": None,
        "undelivered": 0,
        "send_failures": {},
        "ack_failures": {},
        "receiver_errors": (),
        "strangers": 0,
        "processes": (),
        "measured_over": 10.5,
        "gateway_cpu_seconds": 9.0,
        "bench_cpu_seconds": 1.0,
        "daemon_loads": (
            DaemonLoad(name="daemon-a", posts=600, cpu_seconds=4.5),
            DaemonLoad(name="daemon-b", posts=400, cpu_seconds=4.0),
        ),
        "servers": (
            ServerReport(name="nats-n0", cpu_seconds=1.0),
            ServerReport(name="postgresql", cpu_seconds=2.5),
        ),
        "server_cpu_seconds": 3.5,
    }
    values.update(overrides)
    return GatewayOutcome(**values)  # type: ignore[arg-type]


def _echo() -> EchoOutcome:
    return EchoOutcome(
        calls_per_second=5000.0,
        calls=50_000,
        elapsed=10.0,
        failures={},
        server_problems=(),
        server_problem_count=0,
    )


def test_the_line_gives_each_daemons_rate_and_cost_and_the_servers_apart():
    config = cli.parse_config(["--daemons", "2", "--router", "nats", "--store", "postgresql"])
    value = cli.assemble(config, _outcome(), _echo()).to_json()
    assert value["certified_posts_per_second"] == 100.0
    assert value["gateway_cpu_ms_per_post"] == 9.0
    assert value["per_daemon"] == [
        {"name": "daemon-a", "posts": 600, "posts_per_second": 60.0, "cpu_ms_per_post": 7.5},
        {"name": "daemon-b", "posts": 400, "posts_per_second": 40.0, "cpu_ms_per_post": 10.0},
    ]
    # Every server's CPU over all the run's posts: a post costs each of them.
    assert value["servers"] == [
        {"name": "nats-n0", "cpu_ms_per_post": 1.0},
        {"name": "postgresql", "cpu_ms_per_post": 2.5},
    ]
    assert value["cpu_ms_per_post"] == {"gateway": 9.0, "servers": 3.5}


def test_without_servers_their_share_is_null_and_their_list_empty():
    value = cli.assemble(
        cli.parse_config([]),
        _outcome(
            daemon_loads=(DaemonLoad(name="gateway", posts=1000, cpu_seconds=9.0),),
            servers=(),
            server_cpu_seconds=None,
        ),
        _echo(),
    ).to_json()
    assert value["servers"] == []
    assert value["cpu_ms_per_post"] == {"gateway": 9.0, "servers": None}
    assert value["per_daemon"] == [
        {"name": "gateway", "posts": 1000, "posts_per_second": 100.0, "cpu_ms_per_post": 9.0}
    ]


def test_a_daemon_without_posts_or_a_cpu_reading_has_no_cost_per_post():
    figures = cli.daemon_figures(
        _outcome(
            daemon_loads=(
                DaemonLoad(name="daemon-a", posts=0, cpu_seconds=1.0),
                DaemonLoad(name="daemon-b", posts=10, cpu_seconds=None),
            )
        )
    )
    assert [(f.posts_per_second, f.cpu_ms_per_post) for f in figures] == [(0.0, None), (1.0, None)]


def test_the_cpu_summary_names_the_servers_apart_from_the_gateway():
    summary = cli._cpu_summary(_outcome())
    gateway_part, _, servers_part = summary.partition("; servers ")
    assert "gateway 9.00 CPU-s" in gateway_part
    assert "9.0 gateway CPU-ms per post" in gateway_part
    assert servers_part == "nats-n0 1.00, postgresql 2.50 CPU-s, 3.5 server CPU-ms per post"
    assert "servers" not in cli._cpu_summary(_outcome(servers=(), server_cpu_seconds=None))

"""`python -m bench --cluster N [--hub] [--compare-router]`: flags, layout, command lines, the
settled partitions, the hub's AgentId, the line (cluster.md §13).

Pure: no process starts and no socket opens (the replicas and PostgreSQL are `make bench`'s).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path
from typing import cast

import pytest
from harness_client import ClusterStatus, Endpoint, ManagementClient, RegisteredAgent
from harness_contract.ids import RandomId, agent_id_order_key, b64

from bench import cli, plan
from bench.baseline import EchoOutcome
from bench.deployment import ClusterPaths, migrate_commands, replica_flags
from bench.gateway_run import (
    Conversation,
    DaemonLoad,
    GatewayOutcome,
    Receiver,
    RunFailed,
    _register_lowest,
    daemon_loads,
    partitions_settled,
    wait_partitions_settled,
)
from bench.plan import RouterKind, StoreKind, Topology

# --- flags ---------------------------------------------------------------------------------


def test_cluster_n_is_n_replicas_on_postgresql_with_no_router_process():
    config = cli.parse_config(["--cluster", "4"])
    assert config.topology == Topology(
        daemons=4, router=RouterKind.CLUSTER, store=StoreKind.POSTGRESQL
    )
    assert config.topology.daemon_names == ("replica-a", "replica-b", "replica-c", "replica-d")
    assert not config.topology.standalone_registry
    assert config.mode.to_json() == {
        "burst": 1,
        "group_size": 2,
        "daemons": 4,
        "router": "cluster",
        "store": "postgresql",
        "nats_nodes": None,
        "hub": False,
    }
    assert (config.pairs, config.seconds) == (8, 10.0)


def test_the_hub_workload_is_said_in_the_mode():
    config = cli.parse_config(["--cluster", "2", "--hub"])
    assert config.hub
    assert config.mode.hub
    assert "one hub (the lowest AgentId)" in cli.describe_load(config)


def test_a_quick_cluster_run_has_two_pairs_whatever_the_replicas():
    # Any replica serves any agent: no replica needs a sender of its own.
    assert cli.parse_config(["--quick", "--cluster", "4"]).pairs == 2
    assert cli.parse_config(["--cluster", "8", "--pairs", "1"]).pairs == 1


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--cluster", "2", "--daemons", "2"], "not with --daemons"),
        (["--cluster", "2", "--router", "nats"], "not with --router"),
        (["--cluster", "2", "--store", "postgresql"], "not with --store"),
        (["--cluster", "2", "--nats-nodes", "1"], "not with --nats-nodes"),
        (["--cluster", "0"], "between 1 and 8"),
        (["--cluster", "9"], "between 1 and 8"),
        (["--hub"], "--hub needs --cluster N"),
        (["--compare-router"], "--compare-router needs --cluster N"),
        (["--cluster", "2", "--hub", "--compare-router"], "--hub is a cluster workload"),
    ],
)
def test_cluster_flags_that_clash_exit_2_saying_why(argv, said, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_config(argv)
    assert exit_info.value.code == 2
    assert said in capsys.readouterr().err


def test_a_cluster_on_sqlite_is_refused():
    with pytest.raises(ValueError, match="PostgreSQL"):
        plan.check_topology(Topology(daemons=2, router=RouterKind.CLUSTER, store=StoreKind.SQLITE))


def test_compare_router_runs_as_many_daemons_on_nats_and_postgresql_with_the_same_load():
    config = cli.parse_config(["--cluster", "4", "--compare-router", "--pairs", "6"])
    beside = cli.router_path_config(config)
    assert beside.topology == Topology(
        daemons=4, router=RouterKind.NATS, store=StoreKind.POSTGRESQL, nats_nodes=1
    )
    assert (beside.pairs, beside.seconds, beside.burst) == (6, config.seconds, config.burst)
    assert not beside.compare_router


# --- layout --------------------------------------------------------------------------------


def test_every_agent_dials_a_replica_drawn_at_random_over_all_of_them():
    plans = plan.plan_cluster_groups(64, group_size=3, replicas=4, hub=False, rng=random.Random(7))
    dialled = Counter(agent.daemon for group in plans for agent in (group.sender, *group.receivers))
    assert set(dialled) == {0, 1, 2, 3}
    assert sum(dialled.values()) == 64 * 3
    names = [agent.name for group in plans for agent in (group.sender, *group.receivers)]
    assert len(set(names)) == len(names)


def test_the_hub_is_the_one_sender_of_every_conversation():
    plans = plan.plan_cluster_groups(8, group_size=2, replicas=2, hub=True, rng=random.Random(1))
    assert {group.sender for group in plans} == {plans[0].sender}
    assert plans[0].sender.name == plan.HUB_NAME
    receivers = [agent.name for group in plans for agent in group.receivers]
    assert receivers == [f"bench-receiver-{index}" for index in range(8)]
    assert [group.address for group in plans] == [f"agent:{name}" for name in receivers]


# --- command lines -------------------------------------------------------------------------


def _paths(folder: Path) -> ClusterPaths:
    return ClusterPaths(
        seed_key=folder / "seed-key",
        registry_key=folder / "registry-key",
        admin_token=folder / "admin-token",
        peer_token=folder / "peer-token",
    )


def test_the_database_is_set_up_for_the_cluster_then_for_the_registry(tmp_path):
    dsn = "postgresql://postgres@127.0.0.1:5432/bench_1"
    assert migrate_commands(store_dsn=dsn, seed_key=tmp_path / "seed-key") == (
        ("migrate", "--cluster", "--seed-key-file", str(tmp_path / "seed-key"), "--store", dsn),
        ("migrate", "--registry", "--store", dsn),
    )


def test_a_replica_advertises_the_address_it_listens_on_and_shares_the_clusters_files(
    tmp_path,
):
    dsn = "postgresql://postgres@127.0.0.1:5432/bench_1"
    args, env = replica_flags(
        name="replica-b", address="127.0.0.1:4321", store_dsn=dsn, files=_paths(tmp_path)
    )
    flags = dict(zip(args[1::2], args[2::2], strict=True))
    assert args[0] == "--cluster"
    assert flags == {
        "--replica-id": "replica-b",
        "--advertise-address": "127.0.0.1:4321",
        "--store": dsn,
        "--seed-key-file": str(tmp_path / "seed-key"),
        "--registry-key-file": str(tmp_path / "registry-key"),
        "--peer-token-file": str(tmp_path / "peer-token"),
    }
    assert env == {"HARNESS_ADMIN_TOKEN_FILE": str(tmp_path / "admin-token")}


# --- partitions settled --------------------------------------------------------------------


def _view(replica: str, owned: int, unowned: int = 0, partitions: int = 1024) -> ClusterStatus:
    return ClusterStatus(
        replica_id=replica,
        incarnation=1,
        state="serving",
        lease_remaining_seconds=5.0,
        claiming=True,
        partitions=partitions,
        owned_partitions=owned,
        unowned_partitions=unowned,
        replicas=(),
    )


def test_partitions_are_settled_once_all_are_held_and_every_replica_holds_some():
    assert partitions_settled([_view("a", 512), _view("b", 512)])
    assert not partitions_settled([_view("a", 1024), _view("b", 0)])
    assert not partitions_settled([_view("a", 600, unowned=424), _view("b", 0, unowned=424)])
    # Two views that each still count a partition the other took are not settled yet.
    assert not partitions_settled([_view("a", 600), _view("b", 500)])
    assert not partitions_settled([])


class _FakeStatus:
    def __init__(self, views: list[ClusterStatus | None]) -> None:
        self._views = views
        self.calls = 0

    async def status(self) -> object:
        view = self._views[min(self.calls, len(self._views) - 1)]
        self.calls += 1
        return type("Status", (), {"cluster": view})()


async def test_the_bench_waits_for_the_partitions_and_gives_up_past_its_bound():
    first = _FakeStatus([_view("a", 1024), _view("a", 512)])
    second = _FakeStatus([_view("b", 0), _view("b", 512)])
    managers = cast(list[ManagementClient], [first, second])
    await wait_partitions_settled(managers, within=5.0)
    assert first.calls == 2
    never = cast(list[ManagementClient], [_FakeStatus([_view("a", 1024)])] * 2)
    with pytest.raises(RunFailed, match=r"did not settle within 0\.1 s"):
        await wait_partitions_settled(never, within=0.1)


async def test_a_replica_without_a_cluster_view_fails_the_run():
    managers = cast(list[ManagementClient], [_FakeStatus([None])])
    with pytest.raises(RunFailed, match="no cluster view"):
        await wait_partitions_settled(managers, within=5.0)


# --- the hub's AgentId ---------------------------------------------------------------------


def _agent_id(first_byte: int) -> str:
    return RandomId.AGENT.prefix + b64(bytes([first_byte]) + bytes(15))


class _FakeRegistry:
    def __init__(self, first_bytes: list[int]) -> None:
        self._ids = iter(first_bytes)
        self.names: list[str] = []

    async def register_agent(self, name: str) -> RegisteredAgent:
        self.names.append(name)
        return RegisteredAgent(
            address=f"agent:{name}", agent_id=_agent_id(next(self._ids)), token=f"token-{name}"
        )


async def test_the_hub_is_the_first_candidate_whose_agent_id_is_below_every_other():
    others = [_agent_id(0x30), _agent_id(0x20), _agent_id(0x90)]
    registry = _FakeRegistry([0x40, 0x20, 0x1F, 0x00])
    token = await _register_lowest(cast(ManagementClient, registry), "bench-hub", others)
    assert token == "token-bench-hub-2"
    assert registry.names == ["bench-hub", "bench-hub-1", "bench-hub-2"]
    assert agent_id_order_key(_agent_id(0x1F)) < min(map(agent_id_order_key, others))


async def test_hub_candidates_are_bounded():
    registry = _FakeRegistry([0xFF] * 1000)
    with pytest.raises(RunFailed, match="no hub candidate of 64"):
        await _register_lowest(cast(ManagementClient, registry), "bench-hub", [_agent_id(0x10)])


# --- the line ------------------------------------------------------------------------------


def _talk(index: int, sent: int, sender_daemon: int) -> Conversation:
    no_endpoint = cast(Endpoint, object())  # never called: only the counters are used
    receiver = Receiver(f"bench-receiver-{index}", no_endpoint, asyncio.Event())
    talk = Conversation(index, no_endpoint, "agent:x", [receiver], sender_daemon=sender_daemon)
    talk.sent = sent
    return talk


def test_every_replica_of_a_cluster_is_charged_over_all_the_posts():
    talks = [_talk(0, 100, 0), _talk(1, 120, 1), _talk(2, 80, 0)]
    loads = daemon_loads(
        talks, ["replica-a", "replica-b"], {"replica-a": 1.5, "replica-b": 0.9}, shared=True
    )
    assert loads == (
        DaemonLoad(name="replica-a", posts=300, cpu_seconds=1.5),
        DaemonLoad(name="replica-b", posts=300, cpu_seconds=0.9),
    )


def _outcome(posts: int, gateway_cpu: float, server_cpu: float) -> GatewayOutcome:
    return GatewayOutcome(
        posts=posts,
        elapsed=10.0,
        send_latencies_ns=[4_000_000, 6_000_000],
        delivery_latencies_ns=[],
        commits_per_second=None,
        mean_commit_batch_size=None,
        undelivered=0,
        send_failures={},
        ack_failures={},
        receiver_errors=(),
        strangers=0,
        processes=(),
        measured_over=10.5,
        gateway_cpu_seconds=gateway_cpu,
        bench_cpu_seconds=1.0,
        server_cpu_seconds=server_cpu,
    )


def test_the_router_path_run_is_reported_beside_the_cluster():
    config = cli.parse_config(["--cluster", "2", "--compare-router"])
    beside = cli.router_path_config(config)
    router_path = cli.router_path_figures(beside, _outcome(200, 12.0, 3.0))
    echo = EchoOutcome(
        calls_per_second=5000.0,
        calls=50_000,
        elapsed=10.0,
        failures={},
        server_problems=(),
        server_problem_count=0,
    )
    value = cli.assemble(config, _outcome(2000, 10.0, 2.0), echo, router_path=router_path).to_json()
    assert value["mode"]["router"] == "cluster"
    assert value["cpu_ms_per_post"] == {"gateway": 5.0, "servers": 1.0}
    assert value["router_path"] == {
        "mode": {
            "burst": 1,
            "group_size": 2,
            "daemons": 2,
            "router": "nats",
            "store": "postgresql",
            "nats_nodes": 1,
            "hub": False,
        },
        "certified_posts_per_second": 20.0,
        "send_latency_ms": {"p50": 5.0, "p99": 5.98},
        "cpu_ms_per_post": {"gateway": 60.0, "servers": 15.0},
    }
    assert cli.assemble(config, _outcome(1, 1.0, 1.0), echo).to_json()["router_path"] is None

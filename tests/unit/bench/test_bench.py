"""`python -m bench`: argument parsing and the result line's shape, on fake results.

No process starts here (the real run is `make bench`); everything checked is pure.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import cast

import pytest
from harness_client import (
    CheckedGuidance,
    DirectMessage,
    Endpoint,
    Expectation,
    ExpectationInstruction,
    GroupMessage,
    InboundDelivery,
    MulticastItem,
    TextPart,
)
from harness_contract import addresses
from harness_contract.values import DirectMessage as ContractDirect
from harness_contract.values import GroupMessage as ContractGroup
from harness_contract.values import MulticastItem as ContractMulticast
from harness_contract.values import TextPart as ContractTextPart

from bench import cli, plan
from bench.gateway_run import (
    TIMED,
    WARMUP,
    Conversation,
    GatewayOutcome,
    Receiver,
    missing_deliveries,
    note_delivery,
    read_stamp,
    stamp_text,
)
from bench.metrics import CommitCounters, commit_rates, parse_commit_counters, sum_counters
from bench.processes import OutputLog, cpu_between, is_trouble, process_cpu_seconds, total_cpu
from bench.result import (
    COST_KEYS,
    RESULT_KEYS,
    BenchResult,
    CpuPerPost,
    DaemonFigures,
    Machine,
    Percentiles,
    RoundValues,
    RunMode,
    ServerFigures,
    change_pct,
    median,
    per_post_ms,
    percentile,
    rate,
    ratio,
    result_line,
)
from gateway.firewall import subjects
from gateway.firewall.config import load_firewall
from gateway.firewall.model import ExternalCaller, MiddlewareKind
from gateway.firewall.pipeline import Firewall
from gateway.firewall.spec import ContentPatternSpec, Directions, ExternalSpec, kind_of


def fake_result(**overrides: object) -> BenchResult:
    values: dict[str, object] = {
        "machine": Machine(cpu_count=2, platform="Linux-test", python="CPython 3.11.7"),
        "pairs": 8,
        "seconds": 10.0,
        "mode": RunMode(
            burst=4, group_size=3, daemons=2, router="nats", store="postgresql", nats_nodes=3
        ),
        "firewall": "five.yaml",
        "certified_posts_per_second": 123.4,
        "send_latency_ms": Percentiles(p50=12.5, p99=40.25),
        "send_to_delivery_ms": Percentiles(p50=15.0, p99=55.0),
        "store_commits_per_second": 80.5,
        "mean_commit_batch_size": 3.25,
        "gateway_cpu_ms_per_post": 17.5,
        "baseline_unary_echo_per_second": 4000.0,
        "ratio_to_baseline": 0.0309,
        "per_daemon": (
            DaemonFigures(name="daemon-a", posts=600, posts_per_second=60.0, cpu_ms_per_post=8.5),
            DaemonFigures(name="daemon-b", posts=634, posts_per_second=63.4, cpu_ms_per_post=8.0),
        ),
        "servers": (
            ServerFigures(name="nats-n0", cpu_ms_per_post=1.25),
            ServerFigures(name="postgresql", cpu_ms_per_post=3.5),
        ),
        "cpu_ms_per_post": CpuPerPost(gateway=17.5, servers=4.75),
    }
    values.update(overrides)
    return BenchResult(**values)  # type: ignore[arg-type]


# --- arguments -------------------------------------------------------------------------


def test_no_flags_run_eight_pairs_for_ten_seconds():
    config = cli.parse_config([])
    assert (config.pairs, config.seconds) == (8, 10.0)
    assert config.mode == RunMode(
        burst=1, group_size=2, daemons=1, router="inprocess", store="sqlite", nats_nodes=None
    )
    assert config.in_flight == 8


def test_burst_group_size_and_daemons_are_read():
    config = cli.parse_config(
        ["--quick", "--burst", "8", "--group-size", "5", "--daemons", "2", "--pairs", "3"]
    )
    assert (config.pairs, config.burst, config.group_size, config.daemons) == (3, 8, 5, 2)
    assert config.mode == RunMode(
        burst=8, group_size=5, daemons=2, router="grpc", store="sqlite", nats_nodes=None
    )
    # The baseline runs as many calls in flight as the gateway run: senders x burst.
    assert config.in_flight == 24


def test_group_size_two_is_the_pair_mode_and_the_group_bounds_are_accepted():
    assert cli.parse_config(["--group-size", "2"]).group_size == 2
    assert cli.parse_config(["--group-size", "3"]).group_size == 3
    assert cli.parse_config(["--pairs", "16", "--group-size", "32"]).group_size == 32


def test_the_flags_products_may_reach_their_bounds():
    at_agents = cli.parse_config(["--pairs", "16", "--group-size", "32"])
    assert at_agents.pairs * at_agents.group_size == cli.MAX_AGENTS
    at_flight = cli.parse_config(["--pairs", "16", "--burst", "256"])
    assert at_flight.in_flight == cli.MAX_IN_FLIGHT


def test_quick_runs_two_pairs_for_two_seconds():
    config = cli.parse_config(["--quick"])
    assert (config.pairs, config.seconds) == (2, 2.0)


def test_explicit_pairs_and_seconds_win_over_quick():
    config = cli.parse_config(["--quick", "--pairs", "3", "--seconds", "0.5"])
    assert (config.pairs, config.seconds) == (3, 0.5)


def test_the_gateway_executable_can_be_named():
    assert cli.parse_config(["--gateway-bin", "/opt/hg"]).gateway_bin == "/opt/hg"


@pytest.mark.parametrize(
    "argv",
    [
        ["--pairs", "0"],
        ["--pairs", "many"],
        ["--pairs", str(cli.MAX_PAIRS + 1)],
        ["--seconds", "0"],
        ["--seconds", "-1"],
        ["--seconds", "soon"],
        ["--seconds", "nan"],
        ["--burst", "0"],
        ["--burst", "two"],
        ["--burst", str(cli.MAX_BURST + 1)],
        ["--group-size", "1"],
        ["--group-size", "0"],
        ["--group-size", "33"],
        ["--group-size", "three"],
        ["--daemons", "0"],
        ["--daemons", str(plan.MAX_DAEMONS + 1)],
        ["--daemons", "two"],
        ["--pairs", "17", "--group-size", "32"],  # 544 agents
        ["--pairs", "17", "--burst", "256"],  # 4352 calls in flight
        ["--bogus"],
    ],
)
def test_invalid_flags_are_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_config(argv)
    assert exit_info.value.code == 2
    assert "usage: python -m bench" in capsys.readouterr().err


def test_help_names_every_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_config(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--pairs",
        "--seconds",
        "--burst",
        "--group-size",
        "--daemons",
        "--quick",
        "--gateway-bin",
        "--firewall",
        "--firewall-cost",
        "--rounds",
    ):
        assert flag in out


def test_the_load_is_described_in_words():
    embedded = "one daemon (embedded Router and Registry, SQLite)"
    assert cli.describe_load(cli.parse_config([])) == f"8 pairs, {embedded}"
    assert cli.describe_load(cli.parse_config(["--pairs", "1"])) == f"1 pair, {embedded}"
    assert (
        cli.describe_load(cli.parse_config(["--group-size", "4", "--burst", "2"]))
        == f"8 groups of 4, 2 sends in flight per sender, {embedded}"
    )
    assert "separate daemons" in cli.describe_load(cli.parse_config(["--daemons", "2"]))
    scaled = cli.describe_load(
        cli.parse_config(["--daemons", "4", "--router", "nats", "--store", "postgresql"])
    )
    assert scaled == (
        "8 pairs, 4 daemons, each sender's receivers on the next daemon (senders and "
        "receivers on separate daemons); NATS JetStream Router (1 node(s)), standalone "
        "Registry, one PostgreSQL database"
    )


# --- the result line -------------------------------------------------------------------


def test_the_result_line_is_one_json_object_with_the_issue_fields():
    line = result_line(fake_result())
    assert "\n" not in line
    value = json.loads(line)
    assert tuple(value) == RESULT_KEYS
    assert value["machine"] == {
        "cpu_count": 2,
        "platform": "Linux-test",
        "python": "CPython 3.11.7",
    }
    assert value["pairs"] == 8
    assert value["seconds"] == 10.0
    assert value["mode"] == {
        "burst": 4,
        "group_size": 3,
        "daemons": 2,
        "router": "nats",
        "store": "postgresql",
        "nats_nodes": 3,
        "hub": False,
    }
    assert value["firewall"] == "five.yaml"
    assert value["gateway_cpu_ms_per_post"] == 17.5
    assert value["certified_posts_per_second"] == 123.4
    assert value["send_latency_ms"] == {"p50": 12.5, "p99": 40.25}
    assert value["send_to_delivery_ms"] == {"p50": 15.0, "p99": 55.0}
    assert value["store_commits_per_second"] == 80.5
    assert value["mean_commit_batch_size"] == 3.25
    assert value["baseline_unary_echo_per_second"] == 4000.0
    assert value["ratio_to_baseline"] == 0.0309
    assert value["per_daemon"] == [
        {"name": "daemon-a", "posts": 600, "posts_per_second": 60.0, "cpu_ms_per_post": 8.5},
        {"name": "daemon-b", "posts": 634, "posts_per_second": 63.4, "cpu_ms_per_post": 8.0},
    ]
    assert value["servers"] == [
        {"name": "nats-n0", "cpu_ms_per_post": 1.25},
        {"name": "postgresql", "cpu_ms_per_post": 3.5},
    ]
    assert value["cpu_ms_per_post"] == {"gateway": 17.5, "servers": 4.75}


def test_the_fields_scripts_read_keep_their_places_and_the_new_ones_come_last():
    old = (
        "machine",
        "pairs",
        "seconds",
        "mode",
        "firewall",
        "certified_posts_per_second",
        "send_latency_ms",
        "send_to_delivery_ms",
        "store_commits_per_second",
        "mean_commit_batch_size",
        "gateway_cpu_ms_per_post",
        "baseline_unary_echo_per_second",
        "ratio_to_baseline",
    )
    assert RESULT_KEYS[: len(old)] == old
    assert RESULT_KEYS[len(old) :] == (
        "per_daemon",
        "servers",
        "cpu_ms_per_post",
        "router_path",
    )


def test_what_was_not_measured_prints_as_null_never_as_a_number():
    line = result_line(
        fake_result(
            store_commits_per_second=None,
            mean_commit_batch_size=None,
            gateway_cpu_ms_per_post=None,
            send_to_delivery_ms=Percentiles.of_ns([]),
            firewall=None,
        )
    )
    value = json.loads(line)
    assert value["firewall"] is None
    assert value["store_commits_per_second"] is None
    assert value["mean_commit_batch_size"] is None
    assert value["gateway_cpu_ms_per_post"] is None
    assert value["send_to_delivery_ms"] == {"p50": None, "p99": None}


def test_percentiles_interpolate_and_report_milliseconds():
    assert percentile([], 50.0) is None
    assert percentile([7.0], 99.0) == 7.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50.0) == 2.5
    assert percentile(list(range(101)), 99.0) == 99.0
    samples_ns = [1_000_000 * n for n in range(1, 101)]  # 1 ms .. 100 ms
    assert Percentiles.of_ns(list(reversed(samples_ns))) == Percentiles(p50=50.5, p99=99.01)
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101.0)


def test_rates_and_ratios_are_null_when_undefined():
    assert rate(50, 2.0) == 25.0
    assert rate(50, 0.0) is None
    assert ratio(25.0, 1000.0) == 0.025
    assert ratio(25.0, 0.0) is None
    assert ratio(None, 1000.0) is None
    assert ratio(25.0, None) is None


def test_cpu_per_post_is_milliseconds_and_null_without_cpu_or_posts():
    assert per_post_ms(9.89, 466) == 21.22
    assert per_post_ms(0.0, 10) == 0.0
    assert per_post_ms(None, 466) is None
    assert per_post_ms(9.89, 0) is None


def test_gateway_cpu_is_the_sum_of_every_gateway_side_process():
    before = {"daemon-a": 1.0, "daemon-b": 2.0, "router": 0.5, "registry": 0.25}
    after = {"daemon-a": 3.0, "daemon-b": 5.5, "router": 1.5, "registry": 0.25}
    spent = cpu_between(before, after)
    assert spent == {"daemon-a": 2.0, "daemon-b": 3.5, "router": 1.0, "registry": 0.0}
    assert total_cpu(spent) == 6.5
    assert per_post_ms(total_cpu(spent), 650) == 10.0


def test_gateway_cpu_is_unknown_when_any_process_is_unreadable():
    spent = cpu_between({"daemon-a": 1.0, "router": None}, {"daemon-a": 2.0, "router": 3.0})
    assert spent == {"daemon-a": 1.0, "router": None}
    assert total_cpu(spent) is None
    assert cpu_between({"gateway": 1.0}, {}) == {"gateway": None}  # it exited meanwhile
    assert total_cpu({}) is None


# --- pieces the run relies on ----------------------------------------------------------


def test_a_message_stamp_reads_back_its_phase_and_clock():
    stamp = read_stamp(stamp_text(TIMED))
    assert stamp is not None
    assert stamp[0] == TIMED
    assert isinstance(stamp[1], int)
    assert read_stamp(stamp_text(WARMUP)) is not None
    for text in ("hello", "[1]", '{"t": "x", "phase": "timed"}', '{"t": true, "phase": "timed"}'):
        assert read_stamp(text) is None


def test_commit_counters_sum_the_batch_histogram_over_its_series():
    text = "\n".join(
        [
            "# HELP harness_store_commit_batch_size Writes per group commit.",
            "# TYPE harness_store_commit_batch_size histogram",
            'harness_store_commit_batch_size_bucket{backend="sqlite",le="1.0"} 3.0',
            'harness_store_commit_batch_size_count{backend="sqlite"} 10.0',
            'harness_store_commit_batch_size_sum{backend="sqlite"} 42.0',
            'harness_store_commit_batch_size_count{backend="postgresql"} 0.0',
            'harness_store_commit_batch_size_sum{backend="postgresql"} 0.0',
            'harness_store_commit_seconds_count{backend="sqlite"} 99.0',
        ]
    )
    assert parse_commit_counters(text) == CommitCounters(commits=10.0, writes=42.0)


def test_commit_counters_add_up_over_daemons_and_are_none_if_one_lacks_them():
    first = CommitCounters(commits=10.0, writes=40.0)
    second = CommitCounters(commits=5.0, writes=6.0)
    assert sum_counters([first]) == first
    assert sum_counters([first, second]) == CommitCounters(commits=15.0, writes=46.0)
    assert sum_counters([first, None]) is None
    assert sum_counters([]) is None


def test_commit_rates_between_two_scrapes():
    before = CommitCounters(commits=100.0, writes=300.0)
    after = CommitCounters(commits=160.0, writes=540.0)
    assert commit_rates(before, after, 2.0) == (30.0, 4.0)
    assert commit_rates(before, before, 2.0) == (0.0, None)  # no commit: no batch size
    assert commit_rates(before, after, 0.0) == (None, 4.0)
    assert commit_rates(None, after, 2.0) == (None, None)
    assert commit_rates(before, None, 2.0) == (None, None)


def test_commit_counters_are_none_without_the_histogram():
    assert parse_commit_counters("") is None
    assert parse_commit_counters('harness_store_commit_seconds_count{backend="sqlite"} 5') is None
    assert parse_commit_counters("harness_store_commit_batch_size_count 5") is None


def test_warnings_errors_and_raw_lines_in_a_childs_output_count_as_trouble():
    assert is_trouble('{"level": "error", "msg": "x"}')
    assert is_trouble('{"level": "warning", "msg": "x"}')
    assert is_trouble("Traceback (most recent call last):")
    assert not is_trouble('{"level": "info", "msg": "ready"}')
    log = OutputLog()
    for n in range(30):
        log.note(f"line {n}")
    assert log.count == 30
    assert len(log.kept) == 20


def test_cpu_time_of_a_process_reads_from_proc_where_there_is_one():
    used = process_cpu_seconds(os.getpid())
    if sys.platform.startswith("linux"):
        assert used is not None
        assert used >= 0.0
    else:
        assert used is None
    assert process_cpu_seconds(-1) is None


# --- the layout of agents -------------------------------------------------------------


def test_the_bench_restates_the_contracts_group_bounds():
    assert plan.GROUP_MIN_MEMBERS == addresses.GROUP_MIN_MEMBERS
    assert plan.GROUP_MAX_MEMBERS == addresses.GROUP_MAX_MEMBERS
    assert plan.AGENT_PREFIX == addresses.AGENT_PREFIX
    assert plan.GROUP_PREFIX == addresses.GROUP_PREFIX


def test_pairs_keep_their_names_and_send_direct_on_one_daemon():
    plans = plan.plan_groups(2, group_size=2, daemons=1)
    assert [(p.sender.name, [r.name for r in p.receivers]) for p in plans] == [
        ("bench-sender-0", ["bench-receiver-0"]),
        ("bench-sender-1", ["bench-receiver-1"]),
    ]
    assert [p.address for p in plans] == ["agent:bench-receiver-0", "agent:bench-receiver-1"]
    assert {agent.daemon for p in plans for agent in (p.sender, *p.receivers)} == {0}


def test_two_daemons_put_each_sender_on_one_and_its_receivers_on_the_other():
    for group_size in (2, 4):
        plans = plan.plan_groups(4, group_size=group_size, daemons=2)
        assert [conversation.sender.daemon for conversation in plans] == [0, 1, 0, 1]
        for conversation in plans:
            assert {receiver.daemon for receiver in conversation.receivers} == {
                1 - conversation.sender.daemon
            }


def test_a_group_sends_to_the_others_and_means_the_whole_membership():
    (group,) = plan.plan_groups(1, group_size=4, daemons=1)
    others = ["bench-receiver-0-1", "bench-receiver-0-2", "bench-receiver-0-3"]
    assert [receiver.name for receiver in group.receivers] == others
    assert group.address == "group:" + ",".join(others)
    conversation = addresses.canonicalize(group.address, group.sender.name)
    assert isinstance(conversation, addresses.GroupConversation)
    assert conversation.members == tuple(sorted([group.sender.name, *others]))
    assert conversation.address == addresses.group_address([group.sender.name, *others])


def test_every_planned_name_is_a_valid_and_distinct_agent_name():
    plans = plan.plan_groups(16, group_size=32, daemons=2)
    names = [agent.name for p in plans for agent in (p.sender, *p.receivers)]
    assert len(names) == len(set(names)) == 16 * 32
    assert all(addresses.is_agent_name(name) for name in names)
    for p in plans:
        addresses.canonicalize(p.address, p.sender.name)  # raises when the size is refused


def test_group_addresses_sort_the_other_members():
    assert plan.group_address(["bench-c", "bench-a", "bench-b"]) == "group:bench-a,bench-b,bench-c"


@pytest.mark.parametrize(("group_size", "daemons"), [(1, 1), (33, 1), (0, 1), (3, 0), (3, 9)])
def test_layouts_the_bench_cannot_run_are_refused(group_size, daemons):
    with pytest.raises(ValueError):
        plan.plan_groups(1, group_size=group_size, daemons=daemons)


# --- counting deliveries --------------------------------------------------------------


def _conversation(receivers: int) -> Conversation:
    changed = asyncio.Event()
    no_endpoint = cast(Endpoint, object())  # never called: only the counters are used
    return Conversation(
        0,
        no_endpoint,
        "group:x",
        [Receiver(f"bench-receiver-0-{n}", no_endpoint, changed) for n in range(receivers)],
    )


def _delivery(message: DirectMessage | GroupMessage) -> InboundDelivery:
    return InboundDelivery(token="t", item=MulticastItem(message=message))


def _direct(text: str) -> DirectMessage:
    return DirectMessage(
        post_id="p",
        address="agent:bench-sender-0",
        sender="bench-sender-0",
        content=(TextPart(text=text),),
    )


def _group(text: str) -> GroupMessage:
    return GroupMessage(
        post_id="p",
        address="group:x",
        sender="bench-sender-0",
        members=("a", "b", "c"),
        content=(TextPart(text=text),),
    )


def test_a_group_post_is_owed_to_every_receiver():
    conversation = _conversation(3)
    conversation.sent = 5
    assert missing_deliveries([conversation]) == 15
    conversation.receivers[0].received = 5
    conversation.receivers[1].received = 7  # never negative: more seen than certified
    assert missing_deliveries([conversation]) == 5


def test_timed_deliveries_are_timed_at_each_receiver_direct_or_group():
    conversation = _conversation(2)
    first, second = conversation.receivers
    note_delivery(first, _delivery(_group(json.dumps({"t": 1_000, "phase": TIMED}))), 3_000)
    note_delivery(second, _delivery(_direct(json.dumps({"t": 1_000, "phase": TIMED}))), 5_000)
    assert (first.received, first.delivery_latencies_ns) == (1, [2_000])
    assert (second.received, second.delivery_latencies_ns) == (1, [4_000])
    assert first.changed.is_set()


def test_warm_up_and_foreign_deliveries_are_not_timed():
    (receiver,) = _conversation(1).receivers
    note_delivery(receiver, _delivery(_group(stamp_text(WARMUP))), 0)
    assert receiver.warmed.is_set()
    note_delivery(receiver, _delivery(_group("hello")), 0)
    note_delivery(receiver, _delivery(_group(json.dumps({"t": 1, "phase": "later"}))), 0)
    assert (receiver.received, receiver.strangers) == (0, 2)


def test_a_delivery_carrying_firewall_guidance_counts_as_any_other():
    (receiver,) = _conversation(1).receivers
    guidance = CheckedGuidance(
        check_id="chk_x",
        subjects=(),
        instructions=(
            ExpectationInstruction(
                middleware_id="turns",
                rule_id="direct-message",
                expectation=Expectation.PERMITTED,
                subjects=("p",),
                instruction="a direct message to you; you may reply",
            ),
        ),
    )
    timed = _direct(json.dumps({"t": 1_000, "phase": TIMED}))
    delivery = InboundDelivery(token="t", item=MulticastItem(message=timed), guidance=guidance)
    note_delivery(receiver, delivery, 4_000)
    assert (receiver.received, receiver.strangers, receiver.delivery_latencies_ns) == (
        1,
        0,
        [3_000],
    )


# --- the firewall flags ----------------------------------------------------------------


def test_no_flag_runs_without_a_firewall():
    config = cli.parse_config([])
    assert config.firewall is None
    assert config.firewall_cost is None


def test_firewall_names_a_file_every_daemon_runs(tmp_path, monkeypatch):
    (tmp_path / "rules.yaml").write_text("version: 1\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    config = cli.parse_config(["--firewall", "rules.yaml"])
    # Absolute: the daemons must find it whatever their working directory.
    assert config.firewall == tmp_path / "rules.yaml"
    assert config.firewall is not None
    assert config.firewall.is_absolute()
    assert config.firewall_cost is None


def test_firewall_cost_runs_three_rounds_unless_told(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("version: 1\n", encoding="utf-8")
    config = cli.parse_config(["--firewall-cost", str(rules), "--quick"])
    assert config.firewall_cost == cli.FirewallComparison(file=rules, rounds=cli.DEFAULT_ROUNDS)
    assert config.firewall is None  # the comparison chooses per round
    assert (config.pairs, config.seconds) == (2, 2.0)
    counted = cli.parse_config(["--firewall-cost", str(rules), "--rounds", "5"])
    assert counted.firewall_cost == cli.FirewallComparison(file=rules, rounds=5)


@pytest.mark.parametrize(
    "argv",
    [
        ["--firewall", "{missing}"],
        ["--firewall-cost", "{missing}"],
        ["--firewall", "{dir}"],
        ["--firewall", "{rules}", "--firewall-cost", "{rules}"],
        ["--rounds", "3"],  # counts nothing without --firewall-cost
        ["--firewall", "{rules}", "--rounds", "2"],
        ["--firewall-cost", "{rules}", "--rounds", "0"],
        ["--firewall-cost", "{rules}", "--rounds", str(cli.MAX_ROUNDS + 1)],
        ["--firewall-cost", "{rules}", "--rounds", "some"],
    ],
)
def test_invalid_firewall_flags_are_a_usage_error(argv, tmp_path, capsys):
    rules = tmp_path / "rules.yaml"
    rules.write_text("version: 1\n", encoding="utf-8")
    paths = {"missing": tmp_path / "absent.yaml", "dir": tmp_path, "rules": rules}
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_config([arg.format(**paths) for arg in argv])
    assert exit_info.value.code == 2
    assert "usage: python -m bench" in capsys.readouterr().err


def test_the_comparison_alternates_without_and_with_round_after_round():
    assert cli.cost_schedule(1) == ((1, False), (1, True))
    assert cli.cost_schedule(3) == (
        (1, False),
        (1, True),
        (2, False),
        (2, True),
        (3, False),
        (3, True),
    )


# --- the firewall's cost ---------------------------------------------------------------


def test_medians_take_the_middle_and_are_null_when_any_round_is():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert median([7.5]) == 7.5
    assert median([]) is None
    assert median([1.0, None, 3.0]) is None


def test_percent_changes_are_after_over_before_less_one():
    assert change_pct(2.2, 2.0) == 10.0
    assert change_pct(1.8, 2.0) == -10.0
    assert change_pct(2.0, 2.0) == 0.0
    assert change_pct(2.31, 2.1) == 10.0
    assert change_pct(None, 2.0) is None
    assert change_pct(2.0, None) is None
    assert change_pct(2.0, 0.0) is None


def _round(posts: float | None, cpu: float | None, failed: int = 0) -> RoundValues:
    return RoundValues(
        certified_posts_per_second=posts,
        gateway_cpu_ms_per_post=cpu,
        failed_sends=failed,
        undelivered=0,
    )


def _cost_config(tmp_path) -> cli.BenchConfig:
    rules = tmp_path / "five.yaml"
    rules.write_text("version: 1\n", encoding="utf-8")
    return cli.parse_config(["--firewall-cost", str(rules), "--rounds", "3", "--pairs", "4"])


def test_the_cost_line_compares_the_medians_of_each_side(tmp_path):
    config = _cost_config(tmp_path)
    assert config.firewall_cost is not None
    without = [_round(500.0, 2.00), _round(540.0, 1.90), _round(480.0, 2.10)]
    with_firewall = [_round(470.0, 2.20), _round(450.0, 2.30, failed=1), _round(490.0, 2.09)]
    result = cli.assemble_cost(config, config.firewall_cost, without, with_firewall)
    value = json.loads(result_line(result))
    assert tuple(value) == COST_KEYS
    assert (value["pairs"], value["seconds"], value["rounds"]) == (4, 10.0, 3)
    assert value["mode"] == {
        "burst": 1,
        "group_size": 2,
        "daemons": 1,
        "router": "inprocess",
        "store": "sqlite",
        "nats_nodes": None,
        "hub": False,
    }
    assert value["firewall"] == "five.yaml"
    assert set(value["machine"]) == {"cpu_count", "platform", "python"}
    assert value["without_firewall"]["certified_posts_per_second"] == 500.0
    assert value["without_firewall"]["gateway_cpu_ms_per_post"] == 2.0
    assert value["with_firewall"]["certified_posts_per_second"] == 470.0
    assert value["with_firewall"]["gateway_cpu_ms_per_post"] == 2.2
    # Every round is on the line, in run order.
    assert value["with_firewall"]["per_round"] == [
        {
            "certified_posts_per_second": 470.0,
            "gateway_cpu_ms_per_post": 2.2,
            "failed_sends": 0,
            "undelivered": 0,
        },
        {
            "certified_posts_per_second": 450.0,
            "gateway_cpu_ms_per_post": 2.3,
            "failed_sends": 1,
            "undelivered": 0,
        },
        {
            "certified_posts_per_second": 490.0,
            "gateway_cpu_ms_per_post": 2.09,
            "failed_sends": 0,
            "undelivered": 0,
        },
    ]
    assert value["cpu_overhead_pct"] == 10.0  # 2.2 / 2.0 - 1
    assert value["throughput_change_pct"] == -6.0  # 470 / 500 - 1


def test_the_cost_is_null_when_a_round_has_no_cpu_reading(tmp_path):
    config = _cost_config(tmp_path)
    assert config.firewall_cost is not None
    result = cli.assemble_cost(
        config,
        config.firewall_cost,
        [_round(500.0, 2.0), _round(520.0, None)],
        [_round(480.0, 2.2), _round(470.0, 2.3)],
    )
    value = result.to_json()
    assert value["without_firewall"]["gateway_cpu_ms_per_post"] is None
    assert value["cpu_overhead_pct"] is None
    assert value["throughput_change_pct"] == -6.9  # medians 475 / 510
    # An even count's median is the middle two's mean, printed as its inputs are.
    assert value["with_firewall"]["gateway_cpu_ms_per_post"] == 2.25


def _outcome(*, posts: int, elapsed: float, cpu: float | None) -> GatewayOutcome:
    return GatewayOutcome(
        posts=posts,
        elapsed=elapsed,
        send_latencies_ns=[],
        delivery_latencies_ns=[],
        commits_per_second=None,
        mean_commit_batch_size=None,
        undelivered=3,
        send_failures={"FirewallSendError:rate-limited": 2, "SendError:timeout": 1},
        ack_failures={},
        receiver_errors=(),
        strangers=0,
        processes=(),
        measured_over=elapsed,
        gateway_cpu_seconds=cpu,
        bench_cpu_seconds=0.5,
    )


def test_a_round_keeps_throughput_cpu_per_post_and_what_failed():
    assert cli.round_values(_outcome(posts=2236, elapsed=5.02, cpu=5.37)) == RoundValues(
        certified_posts_per_second=445.4,
        gateway_cpu_ms_per_post=2.4,
        failed_sends=3,
        undelivered=3,
    )
    unknown = cli.round_values(_outcome(posts=0, elapsed=5.0, cpu=None))
    assert (unknown.certified_posts_per_second, unknown.gateway_cpu_ms_per_post) == (0.0, None)


# --- the five-rule firewall file -------------------------------------------------------

FIVE_RULES = Path(cli.__file__).parent / "firewall-five-rules.yaml"


def _no_external(spec: ExternalSpec) -> ExternalCaller:
    raise AssertionError(f"the bench's firewall file calls out to {spec.target}")


def test_the_five_rule_file_loads_with_one_middleware_of_each_builtin_kind():
    spec = load_firewall(FIVE_RULES)
    assert len(spec.middlewares) == 5
    assert {kind_of(middleware) for middleware in spec.middlewares} == {
        MiddlewareKind.RECIPIENT_POLICY,
        MiddlewareKind.RATE_LIMIT,
        MiddlewareKind.CONTENT_PATTERN,
        MiddlewareKind.TURN_GUIDANCE,
    }
    directions = [m.direction for m in spec.middlewares if isinstance(m, ContentPatternSpec)]
    assert directions == [Directions.BOTH, Directions.IN]


@pytest.mark.parametrize(("group_size", "daemons"), [(2, 1), (4, 1), (3, 2)])
async def test_the_five_rule_file_passes_every_bench_message(group_size, daemons):
    firewall = Firewall(load_firewall(FIVE_RULES), caller_factory=_no_external)
    seen_by_middleware: Counter[str] = Counter()
    for conversation in plan.plan_groups(2, group_size=group_size, daemons=daemons):
        receivers = [receiver.name for receiver in conversation.receivers]
        sender = conversation.sender.name
        for text in (stamp_text(WARMUP), stamp_text(TIMED)):
            # Sending: no refusal, and no instruction (no rule flags the bench's text).
            sent = await firewall.check_send(sender, subjects.outgoing(sender, receivers, text))
            assert sent.instructions == ()
            content = (ContractTextPart(text=text),)
            message: ContractDirect | ContractGroup
            if len(receivers) == 1:
                message = ContractDirect(
                    post_id="pst_x",
                    address=f"agent:{sender}",
                    sender=f"agent:{sender}",
                    content=content,
                )
            else:
                message = ContractGroup(
                    post_id="pst_x",
                    address=conversation.address,
                    sender=f"agent:{sender}",
                    members=tuple(f"agent:{name}" for name in sorted([sender, *receivers])),
                    content=content,
                )
            item = ContractMulticast(message=message)
            for receiver in receivers:
                verdict = await firewall.check_delivery(
                    receiver, subjects.of_item(receiver, item, requester=None)
                )
                # Delivered whole: nothing dropped, withheld or marked; only turn advice.
                assert not verdict.drop
                assert verdict.withheld == {}
                for instruction in verdict.guidance.instructions:
                    seen_by_middleware[instruction.middleware_id] += 1
    assert set(seen_by_middleware) == {"turns"}

"""`python -m bench`: argument parsing and the result line's shape, on fake results.

No process starts here (the real run is `make bench`); everything checked is pure.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from bench import cli
from bench.gateway_run import TIMED, WARMUP, read_stamp, stamp_text
from bench.metrics import CommitCounters, parse_commit_counters
from bench.processes import OutputLog, is_trouble, process_cpu_seconds
from bench.result import (
    RESULT_KEYS,
    BenchResult,
    Machine,
    Percentiles,
    percentile,
    rate,
    ratio,
    result_line,
)


def fake_result(**overrides: object) -> BenchResult:
    values: dict[str, object] = {
        "machine": Machine(cpu_count=2, platform="Linux-test", python="CPython 3.11.7"),
        "pairs": 8,
        "seconds": 10.0,
        "certified_posts_per_second": 123.4,
        "send_latency_ms": Percentiles(p50=12.5, p99=40.25),
        "send_to_delivery_ms": Percentiles(p50=15.0, p99=55.0),
        "store_commits_per_second": 80.5,
        "mean_commit_batch_size": 3.25,
        "baseline_unary_echo_per_second": 4000.0,
        "ratio_to_baseline": 0.0309,
    }
    values.update(overrides)
    return BenchResult(**values)  # type: ignore[arg-type]


# --- arguments -------------------------------------------------------------------------


def test_no_flags_run_eight_pairs_for_ten_seconds():
    config = cli.parse_config([])
    assert (config.pairs, config.seconds) == (8, 10.0)


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
    for flag in ("--pairs", "--seconds", "--quick", "--gateway-bin"):
        assert flag in out


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
    assert value["certified_posts_per_second"] == 123.4
    assert value["send_latency_ms"] == {"p50": 12.5, "p99": 40.25}
    assert value["send_to_delivery_ms"] == {"p50": 15.0, "p99": 55.0}
    assert value["store_commits_per_second"] == 80.5
    assert value["mean_commit_batch_size"] == 3.25
    assert value["baseline_unary_echo_per_second"] == 4000.0
    assert value["ratio_to_baseline"] == 0.0309


def test_what_was_not_measured_prints_as_null_never_as_a_number():
    line = result_line(
        fake_result(
            store_commits_per_second=None,
            mean_commit_batch_size=None,
            send_to_delivery_ms=Percentiles.of_ns([]),
        )
    )
    value = json.loads(line)
    assert value["store_commits_per_second"] is None
    assert value["mean_commit_batch_size"] is None
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

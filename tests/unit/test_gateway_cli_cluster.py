"""`harness-gateway` and cluster mode's flags (docs/design/cluster.md §1, §12; operations.md §7).

`check-config --cluster` validates a replica's settings today; `serve --cluster` and `migrate
--cluster` refuse with one line until this build completes them (cluster.md §14). Nothing
here opens a socket or a database: the refusals come before either.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from gateway import cli
from gateway.settings import _PARSERS, env_name, load_settings

ADMIN_TOKEN_FILE = "/run/secrets/admin-token"
REPLICA = [
    "--cluster",
    "--store",
    "postgresql://harness@db:5432/harness",
    "--seed-key-file",
    "/run/secrets/seed-key",
    "--peer-token-file",
    "/run/secrets/peer-token",
    "--registry-key-file",
    "/run/secrets/registry-key",
]
"""The flags of a replica that starts, beside `HARNESS_ADMIN_TOKEN_FILE`."""


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No `HARNESS_*` of the machine running the tests; the admin token file of a replica;
    the data directory under `tmp_path`; `main`'s gRPC verbosity restored afterwards."""
    for name in _PARSERS:
        monkeypatch.delenv(env_name(name), raising=False)
    monkeypatch.setenv("HARNESS_ADMIN_TOKEN_FILE", ADMIN_TOKEN_FILE)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("GRPC_VERBOSITY", "ERROR")


def test_check_config_prints_a_replica_s_settings_with_its_mode_and_advertised_address(
    capsys: pytest.CaptureFixture[str],
):
    argv = ["check-config", *REPLICA, "--replica-id", "gateway-0", "--listen", "10.1.2.3:7770"]
    assert cli.main(argv) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["mode"] == "cluster"
    assert shown["cluster"] is True
    assert (shown["replica"], shown["advertised"]) == ("gateway-0", "10.1.2.3:7770")
    assert shown["seed_key_file"] == "/run/secrets/seed-key"
    assert shown["admin_token_file"] == ADMIN_TOKEN_FILE
    assert shown["reflection"] is None


def test_check_config_names_every_missing_requirement_of_a_replica(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.delenv("HARNESS_ADMIN_TOKEN_FILE")
    assert cli.main(["check-config", "--cluster", "--router", "nats://n:4222"]) == 2
    lines = capsys.readouterr().err.splitlines()
    named = [line.removeprefix("harness-gateway: ").split(":")[0] for line in lines]
    assert named == [
        "store",
        "seed_key_file",
        "admin_token_file",
        "peer_token_file",
        "registry_key_file",
        "router",
    ]


def test_serve_cluster_with_invalid_settings_reports_every_problem_and_starts_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    data_dir = tmp_path / "data"
    assert cli.main(["serve", "--cluster", "--data-dir", str(data_dir)]) == 2
    err = capsys.readouterr().err
    assert "store: --cluster needs --store postgresql://" in err
    assert not data_dir.exists()


def test_migrate_cluster_with_a_missing_seed_key_file_fails_naming_it_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    missing = tmp_path / "seed-key"
    argv = [
        "migrate",
        "--cluster",
        "--store",
        "postgresql://harness@127.0.0.1:1/harness",
        "--seed-key-file",
        str(missing),
        "--partitions",
        "256",
    ]
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    assert str(missing) in captured.err
    assert captured.out == ""
    assert not missing.exists()


def test_migrate_partitions_without_cluster_is_refused_as_never_used(
    capsys: pytest.CaptureFixture[str],
):
    assert cli.main(["migrate", "--store", "postgresql://db/h", "--partitions", "256"]) == 2
    assert "cluster_partitions: --partitions (HARNESS_CLUSTER_PARTITIONS) is set without" in (
        capsys.readouterr().err
    )


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli._build_parser()
    (commands,) = [
        action
        for action in parser._actions  # argparse keeps its subcommands only here
        if isinstance(action, argparse._SubParsersAction)
    ]
    return dict(commands.choices)


NOT_SETTINGS = frozenset({"help", "migrate_registry", "migrate_check"})
"""Option destinations that are not settings: `--help` and what only `migrate` reads."""


@pytest.mark.parametrize("command", ["serve", "check-config", "router", "registry", "migrate"])
def test_every_flag_of_a_command_sets_a_setting_that_has_a_variable(command: str):
    destinations = {
        action.dest
        for action in subcommands()[command]._actions
        if action.option_strings and action.dest not in NOT_SETTINGS
    }
    assert destinations
    assert sorted(destinations - set(_PARSERS)) == []


def test_check_config_takes_every_serve_flag():
    options = {
        command: {option for action in parser._actions for option in action.option_strings}
        for command, parser in subcommands().items()
    }
    assert options["serve"] == options["check-config"]
    assert {"--cluster", "--replica-id", "--advertise-address", "--seed-key-file"} <= (
        options["serve"]
    )
    assert {"--cluster", "--seed-key-file", "--partitions"} <= options["migrate"]
    assert "--replica-id" not in options["migrate"]


@pytest.mark.parametrize(
    ("argv", "variables"),
    [
        (
            ["serve", *REPLICA, "--replica-id", "r-1", "--advertise-address", "r-1.g:7770"],
            {
                "HARNESS_CLUSTER": "on",
                "HARNESS_STORE": "postgresql://harness@db:5432/harness",
                "HARNESS_SEED_KEY_FILE": "/run/secrets/seed-key",
                "HARNESS_PEER_TOKEN_FILE": "/run/secrets/peer-token",
                "HARNESS_REGISTRY_KEY_FILE": "/run/secrets/registry-key",
                "HARNESS_REPLICA_ID": "r-1",
                "HARNESS_ADVERTISE_ADDRESS": "r-1.g:7770",
            },
        ),
        (
            [
                "migrate",
                "--cluster",
                "--store",
                "postgresql://db/h",
                "--seed-key-file",
                "/k",
                "--partitions",
                "4096",
            ],
            {
                "HARNESS_CLUSTER": "1",
                "HARNESS_STORE": "postgresql://db/h",
                "HARNESS_SEED_KEY_FILE": "/k",
                "HARNESS_CLUSTER_PARTITIONS": "4096",
            },
        ),
    ],
    ids=["serve", "migrate"],
)
def test_cluster_flags_and_their_variables_give_the_same_settings(
    argv: list[str], variables: dict[str, str]
):
    options = vars(cli._build_parser().parse_args(argv))
    for name in ("command", *NOT_SETTINGS):
        options.pop(name, None)
    defaults = cli._role_defaults(argv[0])
    admin = {"HARNESS_ADMIN_TOKEN_FILE": ADMIN_TOKEN_FILE}
    from_flags = load_settings(env=admin, flags=options, defaults=defaults)
    from_variables = load_settings(env={**admin, **variables}, defaults=defaults)
    assert from_flags == from_variables
    assert from_flags.cluster

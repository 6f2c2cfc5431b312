from __future__ import annotations

import argparse

import pytest
from harness_client import cli


def namespace(**values: object) -> argparse.Namespace:
    base = {"token": None, "token_file": None, "admin_token": None, "admin_token_file": None}
    return argparse.Namespace(**{**base, **values})


def test_a_flag_token_wins_over_the_environment(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    env = {"HARNESS_TOKEN": "from-env"}
    assert cli.agent_token(namespace(token="from-flag"), env) == "from-flag"
    assert cli.agent_token(namespace(token_file=str(token_file)), env) == "from-file"
    assert cli.agent_token(namespace(), env) == "from-env"
    assert cli.agent_token(namespace(), {"HARNESS_TOKEN_FILE": str(token_file)}) == "from-file"


def test_no_agent_token_is_a_usage_error():
    with pytest.raises(cli.UsageError, match="no agent token"):
        cli.agent_token(namespace(), {})


def test_the_admin_token_falls_back_to_the_embedded_data_directory(tmp_path):
    state = tmp_path / "state"
    (state / "harness-gateway").mkdir(parents=True)
    (state / "harness-gateway" / "admin-token").write_text("a" * 40 + "\n")
    assert cli.admin_token(namespace(), {"XDG_STATE_HOME": str(state)}) == "a" * 40
    home = tmp_path / "home"
    (home / ".local/state/harness-gateway").mkdir(parents=True)
    (home / ".local/state/harness-gateway/admin-token").write_text("b" * 40)
    assert cli.admin_token(namespace(), {"HOME": str(home)}) == "b" * 40
    assert cli.admin_token(namespace(admin_token="flag"), {"HOME": str(home)}) == "flag"


def test_a_missing_token_file_is_a_usage_error(tmp_path):
    with pytest.raises(cli.UsageError, match="cannot read"):
        cli.agent_token(namespace(token_file=str(tmp_path / "absent")), {})


def test_usage_errors_exit_two_and_help_exits_zero(capsys):
    assert cli.main(["no-such-command"]) == cli.EXIT_USAGE
    assert cli.main(["--help"]) == cli.EXIT_OK
    assert cli.main(["listen", "--max", "0"]) == cli.EXIT_USAGE
    capsys.readouterr()


def test_json_may_follow_the_command_and_the_url_defaults_from_the_environment():
    parser = cli.build_parser({"HARNESS_URL": "grpc://gw:7770"})
    args = parser.parse_args(["agents", "register", "bob", "--json"])
    assert args.output == "json"
    assert args.url == "grpc://gw:7770"
    assert parser.parse_args(["--json", "status"]).output == "json"
    assert parser.parse_args(["status"]).output == "text"
    assert cli.build_parser({}).parse_args(["status"]).url == "127.0.0.1:7770"


def test_json_output_writes_integral_numbers_as_integers():
    assert (
        cli.dumps({"deadline": 300.0, "n": 1.5, "xs": (1.0,)})
        == '{"deadline": 300, "n": 1.5, "xs": [1]}'
    )

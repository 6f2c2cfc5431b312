"""`harness`'s arguments, tokens, environment and last guards, without a gateway: every way
a command can go wrong before it dials ends in one line and an exit code, never a traceback."""

from __future__ import annotations

import argparse
import io

import pytest
from harness_client import cli
from harness_client._cli import commands
from harness_client._cli.commands import Context, read_schema
from harness_client._cli.env import admin_token, agent_token, gateway_url
from harness_client._cli.failures import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
)
from harness_client._cli.output import OutputForm, dumps
from harness_client._cli.parser import build_parser, output_for


def namespace(**values: object) -> argparse.Namespace:
    base = {
        "token": None,
        "token_file": None,
        "admin_token": None,
        "admin_token_file": None,
        "url": None,
    }
    return argparse.Namespace(**{**base, **values})


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for name in (
        "HARNESS_URL",
        "HARNESS_TOKEN",
        "HARNESS_TOKEN_FILE",
        "HARNESS_ADMIN_TOKEN",
        "HARNESS_ADMIN_TOKEN_FILE",
        "HARNESS_CONNECT_TIMEOUT",
        "HARNESS_DEBUG",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_a_flag_token_wins_over_the_environment(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    env = {"HARNESS_TOKEN": "from-env"}
    assert agent_token(namespace(token="from-flag"), env) == "from-flag"
    assert agent_token(namespace(token_file=str(token_file)), env) == "from-file"
    assert agent_token(namespace(), env) == "from-env"
    assert agent_token(namespace(), {"HARNESS_TOKEN_FILE": str(token_file)}) == "from-file"


def test_no_agent_token_is_a_usage_error_that_says_where_tokens_come_from():
    with pytest.raises(UsageError, match=r"no agent token.*agents register NAME"):
        agent_token(namespace(), {})


def test_the_admin_token_falls_back_to_the_embedded_data_directory(tmp_path):
    state = tmp_path / "state"
    (state / "harness-gateway").mkdir(parents=True)
    (state / "harness-gateway" / "admin-token").write_text("a" * 40 + "\n")
    assert admin_token(namespace(), {"XDG_STATE_HOME": str(state)}) == "a" * 40
    home = tmp_path / "home"
    (home / ".local/state/harness-gateway").mkdir(parents=True)
    (home / ".local/state/harness-gateway/admin-token").write_text("b" * 40)
    assert admin_token(namespace(), {"HOME": str(home)}) == "b" * 40
    assert admin_token(namespace(admin_token="flag"), {"HOME": str(home)}) == "flag"


def test_a_missing_token_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="cannot read"):
        agent_token(namespace(token_file=str(tmp_path / "absent")), {})


def test_a_token_with_characters_no_token_has_is_refused_naming_where_it_came_from():
    with pytest.raises(UsageError, match="HARNESS_TOKEN has characters"):
        agent_token(namespace(), {"HARNESS_TOKEN": "hat_a\nb"})
    with pytest.raises(UsageError, match="--admin-token has characters"):
        admin_token(namespace(admin_token="two words"), {})


def test_the_url_comes_from_the_flag_the_environment_or_the_default_and_is_checked():
    assert gateway_url(namespace(), {}) == "127.0.0.1:7770"
    assert gateway_url(namespace(), {"HARNESS_URL": "grpc://gw:7770"}) == "grpc://gw:7770"
    flag = namespace(url="grpcs://[::1]:7770")
    assert gateway_url(flag, {"HARNESS_URL": "x"}) == "grpcs://[::1]:7770"
    for bad in ("::::", "gw", "gw:0", "gw:70000", "two words:1"):
        with pytest.raises(UsageError, match=r"HARNESS_URL .* is not HOST:PORT"):
            gateway_url(namespace(), {"HARNESS_URL": bad})


def test_usage_errors_exit_two_and_help_exits_zero(capsys):
    assert cli.main(["no-such-command"]) == EXIT_USAGE
    assert cli.main(["--help"]) == EXIT_OK
    assert cli.main(["listen", "--max", "0"]) == EXIT_USAGE
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--timeout", "abc", "status"], "argument --timeout: 'abc' is not a number of seconds"),
        (["--connect-timeout", "-1", "status"], "'-1' is not a number of seconds above 0"),
        (["listen", "--max", "two"], "argument --max: 'two' is not a whole number"),
        (["gather", "agent:bob", "q", "--schema", "{}", "--deadline", "0"], "30 days"),
        (["-o", "yaml", "status"], "invalid choice: 'yaml'"),
    ],
)
def test_a_bad_flag_value_is_described_in_user_words(capsys, argv, says):
    assert cli.main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert says in err
    assert "Traceback" not in err
    assert "_positive" not in err
    assert "invalid" not in err or "invalid choice" in err


def every_action(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from every_action(sub)
        else:
            yield parser.prog, action


def test_every_argument_of_every_command_has_help():
    missing = [
        f"{prog} {action.option_strings or action.dest}"
        for prog, action in every_action(build_parser({}))
        if not action.help or action.help == argparse.SUPPRESS
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("HARNESS_URL", "::::", "HARNESS_URL '::::' is not HOST:PORT"),
        ("HARNESS_CONNECT_TIMEOUT", "soon", "HARNESS_CONNECT_TIMEOUT: 'soon' is not a number"),
        ("HARNESS_DEBUG", "maybe", "HARNESS_DEBUG='maybe': use 1 or 0"),
        ("HARNESS_TOKEN", "hat_a b", "the token from HARNESS_TOKEN has characters"),
    ],
)
def test_a_bad_environment_value_is_a_usage_error_naming_the_variable(
    monkeypatch, capsys, variable, value, says
):
    monkeypatch.setenv(variable, value)
    if variable != "HARNESS_TOKEN":
        monkeypatch.setenv("HARNESS_TOKEN", "hat_x")
    assert cli.main(["send", "agent:bob", "hi"]) == EXIT_USAGE
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"harness: error: {says}")


def test_the_output_is_the_command_s_own_form_unless_one_is_asked_for():
    parser = build_parser({})

    def form(*argv: str) -> tuple[OutputForm, bool]:
        out = output_for(parser.parse_args(argv), io.StringIO(), io.StringIO())
        return out.form, out.json_errors

    assert form("status") == (OutputForm.TEXT, False)
    assert form("agents", "register", "bob", "--json") == (OutputForm.JSON, True)
    assert form("--json", "status") == (OutputForm.JSON, True)
    assert form("send", "agent:bob", "hi") == (OutputForm.JSON, False)
    assert form("send", "agent:bob", "hi", "-o", "text") == (OutputForm.TEXT, False)
    assert form("listen", "--text") == (OutputForm.TEXT, False)
    assert form("-o", "text", "listen") == (OutputForm.TEXT, False)


def test_json_output_writes_integral_numbers_as_integers():
    assert (
        dumps({"deadline": 300.0, "n": 1.5, "xs": (1.0,)})
        == '{"deadline": 300, "n": 1.5, "xs": [1]}'
    )


def context(stdin: str = "") -> Context:
    args = build_parser({}).parse_args(["send", "agent:bob", "-"])
    out = output_for(args, io.StringIO(), io.StringIO())
    return Context(args=args, env={}, out=out, stdin=io.StringIO(stdin))


def test_a_text_comes_from_the_argument_stdin_or_a_file_without_its_final_newline(tmp_path):
    assert context().text("hi", None, what="text", flag="--text-file") == "hi"
    assert context("hello\nworld\n").text("-", None, what="text", flag="--text-file") == (
        "hello\nworld"
    )
    big = tmp_path / "big.txt"
    big.write_text("x" * 200_000 + "\n", encoding="utf-8")
    assert context().text(None, str(big), what="text", flag="--text-file") == "x" * 200_000
    with pytest.raises(UsageError, match="not both"):
        context().text("hi", str(big), what="text", flag="--text-file")
    with pytest.raises(UsageError, match="no text: give it as an argument, - to read stdin"):
        context().text(None, None, what="text", flag="--text-file")
    with pytest.raises(UsageError, match="cannot read the text file"):
        context().text(None, str(tmp_path / "absent"), what="text", flag="--text-file")


def test_a_schema_is_inline_json_or_a_file(tmp_path):
    form = '{"type": "object", "properties": {"slot": {"type": "string"}}}'
    expected = {"type": "object", "properties": {"slot": {"type": "string"}}}
    assert read_schema(form) == expected
    path = tmp_path / "form.json"
    path.write_text(form, encoding="utf-8")
    assert read_schema(str(path)) == expected
    with pytest.raises(UsageError, match="--schema is not JSON"):
        read_schema("{nope")
    with pytest.raises(UsageError, match=r"inline JSON starts with \{"):
        read_schema(str(tmp_path / "absent.json"))
    path.write_text("[]", encoding="utf-8")
    with pytest.raises(UsageError, match="is not a JSON object"):
        read_schema(str(path))


def test_an_unexpected_error_prints_one_line_and_debug_adds_the_traceback(monkeypatch, capsys):
    async def broken(ctx: Context) -> int:
        raise RuntimeError("the disk fell off")

    monkeypatch.setattr(commands, "status", broken)
    assert cli.main(["status"]) == EXIT_INTERNAL
    assert capsys.readouterr().err == (
        "harness: unexpected error: RuntimeError: the disk fell off "
        "(--debug or HARNESS_DEBUG=1 shows the traceback)\n"
    )
    assert cli.main(["--debug", "status"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert err.endswith("harness: unexpected error: RuntimeError: the disk fell off\n")
    monkeypatch.setenv("HARNESS_DEBUG", "1")
    assert cli.main(["status"]) == EXIT_INTERNAL
    assert "Traceback" in capsys.readouterr().err


def test_ctrl_c_exits_130_without_a_traceback(monkeypatch, capsys):
    async def interrupted(ctx: Context) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "status", interrupted)
    assert cli.main(["status"]) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == ""


class ClosedPipe(io.StringIO):
    """stdout after its reader (`head -1`) went away."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_stdout_ends_the_command_quietly(monkeypatch, capsys):
    async def prints(ctx: Context) -> int:
        ctx.out.line("alice\thosted\tdetached\tbacklog=0")
        return EXIT_OK

    monkeypatch.setattr(commands, "agents_list", prints)
    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert cli.main(["agents", "list"]) == EXIT_BROKEN_PIPE
    # argparse drops a failed write of its help; the flush after it finds the pipe closed.
    assert cli.main(["--help"]) == EXIT_BROKEN_PIPE
    assert capsys.readouterr().err == ""

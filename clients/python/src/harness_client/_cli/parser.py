"""`harness`'s argument parser: every command, flag and help text, and the output form the
arguments ask for.

Each subcommand's parser carries what running it needs (`run`, the command in `commands.py`;
`role`, the token it takes; `natural`, its own output form; `display`, its name as typed),
so `main` dispatches without a table of its own. Flag values are checked by small types
(`seconds`, `count`, `deadline_seconds`) whose errors argparse prints in the user's words.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any, Final, TextIO

from harness_client import FailureDelivery
from harness_client._cli import commands
from harness_client._cli.env import (
    ADMIN_TOKEN_FILE_NAME,
    CONNECT_TIMEOUT_VARIABLE,
    DEBUG_VARIABLE,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_URL,
    default_data_dir,
    seconds,
)
from harness_client._cli.failures import TokenRole, UsageError
from harness_client._cli.output import Output, OutputForm
from harness_client._endpoint import ACKNOWLEDGE_MAX_TOKENS

DEFAULT_DEADLINE: Final = 300
"""Seconds a `gather` or `all-gather` stays open when `--deadline` is not given."""
MAX_DEADLINE: Final = 30 * 24 * 3600
"""Longest collective deadline in seconds: 30 days (the contract's bound)."""


def count(text: str) -> int:
    """A whole number of 1 or more (`--max 2`)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is less than 1")
    return value


def deadline_seconds(text: str) -> int:
    """Whole seconds from 1 to 30 days (`--deadline 300`)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from None
    if not 1 <= value <= MAX_DEADLINE:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not from 1 to {MAX_DEADLINE:,} seconds (30 days)"
        )
    return value


def _add_send_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="send under KEY: a retry with the same KEY returns the first outcome "
        "(send-state KEY reads it)",
    )
    parser.add_argument(
        "--failure-delivery",
        choices=[value.value for value in FailureDelivery],
        default=FailureDelivery.RESULT.value,
        help="where a refused gather or answer is reported: returned by this command, or as "
        "an operationFailed item on listen (default %(default)s)",
    )


def _add_text_arguments(parser: argparse.ArgumentParser, *, name: str, flag: str) -> None:
    parser.add_argument(
        name,
        nargs="?",
        metavar=name.upper(),
        help=f"the {name}; - reads it from stdin",
    )
    parser.add_argument(
        flag,
        metavar="PATH",
        dest=f"{name}_file",
        help=f"read the {name} from the file PATH instead (UTF-8)",
    )


_TO_HELP: Final = "agent:NAME, or group:NAME,NAME,... (a group includes you)"


def _add_output_flags(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: a subcommand's flags must not reset what the global flags set.
    parser.add_argument(
        "--json",
        action="store_const",
        const=OutputForm.JSON.value,
        dest="output",
        default=argparse.SUPPRESS,
        help="print JSON (same as -o json)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=[form.value for form in OutputForm],
        default=argparse.SUPPRESS,
        help="the result's form: readable text or JSON (default: JSON for send, gather, "
        "all-gather, answer, parse and listen; text for the others)",
    )


class _Subcommands:
    """Adds subcommands that also take `--json` / `-o` after the command name."""

    def __init__(self, actions: Any, common: argparse.ArgumentParser, prefix: str = "") -> None:
        self._actions = actions
        self._common = common
        self._prefix = prefix

    def add_parser(
        self,
        name: str,
        *,
        help: str,
        run: commands.Command | None = None,
        role: TokenRole = TokenRole.ADMIN,
        natural: OutputForm = OutputForm.TEXT,
    ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = self._actions.add_parser(
            name, help=help, description=help, parents=[self._common]
        )
        parser.set_defaults(display=f"{self._prefix}{name}", role=role, natural=natural, run=run)
        return parser


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    """The `harness` argument parser (`env` only fills in the help's defaults)."""
    parser = argparse.ArgumentParser(
        prog="harness",
        description="Operate a Harness Gateway and talk to it as an agent.",
        epilog="Exit codes: 0 ok, 1 a refused call, 2 usage, 3 unreachable or token refused.",
    )
    parser.add_argument(
        "--url",
        help="the gateway: HOST:PORT, grpc://HOST:PORT or grpcs://HOST:PORT (TLS) "
        f"(HARNESS_URL; now {env.get('HARNESS_URL') or DEFAULT_URL})",
    )
    parser.add_argument("--token", help="the agent's API token, hat_... (HARNESS_TOKEN)")
    parser.add_argument(
        "--token-file", metavar="PATH", help="file holding the agent's token (HARNESS_TOKEN_FILE)"
    )
    parser.add_argument("--admin-token", help="the operator token (HARNESS_ADMIN_TOKEN)")
    parser.add_argument(
        "--admin-token-file",
        metavar="PATH",
        help="file holding the operator token (HARNESS_ADMIN_TOKEN_FILE; default: "
        f"{default_data_dir(env) / ADMIN_TOKEN_FILE_NAME}, which the embedded daemon writes)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=seconds,
        metavar="SECONDS",
        help="seconds to reach the gateway and check the token "
        f"({CONNECT_TIMEOUT_VARIABLE}; default --timeout, else {DEFAULT_CONNECT_TIMEOUT:g}); "
        "a refused connection fails at once",
    )
    parser.add_argument(
        "--timeout",
        type=seconds,
        metavar="SECONDS",
        help="seconds each call may take (default: the call's own bound)",
    )
    parser.add_argument("--tls-ca", metavar="PATH", help="PEM roots to trust: connect with TLS")
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"show the traceback of an unexpected error ({DEBUG_VARIABLE}=1)",
    )
    _add_output_flags(parser)
    parser.set_defaults(output=None, readable=False)
    common = argparse.ArgumentParser(add_help=False)
    _add_output_flags(common)
    subcommands = _Subcommands(
        parser.add_subparsers(dest="command", required=True, metavar="COMMAND"), common
    )

    subcommands.add_parser(
        "status",
        help="version, mode, hosted agents, Router state; a cluster replica adds the cluster",
        run=commands.status,
    )

    agents = subcommands.add_parser("agents", help="register, list, show and manage agents")
    agent_commands = _Subcommands(
        agents.add_subparsers(dest="agents_command", required=True, metavar="ACTION"),
        common,
        prefix="agents ",
    )
    register = agent_commands.add_parser(
        "register",
        help="register and host an agent; prints its token, this once",
        run=commands.agents_register,
    )
    register.add_argument(
        "name", metavar="NAME", help="the new agent's name: 3 to 32 of a-z, 0-9 and -"
    )
    listing = agent_commands.add_parser(
        "list", help="list agents in name order", run=commands.agents_list
    )
    listing.add_argument("--prefix", help="only agents whose name starts with PREFIX")
    show = agent_commands.add_parser(
        "show", help="an agent's card, hosting, stream, backlog", run=commands.agents_show
    )
    show.add_argument("name", metavar="NAME", help="the agent's name")
    rotate = agent_commands.add_parser(
        "rotate-token", help="issue a new token, revoke the old", run=commands.agents_rotate
    )
    rotate.add_argument("name", metavar="NAME", help="the agent's name")
    revoke = agent_commands.add_parser(
        "revoke-token", help="revoke every token of an agent", run=commands.agents_revoke
    )
    revoke.add_argument("name", metavar="NAME", help="the agent's name")

    conversations = subcommands.add_parser(
        "conversations", help="a hosted agent's conversations", run=commands.conversations
    )
    conversations.add_argument("--agent", required=True, metavar="NAME", help="the agent's name")
    conversations.add_argument("--after", metavar="ADDRESS", help="start after this address")

    history = subcommands.add_parser(
        "history", help="a conversation's certified records, 50 a page", run=commands.history
    )
    history.add_argument("--agent", required=True, metavar="NAME", help="the agent's name")
    history.add_argument(
        "address", metavar="ADDRESS", help="the conversation: agent:NAME or group:NAME,..."
    )
    history.add_argument("--after", metavar="RECORD_HASH", help="start after this record")

    agent, json_result = TokenRole.AGENT, OutputForm.JSON
    send = subcommands.add_parser(
        "send",
        help='send a message text: plain text is a message, {"gather": ...} asks, '
        '{"action": "accept", ...} answers',
        run=commands.send,
        role=agent,
        natural=json_result,
    )
    send.add_argument("to", metavar="TO", help=_TO_HELP)
    _add_text_arguments(send, name="text", flag="--text-file")
    _add_send_flags(send)

    for name in ("gather", "all-gather"):
        op = name.replace("-", "_")
        ask = subcommands.add_parser(
            name,
            help=f"ask QUESTION as a {op}; the answers arrive later on listen as one "
            "collectiveResult",
            run=commands.ask,
            role=agent,
            natural=json_result,
        )
        ask.add_argument("to", metavar="TO", help=_TO_HELP)
        _add_text_arguments(ask, name="question", flag="--question-file")
        ask.add_argument(
            "--deadline",
            type=deadline_seconds,
            default=DEFAULT_DEADLINE,
            metavar="SECONDS",
            help="how long answers count, 1 s to 30 days (default %(default)s)",
        )
        ask.add_argument(
            "--schema",
            required=True,
            metavar="JSON|PATH",
            help="the answer form, an MCP form-mode schema: inline JSON (starting with {) "
            "or the path of a JSON file",
        )
        _add_send_flags(ask)

    answer = subcommands.add_parser(
        "answer",
        help="answer the question open in a conversation",
        run=commands.answer,
        role=agent,
        natural=json_result,
    )
    answer.add_argument(
        "to",
        metavar="TO",
        help="where the question arrived: the collectiveRequest item's `to` (agent:ASKER "
        "for a gather, the group for an all_gather)",
    )
    choice = answer.add_mutually_exclusive_group(required=True)
    choice.add_argument("--accept", metavar="JSON", help="the form's fields, as a JSON object")
    choice.add_argument("--decline", action="store_true", help="decline to answer")
    _add_send_flags(answer)

    parse = subcommands.add_parser(
        "parse",
        help="print the send a message text states, sending nothing",
        run=commands.parse,
        role=agent,
        natural=json_result,
    )
    parse.add_argument("to", metavar="TO", help=_TO_HELP)
    _add_text_arguments(parse, name="text", flag="--text-file")

    send_state = subcommands.add_parser(
        "send-state",
        help="the state of an idempotency key: absent, pending, indeterminate, returned",
        run=commands.send_state,
        role=TokenRole.AGENT,
    )
    send_state.add_argument("key", metavar="KEY", help="the --idempotency-key of the send")

    listen = subcommands.add_parser(
        "listen",
        help="print deliveries as they arrive (JSON lines, or -o text)",
        run=commands.listen,
        role=agent,
        natural=json_result,
    )
    listen.add_argument(
        "--text",
        dest="readable",
        action="store_true",
        help="print each delivery as readable lines, with its guidance (same as -o text)",
    )
    listen.add_argument("--ack", action="store_true", help="acknowledge each delivery printed")
    listen.add_argument(
        "--takeover", action="store_true", help="end the agent's open stream and take its place"
    )
    listen.add_argument("--max", type=count, metavar="N", help="stop after N deliveries")
    listen.add_argument(
        "--timeout",
        dest="listen_timeout",
        type=seconds,
        metavar="SECONDS",
        help="stop after SECONDS in all",
    )

    ack = subcommands.add_parser(
        "ack",
        help=f"acknowledge delivery tokens ({ACKNOWLEDGE_MAX_TOKENS:,} a call)",
        run=commands.ack,
        role=TokenRole.AGENT,
    )
    ack.add_argument("tokens", nargs="+", metavar="TOKEN", help="tokens, or - to read stdin")
    return parser


def output_for(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> Output:
    """The output the arguments ask for: `-o`/`--json`, `listen --text`, else the command's
    own form; failures are JSON only when JSON was asked for by name."""
    asked = None if args.output is None else OutputForm(args.output)
    if args.readable:
        if asked is OutputForm.JSON:
            raise UsageError("listen takes --text or --json, not both")
        asked = OutputForm.TEXT
    return Output(
        form=asked or args.natural,
        json_errors=asked is OutputForm.JSON,
        stdout=stdout,
        stderr=stderr,
    )

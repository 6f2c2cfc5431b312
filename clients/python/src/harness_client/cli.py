"""`harness`: the operator's and agent developer's command line (operations.md §8).

Built only on the public client library. Exit codes: 0 success; 1 a contract failure,
printed on stderr as its message then `reason=<reason>` (with `--json`, one
`{"error": {"type", "reason", ...}}` object carrying every field of the typed error);
2 usage; 3 connection or authentication.

A send the local firewall admitted prints, after its result, one `guidance <checkId>: ...`
line per instruction (not with `--json`, whose result carries `guidance` itself). `listen`
prints JSON lines; `listen --text` prints each delivery as readable lines instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TextIO, assert_never

import grpc

from harness_client._endpoint import (
    ACKNOWLEDGE_MAX_TOKENS,
    ACKNOWLEDGE_TIMEOUT,
    READ_TIMEOUT,
    SEND_TIMEOUT,
    Endpoint,
    connect,
)
from harness_client._errors import (
    AuthenticationError,
    ConnectError,
    EndpointClosedError,
    HarnessClientError,
    PermissionDeniedError,
    TransportError,
    UnavailableError,
)
from harness_client._items import (
    Accept,
    Answered,
    AnswerValue,
    AskOperation,
    CheckedGuidance,
    CollectiveGuidance,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    Content,
    DataPart,
    Decline,
    Declined,
    DirectMessage,
    ExpectationInstruction,
    FailureDelivery,
    GroupMessage,
    InboundDelivery,
    InboundItem,
    InboundMessage,
    Instruction,
    Invalid,
    JsonValue,
    LocalGuidance,
    MemberOutcome,
    MessageInput,
    MulticastItem,
    NoAnswer,
    OperationFailedItem,
    ResponseInput,
    SendInput,
    TextPart,
    UncertainInstruction,
    Withheld,
    answer_content_to_json,
    json_value_to_json,
)
from harness_client._management import MANAGEMENT_TIMEOUT, ManagementClient, connect_management

EXIT_OK: Final = 0
"""The command succeeded."""
EXIT_FAILURE: Final = 1
"""A contract failure (or a refused management call); printed with its reason."""
EXIT_USAGE: Final = 2
"""The command line is wrong, or a token is missing."""
EXIT_CONNECTION: Final = 3
"""The gateway could not be reached, or refused the token."""

DEFAULT_URL: Final = "127.0.0.1:7770"
"""Where the embedded daemon listens (operations.md §1)."""
DEFAULT_CONNECT_TIMEOUT: Final = 10.0
"""Seconds to reach a daemon when `--timeout` is not given."""
ADMIN_TOKEN_FILE_NAME: Final = "admin-token"  # noqa: S105 - a file name, not a secret
"""The file the embedded daemon writes its generated admin token to, in its data dir."""

_CONNECTION_ERRORS: Final = (
    ConnectError,
    AuthenticationError,
    PermissionDeniedError,
    TransportError,
    UnavailableError,
    EndpointClosedError,
)
"""Failures that exit 3: the gateway is unreachable or refused the token."""


class UsageError(Exception):
    """The command cannot run as given (exit 2)."""


def default_data_dir(env: Mapping[str, str]) -> Path:
    """The embedded daemon's data directory: `$XDG_STATE_HOME/harness-gateway`, else
    `~/.local/state/harness-gateway` (the gateway's own default)."""
    base = env.get("XDG_STATE_HOME") or str(
        Path(env.get("HOME", "~")).expanduser() / ".local/state"
    )
    return Path(base) / "harness-gateway"


def _read_token_file(path: str, what: str) -> str:
    try:
        token = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except OSError as error:
        raise UsageError(f"cannot read the {what} file {path}: {error.strerror}") from None
    if not token:
        raise UsageError(f"the {what} file {path} is empty")
    return token


def agent_token(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """`--token`, `--token-file`, `HARNESS_TOKEN`, `HARNESS_TOKEN_FILE`, in that order."""
    if args.token:
        return str(args.token)
    if args.token_file:
        return _read_token_file(args.token_file, "token")
    if env.get("HARNESS_TOKEN"):
        return env["HARNESS_TOKEN"]
    if env.get("HARNESS_TOKEN_FILE"):
        return _read_token_file(env["HARNESS_TOKEN_FILE"], "token")
    raise UsageError("no agent token: pass --token or --token-file, or set HARNESS_TOKEN")


def admin_token(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """`--admin-token`, `--admin-token-file`, `HARNESS_ADMIN_TOKEN`,
    `HARNESS_ADMIN_TOKEN_FILE`, then `admin-token` in the embedded default data directory."""
    if args.admin_token:
        return str(args.admin_token)
    if args.admin_token_file:
        return _read_token_file(args.admin_token_file, "admin token")
    if env.get("HARNESS_ADMIN_TOKEN"):
        return env["HARNESS_ADMIN_TOKEN"]
    if env.get("HARNESS_ADMIN_TOKEN_FILE"):
        return _read_token_file(env["HARNESS_ADMIN_TOKEN_FILE"], "admin token")
    default = default_data_dir(env) / ADMIN_TOKEN_FILE_NAME
    if default.is_file():
        return _read_token_file(str(default), "admin token")
    raise UsageError(
        "no admin token: pass --admin-token or --admin-token-file, set HARNESS_ADMIN_TOKEN, "
        f"or run the embedded daemon (which writes {default})"
    )


# --- output ----------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """JSON-ready values with integral floats written as integers (`5`, not `5.0`)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def dumps(value: Any) -> str:
    """One compact JSON line, non-ASCII kept."""
    return json.dumps(_plain(value), ensure_ascii=False, separators=(", ", ": "))


@dataclass
class Output:
    """Where results and failures go, and in which form."""

    json: bool
    stdout: TextIO
    stderr: TextIO

    def line(self, text: str) -> None:
        """One line of output, flushed (so `listen` works through a pipe)."""
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def value(self, value: Any) -> None:
        """A JSON value on one line."""
        self.line(dumps(value))

    def failure(self, error: HarnessClientError) -> None:
        """`<message>` then `reason=<reason>`, or `{"error": {...}}` with `--json`."""
        cause = error.__cause__
        if self.json:
            value = error.to_json()
            if isinstance(cause, HarnessClientError):
                value["cause"] = cause.to_json()
            self.stderr.write(dumps({"error": value}) + "\n")
        else:
            self.stderr.write(f"{error.message}\nreason={error.reason}\n")
            if isinstance(cause, HarnessClientError):
                self.stderr.write(f"cause: {cause.message}\n")
        self.stderr.flush()


# --- text forms ------------------------------------------------------------------------
# Peer text (messages, questions) is printed JSON-quoted, so it stays on its line: a peer
# cannot print a line that reads like a delivery or like the firewall's guidance.


def describe_instruction(instruction: Instruction) -> str:
    """`[middleware/rule] permitted (out): text`, or `[middleware/rule] uncertain CHOICE
    p=P: text` for a middleware's judgement."""
    match instruction:
        case ExpectationInstruction(expectation=expectation, subjects=subjects):
            verdict = expectation.value + (f" ({', '.join(subjects)})" if subjects else "")
        case UncertainInstruction(uncertain=uncertain):
            verdict = f"uncertain {uncertain.choice} p={uncertain.probability:g}"
        case _:
            assert_never(instruction)
    line = f"[{instruction.middleware_id}/{instruction.rule_id}] {verdict}"
    return f"{line}: {instruction.instruction}" if instruction.instruction else line


def _checked_lines(guidance: CheckedGuidance) -> list[str]:
    return [
        f"guidance {guidance.check_id}: {describe_instruction(instruction)}"
        for instruction in guidance.instructions
    ]


def describe_guidance(guidance: LocalGuidance) -> list[str]:
    """One `guidance <checkId>: ...` line per instruction (none for a check without any).

    A collective result's lines are prefixed by `question` for the question's check and by
    the member's address for each answer's."""
    match guidance:
        case CheckedGuidance():
            return _checked_lines(guidance)
        case CollectiveGuidance(question=question, answers=answers):
            lines = [] if question is None else [f"question {x}" for x in _checked_lines(question)]
            for answer in answers:
                lines.extend(f"{answer.member} {x}" for x in _checked_lines(answer.guidance))
            return lines
        case _:
            assert_never(guidance)


def describe_outcome(outcome: MemberOutcome) -> str:
    """A member's outcome in a collective result, in a few words."""
    match outcome:
        case Answered(content=content):
            return f"answered {dumps(answer_content_to_json(content))}"
        case Invalid(reason=reason):
            return f"answered outside the form ({reason})"
        case Withheld(reason=reason):
            return f"withheld by the local firewall ({reason.value})"
        case Declined():
            return "declined"
        case NoAnswer():
            return "no answer"
        case _:
            assert_never(outcome)


def _quoted(content: Content) -> str:
    parts = []
    for part in content:
        match part:
            case TextPart(text=text):
                parts.append(dumps(text))
            case DataPart(value=value):
                parts.append(dumps(json_value_to_json(value)))
            case _:
                assert_never(part)
    return " ".join(parts)


def _instant(epoch_ms: int) -> str:
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _describe_message(message: InboundMessage) -> str:
    match message:
        case DirectMessage(post_id=post_id, sender=sender, content=content):
            return f"message {post_id} from {sender}: {_quoted(content)}"
        case GroupMessage(post_id=post_id, address=address, sender=sender, content=content):
            return f"message {post_id} from {sender} in {address}: {_quoted(content)}"
        case _:
            assert_never(message)


def describe_item(item: InboundItem) -> list[str]:
    """An inbound item as a heading line and, for a collective result, one line per member."""
    match item:
        case MulticastItem(message=message):
            return [_describe_message(message)]
        case CollectiveRequestItem():
            return [
                f"{item.op.value} {item.id} from {item.sender} in {item.to}, answer by "
                f"{_instant(item.deadline_at)}: {dumps(item.question)}"
            ]
        case CollectiveResultItem(question=question):
            asked = (
                dumps(question)
                if isinstance(question, str)
                else describe_outcome(question)  # a Withheld question reads as one
            )
            return [
                f"{item.op.value} result {item.id} in {item.to}: question {asked}",
                *(f"{entry.member}: {describe_outcome(entry.outcome)}" for entry in item.outcomes),
            ]
        case OperationFailedItem(id=operation_id, to=to, error=error):
            return [f"{operation_id} failed in {to}: {error}"]
        case _:
            assert_never(item)


def describe_delivery(delivery: InboundDelivery) -> list[str]:
    """`<token> <item>`, then the item's further lines and its guidance, indented."""
    heading, *rest = describe_item(delivery.item)
    guidance = [] if delivery.guidance is None else describe_guidance(delivery.guidance)
    return [f"{delivery.token} {heading}", *(f"  {line}" for line in [*rest, *guidance])]


# --- commands --------------------------------------------------------------------------


@dataclass
class Context:
    """What every command needs: its arguments, the environment and the output."""

    args: argparse.Namespace
    env: Mapping[str, str]
    out: Output

    @property
    def connect_timeout(self) -> float:
        """`--timeout`, else the default connect bound."""
        timeout: float | None = self.args.timeout
        return DEFAULT_CONNECT_TIMEOUT if timeout is None else timeout

    def deadline(self, default: float) -> float:
        """`--timeout`, else the call's own default deadline."""
        timeout: float | None = self.args.timeout
        return default if timeout is None else timeout

    def credentials(self) -> grpc.ChannelCredentials | None:
        """TLS trusting `--tls-ca` (a PEM file), or None for plaintext."""
        if self.args.tls_ca is None:
            return None
        try:
            roots = Path(self.args.tls_ca).expanduser().read_bytes()
        except OSError as error:
            raise UsageError(f"cannot read --tls-ca {self.args.tls_ca}: {error.strerror}") from None
        return grpc.ssl_channel_credentials(root_certificates=roots)

    async def endpoint(self) -> Endpoint:
        """The agent's endpoint (`--token`)."""
        return await connect(
            self.args.url,
            token=agent_token(self.args, self.env),
            connect_timeout=self.connect_timeout,
            credentials=self.credentials(),
        )

    async def management(self) -> ManagementClient:
        """The operator client (`--admin-token`)."""
        token = admin_token(self.args, self.env)
        return await connect_management(
            self.args.url,
            admin_token=token,
            connect_timeout=self.connect_timeout,
            call_timeout=self.deadline(MANAGEMENT_TIMEOUT),
            credentials=self.credentials(),
        )


async def _status(ctx: Context) -> int:
    async with await ctx.management() as client:
        status = await client.status()
    if ctx.out.json:
        ctx.out.value(status.to_json())
    else:
        ctx.out.line(f"version: {status.version}")
        ctx.out.line(f"mode: {status.mode}")
        ctx.out.line(f"hosted agents: {status.hosted_agents}")
        ctx.out.line(f"router: {status.router_state}")
    return EXIT_OK


async def _agents_register(ctx: Context) -> int:
    async with await ctx.management() as client:
        registered = await client.register_agent(ctx.args.name)
    ctx.out.value(registered.to_json())
    return EXIT_OK


async def _agents_list(ctx: Context) -> int:
    async with await ctx.management() as client:
        agents = [agent async for agent in client.all_agents(prefix=ctx.args.prefix)]
    if ctx.out.json:
        ctx.out.value({"agents": [agent.to_json() for agent in agents]})
        return EXIT_OK
    for agent in agents:
        ctx.out.line(
            f"{agent.name}\t{'hosted' if agent.hosted else 'remote'}\t"
            f"{'listening' if agent.stream_attached else 'detached'}\tbacklog={agent.backlog}"
        )
    return EXIT_OK


async def _agents_show(ctx: Context) -> int:
    async with await ctx.management() as client:
        agent = await client.agent_status(ctx.args.name)
    if ctx.out.json:
        ctx.out.value(agent.to_json())
    else:
        for key, value in agent.to_json().items():
            ctx.out.line(f"{key}: {_plain(value)}")
    return EXIT_OK


async def _agents_rotate(ctx: Context) -> int:
    async with await ctx.management() as client:
        token = await client.rotate_token(ctx.args.name)
    if ctx.out.json:
        ctx.out.value({"address": f"agent:{ctx.args.name}", "token": token})
    else:
        ctx.out.line(token)
    return EXIT_OK


async def _agents_revoke(ctx: Context) -> int:
    async with await ctx.management() as client:
        await client.revoke_token(ctx.args.name)
    if ctx.out.json:
        ctx.out.value({"address": f"agent:{ctx.args.name}", "revoked": True})
    else:
        ctx.out.line(f"revoked every token of agent:{ctx.args.name}")
    return EXIT_OK


async def _conversations(ctx: Context) -> int:
    summaries = []
    async with await ctx.management() as client:
        after = ctx.args.after
        while True:
            page, more = await client.conversations(ctx.args.agent, after_address=after)
            summaries.extend(page)
            if not more or not page:
                break
            after = page[-1].address
    if ctx.out.json:
        ctx.out.value({"conversations": [summary.to_json() for summary in summaries]})
        return EXIT_OK
    for summary in summaries:
        ctx.out.line(
            f"{summary.address}\t{summary.kind}\tdepth={summary.depth}\t"
            f"head={summary.head_record_hash or '-'}"
        )
    return EXIT_OK


async def _history(ctx: Context) -> int:
    async with await ctx.management() as client:
        records, more = await client.history(
            ctx.args.agent, ctx.args.address, after_record_hash=ctx.args.after
        )
    if ctx.out.json:
        ctx.out.value({"records": [record.to_json() for record in records], "hasMore": more})
        return EXIT_OK
    for record in records:
        ctx.out.line(dumps(record.to_json()))
    if more:
        ctx.out.line(f"# more: --after {records[-1].record_hash}")
    return EXIT_OK


async def _send_input(ctx: Context, endpoint: Endpoint, send_input: SendInput) -> int:
    result = await endpoint.send(
        send_input,
        idempotency_key=ctx.args.idempotency_key,
        failure_delivery=FailureDelivery(ctx.args.failure_delivery),
        deadline=ctx.deadline(SEND_TIMEOUT),
    )
    ctx.out.value(result.to_json())
    if not ctx.out.json and result.guidance is not None:
        for line in describe_guidance(result.guidance):
            ctx.out.line(line)
    return EXIT_OK


async def _send(ctx: Context) -> int:
    async with await ctx.endpoint() as endpoint:
        send_input = await endpoint.parse_message_text(
            ctx.args.to, ctx.args.text, deadline=ctx.deadline(READ_TIMEOUT)
        )
        return await _send_input(ctx, endpoint, send_input)


def _load_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise UsageError(f"{what} is not JSON: {error}") from None


def _schema(path: str) -> dict[str, JsonValue]:
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read the schema {path}: {error.strerror}") from None
    schema = _load_json(text, f"the schema {path}")
    if not isinstance(schema, dict):
        raise UsageError(f"the schema {path} is not a JSON object")
    return schema


async def _ask(ctx: Context) -> int:
    op = CollectiveOp.GATHER if ctx.args.command == "gather" else CollectiveOp.ALL_GATHER
    send_input = MessageInput(
        to=ctx.args.to,
        text=ctx.args.question,
        collective=AskOperation(
            op=op, deadline=ctx.args.deadline, requested_schema=_schema(ctx.args.schema)
        ),
    )
    async with await ctx.endpoint() as endpoint:
        return await _send_input(ctx, endpoint, send_input)


def _answer_content(text: str) -> dict[str, AnswerValue]:
    value = _load_json(text, "--accept")
    if not isinstance(value, dict):
        raise UsageError("--accept must be a JSON object of form fields")
    content: dict[str, AnswerValue] = {}
    for key, item in value.items():
        if isinstance(item, bool | str):
            content[key] = item
        elif isinstance(item, int | float):
            content[key] = float(item)
        elif isinstance(item, list) and all(isinstance(entry, str) for entry in item):
            content[key] = tuple(item)
        else:
            raise UsageError(f"--accept: {key} must be a string, a number, a boolean or strings")
    return content


async def _answer(ctx: Context) -> int:
    response = Decline() if ctx.args.decline else Accept(content=_answer_content(ctx.args.accept))
    async with await ctx.endpoint() as endpoint:
        return await _send_input(ctx, endpoint, ResponseInput(to=ctx.args.to, response=response))


async def _parse(ctx: Context) -> int:
    async with await ctx.endpoint() as endpoint:
        send_input = await endpoint.parse_message_text(
            ctx.args.to, ctx.args.text, deadline=ctx.deadline(READ_TIMEOUT)
        )
    ctx.out.value(send_input.to_json())
    return EXIT_OK


async def _send_state(ctx: Context) -> int:
    async with await ctx.endpoint() as endpoint:
        state = await endpoint.read_send(ctx.args.key, deadline=ctx.deadline(READ_TIMEOUT))
    value = state.to_json()
    if ctx.out.json:
        ctx.out.value(value)
    else:
        ctx.out.line(str(value["state"]))
        for key, item in value.items():
            if key != "state":
                ctx.out.line(f"{key}: {dumps(item)}")
    return EXIT_OK


async def _listen(ctx: Context) -> int:
    readable: bool = ctx.args.readable
    if readable and ctx.out.json:
        raise UsageError("listen takes --text or --json, not both")
    limit: int | None = ctx.args.max
    seconds: float | None = ctx.args.listen_timeout
    loop = asyncio.get_running_loop()
    stop_at = None if seconds is None else loop.time() + seconds
    async with await ctx.endpoint() as endpoint:
        deliveries = endpoint.messages(takeover=ctx.args.takeover)
        received = 0
        try:
            while limit is None or received < limit:
                remaining = None if stop_at is None else stop_at - loop.time()
                if remaining is not None and remaining <= 0:
                    break
                try:
                    delivery = await asyncio.wait_for(anext(deliveries), remaining)
                except TimeoutError:
                    break
                if readable:
                    for line in describe_delivery(delivery):
                        ctx.out.line(line)
                else:
                    ctx.out.value(delivery.to_json())
                if ctx.args.ack:
                    await delivery.acknowledge()
                received += 1
        finally:
            await deliveries.aclose()
    return EXIT_OK


async def _ack(ctx: Context) -> int:
    tokens: list[str] = list(ctx.args.tokens)
    if tokens == ["-"]:
        tokens = sys.stdin.read().split()
    if not tokens or "-" in tokens:
        raise UsageError("ack takes delivery tokens, or - alone to read them from stdin")
    async with await ctx.endpoint() as endpoint:
        results = await endpoint.acknowledge(tokens, deadline=ctx.deadline(ACKNOWLEDGE_TIMEOUT))
    failed = any(result is not None for result in results)
    if ctx.out.json:
        ctx.out.value(
            {
                "results": [
                    {"token": token, "ok": True}
                    if result is None
                    else {"token": token, "ok": False, "error": result.to_json()}
                    for token, result in zip(tokens, results, strict=True)
                ]
            }
        )
    else:
        for token, result in zip(tokens, results, strict=True):
            ctx.out.line(f"{token}\t{'ok' if result is None else result.reason}")
    return EXIT_FAILURE if failed else EXIT_OK


# --- parser ----------------------------------------------------------------------------

Command = Callable[[Context], Awaitable[int]]


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def _add_send_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--idempotency-key", help="send under this key (retried under it)")
    parser.add_argument(
        "--failure-delivery",
        choices=[value.value for value in FailureDelivery],
        default=FailureDelivery.RESULT.value,
        help="where a refused gather or answer is reported (default %(default)s)",
    )


def _add_output_flags(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: a subcommand's flags must not reset what the global flags set.
    parser.add_argument(
        "--json",
        action="store_const",
        const="json",
        dest="output",
        default=argparse.SUPPRESS,
        help="print JSON (same as -o json)",
    )
    parser.add_argument(
        "-o", "--output", choices=("text", "json"), default=argparse.SUPPRESS, help="output form"
    )


class _Subcommands:
    """Adds subcommands that also take `--json` / `-o` after the command name."""

    def __init__(self, actions: Any, common: argparse.ArgumentParser) -> None:
        self._actions = actions
        self._common = common

    def add_parser(self, name: str, *, help: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = self._actions.add_parser(
            name, help=help, parents=[self._common]
        )
        return parser


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    """The `harness` argument parser; `HARNESS_URL` sets the default `--url`."""
    parser = argparse.ArgumentParser(
        prog="harness", description="Operate a Harness Gateway and talk to it as an agent."
    )
    parser.add_argument(
        "--url",
        default=env.get("HARNESS_URL") or DEFAULT_URL,
        help="gateway address, HOST:PORT or grpc://HOST:PORT (HARNESS_URL; %(default)s)",
    )
    parser.add_argument("--token", help="the agent's API token (HARNESS_TOKEN)")
    parser.add_argument("--token-file", help="file holding the agent's token (HARNESS_TOKEN_FILE)")
    parser.add_argument("--admin-token", help="the operator token (HARNESS_ADMIN_TOKEN)")
    parser.add_argument(
        "--admin-token-file",
        help="file holding the operator token (HARNESS_ADMIN_TOKEN_FILE; default: the "
        "embedded daemon's data directory)",
    )
    parser.add_argument(
        "--timeout", type=_positive_float, help="seconds to connect, and for each call"
    )
    parser.add_argument("--tls-ca", help="PEM roots to trust: connect with TLS")
    _add_output_flags(parser)
    parser.set_defaults(output="text")
    common = argparse.ArgumentParser(add_help=False)
    _add_output_flags(common)
    commands = _Subcommands(
        parser.add_subparsers(dest="command", required=True, metavar="COMMAND"), common
    )

    status = commands.add_parser("status", help="version, mode, hosted agents, Router state")
    status.set_defaults(run=_status)

    agents = commands.add_parser("agents", help="register, list, show and manage agents")
    agent_commands = _Subcommands(
        agents.add_subparsers(dest="agents_command", required=True, metavar="ACTION"), common
    )
    register = agent_commands.add_parser("register", help="register and host an agent")
    register.add_argument("name")
    register.set_defaults(run=_agents_register)
    listing = agent_commands.add_parser("list", help="list agents in name order")
    listing.add_argument("--prefix")
    listing.set_defaults(run=_agents_list)
    show = agent_commands.add_parser("show", help="an agent's card, hosting, stream, backlog")
    show.add_argument("name")
    show.set_defaults(run=_agents_show)
    rotate = agent_commands.add_parser("rotate-token", help="issue a new token, revoke the old")
    rotate.add_argument("name")
    rotate.set_defaults(run=_agents_rotate)
    revoke = agent_commands.add_parser("revoke-token", help="revoke every token of an agent")
    revoke.add_argument("name")
    revoke.set_defaults(run=_agents_revoke)

    conversations = commands.add_parser("conversations", help="a hosted agent's conversations")
    conversations.add_argument("--agent", required=True)
    conversations.add_argument("--after", help="start after this address")
    conversations.set_defaults(run=_conversations)

    history = commands.add_parser("history", help="a conversation's certified records")
    history.add_argument("--agent", required=True)
    history.add_argument("address")
    history.add_argument("--after", help="start after this record hash")
    history.set_defaults(run=_history)

    send = commands.add_parser("send", help="send TEXT, read as message text")
    send.add_argument("to")
    send.add_argument("text")
    _add_send_flags(send)
    send.set_defaults(run=_send)

    for name in ("gather", "all-gather"):
        ask = commands.add_parser(name, help=f"ask QUESTION as a {name.replace('-', '_')}")
        ask.add_argument("to")
        ask.add_argument("question")
        ask.add_argument(
            "--deadline", type=_positive_int, default=300, help="seconds (default %(default)s)"
        )
        ask.add_argument("--schema", required=True, help="a JSON file holding the form")
        _add_send_flags(ask)
        ask.set_defaults(run=_ask)

    answer = commands.add_parser("answer", help="answer the question open in TO")
    answer.add_argument("to")
    choice = answer.add_mutually_exclusive_group(required=True)
    choice.add_argument("--accept", metavar="JSON", help="the form fields, as a JSON object")
    choice.add_argument("--decline", action="store_true")
    _add_send_flags(answer)
    answer.set_defaults(run=_answer)

    parse = commands.add_parser("parse", help="print the send a message text states")
    parse.add_argument("to")
    parse.add_argument("text")
    parse.set_defaults(run=_parse)

    send_state = commands.add_parser("send-state", help="the state of an idempotency key")
    send_state.add_argument("key")
    send_state.set_defaults(run=_send_state)

    listen = commands.add_parser("listen", help="print deliveries as JSON lines (or --text)")
    listen.add_argument(
        "--text",
        dest="readable",
        action="store_true",
        help="print each delivery as readable lines, with its guidance, not JSON",
    )
    listen.add_argument("--ack", action="store_true", help="acknowledge each delivery")
    listen.add_argument("--takeover", action="store_true", help="take over an open stream")
    listen.add_argument("--max", type=_positive_int, help="stop after N deliveries")
    listen.add_argument(
        "--timeout",
        dest="listen_timeout",
        type=_positive_float,
        help="stop after SECONDS in all",
    )
    listen.set_defaults(run=_listen)

    ack = commands.add_parser("ack", help=f"acknowledge tokens ({ACKNOWLEDGE_MAX_TOKENS:,} a call)")
    ack.add_argument("tokens", nargs="+", metavar="TOKEN", help="tokens, or - to read stdin")
    ack.set_defaults(run=_ack)
    return parser


async def _run(command: Command, ctx: Context) -> int:
    try:
        return await command(ctx)
    except _CONNECTION_ERRORS as error:
        ctx.out.failure(error)
        return EXIT_CONNECTION
    except HarnessClientError as error:
        ctx.out.failure(error)
        return EXIT_FAILURE


def main(argv: Sequence[str] | None = None) -> int:
    """Run `harness` with `argv` (default: the process's) and return the exit code."""
    env = dict(os.environ)
    parser = build_parser(env)
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except SystemExit as exit:
        return exit.code if isinstance(exit.code, int) else EXIT_USAGE
    out = Output(json=args.output == "json", stdout=sys.stdout, stderr=sys.stderr)
    ctx = Context(args=args, env=env, out=out)
    try:
        return asyncio.run(_run(args.run, ctx))
    except UsageError as error:
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"harness: error: {error}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""`harness`'s commands: one coroutine each, from a `Context` to an exit code.

A command reads its arguments from the `Context`, reaches the gateway through it (the
agent's endpoint or the operator's client), and prints its result in the form asked for;
`run` runs the one the arguments name and prints a typed failure as its `Failure`. The
parser (`parser.py`) names each command here as the `run` of its subcommand.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import grpc
from harness_contract.addresses import agent_address

from harness_client import (
    Accept,
    AnswerValue,
    AskOperation,
    CollectiveOp,
    Decline,
    Endpoint,
    FailureDelivery,
    HarnessError,
    JsonValue,
    ManagementClient,
    MessageInput,
    ResponseInput,
    SendInput,
    connect,
    connect_management,
    to_json,
)
from harness_client._channel import parse_target
from harness_client._cli.env import (
    CONNECT_TIMEOUT_VARIABLE,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_URL,
    admin_token,
    agent_token,
    env_seconds,
    gateway_url,
    read_text_file,
)
from harness_client._cli.failures import (
    EXIT_FAILURE,
    EXIT_OK,
    Scene,
    UsageError,
    describe_failure,
)
from harness_client._cli.output import Output
from harness_client._cli.reach import reach
from harness_client._cli.text import (
    describe_agent,
    describe_delivery,
    describe_guidance,
    describe_record,
    describe_send_input,
    describe_send_result,
    describe_send_state,
    describe_status,
)
from harness_client._endpoint import ACKNOWLEDGE_TIMEOUT, READ_TIMEOUT, SEND_TIMEOUT
from harness_client._management import MANAGEMENT_TIMEOUT


@dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """What every command needs: its arguments, the environment, stdin and the output."""

    args: argparse.Namespace
    env: Mapping[str, str]
    out: Output
    stdin: TextIO

    @property
    def url(self) -> str:
        """The gateway's URL, checked."""
        return gateway_url(self.args, self.env)

    @property
    def scene(self) -> Scene:
        """The command, its token's role and the address, for describing failures."""
        try:
            address = parse_target(self.url)[0]
        except UsageError:
            address = str(self.args.url or self.env.get("HARNESS_URL") or DEFAULT_URL)
        return Scene(command=self.args.display, role=self.args.role, address=address)

    @property
    def connect_timeout(self) -> float:
        """`--connect-timeout`, `HARNESS_CONNECT_TIMEOUT`, `--timeout`, else the default."""
        flag: float | None = self.args.connect_timeout
        if flag is not None:
            return flag
        variable = env_seconds(self.env, CONNECT_TIMEOUT_VARIABLE)
        if variable is not None:
            return variable
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
        """The agent's endpoint (`--token`), once the gateway is reached."""
        token = agent_token(self.args, self.env)
        url, credentials, bound = self.url, self.credentials(), self.connect_timeout
        await reach(url, credentials, bound)
        return await connect(url, token=token, connect_timeout=bound, credentials=credentials)

    async def management(self) -> ManagementClient:
        """The operator client (`--admin-token`), once the gateway is reached."""
        token = admin_token(self.args, self.env)
        url, credentials, bound = self.url, self.credentials(), self.connect_timeout
        await reach(url, credentials, bound)
        return await connect_management(
            url,
            admin_token=token,
            connect_timeout=bound,
            call_timeout=self.deadline(MANAGEMENT_TIMEOUT),
            credentials=credentials,
        )

    def text(self, value: str | None, path: str | None, *, what: str, flag: str) -> str:
        """A text given as an argument, as `-` (stdin) or with `flag PATH` (a file)."""
        if value is not None and path is not None:
            raise UsageError(f"give the {what} as an argument or with {flag}, not both")
        if path is not None:
            return _without_final_newline(read_text_file(path, f"{what} file"))
        if value is None:
            raise UsageError(f"no {what}: give it as an argument, - to read stdin, or {flag} PATH")
        if value != "-":
            return value
        try:
            return _without_final_newline(self.stdin.read())
        except UnicodeDecodeError:
            raise UsageError(f"the {what} on stdin is not UTF-8 text") from None


def _without_final_newline(text: str) -> str:
    # `echo hi | harness send agent:bob -` sends "hi", as the same text on the line would.
    return text.removesuffix("\n").removesuffix("\r")


async def status(ctx: Context) -> int:
    async with await ctx.management() as client:
        status = await client.status()
    if ctx.out.json:
        ctx.out.value(to_json(status))
    else:
        for line in describe_status(status):
            ctx.out.line(line)
    return EXIT_OK


async def agents_register(ctx: Context) -> int:
    async with await ctx.management() as client:
        registered = await client.register_agent(ctx.args.name)
    if ctx.out.json:
        ctx.out.value(to_json(registered))
    else:
        # The token alone on stdout, so `TOKEN=$(harness agents register NAME)` keeps it.
        ctx.out.line(registered.token)
        ctx.out.note(f"registered {registered.address}; its token is shown only this once")
    return EXIT_OK


async def agents_list(ctx: Context) -> int:
    async with await ctx.management() as client:
        agents = [agent async for agent in client.all_agents(prefix=ctx.args.prefix)]
    if ctx.out.json:
        ctx.out.value({"agents": [to_json(agent) for agent in agents]})
        return EXIT_OK
    for agent in agents:
        ctx.out.line(
            f"{agent.name}\t{'hosted' if agent.hosted else 'remote'}\t"
            f"{'listening' if agent.stream_attached else 'detached'}\tbacklog={agent.backlog}"
        )
    return EXIT_OK


async def agents_show(ctx: Context) -> int:
    async with await ctx.management() as client:
        agent = await client.agent_status(ctx.args.name)
    if ctx.out.json:
        ctx.out.value(to_json(agent))
    else:
        for line in describe_agent(agent):
            ctx.out.line(line)
    return EXIT_OK


async def agents_rotate(ctx: Context) -> int:
    async with await ctx.management() as client:
        token = await client.rotate_token(ctx.args.name)
    if ctx.out.json:
        ctx.out.value({"address": agent_address(ctx.args.name), "token": token})
    else:
        ctx.out.line(token)
        ctx.out.note(
            f"{agent_address(ctx.args.name)}'s other tokens are revoked; this one is shown once"
        )
    return EXIT_OK


async def agents_revoke(ctx: Context) -> int:
    async with await ctx.management() as client:
        await client.revoke_token(ctx.args.name)
    if ctx.out.json:
        ctx.out.value({"address": agent_address(ctx.args.name), "revoked": True})
    else:
        ctx.out.line(f"revoked every token of {agent_address(ctx.args.name)}")
    return EXIT_OK


async def conversations(ctx: Context) -> int:
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
        ctx.out.value({"conversations": [to_json(summary) for summary in summaries]})
        return EXIT_OK
    for summary in summaries:
        ctx.out.line(
            f"{summary.address}\t{summary.kind}\tdepth={summary.depth}\t"
            f"head={summary.head_record_hash or '-'}"
        )
    return EXIT_OK


async def history(ctx: Context) -> int:
    async with await ctx.management() as client:
        records, more = await client.history(
            ctx.args.agent, ctx.args.address, after_record_hash=ctx.args.after
        )
    if ctx.out.json:
        ctx.out.value({"records": [to_json(record) for record in records], "hasMore": more})
        return EXIT_OK
    for record in records:
        ctx.out.line(describe_record(record))
    if more:
        ctx.out.line(f"more: --after {records[-1].record_hash}")
    return EXIT_OK


async def _send_input(ctx: Context, endpoint: Endpoint, send_input: SendInput) -> int:
    result = await endpoint.send(
        send_input,
        idempotency_key=ctx.args.idempotency_key,
        failure_delivery=FailureDelivery(ctx.args.failure_delivery),
        deadline=ctx.deadline(SEND_TIMEOUT),
    )
    if ctx.out.json:
        ctx.out.value(to_json(result))
        return EXIT_OK
    for line in describe_send_result(send_input, result):
        ctx.out.line(line)
    if result.guidance is not None:
        for line in describe_guidance(result.guidance):
            ctx.out.line(line)
    return EXIT_OK


async def send(ctx: Context) -> int:
    text = ctx.text(ctx.args.text, ctx.args.text_file, what="text", flag="--text-file")
    async with await ctx.endpoint() as endpoint:
        send_input = await endpoint.parse_message_text(
            ctx.args.to, text, deadline=ctx.deadline(READ_TIMEOUT)
        )
        return await _send_input(ctx, endpoint, send_input)


def _load_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise UsageError(f"{what} is not JSON: {error}") from None


def read_schema(value: str) -> dict[str, JsonValue]:
    """`--schema`: inline JSON when it starts with `{`, else the path of a JSON file."""
    if value.lstrip().startswith("{"):
        schema = _load_json(value, "--schema")
        what = "--schema"
    else:
        text = read_text_file(value, "schema file (inline JSON starts with {)")
        schema = _load_json(text, f"the schema file {value}")
        what = f"the schema file {value}"
    if not isinstance(schema, dict):
        raise UsageError(f"{what} is not a JSON object")
    return schema


async def ask(ctx: Context) -> int:
    op = CollectiveOp.GATHER if ctx.args.display == "gather" else CollectiveOp.ALL_GATHER
    question = ctx.text(
        ctx.args.question, ctx.args.question_file, what="question", flag="--question-file"
    )
    send_input = MessageInput(
        to=ctx.args.to,
        text=question,
        collective=AskOperation(
            op=op, deadline=ctx.args.deadline, requested_schema=read_schema(ctx.args.schema)
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


async def answer(ctx: Context) -> int:
    response = Decline() if ctx.args.decline else Accept(content=_answer_content(ctx.args.accept))
    async with await ctx.endpoint() as endpoint:
        return await _send_input(ctx, endpoint, ResponseInput(to=ctx.args.to, response=response))


async def parse(ctx: Context) -> int:
    text = ctx.text(ctx.args.text, ctx.args.text_file, what="text", flag="--text-file")
    async with await ctx.endpoint() as endpoint:
        send_input = await endpoint.parse_message_text(
            ctx.args.to, text, deadline=ctx.deadline(READ_TIMEOUT)
        )
    if ctx.out.json:
        ctx.out.value(to_json(send_input))
    else:
        for line in describe_send_input(send_input):
            ctx.out.line(line)
    return EXIT_OK


async def send_state(ctx: Context) -> int:
    async with await ctx.endpoint() as endpoint:
        state = await endpoint.read_send(ctx.args.key, deadline=ctx.deadline(READ_TIMEOUT))
    if ctx.out.json:
        ctx.out.value(to_json(state))
    else:
        for line in describe_send_state(state):
            ctx.out.line(line)
    return EXIT_OK


async def listen(ctx: Context) -> int:
    limit: int | None = ctx.args.max
    seconds_in_all: float | None = ctx.args.listen_timeout
    loop = asyncio.get_running_loop()
    stop_at = None if seconds_in_all is None else loop.time() + seconds_in_all
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
                if ctx.out.json:
                    ctx.out.value(to_json(delivery))
                else:
                    for line in describe_delivery(delivery):
                        ctx.out.line(line)
                if ctx.args.ack:
                    await delivery.acknowledge()
                received += 1
        finally:
            await deliveries.aclose()
    return EXIT_OK


async def ack(ctx: Context) -> int:
    tokens: list[str] = list(ctx.args.tokens)
    if tokens == ["-"]:
        tokens = ctx.stdin.read().split()
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
                    else {"token": token, "ok": False, "error": to_json(result)}
                    for token, result in zip(tokens, results, strict=True)
                ]
            }
        )
    else:
        for token, result in zip(tokens, results, strict=True):
            ctx.out.line(f"{token}\t{'ok' if result is None else result.reason}")
    return EXIT_FAILURE if failed else EXIT_OK


Command = Callable[[Context], Awaitable[int]]
"""A command: its `Context` in, its exit code out (a subcommand's `run`)."""


async def run(ctx: Context) -> int:
    """Run the command the arguments name; print a typed failure and return its exit code."""
    command: Command = ctx.args.run
    try:
        return await command(ctx)
    except HarnessError as error:
        failure = describe_failure(error, ctx.scene)
    ctx.out.failure(failure)
    return failure.exit_code

"""`harness`: the operator's and agent developer's command line (operations.md §8).

Built on the client library. A result goes to stdout in one of two forms: readable text, or
JSON (`-o json` or `--json`: one compact object per result, one line per delivery for
`listen`; keys are the contract's camelCase names). The operator commands (`status`,
`agents`, `conversations`, `history`), `send-state` and `ack` print text unless `-o json`
asks; the agent commands whose result is a contract value (`send`, `gather`, `all-gather`,
`answer`, `parse`, `listen`) print JSON unless `-o text` asks for the readable form.

A failure goes to stderr and leads with what went wrong (`cannot reach 127.0.0.1:7770:
connection refused`, `authentication failed: the gateway does not know this agent token`),
then `reason=<reason>`, the kebab-case reason of the contract's closed vocabulary (never a
gRPC code name); with `-o json` or `--json` given, one `{"error": {"type", "reason", ...}}`
object carrying every field of the typed error instead. No traceback reaches the user: a
defect prints one line, and `--debug` (or `HARNESS_DEBUG=1`) adds the traceback.

Exit codes: 0 success; 1 a contract failure, or a refused management call; 2 usage (a bad
flag, file or environment value, a missing token); 3 the gateway unreachable, or the token
refused; 70 an unexpected error; 130 interrupted; 141 stdout closed before the output ended
(`harness agents list | head -1`).

Texts need not fit on a command line: `-` in place of a text reads it from stdin and
`--text-file PATH` (`--question-file` for a question) from a file; one final newline is
dropped. `--schema` takes inline JSON (a value starting with `{`) or the path of a JSON file.

A send the local firewall admitted prints, after its readable result, one
`guidance <checkId>: ...` line per instruction (its JSON result carries `guidance` itself).
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import json
import math
import os
import re
import sys
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TextIO, assert_never

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from harness_client import (
    Accept,
    AgentStatus,
    Answered,
    AnswerValue,
    AskOperation,
    AuthenticationError,
    AuthenticationErrorReason,
    CheckedGuidance,
    CollectiveGuidance,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResultItem,
    ConnectError,
    ConnectErrorReason,
    Content,
    ConversationRecord,
    DataPart,
    Decline,
    Declined,
    DirectMessage,
    Endpoint,
    EndpointClosedError,
    ExpectationInstruction,
    FailureDelivery,
    GroupMessage,
    HarnessError,
    InboundDelivery,
    InboundItem,
    InboundMessage,
    Instruction,
    Invalid,
    JsonValue,
    ListenError,
    ListenErrorReason,
    LocalGuidance,
    ManagementClient,
    MemberOutcome,
    MessageInput,
    MulticastItem,
    NoAnswer,
    OperationFailedItem,
    PermissionDeniedError,
    ResponseInput,
    SendAbsent,
    SendIndeterminate,
    SendInput,
    SendPending,
    SendResult,
    SendReturned,
    SendState,
    TextPart,
    TransportError,
    UnavailableError,
    UncertainInstruction,
    Withheld,
    connect,
    connect_management,
    to_json,
)
from harness_client._channel import open_channel, parse_target
from harness_client._endpoint import (
    ACKNOWLEDGE_MAX_TOKENS,
    ACKNOWLEDGE_TIMEOUT,
    READ_TIMEOUT,
    SEND_TIMEOUT,
)
from harness_client._management import MANAGEMENT_TIMEOUT

EXIT_OK: Final = 0
"""The command succeeded."""
EXIT_FAILURE: Final = 1
"""A contract failure (or a refused management call); printed with its reason."""
EXIT_USAGE: Final = 2
"""The command line, a file it names or an environment value is wrong, or a token is missing."""
EXIT_CONNECTION: Final = 3
"""The gateway could not be reached, or refused the token."""
EXIT_INTERNAL: Final = 70
"""An unexpected error, a defect (sysexits' EX_SOFTWARE): one line, the traceback on request."""
EXIT_INTERRUPTED: Final = 130
"""Interrupted (Ctrl-C): 128 + SIGINT, what a shell reports for a process SIGINT ended."""
EXIT_BROKEN_PIPE: Final = 141
"""stdout closed before the output ended (`| head -1`): 128 + SIGPIPE, as for a C tool."""

DEFAULT_URL: Final = "127.0.0.1:7770"
"""Where the embedded daemon listens (operations.md §1)."""
DEFAULT_CONNECT_TIMEOUT: Final = 5.0
"""Seconds to reach a gateway and check the token, when no flag or variable sets them.

A refused connection or an unknown host fails at once, whatever this says; the bound is for
a gateway that does not answer (a firewall dropping packets, a stopped process)."""
DIAGNOSE_TIMEOUT: Final = 1.0
"""Seconds for the one health call that reads why a connection failed (gRPC reports the
cause only on a call; it fails at once on a channel in TRANSIENT_FAILURE)."""
DEFAULT_DEADLINE: Final = 300
"""Seconds a `gather` or `all-gather` stays open when `--deadline` is not given."""
MAX_DEADLINE: Final = 30 * 24 * 3600
"""Longest collective deadline in seconds: 30 days (the contract's bound)."""
ADMIN_TOKEN_FILE_NAME: Final = "admin-token"  # noqa: S105 - a file name, not a secret
"""The file the embedded daemon writes its generated admin token to, in its data dir."""
DEBUG_VARIABLE: Final = "HARNESS_DEBUG"
"""`1` shows the traceback of an unexpected error, as `--debug` does."""
CONNECT_TIMEOUT_VARIABLE: Final = "HARNESS_CONNECT_TIMEOUT"
"""Seconds to reach the gateway, as `--connect-timeout` sets them."""

_SEND_COMMANDS: Final = frozenset({"send", "gather", "all-gather", "answer"})
"""Commands that send: a `send failed: ...` text is theirs as it stands."""
_SEND_FAILED: Final = "send failed: "
"""How the gateway's texts of send-side checks begin (an idempotency key, an address)."""
_HOST_PORT: Final = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]@]+):(\d{1,5})")
"""`HOST:PORT`, the host a name, an IPv4 address or a bracketed IPv6 address."""
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"", "0", "false", "no", "off"})


class UsageError(Exception):
    """The command cannot run as given (exit 2)."""


class OutputForm(enum.StrEnum):
    """The form of a command's result on stdout."""

    TEXT = "text"
    """Readable lines."""
    JSON = "json"
    """One compact JSON value per result (per delivery for `listen`)."""


class TokenRole(enum.StrEnum):
    """Which token a command takes, so a refusal can say which one was refused."""

    AGENT = "agent token"
    """An agent's `hat_...` token: the agent API."""
    ADMIN = "admin token"
    """The operator's token: the management API."""


# --- environment and tokens --------------------------------------------------------------


def default_data_dir(env: Mapping[str, str]) -> Path:
    """The embedded daemon's data directory: `$XDG_STATE_HOME/harness-gateway`, else
    `~/.local/state/harness-gateway` (the gateway's own default)."""
    base = env.get("XDG_STATE_HOME") or str(
        Path(env.get("HOME", "~")).expanduser() / ".local/state"
    )
    return Path(base) / "harness-gateway"


def _read_text_file(path: str, what: str) -> str:
    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read the {what} {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"the {what} {path} is not UTF-8 text") from None


def _checked_token(token: str, source: str) -> str:
    # gRPC refuses such metadata with an exception deep in its core; say it here instead.
    if not token.isascii() or not token.isprintable() or " " in token:
        raise UsageError(
            f"the token from {source} has characters no token has "
            "(spaces, control or non-ASCII characters)"
        )
    return token


def _read_token_file(path: str, what: str, source: str) -> str:
    token = _read_text_file(path, f"{what} file").strip()
    if not token:
        raise UsageError(f"the {what} file {path} is empty")
    return _checked_token(token, f"{source} {path}")


def agent_token(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """`--token`, `--token-file`, `HARNESS_TOKEN`, `HARNESS_TOKEN_FILE`, in that order."""
    if args.token:
        return _checked_token(str(args.token), "--token")
    if args.token_file:
        return _read_token_file(args.token_file, "token", "--token-file")
    if env.get("HARNESS_TOKEN"):
        return _checked_token(env["HARNESS_TOKEN"], "HARNESS_TOKEN")
    if env.get("HARNESS_TOKEN_FILE"):
        return _read_token_file(env["HARNESS_TOKEN_FILE"], "token", "HARNESS_TOKEN_FILE")
    raise UsageError(
        "no agent token: pass --token or --token-file, or set HARNESS_TOKEN "
        "(`harness agents register NAME` prints a new agent's token)"
    )


def admin_token(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """`--admin-token`, `--admin-token-file`, `HARNESS_ADMIN_TOKEN`,
    `HARNESS_ADMIN_TOKEN_FILE`, then `admin-token` in the embedded default data directory."""
    if args.admin_token:
        return _checked_token(str(args.admin_token), "--admin-token")
    if args.admin_token_file:
        return _read_token_file(args.admin_token_file, "admin token", "--admin-token-file")
    if env.get("HARNESS_ADMIN_TOKEN"):
        return _checked_token(env["HARNESS_ADMIN_TOKEN"], "HARNESS_ADMIN_TOKEN")
    if env.get("HARNESS_ADMIN_TOKEN_FILE"):
        return _read_token_file(
            env["HARNESS_ADMIN_TOKEN_FILE"], "admin token", "HARNESS_ADMIN_TOKEN_FILE"
        )
    default = default_data_dir(env) / ADMIN_TOKEN_FILE_NAME
    if default.is_file():
        return _read_token_file(str(default), "admin token", "the default")
    raise UsageError(
        "no admin token: pass --admin-token or --admin-token-file, set HARNESS_ADMIN_TOKEN, "
        f"or run the embedded daemon (which writes {default})"
    )


def _checked_url(url: str, source: str) -> str:
    target, _ = parse_target(url)
    if target.startswith(("unix:", "unix-abstract:")):
        return url
    match = _HOST_PORT.fullmatch(target)
    if match is None or not 0 < int(match[1]) < 2**16:
        raise UsageError(
            f"{source} {url!r} is not HOST:PORT, grpc://HOST:PORT or grpcs://HOST:PORT"
        )
    return url


def gateway_url(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """`--url`, else `HARNESS_URL`, else the embedded daemon's address; checked."""
    if args.url:
        return _checked_url(str(args.url), "--url")
    if env.get("HARNESS_URL"):
        return _checked_url(env["HARNESS_URL"], "HARNESS_URL")
    return DEFAULT_URL


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """A yes/no variable: `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off` (or unset)."""
    value = env.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise UsageError(f"{name}={env[name]!r}: use 1 or 0")


def env_seconds(env: Mapping[str, str], name: str) -> float | None:
    """A positive number of seconds from `name`, or None when it is unset or empty."""
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        return seconds(text)
    except argparse.ArgumentTypeError as error:
        raise UsageError(f"{name}: {error}") from None


# --- failures ----------------------------------------------------------------------------


class ReachCause(enum.StrEnum):
    """Why the gateway's address could not be reached, as the user reads it."""

    REFUSED = "connection refused"
    """Nothing listens there (or a firewall rejects the connection)."""
    UNRESOLVED = "the host name does not resolve"
    """DNS knows no such host."""
    TLS = "the TLS handshake failed (does the gateway serve TLS, and does --tls-ca trust it?)"
    """A TLS client met a plaintext port, or a certificate it does not trust."""
    TIMED_OUT = "no answer"
    """Nothing answered within the connect timeout."""
    OTHER = "the connection failed"
    """Anything else; gRPC's own text follows."""


class Unreachable(Exception):
    """The gateway's address could not be reached (exit 3, `transport-failed`)."""

    def __init__(self, address: str, cause: ReachCause, detail: str) -> None:
        super().__init__(f"cannot reach {address}: {detail}")
        self.address = address
        self.cause = cause
        self.detail = detail


@dataclass(frozen=True, slots=True, kw_only=True)
class Scene:
    """What a failure is described against: the command, its token and the address."""

    command: str
    """The command as typed: `send`, `agents show`."""
    role: TokenRole
    address: str
    """The gateway's `HOST:PORT`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """A failure as printed: a headline that says what went wrong, a closed reason, the
    exit code and the JSON error object."""

    headline: str
    reason: str
    exit_code: int
    error: dict[str, Any]
    """The `--json` form: `{type, reason, ...fields}`."""
    cause: str | None = None
    """What the failure came from, when that says more (a transport's text)."""


def reach_cause(details: str) -> tuple[ReachCause, str]:
    """The cause in gRPC's text of a failed connection (`failed to connect to all
    addresses; last error: UNKNOWN: ipv4:127.0.0.1:7770: Failed to connect to remote host:
    Connection refused`), with the words to print."""
    lowered = details.lower()
    if "connection refused" in lowered:
        cause = ReachCause.REFUSED
    elif "resolv" in lowered or "domain name not found" in lowered or "dns" in lowered:
        cause = ReachCause.UNRESOLVED
    elif any(word in lowered for word in ("handshake", "ssl", "tls", "certificate")):
        cause = ReachCause.TLS
    else:
        last = details.rsplit("last error: ", 1)[-1].strip()
        words = f"{ReachCause.OTHER.value}: {last}" if last else ReachCause.OTHER.value
        return ReachCause.OTHER, words
    return cause, cause.value


def unreachable_failure(error: Unreachable) -> Failure:
    """`cannot reach HOST:PORT: <cause>`, `transport-failed` (ConnectError's reason)."""
    reason = ConnectErrorReason.TRANSPORT_FAILED.value
    return Failure(
        headline=str(error),
        reason=reason,
        exit_code=EXIT_CONNECTION,
        error={
            "type": "ConnectError",
            "reason": reason,
            "address": error.address,
            "cause": error.detail,
        },
    )


def _authentication_headline(reason: AuthenticationErrorReason, role: TokenRole) -> str:
    match reason:
        case AuthenticationErrorReason.UNKNOWN:
            return f"the gateway does not know this {role.value}"
        case AuthenticationErrorReason.REVOKED:
            return (
                f"this {role.value} was revoked "
                "(`harness agents rotate-token NAME` issues a new one)"
            )
        case AuthenticationErrorReason.MALFORMED:
            return f"the gateway cannot read this {role.value}"
        case AuthenticationErrorReason.MISSING:
            return "the call carried no token"
        case _:
            assert_never(reason)


def _wrong_role_headline(role: TokenRole) -> str:
    match role:
        case TokenRole.AGENT:
            return "this is the admin token; agent commands take an agent's token (--token)"
        case TokenRole.ADMIN:
            return (
                "this is an agent's token; operator commands take the admin token (--admin-token)"
            )
        case _:
            assert_never(role)


def _transport_headline(error: TransportError, scene: Scene) -> str:
    match error.code:
        case grpc.StatusCode.DEADLINE_EXCEEDED:
            what = f"{scene.address} did not answer in time (--timeout sets the bound)"
        case grpc.StatusCode.UNAVAILABLE:
            what = f"lost the connection to {scene.address}"
        case grpc.StatusCode.CANCELLED:
            what = "the call was cancelled"
        case _:
            what = f"{scene.address} answered with a status this client cannot read"
    return f"{scene.command} failed: {what}"


def _connect_headline(error: ConnectError, scene: Scene) -> str:
    # A typed cause is the failed check of the token; anything else is the channel's wait.
    checked = isinstance(error.__cause__, HarnessError)
    match error.reason:
        case ConnectErrorReason.INCOMPATIBLE_DAEMON:
            return (
                f"cannot use {scene.address}: it does not serve this version of the harness.v1 API"
            )
        case ConnectErrorReason.DECODE_FAILED:
            return f"cannot use {scene.address}: its answers do not decode"
        case _ if checked:
            return f"cannot connect to {scene.address}: its first call failed"
        case _:
            return (
                f"cannot connect to {scene.address}: the gateway did not become ready in time "
                "(--connect-timeout sets the bound)"
            )


def describe_failure(error: HarnessError, scene: Scene) -> Failure:
    """The failure a typed error stands for, leading with what went wrong."""
    cause = error.__cause__
    match error:
        case ConnectError():
            # connect() checks the token with one call; a refusal there is what went wrong.
            if isinstance(cause, AuthenticationError | PermissionDeniedError | UnavailableError):
                return describe_failure(cause, scene)
            return Failure(
                headline=_connect_headline(error, scene),
                reason=error.reason,
                exit_code=EXIT_CONNECTION,
                error=_with_cause(to_json(error), cause),
                cause=_cause_text(cause),
            )
        case AuthenticationError():
            headline = _authentication_headline(error.reason, scene.role)
            return Failure(
                headline=f"authentication failed: {headline}",
                reason=error.reason.value,
                exit_code=EXIT_CONNECTION,
                error=to_json(error),
            )
        case PermissionDeniedError():
            return Failure(
                headline=f"permission denied: {_wrong_role_headline(scene.role)}",
                reason=error.reason,
                exit_code=EXIT_CONNECTION,
                error=to_json(error),
            )
        case UnavailableError():
            return Failure(
                headline=f"the gateway at {scene.address} took no action: {error.message}",
                reason=error.reason,
                exit_code=EXIT_CONNECTION,
                error=to_json(error),
            )
        case TransportError():
            return Failure(
                headline=_transport_headline(error, scene),
                reason=ConnectErrorReason.TRANSPORT_FAILED.value,
                exit_code=EXIT_CONNECTION,
                error=_error_json(error),
                cause=error.message or None,
            )
        case EndpointClosedError():
            return Failure(
                headline=f"{scene.command} failed: {error.message}",
                reason=error.reason,
                exit_code=EXIT_CONNECTION,
                error=to_json(error),
            )
        case ListenError() if error.reason is ListenErrorReason.ALREADY_LISTENING:
            return Failure(
                headline="listen failed: another stream of this agent is open "
                "(--takeover ends it and takes its place)",
                reason=error.reason,
                exit_code=EXIT_FAILURE,
                error=to_json(error),
            )
        case _:
            return Failure(
                headline=_retitled(error.message, scene.command),
                reason=str(error.reason),
                exit_code=EXIT_FAILURE,
                error=_with_cause(to_json(error), cause),
                cause=_cause_text(cause),
            )


def _retitled(message: str, command: str) -> str:
    """`send failed: ...` as `<command> failed: ...` for a command that does not send (the
    gateway words its address and idempotency-key checks for a send)."""
    if command in _SEND_COMMANDS or not message.startswith(_SEND_FAILED):
        return message
    return f"{command} failed: {message.removeprefix(_SEND_FAILED)}"


def _cause_text(cause: BaseException | None) -> str | None:
    if isinstance(cause, HarnessError) and cause.message:
        return cause.message
    return None


def _error_json(error: HarnessError) -> dict[str, Any]:
    """`{type, reason, ...}`; a transport's reason is a gRPC code, so it is given as the
    contract's word for it, `transport-failed`."""
    if isinstance(error, TransportError):
        reason = ConnectErrorReason.TRANSPORT_FAILED.value
        return {"type": "TransportError", "reason": reason, "message": error.message}
    return to_json(error)


def _with_cause(value: dict[str, Any], cause: BaseException | None) -> dict[str, Any]:
    if isinstance(cause, HarnessError):
        return {**value, "cause": _error_json(cause)}
    return value


# --- output ------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """JSON-ready values with integral floats written as integers (`5`, not `5.0`)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    """One compact JSON line, non-ASCII kept; `sort_keys` for a schema, whose key order
    does not survive the wire (a protobuf `Struct` is a map)."""
    return json.dumps(
        _plain(value), ensure_ascii=False, separators=(", ", ": "), sort_keys=sort_keys
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Output:
    """Where results and failures go, and in which form."""

    form: OutputForm
    """The result's form."""
    json_errors: bool
    """Failures as one JSON object (only when JSON was asked for by name)."""
    stdout: TextIO
    stderr: TextIO

    @property
    def json(self) -> bool:
        """Results are JSON."""
        return self.form is OutputForm.JSON

    def line(self, text: str) -> None:
        """One line of output, flushed (so `listen` works through a pipe)."""
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def value(self, value: Any) -> None:
        """A JSON value on one line."""
        self.line(dumps(value))

    def note(self, text: str) -> None:
        """A line for the person at the terminal, on stderr (never part of the result)."""
        self.stderr.write(text + "\n")
        self.stderr.flush()

    def failure(self, failure: Failure) -> None:
        """The headline, `cause: ...` and `reason=<reason>`, or `{"error": {...}}`."""
        if self.json_errors:
            self.stderr.write(dumps({"error": failure.error}) + "\n")
        else:
            self.stderr.write(failure.headline + "\n")
            if failure.cause is not None:
                self.stderr.write(f"cause: {failure.cause}\n")
            self.stderr.write(f"reason={failure.reason}\n")
        self.stderr.flush()


# --- text forms --------------------------------------------------------------------------
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
            return f"answered {dumps(content)}"
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
                parts.append(dumps(value))
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
    """An inbound item as a heading line and its further lines: a request's form and how
    to answer it, a collective result's outcome per member."""
    match item:
        case MulticastItem(message=message):
            return [_describe_message(message)]
        case CollectiveRequestItem():
            return [
                f"{item.op.value} {item.id} from {item.sender} in {item.to}, answer by "
                f"{_instant(item.deadline_at)}: {dumps(item.question)}",
                f"form: {dumps(item.requested_schema, sort_keys=True)}",
                f"answer with: harness answer {item.to} --accept JSON, or --decline",
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


def describe_send_input(send_input: SendInput) -> list[str]:
    """What a send states: its kind, where it goes, its text; a question's form."""
    match send_input:
        case MessageInput(to=to, text=text, collective=AskOperation() as ask):
            return [
                f"{ask.op.value} to {to}, open for {ask.deadline}s: {dumps(text)}",
                f"  form: {dumps(ask.requested_schema, sort_keys=True)}",
            ]
        case MessageInput(to=to, text=text):
            return [f"message to {to}: {dumps(text)}"]
        case ResponseInput(to=to, response=response):
            match response:
                case Accept(content=content):
                    return [f"answer in {to}: accept {dumps(content)}"]
                case Decline():
                    return [f"answer in {to}: decline"]
                case _:
                    assert_never(response)
        case _:
            assert_never(send_input)


def describe_send_result(send_input: SendInput, result: SendResult) -> list[str]:
    """What a completed send did, and where a collective's result will arrive."""
    operation = result.operation_id or "-"
    match send_input:
        case MessageInput(to=to, collective=AskOperation(op=op)):
            heading = (
                f"{op.value} {operation} asked in {to}; its result arrives later on "
                "`harness listen` as a collectiveResult item"
            )
        case MessageInput(to=to):
            heading = f"sent to {to}"
        case ResponseInput(to=to, response=Accept()):
            heading = f"answered {operation} in {to}"
        case ResponseInput(to=to):
            heading = f"declined {operation} in {to}"
        case _:
            assert_never(send_input)
    return [heading, *(f"post {post_id}" for post_id in result.post_ids)]


def describe_send_state(state: SendState) -> list[str]:
    """`absent`, or the state, then the input and (returned) the outcome, indented."""
    match state:
        case SendAbsent():
            return ["absent"]
        case SendPending(input=send_input) | SendIndeterminate(input=send_input):
            heading = "pending" if isinstance(state, SendPending) else "indeterminate"
            return [heading, *(f"  {line}" for line in describe_send_input(send_input))]
        case SendReturned(input=send_input, outcome=outcome):
            lines = ["returned", *(f"  {line}" for line in describe_send_input(send_input))]
            if isinstance(outcome, SendResult):
                lines.append(f"  outcome: success {dumps(to_json(outcome))}")
            else:
                lines.append(f"  outcome: {outcome.message} (reason={outcome.reason})")
            return lines
        case _:
            assert_never(state)


def describe_agent(agent: AgentStatus) -> list[str]:
    """An agent's card, hosting, stream and backlog as `key: value` lines."""
    lines = [
        f"name: {agent.name}",
        f"address: {agent.address}",
        f"agent id: {agent.agent_id}",
        f"public key: {agent.public_key}",
        f"issued at: {agent.issued_at}",
        f"hosted: {'yes' if agent.hosted else 'no'}",
        f"stream: {'listening' if agent.stream_attached else 'detached'}",
        f"backlog: {agent.backlog}",
    ]
    if agent.backlog:
        lines.append(f"oldest unacknowledged: {round(agent.oldest_unacked_age_seconds)}s ago")
    if not agent.set_aside:
        lines.append("set aside: none")
    lines.extend(f"set aside: {item.conversation_id} ({item.reason})" for item in agent.set_aside)
    return lines


def describe_record(record: ConversationRecord) -> str:
    """`<recordHash> depth N, <postId> from <author>: <content>`."""
    return (
        f"{record.record_hash} depth {record.depth}, {record.post_id} from {record.author}: "
        f"{_quoted(record.content)}"
    )


# --- reaching the gateway ----------------------------------------------------------------


async def reach(url: str, credentials: grpc.ChannelCredentials | None, bound: float) -> None:
    """Connect to `url` once, or raise `Unreachable` naming the address and the cause.

    `connect` waits out its whole timeout on a refused connection, since a daemon may still
    be starting; a command should say at once that nothing listens. A channel reports a
    failure only as TRANSIENT_FAILURE, so one health call reads gRPC's text of the cause."""
    address = parse_target(url)[0]
    channel = open_channel(url, credentials=credentials)
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + bound
    try:
        state = channel.get_state(try_to_connect=True)
        while state is not grpc.ChannelConnectivity.READY:
            if state is grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                details = await _failure_details(channel)
                if details is not None:
                    cause, words = reach_cause(details)
                    raise Unreachable(address, cause, words)
            remaining = give_up_at - loop.time()
            try:
                await asyncio.wait_for(channel.wait_for_state_change(state), remaining)
            except TimeoutError:
                raise Unreachable(
                    address, ReachCause.TIMED_OUT, f"no answer within {bound:g}s"
                ) from None
            state = channel.get_state(try_to_connect=True)
    finally:
        await channel.close()


async def _failure_details(channel: grpc.aio.Channel) -> str | None:
    """gRPC's text of why `channel` cannot connect, or None when it connected meanwhile."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=DIAGNOSE_TIMEOUT)
    except grpc.aio.AioRpcError as error:
        if error.code() is grpc.StatusCode.UNAVAILABLE:
            return str(error.details() or "")
    return None


# --- commands ----------------------------------------------------------------------------


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
            return _without_final_newline(_read_text_file(path, f"{what} file"))
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


async def _status(ctx: Context) -> int:
    async with await ctx.management() as client:
        status = await client.status()
    if ctx.out.json:
        ctx.out.value(to_json(status))
    else:
        ctx.out.line(f"version: {status.version}")
        ctx.out.line(f"mode: {status.mode}")
        ctx.out.line(f"hosted agents: {status.hosted_agents}")
        ctx.out.line(f"router: {status.router_state}")
    return EXIT_OK


async def _agents_register(ctx: Context) -> int:
    async with await ctx.management() as client:
        registered = await client.register_agent(ctx.args.name)
    if ctx.out.json:
        ctx.out.value(to_json(registered))
    else:
        # The token alone on stdout, so `TOKEN=$(harness agents register NAME)` keeps it.
        ctx.out.line(registered.token)
        ctx.out.note(f"registered {registered.address}; its token is shown only this once")
    return EXIT_OK


async def _agents_list(ctx: Context) -> int:
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


async def _agents_show(ctx: Context) -> int:
    async with await ctx.management() as client:
        agent = await client.agent_status(ctx.args.name)
    if ctx.out.json:
        ctx.out.value(to_json(agent))
    else:
        for line in describe_agent(agent):
            ctx.out.line(line)
    return EXIT_OK


async def _agents_rotate(ctx: Context) -> int:
    async with await ctx.management() as client:
        token = await client.rotate_token(ctx.args.name)
    if ctx.out.json:
        ctx.out.value({"address": f"agent:{ctx.args.name}", "token": token})
    else:
        ctx.out.line(token)
        ctx.out.note(f"agent:{ctx.args.name}'s other tokens are revoked; this one is shown once")
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
        ctx.out.value({"conversations": [to_json(summary) for summary in summaries]})
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


async def _send(ctx: Context) -> int:
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
        text = _read_text_file(value, "schema file (inline JSON starts with {)")
        schema = _load_json(text, f"the schema file {value}")
        what = f"the schema file {value}"
    if not isinstance(schema, dict):
        raise UsageError(f"{what} is not a JSON object")
    return schema


async def _ask(ctx: Context) -> int:
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


async def _answer(ctx: Context) -> int:
    response = Decline() if ctx.args.decline else Accept(content=_answer_content(ctx.args.accept))
    async with await ctx.endpoint() as endpoint:
        return await _send_input(ctx, endpoint, ResponseInput(to=ctx.args.to, response=response))


async def _parse(ctx: Context) -> int:
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


async def _send_state(ctx: Context) -> int:
    async with await ctx.endpoint() as endpoint:
        state = await endpoint.read_send(ctx.args.key, deadline=ctx.deadline(READ_TIMEOUT))
    if ctx.out.json:
        ctx.out.value(to_json(state))
    else:
        for line in describe_send_state(state):
            ctx.out.line(line)
    return EXIT_OK


async def _listen(ctx: Context) -> int:
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


async def _ack(ctx: Context) -> int:
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


# --- parser ------------------------------------------------------------------------------

Command = Callable[[Context], Awaitable[int]]


def seconds(text: str) -> float:
    """A positive, finite number of seconds (`--timeout 2.5`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


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
        run: Command | None = None,
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
    commands = _Subcommands(
        parser.add_subparsers(dest="command", required=True, metavar="COMMAND"), common
    )

    commands.add_parser("status", help="version, mode, hosted agents, Router state", run=_status)

    agents = commands.add_parser("agents", help="register, list, show and manage agents")
    agent_commands = _Subcommands(
        agents.add_subparsers(dest="agents_command", required=True, metavar="ACTION"),
        common,
        prefix="agents ",
    )
    register = agent_commands.add_parser(
        "register",
        help="register and host an agent; prints its token, this once",
        run=_agents_register,
    )
    register.add_argument(
        "name", metavar="NAME", help="the new agent's name: 3 to 32 of a-z, 0-9 and -"
    )
    listing = agent_commands.add_parser("list", help="list agents in name order", run=_agents_list)
    listing.add_argument("--prefix", help="only agents whose name starts with PREFIX")
    show = agent_commands.add_parser(
        "show", help="an agent's card, hosting, stream, backlog", run=_agents_show
    )
    show.add_argument("name", metavar="NAME", help="the agent's name")
    rotate = agent_commands.add_parser(
        "rotate-token", help="issue a new token, revoke the old", run=_agents_rotate
    )
    rotate.add_argument("name", metavar="NAME", help="the agent's name")
    revoke = agent_commands.add_parser(
        "revoke-token", help="revoke every token of an agent", run=_agents_revoke
    )
    revoke.add_argument("name", metavar="NAME", help="the agent's name")

    conversations = commands.add_parser(
        "conversations", help="a hosted agent's conversations", run=_conversations
    )
    conversations.add_argument("--agent", required=True, metavar="NAME", help="the agent's name")
    conversations.add_argument("--after", metavar="ADDRESS", help="start after this address")

    history = commands.add_parser(
        "history", help="a conversation's certified records, 50 a page", run=_history
    )
    history.add_argument("--agent", required=True, metavar="NAME", help="the agent's name")
    history.add_argument(
        "address", metavar="ADDRESS", help="the conversation: agent:NAME or group:NAME,..."
    )
    history.add_argument("--after", metavar="RECORD_HASH", help="start after this record")

    agent, json_result = TokenRole.AGENT, OutputForm.JSON
    send = commands.add_parser(
        "send",
        help='send a message text: plain text is a message, {"gather": ...} asks, '
        '{"action": "accept", ...} answers',
        run=_send,
        role=agent,
        natural=json_result,
    )
    send.add_argument("to", metavar="TO", help=_TO_HELP)
    _add_text_arguments(send, name="text", flag="--text-file")
    _add_send_flags(send)

    for name in ("gather", "all-gather"):
        op = name.replace("-", "_")
        ask = commands.add_parser(
            name,
            help=f"ask QUESTION as a {op}; the answers arrive later on listen as one "
            "collectiveResult",
            run=_ask,
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

    answer = commands.add_parser(
        "answer",
        help="answer the question open in a conversation",
        run=_answer,
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

    parse = commands.add_parser(
        "parse",
        help="print the send a message text states, sending nothing",
        run=_parse,
        role=agent,
        natural=json_result,
    )
    parse.add_argument("to", metavar="TO", help=_TO_HELP)
    _add_text_arguments(parse, name="text", flag="--text-file")

    send_state = commands.add_parser(
        "send-state",
        help="the state of an idempotency key: absent, pending, indeterminate, returned",
        run=_send_state,
        role=TokenRole.AGENT,
    )
    send_state.add_argument("key", metavar="KEY", help="the --idempotency-key of the send")

    listen = commands.add_parser(
        "listen",
        help="print deliveries as they arrive (JSON lines, or -o text)",
        run=_listen,
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

    ack = commands.add_parser(
        "ack",
        help=f"acknowledge delivery tokens ({ACKNOWLEDGE_MAX_TOKENS:,} a call)",
        run=_ack,
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


async def _run(ctx: Context) -> int:
    command: Command = ctx.args.run
    try:
        return await command(ctx)
    except Unreachable as error:
        failure = unreachable_failure(error)
    except HarnessError as error:
        failure = describe_failure(error, ctx.scene)
    ctx.out.failure(failure)
    return failure.exit_code


def _detach_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush finds no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # stdout is no file (a test's capture): nothing will flush into a pipe


def _say(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr is gone too: the exit code is all that is left


def main(argv: Sequence[str] | None = None) -> int:
    """Run `harness` with `argv` (default: the process's) and return the exit code."""
    env = dict(os.environ)
    debug = False
    try:
        debug = env_flag(env, DEBUG_VARIABLE)
        parser = build_parser(env)
        try:
            args = parser.parse_args(None if argv is None else list(argv))
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else EXIT_USAGE
        else:
            debug = debug or args.debug
            out = output_for(args, sys.stdout, sys.stderr)
            ctx = Context(args=args, env=env, out=out, stdin=sys.stdin)
            code = asyncio.run(_run(ctx))
        # Here, not at the interpreter's exit, where a closed pipe would print a traceback.
        sys.stdout.flush()
        return code
    except UsageError as error:
        _say(f"harness: error: {error}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _detach_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as error:  # the last guard: a defect prints one line, not a traceback
        if debug:
            traceback.print_exception(error, file=sys.stderr)
        hint = "" if debug else f" (--debug or {DEBUG_VARIABLE}=1 shows the traceback)"
        _say(f"harness: unexpected error: {type(error).__name__}: {error}{hint}")
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())

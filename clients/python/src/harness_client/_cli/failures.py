"""What a failed `harness` command says: its headline, reason, exit code and JSON error.

`describe_failure` turns a typed error of the client library into a `Failure`, worded
against the `Scene` it happened in (the command, the token it took, the address), so a
refused token names which token and a check the gateway words for a send names the
command that made it. A failed connection, a refused token included, reads as the client
library's `ConnectError` says it (`connect failed: cannot reach 127.0.0.1:7770: connection
refused`, `connect failed: the gateway at 127.0.0.1:7770 does not know this agent token`),
the same words the TypeScript client uses. The exit codes, success's included, and
`UsageError` live here too: they are the closed set every other part of the command ends
in, and this module imports no other part of it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final

import grpc
from harness_contract.errors import incompatible_detail, token_refused_detail

from harness_client import (
    AuthenticationError,
    ConnectError,
    ConnectErrorReason,
    EndpointClosedError,
    HarnessError,
    ListenError,
    ListenErrorReason,
    PermissionDeniedError,
    TransportError,
    UnavailableError,
    to_json,
)

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

_SEND_COMMANDS: Final = frozenset({"send", "gather", "all-gather", "answer"})
"""Commands that send: a `send failed: ...` text is theirs as it stands."""
_SEND_FAILED: Final = "send failed: "
"""How the gateway's texts of send-side checks begin (an idempotency key, an address)."""


class UsageError(Exception):
    """The command cannot run as given (exit 2)."""


class TokenRole(enum.StrEnum):
    """Which token a command takes, so a refusal can say which one was refused."""

    AGENT = "agent token"
    """An agent's `hat_...` token: the agent API."""
    ADMIN = "admin token"
    """The operator's token: the management API."""


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
    """The client library's words, or the same words for a ConnectError made without them."""
    if error.detail is not None:
        return error.message
    match error.reason:
        case ConnectErrorReason.INCOMPATIBLE_DAEMON:
            detail = incompatible_detail(scene.address)
        case ConnectErrorReason.DECODE_FAILED:
            detail = f"{scene.address}'s answers do not decode"
        case _:
            return error.message
    return ConnectError(error.reason, address=scene.address, detail=detail).message


def describe_failure(error: HarnessError, scene: Scene) -> Failure:
    """The failure a typed error stands for, leading with what went wrong."""
    cause = error.__cause__
    match error:
        case ConnectError():
            # The gateway answered the token check with "not serving": its words say why.
            if isinstance(cause, UnavailableError):
                return describe_failure(cause, scene)
            refused = error.reason is ConnectErrorReason.AUTHENTICATION_FAILED
            return Failure(
                headline=_connect_headline(error, scene),
                reason=error.reason,
                exit_code=EXIT_CONNECTION,
                error=_with_cause(to_json(error), cause),
                cause=None if refused else _cause_text(cause),
            )
        case AuthenticationError() | PermissionDeniedError():
            # An operator command's first call checks the admin token (an agent command's
            # `connect` already did): worded as `connect` words a refused token.
            refusal = error.reason if isinstance(error, AuthenticationError) else None
            refused_token = ConnectError(
                ConnectErrorReason.AUTHENTICATION_FAILED,
                address=scene.address,
                detail=token_refused_detail(scene.address, refusal, role=scene.role.value),
            )
            refused_token.__cause__ = error
            return describe_failure(refused_token, scene)
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

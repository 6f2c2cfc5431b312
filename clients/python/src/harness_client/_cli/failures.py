"""What a failed `harness` command says: its headline, reason, exit code and JSON error.

`describe_failure` turns a typed error of the client library into a `Failure`, worded
against the `Scene` it happened in (the command, the token it took, the address), so a
refused token names which token and a check the gateway words for a send names the
command that made it. `Unreachable` and `reach_cause` word a gateway that could not be
reached at all, from gRPC's text of the cause. The exit codes, success's included, and
`UsageError` live here too: they are the closed set every other part of the command ends
in, and this module imports no other part of it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final, assert_never

import grpc

from harness_client import (
    AuthenticationError,
    AuthenticationErrorReason,
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

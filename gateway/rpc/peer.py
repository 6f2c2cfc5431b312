"""Daemon-to-daemon calls: the `RouterService` and `RegistryService` edge (operations.md §4).

Both sides of every peer call live here, so the two can never drift apart:

- **Version.** Every call carries metadata `harness-version: harness/1`, and every answer
  carries it back as initial metadata. A server refuses any other value (or none) with
  FAILED_PRECONDITION and an `ErrorInfo` (domain `harness.v1`) of reason
  `VERSION_MISMATCH`; a client treats that status, or an answer whose `harness-version`
  differs, as a version mismatch (engine.md §3: exact string comparison, nothing
  negotiated).
- **Peer token.** With a peer token configured (`--peer-token-file`,
  `HARNESS_PEER_TOKEN_FILE`), clients send `authorization: Bearer <peer token>` and servers
  refuse any other token UNAUTHENTICATED. Without one, the services run open: that is only
  allowed when they listen on loopback (`require_protected_listen`), the one-machine
  deployments of `gateway.testing_network` and a developer's laptop.
- **Targets and channels.** `HOST:PORT` or `grpc://HOST:PORT`; keepalive paired with the
  server's (30 s / 10 s), message limits large enough for a full Router batch.

The token is never logged and never put in an error.
"""

from __future__ import annotations

import hmac
import ipaddress
from pathlib import Path
from typing import Any, Final

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from gateway.engine.protocol import VERSION
from gateway.rpc.auth import AUTHORIZATION_KEY, BEARER_SCHEME
from gateway.rpc.errors import ERROR_DOMAIN, Context

VERSION_KEY: Final = "harness-version"
"""The metadata key naming the protocol version of a peer call and its answer."""

HARNESS_VERSION: Final = VERSION
"""The one version this code speaks (`harness/1`)."""

VERSION_MISMATCH: Final = "VERSION_MISMATCH"
"""`ErrorInfo.reason` of a peer call refused for its version."""

PEER_UNAUTHENTICATED: Final = "PEER_UNAUTHENTICATED"
"""`ErrorInfo.reason` of a peer call without the configured peer token."""

PEER_TOKEN_MIN_LENGTH: Final = 32
"""Shortest peer token accepted, in characters (as the admin token)."""

PEER_MAX_MESSAGE_BYTES: Final = 8 * 1024 * 1024
"""Largest peer message either side sends or receives, in bytes.

A Router batch holds at most 4 MiB of envelopes plus up to 256 recipient tags (about
1 KiB each with framing), so 8 MiB leaves room; a Router send is at most ~354 KB."""

PEER_KEEPALIVE_TIME: Final = 30.0
"""Seconds between a peer client's keepalive pings; servers accept pings 10 s apart."""

PEER_KEEPALIVE_TIMEOUT: Final = 10.0
"""Seconds a peer client waits for a ping acknowledgement before the connection is dead,
so a half-open subscription is found within about 40 s."""

_SCHEME: Final = "grpc://"


class PeerConfigError(ValueError):
    """A peer setting is unusable: a malformed target, a short token file, an open
    non-loopback listener. `str()` says which, never the token."""


def peer_target(text: str) -> str:
    """The `HOST:PORT` of `HOST:PORT` or `grpc://HOST:PORT` (`PeerConfigError` otherwise)."""
    target = text.strip().removeprefix(_SCHEME).rstrip("/")
    if "://" in target:
        raise PeerConfigError(f"only grpc://HOST:PORT peers are supported, got {text!r}")
    host, separator, port = target.rpartition(":")
    if not separator or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise PeerConfigError(f"expected HOST:PORT or grpc://HOST:PORT, got {text!r}")
    return target


def read_peer_token(path: Path | None) -> str | None:
    """The peer token in `path` (surrounding whitespace stripped), or None without a path.

    Raises `PeerConfigError` when the file cannot be read or the token is shorter than
    `PEER_TOKEN_MIN_LENGTH` or contains whitespace."""
    if path is None:
        return None
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as error:
        raise PeerConfigError(f"cannot read the peer token file {path}: {error.strerror}") from None
    if len(token) < PEER_TOKEN_MIN_LENGTH or any(char.isspace() for char in token):
        raise PeerConfigError(
            f"the peer token in {path} must be at least {PEER_TOKEN_MIN_LENGTH} characters "
            "without whitespace"
        )
    return token


def is_loopback_listen(listen: str) -> bool:
    """True when `listen` (`HOST:PORT`) binds a loopback address only."""
    host = listen.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_protected_listen(listen: str, peer_token: str | None, *, mtls: bool) -> None:
    """Refuse to serve peer services open beyond this machine.

    Without a peer token or client certificates, `RouterService` and `RegistryService` take
    calls from anyone who can connect, which is acceptable on loopback only."""
    if peer_token is None and not mtls and not is_loopback_listen(listen):
        raise PeerConfigError(
            f"serving the Router or Registry on {listen} needs --peer-token-file "
            "(HARNESS_PEER_TOKEN_FILE) or client certificates; without them only a "
            "loopback address is allowed"
        )


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def error_status(code: int, message: str, reason: str) -> grpc.Status:
    """A status of `code` (a `google.rpc.Code`) whose details hold an `ErrorInfo` (domain
    `harness.v1`) of `reason`, ready for `context.abort_with_status`."""
    status = status_pb2.Status(code=code, message=message)
    status.details.append(_pack(error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN)))
    converted: grpc.Status = rpc_status.to_status(status)
    return converted


def version_mismatch_status(got: str | None) -> grpc.Status:
    """FAILED_PRECONDITION with `ErrorInfo` `VERSION_MISMATCH`, naming what the call sent."""
    shown = "none" if got is None else repr(got[:40])
    return error_status(
        code_pb2.FAILED_PRECONDITION,
        f"this peer speaks {HARNESS_VERSION}; the call's {VERSION_KEY} was {shown}",
        VERSION_MISMATCH,
    )


def _metadata_values(metadata: Any, key: str) -> list[object]:
    """The values of `key` in call metadata (a `grpc.aio.Metadata`, a sequence of pairs, or
    None)."""
    return [value for name, value in (metadata or ()) if name == key]


class PeerGuard:
    """The server side of a peer call: the version and, when configured, the peer token.

    Every handler of `RouterService` and `RegistryService` starts with `await
    guard.admit(context)`, which ends the call with a status unless it may proceed and
    announces this side's version as initial metadata."""

    def __init__(self, peer_token: str | None) -> None:
        """`peer_token` None runs the services open (loopback only, see
        `require_protected_listen`)."""
        self._token = None if peer_token is None else peer_token.encode("utf-8")

    @property
    def open(self) -> bool:
        """True when calls need no peer token."""
        return self._token is None

    async def admit(self, context: Context) -> None:
        """Return when the call may proceed; otherwise abort it (UNAUTHENTICATED, then
        FAILED_PRECONDITION `VERSION_MISMATCH`)."""
        metadata = context.invocation_metadata()
        if self._token is not None and not self._token_matches(metadata):
            await context.abort_with_status(
                error_status(
                    code_pb2.UNAUTHENTICATED,
                    "authentication failed: the call has no valid peer token",
                    PEER_UNAUTHENTICATED,
                )
            )
        versions = _metadata_values(metadata, VERSION_KEY)
        if versions != [HARNESS_VERSION]:
            got = versions[0] if len(versions) == 1 and isinstance(versions[0], str) else None
            await context.abort_with_status(version_mismatch_status(got))
        await context.send_initial_metadata(((VERSION_KEY, HARNESS_VERSION),))

    def _token_matches(self, metadata: Any) -> bool:
        assert self._token is not None
        values = _metadata_values(metadata, AUTHORIZATION_KEY)
        if len(values) != 1 or not isinstance(values[0], str):
            return False
        scheme, _, token = values[0].partition(" ")
        if scheme.lower() != BEARER_SCHEME:
            return False
        return hmac.compare_digest(token.encode("utf-8"), self._token)


def call_metadata(peer_token: str | None) -> tuple[tuple[str, str], ...]:
    """The metadata of every peer call: the version, and the peer token when configured."""
    if peer_token is None:
        return ((VERSION_KEY, HARNESS_VERSION),)
    return ((VERSION_KEY, HARNESS_VERSION), (AUTHORIZATION_KEY, f"Bearer {peer_token}"))


def answered_version(metadata: Any) -> str | None:
    """The `harness-version` an answer announced when it differs from ours, else None.

    An answer without the key is accepted (nothing claims another version); two values or
    a value other than `harness/1` is a mismatch."""
    values = _metadata_values(metadata, VERSION_KEY)
    if not values or values == [HARNESS_VERSION]:
        return None
    return ", ".join(str(value)[:40] for value in values)


def is_version_mismatch(error: grpc.aio.AioRpcError) -> bool:
    """True when a failed peer call is FAILED_PRECONDITION with `ErrorInfo`
    `VERSION_MISMATCH`, or its trailing `harness-version` names another version."""
    if answered_version(error.trailing_metadata()) is not None:
        return True
    if error.code() is not grpc.StatusCode.FAILED_PRECONDITION:
        return False
    for key, value in error.trailing_metadata() or ():
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        status = status_pb2.Status()
        try:
            status.ParseFromString(value)
        except Exception:  # a malformed detail is just not a mismatch
            return False
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Is(info.DESCRIPTOR) and detail.Unpack(info):
                return bool(info.reason == VERSION_MISMATCH)
    return False


def describe_failure(error: grpc.aio.AioRpcError) -> str:
    """A short text for logs and typed errors: the code and the server's message."""
    details = (error.details() or "").strip()
    return f"{error.code().name}: {details[:200]}" if details else error.code().name


def channel_options() -> list[tuple[str, int]]:
    """Options of a peer client's channel: keepalive paired with the server's table
    (operations.md §3) and the peer message limits."""
    return [
        ("grpc.keepalive_time_ms", round(PEER_KEEPALIVE_TIME * 1000)),
        ("grpc.keepalive_timeout_ms", round(PEER_KEEPALIVE_TIMEOUT * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.max_receive_message_length", PEER_MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", PEER_MAX_MESSAGE_BYTES),
    ]


def open_peer_channel(target: str) -> grpc.aio.Channel:
    """A plaintext channel to a peer at `HOST:PORT` or `grpc://HOST:PORT`; no I/O yet."""
    return grpc.aio.insecure_channel(peer_target(target), options=channel_options())

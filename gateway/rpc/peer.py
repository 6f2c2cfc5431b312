"""Daemon-to-daemon calls: the `RouterService` and `RegistryService` edge (operations.md §4).

Both sides of every peer call live here, so the two can never drift apart:

- **Version.** Every call carries metadata `harness-version: harness/1`, and every answer
  carries it back as initial metadata. A server refuses any other value (or none) with
  FAILED_PRECONDITION and an `ErrorInfo` (domain `harness.v1`) of reason
  `VERSION_MISMATCH`; a client treats that status, or an answer whose `harness-version`
  differs, as a version mismatch (engine.md §3: exact string comparison, nothing
  negotiated).
- **Peer token, always.** Clients send `authorization: Bearer <peer token>` and servers
  refuse any other token, or none, UNAUTHENTICATED (`ErrorInfo` `PEER_UNAUTHENTICATED`, and
  a `harness.v1.AuthenticationError` detail: missing, malformed or unknown) — loopback
  included, since loopback is no trust boundary on a shared host. A process serving these
  services without `--peer-token-file` creates `<data-dir>/peer-token` (0600) on first
  start (`ensure_peer_token`); joining processes pass that file as `--peer-token-file`.
  mTLS (`--tls-client-ca`) is checked by the transport in addition, never instead.
- **Targets and channels.** `HOST:PORT`, `grpc://HOST:PORT` (plaintext) or
  `grpcs://HOST:PORT` (TLS, verified against `--peer-tls-ca` or the system's roots, with
  `--peer-tls-cert` as the client certificate where the peer requires mTLS); keepalive
  paired with the server's, message limits large enough for a full Router batch.

The token is never logged and never put in an error.
"""

from __future__ import annotations

import hmac
import logging
from pathlib import Path
from typing import Any, Final

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from harness_contract import wire
from harness_contract.errors import AuthenticationError, AuthenticationErrorReason

from gateway.engine.protocol import VERSION
from gateway.rpc.auth import AUTHORIZATION_KEY, BEARER_SCHEME
from gateway.rpc.errors import ERROR_DOMAIN, Context
from gateway.rpc.keepalive import KeepalivePolicy
from gateway.secret_file import ensure_secret, read_secret
from gateway.settings import PEER_TLS_SCHEME, Settings

logger = logging.getLogger(__name__)

VERSION_KEY: Final = "harness-version"
"""The metadata key naming the protocol version of a peer call and its answer."""

HARNESS_VERSION: Final = VERSION
"""The one version this code speaks (`harness/1`)."""

VERSION_MISMATCH: Final = "VERSION_MISMATCH"
"""`ErrorInfo.reason` of a peer call refused for its version."""

PEER_UNAUTHENTICATED: Final = "PEER_UNAUTHENTICATED"
"""`ErrorInfo.reason` of a peer call without the configured peer token."""

PEER_TOKEN_FILE: Final = "peer-token"  # noqa: S105 - a file name, not a secret
"""The generated peer token's file in the data directory of a process serving peers."""

PEER_MAX_MESSAGE_BYTES: Final = 8 * 1024 * 1024
"""Largest peer message either side sends or receives, in bytes.

A Router batch holds at most 4 MiB of envelopes plus up to 256 recipient tags (about
1 KiB each with framing), so 8 MiB leaves room; a Router send is at most ~354 KB."""

_SCHEMES: Final = ("grpc://", PEER_TLS_SCHEME)


class PeerConfigError(ValueError):
    """A peer setting is unusable: a malformed target, a missing or short token file. `str()`
    says which, never the token."""


def peer_target(text: str) -> str:
    """The `HOST:PORT` of `HOST:PORT`, `grpc://HOST:PORT` or `grpcs://HOST:PORT`
    (`PeerConfigError` otherwise)."""
    target = text.strip()
    for scheme in _SCHEMES:
        target = target.removeprefix(scheme)
    target = target.rstrip("/")
    if "://" in target:
        raise PeerConfigError(
            f"only grpc://HOST:PORT or grpcs://HOST:PORT peers are supported, got {text!r}"
        )
    host, separator, port = target.rpartition(":")
    if not separator or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise PeerConfigError(f"expected HOST:PORT or grpc://HOST:PORT, got {text!r}")
    return target


def read_peer_token(path: Path | None) -> str:
    """The peer token a joining process sends, from `--peer-token-file`.

    Raises `PeerConfigError` without a file, and `SecretFileError` (a `ValueError`) when the
    file is unreadable, open to others, or holds a short token."""
    if path is None:
        raise PeerConfigError(
            "joining a Router or Registry needs --peer-token-file (HARNESS_PEER_TOKEN_FILE): "
            f"the {PEER_TOKEN_FILE} file of the process that serves them"
        )
    return read_secret(path, what="peer token")


def ensure_peer_token(settings: Settings) -> tuple[str, Path]:
    """The token the peer services of this process require, and its file: `peer_token_file`
    when set, else `<data-dir>/peer-token`, created on first start. Its path is logged (never
    the token), since joining processes need it."""
    if settings.peer_token_file is not None:
        path = settings.peer_token_file
        return read_secret(path, what="peer token"), path
    path = settings.data_dir / PEER_TOKEN_FILE
    token, created = ensure_secret(path, what="peer token", prefix="hpeer_")
    if created:
        logger.info(
            "peer token created path=%s: joining daemons and Routers pass this file as "
            "--peer-token-file",
            path,
        )
    return token, path


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def error_status(code: int, message: str, reason: str, *, detail: Any = None) -> grpc.Status:
    """A status of `code` (a `google.rpc.Code`) whose details hold `detail` (a harness.v1
    error message, when given) and an `ErrorInfo` (domain `harness.v1`) of `reason`, ready
    for `context.abort_with_status`."""
    status = status_pb2.Status(code=code, message=message)
    if detail is not None:
        status.details.append(_pack(detail))
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
    """The server side of a peer call: the peer token and the version.

    Every handler of `RouterService` and `RegistryService` starts with `await
    guard.admit(context)`, which ends the call with a status unless it may proceed and
    announces this side's version as initial metadata."""

    def __init__(self, peer_token: str) -> None:
        if not peer_token:
            raise PeerConfigError("peer services never run without a peer token")
        self._token = peer_token.encode("utf-8")

    async def admit(self, context: Context) -> None:
        """Return when the call may proceed; otherwise abort it (UNAUTHENTICATED, then
        FAILED_PRECONDITION `VERSION_MISMATCH`)."""
        metadata = context.invocation_metadata()
        refusal = self._refusal(metadata)
        if refusal is not None:
            await context.abort_with_status(
                error_status(
                    code_pb2.UNAUTHENTICATED,
                    "authentication failed: the call has no valid peer token",
                    PEER_UNAUTHENTICATED,
                    detail=wire.authentication_error_to_proto(AuthenticationError(refusal, "")),
                )
            )
        versions = _metadata_values(metadata, VERSION_KEY)
        if versions != [HARNESS_VERSION]:
            got = versions[0] if len(versions) == 1 and isinstance(versions[0], str) else None
            await context.abort_with_status(version_mismatch_status(got))
        await context.send_initial_metadata(((VERSION_KEY, HARNESS_VERSION),))

    def _refusal(self, metadata: Any) -> AuthenticationErrorReason | None:
        """Why the call's token is refused, or None when it is the peer token."""
        values = _metadata_values(metadata, AUTHORIZATION_KEY)
        if not values:
            return AuthenticationErrorReason.MISSING
        if len(values) != 1 or not isinstance(values[0], str):
            return AuthenticationErrorReason.MALFORMED
        scheme, _, token = values[0].partition(" ")
        if scheme.lower() != BEARER_SCHEME:
            return AuthenticationErrorReason.MALFORMED
        if hmac.compare_digest(token.encode("utf-8"), self._token):
            return None
        return AuthenticationErrorReason.UNKNOWN


def call_metadata(peer_token: str) -> tuple[tuple[str, str], ...]:
    """The metadata of every peer call: the version and the peer token."""
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


def channel_options(keepalive: KeepalivePolicy) -> list[tuple[str, int]]:
    """Options of a peer client's channel: the client side of `keepalive` (the process's
    `KeepalivePolicy.from_settings(settings)`: a ping every `keepalive_time`, so a
    half-open subscription is found within `keepalive_time + keepalive_timeout`, 40 s by
    default) and the peer message limits."""
    return [
        *keepalive.client_options(),
        ("grpc.max_receive_message_length", PEER_MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", PEER_MAX_MESSAGE_BYTES),
    ]


def open_peer_channel(
    target: str,
    *,
    tls: grpc.ChannelCredentials | None = None,
    keepalive: KeepalivePolicy | None = None,
) -> grpc.aio.Channel:
    """A channel to a peer at `HOST:PORT`, `grpc://HOST:PORT` (plaintext) or
    `grpcs://HOST:PORT` (TLS with `tls`, by default the system's roots), pinging as
    `keepalive` says (by default the shipped policy); no I/O yet."""
    address = peer_target(target)
    options = channel_options(keepalive or KeepalivePolicy())
    if target.strip().startswith(PEER_TLS_SCHEME):
        credentials = tls if tls is not None else grpc.ssl_channel_credentials()
        return grpc.aio.secure_channel(address, credentials, options=options)
    return grpc.aio.insecure_channel(address, options=options)

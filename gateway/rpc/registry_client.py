"""`GrpcRegistry`: a `RegistryPort` over a standalone Registry's `harness.v1.RegistryService`.

A joined daemon (`serve --registry grpc://HOST:PORT`) wraps it in the same verifying,
caching `RegistryClient` as the embedded SQLite Registry. The pinned Registry key, which
every card is verified against, is configured (`--registry-public-key`) or fetched once
with `GetRegistryKey` when the client connects; it never changes afterwards.

Failures, as `RegistryPort` promises: `RegistryVersionMismatch` for FAILED_PRECONDITION
with `ErrorInfo` `VERSION_MISMATCH`, an answer announcing another `harness-version`, or a
card of another `version`; `RegistryUnavailable` for everything else (unreachable, the
10-second deadline, a malformed answer); `ValueError` for arguments no Registry accepts,
checked here before any call.
"""

from __future__ import annotations

import enum
import json
import logging
from typing import Any, Final, Self

import grpc
from harness_contract._gen.harness.v1 import registry_pb2, registry_pb2_grpc
from harness_contract.addresses import is_agent_name
from harness_contract.ids import RandomId, b64, unb64

from gateway.engine import protocol as p
from gateway.identity.keys import PUBLIC_KEY_SIZE, is_public_key_text
from gateway.registry import (
    LIST_LIMIT_MAX,
    REGISTRY_DEADLINE,
    KeyAlreadyRegistered,
    NameTaken,
    Registered,
    RegisterOutcome,
    RegistryUnavailable,
    RegistryVersionMismatch,
)
from gateway.registry.port import check_list_arguments, check_registration
from gateway.rpc.keepalive import KeepalivePolicy
from gateway.rpc.peer import (
    describe_failure,
    is_version_mismatch,
    open_peer_channel,
    peer_target,
)
from gateway.rpc.peer_client import PeerClient

logger = logging.getLogger(__name__)


FAST_FAILURE_DEADLINE: Final = 2.0
"""Seconds of the one call, made after a key fetch waited in vain, that names the cause."""


class GrpcRegistryState(enum.StrEnum):
    """Lifecycle of a `GrpcRegistry`."""

    OPEN = "open"
    """Answering calls."""
    CLOSED = "closed"
    """Closed; every call raises `RegistryUnavailable`."""


def decode_card(data: bytes) -> p.SignedAgentCard:
    """The `SignedAgentCard` of JCS bytes a Registry returned.

    A card (or signed wrapper) of another `version` is `RegistryVersionMismatch`; any
    other malformation `RegistryUnavailable`. The signature is the caller's to verify."""
    try:
        return p.decode(data, p.SignedAgentCard)
    except p.ProtocolError as error:
        if _other_version(data):
            raise RegistryVersionMismatch(
                "the registry returned a card of another version"
            ) from None
        logger.error("registry returned an undecodable card: %s", error.detail)
        raise RegistryUnavailable("the registry returned an undecodable card") from None


def _other_version(data: bytes) -> bool:
    try:
        value = json.loads(data)
    except ValueError:
        return False
    if not isinstance(value, dict):
        return False
    card = value.get("card")
    versions = [value.get("version"), card.get("version") if isinstance(card, dict) else None]
    return any(isinstance(version, str) and version != p.VERSION for version in versions)


class GrpcRegistry(PeerClient[GrpcRegistryState]):
    """A `RegistryPort` whose Registry is a `RegistryService` across the network.

    Create it with `await GrpcRegistry.connect(target, ...)`, which pins the Registry key;
    `close()` (or leaving `async with`) closes the channel."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        target: str,
        peer_token: str,
        registry_public_key: str,
        deadline: float,
    ) -> None:
        """Use `connect`; this only wires what it prepared."""
        super().__init__(
            channel,
            target=target,
            peer_token=peer_token,
            opened=GrpcRegistryState.OPEN,
            closed=GrpcRegistryState.CLOSED,
        )
        self._stub = registry_pb2_grpc.RegistryServiceStub(channel)
        self._key = registry_public_key
        self._deadline = deadline

    @classmethod
    async def connect(
        cls,
        target: str,
        *,
        peer_token: str,
        tls: grpc.ChannelCredentials | None = None,
        keepalive: KeepalivePolicy | None = None,
        registry_public_key: str | None = None,
        deadline: float = REGISTRY_DEADLINE,
    ) -> Self:
        """A client of the Registry at `HOST:PORT`, `grpc://HOST:PORT` or `grpcs://HOST:PORT`
        (TLS with `tls`, by default the system's roots), pinging as `keepalive` says.

        With `registry_public_key` (`b64` of 32 bytes) that key is pinned and nothing is
        called; without it the key is fetched with `GetRegistryKey`, waiting up to
        `deadline` seconds for the Registry to come up. Raises `ValueError` for a malformed
        target or key, `RegistryUnavailable` or `RegistryVersionMismatch` when the fetch
        fails."""
        address = peer_target(target)
        if registry_public_key is not None and not is_public_key_text(registry_public_key):
            raise ValueError("the registry public key must be b64 of 32 raw bytes")
        channel = open_peer_channel(target, tls=tls, keepalive=keepalive)
        client = cls(
            channel,
            target=address,
            peer_token=peer_token,
            registry_public_key=registry_public_key or "",
            deadline=deadline,
        )
        if registry_public_key is None:
            try:
                client._key = await client._fetch_key()
            except BaseException:
                await channel.close()
                raise
            logger.info("registry key fetched target=%s", address)
        return client

    def registry_public_key(self) -> str:
        """The pinned key (`b64`): configured, or fetched at connect."""
        return self._key

    async def register(self, agent_name: str, public_key: str) -> RegisterOutcome:
        """See `RegistryPort.register`."""
        check_registration(agent_name, public_key)
        raw = unb64(public_key)
        assert raw is not None
        response = await self._call(
            self._stub.Register,
            registry_pb2.RegisterRequest(agent_name=agent_name, public_key=raw),
        )
        match response.WhichOneof("result"):
            case "registered":
                return Registered(card=decode_card(response.registered.signed_card))
            case "name_taken":
                return NameTaken()
            case "key_already_registered":
                return KeyAlreadyRegistered()
            case other:
                raise RegistryUnavailable(f"the registry answered a registration with {other!r}")

    async def lookup_by_id(self, agent_id: str) -> p.SignedAgentCard | None:
        """See `RegistryPort.lookup_by_id`; a malformed id is looked up nowhere."""
        if not RandomId.AGENT.is_valid(agent_id):
            return None
        return await self._lookup(registry_pb2.LookupRequest(agent_id=agent_id))

    async def lookup_by_name(self, agent_name: str) -> p.SignedAgentCard | None:
        """See `RegistryPort.lookup_by_name`; a malformed name is looked up nowhere."""
        if not is_agent_name(agent_name):
            return None
        return await self._lookup(registry_pb2.LookupRequest(agent_name=agent_name))

    async def list(
        self, after_agent_id: str | None = None, limit: int = LIST_LIMIT_MAX
    ) -> tuple[p.SignedAgentCard, ...]:
        """See `RegistryPort.list`."""
        check_list_arguments(after_agent_id, limit)
        request = registry_pb2.ListRequest(limit=limit)
        if after_agent_id is not None:
            request.after_agent_id = after_agent_id
        response = await self._call(self._stub.List, request)
        if len(response.signed_cards) > limit:
            raise RegistryUnavailable("the registry listed more cards than asked")
        return tuple(decode_card(data) for data in response.signed_cards)

    async def _lookup(self, request: registry_pb2.LookupRequest) -> p.SignedAgentCard | None:
        response = await self._call(self._stub.Lookup, request)
        match response.WhichOneof("result"):
            case "found":
                return decode_card(response.found.signed_card)
            case "not_found":
                return None
            case other:
                raise RegistryUnavailable(f"the registry answered a lookup with {other!r}")

    async def _fetch_key(self) -> str:
        # wait_for_ready: a Registry started a moment ago may not listen yet; the deadline
        # still bounds the wait.
        try:
            response = await self._call(
                self._stub.GetRegistryKey,
                registry_pb2.GetRegistryKeyRequest(),
                wait_for_ready=True,
            )
        except RegistryUnavailable as waited:
            # Waiting hides why the channel never connected (a refused port, a certificate
            # the pinned CA did not sign): one call that fails fast names the cause.
            try:
                await self._stub.GetRegistryKey(
                    registry_pb2.GetRegistryKeyRequest(),
                    metadata=self._metadata,
                    timeout=FAST_FAILURE_DEADLINE,
                )
            except grpc.aio.AioRpcError as error:
                raise RegistryUnavailable(
                    f"the registry at {self._target} could not be reached within "
                    f"{self._deadline:g} s: {describe_failure(error)}"
                ) from waited
            raise
        if len(response.public_key) != PUBLIC_KEY_SIZE:
            raise RegistryUnavailable("the registry's key is not 32 bytes")
        return b64(response.public_key)

    async def _call(self, method: Any, request: Any, *, wait_for_ready: bool = False) -> Any:
        return await self._unary(
            method, request, deadline=self._deadline, wait_for_ready=wait_for_ready
        )

    def _refused_error(self) -> Exception:
        return RegistryUnavailable(f"the registry client is {self._state.value}")

    def _closed_error(self) -> Exception:
        return RegistryUnavailable("the registry client closed")

    def _version_error(self, announced: str) -> Exception:
        return RegistryVersionMismatch(f"the registry at {self._target} speaks {announced}")

    def _failure(self, error: grpc.aio.AioRpcError) -> Exception:
        if is_version_mismatch(error):
            logger.error(
                "the registry at %s speaks another harness-version: %s",
                self._target,
                describe_failure(error),
            )
            return RegistryVersionMismatch(f"the registry at {self._target} refused our version")
        if error.code() is grpc.StatusCode.INVALID_ARGUMENT:
            # Arguments are checked before every call, so this is a Registry that judges
            # them differently: a caller defect by `RegistryPort`'s rules.
            return ValueError(f"the registry refused the arguments: {error.details()}")
        return RegistryUnavailable(
            f"the registry at {self._target} failed the call: {describe_failure(error)}"
        )

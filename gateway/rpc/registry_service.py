"""`harness.v1.RegistryService` over any `RegistryPort` (engine.md §3).

The standalone `harness-gateway registry` serves its SQLite Registry through it, and a
daemon started with `--expose-network` serves its embedded one. Every call is admitted by
the `PeerGuard` (peer token, `harness-version`), and answered by one `RegistryPort` call;
cards travel as the exact JCS bytes of their `SignedAgentCard`, which clients verify
against the pinned Registry key, so this edge adds no trust of its own.

Failures: a malformed request (an unset `key`, a key that is not 32 bytes, a name or limit
the Registry refuses) is INVALID_ARGUMENT; a Registry that cannot answer (its store
failed) UNAVAILABLE with `ErrorInfo` `REGISTRY_UNAVAILABLE`.
"""

from __future__ import annotations

import logging
from typing import Final, NoReturn, assert_never

from google.rpc import code_pb2
from harness_contract._gen.harness.v1 import registry_pb2, registry_pb2_grpc
from harness_contract.errors import InvalidRequestError
from harness_contract.ids import b64, unb64

from gateway.engine import protocol as p
from gateway.identity.keys import PUBLIC_KEY_SIZE
from gateway.registry import (
    KeyAlreadyRegistered,
    NameTaken,
    Registered,
    RegistryError,
    RegistryPort,
    RegistryVersionMismatch,
)
from gateway.rpc.errors import Context, unary_rpc
from gateway.rpc.peer import VERSION_MISMATCH, PeerGuard, error_status
from gateway.rpc.server import ServiceBinding

logger = logging.getLogger(__name__)

REGISTRY_SERVICE: Final = registry_pb2.DESCRIPTOR.services_by_name["RegistryService"].full_name
"""`harness.v1.RegistryService`: its health name and reflection entry."""

REGISTRY_UNAVAILABLE: Final = "REGISTRY_UNAVAILABLE"
"""`ErrorInfo.reason` of a call the Registry could not answer (its store failed)."""


async def _abort_for(context: Context, error: RegistryError) -> NoReturn:
    if isinstance(error, RegistryVersionMismatch):
        status = error_status(code_pb2.FAILED_PRECONDITION, error.detail, VERSION_MISMATCH)
    else:
        logger.warning("registry call failed: %s", error.detail)
        status = error_status(
            code_pb2.UNAVAILABLE, "the registry cannot answer right now", REGISTRY_UNAVAILABLE
        )
    await context.abort_with_status(status)
    raise AssertionError("abort_with_status returned")  # pragma: no cover


class RegistryService(registry_pb2_grpc.RegistryServiceServicer):
    """The Registry's gRPC face over one `RegistryPort`."""

    def __init__(self, registry: RegistryPort, guard: PeerGuard) -> None:
        self._registry = registry
        self._guard = guard

    def binding(self) -> ServiceBinding:
        """This servicer as a `ServiceBinding` for `build_server` / `build_peer_server`."""
        return ServiceBinding(
            name=REGISTRY_SERVICE,
            add=lambda server: registry_pb2_grpc.add_RegistryServiceServicer_to_server(
                self, server
            ),
        )

    @unary_rpc
    async def Register(  # noqa: N802 - the gRPC method name
        self, request: registry_pb2.RegisterRequest, context: Context
    ) -> registry_pb2.RegisterResponse:
        """`Register(agentName, publicKey)`: the key is checked before the name."""
        await self._guard.admit(context)
        if len(request.public_key) != PUBLIC_KEY_SIZE:
            raise InvalidRequestError.of_field(f"public_key: must be {PUBLIC_KEY_SIZE} raw bytes")
        try:
            outcome = await self._registry.register(request.agent_name, b64(request.public_key))
        except ValueError as error:
            raise InvalidRequestError.of_field(str(error)) from None
        except RegistryError as error:
            await _abort_for(context, error)
        response = registry_pb2.RegisterResponse()
        match outcome:
            case Registered(card=card):
                response.registered.signed_card = p.encode(card)
            case NameTaken():
                response.name_taken.SetInParent()
            case KeyAlreadyRegistered():
                response.key_already_registered.SetInParent()
            case _:
                assert_never(outcome)
        return response

    @unary_rpc
    async def Lookup(  # noqa: N802 - the gRPC method name
        self, request: registry_pb2.LookupRequest, context: Context
    ) -> registry_pb2.LookupResponse:
        """`Lookup(agentId | agentName)`; a malformed id or name finds nothing."""
        await self._guard.admit(context)
        try:
            match request.WhichOneof("key"):
                case "agent_id":
                    card = await self._registry.lookup_by_id(request.agent_id)
                case "agent_name":
                    card = await self._registry.lookup_by_name(request.agent_name)
                case _:
                    raise InvalidRequestError.of_field("key: set agent_id or agent_name")
        except RegistryError as error:
            await _abort_for(context, error)
        response = registry_pb2.LookupResponse()
        if card is None:
            response.not_found.SetInParent()
        else:
            response.found.signed_card = p.encode(card)
        return response

    @unary_rpc
    async def List(  # noqa: N802 - the gRPC method name
        self, request: registry_pb2.ListRequest, context: Context
    ) -> registry_pb2.ListResponse:
        """`List(afterAgentId?, limit)`: cards in AgentId byte order, `limit` 1..100."""
        await self._guard.admit(context)
        after = request.after_agent_id if request.HasField("after_agent_id") else None
        try:
            cards = await self._registry.list(after, request.limit)
        except ValueError as error:
            raise InvalidRequestError.of_field(str(error)) from None
        except RegistryError as error:
            await _abort_for(context, error)
        return registry_pb2.ListResponse(signed_cards=[p.encode(card) for card in cards])

    @unary_rpc
    async def GetRegistryKey(  # noqa: N802 - the gRPC method name
        self, request: registry_pb2.GetRegistryKeyRequest, context: Context
    ) -> registry_pb2.GetRegistryKeyResponse:
        """The raw 32-byte public key that signs every card."""
        await self._guard.admit(context)
        key = unb64(self._registry.registry_public_key())
        assert key is not None, "a Registry's own key is valid b64"
        return registry_pb2.GetRegistryKeyResponse(public_key=key)

"""`harness.v1.ManagementService` over the gateway core: the operator API (admin token).

Every action is logged on `harness.audit` at INFO with the agent name it concerns, never a
token. Paging is done here over the core's lists: agents by name (`page_token` is the last
name of the previous page), conversations by address, records by chain order.
"""

from __future__ import annotations

import logging
from typing import Final

from harness_contract import wire
from harness_contract._gen.harness.v1 import management_pb2, management_pb2_grpc
from harness_contract.errors import InvalidRequestError

from gateway.endpoint.api import GatewayCore
from gateway.rpc.auth import authenticate_admin
from gateway.rpc.endpoint_service import check_serving
from gateway.rpc.errors import Context, unary_rpc

audit = logging.getLogger("harness.audit")

AGENTS_PAGE_DEFAULT: Final = 100
"""Agents per `ListAgents` page when the request leaves `page_size` at 0."""
AGENTS_PAGE_MAX: Final = 1_000
"""Most agents one `ListAgents` page holds, so one answer stays far below 4 MiB."""
CONVERSATIONS_PAGE_DEFAULT: Final = 100
"""Conversations per `SearchConversations` page when `page_size` is 0."""
CONVERSATIONS_PAGE_MAX: Final = 1_000
"""Most conversations one page holds."""
HISTORY_PAGE_MAX: Final = 50
"""Records per `ReadConversation` page: at most 50, and 0 means 50 (operations.md §3)."""


def _page_size(requested: int, default: int, maximum: int, field: str) -> int:
    if requested < 0:
        raise InvalidRequestError.of_field(f"{field}: must not be negative")
    return min(requested or default, maximum)


class ManagementService(management_pb2_grpc.ManagementServiceServicer):
    """The operator API over one daemon."""

    def __init__(self, core: GatewayCore) -> None:
        self._core = core

    async def _admin(self, context: Context) -> None:
        check_serving(self._core)
        await authenticate_admin(self._core, context)

    @unary_rpc
    async def RegisterAgent(  # noqa: N802 - the gRPC method name
        self, request: management_pb2.RegisterAgentRequest, context: Context
    ) -> management_pb2.RegisterAgentResponse:
        await self._admin(context)
        registered = await self._core.agents.register(request.name)
        audit.info("agent registered name=%s agent_id=%s", request.name, registered.agent_id)
        return wire.registered_agent_to_proto(registered)

    @unary_rpc
    async def GetAgentStatus(  # noqa: N802 - the gRPC method name
        self, request: management_pb2.GetAgentStatusRequest, context: Context
    ) -> management_pb2.GetAgentStatusResponse:
        await self._admin(context)
        status = await self._core.management.agent_status(request.name)
        return management_pb2.GetAgentStatusResponse(agent=wire.agent_status_to_proto(status))

    @unary_rpc
    async def ListAgents(  # noqa: N802 - the gRPC method name
        self, request: management_pb2.ListAgentsRequest, context: Context
    ) -> management_pb2.ListAgentsResponse:
        await self._admin(context)
        limit = _page_size(request.page_size, AGENTS_PAGE_DEFAULT, AGENTS_PAGE_MAX, "page_size")
        agents, after = await self._core.management.list_agents(
            prefix=request.prefix if request.HasField("prefix") else "",
            after=request.page_token or None,
            limit=limit,
        )
        return management_pb2.ListAgentsResponse(
            agents=[wire.agent_status_to_proto(agent) for agent in agents],
            next_page_token=after or "",
        )

    @unary_rpc
    async def SearchConversations(  # noqa: N802 - the gRPC method name
        self, request: management_pb2.SearchConversationsRequest, context: Context
    ) -> management_pb2.SearchConversationsResponse:
        await self._admin(context)
        limit = _page_size(
            request.page_size, CONVERSATIONS_PAGE_DEFAULT, CONVERSATIONS_PAGE_MAX, "page_size"
        )
        conversations = sorted(
            await self._core.management.conversations(request.agent_name),
            key=lambda summary: summary.address.encode("utf-8"),
        )
        if request.HasField("after_address"):
            after = request.after_address.encode("utf-8")
            conversations = [c for c in conversations if c.address.encode("utf-8") > after]
        return management_pb2.SearchConversationsResponse(
            conversations=[wire.conversation_to_proto(c) for c in conversations[:limit]],
            has_more=len(conversations) > limit,
        )

    @unary_rpc
    async def ReadConversation(  # noqa: N802 - the gRPC method name
        self, request: management_pb2.ReadConversationRequest, context: Context
    ) -> management_pb2.ReadConversationResponse:
        await self._admin(context)
        if request.page_size > HISTORY_PAGE_MAX:
            raise InvalidRequestError.of_field(
                f"page_size: 1 to {HISTORY_PAGE_MAX}, or 0 for {HISTORY_PAGE_MAX}"
            )
        limit = _page_size(request.page_size, HISTORY_PAGE_MAX, HISTORY_PAGE_MAX, "page_size")
        # One record more than the page tells whether another page follows.
        records = await self._core.management.history(
            request.agent_name,
            request.address,
            after_record_hash=(
                request.after_record_hash if request.HasField("after_record_hash") else None
            ),
            limit=limit + 1,
        )
        return management_pb2.ReadConversationResponse(
            records=[wire.conversation_record_to_proto(record) for record in records[:limit]],
            has_more=len(records) > limit,
        )

    @unary_rpc
    async def RotateAgentToken(  # noqa: N802 - the gRPC method name
        self, request: management_pb2.RotateAgentTokenRequest, context: Context
    ) -> management_pb2.RotateAgentTokenResponse:
        await self._admin(context)
        token = await self._core.agents.rotate_token(request.name)
        audit.info("agent token rotated name=%s", request.name)
        return management_pb2.RotateAgentTokenResponse(token=token)

    @unary_rpc
    async def RevokeAgentToken(  # noqa: N802 - the gRPC method name
        self, request: management_pb2.RevokeAgentTokenRequest, context: Context
    ) -> management_pb2.RevokeAgentTokenResponse:
        await self._admin(context)
        await self._core.agents.revoke_token(request.name)
        audit.info("agent tokens revoked name=%s", request.name)
        return management_pb2.RevokeAgentTokenResponse()

    @unary_rpc
    async def GetGatewayStatus(  # noqa: N802 - the gRPC method name
        self, request: management_pb2.GetGatewayStatusRequest, context: Context
    ) -> management_pb2.GetGatewayStatusResponse:
        await self._admin(context)
        return wire.gateway_status_to_proto(self._core.management.status())

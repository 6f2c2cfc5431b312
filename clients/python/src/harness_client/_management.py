"""`ManagementClient`: the operator API with the admin token."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import grpc
from harness_contract import wire
from harness_contract._gen.harness.v1 import management_pb2, management_pb2_grpc
from harness_contract.errors import InvalidRequestError, UnavailableError
from harness_contract.management import (
    AgentStatus,
    ConversationRecord,
    ConversationSummary,
    GatewayStatus,
    RegisteredAgent,
)

from harness_client._channel import (
    DEFAULT_CONNECT_TIMEOUT,
    MANAGEMENT_SERVICE,
    bearer_metadata,
    open_channel,
    parse_target,
    wait_ready,
    wait_serving,
)
from harness_client._errors import EndpointClosedError, TransportError, decode_status
from harness_client._retry import Backoff

MANAGEMENT_RETRY_FLOOR: Final = 1.0
"""Seconds a retried management call must still have before its timeout, or the refusal is
raised instead: a call with less would be cut off by the timeout anyway."""

MANAGEMENT_TIMEOUT: Final = 30.0
"""Seconds one management call may take (operations.md §3)."""

T = TypeVar("T")


async def connect_management(
    target: str,
    *,
    admin_token: str,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    call_timeout: float = MANAGEMENT_TIMEOUT,
    credentials: grpc.ChannelCredentials | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> ManagementClient:
    """A client of `harness.v1.ManagementService`, once the channel is up and the service
    SERVING. Raises `ConnectError` like `connect`; the admin token is checked by the first
    call (`AuthenticationError`, `PermissionDeniedError`)."""
    channel = open_channel(target, credentials=credentials, options=options)
    address = parse_target(target)[0]
    deadline = time.monotonic() + connect_timeout
    try:
        await wait_ready(channel, connect_timeout, address)
        await wait_serving(
            channel, MANAGEMENT_SERVICE, max(0.0, deadline - time.monotonic()), address
        )
    except BaseException:
        await channel.close()
        raise
    return ManagementClient(channel, admin_token, call_timeout=call_timeout)


class ManagementClient:
    """Operator calls; an async context manager. Failures raise the decoded typed errors
    (`ManagementError`, `AuthenticationError`, `PermissionDeniedError`, `UnavailableError`,
    `TransportError`)."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        admin_token: str,
        *,
        call_timeout: float = MANAGEMENT_TIMEOUT,
    ) -> None:
        self._channel = channel
        self._metadata = bearer_metadata(admin_token)
        self._stub = management_pb2_grpc.ManagementServiceStub(channel)
        self._timeout = call_timeout
        self._closed = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel; idempotent."""
        if not self._closed:
            self._closed = True
            await self._channel.close()

    async def _call(self, call: Callable[..., Awaitable[T]], request: Any) -> T:
        """One management call, asked again while the gateway answers that it had no effect
        (UNAVAILABLE: not ready, shutting down, or a cluster partition moving), within the
        call's timeout (operations.md §10)."""
        if self._closed:
            raise EndpointClosedError()
        backoff = Backoff()
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                return await call(
                    request,
                    metadata=self._metadata,
                    timeout=max(0.05, deadline - time.monotonic()),
                )
            except grpc.aio.AioRpcError as error:
                failure = decode_status(error)
                delay = backoff.next_delay()
                if not isinstance(failure, UnavailableError) or (
                    time.monotonic() + delay + MANAGEMENT_RETRY_FLOOR > deadline
                ):
                    raise failure from None
            await asyncio.sleep(delay)

    async def register_agent(self, name: str) -> RegisteredAgent:
        """Register and host an agent; its token is in the answer, this once."""
        response = await self._call(
            self._stub.RegisterAgent, management_pb2.RegisterAgentRequest(name=name)
        )
        return wire.registered_agent_from_proto(response)

    async def agent_status(self, name: str) -> AgentStatus:
        """One agent's card, hosting, stream and backlog."""
        response = await self._call(
            self._stub.GetAgentStatus, management_pb2.GetAgentStatusRequest(name=name)
        )
        return wire.agent_status_from_proto(response.agent)

    async def list_agents(
        self, *, prefix: str | None = None, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[AgentStatus], str]:
        """One page of agents in name order and the next page's token ("" at the end)."""
        request = management_pb2.ListAgentsRequest(page_size=page_size, page_token=page_token)
        if prefix is not None:
            request.prefix = prefix
        response = await self._call(self._stub.ListAgents, request)
        return [wire.agent_status_from_proto(agent) for agent in response.agents], (
            response.next_page_token
        )

    async def all_agents(self, *, prefix: str | None = None) -> AsyncIterator[AgentStatus]:
        """Every agent, page after page."""
        token = ""
        while True:
            agents, token = await self.list_agents(prefix=prefix, page_token=token)
            for agent in agents:
                yield agent
            if not token:
                return

    async def conversations(
        self, agent_name: str, *, after_address: str | None = None, page_size: int = 0
    ) -> tuple[list[ConversationSummary], bool]:
        """One page of an agent's conversations in address order, and whether more follow."""
        request = management_pb2.SearchConversationsRequest(
            agent_name=agent_name, page_size=page_size
        )
        if after_address is not None:
            request.after_address = after_address
        response = await self._call(self._stub.SearchConversations, request)
        return [wire.conversation_from_proto(item) for item in response.conversations], (
            response.has_more
        )

    async def history(
        self,
        agent_name: str,
        address: str,
        *,
        after_record_hash: str | None = None,
        page_size: int = 0,
    ) -> tuple[list[ConversationRecord], bool]:
        """One page (at most 50) of a conversation's certified records in chain order."""
        request = management_pb2.ReadConversationRequest(
            agent_name=agent_name, address=address, page_size=page_size
        )
        if after_record_hash is not None:
            request.after_record_hash = after_record_hash
        response = await self._call(self._stub.ReadConversation, request)
        try:
            records = [wire.conversation_record_from_proto(record) for record in response.records]
        except InvalidRequestError:
            raise TransportError(grpc.StatusCode.INTERNAL, "records do not decode") from None
        return records, response.has_more

    async def rotate_token(self, name: str) -> str:
        """Revoke the agent's tokens (ending its stream) and return a new one."""
        response = await self._call(
            self._stub.RotateAgentToken, management_pb2.RotateAgentTokenRequest(name=name)
        )
        return response.token

    async def revoke_token(self, name: str) -> None:
        """Revoke every token of the agent and end its stream."""
        await self._call(
            self._stub.RevokeAgentToken, management_pb2.RevokeAgentTokenRequest(name=name)
        )

    async def status(self) -> GatewayStatus:
        """The daemon's version, mode, hosted agents and Router state."""
        response = await self._call(
            self._stub.GetGatewayStatus, management_pb2.GetGatewayStatusRequest()
        )
        return wire.gateway_status_from_proto(response)

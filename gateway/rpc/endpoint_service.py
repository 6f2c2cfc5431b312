"""`harness.v1.HarnessEndpointService` over the gateway core: the agent API.

Each method checks that the gateway is SERVING, authenticates the agent token, converts
the request (`harness_contract.wire`), calls the agent's `Endpoint`, and converts the answer.
Failures are statuses, translated once by the call wrapper of `gateway/rpc/calls.py` for the
methods marked `unary_rpc`/`stream_rpc` (house-style.md §15).

`Messages` and the agent's one stream slot (the rule is `AgentInbox.open_stream`'s; the
proto and every client state it the same way):

- A stream that gets the slot sends initial metadata `harness-stream: open` before any
  delivery. A refused one sends none and ends FAILED_PRECONDITION `already-listening`.
- `takeover: true` ends the agent's open stream at once (that call ends FAILED_PRECONDITION
  `already-listening`, and its client must not reconnect) and takes the slot.
- Without `takeover`, an open stream is given `HANDOVER_WAIT` (1 s, in
  `gateway.endpoint.inbox.coordinator`) to end: an agent that cancels its stream and
  reopens it at once gets the new stream, whatever it sent meanwhile and whatever the order
  in which the old call's cancellation and the new call reach the gateway. A stream still open after the wait is a live listener: `already-listening`.
- A client reconnecting after its stream failed in transit (its old call may still be
  half-open here, unknown to the gateway until keepalive notices) reconnects with
  `takeover` only if its previous call received `harness-stream: open`: then the slot was
  its own, and it never takes over another process's listener by accident.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncGenerator
from typing import Final

from harness_contract import wire
from harness_contract._gen.harness.v1 import endpoint_pb2, endpoint_pb2_grpc
from harness_contract.errors import InvalidRequestError, MessageTextError
from harness_contract.message_text import parse_message_text
from harness_contract.values import SendInput

from gateway.endpoint.api import (
    ACKNOWLEDGE_MAX_TOKENS,
    Endpoint,
    GatewayCore,
    GatewayState,
    NotServing,
)
from gateway.observability.logs import LOG_AGENT, LOG_RPC
from gateway.rpc.auth import authenticate_agent
from gateway.rpc.errors import Context, stream_rpc, unary_rpc

logger = logging.getLogger(__name__)

STREAM_OPEN_METADATA: Final = (("harness-stream", "open"),)
"""Initial metadata a `Messages` stream sends once it holds the agent's stream slot.

It tells a client that this stream, not just the channel, is open: a client that saw it
reconnects with `takeover` (its own stream may be half-open on the server), one that did
not keeps the caller's choice, so it never takes over another listener by accident. A
client that cancels its own stream and reopens it needs neither: the handover gives it the
slot (module docstring)."""


def check_serving(core: GatewayCore) -> None:
    """Refuse the call (UNAVAILABLE, NOT_READY or SHUTTING_DOWN) unless SERVING."""
    state = core.lifecycle.state
    if state is not GatewayState.SERVING:
        raise NotServing(state)


def remaining_seconds(context: Context) -> float | None:
    """The call's remaining deadline in seconds, or None when it has none."""
    remaining = context.time_remaining()
    if remaining is None or not math.isfinite(remaining):
        return None
    return max(0.0, remaining)


class HarnessEndpointService(endpoint_pb2_grpc.HarnessEndpointServiceServicer):
    """The agent API; the token decides the agent."""

    def __init__(self, core: GatewayCore) -> None:
        self._core = core

    async def _endpoint(self, context: Context, method: str) -> Endpoint:
        check_serving(self._core)
        endpoint = await authenticate_agent(self._core, context)
        # Log lines of this call name the agent and the method, never the token.
        LOG_AGENT.set(endpoint.agent_name)
        LOG_RPC.set(method)
        return endpoint

    @unary_rpc
    async def Send(  # noqa: N802 - the gRPC method name
        self, request: endpoint_pb2.SendRequest, context: Context
    ) -> endpoint_pb2.SendResponse:
        endpoint = await self._endpoint(context, "Send")
        send_input = wire.send_input_from_proto(request.input)
        failure_delivery = wire.failure_delivery_from_proto(request.failure_delivery)
        key = request.idempotency_key if request.HasField("idempotency_key") else None
        result = await endpoint.send(
            send_input,
            failure_delivery=failure_delivery,
            idempotency_key=key,
            deadline=remaining_seconds(context),
        )
        return endpoint_pb2.SendResponse(result=wire.send_result_to_proto(result))

    @stream_rpc
    async def Messages(  # noqa: N802 - the gRPC method name
        self, request: endpoint_pb2.MessagesRequest, context: Context
    ) -> AsyncGenerator[endpoint_pb2.MessagesResponse, None]:
        endpoint = await self._endpoint(context, "Messages")
        # ListenError (already-listening) propagates to the wrapper: FAILED_PRECONDITION.
        # Without takeover this may wait up to HANDOVER_WAIT for the agent's open stream to
        # end (a cancellation still in flight); a cancelled call stops waiting at once.
        stream = await endpoint.open_stream(takeover=request.takeover)
        try:
            # Shutdown may have ended the streams while this one waited for the slot.
            check_serving(self._core)
            await context.send_initial_metadata(STREAM_OPEN_METADATA)
            logger.info("stream attached takeover=%s", request.takeover)
            # StreamEnded (shutdown, revoked) and ListenError (taken over) propagate to
            # the wrapper, which ends the call with their statuses; a cancelled call
            # raises CancelledError here, which grpc.aio owns: it must propagate, not be answered.
            async for delivery in stream:
                yield endpoint_pb2.MessagesResponse(delivery=wire.delivery_to_proto(delivery))
        finally:
            # No phantom listener: the agent's stream slot is released however we leave.
            stream.close()
            logger.info("stream detached")

    @unary_rpc
    async def Acknowledge(  # noqa: N802 - the gRPC method name
        self, request: endpoint_pb2.AcknowledgeRequest, context: Context
    ) -> endpoint_pb2.AcknowledgeResponse:
        endpoint = await self._endpoint(context, "Acknowledge")
        tokens = list(request.delivery_tokens)
        if not 1 <= len(tokens) <= ACKNOWLEDGE_MAX_TOKENS:
            raise InvalidRequestError.of_field(
                f"delivery_tokens: 1 to {ACKNOWLEDGE_MAX_TOKENS:,} tokens, not {len(tokens):,}"
            )
        results = await endpoint.acknowledge(tokens)
        return endpoint_pb2.AcknowledgeResponse(
            results=[wire.acknowledge_result_to_proto(result) for result in results]
        )

    @unary_rpc
    async def ParseMessageText(  # noqa: N802 - the gRPC method name
        self, request: endpoint_pb2.ParseMessageTextRequest, context: Context
    ) -> endpoint_pb2.ParseMessageTextResponse:
        await self._endpoint(context, "ParseMessageText")
        # The contract's answer is `Either<SendInput, MessageTextError>`: a text that fails
        # to parse is the call's answer (the response's `error` arm), not a failed call.
        try:
            result: SendInput | MessageTextError = parse_message_text(request.to, request.text)
        except MessageTextError as error:
            result = error
        return wire.parse_result_to_proto(result)

    @unary_rpc
    async def ReadSend(  # noqa: N802 - the gRPC method name
        self, request: endpoint_pb2.ReadSendRequest, context: Context
    ) -> endpoint_pb2.ReadSendResponse:
        endpoint = await self._endpoint(context, "ReadSend")
        state = await endpoint.read_send(request.idempotency_key)
        return wire.send_state_to_proto(state)

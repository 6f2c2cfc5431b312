"""One hosted agent's HarnessEndpoint: the send pipeline and inbound classification.

engine.md §6 (send pipeline) and §7 (inbound): a multicast validates and builds its
content, canonicalizes and resolves its address, waits for the Router attachment, binds
its intent durably, and waits — bounded — for the Router to accept its proposal and for
this daemon to promote the certified record. Inbound, a classification pass turns each
promoted remote-authored record into an inbox item under the delivery's token, or consumes
it; it runs with or without a listener.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from gateway.contract.addresses import canonicalize, unknown_agent_error
from gateway.contract.codec import CodecError, message_from_json
from gateway.contract.content import (
    MULTICAST_VALUE,
    collective_parts,
    multicast_content,
    without_part,
)
from gateway.contract.errors import (
    CollectiveError,
    RequestNone,
    SendError,
    SendErrorReason,
)
from gateway.contract.ids import mint_collective
from gateway.contract.jsonvalue import JsonValueError, parse_canonical_json
from gateway.contract.values import (
    AskOperation,
    DirectMessage,
    FailureDelivery,
    GroupMessage,
    InboundMessage,
    MessageInput,
    MulticastItem,
    MulticastOperation,
    ResponseInput,
    SendInput,
    SendResult,
)
from gateway.endpoint.api import SendAbsent, SendState
from gateway.endpoint.inbox import AcknowledgeResult, AgentInbox, MessageStream
from gateway.engine import protocol as p
from gateway.engine.certifier import BindRefused, Certifier, Identity
from gateway.engine.network import FatalStoreError, Network
from gateway.registry import (
    Found,
    RegistryClient,
    RegistryError,
    RegistryVersionMismatch,
)
from gateway.store.errors import CommitAmbiguous
from gateway.store.port import Store
from gateway.store.records import DeliveryState, SetDeliveryState, Write

logger = logging.getLogger(__name__)

LOCAL_DRAIN_TIMEOUT: Final = 10.0
"""Seconds the Router has to accept a send's proposal before `delivery-pending` (§6 step 9)."""

DEADLINE_MARGIN: Final = 1.0
"""Seconds before the call's gRPC deadline at which a send answers anyway (§6)."""

RESOLVE_CONCURRENCY: Final = 8
"""Registry lookups one send runs at once."""

CLASSIFY_PAGE: Final = 256
"""Pending deliveries classified per store round trip."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SendTimeouts:
    """The send pipeline's bounds (settings)."""

    attach: float = 45.0
    drain: float = LOCAL_DRAIN_TIMEOUT
    certify: float = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SendObserver:
    """Metrics hooks of the send pipeline."""

    on_send: Callable[[str, str], None] = lambda op, outcome: None
    """(op, outcome): `ok` or the closed reason."""
    on_delivery_published: Callable[[str], None] = lambda item: None
    on_record_consumed: Callable[[str], None] = lambda kind: None


class AgentRuntime:
    """The `Endpoint` of one hosted agent."""

    def __init__(
        self,
        *,
        identity: Identity,
        certifier: Certifier,
        network: Network,
        registry: RegistryClient,
        store: Store,
        inbox: AgentInbox,
        timeouts: SendTimeouts,
        observer: SendObserver | None = None,
    ) -> None:
        self.identity = identity
        self.certifier = certifier
        self.inbox = inbox
        self._network = network
        self._registry = registry
        self._store = store
        self._timeouts = timeouts
        self._observer = observer or SendObserver()
        self._classify_wanted = asyncio.Event()
        self._classifier: asyncio.Task[None] | None = None

    @property
    def agent_name(self) -> str:
        """The agent's name."""
        return self.identity.agent_name

    @property
    def address(self) -> str:
        """`agent:<name>`."""
        return f"agent:{self.identity.agent_name}"

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the classification pass (it first catches up on stored deliveries)."""
        if self._classifier is None:
            self._classifier = asyncio.ensure_future(self._classify_loop())
            self._classifier.set_name(f"classify-{self.identity.agent_name}")
            self._classify_wanted.set()

    async def close(self) -> None:
        """Stop the classification pass; idempotent."""
        if self._classifier is not None:
            self._classifier.cancel()
            await asyncio.gather(self._classifier, return_exceptions=True)
            self._classifier = None

    def deliveries_ready(self) -> None:
        """New pending deliveries are durable: classify them."""
        self._classify_wanted.set()

    # --- Endpoint ----------------------------------------------------------------------------

    def open_stream(self, *, takeover: bool) -> MessageStream:
        """Open the agent's one stream (raises `ListenError`)."""
        return self.inbox.open_stream(takeover=takeover)

    async def acknowledge(self, tokens: Sequence[str]) -> list[AcknowledgeResult]:
        """Retire deliveries, one result per token."""
        return await self.inbox.acknowledge(tokens)

    async def read_send(self, idempotency_key: str) -> SendState:
        """Idempotency keys are recorded from the collectives issue on; none is held yet."""
        return SendAbsent()

    async def send(
        self,
        send_input: SendInput,
        *,
        failure_delivery: FailureDelivery = FailureDelivery.RESULT,
        idempotency_key: str | None = None,
        deadline: float | None = None,
    ) -> SendResult:
        """Run one send (engine.md §6); raises the closed errors."""
        started = time.monotonic()
        op = _op_of(send_input)
        try:
            result = await self._send(send_input, started=started, deadline=deadline)
        except SendError as error:
            self._observer.on_send(op, error.reason)
            raise
        except CollectiveError as error:
            self._observer.on_send(op, error.reason)
            raise
        self._observer.on_send(op, "ok")
        return result

    async def _send(
        self, send_input: SendInput, *, started: float, deadline: float | None
    ) -> SendResult:
        match send_input:
            case MessageInput(to=to, text=text, collective=None | MulticastOperation()):
                await self._multicast(to, text, started=started, deadline=deadline)
                return SendResult()
            case MessageInput(collective=AskOperation()):
                # gather and all_gather arrive with the collectives issue.
                raise SendError(
                    SendErrorReason.CERTIFICATION_UNAVAILABLE,
                    "gather and all_gather are not available on this gateway yet",
                )
            case ResponseInput():
                _, operation_id = mint_collective(self.address)
                raise CollectiveError(operation_id, RequestNone())
            case _:
                raise SendError(SendErrorReason.CONTENT_INVALID)

    async def _multicast(
        self, to: str, text: str, *, started: float, deadline: float | None
    ) -> None:
        content = multicast_content(text)
        conversation = canonicalize(to, self.identity.agent_name)
        budget_end = started + self._budget(deadline)
        descriptor = await self._resolve(conversation.others)
        attached = await self._network.wait_attached(
            max(0.0, min(self._timeouts.attach, budget_end - time.monotonic()))
        )
        if not attached:
            raise SendError(SendErrorReason.NETWORK_UNAVAILABLE)
        try:
            post_id, effects = self.certifier.bind(descriptor, content, now=time.time())
        except BindRefused as refused:
            raise SendError(SendErrorReason.CERTIFICATION_UNAVAILABLE, str(refused)) from None
        latch = self._network.latch(post_id)
        drained = self._network.drained(post_id)
        try:
            await self._network.commit(effects)
        except FatalStoreError as error:
            self._network.forget(post_id)
            if isinstance(error.__cause__, CommitAmbiguous):
                raise SendError(SendErrorReason.OUTCOME_UNKNOWN) from None
            self.certifier.unbind(post_id)
            raise SendError(SendErrorReason.PERSISTENCE_FAILED) from None
        # From here the intent is bound: any bound past this point is delivery-pending,
        # and the post still certifies in the background.
        try:
            await self._wait_certified(post_id, latch, drained, budget_end)
        finally:
            self._network.forget(post_id)

    def _budget(self, deadline: float | None) -> float:
        budget = self._timeouts.attach + self._timeouts.drain + self._timeouts.certify
        if deadline is not None:
            budget = min(budget, max(0.0, deadline - DEADLINE_MARGIN))
        return budget

    async def _wait_certified(
        self,
        post_id: str,
        latch: asyncio.Future[str],
        drained: asyncio.Future[None],
        budget_end: float,
    ) -> None:
        """Steps 9-10: the Router accepts the proposal within the drain bound, then this
        daemon promotes the record within the certification bound; past either, the
        bound intent answers `delivery-pending` and keeps going."""
        drain_end = min(budget_end, time.monotonic() + self._timeouts.drain)
        certify_end = min(budget_end, drain_end + self._timeouts.certify)
        # Waiting on the futures directly (not through wait_for) so that a send that gives
        # up never cancels them: `forget` does, once the send has answered.
        waiters: set[asyncio.Future[object]] = {latch, drained}  # type: ignore[arg-type]
        await asyncio.wait(
            waiters,
            timeout=max(0.0, drain_end - time.monotonic()),
            return_when=asyncio.FIRST_COMPLETED,
        )
        if latch.done():
            self._latch_result(latch)
            return
        if not drained.done() and self.certifier.was_proposed(post_id):
            raise SendError(SendErrorReason.DELIVERY_PENDING)
        await asyncio.wait({latch}, timeout=max(0.0, certify_end - time.monotonic()))
        if not latch.done():
            raise SendError(SendErrorReason.DELIVERY_PENDING)
        self._latch_result(latch)

    @staticmethod
    def _latch_result(latch: asyncio.Future[str]) -> None:
        if latch.cancelled():
            # The network closed (shutdown): the bound intent is proposed again after restart.
            raise SendError(SendErrorReason.DELIVERY_PENDING)

    async def _resolve(self, others: Sequence[str]) -> p.MembershipDescriptor:
        """Registry lookups of the other members; the first failing name decides (§6 step 4)."""
        semaphore = asyncio.Semaphore(RESOLVE_CONCURRENCY)

        async def lookup(name: str) -> object:
            async with semaphore:
                try:
                    return await self._registry.lookup_by_name(name)
                except RegistryError as error:
                    return error

        outcomes = await asyncio.gather(*(lookup(name) for name in others))
        cards = [self.identity.card]
        for name, outcome in zip(others, outcomes, strict=True):
            match outcome:
                case Found(card=card):
                    cards.append(card)
                case RegistryVersionMismatch():
                    raise SendError(SendErrorReason.VERSION_MISMATCH)
                case RegistryError():
                    raise SendError(SendErrorReason.NETWORK_UNAVAILABLE)
                case _:
                    raise unknown_agent_error(name)
        try:
            return p.build_membership(cards)
        except p.ProtocolError as error:
            logger.error("membership could not be built: %s", error.detail)
            raise SendError(SendErrorReason.CERTIFICATION_UNAVAILABLE) from None

    # --- classification ----------------------------------------------------------------------

    async def _classify_loop(self) -> None:
        while True:
            await self._classify_wanted.wait()
            self._classify_wanted.clear()
            while await self._classify_page():
                pass

    async def _classify_page(self) -> bool:
        """Classify one page of pending deliveries in one transaction; True if more may wait."""
        rows = await self._store.pending_deliveries(self.identity.agent_id, CLASSIFY_PAGE)
        if not rows:
            return False
        writes: list[Write] = []
        published: list[str] = []
        for row in rows:
            item_writes, kind = self._classify(row.token, row.projection)
            writes.extend(item_writes)
            published.append(kind)
        await self._store.apply(writes)
        self.inbox.notify()
        for kind in published:
            if kind == "multicast":
                self._observer.on_delivery_published("multicast")
            else:
                self._observer.on_record_consumed(kind)
        return len(rows) == CLASSIFY_PAGE

    def _classify(self, token: str, projection: bytes) -> tuple[list[Write], str]:
        """The writes that classify one delivery, and its outcome (`multicast` or the
        consumed kind). The rules are the contract's "Inbound items"."""
        agent_id = self.identity.agent_id
        consumed = SetDeliveryState(agent_id=agent_id, token=token, state=DeliveryState.CONSUMED)
        try:
            message = message_from_json(parse_canonical_json(projection))
        except (CodecError, JsonValueError):
            logger.exception("a delivery projection does not decode; consumed")
            return [consumed], "other"
        parts = collective_parts(message.content)
        content = message.content
        if len(parts) > 1:
            logger.info("record consumed: duplicate collective part post_id=%s", message.post_id)
            return [consumed], "other"
        if parts:
            index, value = parts[0]
            if value != MULTICAST_VALUE:
                # Requests, answers and closes are the collectives issue's; until then they
                # are consumed here and never delivered.
                kind = _collective_kind(value)
                logger.info("record consumed: collective part kind=%s", kind)
                return [
                    consumed
                ], "answer" if kind == "response" else "close" if kind == "close" else "other"
            content = without_part(content, index)
            if not content:
                return [consumed], "other"
        item = MulticastItem(message=_with_content(message, content))
        _, write = self.inbox.prepare(item, token=token)
        return [
            SetDeliveryState(agent_id=agent_id, token=token, state=DeliveryState.CLASSIFIED),
            write,
        ], "multicast"


def _collective_kind(value: object) -> str:
    if isinstance(value, dict):
        kind = value.get("kind")
        if isinstance(kind, str):
            return kind
    return "malformed"


def _with_content(message: InboundMessage, content: tuple[object, ...]) -> InboundMessage:
    match message:
        case DirectMessage():
            return DirectMessage(
                post_id=message.post_id,
                address=message.address,
                sender=message.sender,
                content=content,  # type: ignore[arg-type]
            )
        case GroupMessage():
            return GroupMessage(
                post_id=message.post_id,
                address=message.address,
                sender=message.sender,
                members=message.members,
                content=content,  # type: ignore[arg-type]
            )


def _op_of(send_input: SendInput) -> str:
    match send_input:
        case MessageInput(collective=AskOperation(op=op)):
            return op.value
        case MessageInput():
            return "multicast"
        case ResponseInput():
            return "answer"

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
import contextvars
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from gateway.collectives.runtime import (
    Classified,
    CollectiveRefusal,
    Collectives,
    PostHandle,
)
from gateway.contract.addresses import canonicalize, name_of, unknown_agent_error
from gateway.contract.codec import CodecError, message_from_json
from gateway.contract.collective_part import (
    ClosePart,
    Duplicate,
    Malformed,
    MulticastPart,
    RequestPart,
    ResponsePart,
    read_collective,
)
from gateway.contract.content import multicast_content, text_of
from gateway.contract.errors import HarnessError, SendError, SendErrorReason
from gateway.contract.jsonvalue import JsonValueError, parse_canonical_json
from gateway.contract.values import (
    AskOperation,
    Content,
    DirectMessage,
    FailureDelivery,
    GroupMessage,
    InboundItem,
    InboundMessage,
    MessageInput,
    MulticastItem,
    MulticastOperation,
    OperationFailedItem,
    ResponseInput,
    SendInput,
    SendResult,
)
from gateway.endpoint.api import SendState
from gateway.endpoint.export import HistoryExport
from gateway.endpoint.idempotency import KeyResolution, SendLedger
from gateway.endpoint.inbox import AcknowledgeResult, AgentInbox, MessageStream
from gateway.engine import protocol as p
from gateway.engine.certifier import BindRefused, Certifier, Effects, Identity
from gateway.engine.network import FatalStoreError, Network
from gateway.registry import Found, RegistryClient, RegistryError, RegistryVersionMismatch
from gateway.store.errors import CommitAmbiguous, StoreError
from gateway.store.port import Store
from gateway.store.records import (
    DeliveryRow,
    DeliveryState,
    PutInboxItem,
    SetDeliveryState,
    Write,
)

logger = logging.getLogger(__name__)

_INVOCATION_POSTS: contextvars.ContextVar[list[PostHandle] | None] = contextvars.ContextVar(
    "invocation_posts", default=None
)
"""The posts the current send invocation bound (for the history export's `postIds`)."""

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

    on_send: Callable[[str, str | HarnessError], None] = lambda op, outcome: None
    """(op, outcome): `ok`, or the failure itself (the metrics give every failure its
    closed label, so counting one never fails the answered send)."""
    on_delivery_published: Callable[[str], None] = lambda item: None
    on_record_consumed: Callable[[str], None] = lambda kind: None
    on_send_refused_inbound: Callable[[str], None] = lambda reason: None
    on_member_outcome: Callable[[str, str], None] = lambda op, outcome: None
    on_collective_result: Callable[[str, str], None] = lambda op, end: None
    on_key_resolution: Callable[[KeyResolution], None] = lambda resolution: None


@dataclass(frozen=True, slots=True)
class _Bound:
    """One post of a bind: its route and the effects its bind produced."""

    conversation_id: str
    post_id: str
    local: bool
    effects: Effects


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
        run_id: str,
        export: HistoryExport | None = None,
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
        self.export = export
        if export is not None:
            inbox.on_offer = export.offered
        self.ledger = SendLedger(
            agent_id=identity.agent_id,
            store=store,
            run_id=run_id,
            on_resolution=self._observer.on_key_resolution,
        )
        self.collectives = Collectives(
            self,
            on_member_outcome=self._observer.on_member_outcome,
            on_result=self._observer.on_collective_result,
        )

    @property
    def agent_name(self) -> str:
        """The agent's name."""
        return self.identity.agent_name

    @property
    def address(self) -> str:
        """`agent:<name>`."""
        return f"agent:{self.identity.agent_name}"

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Resume collectives and start the classification pass (it first catches up on
        stored deliveries)."""
        if self._classifier is None:
            await self.collectives.resume()
            self._classifier = asyncio.ensure_future(self._classify_loop())
            self._classifier.set_name(f"classify-{self.identity.agent_name}")
            self._classify_wanted.set()

    async def close(self) -> None:
        """Stop keyed invocations, the collectives' timers and the classification pass."""
        await self.ledger.close()
        await self.collectives.close()
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
        """The state of an idempotency key (engine.md §9)."""
        return await self.ledger.read(idempotency_key)

    async def send(
        self,
        send_input: SendInput,
        *,
        failure_delivery: FailureDelivery = FailureDelivery.RESULT,
        idempotency_key: str | None = None,
        deadline: float | None = None,
    ) -> SendResult:
        """Run one send (engine.md §6, collectives.md §1); raises the closed errors.

        With an idempotency key the send runs at most once and every call returns its one
        outcome (engine.md §9)."""
        op = _op_of(send_input)
        try:
            if idempotency_key is None:
                result = await self._invocation(send_input, failure_delivery, deadline)
            else:
                result = await self.ledger.run(
                    idempotency_key,
                    send_input,
                    failure_delivery,
                    lambda: self._invocation(send_input, failure_delivery, deadline),
                )
        except HarnessError as error:
            self._observer.on_send(op, error)
            raise
        self._observer.on_send(op, "ok")
        return result

    async def _invocation(
        self, send_input: SendInput, failure_delivery: FailureDelivery, deadline: float | None
    ) -> SendResult:
        """One send invocation, exported once when it completes."""
        handles: list[PostHandle] = []
        token = _INVOCATION_POSTS.set(handles)
        try:
            result = await self._send(
                send_input,
                started=time.monotonic(),
                deadline=deadline,
                failure_delivery=failure_delivery,
            )
        except HarnessError as error:
            if self.export is not None:
                self.export.failed(send_input, error.message)
            raise
        finally:
            _INVOCATION_POSTS.reset(token)
        if self.export is not None:
            certified = [
                handle.post_id
                for handle in handles
                if handle.certified.done() and not handle.certified.cancelled()
            ]
            self.export.sent(send_input, certified, result.operation_id)
        return result

    async def _send(
        self,
        send_input: SendInput,
        *,
        started: float,
        deadline: float | None,
        failure_delivery: FailureDelivery,
    ) -> SendResult:
        match send_input:
            case MessageInput(to=to, text=text, collective=None | MulticastOperation()):
                # A multicast's failure is always returned, whatever failureDelivery says.
                await self._multicast(to, text, started=started, deadline=deadline)
                return SendResult()
            case MessageInput(to=to, text=text, collective=AskOperation() as ask):
                try:
                    operation_id = await self.collectives.ask(
                        op=ask.op,
                        to=to,
                        question=text,
                        deadline=ask.deadline,
                        requested_schema=ask.requested_schema,
                    )
                except CollectiveRefusal as refusal:
                    return await self._refused(refusal, failure_delivery)
                return SendResult(operation_id=operation_id)
            case ResponseInput(to=to, response=response):
                try:
                    operation_id = await self.collectives.answer(to=to, response=response)
                except CollectiveRefusal as refusal:
                    return await self._refused(refusal, failure_delivery)
                return SendResult(operation_id=operation_id)
            case _:
                raise SendError(SendErrorReason.CONTENT_INVALID)

    async def _refused(
        self, refusal: CollectiveRefusal, failure_delivery: FailureDelivery
    ) -> SendResult:
        """Return a refusal, or with `failureDelivery: "inbound"` emit it as an
        `operationFailed` item and complete naming the operation (collectives.md §1.7)."""
        if failure_delivery is FailureDelivery.RESULT:
            raise refusal.error
        item = OperationFailedItem(
            id=refusal.operation_id, to=refusal.to, error=refusal.error.message
        )
        try:
            await self.inbox.publish(item)
        except StoreError:
            # If that item cannot be persisted, the send fails with the refusal.
            raise refusal.error from None
        self._observer.on_delivery_published("operationFailed")
        self._observer.on_send_refused_inbound(refusal.error.reason)
        return SendResult(operation_id=refusal.operation_id)

    async def _multicast(
        self, to: str, text: str, *, started: float, deadline: float | None
    ) -> None:
        content = multicast_content(text)
        conversation = canonicalize(to, self.identity.agent_name)
        budget_end = started + self._budget(deadline)
        cards = await self.resolve_cards(conversation.others)
        for name in conversation.others:
            failure = cards[name]
            if isinstance(failure, SendError):
                raise failure
        descriptor = self.descriptor_with(
            [
                self.identity.card,
                *(card for card in cards.values() if not isinstance(card, SendError)),
            ]
        )
        [handle] = await self.bind_posts(
            [(descriptor, content)], within=max(0.0, budget_end - time.monotonic())
        )
        # From here the intent is bound: any bound past this point is delivery-pending,
        # and the post still certifies in the background.
        try:
            await self._wait_certified(handle, budget_end)
        finally:
            self._network.forget(handle.post_id)

    def _budget(self, deadline: float | None) -> float:
        budget = self._timeouts.attach + self._timeouts.drain + self._timeouts.certify
        if deadline is not None:
            budget = min(budget, max(0.0, deadline - DEADLINE_MARGIN))
        return budget

    # --- posting (engine.md §6 steps 6-10), also the collectives' host -----------------------

    @property
    def agent_id(self) -> str:
        """The agent's AgentId."""
        return self.identity.agent_id

    @property
    def own_card(self) -> p.SignedAgentCard:
        """The agent's signed card."""
        return self.identity.card

    async def bind_posts(
        self,
        posts: Sequence[tuple[p.MembershipDescriptor, Content]],
        *,
        extra_writes: Callable[[Sequence[str]], Sequence[Write]] = lambda post_ids: (),
        within: float,
    ) -> list[PostHandle]:
        """Bind every post's intent in one transaction with `extra_writes(post_ids)`.

        Posts whose members are all hosted here go through local order (engine.md §5.10)
        and need no Router; when any post crosses daemons, the Router attachment is waited
        for first (at most the attach bound). Raises `SendError` before anything is bound."""
        local = self._network.local
        routes = [local.accepts(descriptor) for descriptor, _ in posts]
        if not all(routes):
            attached = await self._network.wait_attached(
                max(0.0, min(self._timeouts.attach, within))
            )
            if not attached:
                raise SendError(SendErrorReason.NETWORK_UNAVAILABLE)
        for (descriptor, _), is_local in zip(posts, routes, strict=True):
            if is_local:
                await local.founded(descriptor.conversation_id)
        now = time.time()
        bound: list[_Bound] = []
        try:
            for (descriptor, content), is_local in zip(posts, routes, strict=True):
                if is_local:
                    post_id, writes = local.bind(self.certifier, descriptor, content, now=now)
                    one = Effects()
                    one.writes.extend(writes)
                else:
                    post_id, one = self.certifier.bind(descriptor, content, now=now)
                bound.append(_Bound(descriptor.conversation_id, post_id, is_local, one))
        except BindRefused as refused:
            self._unbind(bound)
            raise SendError(SendErrorReason.CERTIFICATION_UNAVAILABLE, str(refused)) from None
        post_ids = [post.post_id for post in bound]
        effects = Effects()
        for post in bound:
            effects.writes.extend(post.effects.writes)
            effects.envelopes.extend(post.effects.envelopes)
        effects.writes.extend(extra_writes(post_ids))
        loop = asyncio.get_running_loop()
        handles: list[PostHandle] = []
        for post in bound:
            post_id = post.post_id
            drained: asyncio.Future[None]
            if post.local:
                # No Router step: nothing to drain (engine.md §6 step 9 is skipped).
                drained = loop.create_future()
                drained.set_result(None)
            else:
                drained = self._network.drained(post_id)
            handles.append(
                PostHandle(post_id=post_id, certified=self._network.latch(post_id), drained=drained)
            )
        invocation = _INVOCATION_POSTS.get()
        if invocation is not None:
            invocation.extend(handles)
        # A lone post of a local conversation with nothing else waiting certifies in its
        # bind's own unit: one commit per send (engine.md §5.10 Atomic unit, rule 2).
        unit = (
            local.unit_in_bind(bound[0].conversation_id, bound[0].post_id)
            if len(bound) == 1 and bound[0].local
            else None
        )
        try:
            if all(routes):
                # Only the queue entries changed in memory: a definite failure undoes them
                # and the daemon goes on (an ambiguous COMMIT is fatal in the writer).
                writes = effects.writes if unit is None else [*effects.writes, *unit.writes]
                await self._store.apply(writes)
            else:
                await self._network.commit(effects)
        except (FatalStoreError, StoreError) as error:
            if unit is not None:
                local.abandon(unit)
            for post_id in post_ids:
                self._network.forget(post_id)
            if isinstance(error, CommitAmbiguous) or isinstance(error.__cause__, CommitAmbiguous):
                raise SendError(SendErrorReason.OUTCOME_UNKNOWN) from None
            self._unbind(bound)
            raise SendError(SendErrorReason.PERSISTENCE_FAILED) from None
        local.bound((post.conversation_id, post.post_id) for post in bound if post.local)
        if unit is not None:
            local.committed(unit)
        return handles

    def _unbind(self, bound: Sequence[_Bound]) -> None:
        self._network.local.unbind(
            (post.conversation_id, post.post_id) for post in bound if post.local
        )
        for post in bound:
            if not post.local:
                self.certifier.unbind(post.post_id)

    async def await_certified(self, handle: PostHandle) -> str:
        """The post's RecordHash within the send bound, else `delivery-pending`."""
        budget_end = time.monotonic() + self._timeouts.drain + self._timeouts.certify
        try:
            return await self._wait_certified(handle, budget_end)
        finally:
            self._network.forget(handle.post_id)

    async def _wait_certified(self, handle: PostHandle, budget_end: float) -> str:
        """Steps 9-10: the Router accepts the proposal within the drain bound, then this
        daemon promotes the record within the certification bound; past either, the
        bound intent answers `delivery-pending` and keeps going."""
        latch, drained = handle.certified, handle.drained
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
        if not latch.done():
            if not drained.done() and self.certifier.was_proposed(handle.post_id):
                raise SendError(SendErrorReason.DELIVERY_PENDING)
            await asyncio.wait({latch}, timeout=max(0.0, certify_end - time.monotonic()))
        if not latch.done() or latch.cancelled():
            # Past the bound, or the network closed (shutdown): the bound intent is proposed
            # again until it certifies.
            raise SendError(SendErrorReason.DELIVERY_PENDING)
        return latch.result()

    def latch(self, post_id: str) -> asyncio.Future[str]:
        """A future resolved when this daemon promotes the post."""
        return self._network.latch(post_id)

    async def intent_outcome(self, post_id: str) -> str | None:
        """The RecordHash of a completed own intent, or None while it is open."""
        row = await self._store.intent(self.identity.agent_id, post_id)
        return None if row is None else row.record_hash

    def membership(self, conversation_id: str) -> p.MembershipDescriptor | None:
        """A stored conversation's descriptor."""
        local = self._network.local.membership_of(conversation_id)
        return local if local is not None else self.certifier.membership_of(conversation_id)

    def descriptor_with(self, cards: Sequence[p.SignedAgentCard]) -> p.MembershipDescriptor:
        """The descriptor of a member set (cards verified by the Registry client)."""
        try:
            return p.build_membership(cards)
        except p.ProtocolError as error:
            logger.error("membership could not be built: %s", error.detail)
            raise SendError(SendErrorReason.CERTIFICATION_UNAVAILABLE) from None

    def prepare_item(
        self, item: InboundItem, *, token: str | None = None
    ) -> tuple[str, PutInboxItem]:
        """An inbox write for an emitted item (fresh token unless given)."""
        return self.inbox.prepare(item, token=token)

    async def commit(self, writes: Sequence[Write]) -> None:
        """Commit writes atomically and wake the stream (items may be among them)."""
        await self._store.apply(writes)
        self.inbox.notify()

    def published(self, kind: str) -> None:
        """An item was made durable under a fresh token."""
        self._observer.on_delivery_published(kind)

    async def resolve_cards(self, names: Sequence[str]) -> dict[str, p.SignedAgentCard | SendError]:
        """Registry lookups of members, at most eight at once: each a card or why not."""
        semaphore = asyncio.Semaphore(RESOLVE_CONCURRENCY)

        async def lookup(name: str) -> p.SignedAgentCard | SendError:
            async with semaphore:
                try:
                    outcome = await self._registry.lookup_by_name(name)
                except RegistryVersionMismatch:
                    return SendError(SendErrorReason.VERSION_MISMATCH)
                except RegistryError:
                    return SendError(SendErrorReason.NETWORK_UNAVAILABLE)
            if isinstance(outcome, Found):
                return outcome.card
            return unknown_agent_error(name)

        outcomes = await asyncio.gather(*(lookup(name) for name in names))
        return dict(zip(names, outcomes, strict=True))

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
        outcomes: list[str] = []
        emitted: list[str] = []
        for row in rows:
            item_writes, outcome, published = self._classify(row)
            writes.extend(item_writes)
            outcomes.append(outcome)
            emitted.extend(published)
        await self._store.apply(writes)
        self.inbox.notify()
        for outcome in outcomes:
            if outcome in ("multicast", "collectiveRequest"):
                self._observer.on_delivery_published(outcome)
            else:
                self._observer.on_record_consumed(outcome)
        for kind in emitted:
            self._observer.on_delivery_published(kind)
        return len(rows) == CLASSIFY_PAGE

    def _classify(self, row: DeliveryRow) -> tuple[list[Write], str, tuple[str, ...]]:
        """The writes that classify one delivery, its outcome (`multicast`,
        `collectiveRequest` or the consumed kind) and items emitted under fresh tokens.
        The rules are the contract's "Inbound items" and collectives.md §2.4-§2.5."""
        agent_id = self.identity.agent_id
        token = row.token
        consumed = SetDeliveryState(agent_id=agent_id, token=token, state=DeliveryState.CONSUMED)
        try:
            message = message_from_json(parse_canonical_json(row.projection))
        except (CodecError, JsonValueError):
            logger.exception("a delivery projection does not decode; consumed")
            return [consumed], "other", ()
        read = read_collective(message.content)
        sender = name_of(message.sender) or ""
        is_group = isinstance(message, GroupMessage)
        classified: Classified
        match read.part:
            case None | MulticastPart():
                if not read.rest:
                    return [consumed], "other", ()
                item = MulticastItem(message=_with_content(message, read.rest))
                _, write = self.inbox.prepare(item, token=token)
                classified_state = SetDeliveryState(
                    agent_id=agent_id, token=token, state=DeliveryState.CLASSIFIED
                )
                return [classified_state, write], "multicast", ()
            case RequestPart():
                classified = self.collectives.classify_request(
                    read.part,
                    sender=sender,
                    conversation_id=row.conversation_id,
                    conversation_address=message.address,
                    group_members=tuple(name_of(member) or "" for member in message.members)
                    if isinstance(message, GroupMessage)
                    else None,
                    post_id=message.post_id,
                    question=text_of(read.rest),
                )
            case ResponsePart():
                classified = self.collectives.classify_response(
                    read.part,
                    sender=sender,
                    conversation_address=message.address,
                    is_group=is_group,
                    record_hash=row.record_hash,
                )
            case ClosePart():
                classified = self.collectives.classify_close(
                    read.part, sender=sender, conversation_id=row.conversation_id
                )
            case Malformed() | Duplicate():
                logger.info(
                    "record consumed: %s collective part",
                    "duplicated" if isinstance(read.part, Duplicate) else "malformed",
                )
                return [consumed], "other", ()
        writes = list(classified.writes)
        if classified.item is not None:
            _, write = self.inbox.prepare(classified.item, token=token)
            writes.append(
                SetDeliveryState(agent_id=agent_id, token=token, state=DeliveryState.CLASSIFIED)
            )
            writes.append(write)
            return writes, "collectiveRequest", classified.published
        writes.append(consumed)
        return writes, classified.consumed or "other", classified.published


def _with_content(message: InboundMessage, content: Content) -> InboundMessage:
    match message:
        case DirectMessage():
            return DirectMessage(
                post_id=message.post_id,
                address=message.address,
                sender=message.sender,
                content=content,
            )
        case GroupMessage():
            return GroupMessage(
                post_id=message.post_id,
                address=message.address,
                sender=message.sender,
                members=message.members,
                content=content,
            )


def _op_of(send_input: SendInput) -> str:
    match send_input:
        case MessageInput(collective=AskOperation(op=op)):
            return op.value
        case MessageInput():
            return "multicast"
        case ResponseInput():
            return "answer"

"""One hosted agent's HarnessEndpoint: the send pipeline and inbound classification.

engine.md §6 (send pipeline) and §7 (inbound): a multicast validates and builds its
content, canonicalizes and resolves its address, waits for the Router attachment, binds
its intent durably, and waits — bounded — for the Router to accept its proposal and for
this daemon to promote the certified record. Inbound, a classification pass turns each
promoted remote-authored record into an inbox item under the delivery's token, or consumes
it; it runs with or without a listener.

`AgentPosting` is the agent's posting side — resolving members, binding posts through the
network (`Network.bind` owns the bind and its rollback), waiting for them to certify, and
committing inbox items. The multicast path uses it, and it is the collectives'
`PostingPort`. Both are built from one `AgentParts`; every bound is measured on its `Clock`.

The module is long because one agent's send paths belong together: the pipeline, the keyed
send's resumption after a restart (which answers as the pipeline would have, from the same
bounds and refusal routing, engine.md §9.1) and the classification that feeds the same
collectives; split, each half would reach into the other's private state.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from harness_contract.addresses import agent_address, canonicalize, name_of, unknown_agent_error
from harness_contract.codec import CodecError, message_from_json
from harness_contract.collective_part import (
    ClosePart,
    Duplicate,
    Malformed,
    MulticastPart,
    RequestPart,
    ResponsePart,
    read_collective,
)
from harness_contract.content import multicast_content, text_of
from harness_contract.errors import HarnessError, SendError, SendErrorReason
from harness_contract.guidance import CheckedGuidance
from harness_contract.jsonvalue import JsonValue, JsonValueError, parse_canonical_json
from harness_contract.kinds import (
    CollectiveEnd,
    ConsumedKind,
    DeliveryItem,
    MemberOutcomeKind,
    SendOp,
)
from harness_contract.values import (
    AskOperation,
    CollectiveOp,
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

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.collectives.port import (
    COLLECTIVE_SEND_WAIT,
    MAX_OPEN_OPERATIONS,
    Classified,
    CollectiveRefusal,
)
from gateway.collectives.runtime import Collectives
from gateway.endpoint.api import SendState
from gateway.endpoint.export import HistoryExport
from gateway.endpoint.idempotency import KeyResolution, Resumption, SendLedger, bound_bytes
from gateway.endpoint.inbox import AcknowledgeResult, AgentInbox, InboxScreen, MessageStream
from gateway.endpoint.pending import PendingDeliveries
from gateway.engine import protocol as p
from gateway.engine.certifier import Certifier, Identity
from gateway.engine.network import FatalStoreError, Network, PostHandle
from gateway.firewall import Firewall
from gateway.firewall.subjects import outgoing
from gateway.registry import Found, RegistryClient, RegistryError, RegistryVersionMismatch
from gateway.store.errors import (
    StoreClosed,
    StoreError,
    StoreFailed,
    StoreUnavailable,
)
from gateway.store.port import Store
from gateway.store.records import (
    BindSend,
    DeliveryRow,
    DeliveryState,
    IntentState,
    PutInboxItem,
    PutOperation,
    PutReceivedRequest,
    SetDeliveryState,
    Write,
)

logger = logging.getLogger(__name__)


@dataclass(slots=True, kw_only=True)
class _Invocation:
    """What the current send invocation did: the posts it bound (for the history export's
    `postIds`) and the firewall's guidance on it (for `SendResult.guidance`)."""

    posts: list[PostHandle] = field(default_factory=list)
    guidance: CheckedGuidance | None = None
    key: str | None = None
    """The idempotency key whose row the invocation's bind writes (`BindSend`): set for a
    keyed invocation until its first bind or its end."""
    task: asyncio.Task[object] | None = None
    """The task running the invocation. Tasks it starts (a collective's timers) inherit this
    record through the context; their binds are not the send's and write no `BindSend`."""


_INVOCATION: contextvars.ContextVar[_Invocation | None] = contextvars.ContextVar(
    "invocation", default=None
)

LOCAL_DRAIN_TIMEOUT: Final = 10.0
"""Seconds the Router has to accept a send's proposal before `delivery-pending` (§6 step 9)."""

DEADLINE_MARGIN: Final = 1.0
"""Seconds before the call's gRPC deadline at which a send answers anyway (§6)."""

RESOLVE_CONCURRENCY: Final = 8
"""Registry lookups one send runs at once."""

MEMBERSHIPS: Final = 256
"""Membership descriptors an agent keeps built (`AgentPosting.membership_with`)."""

CLASSIFY_PAGE: Final = 256
"""Pending deliveries classified per store round trip."""

CLASSIFY_RETRY: Final = (0.1, 5.0)
"""Seconds before a page the store could not take (`StoreUnavailable`: nothing written) is
classified again: the first wait and the ceiling, doubling between (as local order retries
a unit, engine.md §7.2)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SendTimeouts:
    """The send pipeline's bounds (settings)."""

    attach: float = 45.0
    drain: float = LOCAL_DRAIN_TIMEOUT
    certify: float = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SendObserver:
    """Metrics hooks of the send pipeline."""

    on_send: Callable[[SendOp, HarnessError | None], None] = lambda op, error: None
    """(op, error): None for a send that succeeded, or the failure itself (the metrics give
    every failure its closed label, so counting one never fails the answered send)."""
    on_delivery_published: Callable[[DeliveryItem], None] = lambda item: None
    on_record_consumed: Callable[[ConsumedKind], None] = lambda kind: None
    on_member_outcome: Callable[[CollectiveOp, MemberOutcomeKind], None] = lambda op, outcome: None
    on_collective_result: Callable[[CollectiveOp, CollectiveEnd], None] = lambda op, end: None
    on_key_resolution: Callable[[KeyResolution], None] = lambda resolution: None


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentParts:
    """What one hosted agent's endpoint is built from: its own identity, certifier and
    inbox, the daemon's network, Registry client and store, the send bounds and the clock.
    `AgentRuntime` and its `AgentPosting` are built from the same parts."""

    identity: Identity
    certifier: Certifier
    network: Network
    registry: RegistryClient
    store: Store
    inbox: AgentInbox
    timeouts: SendTimeouts
    clock: Clock = SYSTEM_CLOCK
    """Every bound of the send pipeline and the collectives is measured on it."""
    firewall: Firewall | None = None
    """The local firewall, when the operator configured one (firewall.md)."""
    max_open_operations: int = MAX_OPEN_OPERATIONS
    """Most collective operations the agent may have open (`--max-open-operations`)."""


class AgentPosting:
    """One agent's posts: its members resolved, its intents bound, their certification
    awaited, and its inbox items committed (the collectives' `PostingPort`)."""

    def __init__(self, parts: AgentParts, *, on_published: Callable[[DeliveryItem], None]) -> None:
        self._parts = parts
        self._on_published = on_published
        self._memberships: OrderedDict[
            tuple[int, ...], tuple[tuple[p.SignedAgentCard, ...], p.MembershipDescriptor]
        ] = OrderedDict()
        """The last `MEMBERSHIPS` descriptors built, by the identities of their members'
        cards (the Registry client hands out the same card object while it is valid)."""

    async def resolve_cards(self, names: Sequence[str]) -> dict[str, p.SignedAgentCard | SendError]:
        """Registry lookups of members, at most eight at once: each a card or why not."""
        semaphore = asyncio.Semaphore(RESOLVE_CONCURRENCY)

        async def lookup(name: str) -> p.SignedAgentCard | SendError:
            async with semaphore:
                try:
                    outcome = await self._parts.registry.lookup_by_name(name)
                except RegistryVersionMismatch:
                    return SendError(SendErrorReason.VERSION_MISMATCH)
                except RegistryError:
                    return SendError(SendErrorReason.NETWORK_UNAVAILABLE)
            if isinstance(outcome, Found):
                return outcome.card
            return unknown_agent_error(name)

        if len(names) == 1:  # a direct send: no task to gather
            return {names[0]: await lookup(names[0])}
        outcomes = await asyncio.gather(*(lookup(name) for name in names))
        return dict(zip(names, outcomes, strict=True))

    def membership_with(self, cards: Sequence[p.SignedAgentCard]) -> p.MembershipDescriptor:
        """The descriptor of this agent and these members (cards verified by the Registry
        client); raises `SendError` `certification-unavailable` if it cannot be built."""
        key = tuple(map(id, cards))
        cached = self._memberships.get(key)
        if cached is not None and all(a is b for a, b in zip(cached[0], cards, strict=True)):
            self._memberships.move_to_end(key)
            return cached[1]
        try:
            descriptor = p.build_membership([self._parts.identity.card, *cards])
        except p.ProtocolError as error:
            logger.error("membership could not be built: %s", error.detail)
            raise SendError(SendErrorReason.CERTIFICATION_UNAVAILABLE) from None
        # The cards are kept with it: their ids are not reused while they are alive.
        self._memberships[key] = (tuple(cards), descriptor)
        if len(self._memberships) > MEMBERSHIPS:
            self._memberships.popitem(last=False)
        return descriptor

    async def membership(self, conversation_id: str) -> p.MembershipDescriptor | None:
        """A stored conversation's descriptor (in a cluster, read from the rows when the
        conversation is sequenced on another replica, cluster.md §7)."""
        local = await self._parts.network.local.stored_membership(conversation_id)
        return local if local is not None else self._parts.certifier.membership_of(conversation_id)

    async def bind_posts(
        self,
        posts: Sequence[tuple[p.MembershipDescriptor, Content]],
        *,
        extra_writes: Callable[[Sequence[str]], Sequence[Write]] = lambda post_ids: (),
        within: float,
    ) -> list[PostHandle]:
        """Bind every post's intent in one transaction with `extra_writes(post_ids)`
        (`Network.bind`), waiting for the Router attachment at most the attach bound and
        never past `within` seconds. Raises `SendError` before anything is bound."""
        invocation = _INVOCATION.get()
        writes = extra_writes
        owned = (
            invocation
            if invocation is not None and invocation.task is asyncio.current_task()
            else None
        )
        if owned is not None and owned.key is not None:
            writes = self._binding_send(owned, owned.key, extra_writes)
        # Raises `PartitionNotHeld` (nothing bound) when this replica released the partition
        # meanwhile (cluster.md §3.2): the call answers NOT_OWNER and is retried at the new home.
        handles = await self._parts.network.bind(
            self._parts.certifier,
            posts,
            extra_writes=writes,
            attach_within=max(0.0, min(self._parts.timeouts.attach, within)),
        )
        if invocation is not None:
            invocation.posts.extend(handles)
        if owned is not None:
            owned.key = None
        return handles

    def _binding_send(
        self,
        invocation: _Invocation,
        key: str,
        extra_writes: Callable[[Sequence[str]], Sequence[Write]],
    ) -> Callable[[Sequence[str]], Sequence[Write]]:
        """`extra_writes` plus the keyed send's `BindSend`: what it bound goes into its row
        in the bind's own transaction (engine.md §9.1), so after a restart the row says
        exactly whether posts exist. The operation id is the one the collectives' own rows
        of the bind name (a gather's or all_gather's operation, the answered request)."""

        def writes(post_ids: Sequence[str]) -> Sequence[Write]:
            rows = list(extra_writes(post_ids))
            bound = SendResult(
                operation_id=_operation_of(rows),
                guidance=invocation.guidance,
                post_ids=tuple(post_ids),
            )
            return [
                *rows,
                BindSend(agent_id=self._parts.identity.agent_id, key=key, bound=bound_bytes(bound)),
            ]

        return writes

    async def check_send(
        self,
        recipients: Sequence[str],
        text: str,
        *,
        content: Mapping[str, JsonValue] | None = None,
        form: Mapping[str, JsonValue] | None = None,
    ) -> None:
        """The firewall's send check (firewall.md §2.1) of this agent's text to these
        members (names), before anything is bound; raises `FirewallSendError`. Its guidance
        becomes the invocation's `SendResult.guidance`."""
        firewall = self._parts.firewall
        if firewall is None or not firewall.active:
            return
        name = self._parts.identity.agent_name
        guidance = await firewall.check_send(
            name, outgoing(name, recipients, text, content=content, form=form)
        )
        invocation = _INVOCATION.get()
        if invocation is not None:
            invocation.guidance = guidance

    async def await_certified(self, handle: PostHandle, *, budget_end: float | None = None) -> str:
        """The post's RecordHash within the send bound (or by the monotonic `budget_end`),
        else `delivery-pending`; the send's own waiters are dropped either way (a caller that
        goes on following the post takes its own with `follow`)."""
        if budget_end is None:
            bounds = self._parts.timeouts
            budget_end = self._parts.clock.monotonic() + bounds.drain + bounds.certify
        try:
            return await self._wait_certified(handle, budget_end)
        finally:
            self._parts.network.forget(handle)

    async def _wait_certified(self, handle: PostHandle, budget_end: float) -> str:
        """Steps 9-10: the Router accepts the proposal within the drain bound, then this
        daemon promotes the record within the certification bound; past either, the
        bound intent answers `delivery-pending` and keeps going."""
        clock = self._parts.clock
        latch, drained = handle.certified, handle.drained
        drain_end = min(budget_end, clock.monotonic() + self._parts.timeouts.drain)
        certify_end = min(budget_end, drain_end + self._parts.timeouts.certify)
        # Waiting on the futures directly (not through wait_for) so that a send that gives
        # up never cancels them: `forget` does, once the send has answered.
        waiters: set[asyncio.Future[object]] = {latch, drained}  # type: ignore[arg-type]
        await asyncio.wait(
            waiters,
            timeout=max(0.0, drain_end - clock.monotonic()),
            return_when=asyncio.FIRST_COMPLETED,
        )
        if not latch.done():
            if not drained.done() and self._parts.certifier.was_proposed(handle.post_id):
                raise SendError(SendErrorReason.DELIVERY_PENDING)
            await asyncio.wait({latch}, timeout=max(0.0, certify_end - clock.monotonic()))
        if not latch.done() or latch.cancelled():
            # Past the bound, or the network closed (shutdown): the bound intent is proposed
            # again until it certifies.
            raise SendError(SendErrorReason.DELIVERY_PENDING)
        return latch.result()

    def follow(self, post_id: str) -> asyncio.Future[str]:
        """A future of the caller's own of an own post's RecordHash, resolved when this
        daemon promotes it; it outlives the send's waiters (`await_certified` drops those).
        Registered at once: taken right after a send gave up, no promotion can fall between."""
        return self._parts.network.latch(post_id)

    async def settled(self, post_id: str) -> asyncio.Future[str]:
        """A future of an own post's RecordHash: already resolved when its intent
        completed (while the daemon was down), else resolved when this daemon promotes it."""
        network = self._parts.network
        # The latch first (engine.md §5.10 Restart): an outcome released while the row is
        # read below resolves it; registered after the read, it would wait for an outcome
        # that was already released and never comes again.
        latch = network.latch(post_id)
        row = await self._parts.store.intent(self._parts.identity.agent_id, post_id)
        if row is not None and row.record_hash is not None:
            network.settle(post_id, row.record_hash)
        elif row is not None and row.state is IntentState.REFUSED:
            # A cluster's sequencer refused it (cluster.md §5.2, §5.4): it never certifies.
            network.refuse(post_id)
        return latch

    def prepare_item(
        self, item: InboundItem, *, token: str | None = None
    ) -> tuple[str, PutInboxItem]:
        """An inbox write for an emitted item (fresh token unless given)."""
        return self._parts.inbox.prepare(item, token=token)

    async def commit(self, writes: Sequence[Write]) -> None:
        """Commit writes atomically (items among them are checked by the firewall and
        reach the stream)."""
        await self._parts.inbox.commit(writes)

    def published(self, kind: DeliveryItem) -> None:
        """An item was made durable under a fresh token."""
        self._on_published(kind)


class AgentRuntime:
    """The `Endpoint` of one hosted agent."""

    def __init__(
        self,
        parts: AgentParts,
        *,
        run_id: str,
        export: HistoryExport | None = None,
        observer: SendObserver | None = None,
    ) -> None:
        self.identity = parts.identity
        self.certifier = parts.certifier
        self.inbox = parts.inbox
        self._store = parts.store
        self._network = parts.network
        self._timeouts = parts.timeouts
        self._clock = parts.clock
        self._observer = observer or SendObserver()
        self._classify_wanted = asyncio.Event()
        self._classifier: asyncio.Task[None] | None = None
        self._pending = PendingDeliveries(
            agent_id=parts.identity.agent_id, store=parts.store, page=CLASSIFY_PAGE
        )
        self.export = export
        if export is not None:
            parts.inbox.on_offer = export.offered
        self.ledger = SendLedger(
            agent_id=parts.identity.agent_id,
            store=parts.store,
            run_id=run_id,
            on_resolution=self._observer.on_key_resolution,
            resume=self._resume,
        )
        self.posting = AgentPosting(parts, on_published=self._observer.on_delivery_published)
        """Members, posts and inbox items: the multicast path's and the collectives' port."""
        self.collectives = Collectives(
            self.posting,
            agent_name=parts.identity.agent_name,
            agent_id=parts.identity.agent_id,
            clock=parts.clock,
            on_member_outcome=self._observer.on_member_outcome,
            on_result=self._observer.on_collective_result,
            max_open=parts.max_open_operations,
        )
        if parts.firewall is not None:
            parts.inbox.screen = InboxScreen(
                parts.firewall,
                agent=parts.identity.agent_name,
                requester_of=self.collectives.requester_of,
            )

    @property
    def agent_name(self) -> str:
        """The agent's name."""
        return self.identity.agent_name

    @property
    def address(self) -> str:
        """`agent:<name>`."""
        return agent_address(self.identity.agent_name)

    @property
    def agent_id(self) -> str:
        """The agent's AgentId."""
        return self.identity.agent_id

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
        """New pending deliveries are durable, committed elsewhere: read and classify them."""
        self._pending.reread()
        self._classify_wanted.set()

    def direct_item(self, token: str, message: InboundMessage) -> PutInboxItem | None:
        """This agent's inbox item for a delivery of `message`, unsequenced, when it needs
        no classification (engine.md §5.10, classified at certification): no inbound
        firewall check, and content without a collective part but a multicast one — the item
        `_classify` would write for it. None: the delivery goes to the classifier."""
        if self.inbox.screen is not None and self.inbox.screen.active:
            return None
        read = read_collective(message.content)
        if not (read.part is None or isinstance(read.part, MulticastPart)) or not read.rest:
            return None
        item = MulticastItem(message=_with_content(message, read.rest))
        _, write = self.inbox.prepare(item, token=token)
        return write

    def direct_items_published(self, count: int) -> None:
        """Items written at certification committed (the classifier's own metric)."""
        for _ in range(count):
            self._observer.on_delivery_published(DeliveryItem.MULTICAST)

    def deliveries_committed(self, rows: Iterable[tuple[DeliveryRow, InboundMessage]]) -> None:
        """These pending deliveries' commit returned: classify them (engine.md §7.2)."""
        self._pending.committed(rows)
        self._classify_wanted.set()

    # --- Endpoint ----------------------------------------------------------------------------

    async def open_stream(self, *, takeover: bool) -> MessageStream:
        """Open the agent's one stream (raises `ListenError`)."""
        return await self.inbox.open_stream(takeover=takeover)

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
                    lambda: self._invocation(
                        send_input, failure_delivery, deadline, key=idempotency_key
                    ),
                    deadline=deadline,
                )
        except HarnessError as error:
            self._observer.on_send(op, error)
            raise
        self._observer.on_send(op, None)
        return result

    async def _invocation(
        self,
        send_input: SendInput,
        failure_delivery: FailureDelivery,
        deadline: float | None,
        *,
        key: str | None = None,
    ) -> SendResult:
        """One send invocation, exported once when it completes; a keyed one's bind writes
        what it bound into the key's row."""
        invocation = _Invocation(key=key, task=asyncio.current_task())
        token = _INVOCATION.set(invocation)
        try:
            result = await self._send(
                send_input,
                started=self._clock.monotonic(),
                deadline=deadline,
                failure_delivery=failure_delivery,
            )
        except HarnessError as error:
            if self.export is not None:
                self.export.failed(send_input, error.message)
            raise
        finally:
            invocation.key = None
            _INVOCATION.reset(token)
        certified = tuple(
            handle.post_id
            for handle in invocation.posts
            if handle.certified.done() and not handle.certified.cancelled()
        )
        result = SendResult(
            operation_id=result.operation_id, guidance=invocation.guidance, post_ids=certified
        )
        if self.export is not None:
            self.export.sent(send_input, list(certified), result.operation_id)
        return result

    async def _resume(self, resumption: Resumption) -> SendResult:
        """Finish a keyed send an earlier run left without an outcome (engine.md §9.1): run
        it again when it bound nothing, else await what it bound and answer as it would
        have."""
        if resumption.bound is None:
            return await self._invocation(
                resumption.send_input,
                resumption.failure_delivery,
                resumption.deadline,
                key=resumption.key,
            )
        send_input = resumption.send_input
        try:
            result = await self._settle_bound(resumption, resumption.bound)
        except HarnessError as error:
            if self.export is not None:
                self.export.failed(send_input, error.message)
            raise
        if self.export is not None:
            self.export.sent(send_input, list(result.post_ids), result.operation_id)
        return result

    async def _settle_bound(self, resumption: Resumption, bound: SendResult) -> SendResult:
        """The outcome of bound posts, as their send would have answered it (engine.md
        §6.4): a gather or all_gather its operation id once its requests certified or the
        collective send wait passed; an answer or a multicast once every post certified,
        else `delivery-pending` (an answer's routed by `failureDelivery`). Each wait starts
        now, within the send's bounds after binding, cut by the call's deadline."""
        bounds = self._timeouts
        budget = bounds.drain + bounds.certify
        if resumption.deadline is not None:
            budget = min(budget, max(0.0, resumption.deadline - DEADLINE_MARGIN))
        match resumption.send_input:
            case MessageInput(collective=AskOperation()):
                certified = await self._await_posts(
                    bound.post_ids, within=min(COLLECTIVE_SEND_WAIT, budget)
                )
                return SendResult(
                    operation_id=bound.operation_id, guidance=bound.guidance, post_ids=certified
                )
            case ResponseInput(to=to) if bound.operation_id is not None:
                certified = await self._await_posts(bound.post_ids, within=budget)
                if len(certified) == len(bound.post_ids):
                    return SendResult(
                        operation_id=bound.operation_id,
                        guidance=bound.guidance,
                        post_ids=certified,
                    )
                refusal = CollectiveRefusal(
                    SendError(SendErrorReason.DELIVERY_PENDING),
                    operation_id=bound.operation_id,
                    to=canonicalize(to, self.identity.agent_name).address,
                )
                return await self._refused(refusal, resumption.failure_delivery)
            case MessageInput():
                certified = await self._await_posts(bound.post_ids, within=budget)
                if len(certified) < len(bound.post_ids):
                    raise SendError(SendErrorReason.DELIVERY_PENDING)
                return SendResult(guidance=bound.guidance, post_ids=certified)
            case _:
                logger.error("a bound keyed answer names no operation")
                raise SendError(SendErrorReason.OUTCOME_UNKNOWN)

    async def _await_posts(self, post_ids: Sequence[str], *, within: float) -> tuple[str, ...]:
        """The posts among `post_ids` that certified (before the restart, or within `within`
        seconds), in order. Each latch is registered before its stored intent is read
        (`AgentPosting.settled`), and dropped afterwards."""
        latches = [await self.posting.settled(post_id) for post_id in post_ids]
        try:
            if latches:
                await asyncio.wait(latches, timeout=max(0.0, within))
            return tuple(
                post_id
                for post_id, latch in zip(post_ids, latches, strict=True)
                if latch.done() and not latch.cancelled()
            )
        finally:
            drained = asyncio.get_running_loop().create_future()
            drained.set_result(None)
            for post_id, latch in zip(post_ids, latches, strict=True):
                self._network.forget(PostHandle(post_id=post_id, certified=latch, drained=drained))

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
                    operation_id = await self.collectives.responder.answer(to=to, response=response)
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
        self._observer.on_delivery_published(DeliveryItem.OPERATION_FAILED)
        return SendResult(operation_id=refusal.operation_id)

    async def _multicast(
        self, to: str, text: str, *, started: float, deadline: float | None
    ) -> None:
        content = multicast_content(text)
        conversation = canonicalize(to, self.identity.agent_name)
        budget_end = started + self._budget(deadline)
        posting = self.posting
        cards = await posting.resolve_cards(conversation.others)
        for name in conversation.others:
            failure = cards[name]
            if isinstance(failure, SendError):
                raise failure
        descriptor = posting.membership_with(
            [card for card in cards.values() if not isinstance(card, SendError)]
        )
        await posting.check_send(conversation.others, text)
        [handle] = await posting.bind_posts(
            [(descriptor, content)], within=max(0.0, budget_end - self._clock.monotonic())
        )
        # From here the intent is bound: any bound past this point is delivery-pending,
        # and the post still certifies in the background.
        await posting.await_certified(handle, budget_end=budget_end)

    def _budget(self, deadline: float | None) -> float:
        budget = self._timeouts.attach + self._timeouts.drain + self._timeouts.certify
        if deadline is not None:
            budget = min(budget, max(0.0, deadline - DEADLINE_MARGIN))
        return budget

    # --- classification ----------------------------------------------------------------------

    async def _classify_loop(self) -> None:
        """Classify pages while deliveries wait (engine.md §7.2). A page the store could not
        take while nothing in memory changed is tried again after a backoff; a store that
        closed or already failed ends the pass (the daemon is stopping); any other failure
        stops the daemon, so an agent is never left silently unclassified."""
        delay = 0.0
        while True:
            await self._classify_wanted.wait()
            self._classify_wanted.clear()
            try:
                while await self._classify_page():
                    pass
            except StoreUnavailable:
                self._pending.reread()  # the page's rows are still pending in the store
                delay = min(CLASSIFY_RETRY[1], max(CLASSIFY_RETRY[0], delay * 2))
                logger.warning(
                    "classification page not written, the store is unavailable; retrying in %.2f s",
                    delay,
                )
                await self._clock.sleep(delay)
                self._classify_wanted.set()
                continue
            except (StoreClosed, StoreFailed):
                return  # shutdown, or the writer already stopped the daemon
            except Exception as error:
                logger.exception("classification failed: stopping the daemon")
                self._network.fail(error)
                return
            delay = 0.0

    async def _classify_page(self) -> bool:
        """Classify one page of pending deliveries in one transaction; True if more may wait.

        Raises `StoreUnavailable` only when nothing in memory changed (the page can simply be
        classified again); `FatalStoreError` when the collectives' memory already moved."""
        pending = await self._pending.page()
        if not pending:
            return self._pending.more
        rows = [row for row, _ in pending]
        writes: list[Write] = []
        outcomes: list[DeliveryItem | ConsumedKind] = []
        emitted: list[DeliveryItem] = []
        collective_writes = False
        for row, message in pending:
            item_writes, outcome, published, collective = self._classify(row, message)
            writes.extend(item_writes)
            outcomes.append(outcome)
            emitted.extend(published)
            collective_writes = collective_writes or collective
        try:
            dropped = await self.inbox.commit(writes)
        except StoreUnavailable as error:
            if collective_writes:
                # The collectives changed their memory for this page (a request now held,
                # an answer counted, a close applied): classified again, the page would find
                # them held and consume what it must deliver. Memory and disk diverged, as
                # an engine commit's failure does (engine.md §8): the daemon stops, and after
                # the restart the page, still pending, is classified against the stored rows.
                raise FatalStoreError(str(error)) from error
            raise
        for row, outcome in zip(rows, outcomes, strict=True):
            if row.token in dropped:
                self._observer.on_record_consumed(ConsumedKind.DROPPED)
            elif isinstance(outcome, DeliveryItem):
                self._observer.on_delivery_published(outcome)
            else:
                self._observer.on_record_consumed(outcome)
        for kind in emitted:
            self._observer.on_delivery_published(kind)
        return self._pending.more

    def _classify(
        self, row: DeliveryRow, message: InboundMessage | None = None
    ) -> tuple[list[Write], DeliveryItem | ConsumedKind, tuple[DeliveryItem, ...], bool]:
        """The writes that classify one delivery, its outcome (`multicast`,
        `collectiveRequest` or the consumed kind), items emitted under fresh tokens, and
        whether the collectives changed their memory for it (every such change writes its
        row, so: whether they returned writes). The rules are the contract's "Inbound items"
        and collectives.md §2.4-§2.5."""
        agent_id = self.identity.agent_id
        token = row.token
        consumed = SetDeliveryState(agent_id=agent_id, token=token, state=DeliveryState.CONSUMED)
        if message is None:  # read from the store; one handed over in memory comes decoded
            try:
                message = message_from_json(parse_canonical_json(row.projection))
            except (CodecError, JsonValueError):
                logger.exception("a delivery projection does not decode; consumed")
                return [consumed], ConsumedKind.OTHER, (), False
        read = read_collective(message.content)
        sender = name_of(message.sender) or ""
        is_group = isinstance(message, GroupMessage)
        classified: Classified
        match read.part:
            case None | MulticastPart():
                if not read.rest:
                    return [consumed], ConsumedKind.OTHER, (), False
                item = MulticastItem(message=_with_content(message, read.rest))
                _, write = self.inbox.prepare(item, token=token)
                classified_state = SetDeliveryState(
                    agent_id=agent_id, token=token, state=DeliveryState.CLASSIFIED
                )
                return [classified_state, write], DeliveryItem.MULTICAST, (), False
            case RequestPart():
                classified = self.collectives.responder.classify_request(
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
                classified = self.collectives.responder.classify_close(
                    read.part, sender=sender, conversation_id=row.conversation_id
                )
            case Malformed() | Duplicate():
                logger.info(
                    "record consumed: %s collective part",
                    "duplicated" if isinstance(read.part, Duplicate) else "malformed",
                )
                return [consumed], ConsumedKind.OTHER, (), False
        writes = list(classified.writes)
        collective = bool(writes)
        if classified.item is not None:
            _, write = self.inbox.prepare(classified.item, token=token)
            writes.append(
                SetDeliveryState(agent_id=agent_id, token=token, state=DeliveryState.CLASSIFIED)
            )
            writes.append(write)
            return writes, DeliveryItem.COLLECTIVE_REQUEST, classified.published, collective
        writes.append(consumed)
        return writes, classified.consumed or ConsumedKind.OTHER, classified.published, collective


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


def _operation_of(writes: Sequence[Write]) -> str | None:
    """The collective operation a bind's own rows name, if any."""
    for write in writes:
        if isinstance(write, PutOperation | PutReceivedRequest):
            return write.operation_id
    return None


def _op_of(send_input: SendInput) -> SendOp:
    match send_input:
        case MessageInput(collective=AskOperation(op=op)):
            return SendOp(op.value)
        case MessageInput():
            return SendOp.MULTICAST
        case ResponseInput():
            return SendOp.ANSWER

"""The daemon's side of the Router: one feed for every hosted agent, the outbox drain,
timers, and the commit-then-release rule (engine.md §4-§6).

`Network` owns every hosted agent's `Certifier`. All state changes go through `commit`:
the effects' writes commit in one store call (grouped with everyone else's by the writer),
and only then are envelopes handed to the drain, waiting sends released and new deliveries
announced. A failed commit after the core changed memory is fatal: the daemon stops rather
than let memory and disk diverge (engine.md §8), and recovery resumes the work after the
supervisor restarts it.

Binding a send's posts has one owner, `Network.bind`: it routes each post (local order or
the Router), binds every intent in memory, commits the binds with the caller's rows in one
transaction, and undoes the memory of a bind that definitely did not commit.

Background work runs in tasks this object owns and cancels in `close()`:
`_feed_loop` (Router reads), `_drain_loop` (Router sends), `_tick_loop` (re-proposal and
catch-up timers), and short catch-up lookups.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import random
from asyncio import Future
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Final

from harness_contract.errors import SendError, SendErrorReason
from harness_contract.values import Content

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.engine import protocol as p
from gateway.engine.certifier import Certifier
from gateway.engine.cluster_order import ClusterOrder
from gateway.engine.effects import (
    Certified,
    Delivered,
    DirectInboxes,
    Effects,
    OutboundEnvelope,
)
from gateway.engine.local import LocalObserver, LocalOrder, fold_unit_into_bind, no_items
from gateway.engine.sequencing import Sequencing
from gateway.engine.state import BindRefused
from gateway.engine.waiters import Waiters
from gateway.router import (
    Accepted,
    Batch,
    Cursor,
    CursorInvalid,
    FeedGap,
    IdempotencyConflict,
    MessageInvalid,
    RetryIdentityUnknown,
    RouterClosedError,
    RouterPort,
    RouterRestarted,
    RouterVersionMismatch,
    SendMode,
    envelope_digest,
)
from gateway.store.errors import CommitAmbiguous, PartitionNotHeld, StoreError
from gateway.store.port import Store
from gateway.store.records import (
    OutboxState,
    PutCursor,
    PutOutbox,
    SetOutboxState,
    Write,
)
from gateway.tasks import OwnedTasks

logger = logging.getLogger(__name__)

SUBSCRIPTION: Final = "main"
"""The name of the daemon's one Router subscription in the store."""

TICK_INTERVAL: Final = 1.0
"""Seconds between timer passes (re-proposal, catch-up round timeouts)."""

DRAIN_QUEUE_SIZE: Final = 65_536
"""Envelopes waiting for the Router; producers wait when it is full, so memory stays bounded."""

DRAIN_BATCH: Final = 512
"""Most envelopes one drain pass sends before recording their acceptance in one write."""

QUICK_RETRIES: Final = 3
"""Quick retries of an ambiguous Router send before backing off (engine.md §4)."""
QUICK_RETRY_DELAY: Final = 0.025
"""Seconds between the quick retries."""

DETACHED_BACKOFF: Final = (0.1, 5.0)
"""Seconds of jittered backoff while the Router is unreachable: first and ceiling."""


class RouterEvent(enum.StrEnum):
    """Something the Router feed went through (`harness_router_events_total`)."""

    FEED_GAP = "feed-gap"
    """The feed skipped messages; the daemon caught up."""
    ROUTER_RESTARTED = "router-restarted"
    """The Router came back as a new instance."""
    CURSOR_INVALID = "cursor-invalid"
    """The Router no longer holds the cursor."""
    REANCHOR = "reanchor"
    """The daemon re-anchored its conversations."""


class RouterAttachment(enum.StrEnum):
    """The state of the daemon's Router feed (the `harness_router_attachments` values)."""

    RECOVERING = "recovering"
    """Anchoring and recovering conversations; sends bind and wait."""
    ACTIVE = "active"
    """Reading the Router; sends proceed."""
    DETACHED = "detached"
    """The Router is unreachable; retrying with backoff, never giving up."""


class FatalStoreError(Exception):
    """A commit failed after memory changed; the daemon must stop."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PostHandle:
    """A bound post: `certified` resolves with its RecordHash once this daemon promotes it,
    `drained` once the Router accepted its proposal (at once in local order). Both are the
    binding send's own waiters: `Network.forget(handle)` cancels them and nobody else's."""

    post_id: str
    certified: asyncio.Future[str]
    drained: asyncio.Future[None]


@dataclass(frozen=True, slots=True)
class _Bound:
    """One post of a bind: its route and the effects its bind produced."""

    conversation_id: str
    post_id: str
    local: bool
    effects: Effects


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkObserver:
    """Callbacks the composition root wires to metrics and endpoints."""

    on_certified: Callable[[Certified], None] = lambda certified: None
    on_deliveries: Callable[[set[str]], None] = lambda agents: None
    on_delivered: Callable[[Sequence[Delivered]], None] = lambda deliveries: None
    """The committed pending deliveries themselves (`Effects.delivered`), for the hosted
    classifiers (engine.md §7.2); `on_deliveries` names their agents."""
    on_attachment: Callable[[RouterAttachment], None] = lambda state: None
    on_event: Callable[[RouterEvent], None] = lambda event: None
    on_fatal: Callable[[BaseException], None] = lambda error: None


class Network:
    """The daemon's Router feed, drain and timers for every hosted agent."""

    def __init__(
        self,
        *,
        router: RouterPort,
        store: Store,
        local_instance_id: str,
        observer: NetworkObserver | None = None,
        local_observer: LocalObserver | None = None,
        clock: Clock = SYSTEM_CLOCK,
        sequencing: Sequencing | None = None,
        inboxes: DirectInboxes | None = None,
    ) -> None:
        """`inboxes`: the hosted members' inboxes a local unit writes items to directly
        (engine.md §5.10); never in a cluster, whose units may be another replica's."""
        self._router = router
        self._store = store
        self._observer = observer or NetworkObserver()
        self._clock = clock
        self._certifiers: dict[str, Certifier] = {}
        self._instance_id: str | None = None
        self._cursor: Cursor | None = None
        self._state = RouterAttachment.RECOVERING
        self._attached = asyncio.Event()
        self._stopping = asyncio.Event()
        self._version_mismatch = asyncio.Event()
        self._recipients_changed = asyncio.Event()
        self._drain: asyncio.Queue[OutboundEnvelope] = asyncio.Queue(maxsize=DRAIN_QUEUE_SIZE)
        self._latches: Waiters[str] = Waiters()
        self._drained: Waiters[None] = Waiters()
        self._tasks = OwnedTasks(self._task_failed, prefix="network-")
        self._closed = False
        self._failed: BaseException | None = None
        self.local: LocalOrder
        """The order of conversations whose members are all hosted here (§5.10); in a
        cluster, of every conversation sequenced by this replica (cluster.md §5)."""
        order = functools.partial(
            functools.partial(LocalOrder, inboxes=inboxes)
            if sequencing is None
            else functools.partial(ClusterOrder, sequencing=sequencing),
            store=store,
            instance_id=local_instance_id,
            certifiers=lambda: self._certifiers,
            release=self.release,
            on_fatal=self._fail,
            observer=local_observer,
            clock=clock,
        )
        self.local = order()

    # --- lifecycle -------------------------------------------------------------------------

    @property
    def state(self) -> RouterAttachment:
        """The feed's attachment state."""
        return self._state

    @property
    def instance_id(self) -> str | None:
        """The Router instance the daemon reads from."""
        return self._instance_id

    def certifier(self, agent_id: str) -> Certifier | None:
        """A hosted agent's certifier."""
        return self._certifiers.get(agent_id)

    def certifiers(self) -> list[Certifier]:
        """Every hosted agent's certifier."""
        return list(self._certifiers.values())

    def unhost(self, agent_id: str) -> None:
        """Stop hosting an agent (a cluster released its home partition, cluster.md §3.2)."""
        self._certifiers.pop(agent_id, None)

    def host(self, certifier: Certifier) -> None:
        """Host an agent (before `start`, or live: it is anchored at the current position)."""
        self._certifiers[certifier.agent_id] = certifier
        certifier.is_local = self.local.is_local
        if self._instance_id is not None and certifier.instance_id is None:
            certifier.anchor(self._instance_id)
        self._recipients_changed.set()

    async def start(self) -> None:
        """Start local order (not waiting for the Router), then resume the stored cursor or
        anchor at the tail, recover every agent, and start the feed, the drain and the
        timers. Returns once the feed is active (or detached, retrying)."""
        self.local.start()
        stored = await self._store.cursor(SUBSCRIPTION)
        self._cursor = Cursor.decode(stored) if stored is not None else None
        try:
            await self._recover(resumed_cursor=self._cursor is not None)
        except (FatalStoreError, RouterClosedError):
            raise
        except Exception:
            # A remote Router that is down at start: the feed keeps trying; sends wait for
            # the attachment (at most the attach timeout) meanwhile.
            logger.warning("router unreachable at start; retrying", exc_info=True)
            self._set_state(RouterAttachment.DETACHED)
        resend = [envelope for c in self._certifiers.values() for envelope in c.pending_outbox]
        for certifier in self._certifiers.values():
            certifier.pending_outbox = []
        if resend:
            self._spawn(self._resend(resend), "resend")
        self._spawn(self._drain_loop(), "drain")
        self._spawn(self._feed_loop(), "feed")
        self._spawn(self._tick_loop(), "tick")

    async def _resend(self, envelopes: list[OutboundEnvelope]) -> None:
        """Rows stored before a restart whose outcome is unknown: the same bytes again as
        retries (a new Router instance answers router_restarted and they are pruned).
        Waits for room on the bounded queue instead of overrunning it."""
        for envelope in envelopes:
            await self._drain.put(envelope)

    async def _recover(self, *, resumed_cursor: bool) -> None:
        self._set_state(RouterAttachment.RECOVERING)
        instance = await self._router.instance_id()
        if self._cursor is None or self._cursor.instance_id != instance:
            if self._cursor is not None:
                self._observer.on_event(RouterEvent.ROUTER_RESTARTED)
            self._cursor = None
            resumed_cursor = False
        self._instance_id = instance
        if self._cursor is None:
            anchoring = await self._router.poll(self._recipients(), None, hold=0)
            if isinstance(anchoring, Batch):
                self._cursor = anchoring.cursor
        effects = Effects()
        now = self._clock.time()
        for certifier in self._certifiers.values():
            certifier.recover(instance, effects, now=now, resumed_cursor=resumed_cursor)
        if self._cursor is not None:
            effects.writes.append(
                PutCursor(subscription=SUBSCRIPTION, cursor=self._cursor.encode())
            )
        await self.commit(effects)
        self._set_state(RouterAttachment.ACTIVE)

    async def close(self) -> None:
        """Cancel and await every task; fail waiting sends' latches. Idempotent."""
        self._closed = True
        await self.local.close()
        await self._tasks.cancel_all()
        self.cancel_waiters()

    def cancel_waiters(self) -> None:
        """Answer every waiting send now (shutdown): bound intents go on after restart,
        unbound ones stop waiting for the attachment."""
        self._stopping.set()
        self._latches.cancel_all()
        self._drained.cancel_all()

    def _spawn(self, coroutine: Coroutine[object, object, None], name: str) -> None:
        self._tasks.spawn(coroutine, name)

    def _task_failed(self, task: asyncio.Task[None], error: BaseException) -> None:
        if not self._closed:
            logger.error("network task failed task=%s", task.get_name(), exc_info=error)
            self._fail(error)

    def fail(self, error: BaseException) -> None:
        """Stop the daemon: a hosted agent's commit failed after its memory changed, so memory
        and disk would diverge (engine.md §8); recovery resumes after the restart."""
        self._fail(error)

    def _fail(self, error: BaseException) -> None:
        if self._failed is None:
            self._failed = error
            self._observer.on_fatal(error)

    def _set_state(self, state: RouterAttachment) -> None:
        if state is RouterAttachment.ACTIVE:
            self._version_mismatch.clear()
        if state is not self._state:
            logger.info("router attachment state=%s", state.value)
        self._state = state
        self._observer.on_attachment(state)
        if state is RouterAttachment.ACTIVE:
            self._attached.set()
        else:
            self._attached.clear()

    async def wait_attached(self, within: float) -> bool:
        """Wait until the feed is active; False after `within` seconds, or at once when
        shutdown answers waiting sends (holding no lock). Raises `SendError`
        `version-mismatch` at once when the Router speaks another version (§6 step 6)."""
        if self._attached.is_set():
            return True
        if self._version_mismatch.is_set():
            raise SendError(SendErrorReason.VERSION_MISMATCH)
        waiters = {
            asyncio.ensure_future(self._attached.wait()),
            asyncio.ensure_future(self._stopping.wait()),
            asyncio.ensure_future(self._version_mismatch.wait()),
        }
        try:
            await asyncio.wait(waiters, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        if self._version_mismatch.is_set() and not self._attached.is_set():
            raise SendError(SendErrorReason.VERSION_MISMATCH)
        return self._attached.is_set() and not self._stopping.is_set()

    def _recipients(self) -> frozenset[str]:
        return frozenset(self._certifiers)

    # --- commit and release ----------------------------------------------------------------

    async def commit(self, effects: Effects) -> None:
        """Commit the effects' writes, then release envelopes, latches and deliveries.

        Raises `FatalStoreError` (after reporting it) when the commit fails."""
        if effects.writes:
            try:
                await self._store.apply(effects.writes)
            except Exception as error:
                logger.exception("engine commit failed: stopping the daemon")
                self._fail(error)
                raise FatalStoreError(str(error)) from error
        self.release(effects)

    def release(self, effects: Effects) -> None:
        """Hand a committed effect set to the drain, the waiting sends and the endpoints."""
        for envelope in effects.envelopes:
            try:
                self._drain.put_nowait(envelope)
            except asyncio.QueueFull:
                # The rows are durable and sent again (as retries) after a restart. Full means
                # the Router has been unreachable for a long time.
                logger.warning(
                    "drain queue full; envelope left in the outbox row=%d", envelope.row_id
                )
        for certified in effects.certified:
            self._latches.resolve(certified.post_id, certified.record_hash)
            self._observer.on_certified(certified)
        if effects.delivered:
            self._observer.on_delivered(effects.delivered)
        if effects.deliveries:
            self._observer.on_deliveries(effects.deliveries)
        for query in effects.catch_up_queries:
            self._spawn(self._answer_catch_up(query.agent_id, query.request), "catch-up")

    # --- binding (engine.md §6 steps 6-8) -------------------------------------------------

    async def bind(
        self,
        certifier: Certifier,
        posts: Sequence[tuple[p.MembershipDescriptor, Content]],
        *,
        extra_writes: Callable[[Sequence[str]], Sequence[Write]] = lambda post_ids: (),
        attach_within: float,
    ) -> list[PostHandle]:
        """Bind every post's intent for `certifier`'s agent in one transaction with
        `extra_writes(post_ids)`, and return a handle per post, in order.

        Posts whose members are all hosted here go through local order (engine.md §5.10)
        and need no Router; when any post crosses daemons, the Router attachment is waited
        for first (at most `attach_within` seconds). Raises `SendError` when nothing is
        bound (`network-unavailable`, `version-mismatch`, `certification-unavailable`,
        `persistence-failed`) or when the commit's outcome is unknown (`outcome-unknown`);
        `PartitionNotHeld` when a cluster replica's store refused it, nothing bound."""
        local = self.local
        routes = [local.accepts(descriptor) for descriptor, _ in posts]
        if not all(routes) and not await self.wait_attached(attach_within):
            raise SendError(SendErrorReason.NETWORK_UNAVAILABLE)
        try:
            for (descriptor, _), is_local in zip(posts, routes, strict=True):
                if is_local:
                    await local.prepare(descriptor)
        except BindRefused as refused:
            raise SendError(SendErrorReason.CERTIFICATION_UNAVAILABLE, str(refused)) from None
        now = self._clock.time()
        bound: list[_Bound] = []
        try:
            for (descriptor, content), is_local in zip(posts, routes, strict=True):
                if is_local:
                    post_id, writes = local.bind(certifier, descriptor, content, now=now)
                    one = Effects()
                    one.writes.extend(writes)
                else:
                    post_id, one = certifier.bind(descriptor, content, now=now)
                bound.append(_Bound(descriptor.conversation_id, post_id, is_local, one))
        except BindRefused as refused:
            self._unbind(certifier, bound)
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
            drained: asyncio.Future[None]
            if post.local:
                # No Router step: nothing to drain (engine.md §6 step 9 is skipped).
                drained = loop.create_future()
                drained.set_result(None)
            else:
                drained = self.drained(post.post_id)
            handles.append(
                PostHandle(
                    post_id=post.post_id, certified=self.latch(post.post_id), drained=drained
                )
            )
        # A lone post of a local conversation with nothing else waiting certifies in its
        # bind's own unit: one commit per send (engine.md §5.10 Atomic unit, rule 2).
        unit = (
            local.unit_in_bind(bound[0].conversation_id, bound[0].post_id)
            if len(bound) == 1 and bound[0].local
            else None
        )

        def settle(done: Future[Callable[[], None]]) -> None:  # memory follows the commit
            error = None if done.cancelled() else done.exception()
            if error is None and not done.cancelled():
                local.bound((post.conversation_id, post.post_id) for post in bound if post.local)
                if unit is not None:
                    local.committed(unit)
                done.result()()  # the members' items, after the author's latches
                return
            if unit is not None:
                local.abandon(unit)
            if not any(isinstance(e, CommitAmbiguous) for e in (error, error and error.__cause__)):
                self._unbind(certifier, bound)  # a definite failure; ambiguous is fatal

        writes = (
            effects.writes if unit is None else fold_unit_into_bind(effects.writes, unit.writes)
        )
        job = local.apply(writes) if all(routes) else self._commit_crossing(effects)
        commit = asyncio.ensure_future(job)
        try:
            await asyncio.shield(commit)
        except (asyncio.CancelledError, FatalStoreError, StoreError) as error:
            for handle in handles:
                self.forget(handle)
            if isinstance(error, asyncio.CancelledError):
                # A teardown cancelled the caller (cluster.md §3.2); the writer commits what it
                # took: memory follows, or the intent (or the bind's unit) blocks its conversation.
                commit.add_done_callback(settle)
                raise
            settle(commit)
            if isinstance(error, CommitAmbiguous) or isinstance(error.__cause__, CommitAmbiguous):
                raise SendError(SendErrorReason.OUTCOME_UNKNOWN) from None
            if isinstance(error, PartitionNotHeld):
                # Nothing bound: this replica released the partition meanwhile (cluster.md
                # §3.2); the caller answers NOT_OWNER and the call is retried at the new home.
                raise
            raise SendError(SendErrorReason.PERSISTENCE_FAILED) from None
        settle(commit)
        return handles

    async def _commit_crossing(self, effects: Effects) -> Callable[[], None]:
        """`commit` for a bind with posts that cross daemons: no member's item to settle."""
        await self.commit(effects)
        return no_items

    def _unbind(self, certifier: Certifier, bound: Sequence[_Bound]) -> None:
        """Undo the memory of binds that definitely did not commit."""
        self.local.unbind((post.conversation_id, post.post_id) for post in bound if post.local)
        for post in bound:
            if not post.local:
                certifier.unbind(post.post_id)

    def latch(self, post_id: str) -> asyncio.Future[str]:
        """A future of the caller's own, resolved with the RecordHash when this daemon
        promotes the post (cancelled at shutdown)."""
        return self._latches.add(post_id)

    def waiting_posts(self) -> list[str]:
        """Posts a send or a collective waits on (a cluster's home polls their intents,
        cluster.md §5.3)."""
        return self._latches.posts()

    def settle(self, post_id: str, record_hash: str) -> None:
        """Resolve and drop the post's latches with the RecordHash its stored intent holds:
        it certified before they were registered (before a restart, or while the row was
        being read). Nothing happens when no latch waits."""
        self._latches.resolve(post_id, record_hash)

    def refuse(self, post_id: str) -> None:
        """The post's stored intent was refused and never certifies (a cluster's sequencer
        refused it, cluster.md §5.2, §5.4): its waiting sends answer
        `certification-unavailable`. Nothing happens when no latch waits."""
        self._latches.fail(
            post_id,
            SendError(
                SendErrorReason.CERTIFICATION_UNAVAILABLE,
                "the conversation's sequencer refused the post",
            ),
        )

    def drained(self, post_id: str) -> asyncio.Future[None]:
        """A future of the caller's own, resolved when the Router accepts an envelope of
        this post's proposal."""
        return self._drained.add(post_id)

    def forget(self, handle: PostHandle) -> None:
        """Drop a send's own waiters (it returned or gave up; the intent goes on). Other
        latches of the same post — a collective answer's settle task — keep waiting."""
        self._latches.drop(handle.post_id, handle.certified)
        self._drained.drop(handle.post_id, handle.drained)

    # --- the drain -------------------------------------------------------------------------

    async def _drain_loop(self) -> None:
        while True:
            batch = [await self._drain.get()]
            while len(batch) < DRAIN_BATCH and not self._drain.empty():
                batch.append(self._drain.get_nowait())
            done: list[Write] = []
            for envelope in batch:
                state = await self._send_one(envelope)
                if state is not None:
                    done.append(
                        SetOutboxState(
                            agent_id=envelope.agent_id, row_id=envelope.row_id, state=state
                        )
                    )
            if done:
                await self._store.apply(done)

    async def _send_one(self, envelope: OutboundEnvelope) -> OutboxState | None:
        """Send one stored envelope until the Router answers (engine.md §4 client rules):
        an ambiguous failure sends the same bytes again as a `retry` (three tries 25 ms
        apart, then jittered backoff without end); a forgotten retry identity re-wraps the
        outer envelope under a fresh MessageId, replacing the stored row."""
        mode = SendMode.RETRY if envelope.retry else SendMode.INITIAL
        data = envelope.signed_envelope
        attempts = 0
        backoff = DETACHED_BACKOFF[0]
        while True:
            instance = self._instance_id
            if instance is None:
                await asyncio.sleep(backoff)
                continue
            try:
                outcome = await self._router.send(instance, mode, data)
            except RouterClosedError:
                raise
            except RouterVersionMismatch:
                logger.error("the Router speaks another protocol version")
                self._version_mismatch.set()
                self._set_state(RouterAttachment.DETACHED)
                await asyncio.sleep(DETACHED_BACKOFF[1])
                continue
            except Exception:
                # It may have been appended: only the same bytes as a retry are safe now.
                mode = SendMode.RETRY
                attempts += 1
                if attempts <= QUICK_RETRIES:
                    await asyncio.sleep(QUICK_RETRY_DELAY)
                    continue
                logger.warning("router send failed; retrying in %.1f s", backoff, exc_info=True)
                self._set_state(RouterAttachment.DETACHED)
                await asyncio.sleep(backoff * random.uniform(0.5, 1.5))
                backoff = min(backoff * 2, DETACHED_BACKOFF[1])
                continue
            match outcome:
                case Accepted(digest=digest) if digest == envelope_digest(data):
                    if envelope.post_id is not None:
                        self._drained.resolve(envelope.post_id, None)
                    return OutboxState.ACCEPTED
                case Accepted():
                    logger.error("the Router accepted other bytes under our identity; retrying")
                    mode = SendMode.RETRY
                    await asyncio.sleep(backoff)
                case RouterRestarted():
                    # Recovery re-sends what is still worth sending under the new instance.
                    self._recipients_changed.set()
                    return OutboxState.DISCARDED
                case RetryIdentityUnknown():
                    certifier = self._certifiers.get(envelope.agent_id)
                    if certifier is None:
                        return OutboxState.DISCARDED
                    data, message_id = certifier.rewrap(data)
                    await self.commit_writes(
                        [
                            PutOutbox(
                                agent_id=envelope.agent_id,
                                row_id=envelope.row_id,
                                conversation_id=envelope.conversation_id,
                                post_id=envelope.post_id,
                                message_id=message_id,
                                envelope=data,
                                state=OutboxState.PENDING,
                            )
                        ]
                    )
                    mode = SendMode.INITIAL
                case MessageInvalid(detail=detail):
                    logger.error("router refused our envelope as invalid: %s", detail)
                    return OutboxState.DISCARDED
                case IdempotencyConflict():
                    logger.error("router refused our envelope's identity as a conflict")
                    return OutboxState.DISCARDED

    async def commit_writes(self, writes: list[Write]) -> None:
        """Commit writes that change no in-memory state (a fatal failure stops the daemon)."""
        effects = Effects()
        effects.writes.extend(writes)
        await self.commit(effects)

    # --- the feed ----------------------------------------------------------------------------

    async def _feed_loop(self) -> None:
        """Read the Router forever: detached on failure with jittered backoff, never giving
        up; recovering after a restart, a feed gap or an invalid cursor."""
        backoff = DETACHED_BACKOFF[0]
        while True:
            try:
                if self._state is not RouterAttachment.ACTIVE:
                    await self._recover(resumed_cursor=False)
                await self._feed_once()
                backoff = DETACHED_BACKOFF[0]
            except (FatalStoreError, RouterClosedError):
                raise
            except Exception:
                logger.warning(
                    "router feed failed; detached, retrying in %.1f s", backoff, exc_info=True
                )
                self._set_state(RouterAttachment.DETACHED)
                await asyncio.sleep(backoff * random.uniform(0.5, 1.5))
                backoff = min(backoff * 2, DETACHED_BACKOFF[1])

    async def _feed_once(self) -> None:
        self._recipients_changed.clear()
        poll = asyncio.ensure_future(self._router.poll(self._recipients(), self._cursor))
        changed = asyncio.ensure_future(self._recipients_changed.wait())
        try:
            await asyncio.wait({poll, changed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Cancelled helpers finish on their own; awaiting them here could swallow this
            # task's own cancellation.
            changed.cancel()
            if not poll.done():
                poll.cancel()
        if poll.cancelled() or not poll.done():
            if self._instance_id is not None:
                current = await self._router.instance_id()
                if current != self._instance_id:
                    await self._recover(resumed_cursor=False)
            return
        outcome = poll.result()
        match outcome:
            case Batch(instance_id=instance) if instance != self._instance_id:
                self._observer.on_event(RouterEvent.ROUTER_RESTARTED)
                await self._recover(resumed_cursor=False)
            case Batch():
                await self._process(outcome)
            case FeedGap():
                self._observer.on_event(RouterEvent.FEED_GAP)
                self._cursor = None
                await self._recover(resumed_cursor=False)
            case CursorInvalid():
                self._observer.on_event(RouterEvent.CURSOR_INVALID)
                self._cursor = None
                await self._recover(resumed_cursor=False)

    async def _process(self, batch: Batch) -> None:
        effects = Effects()
        now = self._clock.time()
        for entry in batch.entries:
            try:
                signed = p.decode_signed_envelope(entry.signed_envelope)
                packet = p.envelope_packet(signed.envelope)
            except p.ProtocolError as error:
                logger.debug("undecodable envelope order=%d: %s", entry.order, error.detail)
                continue
            for recipient in entry.recipients:
                certifier = self._certifiers.get(recipient)
                if certifier is not None:
                    certifier.receive(signed, packet, effects, now=now)
        if batch.entries or batch.cursor != self._cursor:
            effects.writes.append(
                PutCursor(subscription=SUBSCRIPTION, cursor=batch.cursor.encode())
            )
        self._cursor = batch.cursor
        await self.commit(effects)

    # --- timers and catch-up -----------------------------------------------------------------

    async def _tick_loop(self) -> None:
        while True:
            await self._clock.sleep(TICK_INTERVAL)
            if self._state is not RouterAttachment.ACTIVE:
                continue
            effects = Effects()
            now = self._clock.time()
            for certifier in self._certifiers.values():
                certifier.tick(effects, now=now)
            if effects:
                await self.commit(effects)

    async def _answer_catch_up(self, agent_id: str, request: p.CatchUpRequest) -> None:
        certifier = self._certifiers.get(agent_id)
        if certifier is None:
            return
        item, has_more = await self._catch_up_item(agent_id, request)
        effects = Effects()
        certifier.answer_catch_up(request, item, has_more, effects)
        await self.commit(effects)

    async def _catch_up_item(
        self, agent_id: str, request: p.CatchUpRequest
    ) -> tuple[p.CatchUpItem | None, bool]:
        """The item after the requester's position in this member's store (§5.7)."""
        after_depth = 0
        if request.known_record_hash is not None:
            known = await self._store.record(agent_id, request.known_record_hash)
            if known is None or known.conversation_id != request.conversation_id:
                return None, False
            after_depth = known.depth
            assert request.known_anchor_hash is not None
            completed = await self._store.completed_reanchor(
                agent_id, request.conversation_id, request.known_anchor_hash
            )
            if completed is not None:
                reanchor = p.decode(completed, p.CompletedReanchor)
                if reanchor.reanchor.selected_record_hash == request.known_record_hash:
                    return reanchor, True
        rows = await self._store.records(agent_id, request.conversation_id, after_depth, 2)
        if not rows:
            return None, False
        record = p.decode(rows[0].record, p.CertifiedRecord)
        return record, len(rows) > 1

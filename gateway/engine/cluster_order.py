"""Local order in a cluster: one sequencer per conversation across replicas (cluster.md §5).

A cluster is one local instance: every conversation among cluster agents is local
(`engine.md` §5.10), certified by the replica holding its sequencing partition, which signs
with every member's key although most members are homed elsewhere. `ClusterOrder` is
`LocalOrder` with what that changes:

- **Binding.** A post to a conversation sequenced here binds as `LocalOrder` binds it (its
  conversation first loaded from rows read after the claim). A post to a conversation
  sequenced elsewhere binds only its intent, with what the sequencer needs to admit it
  (`Sequencing.intent_writes`), and once the bind committed the sequencer is hinted
  (cluster.md §5.1).
- **Admission.** `admit(conversation_id)` (a hint or the poll named it) queues the
  conversation's open intents bound at other replicas, in bind order, never one already
  queued or certified: the read is compared with the conversation's unit generation when it
  was issued, and the posts of units committed since are skipped (cluster.md §5.2).
- **Keys and order.** Members not hosted here sign with the keys `Sequencing` loaded; the
  database orders deliveries at insert, so units carry no commit sequence.
- **Backstops.** Units move heads only `WHERE depth = $old` and complete intents only `WHERE
  state = 'open'`; a unit that matches no row, or that a unique backstop refuses, is stale:
  its conversation is rebuilt from rows (cluster.md §5.2).
- **Refusals and set-aside as rows.** An intent bound with another membership than the
  conversation's foundation is refused; a conversation set aside is written so at every
  member's row, and its open intents are refused, now and whenever admission meets more of
  them. Their authors' homes are told (`Sequencing.refused`), and their sends answer
  `certification-unavailable` (cluster.md §5.2, §5.4).
- **Release.** `forget` drops the conversations of a partition being released, leaving those
  with a unit in flight for the caller to retry once it committed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable

from harness_contract.ids import RandomId, agent_id_order_key
from harness_contract.values import Content

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.engine import protocol as p
from gateway.engine.certifier import Certifier
from gateway.engine.effects import Effects
from gateway.engine.local import (
    RECENT_UNITS,
    UNIT_RETRY_FIRST,
    UNIT_RETRY_MOST,
    LocalObserver,
    LocalOrder,
    LocalUnit,
    SetAside,
    _Conversation,
    _conversation_write,
    _Intent,
    _restored_conversation,
    _Unloadable,
)
from gateway.engine.sequencing import OpenIntent, Sequencing
from gateway.engine.state import BindRefused
from gateway.identity.keys import SigningKey
from gateway.store.errors import ConstraintViolation, StoreUnavailable
from gateway.store.port import Store
from gateway.store.records import (
    ConversationRow,
    IntentRow,
    IntentState,
    PutIntent,
    RefuseIntent,
    SetAsideRow,
    Write,
    set_aside_reason,
)

logger = logging.getLogger(__name__)


class ClusterOrder(LocalOrder):
    """`LocalOrder` for one replica of a cluster (cluster.md §5)."""

    _conditional = True  # another sequencer may have written the rows (cluster.md §5.2)

    def __init__(
        self,
        *,
        sequencing: Sequencing,
        store: Store,
        instance_id: str,
        certifiers: Callable[[], dict[str, Certifier]],
        release: Callable[[Effects], None],
        on_fatal: Callable[[BaseException], None],
        observer: LocalObserver | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(
            store=store,
            instance_id=instance_id,
            certifiers=certifiers,
            release=release,
            on_fatal=on_fatal,
            observer=observer,
            clock=clock,
        )
        self._sequencing = sequencing
        self._remote: dict[str, p.MembershipDescriptor] = {}
        """PostIds bound here whose conversation is sequenced elsewhere, until their bind
        committed (then the sequencer is hinted) or definitely failed."""
        self._loading: dict[str, asyncio.Future[None]] = {}
        self._reloads: set[asyncio.Task[None]] = set()
        """Conversations being rebuilt from rows after a stale unit, and refusals and
        set-asides being written."""

    # --- binding (cluster.md §5.1) ---------------------------------------------------------

    def accepts(self, descriptor: p.MembershipDescriptor) -> bool:
        """Every conversation of a cluster is local: its members are cluster agents
        (`prepare` refuses one that is not)."""
        return True

    async def prepare(self, descriptor: p.MembershipDescriptor) -> None:
        """Load what a bind needs: every member's key, and the conversation from its rows
        when it is sequenced here. Raises `BindRefused` when the bind could only fail."""
        await super().prepare(descriptor)
        await self._sequencing.prepare(descriptor)
        if self._sequencing.here(descriptor):
            await self._ensure(descriptor)

    def bind(
        self,
        certifier: Certifier,
        descriptor: p.MembershipDescriptor,
        content: Content,
        *,
        now: float,
    ) -> tuple[str, list[Write]]:
        """Bind as `LocalOrder` does here; only the intent when sequenced elsewhere. Either
        way the intent row names its sequencing partition, so whichever replica holds it
        next finds the intent open (cluster.md §3.4)."""
        if self._sequencing.here(descriptor):
            post_id, writes = super().bind(certifier, descriptor, content, now=now)
            return post_id, [
                placed
                for write in writes
                for placed in (
                    self._sequencing.intent_writes(write, descriptor)
                    if isinstance(write, PutIntent)
                    else [write]
                )
            ]
        if descriptor.conversation_id in self._set_aside:
            raise BindRefused("the conversation is set aside")
        post_id = RandomId.POST.mint()
        intent = _Intent(
            author_id=certifier.agent_id,
            post_id=post_id,
            intent=p.PostIntent(
                conversation_id=descriptor.conversation_id,
                membership_hash=p.membership_hash(descriptor),
                author_agent_id=certifier.agent_id,
                post_id=post_id,
                content=content,
            ),
            bind_seq=certifier.reserve_bind_seq(),
            bound_at=now,
            resumed=False,
            ready=False,
        )
        self._remote[post_id] = descriptor
        write = intent.write(intent.author_id, IntentState.OPEN, None)
        return post_id, self._sequencing.intent_writes(write, descriptor)

    def bound(self, posts: Iterable[tuple[str, str]]) -> None:
        """These binds committed: queue the ones sequenced here, hint the others' sequencers."""
        here: list[tuple[str, str]] = []
        for conversation_id, post_id in posts:
            remote = self._remote.pop(post_id, None)
            if remote is None:
                here.append((conversation_id, post_id))
            else:
                self._sequencing.handed_off(remote)
        super().bound(here)

    def unbind(self, posts: Iterable[tuple[str, str]]) -> None:
        """Forget binds that definitely did not commit."""
        super().unbind(
            [
                (conversation, post)
                for conversation, post in posts
                if not self._remote.pop(post, None)
            ]
        )

    def restore(
        self, agent_id: str, rows: Iterable[ConversationRow], intents: Iterable[IntentRow]
    ) -> None:
        """Nothing to keep: a cluster's sequencer loads each conversation from rows read after
        its claim, when it is first needed (cluster.md §3.2, §5.2)."""

    async def stored_membership(self, conversation_id: str) -> p.MembershipDescriptor | None:
        """The descriptor of a conversation, from memory when it is sequenced here, else from
        its members' rows (a member answering a request sequenced elsewhere, cluster.md §7)."""
        known = self.membership_of(conversation_id)
        if known is not None:
            return known
        rows = await self._sequencing.stored(conversation_id)
        if not rows:
            return None
        try:
            return p.decode(next(iter(rows.values())).descriptor, p.MembershipDescriptor)
        except p.ProtocolError:
            return None

    # --- admission (cluster.md §5.2) -------------------------------------------------------

    async def admit(self, conversation_id: str) -> None:
        """Queue the open intents of a conversation sequenced here that were bound at other
        replicas, never one already queued or certified."""
        for _ in range(RECENT_UNITS):
            if conversation_id in self._set_aside:
                # Intents bound before their homes saw the set-aside row (cluster.md §5.4).
                await self._refuse_open(conversation_id)
                return
            conversation = self._conversations.get(conversation_id)
            generation = 0 if conversation is None else conversation.units
            intents = await self._sequencing.open_intents(conversation_id)
            if not intents:
                return
            if conversation is None:
                if not await self._found_for(intents[0]) and (
                    conversation_id not in self._set_aside
                ):
                    return
                continue  # read again, with a generation to compare against
            if self._conversations.get(conversation_id) is not conversation:
                continue
            if conversation.units - generation >= RECENT_UNITS:
                continue
            self._queue_open(conversation, intents, since=generation)
            return

    async def _ensure(self, descriptor: p.MembershipDescriptor) -> None:
        """Load a conversation sequenced here from its rows, once, unless it is in memory."""
        conversation_id = descriptor.conversation_id
        while conversation_id not in self._conversations and conversation_id not in self._set_aside:
            loading = self._loading.get(conversation_id)
            if loading is not None:
                await asyncio.shield(loading)
                continue
            future = asyncio.get_running_loop().create_future()
            self._loading[conversation_id] = future
            try:
                await self._load(descriptor)
            finally:
                del self._loading[conversation_id]
                future.set_result(None)
            return

    async def _load(self, descriptor: p.MembershipDescriptor) -> None:
        conversation_id = descriptor.conversation_id
        rows = await self._sequencing.stored(conversation_id)
        if not rows or conversation_id in self._conversations:
            return  # no unit yet: the first bind or admission founds it in memory
        members = frozenset(descriptor.member_agent_ids)
        reason = set_aside_reason(rows.values())
        if reason is not None:
            # Set aside by an earlier holder (cluster.md §5.4): stays so, and is not written again.
            self._set_aside.setdefault(
                conversation_id,
                SetAside(
                    conversation_id=conversation_id,
                    member_agent_ids=tuple(sorted(members, key=agent_id_order_key)),
                    reason=reason,
                ),
            )
            logger.warning(
                "conversation found set aside conversation=%s: %s", conversation_id, reason
            )
            return
        try:
            self._conversations[conversation_id] = _restored_conversation(
                rows, members.__contains__
            )
        except _Unloadable as unloadable:
            self.set_aside(
                conversation_id,
                tuple(sorted(members, key=agent_id_order_key)),
                unloadable.reason,
            )

    async def _found_for(self, first: OpenIntent) -> bool:
        """Bring the conversation of an admitted intent into memory: from its rows, or new
        (its first unit writes the foundation at every member). False when it is not ours."""
        try:
            descriptor = p.decode(first.descriptor, p.MembershipDescriptor)
        except p.ProtocolError as error:
            logger.error(
                "bound intent's conversation does not decode post=%s: %s",
                first.row.post_id,
                error.detail,
            )
            return False
        if not self._sequencing.here(descriptor):
            return False
        try:
            await self._sequencing.prepare(descriptor)
        except BindRefused as refused:
            logger.error(
                "bound intent cannot be sequenced conversation=%s: %s",
                descriptor.conversation_id,
                refused,
            )
            return False
        await self._ensure(descriptor)
        conversation_id = descriptor.conversation_id
        if conversation_id in self._set_aside:
            return False
        if conversation_id not in self._conversations:
            self._conversations[conversation_id] = _Conversation.genesis(
                descriptor, p.membership_hash(descriptor), self.instance_id
            )
        return True

    def _queue_open(
        self, conversation: _Conversation, intents: list[OpenIntent], *, since: int
    ) -> None:
        done: set[str] = set()
        for generation, posts in conversation.recent:
            if generation > since:
                done.update(posts)
        queued = {intent.post_id for intent in conversation.queue}
        ordered = sorted(
            intents,
            key=lambda item: (
                item.row.bound_at,
                agent_id_order_key(item.author_id),
                item.row.bind_seq,
            ),
        )
        added = False
        refused: list[tuple[str, str]] = []
        for item in ordered:
            row = item.row
            if row.post_id in done or row.post_id in queued:
                continue
            try:
                intent = p.decode(row.intent, p.PostIntent)
            except p.ProtocolError as error:
                self.set_aside(
                    conversation.id,
                    conversation.member_ids,
                    f"intent {row.post_id}: {error.detail}",
                )
                return
            if intent.membership_hash != conversation.membership_hash:
                # Two homes bound first posts from different cards (cluster.md §5.2): this one
                # never certifies here; it is refused, and its send answers
                # `certification-unavailable`.
                logger.warning(
                    "intent with another membership refused conversation=%s post=%s",
                    conversation.id,
                    row.post_id,
                )
                refused.append((item.author_id, row.post_id))
                continue
            conversation.queue.append(
                _Intent(
                    author_id=item.author_id,
                    post_id=row.post_id,
                    intent=intent,
                    bind_seq=row.bind_seq,
                    bound_at=row.bound_at,
                    resumed=True,
                    ready=True,
                )
            )
            added = True
        if refused:
            self._background(self._write_refusals(conversation.id, refused, []), "local-refuse")
        if added:
            self._ready[conversation.id] = None
            self._wake.set()

    def _stale(self, unit: LocalUnit, error: Exception) -> bool:
        """A unit the backstops refused (a post certified already, a delivery inserted
        already: cluster.md §5.2) is stale, not broken: its conversation is dropped from
        memory and rebuilt from rows, where the certified posts are no longer open."""
        if not isinstance(error, ConstraintViolation):
            return False
        conversation_id = unit.conversation.id
        logger.warning("stale local unit; rebuilding from rows conversation=%s", conversation_id)
        if self._conversations.get(conversation_id) is unit.conversation:
            del self._conversations[conversation_id]
            self._ready.pop(conversation_id, None)
        self._background(self.admit(conversation_id), "local-reload")
        return True

    def abandon(self, unit: LocalUnit) -> None:
        """The bind carrying this unit did not commit, perhaps because its rows were stale
        (cluster.md §5.2): the conversation is rebuilt from rows, unless the bind was
        founding it (then `unbind` forgets it)."""
        super().abandon(unit)
        if unit.conversation.founding is None:
            self._stale(unit, ConstraintViolation("the bind carrying the unit failed"))

    # --- refusals and set-aside as rows (cluster.md §5.2, §5.4) ---------------------------

    def set_aside(self, conversation_id: str, members: tuple[str, ...], reason: str) -> None:
        """As `LocalOrder.set_aside`, and written into every member's row with its open
        intents refused, so that homes refuse new binds and a later holder of the
        sequencing partition finds it set aside (cluster.md §5.4)."""
        if conversation_id in self._set_aside:
            return
        conversation = self._conversations.get(conversation_id)
        super().set_aside(conversation_id, members, reason)
        item = self._set_aside[conversation_id]
        rows: list[Write] = [
            SetAsideRow(
                agent_id=member,
                conversation_id=conversation_id,
                reason=reason,
                foundation=None
                if conversation is None
                else _conversation_write(conversation, member, head=None, depth=0, moved_from=0),
            )
            for member in item.member_agent_ids
        ]
        self._background(self._write_refusals(conversation_id, None, rows), "local-set-aside")

    async def _refuse_open(self, conversation_id: str) -> None:
        """Refuse the open intents of a conversation set aside (cluster.md §5.4)."""
        await self._write_refusals(conversation_id, None, [])

    async def _write_refusals(
        self,
        conversation_id: str,
        posts: list[tuple[str, str]] | None,
        rows: list[Write],
    ) -> None:
        """Write `rows` with these (author, PostId) intents refused (None: every open intent
        of the conversation, read now), retrying while the store is unavailable, then tell
        the authors' homes. An intent no longer open is left as it is."""
        delay = UNIT_RETRY_FIRST
        while True:
            try:
                if posts is None:
                    posts = [
                        (intent.author_id, intent.row.post_id)
                        for intent in await self._sequencing.open_intents(conversation_id)
                    ]
                writes = [
                    *rows,
                    *(RefuseIntent(agent_id=author, post_id=post) for author, post in posts),
                ]
                if writes:
                    await self._store.apply(writes)
                break
            except StoreUnavailable:  # nothing written: the rows say nothing yet, so again
                logger.warning(
                    "refusals not written yet; retrying in %.2f s conversation=%s",
                    delay,
                    conversation_id,
                )
                await self._clock.sleep(delay)
                delay = min(UNIT_RETRY_MOST, delay * 2)
            except Exception:  # shutdown, a fence lost, a defect: admission refuses them later
                logger.warning(
                    "refusals not written conversation=%s", conversation_id, exc_info=True
                )
                return
        if posts:
            self._sequencing.refused(posts)

    def _background(self, coroutine: Coroutine[object, object, None], name: str) -> None:
        task = asyncio.ensure_future(coroutine)
        task.set_name(name)
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def close(self) -> None:
        """Stop rebuilding conversations, then as `LocalOrder.close`."""
        reloads = list(self._reloads)
        for task in reloads:
            task.cancel()
        await asyncio.gather(*reloads, return_exceptions=True)
        await super().close()

    # --- release (cluster.md §3.2) ---------------------------------------------------------

    def forget(self, conversation_ids: list[str]) -> list[str]:
        """Drop conversations whose sequencing partition this replica is releasing; return
        those it could not drop yet because a unit or a foundation is in flight."""
        busy: list[str] = []
        for conversation_id in conversation_ids:
            conversation = self._conversations.get(conversation_id)
            if conversation is None:
                self._set_aside.pop(conversation_id, None)
                continue
            if conversation.in_flight or conversation.founding is not None:
                busy.append(conversation_id)
                continue
            del self._conversations[conversation_id]
            self._ready.pop(conversation_id, None)
        return busy

    def conversation_ids(self) -> list[str]:
        """Every conversation in memory, set aside or not."""
        return [*self._conversations, *self._set_aside]

    # --- keys and order -------------------------------------------------------------------

    def _key(self, certifiers: dict[str, Certifier], member: str) -> SigningKey:
        certifier = certifiers.get(member)
        if certifier is not None:
            return certifier.identity.key
        return self._sequencing.key(member)

    def _commit_seq(self, certifiers: dict[str, Certifier], member: str) -> int | None:
        return None  # the database orders deliveries at insert (cluster.md §5.2)


__all__ = ["ClusterOrder"]

"""gather, all_gather, answers and the all_gather close for one hosted agent.

collectives.md §1-§4. `Collectives` is the requester's side: it owns the open operations,
their deadline timers and every background task (the member's side's too). The member's side
(received requests, answers, closes) is its `responder`, which callers reach directly; an
answer, which may be both, is classified here and recorded there.

The open-operation table is the token of ownership: the send path (refusal), the deadline
timer and the last outcome (completion) each remove an operation before acting, and a path
that finds it gone does nothing, so an operation ends in exactly one refusal or one result.
Every check-then-change runs without an `await` in between; state reaches the store in the
same transaction as the change that caused it (the request intents, a classified answer, an
inbox item), so a restart rebuilds it (§4.7).

The collectives reach their agent only through `PostingPort` (members, posts, inbox items)
and read the time only through a `Clock`, so they run in a unit test on in-memory fakes.

An agent has at most `max_open` operations open: asked (or being asked) and without a
result yet, an all_gather's close included, and the ones a restart loaded back. An ask past
the bound is refused `too-many-operations` before anything is looked up, checked, bound or
stored; the slot is taken without an `await` in between, so concurrent asks cannot pass it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Final

from harness_contract.addresses import (
    DirectConversation,
    GroupConversation,
    agent_address,
    canonicalize,
)
from harness_contract.codec import CodecError
from harness_contract.collective_part import ResponsePart
from harness_contract.content import close_content, request_content
from harness_contract.errors import (
    CollectiveError,
    FirewallSendError,
    MembersUnreachable,
    SendError,
    SendErrorReason,
    UnreachableMember,
)
from harness_contract.forms import FormSchemaError, admit_schema
from harness_contract.ids import mint_collective
from harness_contract.kinds import CollectiveEnd, ConsumedKind, DeliveryItem, MemberOutcomeKind
from harness_contract.values import (
    Answered,
    CollectiveOp,
    CollectiveResultItem,
    Content,
    Declined,
    Invalid,
    MemberOutcome,
    MemberResult,
    NoAnswer,
    OperationFailedItem,
    RequestedSchema,
)

from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.collectives.port import (
    COLLECTIVE_SEND_WAIT,
    DEADLINE_MAX_SECONDS,
    MAX_OPEN_OPERATIONS,
    Classified,
    CollectiveAgent,
    CollectiveRefusal,
    PostingPort,
    refusal_of,
)
from gateway.collectives.responder import Responder
from gateway.collectives.state import (
    RETENTION_MS,
    Operation,
    OperationState,
    judge,
)
from gateway.engine import protocol as p
from gateway.engine.network import PostHandle
from gateway.store.records import PutOperation, Write
from gateway.tasks import OwnedTasks

logger = logging.getLogger(__name__)

TIMER_STEP: Final = 86_400.0
"""Deadline timers sleep at most a day at a time and re-read the wall clock (§4.5)."""

CLOSE_RETENTION_MS: Final = RETENTION_MS
"""An all_gather close still uncertified one hour past the deadline has failed (§4.2)."""

ALL_GATHER_DETAIL: Final = "an all_gather asks a group of two or more other agents"


class Collectives:
    """The collective operations of one hosted agent."""

    def __init__(
        self,
        posting: PostingPort,
        *,
        agent_name: str,
        agent_id: str,
        clock: Clock = SYSTEM_CLOCK,
        on_member_outcome: Callable[[CollectiveOp, MemberOutcomeKind], None] = (
            lambda op, outcome: None
        ),
        on_result: Callable[[CollectiveOp, CollectiveEnd], None] = lambda op, end: None,
        max_open: int = MAX_OPEN_OPERATIONS,
    ) -> None:
        self._agent = CollectiveAgent(
            posting=posting, name=agent_name, agent_id=agent_id, clock=clock
        )
        self._posting = posting
        self._on_member_outcome = on_member_outcome
        self._on_result = on_result
        self._max_open = max_open
        self._operations: dict[str, Operation] = {}
        self._asking: set[str] = set()
        """Operations whose send is running (they hold a slot before they are open)."""
        self._closing: set[str] = set()
        """all_gathers completed whose close is not yet certified (their result is not out)."""
        self._at_bound = False
        """The bound refused an ask since one was last admitted (one WARNING per episode)."""
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._tasks = OwnedTasks(self._task_failed)
        self.responder: Final = Responder(self._agent, spawn=self._spawn, asking=self._asks_in)
        """The member's side (§1.5, §2.5, §3.1, §4.3): answers, received requests and closes,
        which callers reach directly; its background tasks are this object's."""

    def held_count(self) -> int:
        """Operations counted against the bound: open, being asked, or closing."""
        return len(self._operations.keys() | self._asking | self._closing)

    def _asks_in(self, address: str) -> bool:
        """This agent has a question open in the conversation at `address`: an all_gather in
        its group, or a gather whose request went to that member's direct conversation."""
        now = self._agent.now_ms()
        for operation in self._operations.values():
            if operation.state is not OperationState.OPEN or now >= operation.deadline_at:
                continue
            if operation.op is CollectiveOp.ALL_GATHER:
                if operation.to == address:
                    return True
            elif any(agent_address(member) == address for member in operation.members):
                return True
        return False

    def open_counts(self) -> dict[CollectiveOp, int]:
        """Open operations by op."""
        counts = dict.fromkeys(CollectiveOp, 0)
        for operation in self._operations.values():
            counts[operation.op] += 1
        return counts

    # --- lifecycle ---------------------------------------------------------------------

    def restore(self, operations: Sequence[bytes], requests: Sequence[bytes]) -> None:
        """Rebuild from the rows stored with the intents and inbox items (§4.7)."""
        for row in operations:
            try:
                operation = Operation.from_row(row)
            except CodecError:
                logger.exception("an operation row does not decode; it is skipped")
                continue
            self._operations[operation.id] = operation
        self.responder.restore(requests)

    async def resume(self) -> None:
        """After a restore: restart deadline timers (a deadline passed while down completes
        at once, with what was counted), and finish closes and answers in flight."""
        for operation in list(self._operations.values()):
            if operation.state is OperationState.CLOSING:
                self._operations.pop(operation.id, None)
                self._closing.add(operation.id)
                if operation.close_post_id is None:
                    self._spawn(self._post_close(operation), f"close-{operation.id}")
                else:
                    latch = await self._posting.settled(operation.close_post_id)
                    self._spawn(self._finish_close(operation, latch), f"close-{operation.id}")
            elif operation.state is OperationState.OPEN:
                # Its send did not survive the restart: nothing is left to refuse.
                operation.requests_settled = True
                self._arm(operation)
        await self.responder.resume()

    async def close(self) -> None:
        """Cancel timers and tasks; operations are rebuilt from the store after restart."""
        await self._tasks.cancel_all(also=self._timers.values())
        self._timers.clear()

    def _spawn(self, coroutine: Coroutine[object, object, None], name: str) -> None:
        self._tasks.spawn(coroutine, name)

    @staticmethod
    def _task_failed(task: asyncio.Task[None], error: BaseException) -> None:
        logger.error("collective task failed task=%s", task.get_name(), exc_info=error)

    # --- asking (§1.1, §1.3, §1.4) -----------------------------------------------------------

    async def ask(
        self,
        *,
        op: CollectiveOp,
        to: str,
        question: str,
        deadline: int,
        requested_schema: RequestedSchema,
    ) -> str:
        """Run a gather or all_gather send; returns the operation id or raises
        `CollectiveRefusal` (carrying a `SendError` or `CollectiveError`).

        At the bound of open operations it raises `SendError` `too-many-operations`
        itself, not a `CollectiveRefusal`: the send fails with it even under
        `failureDelivery: "inbound"`, since an `operationFailed` item per refused ask
        would store a row for each ask the bound is there to refuse."""
        # Before any await: the slot is taken (or refused) in the same step as the count.
        if self.held_count() >= self._max_open:
            self._refuse_at_bound()
            raise SendError(
                SendErrorReason.TOO_MANY_OPERATIONS,
                f"this agent has {self._max_open:,} gather and all_gather operations open, "
                "the most the gateway allows; nothing was sent; wait for a result before "
                "asking again",
            )
        nonce, operation_id = mint_collective(self._agent.address)
        self._at_bound = False
        self._asking.add(operation_id)
        try:
            return await self._ask(
                op=op,
                to=to,
                question=question,
                deadline=deadline,
                requested_schema=requested_schema,
                nonce=nonce,
                operation_id=operation_id,
            )
        finally:
            self._asking.discard(operation_id)

    def _refuse_at_bound(self) -> None:
        if self._at_bound:
            logger.debug("ask refused at the bound of open operations bound=%d", self._max_open)
            return
        # A client's doing, not a fault; WARNING once per episode so an operator sees a
        # runaway or hostile agent without a line per refused ask. The agent is in the
        # line's context (set at the RPC boundary).
        self._at_bound = True
        logger.warning(
            "agent at its bound of open collective operations; asks are refused "
            "too-many-operations until one completes bound=%d",
            self._max_open,
        )

    async def _ask(
        self,
        *,
        op: CollectiveOp,
        to: str,
        question: str,
        deadline: int,
        requested_schema: RequestedSchema,
        nonce: str,
        operation_id: str,
    ) -> str:
        refuse_to = to
        try:
            conversation = canonicalize(to, self._agent.name)
            refuse_to = conversation.address if isinstance(conversation, GroupConversation) else to
            if op is CollectiveOp.ALL_GATHER and not (
                isinstance(conversation, GroupConversation) and len(conversation.others) >= 2
            ):
                raise SendError(SendErrorReason.MEMBERSHIP_INVALID, ALL_GATHER_DETAIL)
            operation_to = (
                conversation.address
                if isinstance(conversation, GroupConversation)
                else agent_address(conversation.peer)
            )
            refuse_to = operation_to
            try:
                schema = admit_schema(requested_schema)
            except FormSchemaError as error:
                raise CollectiveError(operation_id, error.failure) from None
            members = conversation.others
            cards = await self._posting.resolve_cards(members)
            unknown = [
                UnreachableMember(member=agent_address(name), reason=SendErrorReason.UNKNOWN_AGENT)
                for name in members
                if isinstance(cards[name], SendError)
                and cards[name].send_reason is SendErrorReason.UNKNOWN_AGENT  # type: ignore[union-attr]
            ]
            if unknown:
                raise CollectiveError(operation_id, MembersUnreachable(members=tuple(unknown)))
            if not 1 <= deadline <= DEADLINE_MAX_SECONDS:
                raise SendError(
                    SendErrorReason.CONTENT_INVALID, "the deadline must be 1 to 2,592,000 seconds"
                )
            started = self._agent.now_ms()
            deadline_at = started + deadline * 1000
            content = request_content(
                question=question,
                op=op,
                id=operation_id,
                nonce=nonce,
                deadline_at=deadline_at,
                requested_schema=schema,
            )
            # One firewall check for the operation, every member its recipient (§1.1 step 6):
            # the question and its form, whose texts reach the members' models too.
            await self._posting.check_send(members, question, form=schema)
            operation = Operation(
                op=op,
                id=operation_id,
                to=operation_to,
                question=question,
                schema=schema,
                deadline_at=deadline_at,
                members=members,
            )
            if op is CollectiveOp.GATHER:
                await self._run_gather(operation, cards, content)
            else:
                await self._run_all_gather(operation, cards, content, conversation)
        except (SendError, CollectiveError, FirewallSendError) as error:
            raise CollectiveRefusal(error, operation_id=operation_id, to=refuse_to) from None
        return operation_id

    def requester_of(self, operation_id: str) -> str | None:
        """Who asked an operation: this agent for its own, the requester for one it was
        asked (None when neither is held)."""
        if operation_id in self._operations:
            return self._agent.name
        return self.responder.requester_of(operation_id)

    def _wait_bound(self, operation: Operation) -> float:
        return max(
            0.0, min(COLLECTIVE_SEND_WAIT, (operation.deadline_at - self._agent.now_ms()) / 1000)
        )

    async def _run_gather(
        self,
        operation: Operation,
        cards: dict[str, p.SignedAgentCard | SendError],
        content: Content,
    ) -> None:
        reachable = [name for name in operation.members if not isinstance(cards[name], SendError)]
        refused: dict[str, SendError] = {
            name: error for name, error in cards.items() if isinstance(error, SendError)
        }
        posts = [
            (self._posting.membership_with([cards[name]]), content)  # type: ignore[list-item]
            for name in reachable
        ]

        def rows(post_ids: Sequence[str]) -> Sequence[Write]:
            operation.post_ids = dict(zip(reachable, post_ids, strict=True))
            return [self._operation_write(operation)]

        # The operation opens before posting so answers can count while posts are in flight.
        self._operations[operation.id] = operation
        self._arm(operation)
        handles: list[PostHandle] = []
        if posts:
            try:
                handles = await self._posting.bind_posts(
                    posts, extra_writes=rows, within=self._wait_bound(operation)
                )
            except SendError as error:
                refused.update(dict.fromkeys(reachable, error))
        wait = self._wait_bound(operation)
        if handles:
            await asyncio.wait([handle.certified for handle in handles], timeout=wait)
        for name, handle in zip(reachable, handles, strict=False):
            # A request post a cluster's sequencer refused never reaches its member.
            if (failed := refusal_of(handle.certified)) is not None:
                refused[name] = failed
        for name in refused:
            if name not in operation.outcomes:
                operation.outcomes[name] = NoAnswer()
        if (
            len(refused) == len(operation.members)
            and self._operations.get(operation.id) is operation
        ):
            self._take(operation)
            raise CollectiveError(
                operation.id,
                MembersUnreachable(
                    members=tuple(
                        UnreachableMember(
                            member=agent_address(name),
                            reason=refused[name].send_reason,
                            detail=refused[name].detail,
                        )
                        for name in operation.members
                    )
                ),
            )
        operation.requests_settled = True
        if self._operations.get(operation.id) is operation:
            await self._maybe_complete(operation, end=CollectiveEnd.SETTLED)

    async def _run_all_gather(
        self,
        operation: Operation,
        cards: dict[str, p.SignedAgentCard | SendError],
        content: Content,
        conversation: DirectConversation | GroupConversation,
    ) -> None:
        failures = [error for error in cards.values() if isinstance(error, SendError)]
        self._operations[operation.id] = operation
        self._arm(operation)
        handle: PostHandle | None = None
        failure: SendError | None = failures[0] if failures else None
        if failure is None:
            member_cards = [card for card in cards.values() if isinstance(card, p.SignedAgentCard)]
            descriptor = self._posting.membership_with(member_cards)
            operation.conversation_id = descriptor.conversation_id

            def rows(post_ids: Sequence[str]) -> Sequence[Write]:
                operation.post_ids = {"": post_ids[0]}
                return [self._operation_write(operation)]

            try:
                [handle] = await self._posting.bind_posts(
                    [(descriptor, content)], extra_writes=rows, within=self._wait_bound(operation)
                )
            except SendError as error:
                failure = error
        if handle is not None:
            await asyncio.wait({handle.certified}, timeout=self._wait_bound(operation))
            failure = refusal_of(handle.certified)
            if failure is None and handle.certified.done() and not handle.certified.cancelled():
                operation.requests_settled = True
                return
        if self._operations.get(operation.id) is not operation:
            return  # the deadline completed it: its result stands
        self._take(operation)
        if failure is None:
            reason = (
                SendErrorReason.DELIVERY_PENDING
                if handle is not None and not handle.drained.done()
                else SendErrorReason.CERTIFICATION_UNAVAILABLE
            )
            failure = SendError(reason)
        await self._posting.commit([self._operation_write(operation)])
        raise CollectiveError(
            operation.id,
            MembersUnreachable(
                members=tuple(
                    UnreachableMember(
                        member=agent_address(name),
                        reason=failure.send_reason,
                        detail=failure.detail,
                    )
                    for name in operation.members
                )
            ),
        )

    # --- ownership, timers, completion (§1.8, §4) ------------------------------------------

    def _take(self, operation: Operation) -> None:
        """Remove the operation from the open table (the one owner acts) and stop its timer."""
        self._operations.pop(operation.id, None)
        operation.state = OperationState.DONE
        timer = self._timers.pop(operation.id, None)
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()

    def _arm(self, operation: Operation) -> None:
        if operation.id not in self._timers:
            task = asyncio.ensure_future(self._deadline_timer(operation))
            task.set_name(f"deadline-{operation.id}")
            self._timers[operation.id] = task

    async def _deadline_timer(self, operation: Operation) -> None:
        while True:
            remaining = (operation.deadline_at - self._agent.now_ms()) / 1000
            if remaining <= 0:
                break
            await self._agent.clock.sleep(min(remaining, TIMER_STEP))
        self._timers.pop(operation.id, None)
        if (
            self._operations.get(operation.id) is operation
            and operation.state is OperationState.OPEN
        ):
            await self._complete(operation, end=CollectiveEnd.DEADLINE)

    def _operation_write(self, operation: Operation) -> Write:
        return PutOperation(
            agent_id=self._agent.agent_id,
            operation_id=operation.id,
            open=operation.state is not OperationState.DONE,
            row=operation.to_row(),
        )

    def _completion_ready(self, operation: Operation) -> bool:
        if len(operation.outcomes) < len(operation.members):
            return False
        return operation.op is CollectiveOp.ALL_GATHER or operation.requests_settled

    async def _maybe_complete(self, operation: Operation, *, end: CollectiveEnd) -> None:
        if self._completion_ready(operation):
            await self._complete(operation, end=end)

    def _result(self, operation: Operation) -> CollectiveResultItem:
        return CollectiveResultItem(
            op=operation.op,
            id=operation.id,
            to=operation.to,
            question=operation.question,
            outcomes=tuple(
                MemberResult(
                    member=agent_address(name), outcome=operation.outcomes.get(name, NoAnswer())
                )
                for name in operation.members
            ),
        )

    def _complete_writes(self, operation: Operation, *, end: CollectiveEnd) -> list[Write]:
        """Complete a gather now: its result item and its row, to commit together."""
        self._take(operation)
        operation.end = end
        for name in operation.members:
            operation.outcomes.setdefault(name, NoAnswer())
        _, item_write = self._posting.prepare_item(self._result(operation))
        self._count_result(operation, end)
        return [item_write, self._operation_write(operation)]

    def _count_result(self, operation: Operation, end: CollectiveEnd) -> None:
        self._on_result(operation.op, end)
        for name in operation.members:
            self._on_member_outcome(operation.op, _outcome_kind(operation.outcomes[name]))

    async def _complete(self, operation: Operation, *, end: CollectiveEnd) -> None:
        if self._operations.get(operation.id) is not operation:
            return
        if operation.op is CollectiveOp.GATHER:
            writes = self._complete_writes(operation, end=end)
            await self._posting.commit(writes)
            self._posting.published(DeliveryItem.COLLECTIVE_RESULT)
            return
        self._begin_close(operation, end=end)

    def _begin_close(self, operation: Operation, *, end: CollectiveEnd) -> list[Write]:
        """Complete an all_gather: post its close off the classification path (§4.2)."""
        self._operations.pop(operation.id, None)
        self._closing.add(operation.id)
        timer = self._timers.pop(operation.id, None)
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()
        operation.state = OperationState.CLOSING
        operation.end = end
        for name in operation.members:
            operation.outcomes.setdefault(name, NoAnswer())
        self._spawn(self._post_close(operation), f"close-{operation.id}")
        return []

    async def _post_close(self, operation: Operation) -> None:
        included = [
            operation.answer_hashes[name]
            for name in operation.members
            if name in operation.answer_hashes
        ]
        content = close_content(id=operation.id, included=included)
        descriptor = (
            None
            if operation.conversation_id is None
            else await self._posting.membership(operation.conversation_id)
        )
        failure: SendError | None = None
        latch: asyncio.Future[str] | None = None
        if descriptor is None:
            failure = SendError(SendErrorReason.CERTIFICATION_UNAVAILABLE)
        else:

            def rows(post_ids: Sequence[str]) -> Sequence[Write]:
                operation.close_post_id = post_ids[0]
                return [self._operation_write(operation)]

            try:
                [handle] = await self._posting.bind_posts(
                    [(descriptor, content)], extra_writes=rows, within=COLLECTIVE_SEND_WAIT
                )
                latch = handle.certified
            except SendError as error:
                failure = error
        if latch is not None:
            await self._finish_close(operation, latch)
            return
        await self._fail_close(
            operation, failure or SendError(SendErrorReason.CERTIFICATION_UNAVAILABLE)
        )

    async def _finish_close(self, operation: Operation, latch: asyncio.Future[str]) -> None:
        remaining = (operation.deadline_at + CLOSE_RETENTION_MS - self._agent.now_ms()) / 1000
        await asyncio.wait({latch}, timeout=max(0.0, remaining))
        if (failure := refusal_of(latch)) is not None:
            await self._fail_close(operation, failure)
            return
        if latch.done() and not latch.cancelled():
            operation.state = OperationState.DONE
            self._timers.pop(operation.id, None)
            _, item_write = self._posting.prepare_item(self._result(operation))
            await self._posting.commit([item_write, self._operation_write(operation)])
            self._closing.discard(operation.id)
            self._count_result(operation, operation.end or CollectiveEnd.DEADLINE)
            self._posting.published(DeliveryItem.COLLECTIVE_RESULT)
            return
        if latch.cancelled():
            return  # shutdown: the close is rebuilt after restart
        await self._fail_close(operation, SendError(SendErrorReason.CERTIFICATION_UNAVAILABLE))

    async def _fail_close(self, operation: Operation, failure: SendError) -> None:
        operation.state = OperationState.DONE
        error = "all_gather failed: the result could not be shared with the group: " + (
            failure.detail or failure.send_reason.clause_text
        )
        _, item_write = self._posting.prepare_item(
            OperationFailedItem(id=operation.id, to=operation.to, error=error)
        )
        await self._posting.commit([item_write, self._operation_write(operation)])
        self._closing.discard(operation.id)
        self._on_result(operation.op, CollectiveEnd.FAILED)
        self._posting.published(DeliveryItem.OPERATION_FAILED)

    # --- classification (§4.1, §4.3) -----------------------------------------------------------

    def classify_response(
        self,
        part: ResponsePart,
        *,
        sender: str,
        conversation_address: str,
        is_group: bool,
        record_hash: str,
    ) -> Classified:
        """An answer: counted for an open operation of ours, or recorded by an all_gather
        member until the close; always consumed (§4.1, §4.3)."""
        writes: list[Write] = []
        published: tuple[DeliveryItem, ...] = ()
        operation = self._operations.get(part.id)
        if operation is not None and operation.state is OperationState.OPEN:
            own_conversation = (
                conversation_address == operation.to
                if operation.op is CollectiveOp.ALL_GATHER
                else (not is_group and conversation_address == agent_address(sender))
            )
            if (
                own_conversation
                and sender in operation.members
                and sender not in operation.outcomes
            ):
                operation.outcomes[sender] = judge(operation.schema, part.content)
                if operation.op is CollectiveOp.ALL_GATHER:
                    operation.answer_hashes[sender] = record_hash
                if self._completion_ready(operation):
                    if operation.op is CollectiveOp.GATHER:
                        writes.extend(self._complete_writes(operation, end=CollectiveEnd.SETTLED))
                        published = (DeliveryItem.COLLECTIVE_RESULT,)
                    else:
                        self._begin_close(operation, end=CollectiveEnd.SETTLED)
                        writes.append(self._operation_write(operation))
                else:
                    writes.append(self._operation_write(operation))
        writes.extend(
            self.responder.record_answer(
                part,
                sender=sender,
                conversation_address=conversation_address,
                is_group=is_group,
                record_hash=record_hash,
            )
        )
        return Classified(writes=tuple(writes), consumed=ConsumedKind.ANSWER, published=published)


def _outcome_kind(outcome: MemberOutcome) -> MemberOutcomeKind:
    match outcome:
        case Answered():
            return MemberOutcomeKind.ANSWERED
        case Declined():
            return MemberOutcomeKind.DECLINED
        case Invalid():
            return MemberOutcomeKind.INVALID
        case NoAnswer():
            return MemberOutcomeKind.NO_ANSWER
        case _:
            return MemberOutcomeKind.WITHHELD

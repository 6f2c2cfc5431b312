"""gather, all_gather, answers and the all_gather close for one hosted agent.

collectives.md §1-§4. The open-operation table is the token of ownership: the send path
(refusal), the deadline timer and the last outcome (completion) each remove an operation
before acting, and a path that finds it gone does nothing, so an operation ends in exactly
one refusal or one result. Every check-then-change runs without an `await` in between;
state reaches the store in the same transaction as the change that caused it (the request
intents, a classified answer, an inbox item), so a restart rebuilds it (§4.7).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from gateway.collectives.state import (
    RETENTION_MS,
    Operation,
    OperationState,
    RecordedAnswer,
    Request,
    RequestState,
)
from gateway.contract.addresses import (
    DirectConversation,
    GroupConversation,
    agent_address,
    canonicalize,
)
from gateway.contract.codec import CodecError
from gateway.contract.collective_part import ClosePart, RequestPart, ResponsePart
from gateway.contract.content import answer_content, close_content, request_content
from gateway.contract.errors import (
    AnswerInvalid,
    CollectiveError,
    HarnessError,
    MembersUnreachable,
    RequestAmbiguous,
    RequestAnswered,
    RequestExpired,
    RequestNone,
    SendError,
    SendErrorReason,
    UnreachableMember,
    answer_issues_text,
)
from gateway.contract.forms import FormSchemaError, admit_schema, check_answer
from gateway.contract.ids import collective_id, mint_collective
from gateway.contract.jsonvalue import JsonValue
from gateway.contract.values import (
    Accept,
    Answered,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResponse,
    CollectiveResultItem,
    Content,
    Declined,
    InboundItem,
    Invalid,
    MemberOutcome,
    MemberResult,
    NoAnswer,
    OperationFailedItem,
    RequestedSchema,
)
from gateway.engine import protocol as p
from gateway.store.records import (
    DeleteReceivedRequest,
    PutInboxItem,
    PutOperation,
    PutReceivedRequest,
    Write,
)

logger = logging.getLogger(__name__)

COLLECTIVE_SEND_WAIT: Final = 20.0
"""Seconds a gather or all_gather send waits for its request posts.

The contract's bound, never past the operation's deadline; a post still certifying keeps
going after the send returns, and the wait is never a failure."""

DEADLINE_MAX_SECONDS: Final = 2_592_000
"""Longest relative deadline, 30 days."""

FAR_DEADLINE_MS: Final = DEADLINE_MAX_SECONDS * 1000 + RETENTION_MS
"""A received request due further away than 30 days and one hour is consumed (§2.5)."""

TIMER_STEP: Final = 86_400.0
"""Deadline timers sleep at most a day at a time and re-read the wall clock (§4.5)."""

CLOSE_RETENTION_MS: Final = RETENTION_MS
"""An all_gather close still uncertified one hour past the deadline has failed (§4.2)."""

ALL_GATHER_DETAIL: Final = "an all_gather asks a group of two or more other agents"


def now_ms() -> int:
    """Wall-clock epoch milliseconds."""
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True, kw_only=True)
class PostHandle:
    """A bound post: `certified` resolves with its RecordHash once this daemon promotes it."""

    post_id: str
    certified: asyncio.Future[str]
    drained: asyncio.Future[None]


class CollectiveHost(Protocol):
    """What the collectives need from their agent's runtime."""

    @property
    def agent_name(self) -> str: ...

    @property
    def agent_id(self) -> str: ...

    @property
    def own_card(self) -> p.SignedAgentCard: ...

    async def resolve_cards(
        self, names: Sequence[str]
    ) -> dict[str, p.SignedAgentCard | SendError]: ...

    async def bind_posts(
        self,
        posts: Sequence[tuple[p.MembershipDescriptor, Content]],
        *,
        extra_writes: Callable[[Sequence[str]], Sequence[Write]],
        within: float,
    ) -> list[PostHandle]: ...

    def membership(self, conversation_id: str) -> p.MembershipDescriptor | None: ...

    def descriptor_with(self, cards: Sequence[p.SignedAgentCard]) -> p.MembershipDescriptor: ...

    def prepare_item(
        self, item: InboundItem, *, token: str | None = None
    ) -> tuple[str, PutInboxItem]: ...

    async def commit(self, writes: Sequence[Write]) -> None: ...

    def published(self, kind: str) -> None: ...

    async def await_certified(self, handle: PostHandle) -> str:
        """The post's RecordHash within the send bound, else `delivery-pending`."""
        ...

    async def intent_outcome(self, post_id: str) -> str | None:
        """The RecordHash of a completed own intent, or None while it is open."""
        ...

    def latch(self, post_id: str) -> asyncio.Future[str]:
        """A future resolved when this daemon promotes the post."""
        ...


class CollectiveRefusal(Exception):
    """A refused gather, all_gather or answer, with the operation it names (for
    `failureDelivery: "inbound"`) and the conversation its `operationFailed` names."""

    def __init__(self, error: HarnessError, *, operation_id: str, to: str) -> None:
        super().__init__(error.message)
        self.error = error
        self.operation_id = operation_id
        self.to = to


@dataclass(frozen=True, slots=True, kw_only=True)
class Classified:
    """What classifying one collective record produced."""

    writes: tuple[Write, ...] = ()
    item: InboundItem | None = None
    """A collectiveRequest to deliver under the delivery's token."""
    consumed: str | None = None
    """The consumed kind (answer, close, other) when nothing is delivered."""
    published: tuple[str, ...] = ()
    """Items emitted under fresh tokens by these writes (collectiveResult)."""


class Collectives:
    """The collective operations of one hosted agent."""

    def __init__(
        self,
        host: CollectiveHost,
        *,
        clock: Callable[[], int] = now_ms,
        on_member_outcome: Callable[[str, str], None] = lambda op, outcome: None,
        on_result: Callable[[str, str], None] = lambda op, end: None,
    ) -> None:
        self._host = host
        self._clock = clock
        self._on_member_outcome = on_member_outcome
        self._on_result = on_result
        self._operations: dict[str, Operation] = {}
        self._requests: dict[str, Request] = {}
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return agent_address(self._host.agent_name)

    def open_counts(self) -> dict[str, int]:
        """Open operations by op."""
        counts = {"gather": 0, "all_gather": 0}
        for operation in self._operations.values():
            counts[operation.op.value] += 1
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
        for row in requests:
            try:
                request = Request.from_row(row)
            except CodecError:
                logger.exception("a received-request row does not decode; it is skipped")
                continue
            self._requests[request.id] = request

    async def resume(self) -> None:
        """After a restore: restart deadline timers (a deadline passed while down completes
        at once, with what was counted), and finish closes and answers in flight."""
        for operation in list(self._operations.values()):
            if operation.state is OperationState.CLOSING:
                self._operations.pop(operation.id, None)
                if operation.close_post_id is None:
                    self._spawn(self._post_close(operation), f"close-{operation.id}")
                else:
                    self._spawn(
                        self._finish_close(operation, await self._settled(operation.close_post_id)),
                        f"close-{operation.id}",
                    )
            elif operation.state is OperationState.OPEN:
                # Its send did not survive the restart: nothing is left to refuse.
                operation.requests_settled = True
                self._arm(operation)
        for request in self._requests.values():
            if request.state is RequestState.SENDING and request.answer_post_id:
                latch = await self._settled(request.answer_post_id)
                self._spawn(self._settle_answer(request, latch), f"answer-{request.id}")

    async def _settled(self, post_id: str) -> asyncio.Future[str]:
        """A latch for an own post: already resolved when the intent completed while down."""
        record_hash = await self._host.intent_outcome(post_id)
        if record_hash is None:
            return self._host.latch(post_id)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        future.set_result(record_hash)
        return future

    async def close(self) -> None:
        """Cancel timers and tasks; operations are rebuilt from the store after restart."""
        tasks = [*self._timers.values(), *self._tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._timers.clear()
        self._tasks.clear()

    def _spawn(self, coroutine: Coroutine[object, object, None], name: str) -> None:
        task = asyncio.ensure_future(coroutine)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error(
                "collective task failed task=%s", task.get_name(), exc_info=task.exception()
            )

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
        `CollectiveRefusal` (carrying a `SendError` or `CollectiveError`)."""
        nonce, operation_id = mint_collective(self.address)
        refuse_to = to
        try:
            conversation = canonicalize(to, self._host.agent_name)
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
            cards = await self._host.resolve_cards(members)
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
            started = self._clock()
            deadline_at = started + deadline * 1000
            content = request_content(
                question=question,
                op=op,
                id=operation_id,
                nonce=nonce,
                deadline_at=deadline_at,
                requested_schema=schema,
            )
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
        except (SendError, CollectiveError) as error:
            raise CollectiveRefusal(error, operation_id=operation_id, to=refuse_to) from None
        return operation_id

    def _wait_bound(self, operation: Operation) -> float:
        return max(0.0, min(COLLECTIVE_SEND_WAIT, (operation.deadline_at - self._clock()) / 1000))

    async def _run_gather(
        self,
        operation: Operation,
        cards: dict[str, p.SignedAgentCard | SendError],
        content: Content,
    ) -> None:
        own = self._own_card()
        reachable = [name for name in operation.members if not isinstance(cards[name], SendError)]
        refused: dict[str, SendError] = {
            name: error for name, error in cards.items() if isinstance(error, SendError)
        }
        posts = [
            (self._host.descriptor_with([own, cards[name]]), content)  # type: ignore[list-item]
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
                handles = await self._host.bind_posts(
                    posts, extra_writes=rows, within=self._wait_bound(operation)
                )
            except SendError as error:
                refused.update(dict.fromkeys(reachable, error))
        wait = self._wait_bound(operation)
        if handles:
            await asyncio.wait([handle.certified for handle in handles], timeout=wait)
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
            await self._maybe_complete(operation, end="settled")

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
            descriptor = self._host.descriptor_with([self._own_card(), *member_cards])
            operation.conversation_id = descriptor.conversation_id

            def rows(post_ids: Sequence[str]) -> Sequence[Write]:
                operation.post_ids = {"": post_ids[0]}
                return [self._operation_write(operation)]

            try:
                [handle] = await self._host.bind_posts(
                    [(descriptor, content)], extra_writes=rows, within=self._wait_bound(operation)
                )
            except SendError as error:
                failure = error
        if handle is not None:
            await asyncio.wait({handle.certified}, timeout=self._wait_bound(operation))
            if handle.certified.done() and not handle.certified.cancelled():
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
        await self._host.commit([self._operation_write(operation)])
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

    def _own_card(self) -> p.SignedAgentCard:
        return self._host.own_card

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
            remaining = (operation.deadline_at - self._clock()) / 1000
            if remaining <= 0:
                break
            await asyncio.sleep(min(remaining, TIMER_STEP))
        self._timers.pop(operation.id, None)
        if (
            self._operations.get(operation.id) is operation
            and operation.state is OperationState.OPEN
        ):
            await self._complete(operation, end="deadline")

    def _operation_write(self, operation: Operation) -> Write:
        return PutOperation(
            agent_id=self._host.agent_id,
            operation_id=operation.id,
            open=operation.state is not OperationState.DONE,
            row=operation.to_row(),
        )

    def _completion_ready(self, operation: Operation) -> bool:
        if len(operation.outcomes) < len(operation.members):
            return False
        return operation.op is CollectiveOp.ALL_GATHER or operation.requests_settled

    async def _maybe_complete(self, operation: Operation, *, end: str) -> None:
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

    def _complete_writes(self, operation: Operation, *, end: str) -> list[Write]:
        """Complete a gather now: its result item and its row, to commit together."""
        self._take(operation)
        operation.end = end
        for name in operation.members:
            operation.outcomes.setdefault(name, NoAnswer())
        _, item_write = self._host.prepare_item(self._result(operation))
        self._count_result(operation, end)
        return [item_write, self._operation_write(operation)]

    def _count_result(self, operation: Operation, end: str) -> None:
        self._on_result(operation.op.value, end)
        for name in operation.members:
            self._on_member_outcome(operation.op.value, _outcome_kind(operation.outcomes[name]))

    async def _complete(self, operation: Operation, *, end: str) -> None:
        if self._operations.get(operation.id) is not operation:
            return
        if operation.op is CollectiveOp.GATHER:
            writes = self._complete_writes(operation, end=end)
            await self._host.commit(writes)
            self._host.published("collectiveResult")
            return
        self._begin_close(operation, end=end)

    def _begin_close(self, operation: Operation, *, end: str) -> list[Write]:
        """Complete an all_gather: post its close off the classification path (§4.2)."""
        self._operations.pop(operation.id, None)
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
            else self._host.membership(operation.conversation_id)
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
                [handle] = await self._host.bind_posts(
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
        remaining = (operation.deadline_at + CLOSE_RETENTION_MS - self._clock()) / 1000
        await asyncio.wait({latch}, timeout=max(0.0, remaining))
        if latch.done() and not latch.cancelled():
            operation.state = OperationState.DONE
            self._timers.pop(operation.id, None)
            _, item_write = self._host.prepare_item(self._result(operation))
            await self._host.commit([item_write, self._operation_write(operation)])
            self._count_result(operation, operation.end or "deadline")
            self._host.published("collectiveResult")
            return
        if latch.cancelled():
            return  # shutdown: the close is rebuilt after restart
        await self._fail_close(operation, SendError(SendErrorReason.CERTIFICATION_UNAVAILABLE))

    async def _fail_close(self, operation: Operation, failure: SendError) -> None:
        operation.state = OperationState.DONE
        error = "all_gather failed: the result could not be shared with the group: " + (
            failure.detail or failure.send_reason.clause_text
        )
        _, item_write = self._host.prepare_item(
            OperationFailedItem(id=operation.id, to=operation.to, error=error)
        )
        await self._host.commit([item_write, self._operation_write(operation)])
        self._on_result(operation.op.value, "failed")
        self._host.published("operationFailed")

    # --- answering (§1.5, §3.1) ----------------------------------------------------------------

    def _match(self, address: str) -> Request | CollectiveError:
        now = self._clock()
        held = [request for request in self._requests.values() if request.to == address]
        open_ = [
            request
            for request in held
            if request.state is RequestState.OPEN
            and not request.closed
            and now < request.deadline_at
        ]
        _, fresh_id = mint_collective(self.address)
        if len(open_) == 1:
            return open_[0]
        if len(open_) > 1:
            return CollectiveError(fresh_id, RequestAmbiguous())
        if any(request.state in (RequestState.SENDING, RequestState.ANSWERED) for request in held):
            return CollectiveError(fresh_id, RequestAnswered())
        if not held:
            return CollectiveError(fresh_id, RequestNone())
        return CollectiveError(fresh_id, RequestExpired())

    async def answer(self, *, to: str, response: CollectiveResponse) -> str:
        """Answer the one request open in `to`; returns its id or raises `CollectiveRefusal`."""
        try:
            conversation = canonicalize(to, self._host.agent_name)
        except SendError as error:
            _, fresh_id = mint_collective(self.address)
            raise CollectiveRefusal(error, operation_id=fresh_id, to=to) from None
        address = conversation.address
        matched = self._match(address)
        if isinstance(matched, CollectiveError):
            raise CollectiveRefusal(matched, operation_id=matched.id, to=address)
        request = matched
        refusal_to = request.to
        accepted: Accept | None = response if isinstance(response, Accept) else None
        if accepted is not None:
            issues = check_answer(request.schema, accepted.content)
            if issues:
                raise CollectiveRefusal(
                    CollectiveError(request.id, AnswerInvalid(fields=issues)),
                    operation_id=request.id,
                    to=refusal_to,
                )
        try:
            content = answer_content(
                id=request.id, content=None if accepted is None else accepted.content
            )
        except SendError as error:
            raise CollectiveRefusal(error, operation_id=request.id, to=refusal_to) from None
        descriptor = self._host.membership(request.conversation_id)
        if descriptor is None:
            raise CollectiveRefusal(
                SendError(SendErrorReason.CERTIFICATION_UNAVAILABLE),
                operation_id=request.id,
                to=refusal_to,
            )
        # Claim it: a concurrent answer now finds it `sending` (request-answered).
        request.state = RequestState.SENDING

        def rows(post_ids: Sequence[str]) -> Sequence[Write]:
            request.answer_post_id = post_ids[0]
            request.answer_content = None if accepted is None else accepted.content
            return [self._request_write(request)]

        try:
            [handle] = await self._host.bind_posts(
                [(descriptor, content)], extra_writes=rows, within=COLLECTIVE_SEND_WAIT * 3
            )
        except SendError as error:
            request.state = RequestState.OPEN
            request.answer_post_id = None
            raise CollectiveRefusal(error, operation_id=request.id, to=refusal_to) from None
        try:
            record_hash = await self._host.await_certified(handle)
        except SendError as error:
            # delivery-pending or outcome-unknown: the request stays claimed until the post
            # settles, so the model cannot post a second answer meanwhile.
            self._spawn(self._settle_answer(request, handle.certified), f"answer-{request.id}")
            raise CollectiveRefusal(error, operation_id=request.id, to=refusal_to) from None
        await self._answered(request, record_hash)
        return request.id

    async def _settle_answer(self, request: Request, latch: asyncio.Future[str]) -> None:
        await asyncio.wait({latch})
        if latch.cancelled():
            return
        await self._answered(request, latch.result())

    async def _answered(self, request: Request, record_hash: str) -> None:
        if request.state is not RequestState.SENDING:
            return
        request.state = RequestState.ANSWERED
        writes: list[Write] = []
        published: tuple[str, ...] = ()
        if request.op is CollectiveOp.ALL_GATHER and not request.closed:
            # Our own answer counts by its record hash like any member's (§1.5 step 7).
            request.answers.setdefault(
                self._host.agent_name,
                RecordedAnswer(record_hash=record_hash, content=request.answer_content),
            )
            if request.held_close is not None:
                held, request.held_close = request.held_close, None
                applied = self._apply_close(request, held)
                writes.extend(applied.writes)
                published = applied.published
        writes.append(self._request_write(request))
        await self._host.commit(writes)
        for kind in published:
            self._host.published(kind)

    def _request_write(self, request: Request) -> Write:
        return PutReceivedRequest(
            agent_id=self._host.agent_id, operation_id=request.id, row=request.to_row()
        )

    # --- classification (§2.4, §2.5, §4.1, §4.3) -----------------------------------------------

    def classify_request(
        self,
        part: RequestPart,
        *,
        sender: str,
        conversation_id: str,
        conversation_address: str,
        group_members: tuple[str, ...] | None,
        post_id: str,
        question: str,
    ) -> Classified:
        """A received request: record it and deliver it, or consume it (§2.5)."""
        now = self._clock()
        op = part.op
        if part.id != collective_id(agent_address(sender), part.nonce):
            return Classified(consumed="other")
        if part.deadline_at > now + FAR_DEADLINE_MS:
            return Classified(consumed="other")
        if (op is CollectiveOp.GATHER) != (group_members is None):
            return Classified(consumed="other")
        late = now >= part.deadline_at
        if late and (op is CollectiveOp.GATHER or now >= part.deadline_at + RETENTION_MS):
            return Classified(consumed="other")
        held = self._requests.get(part.id)
        if held is not None:
            return Classified(consumed="other")
        writes: list[Write] = self._purge(now)
        members = (
            (self._host.agent_name,)
            if group_members is None
            else tuple(name for name in group_members if name != sender)
        )
        request = Request(
            op=op,
            id=part.id,
            post_id=post_id,
            requester=sender,
            to=conversation_address,
            conversation_id=conversation_id,
            question=question,
            schema=dict(part.requested_schema),
            deadline_at=part.deadline_at,
            members=members,
        )
        self._requests[request.id] = request
        writes.append(self._request_write(request))
        if late:
            # An all_gather request first seen after its deadline is kept for its close.
            return Classified(writes=tuple(writes), consumed="other")
        item = CollectiveRequestItem(
            op=op,
            id=part.id,
            post_id=post_id,
            sender=agent_address(sender),
            to=conversation_address,
            question=question,
            requested_schema=part.requested_schema,
            deadline_at=part.deadline_at,
        )
        return Classified(writes=tuple(writes), item=item)

    def _purge(self, now: int) -> list[Write]:
        writes: list[Write] = []
        for request in list(self._requests.values()):
            if (
                now >= request.deadline_at + RETENTION_MS
                and request.state is not RequestState.SENDING
            ):
                del self._requests[request.id]
                writes.append(
                    DeleteReceivedRequest(agent_id=self._host.agent_id, operation_id=request.id)
                )
        return writes

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
        published: tuple[str, ...] = ()
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
                operation.outcomes[sender] = self._judge(operation.schema, part)
                if operation.op is CollectiveOp.ALL_GATHER:
                    operation.answer_hashes[sender] = record_hash
                if self._completion_ready(operation):
                    if operation.op is CollectiveOp.GATHER:
                        writes.extend(self._complete_writes(operation, end="settled"))
                        published = ("collectiveResult",)
                    else:
                        self._begin_close(operation, end="settled")
                        writes.append(self._operation_write(operation))
                else:
                    writes.append(self._operation_write(operation))
        request = self._requests.get(part.id)
        if (
            request is not None
            and request.op is CollectiveOp.ALL_GATHER
            and not request.closed
            and is_group
            and conversation_address == request.to
            and sender in request.members
            and sender not in request.answers
        ):
            request.answers[sender] = RecordedAnswer(record_hash=record_hash, content=part.content)
            writes.append(self._request_write(request))
        return Classified(writes=tuple(writes), consumed="answer", published=published)

    @staticmethod
    def _judge(schema: dict[str, JsonValue], part: ResponsePart) -> MemberOutcome:
        if part.content is None:
            return Declined()
        issues = check_answer(schema, part.content)
        if issues:
            return Invalid(reason=answer_issues_text(issues))
        return Answered(content=part.content)

    def classify_close(self, part: ClosePart, *, sender: str, conversation_id: str) -> Classified:
        """A close: applied by an all_gather member, or logged; always consumed (§4.3)."""
        request = self._requests.get(part.id)
        if (
            request is None
            or request.op is not CollectiveOp.ALL_GATHER
            or request.conversation_id != conversation_id
            or request.requester != sender
            or request.closed
            or request.held_close is not None
        ):
            logger.info("close not applicable; consumed")
            return Classified(consumed="close")
        return self._apply_close(request, part.included)

    def _apply_close(self, request: Request, included: tuple[str, ...]) -> Classified:
        by_hash = {answer.record_hash: (name, answer) for name, answer in request.answers.items()}
        missing = [record_hash for record_hash in included if record_hash not in by_hash]
        if missing and request.state is RequestState.SENDING:
            request.held_close = included
            return Classified(writes=(self._request_write(request),), consumed="close")
        answers = request.answers
        request.closed = True
        request.answers = {}
        listed = [by_hash[record_hash] for record_hash in included if record_hash in by_hash]
        names = [name for name, _ in listed]
        if missing or len(set(names)) != len(names):
            logger.warning("an all_gather close lists unknown or repeated answers; nothing emitted")
            return Classified(writes=(self._request_write(request),), consumed="close")
        del answers
        counted = dict(listed)
        outcomes = tuple(
            MemberResult(
                member=agent_address(name),
                outcome=self._judge(
                    request.schema,
                    ResponsePart(id=request.id, content=counted[name].content),
                )
                if name in counted
                else NoAnswer(),
            )
            for name in request.members
        )
        _, write = self._host.prepare_item(
            CollectiveResultItem(
                op=CollectiveOp.ALL_GATHER,
                id=request.id,
                to=request.to,
                question=request.question,
                outcomes=outcomes,
            )
        )
        return Classified(
            writes=(write, self._request_write(request)),
            consumed="close",
            published=("collectiveResult",),
        )


def _outcome_kind(outcome: MemberOutcome) -> str:
    match outcome:
        case Answered():
            return "answered"
        case Declined():
            return "declined"
        case Invalid():
            return "invalid"
        case NoAnswer():
            return "no-answer"
        case _:
            return "withheld"

"""A member's side of the collectives: received requests, its answers, and the closes.

collectives.md §1.5, §2.5, §3.1, §4.3. The received-request table holds every request this
agent was asked, from its classification until an hour past its deadline; a request's state
is its claim (`sending` while an answer is in flight, so a second answer is refused), and an
all_gather member records its peers' answers here until the requester's close lists them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Final

from harness_contract.addresses import agent_address, canonicalize
from harness_contract.codec import CodecError, response_to_json
from harness_contract.collective_part import ClosePart, RequestPart, ResponsePart
from harness_contract.content import answer_content
from harness_contract.errors import (
    AnswerInvalid,
    CollectiveError,
    FirewallSendError,
    RequestAmbiguous,
    RequestAnswered,
    RequestExpired,
    RequestNone,
    SendError,
    SendErrorReason,
)
from harness_contract.forms import check_answer
from harness_contract.ids import collective_id, mint_collective
from harness_contract.jsonvalue import canonical_json
from harness_contract.kinds import ConsumedKind, DeliveryItem
from harness_contract.values import (
    Accept,
    CollectiveOp,
    CollectiveRequestItem,
    CollectiveResponse,
    CollectiveResultItem,
    MemberResult,
    NoAnswer,
)

from gateway.collectives.port import (
    COLLECTIVE_SEND_WAIT,
    DEADLINE_MAX_SECONDS,
    Classified,
    CollectiveAgent,
    CollectiveRefusal,
    refusal_of,
)
from gateway.collectives.state import (
    RETENTION_MS,
    RecordedAnswer,
    Request,
    RequestState,
    judge,
)
from gateway.store.records import DeleteReceivedRequest, PutReceivedRequest, Write

logger = logging.getLogger(__name__)

FAR_DEADLINE_MS: Final = DEADLINE_MAX_SECONDS * 1000 + RETENTION_MS
"""A received request due further away than 30 days and one hour is consumed (§2.5)."""


class Responder:
    """One agent's received requests, as an asked member."""

    def __init__(
        self,
        agent: CollectiveAgent,
        *,
        spawn: Callable[[Coroutine[object, object, None], str], None],
        asking: Callable[[str], bool] = lambda address: False,
    ) -> None:
        self._agent = agent
        self._posting = agent.posting
        self._spawn = spawn
        """Runs a background task owned (cancelled and awaited) by the `Collectives`."""
        self._asking = asking
        """Whether this agent, as the requester, has a question open at a conversation
        address: answering it is refused as `request-none` naming it its own."""
        self._requests: dict[str, Request] = {}

    # --- lifecycle -----------------------------------------------------------------------------

    def restore(self, rows: Sequence[bytes]) -> None:
        """Rebuild the table from the rows stored with the inbox items and answers (§4.7)."""
        for row in rows:
            try:
                request = Request.from_row(row)
            except CodecError:
                logger.exception("a received-request row does not decode; it is skipped")
                continue
            self._requests[request.id] = request

    async def resume(self) -> None:
        """After a restore: finish the answers that were in flight."""
        for request in self._requests.values():
            if request.state is RequestState.SENDING and request.answer_post_id:
                latch = await self._posting.settled(request.answer_post_id)
                self._spawn(self._settle_answer(request, latch), f"answer-{request.id}")

    # --- answering (§1.5, §3.1) ----------------------------------------------------------------

    def _match(self, address: str) -> Request | CollectiveError:
        now = self._agent.now_ms()
        held = [request for request in self._requests.values() if request.to == address]
        open_ = [
            request
            for request in held
            if request.state is RequestState.OPEN
            and not request.closed
            and now < request.deadline_at
        ]
        _, fresh_id = mint_collective(self._agent.address)
        if len(open_) == 1:
            return open_[0]
        if len(open_) > 1:
            return CollectiveError(fresh_id, RequestAmbiguous())
        if any(request.state in (RequestState.SENDING, RequestState.ANSWERED) for request in held):
            return CollectiveError(fresh_id, RequestAnswered())
        if not held:
            return CollectiveError(fresh_id, RequestNone(own_question=self._asking(address)))
        return CollectiveError(fresh_id, RequestExpired())

    async def answer(self, *, to: str, response: CollectiveResponse) -> str:
        """Answer the one request open in `to`; returns its id or raises `CollectiveRefusal`."""
        try:
            conversation = canonicalize(to, self._agent.name)
        except SendError as error:
            _, fresh_id = mint_collective(self._agent.address)
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
        descriptor = await self._posting.membership(request.conversation_id)
        if descriptor is None:
            raise CollectiveRefusal(
                SendError(SendErrorReason.CERTIFICATION_UNAVAILABLE),
                operation_id=request.id,
                to=refusal_to,
            )
        # The firewall's send check of the answer's JSON text and its content's texts (§1.5
        # step 5), to everyone the answer reaches: the requester, and an all_gather's other
        # members.
        recipients = [
            name
            for name in dict.fromkeys((request.requester, *request.members))
            if name != self._agent.name
        ]
        try:
            await self._posting.check_send(
                recipients,
                canonical_json(response_to_json(response)).decode(),
                content={} if accepted is None else accepted.content,
            )
        except FirewallSendError as error:
            raise CollectiveRefusal(error, operation_id=request.id, to=refusal_to) from None
        if request.state is not RequestState.OPEN:
            # Another answer claimed it while the firewall checked this one.
            raise CollectiveRefusal(
                CollectiveError(request.id, RequestAnswered()),
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
            [handle] = await self._posting.bind_posts(
                [(descriptor, content)], extra_writes=rows, within=COLLECTIVE_SEND_WAIT * 3
            )
        except SendError as error:
            request.state = RequestState.OPEN
            request.answer_post_id = None
            raise CollectiveRefusal(error, operation_id=request.id, to=refusal_to) from None
        try:
            record_hash = await self._posting.await_certified(handle)
        except SendError as error:
            if error.send_reason is SendErrorReason.CERTIFICATION_UNAVAILABLE:
                # Refused by a cluster's sequencer (cluster.md §5.4): the answer never
                # certifies, so the request is open again for another answer.
                await self._reopen(request)
                raise CollectiveRefusal(error, operation_id=request.id, to=refusal_to) from None
            # delivery-pending: the request stays claimed until the post settles, so the
            # model cannot post a second answer meanwhile. The send's own waiter was
            # cancelled when it gave up; the settle task follows the post with its own,
            # taken before anything else runs (no promotion falls between).
            latch = self._posting.follow(handle.post_id)
            self._spawn(self._settle_answer(request, latch), f"answer-{request.id}")
            raise CollectiveRefusal(error, operation_id=request.id, to=refusal_to) from None
        await self._answered(request, record_hash)
        return request.id

    async def _settle_answer(self, request: Request, latch: asyncio.Future[str]) -> None:
        """The answer's post certified after its send gave up (or while the daemon was down):
        the request is answered. Unbounded on purpose: the bound intent is proposed until it
        certifies; the latch is cancelled, and this task with it, only at shutdown (§1.5)."""
        await asyncio.wait({latch})
        if latch.cancelled():
            return  # shutdown: `resume` follows the post again after the restart
        if refusal_of(latch) is not None:
            await self._reopen(request)
            return
        await self._answered(request, latch.result())

    async def _reopen(self, request: Request) -> None:
        """The answer's post was refused and never certifies: the request is open again."""
        if request.state is not RequestState.SENDING:
            return
        request.state = RequestState.OPEN
        request.answer_post_id = None
        request.answer_content = None
        await self._posting.commit([self._request_write(request)])

    async def _answered(self, request: Request, record_hash: str) -> None:
        if request.state is not RequestState.SENDING:
            return
        request.state = RequestState.ANSWERED
        writes: list[Write] = []
        published: tuple[DeliveryItem, ...] = ()
        if request.op is CollectiveOp.ALL_GATHER and not request.closed:
            # Our own answer counts by its record hash like any member's (§1.5 step 7).
            request.answers.setdefault(
                self._agent.name,
                RecordedAnswer(record_hash=record_hash, content=request.answer_content),
            )
            if request.held_close is not None:
                held, request.held_close = request.held_close, None
                applied = self._apply_close(request, held)
                writes.extend(applied.writes)
                published = applied.published
        writes.append(self._request_write(request))
        await self._posting.commit(writes)
        for kind in published:
            self._posting.published(kind)

    def _request_write(self, request: Request) -> Write:
        return PutReceivedRequest(
            agent_id=self._agent.agent_id, operation_id=request.id, row=request.to_row()
        )

    def requester_of(self, operation_id: str) -> str | None:
        """The requester of a request this agent was asked and still holds."""
        request = self._requests.get(operation_id)
        return None if request is None else request.requester

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
        now = self._agent.now_ms()
        op = part.op
        if part.id != collective_id(agent_address(sender), part.nonce):
            return Classified(consumed=ConsumedKind.OTHER)
        if part.deadline_at > now + FAR_DEADLINE_MS:
            return Classified(consumed=ConsumedKind.OTHER)
        if (op is CollectiveOp.GATHER) != (group_members is None):
            return Classified(consumed=ConsumedKind.OTHER)
        late = now >= part.deadline_at
        if late and (op is CollectiveOp.GATHER or now >= part.deadline_at + RETENTION_MS):
            return Classified(consumed=ConsumedKind.OTHER)
        held = self._requests.get(part.id)
        if held is not None:
            return Classified(consumed=ConsumedKind.OTHER)
        writes: list[Write] = self._purge(now)
        members = (
            (self._agent.name,)
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
            return Classified(writes=tuple(writes), consumed=ConsumedKind.OTHER)
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
                    DeleteReceivedRequest(agent_id=self._agent.agent_id, operation_id=request.id)
                )
        return writes

    def record_answer(
        self,
        part: ResponsePart,
        *,
        sender: str,
        conversation_address: str,
        is_group: bool,
        record_hash: str,
    ) -> list[Write]:
        """A peer's first answer to an all_gather this agent was asked, kept for the close."""
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
            return [self._request_write(request)]
        return []

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
            return Classified(consumed=ConsumedKind.CLOSE)
        return self._apply_close(request, part.included)

    def _apply_close(self, request: Request, included: tuple[str, ...]) -> Classified:
        by_hash = {answer.record_hash: (name, answer) for name, answer in request.answers.items()}
        missing = [record_hash for record_hash in included if record_hash not in by_hash]
        if missing and request.state is RequestState.SENDING:
            request.held_close = included
            return Classified(writes=(self._request_write(request),), consumed=ConsumedKind.CLOSE)
        answers = request.answers
        request.closed = True
        request.answers = {}
        listed = [by_hash[record_hash] for record_hash in included if record_hash in by_hash]
        names = [name for name, _ in listed]
        if missing or len(set(names)) != len(names):
            logger.warning("an all_gather close lists unknown or repeated answers; nothing emitted")
            return Classified(writes=(self._request_write(request),), consumed=ConsumedKind.CLOSE)
        del answers
        counted = dict(listed)
        outcomes = tuple(
            MemberResult(
                member=agent_address(name),
                outcome=judge(request.schema, counted[name].content)
                if name in counted
                else NoAnswer(),
            )
            for name in request.members
        )
        _, write = self._posting.prepare_item(
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
            consumed=ConsumedKind.CLOSE,
            published=(DeliveryItem.COLLECTIVE_RESULT,),
        )

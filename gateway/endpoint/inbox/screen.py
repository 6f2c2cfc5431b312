"""`InboxScreen`: the local firewall's inbound check of the items a commit publishes.

firewall.md §2.2. Every item an agent's writes put in its inbox — a classified message or
request under its delivery's token, or an emitted collective result — is checked before
the transaction is queued, so the item is stored *with* its guidance and any withheld
substitutions, and a replay shows exactly what the first delivery showed:

- a message or request is one check; its guidance is a `CheckedGuidance`. It is never
  rewritten: a withhold marks it `expectation: "none"`, and `drop` consumes the delivery
  (the item's write goes, its delivery's state becomes consumed).
- a collective result's question and each answered member's content are separate checks;
  a withheld question becomes `question: Withheld`, a withheld answer the member outcome
  `Withheld`, and its guidance is the `{question?, answers}` form.
- `operationFailed` is local text and is never checked.

The checks of one commit run concurrently when an external middleware checks deliveries,
else one after the other (the built-ins never wait, so this costs no loop turn).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from harness_contract.codec import CodecError, item_from_json, item_to_json, local_guidance_to_json
from harness_contract.guidance import CollectiveGuidance, LocalGuidance, MemberGuidance
from harness_contract.jsonvalue import JsonValueError, canonical_json, parse_canonical_json
from harness_contract.values import (
    CollectiveRequestItem,
    CollectiveResultItem,
    InboundItem,
    MemberResult,
    MulticastItem,
)

from gateway.firewall import DeliveryVerdict, Firewall
from gateway.firewall.subjects import of_item
from gateway.store.records import DeliveryState, PutInboxItem, SetDeliveryState, Write

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Screened:
    """A commit's writes after the check, and the delivery tokens whose items it dropped."""

    writes: list[Write]
    dropped: frozenset[str] = frozenset()


class InboxScreen:
    """The inbound check of one hosted agent's inbox items."""

    def __init__(
        self,
        firewall: Firewall,
        *,
        agent: str,
        requester_of: Callable[[str], str | None],
    ) -> None:
        """`requester_of(operation_id)` names who asked a collective result's question."""
        self._firewall = firewall
        self._agent = agent
        self._requester_of = requester_of

    @property
    def active(self) -> bool:
        """False while the policy is empty: items are stored without guidance."""
        return self._firewall.active

    async def screen(
        self,
        writes: Sequence[Write],
        *,
        prepared: Mapping[str, InboundItem] | None = None,
    ) -> Screened:
        """Check every unchecked inbox item among `writes`; `prepared` holds the items the
        writes were prepared from, by token (one missing there is decoded from its bytes)."""
        indexed = [
            (index, write)
            for index, write in enumerate(writes)
            if isinstance(write, PutInboxItem) and write.guidance is None
        ]
        if not indexed:
            return Screened(writes=list(writes))
        outcomes = await self._all(
            [
                self._item(write, None if prepared is None else prepared.get(write.token))
                for _, write in indexed
            ]
        )
        result = list(writes)
        dropped: set[str] = set()
        for (index, write), outcome in zip(indexed, outcomes, strict=True):
            if outcome is None:
                dropped.add(write.token)
            else:
                result[index] = outcome
        if dropped:
            result = [_consumed(write, dropped) for write in result if not _dropped(write, dropped)]
        return Screened(writes=result, dropped=frozenset(dropped))

    async def _item(self, write: PutInboxItem, item: InboundItem | None) -> PutInboxItem | None:
        """The write with its guidance (and withheld text), or None to drop it."""
        if item is None:
            try:
                item = item_from_json(parse_canonical_json(write.item))
            except (CodecError, JsonValueError):
                logger.exception("an inbox item to check does not decode; stored unchecked")
                return write
        match item:
            case MulticastItem() | CollectiveRequestItem():
                verdict = await self._firewall.check_delivery(
                    self._agent, of_item(self._agent, item, requester=None)
                )
                if verdict.drop:
                    return None
                return _with(write, item, verdict.guidance, changed=False)
            case CollectiveResultItem():
                return await self._result(write, item)
            case _:
                return write

    async def _result(self, write: PutInboxItem, item: CollectiveResultItem) -> PutInboxItem:
        subjects = of_item(self._agent, item, requester=self._requester_of(item.id))
        verdicts: list[DeliveryVerdict] = await self._all(
            [self._firewall.check_delivery(self._agent, (subject,)) for subject in subjects]
        )
        question = item.question
        question_guidance = None
        answers: list[MemberGuidance] = []
        outcomes = {result.member: result.outcome for result in item.outcomes}
        for subject, verdict in zip(subjects, verdicts, strict=True):
            withheld = verdict.withheld.get(subject.id)
            if subject.id == item.id and isinstance(question, str):
                question_guidance = verdict.guidance
                if withheld is not None:
                    question = withheld
            else:
                answers.append(MemberGuidance(member=subject.id, guidance=verdict.guidance))
                if withheld is not None:
                    outcomes[subject.id] = withheld
        checked = dataclasses.replace(
            item,
            question=question,
            outcomes=tuple(
                MemberResult(member=result.member, outcome=outcomes[result.member])
                for result in item.outcomes
            ),
        )
        return _with(
            write,
            checked,
            CollectiveGuidance(question=question_guidance, answers=tuple(answers)),
            changed=checked != item,
        )

    async def _all(self, calls: Sequence[Awaitable[T]]) -> list[T]:
        if len(calls) > 1 and self._firewall.waits_on_deliveries:
            return list(await asyncio.gather(*calls))
        return [await call for call in calls]


def _with(
    write: PutInboxItem, item: InboundItem, guidance: LocalGuidance, *, changed: bool
) -> PutInboxItem:
    return dataclasses.replace(
        write,
        item=canonical_json(item_to_json(item)) if changed else write.item,
        # Item bytes stay canonical (an item's bytes are its identity in a replay); the
        # guidance is read back field by field, so plain compact JSON does.
        guidance=json.dumps(
            local_guidance_to_json(guidance),
            ensure_ascii=False,
            separators=(",", ":"),
            allow_nan=False,
        ).encode("utf-8"),
    )


def _dropped(write: Write, dropped: set[str]) -> bool:
    return isinstance(write, PutInboxItem) and write.token in dropped


def _consumed(write: Write, dropped: set[str]) -> Write:
    if (
        isinstance(write, SetDeliveryState)
        and write.token in dropped
        and write.state is DeliveryState.CLASSIFIED
    ):
        return dataclasses.replace(write, state=DeliveryState.CONSUMED)
    return write

"""A gather member whose daemon comes back before the deadline (issue 5, collectives.md
§1.3): its request post stayed pending while the daemon was down, certifies once it is back,
and the member's answer counts."""

from __future__ import annotations

import harness_client
import pytest
from harness_client import (
    Accept,
    Answered,
    CollectiveRequestItem,
    CollectiveResultItem,
    ResponseInput,
)

from tests.e2e.network_support import SEND_WAIT, Party, ask, elapsed, network_parties

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

NAMES = ("gather-requester", "gather-member-a", "gather-member-b")
REQUESTER = "agent:gather-requester"
THREE = "group:gather-member-a,gather-member-b,gather-requester"


async def test_a_member_back_before_the_deadline_gets_its_request_and_its_answer_counts():
    async with network_parties(NAMES) as (_, p):
        requester, a, b = (p[name] for name in NAMES)
        b_token = await _rotate_token(b)
        await b.close()
        await b.daemon.stop()
        with elapsed() as took:
            sent = await requester.endpoint.send(ask(THREE, 120))
        # b's request post cannot certify while b is down (a cold direct conversation
        # needs both members); the send returns after its wait, without an error.
        assert SEND_WAIT - 0.5 <= took[0] <= 30.0, took[0]
        request_a = await a.next_item()
        assert isinstance(request_a, CollectiveRequestItem)
        await a.endpoint.send(ResponseInput(to=REQUESTER, response=Accept(content={"slot": "tue"})))
        await b.daemon.start()
        back = Party(
            b.name, b.daemon, await harness_client.connect(b.daemon.address, token=b_token)
        )
        try:
            request_b = await back.next_item(within=60)
            assert isinstance(request_b, CollectiveRequestItem)
            assert request_b.id == sent.operation_id
            await back.endpoint.send(
                ResponseInput(to=REQUESTER, response=Accept(content={"slot": "mon"}))
            )
            result = await requester.next_item(within=60)
        finally:
            await back.close()
        assert isinstance(result, CollectiveResultItem)
        assert [o.outcome for o in result.outcomes] == [
            Answered(content={"slot": "tue"}),
            Answered(content={"slot": "mon"}),
        ]


async def _rotate_token(party: Party) -> str:
    """A fresh token for the party's agent (its first one is held by the test helper)."""
    async with await harness_client.connect_management(
        party.daemon.address, admin_token=party.daemon.admin_token
    ) as operator:
        return await operator.rotate_token(party.name)

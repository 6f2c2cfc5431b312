"""Inbound classification of collective parts (collectives.md §2.4-§2.5): records the
endpoint consumes are acknowledged by it and never delivered. Each case posts crafted
content through the real engine, then a marker multicast: the recipient's next item must be
the marker."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import harness_client
import pytest
from harness_client import CollectiveRequestItem, MessageInput, MulticastItem, to_json
from harness_contract.content import check_content, collective_part
from harness_contract.ids import collective_id, mint_collective
from harness_contract.jsonvalue import JsonValue
from harness_contract.values import DataPart, TextPart

from gateway.testing import RunningGateway, run_gateway

pytestmark = pytest.mark.timeout(120)

SCHEMA: dict[str, JsonValue] = {
    "type": "object",
    "properties": {"slot": {"type": "string", "enum": ("mon", "tue")}},
    "required": ("slot",),
}
HOUR_MS = 3_600_000
BOUND = 20.0


def request_value(
    *,
    op: str,
    requester: str,
    deadline_at: int,
    operation_id: str | None = None,
    nonce: str | None = None,
) -> dict[str, JsonValue]:
    fresh_nonce, fresh_id = mint_collective(f"agent:{requester}")
    return {
        "kind": "operation",
        "op": op,
        "id": operation_id or fresh_id,
        "nonce": nonce or fresh_nonce,
        "deadlineAt": float(deadline_at),
        "requestedSchema": SCHEMA,
    }


async def post_raw(gw: RunningGateway, author: str, members: tuple[str, ...], parts: Any) -> None:
    posting = gw.gateway.components.hosted.runtime(author).posting
    cards = await posting.resolve_cards(members)
    descriptor = posting.membership_with(list(cards.values()))  # type: ignore[arg-type]
    [handle] = await posting.bind_posts([(descriptor, check_content(parts))], within=10)
    await asyncio.wait_for(posting.await_certified(handle), BOUND)


async def next_item(gw: RunningGateway, token: str) -> Any:
    async with await harness_client.connect(gw.address, token=token) as endpoint:
        stream = endpoint.messages()
        delivery = await asyncio.wait_for(stream.__anext__(), BOUND)
        await delivery.acknowledge()
        await stream.aclose()
        return delivery.item


def now_ms() -> int:
    return int(time.time() * 1000)


CASES = {
    "a gather request in a group": lambda: (
        ("bob", "carol"),
        [
            TextPart(text="q"),
            collective_part(
                request_value(op="gather", requester="alice", deadline_at=now_ms() + 60_000)
            ),
        ],
    ),
    "an all_gather request in a direct conversation": lambda: (
        ("bob",),
        [
            TextPart(text="q"),
            collective_part(
                request_value(op="all_gather", requester="alice", deadline_at=now_ms() + 60_000)
            ),
        ],
    ),
    "a gather request past its deadline": lambda: (
        ("bob",),
        [
            TextPart(text="q"),
            collective_part(
                request_value(op="gather", requester="alice", deadline_at=now_ms() - 1)
            ),
        ],
    ),
    "an all_gather request over an hour past its deadline": lambda: (
        ("bob", "carol"),
        [
            TextPart(text="q"),
            collective_part(
                request_value(
                    op="all_gather", requester="alice", deadline_at=now_ms() - HOUR_MS - 1000
                )
            ),
        ],
    ),
    "a deadline more than 30 days and an hour away": lambda: (
        ("bob",),
        [
            TextPart(text="q"),
            collective_part(
                request_value(
                    op="gather",
                    requester="alice",
                    deadline_at=now_ms() + 2_592_000_000 + HOUR_MS + 60_000,
                )
            ),
        ],
    ),
    "an id that does not derive from its sender and nonce": lambda: (
        ("bob",),
        [
            TextPart(text="q"),
            collective_part(
                request_value(
                    op="gather",
                    requester="alice",
                    deadline_at=now_ms() + 60_000,
                    operation_id=collective_id("agent:mallory", "A" * 43),
                    nonce="A" * 43,
                )
            ),
        ],
    ),
    "duplicated collective parts": lambda: (
        ("bob",),
        [
            TextPart(text="q"),
            collective_part({"kind": "operation", "op": "multicast"}),
            collective_part({"kind": "operation", "op": "multicast"}),
        ],
    ),
    "a malformed collective part": lambda: (
        ("bob",),
        [TextPart(text="q"), collective_part({"kind": "operation", "op": "gather"})],
    ),
    "a multicast whose only part is the collective part": lambda: (
        ("bob",),
        [collective_part({"kind": "operation", "op": "multicast"})],
    ),
    "an answer to no open operation": lambda: (
        ("bob",),
        [
            collective_part(
                {"kind": "response", "id": mint_collective("agent:alice")[1], "action": "decline"}
            )
        ],
    ),
    "a close for no held request": lambda: (
        ("bob", "carol"),
        [
            collective_part(
                {"kind": "close", "id": mint_collective("agent:alice")[1], "included": ()}
            )
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_endpoint_consumes_and_never_delivers(case: str):
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob", "carol")}
        members, parts = CASES[case]()
        await post_raw(gw, "alice", members, parts)
        marker = "group:" + ",".join(members) if len(members) > 1 else f"agent:{members[0]}"
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            await alice.send(MessageInput(to=marker, text="marker"))
        item = await next_item(gw, tokens["bob"])
        assert isinstance(item, MulticastItem)
        assert to_json(item.message.content[0]) == {"type": "text", "text": "marker"}


async def test_a_request_reusing_a_held_id_from_another_post_is_consumed():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob")}
        value = request_value(op="gather", requester="alice", deadline_at=now_ms() + 60_000)
        await post_raw(gw, "alice", ("bob",), [TextPart(text="first"), collective_part(value)])
        first = await next_item(gw, tokens["bob"])
        assert isinstance(first, CollectiveRequestItem)
        await post_raw(gw, "alice", ("bob",), [TextPart(text="again"), collective_part(value)])
        async with await harness_client.connect(gw.address, token=tokens["alice"]) as alice:
            await alice.send(MessageInput(to="agent:bob", text="marker"))
        item = await next_item(gw, tokens["bob"])
        assert isinstance(item, MulticastItem)


async def test_a_multicast_part_beside_text_is_dropped_from_the_delivered_content():
    async with run_gateway() as gw:
        tokens = {name: await gw.register(name) for name in ("alice", "bob")}
        await post_raw(
            gw,
            "alice",
            ("bob",),
            [
                TextPart(text="hello"),
                DataPart(value={"x": 1.0}),
                collective_part({"kind": "operation", "op": "multicast"}),
            ],
        )
        item = await next_item(gw, tokens["bob"])
        assert isinstance(item, MulticastItem)
        assert [to_json(part) for part in item.message.content] == [
            {"type": "text", "text": "hello"},
            {"type": "data", "value": {"x": 1}},
        ]

"""The bound on one agent's open collective operations (`--max-open-operations`): asks up
to it succeed, the next is refused `too-many-operations` with nothing looked up, checked,
bound or stored, and a slot comes back when an operation's result is out (its last answer,
its deadline, an all_gather's certified close); operations loaded back at a restart count.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from harness_contract.addresses import group_address
from harness_contract.errors import CollectiveError, SendError, SendErrorReason, StatusCode
from harness_contract.values import CollectiveOp, CollectiveResultItem

from gateway.cli import _build_parser as build_parser
from gateway.collectives.port import MAX_OPEN_OPERATIONS, CollectiveRefusal
from gateway.collectives.runtime import Collectives
from gateway.settings import Settings, SettingsError, load_settings
from tests.support import eventually
from tests.unit.collectives.fakes import Agent, agent, answer, ask, cards_of, results, settle

BOUND = 3


@pytest.fixture
async def alice() -> Agent:
    return agent("alice", await cards_of("alice", "bob", "carol", "dave"), max_open=BOUND)


def made(alice: Agent) -> tuple[int, int, int]:
    """What an ask leaves behind: firewall checks, bound posts, committed writes."""
    return len(alice.posting.checked), len(alice.posting.posts), len(alice.posting.committed)


async def refused_at_the_bound(alice: Agent, op: CollectiveOp = CollectiveOp.GATHER) -> SendError:
    to = "agent:bob" if op is CollectiveOp.GATHER else "group:bob,carol"
    with pytest.raises(SendError) as raised:
        await ask(alice, op, to)
    return raised.value


def test_the_default_bound_is_the_settings_default():
    assert Settings().max_open_operations == MAX_OPEN_OPERATIONS == 256


def test_the_bound_is_set_by_its_variable_or_flag_and_must_be_positive():
    variable = {"HARNESS_MAX_OPEN_OPERATIONS": "10"}
    assert load_settings(env=variable).max_open_operations == 10
    assert (
        load_settings(env=variable, flags={"max_open_operations": "12"}).max_open_operations == 12
    )
    args = build_parser().parse_args(["serve", "--max-open-operations", "7"])
    assert args.max_open_operations == "7"
    with pytest.raises(SettingsError) as refused:
        load_settings(env={}, flags={"max_open_operations": "0"})
    assert refused.value.errors == ["--max-open-operations: expected a positive integer, got '0'"]


async def test_asks_up_to_the_bound_succeed_and_the_next_is_refused_with_nothing_made(
    alice, caplog
):
    for _ in range(BOUND):
        await ask(alice, CollectiveOp.GATHER, "agent:bob", deadline=2_592_000)
    assert alice.collectives.held_count() == BOUND
    before = made(alice)

    with caplog.at_level(logging.DEBUG, logger="gateway.collectives"):
        for op in (CollectiveOp.GATHER, CollectiveOp.ALL_GATHER, CollectiveOp.GATHER):
            error = await refused_at_the_bound(alice, op)
            assert error.send_reason is SendErrorReason.TOO_MANY_OPERATIONS
            assert error.status_code is StatusCode.RESOURCE_EXHAUSTED
            assert error.message == (
                "send failed: this agent has 3 gather and all_gather operations open, the most "
                "the gateway allows; nothing was sent; wait for a result before asking again"
            )

    # Nothing half-made: no firewall check, no post bound, no row, no timer.
    assert made(alice) == before
    assert alice.collectives.held_count() == BOUND
    await settle()
    assert alice.clock.sleepers == BOUND
    # The operator is told once per episode, at WARNING (a client's doing, never ERROR).
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.levelno for r in warnings] == [logging.WARNING]
    assert "bound of open collective operations" in warnings[0].getMessage()


async def test_an_operation_completed_by_its_last_answer_frees_its_slot(alice):
    first = await ask(alice, CollectiveOp.GATHER, "agent:bob")
    for _ in range(BOUND - 1):
        await ask(alice, CollectiveOp.GATHER, "agent:carol")
    await refused_at_the_bound(alice)

    assert answer(alice, first, "bob").published == ("collectiveResult",)
    await ask(alice, CollectiveOp.GATHER, "agent:bob")
    await refused_at_the_bound(alice)


async def test_an_operation_completed_at_its_deadline_frees_its_slot(alice):
    await ask(alice, CollectiveOp.GATHER, "agent:bob", deadline=10)
    for _ in range(BOUND - 1):
        await ask(alice, CollectiveOp.GATHER, "agent:carol", deadline=600)
    await refused_at_the_bound(alice)

    alice.clock.advance(10)
    [result] = await eventually(lambda: asyncio.sleep(0, results(alice)))
    assert isinstance(result, CollectiveResultItem)
    await ask(alice, CollectiveOp.GATHER, "agent:bob")
    await refused_at_the_bound(alice)


async def test_an_all_gather_holds_its_slot_until_its_close_is_certified_and_its_result_out(
    alice,
):
    group = group_address(["alice", "bob", "carol"])
    operation_id = await ask(alice, CollectiveOp.ALL_GATHER, "group:bob,carol")
    for _ in range(BOUND - 1):
        await ask(alice, CollectiveOp.GATHER, "agent:dave")
    alice.posting.auto_certify = False
    answer(alice, operation_id, "bob", to=group)
    answer(alice, operation_id, "carol", to=group)
    [close] = await eventually(lambda: asyncio.sleep(0, alice.posting.posts[BOUND:]))
    assert alice.collectives.open_counts()[CollectiveOp.ALL_GATHER] == 0  # completed...
    await refused_at_the_bound(alice)  # ...but its result is not out yet

    alice.posting.certify(close.handle.post_id)
    await eventually(lambda: asyncio.sleep(0, results(alice)))
    alice.posting.auto_certify = True
    await ask(alice, CollectiveOp.GATHER, "agent:bob")


async def test_concurrent_asks_cannot_pass_the_bound_together(alice):
    alice.posting.hold_checks = asyncio.Event()
    # Each ask is held mid-way (at its firewall check), before its operation is open.
    held = [
        asyncio.ensure_future(ask(alice, CollectiveOp.GATHER, "agent:bob")) for _ in range(BOUND)
    ]
    await eventually(lambda: asyncio.sleep(0, len(alice.posting.checked) == BOUND))
    assert alice.collectives.open_counts()[CollectiveOp.GATHER] == 0
    await refused_at_the_bound(alice)

    alice.posting.hold_checks.set()
    assert len(set(await asyncio.gather(*held))) == BOUND
    await refused_at_the_bound(alice)


async def test_a_refused_send_frees_the_slot_it_held(alice):
    for _ in range(BOUND - 1):
        await ask(alice, CollectiveOp.GATHER, "agent:bob")
    with pytest.raises(CollectiveRefusal) as refused:
        await ask(alice, CollectiveOp.GATHER, "agent:nobody")
    assert isinstance(refused.value.error, CollectiveError)
    assert alice.collectives.held_count() == BOUND - 1
    await ask(alice, CollectiveOp.GATHER, "agent:bob")


async def test_operations_loaded_back_at_a_restart_count_against_the_bound(alice):
    await ask(alice, CollectiveOp.GATHER, "agent:bob", deadline=60)
    for _ in range(BOUND - 1):
        await ask(alice, CollectiveOp.GATHER, "agent:carol", deadline=600)
    await alice.collectives.close()

    restarted = Collectives(
        alice.posting,
        agent_name="alice",
        agent_id=alice.posting.me.card.agent_id,
        clock=alice.clock,
        max_open=BOUND,
    )
    restarted.restore(alice.posting.operation_rows(), [])
    await restarted.resume()
    alice.collectives = restarted
    try:
        assert restarted.held_count() == BOUND
        await refused_at_the_bound(alice)
        alice.clock.advance(60)
        await eventually(lambda: asyncio.sleep(0, results(alice)))
        await ask(alice, CollectiveOp.GATHER, "agent:bob")
        await refused_at_the_bound(alice)
    finally:
        await restarted.close()

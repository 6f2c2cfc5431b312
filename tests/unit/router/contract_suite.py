"""What every `RouterPort` backend owes (engine.md §4 and §10 vector 10).

A backend's test module subclasses `RouterContract` and defines a `router_factory` fixture
returning a `RouterFactory`; pytest then runs every test below against that backend (the
in-process ring, the gRPC client of a standalone Router, and JetStream). The suite speaks only
`RouterPort`: `RingSettings` are the bounds a backend is asked to apply, and the verifier is
the keyless `FakeVerifier` unless a test passes its own. Orders start at 1 on a fresh
instance, so tests may name them; cursors they build are `Cursor(instance, order)`.

Backends differ where engine.md §4 lets them: a class attribute says which rule a backend
follows (`exact_retry_identities`), and each test written for one rule has a variant for
the other; `tests/conftest.py` deselects the other rule's tests at collection, so each
backend runs its own variant and no behaviour goes untested.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

from harness_contract.ids import b64
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.router import (
    ENVELOPE_BODY_MAX_BYTES,
    POLL_HOLD,
    SIGNED_ENVELOPE_MAX_BYTES,
    Accepted,
    Batch,
    Cursor,
    CursorInvalid,
    Entry,
    EnvelopeVerifier,
    FeedGap,
    IdempotencyConflict,
    MessageInvalid,
    PollOutcome,
    RetryIdentityUnknown,
    RingSettings,
    RouterPort,
    RouterRestarted,
    SendMode,
    envelope_digest,
)
from gateway.router.settings import BATCH_MAX_BYTES, BATCH_MAX_ENTRIES
from tests.unit.router.fakes import (
    FakeVerifier,
    agent_ids,
    crc_yields,
    in_byte_order,
    rewrap,
    signed_envelope,
)

WAKE_BOUND = 5.0
"""Seconds a test waits for something that should happen at once; only a failure waits."""

SHORT_HOLD = 0.05
"""Seconds of hold in tests that let a hold expire."""

PROPERTY_EXAMPLES = 100
"""Examples of the one-order property per backend; a backend whose instances are costly
to create overrides the test with fewer, running the same `check_one_order`."""


class RouterFactory(Protocol):
    """Makes one fresh Router instance, closed when its `async with` ends."""

    def __call__(
        self, *, settings: RingSettings | None = None, verifier: EnvelopeVerifier | None = None
    ) -> AbstractAsyncContextManager[RouterPort]: ...


def expect_batch(outcome: PollOutcome) -> Batch:
    assert isinstance(outcome, Batch), outcome
    return outcome


def expect_accepted(outcome: object, data: bytes) -> Accepted:
    assert isinstance(outcome, Accepted), outcome
    assert outcome.digest == envelope_digest(data)
    return outcome


def restriction(everything: Sequence[Entry], recipients: frozenset[str]) -> list[Entry]:
    """What a reader of `recipients` must see of the one order `everything`: the entries
    addressed to any of them, each tagged with those it requested."""
    return [
        Entry(
            order=entry.order,
            signed_envelope=entry.signed_envelope,
            recipients=tuple(r for r in entry.recipients if r in recipients),
        )
        for entry in everything
        if recipients & set(entry.recipients)
    ]


async def anchor(router: RouterPort, recipients: frozenset[str]) -> Cursor:
    return expect_batch(await router.poll(recipients, None)).cursor


async def read_to_tail(
    router: RouterPort, recipients: frozenset[str], cursor: Cursor
) -> tuple[list[Entry], Cursor]:
    """Every entry after `cursor` for `recipients`, batch by batch, without holding."""
    entries: list[Entry] = []
    while True:
        batch = expect_batch(await router.poll(recipients, cursor, hold=0))
        entries.extend(batch.entries)
        cursor = batch.cursor
        if not batch.entries:
            return entries, cursor


async def send_all(router: RouterPort, envelopes: list[bytes]) -> None:
    instance = await router.instance_id()
    for data in envelopes:
        expect_accepted(await router.send(instance, SendMode.INITIAL, data), data)


async def let_tasks_run() -> None:
    """Yield to the loop a few times so started tasks reach their first real wait."""
    for _ in range(10):
        await asyncio.sleep(0)


def fixed_agent(seed: int) -> str:
    return "agt_" + b64(bytes([seed]) * 16)


def fixed_message_id(index: int) -> str:
    return "msg_" + b64(index.to_bytes(16, "big"))


PROPERTY_AGENTS = in_byte_order(fixed_agent(seed) for seed in (3, 77, 128, 200, 251))
"""Fixed AgentIds (so examples replay identically), in byte order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Plan:
    sends: list[tuple[int, frozenset[int], int]]
    """(sender, recipients, body length) as indexes into `PROPERTY_AGENTS`."""
    readers: list[frozenset[int]]
    batch_max_entries: int
    batch_max_bytes: int
    spread: int
    """Verifications yield 0..spread-1 times, which shuffles the order sends finish in."""


_recipient_sets = st.frozensets(st.integers(0, len(PROPERTY_AGENTS) - 1), min_size=1)
_plans = st.builds(
    _Plan,
    sends=st.lists(
        st.tuples(st.integers(0, len(PROPERTY_AGENTS) - 1), _recipient_sets, st.integers(0, 64)),
        max_size=30,
    ),
    readers=st.lists(_recipient_sets, min_size=1, max_size=4),
    batch_max_entries=st.integers(1, 8),
    batch_max_bytes=st.sampled_from([1, 700, 2_000, BATCH_MAX_BYTES]),
    spread=st.integers(1, 4),
)


RULE_ATTRIBUTE: Final = "_router_retry_rule"
"""Where a test written for one retry-identity rule says which (`exact` or `windowed`);
`tests/conftest.py` deselects it, at collection, for backends of the other rule, so every
backend runs each behaviour once, in its own variant, and nothing is skipped."""

F = TypeVar("F", bound=Callable[..., object])


def exact_retry_identities_only(test: F) -> F:
    """A test of the ring's rule (`RouterContract.exact_retry_identities`)."""
    setattr(test, RULE_ATTRIBUTE, "exact")
    return test


def windowed_retry_identities_only(test: F) -> F:
    """A test of the windowed rule (JetStream)."""
    setattr(test, RULE_ATTRIBUTE, "windowed")
    return test


def runs_on(test: object, backend: type) -> bool:
    """False when `test` is written for the retry rule `backend` does not follow."""
    rule = getattr(test, RULE_ATTRIBUTE, None)
    exact = bool(getattr(backend, "exact_retry_identities", True))
    return rule is None or rule == ("exact" if exact else "windowed")


class RouterContract:
    """The behavioural tests; subclasses provide the `router_factory` fixture."""

    exact_retry_identities: bool = True
    """True when a retry identity lives exactly as long as its entry and a `retry` never
    appends (the ring, engine.md §4 step 3). False for a backend that publishes both modes
    alike and deduplicates within a time window (JetStream, §4 "Backend guarantees"): an
    identical duplicate is the original `accepted`, a retry never seen is appended, and
    an identity whose entry was evicted is still known, as `retry_identity_unknown`."""

    # --- Send (engine.md §4 steps 1-4, §10 vector 10) ---

    async def test_a_first_send_is_accepted_with_the_digest_of_its_bytes(self, router_factory):
        alice, bob = agent_ids(2)
        data = signed_envelope(sender=alice, recipients=[alice, bob])
        async with router_factory() as router:
            instance = await router.instance_id()
            outcome = await router.send(instance, SendMode.INITIAL, data)
            assert outcome == Accepted(instance_id=instance, digest=envelope_digest(data))

    @exact_retry_identities_only
    async def test_an_initial_duplicate_is_an_idempotency_conflict(self, router_factory):
        alice, bob = agent_ids(2)
        data = signed_envelope(sender=alice, recipients=[alice, bob])
        async with router_factory() as router:
            instance = await router.instance_id()
            expect_accepted(await router.send(instance, SendMode.INITIAL, data), data)
            assert await router.send(instance, SendMode.INITIAL, data) == IdempotencyConflict()
            entries, _ = await read_to_tail(
                router, frozenset({bob}), Cursor(instance_id=instance, order=0)
            )
            assert [entry.order for entry in entries] == [1]

    @windowed_retry_identities_only
    async def test_an_identical_initial_duplicate_returns_the_original_answer(self, router_factory):
        alice, bob = agent_ids(2)
        data = signed_envelope(sender=alice, recipients=[alice, bob])
        async with router_factory() as router:
            instance = await router.instance_id()
            first = expect_accepted(await router.send(instance, SendMode.INITIAL, data), data)
            assert await router.send(instance, SendMode.INITIAL, data) == first
            entries, _ = await read_to_tail(
                router, frozenset({bob}), Cursor(instance_id=instance, order=0)
            )
            assert [entry.order for entry in entries] == [1]

    async def test_an_initial_with_a_retained_identity_and_other_bytes_is_a_conflict(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        data = signed_envelope(sender=alice, recipients=[alice, bob])
        other = rewrap(data, message_id=_message_id_of(data), body=b"changed")
        async with router_factory() as router:
            instance = await router.instance_id()
            expect_accepted(await router.send(instance, SendMode.INITIAL, data), data)
            assert await router.send(instance, SendMode.INITIAL, other) == IdempotencyConflict()

    async def test_an_identical_retry_returns_the_original_answer_and_appends_nothing(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        data = signed_envelope(sender=alice, recipients=[alice, bob])
        async with router_factory() as router:
            instance = await router.instance_id()
            first = await router.send(instance, SendMode.INITIAL, data)
            assert await router.send(instance, SendMode.RETRY, data) == first
            assert await router.send(instance, SendMode.RETRY, data) == first
            entries, cursor = await read_to_tail(
                router, frozenset({bob}), Cursor(instance_id=instance, order=0)
            )
            assert [entry.order for entry in entries] == [1]
            assert cursor.order == 1

    async def test_a_retry_with_changed_bytes_is_an_idempotency_conflict(self, router_factory):
        alice, bob = agent_ids(2)
        data = signed_envelope(sender=alice, recipients=[alice, bob])
        changed = rewrap(data, message_id=_message_id_of(data), body=b"changed")
        async with router_factory() as router:
            instance = await router.instance_id()
            expect_accepted(await router.send(instance, SendMode.INITIAL, data), data)
            assert await router.send(instance, SendMode.RETRY, changed) == IdempotencyConflict()

    @exact_retry_identities_only
    async def test_a_retry_never_seen_is_retry_identity_unknown_and_appends_nothing(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        data = signed_envelope(sender=alice, recipients=[alice, bob])
        async with router_factory() as router:
            instance = await router.instance_id()
            assert await router.send(instance, SendMode.RETRY, data) == RetryIdentityUnknown()
            batch = expect_batch(
                await router.poll(frozenset({bob}), Cursor(instance_id=instance, order=0), hold=0)
            )
            assert batch.entries == ()
            assert batch.cursor.order == 0

    @windowed_retry_identities_only
    async def test_a_retry_never_seen_is_appended_once_and_repeats_return_its_answer(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        data = signed_envelope(sender=alice, recipients=[alice, bob])
        async with router_factory() as router:
            instance = await router.instance_id()
            first = expect_accepted(await router.send(instance, SendMode.RETRY, data), data)
            assert await router.send(instance, SendMode.RETRY, data) == first
            assert await router.send(instance, SendMode.INITIAL, data) == first
            entries, cursor = await read_to_tail(
                router, frozenset({bob}), Cursor(instance_id=instance, order=0)
            )
            assert [(entry.order, entry.signed_envelope) for entry in entries] == [(1, data)]
            assert cursor.order == 1

    @exact_retry_identities_only
    async def test_an_evicted_identity_is_retry_identity_unknown_and_a_rewrapped_initial_is_accepted(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        first, *rest = [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(3)]
        async with router_factory(settings=RingSettings(max_entries=2)) as router:
            instance = await router.instance_id()
            await send_all(router, [first, *rest])
            assert await router.send(instance, SendMode.RETRY, first) == RetryIdentityUnknown()
            # An evicted identity is free again: engine.md §4 lets the sender re-wrap it.
            assert await router.send(instance, SendMode.INITIAL, first) == Accepted(
                instance_id=instance, digest=envelope_digest(first)
            )
            rewrapped = rewrap(first)
            expect_accepted(await router.send(instance, SendMode.INITIAL, rewrapped), rewrapped)

    @windowed_retry_identities_only
    async def test_an_identity_whose_entry_was_evicted_is_unknown_in_both_modes_until_rewrapped(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        first, *rest = [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(3)]
        async with router_factory(settings=RingSettings(max_entries=2)) as router:
            instance = await router.instance_id()
            await send_all(router, [first, *rest])
            # The duplicate window still knows the identity, but not the bytes to compare.
            for mode in SendMode:
                assert await router.send(instance, mode, first) == RetryIdentityUnknown()
            rewrapped = rewrap(first)
            expect_accepted(await router.send(instance, SendMode.INITIAL, rewrapped), rewrapped)
            entries, _ = await read_to_tail(
                router, frozenset({bob}), Cursor(instance_id=instance, order=2)
            )
            assert [entry.signed_envelope for entry in entries] == [rest[1], rewrapped]

    async def test_an_expected_instance_mismatch_is_router_restarted_with_nothing_appended(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        data = signed_envelope(sender=alice, recipients=[alice, bob])
        async with router_factory() as router, router_factory() as other:
            instance = await router.instance_id()
            stale = await other.instance_id()
            for mode in SendMode:
                assert await router.send(stale, mode, data) == RouterRestarted(instance_id=instance)
            # Even an envelope that would fail verification: the instance check comes first.
            assert await router.send(stale, SendMode.INITIAL, b"junk") == RouterRestarted(
                instance_id=instance
            )
            batch = expect_batch(
                await router.poll(frozenset({bob}), Cursor(instance_id=instance, order=0), hold=0)
            )
            assert (batch.entries, batch.cursor.order) == ((), 0)
            # The identity was not retained either: an initial now is accepted.
            expect_accepted(await router.send(instance, SendMode.INITIAL, data), data)

    async def test_an_invalid_envelope_is_message_invalid_with_nothing_appended(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        invalid = {
            "a forged signature": signed_envelope(
                sender=alice, recipients=[alice, bob], signature="forged"
            ),
            "no recipients": signed_envelope(sender=alice, recipients=[]),
            "33 recipients": signed_envelope(sender=alice, recipients=agent_ids(33)),
            "a duplicate recipient": signed_envelope(sender=alice, recipients=[alice, alice]),
            "text order instead of byte order": signed_envelope(
                sender=alice, recipients=_text_order_not_byte_order()
            ),
            "a recipient that is not an AgentId": signed_envelope(
                sender=alice, recipients=[alice, "bob"]
            ),
            "a malformed messageId": signed_envelope(
                sender=alice, recipients=[alice, bob], message_id="msg_short"
            ),
            "a sender that is not an AgentId": signed_envelope(
                sender="alice", recipients=[alice, bob]
            ),
            "a body one byte too large": signed_envelope(
                sender=alice, recipients=[alice, bob], body=bytes(ENVELOPE_BODY_MAX_BYTES + 1)
            ),
            "non-canonical bytes": signed_envelope(sender=alice, recipients=[alice, bob]) + b" ",
            "bytes past the envelope bound": signed_envelope(
                sender=alice, recipients=[alice, bob], signature="x" * SIGNED_ENVELOPE_MAX_BYTES
            ),
        }
        async with router_factory() as router:
            instance = await router.instance_id()
            for case, data in invalid.items():
                for mode in SendMode:
                    outcome = await router.send(instance, mode, data)
                    assert isinstance(outcome, MessageInvalid), (case, mode, outcome)
                    assert outcome.detail, case
            batch = expect_batch(
                await router.poll(
                    frozenset({alice, bob}), Cursor(instance_id=instance, order=0), hold=0
                )
            )
            assert (batch.entries, batch.cursor.order) == ((), 0)

    async def test_32_recipients_and_a_body_of_exactly_262144_bytes_are_accepted(
        self, router_factory
    ):
        members = agent_ids(32)
        data = signed_envelope(
            sender=members[0], recipients=members, body=bytes(ENVELOPE_BODY_MAX_BYTES)
        )
        async with router_factory() as router:
            await send_all(router, [data])

    @exact_retry_identities_only
    async def test_concurrent_initial_sends_of_one_identity_accept_exactly_one(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        data = signed_envelope(sender=alice, recipients=[alice, bob])
        async with router_factory(verifier=FakeVerifier(yields=lambda _: 2)) as router:
            instance = await router.instance_id()
            outcomes = await asyncio.gather(
                *(router.send(instance, SendMode.INITIAL, data) for _ in range(3))
            )
            assert sorted(type(outcome).__name__ for outcome in outcomes) == [
                "Accepted",
                "IdempotencyConflict",
                "IdempotencyConflict",
            ]
            entries, _ = await read_to_tail(
                router, frozenset({bob}), Cursor(instance_id=instance, order=0)
            )
            assert len(entries) == 1

    @windowed_retry_identities_only
    async def test_concurrent_initial_sends_of_one_identity_append_exactly_one(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        data = signed_envelope(sender=alice, recipients=[alice, bob])
        async with router_factory(verifier=FakeVerifier(yields=lambda _: 2)) as router:
            instance = await router.instance_id()
            outcomes = await asyncio.gather(
                *(router.send(instance, SendMode.INITIAL, data) for _ in range(3))
            )
            assert outcomes == [
                Accepted(instance_id=instance, digest=envelope_digest(data)) for _ in range(3)
            ]
            entries, _ = await read_to_tail(
                router, frozenset({bob}), Cursor(instance_id=instance, order=0)
            )
            assert len(entries) == 1

    # --- Reading ---

    async def test_a_poll_without_a_cursor_anchors_at_the_tail_and_replays_nothing(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        async with router_factory() as router:
            instance = await router.instance_id()
            empty = expect_batch(await router.poll(frozenset({bob}), None))
            assert empty == Batch(
                instance_id=instance, cursor=Cursor(instance_id=instance, order=0), entries=()
            )
            await send_all(
                router, [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(3)]
            )
            anchored = expect_batch(await router.poll(frozenset({bob}), None))
            assert anchored == Batch(
                instance_id=instance, cursor=Cursor(instance_id=instance, order=3), entries=()
            )
            data = signed_envelope(sender=alice, recipients=[alice, bob])
            await send_all(router, [data])
            entries, _ = await read_to_tail(router, frozenset({bob}), anchored.cursor)
            assert entries == [Entry(order=4, signed_envelope=data, recipients=(bob,))]

    async def test_every_recipient_reads_the_restriction_of_one_order_with_identical_bytes(
        self, router_factory
    ):
        a, b, c, d = agent_ids(4)
        addressed = [[a, b], [b, c], [a, c, d], [d], [a, b, c, d], [c], [a, d]]
        envelopes = [
            signed_envelope(sender=recipients[0], recipients=recipients) for recipients in addressed
        ]
        async with router_factory() as router:
            instance = await router.instance_id()
            await send_all(router, envelopes)
            start = Cursor(instance_id=instance, order=0)
            everything, _ = await read_to_tail(router, frozenset({a, b, c, d}), start)
            assert [entry.order for entry in everything] == list(range(1, len(envelopes) + 1))
            assert [entry.signed_envelope for entry in everything] == envelopes
            assert [list(entry.recipients) for entry in everything] == addressed
            for reader in ({a}, {b}, {c, d}, {a, b, c}, {d}):
                entries, cursor = await read_to_tail(router, frozenset(reader), start)
                assert entries == [
                    Entry(
                        order=entry.order,
                        signed_envelope=entry.signed_envelope,
                        recipients=tuple(r for r in entry.recipients if r in reader),
                    )
                    for entry in everything
                    if reader & set(entry.recipients)
                ]
                assert cursor.order == len(envelopes)

    async def test_a_cursor_below_the_eviction_point_is_a_feed_gap_and_equal_is_a_batch(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        envelopes = [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(5)]
        async with router_factory(settings=RingSettings(max_entries=3)) as router:
            instance = await router.instance_id()
            await send_all(router, envelopes)
            for order in (0, 1):
                outcome = await router.poll(
                    frozenset({bob}), Cursor(instance_id=instance, order=order), hold=0
                )
                assert outcome == FeedGap(instance_id=instance)
            batch = expect_batch(
                await router.poll(frozenset({bob}), Cursor(instance_id=instance, order=2), hold=0)
            )
            assert [entry.signed_envelope for entry in batch.entries] == envelopes[2:]
            assert [entry.order for entry in batch.entries] == [3, 4, 5]

    async def test_the_byte_bound_evicts_the_oldest_entry_and_its_retry_identity(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        envelopes = [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(4)]
        size = len(envelopes[0])
        assert {len(data) for data in envelopes} == {size}
        async with router_factory(settings=RingSettings(max_bytes=3 * size)) as router:
            instance = await router.instance_id()
            await send_all(router, envelopes)
            assert await router.poll(
                frozenset({bob}), Cursor(instance_id=instance, order=0), hold=0
            ) == FeedGap(instance_id=instance)
            entries, _ = await read_to_tail(
                router, frozenset({bob}), Cursor(instance_id=instance, order=1)
            )
            assert [entry.order for entry in entries] == [2, 3, 4]
            assert (
                await router.send(instance, SendMode.RETRY, envelopes[0]) == RetryIdentityUnknown()
            )
            retried = await router.send(instance, SendMode.RETRY, envelopes[1])
            expect_accepted(retried, envelopes[1])

    async def test_a_batch_stops_at_256_entries_and_the_next_continues_without_skipping(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        envelopes = [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(300)]
        async with router_factory() as router:
            instance = await router.instance_id()
            await send_all(router, envelopes)
            first = expect_batch(
                await router.poll(frozenset({bob}), Cursor(instance_id=instance, order=0), hold=0)
            )
            assert len(first.entries) == BATCH_MAX_ENTRIES
            assert first.cursor.order == BATCH_MAX_ENTRIES
            second = expect_batch(await router.poll(frozenset({bob}), first.cursor, hold=0))
            got = [entry.signed_envelope for entry in (*first.entries, *second.entries)]
            assert got == envelopes
            assert second.cursor.order == 300

    async def test_a_batch_stops_before_an_entry_that_would_pass_4_mib(self, router_factory):
        alice, bob = agent_ids(2)
        envelopes = [
            signed_envelope(sender=alice, recipients=[alice, bob], body=bytes(220_000))
            for _ in range(16)
        ]
        size = len(envelopes[0])
        fit = BATCH_MAX_BYTES // size
        async with router_factory() as router:
            instance = await router.instance_id()
            await send_all(router, envelopes)
            first = expect_batch(
                await router.poll(frozenset({bob}), Cursor(instance_id=instance, order=0), hold=0)
            )
            assert len(first.entries) == fit < len(envelopes)
            assert sum(len(entry.signed_envelope) for entry in first.entries) <= BATCH_MAX_BYTES
            rest, _ = await read_to_tail(router, frozenset({bob}), first.cursor)
            got = [entry.signed_envelope for entry in (*first.entries, *rest)]
            assert got == envelopes

    async def test_a_batch_stops_before_and_never_skips_an_entry_that_would_not_fit(
        self, router_factory
    ):
        alice, bob = agent_ids(2)
        small, large, tiny = (
            signed_envelope(sender=alice, recipients=[alice, bob], body=bytes(length))
            for length in (100, 1_000, 10)
        )
        limit = len(large) + len(tiny)
        # `tiny` would fit after `small`, but taking it would skip `large`.
        assert len(small) + len(large) > limit >= len(small) + len(tiny)
        async with router_factory(settings=RingSettings(batch_max_bytes=limit)) as router:
            instance = await router.instance_id()
            await send_all(router, [small, large, tiny])
            first = expect_batch(
                await router.poll(frozenset({bob}), Cursor(instance_id=instance, order=0), hold=0)
            )
            assert [entry.signed_envelope for entry in first.entries] == [small]
            assert first.cursor.order == 1
            second = expect_batch(await router.poll(frozenset({bob}), first.cursor, hold=0))
            assert [entry.signed_envelope for entry in second.entries] == [large, tiny]

    async def test_an_entry_larger_than_the_batch_limit_is_delivered_alone(self, router_factory):
        alice, bob = agent_ids(2)
        envelopes = [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(3)]
        async with router_factory(settings=RingSettings(batch_max_bytes=100)) as router:
            instance = await router.instance_id()
            await send_all(router, envelopes)
            cursor = Cursor(instance_id=instance, order=0)
            for data in envelopes:
                batch = expect_batch(await router.poll(frozenset({bob}), cursor, hold=0))
                assert [entry.signed_envelope for entry in batch.entries] == [data]
                cursor = batch.cursor

    async def test_entries_are_tagged_with_the_requested_recipients_they_are_addressed_to(
        self, router_factory
    ):
        a, b, c, d = agent_ids(4)
        data = signed_envelope(sender=a, recipients=[a, b, c, d])
        async with router_factory() as router:
            instance = await router.instance_id()
            await send_all(router, [data])
            batch = expect_batch(
                await router.poll(
                    frozenset({d, b, "agt_not_addressed"}),
                    Cursor(instance_id=instance, order=0),
                    hold=0,
                )
            )
            assert batch.entries == (Entry(order=1, signed_envelope=data, recipients=(b, d)),)

    async def test_a_held_poll_wakes_when_an_entry_for_its_recipients_arrives(self, router_factory):
        alice, bob, carol = agent_ids(3)
        data = signed_envelope(sender=alice, recipients=[alice, carol])
        async with router_factory() as router:
            cursor = await anchor(router, frozenset({carol}))
            held = asyncio.create_task(router.poll(frozenset({carol}), cursor, hold=POLL_HOLD))
            try:
                await let_tasks_run()
                assert not held.done()
                await send_all(router, [signed_envelope(sender=alice, recipients=[alice, bob])])
                await let_tasks_run()
                assert not held.done()  # an entry for someone else does not answer it
                await send_all(router, [data])
                batch = expect_batch(await asyncio.wait_for(held, WAKE_BOUND))
            finally:
                held.cancel()
            assert batch.entries == (Entry(order=2, signed_envelope=data, recipients=(carol,)),)
            assert batch.cursor.order == 2

    async def test_a_held_poll_returns_an_empty_batch_with_the_advanced_cursor_when_the_hold_expires(
        self, router_factory
    ):
        alice, bob, carol = agent_ids(3)
        async with router_factory() as router:
            instance = await router.instance_id()
            await send_all(router, [signed_envelope(sender=alice, recipients=[alice, bob])])
            batch = expect_batch(
                await router.poll(
                    frozenset({carol}), Cursor(instance_id=instance, order=0), hold=SHORT_HOLD
                )
            )
            assert batch == Batch(
                instance_id=instance, cursor=Cursor(instance_id=instance, order=1), entries=()
            )

    async def test_a_cursor_of_another_instance_is_cursor_invalid(self, router_factory):
        alice, bob = agent_ids(2)
        async with router_factory() as router, router_factory() as other:
            foreign = await anchor(other, frozenset({bob}))
            assert await router.poll(frozenset({bob}), foreign, hold=0) == CursorInvalid()
            await send_all(other, [signed_envelope(sender=alice, recipients=[alice, bob])])
            await send_all(router, [signed_envelope(sender=alice, recipients=[alice, bob])])
            assert await router.poll(frozenset({bob}), foreign, hold=0) == CursorInvalid()

    async def test_a_cursor_beyond_the_tail_is_cursor_invalid(self, router_factory):
        alice, bob = agent_ids(2)
        async with router_factory() as router:
            instance = await router.instance_id()
            assert (
                await router.poll(frozenset({bob}), Cursor(instance_id=instance, order=1), hold=0)
                == CursorInvalid()
            )
            await send_all(router, [signed_envelope(sender=alice, recipients=[alice, bob])])
            assert (
                await router.poll(frozenset({bob}), Cursor(instance_id=instance, order=2), hold=0)
                == CursorInvalid()
            )
            assert (
                await router.poll(frozenset({bob}), Cursor(instance_id=instance, order=-1), hold=0)
                == CursorInvalid()
            )
            assert await router.poll(
                frozenset({bob}), Cursor(instance_id=instance, order=1), hold=0
            ) == Batch(
                instance_id=instance, cursor=Cursor(instance_id=instance, order=1), entries=()
            )

    async def test_subscribe_starts_with_the_anchor_and_yields_batches_in_order(
        self, router_factory
    ):
        alice, bob, carol = agent_ids(3)
        envelopes = [
            signed_envelope(sender=alice, recipients=recipients)
            for recipients in ([alice, carol], [alice, bob], [alice, carol], [carol])
        ]
        expected = [data for data in envelopes if data != envelopes[1]]
        async with router_factory() as router:
            instance = await router.instance_id()
            stream = router.subscribe(frozenset({carol}), None)
            try:
                anchored = expect_batch(await asyncio.wait_for(anext(stream), WAKE_BOUND))
                assert anchored.entries == ()
                assert anchored.cursor == Cursor(instance_id=instance, order=0)
                received: list[Entry] = []
                sender = asyncio.create_task(send_all(router, envelopes))
                try:
                    while len(received) < len(expected):
                        batch = expect_batch(await asyncio.wait_for(anext(stream), WAKE_BOUND))
                        received.extend(batch.entries)
                    await asyncio.wait_for(sender, WAKE_BOUND)
                finally:
                    sender.cancel()
            finally:
                await stream.aclose()
            assert [entry.signed_envelope for entry in received] == expected
            assert [entry.order for entry in received] == [1, 3, 4]

    async def test_subscribe_yields_an_empty_batch_with_the_advanced_cursor_when_idle(
        self, router_factory
    ):
        alice, bob, carol = agent_ids(3)
        async with router_factory() as router:
            instance = await router.instance_id()
            await send_all(router, [signed_envelope(sender=alice, recipients=[alice, bob])])
            stream = router.subscribe(
                frozenset({carol}), Cursor(instance_id=instance, order=0), hold=SHORT_HOLD
            )
            try:
                batch = expect_batch(await asyncio.wait_for(anext(stream), WAKE_BOUND))
            finally:
                await stream.aclose()
            assert batch == Batch(
                instance_id=instance, cursor=Cursor(instance_id=instance, order=1), entries=()
            )

    async def test_subscribe_ends_after_a_feed_gap_or_an_invalid_cursor(self, router_factory):
        alice, bob = agent_ids(2)
        async with router_factory(settings=RingSettings(max_entries=1)) as router:
            instance = await router.instance_id()
            await send_all(
                router, [signed_envelope(sender=alice, recipients=[alice, bob]) for _ in range(2)]
            )
            for cursor, last in (
                (Cursor(instance_id=instance, order=0), FeedGap(instance_id=instance)),
                (Cursor(instance_id=instance, order=9), CursorInvalid()),
            ):
                stream = router.subscribe(frozenset({bob}), cursor)
                try:
                    items = [item async for item in stream]
                finally:
                    await stream.aclose()
                assert items == [last]

    # --- The one-order property ---

    @settings(
        max_examples=PROPERTY_EXAMPLES,
        deadline=None,
        # The factory is stateless: each example makes and closes its own Router; and
        # each backend's subclass runs this one test function, on its own factory.
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    @given(plan=_plans)
    async def test_every_reader_sees_the_restriction_of_one_global_order_under_any_interleaving(
        self, router_factory, plan
    ):
        await check_one_order(router_factory, plan)


async def check_one_order(router_factory: RouterFactory, plan: _Plan) -> None:
    """The one-order property for one plan: readers anchoring as the sends start, sends
    finishing in a shuffled order, each reader's entries exactly the restriction of the
    one order to its recipients, within the batch limits."""
    ring = RingSettings(
        batch_max_entries=plan.batch_max_entries, batch_max_bytes=plan.batch_max_bytes
    )
    verifier = FakeVerifier(yields=crc_yields(plan.spread))
    envelopes = [
        signed_envelope(
            sender=PROPERTY_AGENTS[sender],
            recipients=[PROPERTY_AGENTS[index] for index in sorted(recipients)],
            message_id=fixed_message_id(number),
            body=bytes(length),
        )
        for number, (sender, recipients, length) in enumerate(plan.sends)
    ]
    readers = [frozenset(PROPERTY_AGENTS[index] for index in reader) for reader in plan.readers]
    expected_counts = [
        sum(1 for _, recipients, _ in plan.sends if recipients & reader) for reader in plan.readers
    ]

    async def read(router: RouterPort, recipients: frozenset[str], count: int) -> list[Entry]:
        cursor = await anchor(router, recipients)
        received: list[Entry] = []
        while len(received) < count:
            batch = expect_batch(await router.poll(recipients, cursor, hold=POLL_HOLD))
            assert len(batch.entries) <= ring.batch_max_entries
            assert (
                len(batch.entries) <= 1
                or sum(len(entry.signed_envelope) for entry in batch.entries)
                <= ring.batch_max_bytes
            )
            received.extend(batch.entries)
            cursor = batch.cursor
        return received

    async with router_factory(settings=ring, verifier=verifier) as router:
        instance = await router.instance_id()
        async with asyncio.timeout(WAKE_BOUND * 2), asyncio.TaskGroup() as group:
            reads = [
                group.create_task(read(router, recipients, count))
                for recipients, count in zip(readers, expected_counts, strict=True)
            ]
            await let_tasks_run()
            sends = [
                group.create_task(router.send(instance, SendMode.INITIAL, data))
                for data in envelopes
            ]
        for task, data in zip(sends, envelopes, strict=True):
            expect_accepted(task.result(), data)
        everything, _ = await read_to_tail(
            router, frozenset(PROPERTY_AGENTS), Cursor(instance_id=instance, order=0)
        )
        assert [entry.order for entry in everything] == list(range(1, len(envelopes) + 1))
        assert sorted(entry.signed_envelope for entry in everything) == sorted(envelopes)
        for recipients, read_task in zip(readers, reads, strict=True):
            assert read_task.result() == restriction(everything, recipients)


def _message_id_of(data: bytes) -> str:
    marker = b'"messageId":"'
    start = data.index(marker) + len(marker)
    return data[start : data.index(b'"', start)].decode("ascii")


def _text_order_not_byte_order() -> list[str]:
    # engine.md §10 vector 2: 0xfb×16 sorts first as text and last as bytes.
    ids = ["agt_-_v7-_v7-_v7-_v7-_v7-w", "agt_AAAAAAAAAAAAAAAAAAAAAA"]
    assert ids == sorted(ids)
    assert ids != in_byte_order(ids)
    return ids


__all__ = ["PROPERTY_EXAMPLES", "RouterContract", "RouterFactory", "check_one_order"]

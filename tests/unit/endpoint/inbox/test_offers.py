from __future__ import annotations

from harness_contract.values import InboundItem

from gateway.endpoint.inbox.offers import OfferTracker
from tests.unit.endpoint.inbox.support import Recorded, item


def test_a_first_offer_is_not_a_replay():
    recorded = Recorded()
    offers = OfferTracker(recorded.observer())
    offers.offer(1, item("one"))
    offers.offer(2, item("two"))
    assert recorded.replayed == []


def test_an_offer_at_or_below_the_highest_offered_sequence_counts_as_a_replay_of_its_kind():
    recorded = Recorded()
    offers = OfferTracker(recorded.observer())
    offers.offer(1, item("one"))
    offers.offer(2, item("two"))
    offers.offer(1, item("one"))
    offers.offer(2, item("two"))
    offers.offer(3, item("three"))
    assert recorded.replayed == ["multicast", "multicast"]


def test_the_offer_hook_sees_every_offer_first_or_replayed():
    seen: list[tuple[int, InboundItem]] = []
    offers = OfferTracker(Recorded().observer())
    offers.on_offer = lambda seq, offered: seen.append((seq, offered))
    offers.offer(1, item("one"))
    offers.offer(1, item("one"))
    assert seen == [(1, item("one")), (1, item("one"))]

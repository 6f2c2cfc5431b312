"""What the tests of daemons joined into one network share: waiting for the next delivery and
reading a multicast message (agents are registered with `tests.e2e.network_support.register`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

from harness_client import DirectMessage, GroupMessage, InboundDelivery, MulticastItem

BOUND: Final = 30.0
"""Seconds any one wait may take: a first certification across processes includes each
daemon's Registry lookups and the Router's signature checks."""


async def next_delivery(deliveries: AsyncIterator[InboundDelivery]) -> InboundDelivery:
    return await asyncio.wait_for(anext(deliveries), BOUND)


def message_of(delivery: InboundDelivery) -> DirectMessage | GroupMessage:
    """The multicast message a delivery carries (anything else fails the test)."""
    item = delivery.item
    assert isinstance(item, MulticastItem), item
    return item.message

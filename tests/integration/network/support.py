"""What the tests of daemons joined into one network share: registering an agent through a
daemon's management API, waiting for the next delivery, reading a multicast message."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

import harness_client
from harness_client import DirectMessage, GroupMessage, InboundDelivery, MulticastItem

from gateway.testing_network import NetworkProcess

BOUND: Final = 30.0
"""Seconds any one wait may take: a first certification across processes includes each
daemon's Registry lookups and the Router's signature checks."""


async def register(daemon: NetworkProcess, name: str) -> str:
    """Register `name` on `daemon` through its management API; its agent token."""
    async with await harness_client.connect_management(
        daemon.address, admin_token=daemon.admin_token
    ) as operator:
        registered = await operator.register_agent(name)
    assert registered.address == f"agent:{name}"
    return registered.token


async def next_delivery(deliveries: AsyncIterator[InboundDelivery]) -> InboundDelivery:
    return await asyncio.wait_for(anext(deliveries), BOUND)


def message_of(delivery: InboundDelivery) -> DirectMessage | GroupMessage:
    """The multicast message a delivery carries (anything else fails the test)."""
    item = delivery.item
    assert isinstance(item, MulticastItem), item
    return item.message

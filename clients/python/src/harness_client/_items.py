"""What the client adds to the contract's values: a delivery that can acknowledge itself.

The values themselves (items, messages, outcomes, inputs, guidance) are `harness_contract`'s
frozen dataclasses, the same the gateway builds; `harness_client` re-exports them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from harness_contract import codec
from harness_contract.guidance import LocalGuidance
from harness_contract.values import Delivery, InboundItem


async def _not_acknowledgeable(token: str) -> None:
    raise RuntimeError("this delivery was not received from an endpoint")


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundDelivery:
    """An item offered under its stable token; `await delivery.acknowledge()` retires it."""

    token: str
    item: InboundItem
    guidance: LocalGuidance | None = None
    _acknowledge: Callable[[str], Awaitable[None]] = field(
        default=_not_acknowledgeable, repr=False, compare=False
    )

    async def acknowledge(self) -> None:
        """Retire this delivery; raises `DeliveryAcknowledgeError`.

        Acknowledgments are batched (up to 100 tokens a call, or every 20 ms), and each
        waiter gets its own token's result. Acknowledging again succeeds."""
        await self._acknowledge(self.token)

    @property
    def delivery(self) -> Delivery:
        """The contract's value of this delivery (what `to_json` prints)."""
        return Delivery(token=self.token, item=self.item, guidance=self.guidance)


def to_json(value: InboundDelivery | codec.Printable) -> dict[str, object]:
    """Any value the client hands out in the contract's JSON shape, as plain `json` values:
    what `harness --json` prints and what a host may hand its model."""
    if isinstance(value, InboundDelivery):
        return codec.to_json(value.delivery)
    return codec.to_json(value)

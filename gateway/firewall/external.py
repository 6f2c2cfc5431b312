"""The `external` middleware: an operator's `FirewallMiddlewareService/Check`, bounded.

The gRPC client is `gateway/rpc/firewall_client.py` (behind the `ExternalCaller` port);
this side owns what the firewall promises about it: the per-call deadline (a slow
middleware never delays a check past it) and `on_error` — fail open with an instruction
noting it, or fail closed with `middleware-unavailable`.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
from typing import Final

from harness_contract.errors import FirewallRefusal
from harness_contract.guidance import Expectation, ExpectationInstruction

from gateway.firewall.model import (
    Allow,
    CheckInput,
    Direction,
    ExternalCaller,
    Judgement,
    MiddlewareError,
    MiddlewareKind,
    Refuse,
    Withhold,
)
from gateway.firewall.spec import Directions, ExternalSpec, OnError

logger = logging.getLogger(__name__)

ON_ERROR_RULE: Final = "on-error"
"""The rule id of what `on_error` decided."""

_GRACE: Final = 0.05
"""Seconds past the deadline before the call is abandoned here, should the caller's own
deadline not fire (a stuck channel)."""

DIRECTIONS: Final[dict[Directions, frozenset[Direction]]] = {
    Directions.OUT: frozenset({Direction.SEND}),
    Directions.IN: frozenset({Direction.DELIVERY}),
    Directions.BOTH: frozenset({Direction.SEND, Direction.DELIVERY}),
}
"""The check directions of a configured `direction`."""


class External:
    """One configured external middleware."""

    kind: Final = MiddlewareKind.EXTERNAL

    def __init__(self, spec: ExternalSpec, caller: ExternalCaller) -> None:
        self.spec = spec
        self._caller = caller
        self.directions = DIRECTIONS[spec.direction]
        self._timeout = spec.deadline_ms / 1000

    @property
    def id(self) -> str:
        return self.spec.id

    def selects(self, agent: str, direction: Direction) -> bool:
        return direction in self.directions and any(
            fnmatch.fnmatchcase(agent, glob) for glob in self.spec.agents
        )

    async def check(self, check: CheckInput) -> tuple[Judgement, bool]:
        """The middleware's judgement, or `on_error`'s; True when it failed."""
        try:
            async with asyncio.timeout(self._timeout + _GRACE):
                return await self._caller.check(check, timeout=self._timeout), False
        except (MiddlewareError, TimeoutError) as error:
            cause = str(error) if isinstance(error, MiddlewareError) else "deadline exceeded"
            logger.warning(
                "firewall middleware failed check_id=%s middleware=%s on_error=%s cause=%s",
                check.check_id,
                self.spec.id,
                self.spec.on_error.value,
                cause,
            )
            return self._on_error(check), True

    def _on_error(self, check: CheckInput) -> Judgement:
        # The cause (addresses, status details) is for the operator's log above, not for
        # the model the text reaches.
        subjects = tuple(subject.id for subject in check.subjects)
        text = f"the {self.spec.id} check could not run"
        if self.spec.on_error is OnError.ALLOW:
            return Allow(
                instructions=(
                    ExpectationInstruction(
                        middleware_id=self.spec.id,
                        rule_id=ON_ERROR_RULE,
                        expectation=Expectation.PERMITTED,
                        subjects=subjects,
                        instruction=text + "; the text was admitted unchecked",
                    ),
                )
            )
        if check.direction is Direction.SEND:
            return Refuse(
                refusal=FirewallRefusal.MIDDLEWARE_UNAVAILABLE,
                rule_id=ON_ERROR_RULE,
                instruction=text + "; try again later",
            )
        return Withhold(
            subject_ids=subjects,
            reason=FirewallRefusal.MIDDLEWARE_UNAVAILABLE,
            rule_id=ON_ERROR_RULE,
            instruction=text + "; the text was withheld",
        )

    async def close(self) -> None:
        await self._caller.close()

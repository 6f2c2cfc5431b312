"""The in-process Router: a volatile ring behind `RouterPort` (engine.md §4).

The default backend, and the one the standalone `harness-gateway router` serves over gRPC.
Each construction is a new instance with a fresh `RouterInstanceId`: nothing survives the
object, so restarting the process that holds it is a Router restart.

Concurrency: everything runs on one event loop. A send awaits its verification first, then
checks the retry identity, appends, evicts and wakes readers in one synchronous stretch
with no await in between, so two sends never interleave inside it and no lock is needed.
Readers wait on per-recipient futures that an append resolves; nothing polls or sleeps
(`gateway.router.reading`, shared with the JetStream window).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import assert_never

from harness_contract.ids import RandomId

from gateway.closing import AsyncClosing
from gateway.router.port import (
    POLL_HOLD,
    Accepted,
    Cursor,
    CursorInvalid,
    EnvelopeVerifier,
    IdempotencyConflict,
    MessageInvalid,
    PollOutcome,
    RetryIdentityUnknown,
    RouterClosedError,
    RouterRestarted,
    RouterState,
    SendMode,
    SendOutcome,
    VerifiedEnvelope,
    envelope_digest,
    verify_envelope,
)
from gateway.router.reading import RetainedOrder, subscribe_by_polling
from gateway.router.settings import RingSettings

logger = logging.getLogger(__name__)

RetryIdentity = tuple[str, str]
"""(senderAgentId, messageId): what makes two sends the same send (engine.md §4 step 3)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RingStatus:
    """A snapshot of a ring, for status pages and tests."""

    instance_id: str
    state: RouterState
    tail: int
    """The greatest order appended; 0 before the first."""
    greatest_evicted: int
    """The greatest order evicted; 0 before the first eviction. A cursor below it is a gap."""
    entries: int
    """Entries retained: orders `greatest_evicted + 1` through `tail`."""
    retained_bytes: int
    """Signed-envelope bytes retained."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Stored:
    order: int
    signed_envelope: bytes
    recipients: tuple[str, ...]
    identity: RetryIdentity
    digest: str


class InProcessRouter(AsyncClosing):
    """A volatile ring implementing `RouterPort`; a new instance per construction.

    Construction does no I/O and needs no running loop; `close()` (or leaving `async with`)
    wakes held polls, which then raise `RouterClosedError`.
    """

    def __init__(self, verifier: EnvelopeVerifier, *, settings: RingSettings | None = None) -> None:
        self._verifier = verifier
        self._settings = settings if settings is not None else RingSettings()
        self._instance_id = RandomId.ROUTER_INSTANCE.mint()
        self._state = RouterState.OPEN
        self._ring: RetainedOrder[_Stored] = RetainedOrder(
            instance_id=self._instance_id,
            limits=self._settings,
            start=0,
            check_open=self._check_open,
        )
        """Retained entries, their per-recipient indexes and the held polls."""
        self._identities: dict[RetryIdentity, _Stored] = {}
        """Retry identities of retained entries, evicted with them."""
        logger.info("router instance started instance=%s", self._instance_id)

    @property
    def state(self) -> RouterState:
        """OPEN until `close()`."""
        return self._state

    def status(self) -> RingStatus:
        """The ring's current bounds and size."""
        return RingStatus(
            instance_id=self._instance_id,
            state=self._state,
            tail=self._ring.tail,
            greatest_evicted=self._ring.greatest_evicted,
            entries=len(self._ring),
            retained_bytes=self._ring.retained_bytes,
        )

    async def instance_id(self) -> str:
        """The instance id minted at construction; it never changes."""
        self._check_open()
        return self._instance_id

    async def close(self) -> None:
        """Drop the ring and wake every held poll; idempotent."""
        if self._state is RouterState.CLOSED:
            return
        self._state = RouterState.CLOSED
        self._ring.end()  # each woken poll sees CLOSED and raises
        self._identities.clear()
        logger.info("router instance closed instance=%s", self._instance_id)

    async def send(
        self, expected_instance_id: str, mode: SendMode, signed_envelope: bytes
    ) -> SendOutcome:
        """engine.md §4 Send, steps 1-4 in that order; see `RouterPort.send`."""
        self._check_open()
        # Step 1: "nothing is verified or appended".
        if expected_instance_id != self._instance_id:
            return RouterRestarted(instance_id=self._instance_id)
        # Step 2: the size bound, the verifier, then the keyless routing checks.
        verified: VerifiedEnvelope
        match await verify_envelope(self._verifier, signed_envelope):
            case MessageInvalid() as invalid:
                return invalid
            case VerifiedEnvelope() as verified:
                pass
        # From here to the answer there is no await: the identity check, the append and
        # the eviction are one step with respect to every other send and poll.
        self._check_open()
        identity = (verified.sender_agent_id, verified.message_id)
        retained = self._identities.get(identity)
        match mode:
            case SendMode.INITIAL:
                if retained is not None:
                    return IdempotencyConflict()
                return self._append(identity, verified.recipient_agent_ids, signed_envelope)
            case SendMode.RETRY:
                if retained is None:
                    return RetryIdentityUnknown()
                if retained.signed_envelope != signed_envelope:
                    return IdempotencyConflict()
                return Accepted(instance_id=self._instance_id, digest=retained.digest)
            case _:
                assert_never(mode)

    async def poll(
        self, recipients: frozenset[str], cursor: Cursor | None, *, hold: float = POLL_HOLD
    ) -> PollOutcome:
        """See `RouterPort.poll`."""
        self._check_open()
        if cursor is None:
            return self._ring.anchor()
        if cursor.instance_id != self._instance_id or not 0 <= cursor.order <= self._ring.tail:
            return CursorInvalid()
        return await self._ring.read(recipients, cursor.order, hold=hold)

    def subscribe(
        self, recipients: frozenset[str], cursor: Cursor | None, *, hold: float = POLL_HOLD
    ) -> AsyncGenerator[PollOutcome, None]:
        """See `RouterPort.subscribe`. `hold` must be positive (`ValueError`): a zero hold
        would make the stream a busy loop."""
        return subscribe_by_polling(self.poll, recipients, cursor, hold=hold)

    def _check_open(self) -> None:
        if self._state is not RouterState.OPEN:
            raise RouterClosedError(self._state)

    def _append(
        self, identity: RetryIdentity, recipients: tuple[str, ...], signed_envelope: bytes
    ) -> Accepted:
        stored = _Stored(
            order=self._ring.tail + 1,
            signed_envelope=signed_envelope,
            recipients=recipients,
            identity=identity,
            digest=envelope_digest(signed_envelope),
        )
        self._identities[identity] = stored
        for evicted in self._ring.append(stored):
            # "eviction removes the oldest entry and its retry identity together"
            del self._identities[evicted.identity]
        return Accepted(instance_id=self._instance_id, digest=stored.digest)

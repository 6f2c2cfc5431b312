"""The Router seam (engine.md §4): what every backend presents to the daemon.

A Router is a content-blind ordered multicast. `RouterPort.send` appends the exact JCS
bytes of a SignedEnvelope (engine.md §5.3) to one private order of the current instance;
`RouterPort.poll` and `RouterPort.subscribe` hand each recipient the restriction of that
order to the envelopes addressed to it, with identical bytes. Backends: the in-process
ring (`gateway.router.memory`), and later a gRPC client of a standalone Router and NATS
JetStream (`gateway/rpc/` and their adapters). One contract suite
(`tests/unit/router/contract_suite.py`) runs against each.

Verification needs keys and the Registry, so it is not the Router's own code: a backend is
given an `EnvelopeVerifier` (engine code) and adds only the keyless checks of
`routing_problem` on what the verifier reports; `verify_envelope` is that step 2, once.

Every answer is a closed union of frozen records (`SendOutcome`, `PollOutcome`); nothing
here raises for a protocol outcome. Only calling a closed Router raises
(`RouterClosedError`).
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from itertools import pairwise
from typing import Final, Protocol, TypeAlias

from harness_contract.ids import DOMAIN_PREFIX, HashId, RandomId, agent_id_order_key, b64

ENVELOPE_BODY_MAX_BYTES: Final = 262_144
"""Largest decoded `body` of an Envelope, in bytes (engine.md §4 Send step 2).

Checked on `VerifiedEnvelope.body_size`, which the verifier reports after decoding."""

ENVELOPE_OVERHEAD_MAX_BYTES: Final = 4_096
"""Bytes a SignedEnvelope may spend besides its base64url body.

32 recipients, the sender, the MessageId, the signature and JSON punctuation take about
1.3 KB; the rest is headroom, so no valid envelope is ever refused by this bound."""

SIGNED_ENVELOPE_MAX_BYTES: Final = (
    -(-ENVELOPE_BODY_MAX_BYTES * 4 // 3) + ENVELOPE_OVERHEAD_MAX_BYTES
)
"""Largest SignedEnvelope a Router accepts, in bytes: the unpadded base64url of the
largest body (349,526 characters) plus `ENVELOPE_OVERHEAD_MAX_BYTES`.

Checked before verification, so a hostile blob is refused without being parsed."""

RECIPIENTS_MAX: Final = 32
"""Most recipients of one envelope: a group's 32 members (engine.md §1.2, §4)."""

POLL_HOLD: Final = 25.0
"""Seconds a poll with nothing to return is held before an empty batch (engine.md §4).

Also the longest hold a Router grants (a longer request is shortened to it) and the
interval of a subscription's empty batches; the client's deadline is 35 s."""

_ORDER_TEXT: Final = re.compile(r"0|[1-9][0-9]{0,18}")

ORDER_MAX: Final = 2**63 - 1
"""Largest order a cursor can name (a JetStream sequence is a uint64; we stay signed)."""


class RouterClosedError(RuntimeError):
    """A Router was called after `close()`; `state` names the state that refused it."""

    def __init__(self, state: RouterState) -> None:
        super().__init__(f"the Router is {state.value}")
        self.state = state


class RouterUnavailable(ConnectionError):
    """A call to the remote Router failed, timed out or got an answer that makes no sense;
    it may or may not have taken effect. `detail` says why (never a token)."""

    def __init__(self, detail: str, *, code: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code
        """The gRPC status code's name, when the call ended with one."""


class RouterVersionMismatch(RouterUnavailable):
    """The Router speaks another `harness-version`: nothing was done, and retrying
    cannot help until one side is upgraded."""


class RouterState(enum.StrEnum):
    """Lifecycle of a Router object held by a daemon."""

    OPEN = "open"
    """Answering sends and polls."""
    CLOSED = "closed"
    """`close()` ran: every call raises `RouterClosedError`, held polls included."""


class SendMode(enum.StrEnum):
    """Whether a send is a first attempt or a retry of the same bytes."""

    INITIAL = "initial"
    """A first attempt; an already retained retry identity is `idempotency_conflict`."""
    RETRY = "retry"
    """The same bytes again after an ambiguous outcome; never appends."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Accepted:
    """`accepted{instanceId, digest}`: the entry is in the order and visible to readers.

    For a retry, the answer of the original append. The sender counts it only if
    `digest` equals the `envelope_digest` of the bytes it sent."""

    instance_id: str
    digest: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RouterRestarted:
    """`router_restarted{instanceId}`: the expected instance is not current; nothing was
    verified or appended. The sender stops all sends and recovers (engine.md §5.9)."""

    instance_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageInvalid:
    """`message_invalid`: the envelope fails verification; `detail` is for logs."""

    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class IdempotencyConflict:
    """`idempotency_conflict`: an `initial` whose retry identity is retained, or a `retry`
    whose identity is retained with other bytes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryIdentityUnknown:
    """`retry_identity_unknown`: a `retry` whose identity is not retained (never seen or
    evicted). The sender re-wraps under a fresh MessageId and sends `initial`."""


SendOutcome: TypeAlias = (
    Accepted | RouterRestarted | MessageInvalid | IdempotencyConflict | RetryIdentityUnknown
)
"""Every answer to `RouterPort.send`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cursor:
    """A reader's position: an instance and the last order scanned for it.

    Opaque to the daemon, which stores `encode()` and passes it back. The order may lie past
    entries not addressed to the reader; 0 is the empty tail."""

    instance_id: str
    order: int

    def encode(self) -> bytes:
        """`<instance_id>:<order>` in ASCII, the order in decimal without leading zeros."""
        return f"{self.instance_id}:{self.order}".encode("ascii")

    @classmethod
    def decode(cls, data: bytes) -> Cursor | None:
        """The cursor `data` encodes, or None when it is not exactly one `encode()` gave.

        A None is `cursor_invalid` ("a malformed cursor"), which the transport answers."""
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            return None
        instance_id, separator, order_text = text.partition(":")
        if not separator or not RandomId.ROUTER_INSTANCE.is_valid(instance_id):
            return None
        if not _ORDER_TEXT.fullmatch(order_text) or int(order_text) > ORDER_MAX:
            return None
        return cls(instance_id=instance_id, order=int(order_text))


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One envelope of a batch.

    `recipients` are the requested recipients it is addressed to, in the envelope's
    (AgentId byte) order; `signed_envelope` is identical for every reader."""

    order: int
    signed_envelope: bytes
    recipients: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """The envelopes after a cursor addressed to any requested recipient, in order.

    Empty when anchoring or when a hold expired. `cursor` is the position after it: the
    last entry when a batch limit stopped it, else the tail at the time of the answer."""

    instance_id: str
    cursor: Cursor
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedGap:
    """`feed_gap{instanceId}`: entries after the cursor were evicted; recover (§5.9)."""

    instance_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CursorInvalid:
    """`cursor_invalid`: a malformed cursor, another instance, or an order past the tail."""


PollOutcome: TypeAlias = Batch | FeedGap | CursorInvalid
"""Every answer to `RouterPort.poll`, and every item of `RouterPort.subscribe`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifiedEnvelope:
    """What a verifier read from a SignedEnvelope whose signature and shapes it accepted."""

    sender_agent_id: str
    """`envelope.senderAgentId`; with `message_id`, the retry identity."""
    message_id: str
    """`envelope.messageId` (`msg_` + 22 characters)."""
    recipient_agent_ids: tuple[str, ...]
    """`envelope.recipientAgentIds`, as listed."""
    body_size: int
    """Bytes of `envelope.body` once base64url-decoded."""


class EnvelopeVerifier(Protocol):
    """Engine code a Router calls for Send step 2 (engine.md §4)."""

    async def verify(self, signed_envelope: bytes) -> VerifiedEnvelope | str:
        """Check canonical bytes, shapes and the signature under the sender's card.

        Returns what the Router needs, or the reason the envelope is invalid. The Router
        itself checks the recipient list and body size (`routing_problem`), so a
        verifier need not, and bounds the whole envelope before calling."""
        ...


class RouterPort(Protocol):
    """One Router instance as a daemon sees it, whatever the backend.

    Callers may rely on: one order per instance starting at 1; an `accepted` entry is
    visible to readers before the answer; every reader sees the restriction of that order
    to its recipients with identical bytes; a lost continuity is a new instance id. A
    backend keeps no per-reader state: the cursor carries the position.
    """

    async def instance_id(self) -> str:
        """The current `RouterInstanceId` (`rti_` + 22 characters)."""
        ...

    async def send(
        self, expected_instance_id: str, mode: SendMode, signed_envelope: bytes
    ) -> SendOutcome:
        """Send(expectedInstanceId, mode, signedEnvelope), engine.md §4 steps 1-4 in order:
        instance check, verification, retry identity, then append and evict."""
        ...

    async def poll(
        self, recipients: frozenset[str], cursor: Cursor | None, *, hold: float = POLL_HOLD
    ) -> PollOutcome:
        """Long poll for the envelopes after `cursor` addressed to any of `recipients`.

        No cursor anchors: an immediate empty batch at the tail. Otherwise the next
        entries (at most the batch limits, stopping before and never skipping an entry
        that would not fit; one larger entry comes alone), or, when there are none, an
        empty batch with the advanced cursor after at most `hold` seconds (capped at
        `POLL_HOLD`). `FeedGap` when `cursor.order` is below the eviction point (equal is
        fine); `CursorInvalid` for another instance or an order past the tail. A `hold` of
        0 or less answers at once."""
        ...

    def subscribe(
        self, recipients: frozenset[str], cursor: Cursor | None, *, hold: float = POLL_HOLD
    ) -> AsyncGenerator[PollOutcome, None]:
        """The same answers as repeated polls, each from the cursor of the one before.

        Starts with the anchoring batch when `cursor` is None; yields an empty batch with
        the advanced cursor whenever `hold` (which must be positive) expires with nothing to
        deliver, so an idle reader's cursor keeps up with the ring; ends after a `FeedGap`
        or `CursorInvalid`. The consumer `aclose()`s it when done."""
        ...

    async def close(self) -> None:
        """Stop answering; idempotent. Held polls and subscriptions raise
        `RouterClosedError`."""
        ...


def envelope_digest(signed_envelope: bytes) -> str:
    """The `smd_` EnvelopeDigest of the exact JCS bytes of a SignedEnvelope.

    Equal to `HashId.ENVELOPE_DIGEST.of(parsed)` because received protocol bytes must be
    the JCS of their parsed value (engine.md §0); hashing the bytes avoids a re-encoding."""
    artifact = HashId.ENVELOPE_DIGEST.artifact.encode("ascii")
    digest = hashlib.sha256(DOMAIN_PREFIX + artifact + b"\x00" + signed_envelope).digest()
    return HashId.ENVELOPE_DIGEST.prefix + b64(digest)


def routing_problem(verified: VerifiedEnvelope) -> str | None:
    """Why a Router refuses an envelope its verifier accepted, or None.

    The keyless part of Send step 2: 1..32 distinct AgentIds in byte order, a body of at
    most `ENVELOPE_BODY_MAX_BYTES`, and a well-formed retry identity."""
    if not RandomId.AGENT.is_valid(verified.sender_agent_id):
        return "the sender is not an AgentId"
    if not RandomId.MESSAGE.is_valid(verified.message_id):
        return "the messageId is not a MessageId"
    recipients = verified.recipient_agent_ids
    if not 1 <= len(recipients) <= RECIPIENTS_MAX:
        return f"an envelope has 1 to {RECIPIENTS_MAX} recipients, not {len(recipients)}"
    if not all(RandomId.AGENT.is_valid(recipient) for recipient in recipients):
        return "a recipient is not an AgentId"
    keys = [agent_id_order_key(recipient) for recipient in recipients]
    # Strictly increasing bytes: ordered and distinct at once. Text order is a bug (§1.3).
    if any(left >= right for left, right in pairwise(keys)):
        return "recipients are not distinct AgentIds in byte order"
    if not 0 <= verified.body_size <= ENVELOPE_BODY_MAX_BYTES:
        return f"the body exceeds {ENVELOPE_BODY_MAX_BYTES} decoded bytes"
    return None


async def verify_envelope(
    verifier: EnvelopeVerifier, signed_envelope: bytes
) -> VerifiedEnvelope | MessageInvalid:
    """Send step 2 (engine.md §4) as every backend runs it: what `verifier` read from the
    envelope, or the `MessageInvalid` that answers the send.

    The size bound comes first so a hostile blob is never parsed; then the verifier, then
    `routing_problem` on what it reported."""
    if len(signed_envelope) > SIGNED_ENVELOPE_MAX_BYTES:
        return MessageInvalid(
            detail=f"the signed envelope exceeds {SIGNED_ENVELOPE_MAX_BYTES} bytes"
        )
    verified: VerifiedEnvelope
    match await verifier.verify(signed_envelope):
        case str(reason):
            return MessageInvalid(detail=reason)
        case VerifiedEnvelope() as verified:
            pass
    problem = routing_problem(verified)
    if problem is not None:
        return MessageInvalid(detail=problem)
    return verified

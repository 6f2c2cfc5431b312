"""The NATS JetStream Router: `RouterPort` over a replicated stream (engine.md §4).

`serve --router nats://HOST:PORT[,HOST:PORT...]` joins it. Import this module directly
(`gateway.router` does not, so embedded users never load nats-py).

**Order and instance.** One stream per instance, bound to `<prefix>.envelopes` and named
`<PREFIX>_<RouterInstanceId>` (`jetstream_stream`). Its sequence is the order; R3 by default
on a cluster of three or more servers, so acknowledged entries survive a node's loss in
order. Recreating or purging the stream is a new instance: a deleted stream is replaced by
whatever is bound to the subject next (or a new one), and a purge (entries vanishing that
the stream's limits would have kept) makes this process delete the stream by name and bind
a new one, so every daemon moves to one new instance and recovers (§5.9). Daemons creating
a stream at once settle on the least name (nats-server can let both creations bind the
subject; `jetstream_stream.bound_names`).

**Send.** Steps 1 and 2 as the ring; then one publish with `Nats-Msg-Id:
<senderAgentId>:<messageId>`, `Nats-Expected-Stream: <the expected instance's stream>`,
`Harness-Digest` and `Harness-Recipients`. Both modes publish alike (§4 "Backend
guarantees"): JetStream's duplicate window answers a repeat with the original sequence,
which is `accepted` when the original's bytes have the same digest and
`idempotency_conflict` otherwise; an original already evicted is `retry_identity_unknown`
(the sender re-wraps). So unlike the ring, an identical initial duplicate is `accepted`, a
retry never seen is appended, and retry identities live for the duplicate window, not for
as long as their entries. A publish that fails or times out is `RouterUnavailable`: it may
have been appended, and the sender's retry of the same bytes is deduplicated.

**Reading.** Each process reads the one stream in sequence order (batched direct gets from
any current replica, no consumer and no other state on the server) into a `FeedWindow`
bounded like the ring, and answers every poll and subscription from it, so each reader
gets the restriction of the one order to its recipients with identical bytes. The
stream's headers-only republish on `<prefix>.committed` wakes the reader; it also reads
after every accepted send (which returns only once its entry is readable here) and checks
the stream every `check_interval` seconds. Reads resume from the last sequence read after
a reconnect or a leader change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Self

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext, api

from gateway.closing import AsyncClosing
from gateway.router import jetstream_stream as stream
from gateway.router.jetstream_instance import (
    Instance,
    StaleAnswer,
    StreamLost,
    check_continuity,
    stream_info_of,
)
from gateway.router.jetstream_window import FeedWindow, WindowRetired, WindowState
from gateway.router.port import (
    POLL_HOLD,
    Accepted,
    Batch,
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
    RouterUnavailable,
    SendMode,
    SendOutcome,
    VerifiedEnvelope,
    envelope_digest,
    verify_envelope,
)
from gateway.router.reading import subscribe_by_polling
from gateway.router.settings import RingSettings

logger = logging.getLogger(__name__)

DEFAULT_MAX_AGE: Final = 7 * 86_400.0
"""Seconds the stream keeps an envelope by default (`MaxAge`, 7 days)."""

DEFAULT_DUPLICATE_WINDOW: Final = 120.0
"""Seconds JetStream remembers a `Nats-Msg-Id` by default: far past the sender's quick
retries and backoff while a leader changes."""

DEFAULT_CHECK_INTERVAL: Final = 5.0
"""Seconds between the reader's checks of the stream (deleted, purged, aged out)."""

CLUSTER_REPLICAS: Final = 3
"""Replicas of the stream when the cluster has at least this many servers (R3)."""

API_TIMEOUT: Final = 5.0
"""Seconds a JetStream API request (stream info, create, delete, get) may take."""

PUBLISH_TIMEOUT: Final = 5.0
"""Seconds a publish waits for its acknowledgement; past it the send is ambiguous."""

DUPLICATE_IN_PROCESS_DELAYS: Final = (0.005, 0.1)
"""First and longest pause, in seconds, before publishing again while a publish of the
same `Nats-Msg-Id` is still being proposed."""

VISIBILITY_BOUND: Final = 4.0
"""Seconds an acknowledged send waits for its entry to be readable here (§4: "visible to
readers before the answer"). With `PUBLISH_TIMEOUT` it stays inside the sender's 10 s
deadline; past it the send is `RouterUnavailable` and the retry is deduplicated."""

CATCH_UP_BOUND: Final = 5.0
"""Seconds a poll whose cursor is past what this process has read (but not past the
stream) waits for the reader to get there before it is `RouterUnavailable`."""

READ_BATCH_ENTRIES: Final = 256
"""Messages one direct get asks for."""

READ_BATCH_BYTES: Final = 8 * 1024 * 1024
"""Bytes one direct get asks for at most (within the client's 64 MiB pending limit)."""

READ_TIMEOUT: Final = 5.0
"""Seconds a direct get may go without its next message before it is retried."""

BEHIND_DELAYS: Final = (0.002, 0.1)
"""First and longest pause, in seconds, before reading again when the stream is known to
hold more than a replica answered (a replica applying behind the leader)."""

BEHIND_CHECK: Final = 2.0
"""Seconds of no progress while behind before the stream itself is checked."""

FAILURE_DELAYS: Final = (0.05, 2.0)
"""First and longest pause, in seconds, after a failed read (doubling)."""

RECONNECT_WAIT: Final = 0.5
"""Seconds nats-py waits between reconnection rounds (it never stops reconnecting)."""

STALE_CHECK_DELAY: Final = 0.2
"""Seconds before the stream is checked again after an info older than what was read."""
CLOSE_BOUND: Final = 5.0
"""Seconds `close()` waits for the NATS connection to close."""

HINT_PENDING_MESSAGES: Final = 65_536
"""Republished headers a slow loop may leave queued before nats-py drops some: they are
wake-ups only, so a dropped one costs at most `check_interval` of latency."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JetStreamSettings:
    """How a daemon uses NATS JetStream as its Router (`--nats-*` flags)."""

    subject_prefix: str = "harness"
    """First tokens of the subjects (`<prefix>.envelopes`, `<prefix>.committed`) and of the
    stream name, so several gateways can share one NATS account."""
    max_age: float = DEFAULT_MAX_AGE
    """Seconds the stream keeps an envelope (`MaxAge`)."""
    duplicate_window: float = DEFAULT_DUPLICATE_WINDOW
    """Seconds JetStream remembers a `Nats-Msg-Id` (at most `max_age`)."""
    replicas: int | None = None
    """Stream replicas (1-5); None is `CLUSTER_REPLICAS` when the client knows at least that
    many servers (listed or discovered), else 1. Only used when creating the stream."""
    creds_file: Path | None = None
    """A NATS credentials file (user JWT and NKey seed); nats-py reads it at each connect."""
    connect_timeout: float = 5.0
    """Seconds the first connection may take (every server tried, again and again)."""
    name: str = "harness-gateway"
    """The connection's name in NATS monitoring."""
    check_interval: float = DEFAULT_CHECK_INTERVAL
    """Seconds between the reader's checks of the stream (deletion, purge, age)."""

    def __post_init__(self) -> None:
        if not stream.valid_subject_prefix(self.subject_prefix):
            raise ValueError(
                "the NATS subject prefix is dot-separated tokens of letters, digits, _ and -,"
                f" not {self.subject_prefix!r}"
            )
        if not self.max_age > 0:
            raise ValueError("the stream's max age must be positive")
        if not 0 < self.duplicate_window <= self.max_age:
            raise ValueError("the duplicate window must be positive and at most the max age")
        if self.replicas is not None and not 1 <= self.replicas <= 5:
            raise ValueError("stream replicas are 1 to 5")
        if not self.connect_timeout > 0 or not self.check_interval > 0:
            raise ValueError("the connect timeout and check interval must be positive")


@dataclass(frozen=True, slots=True, kw_only=True)
class JetStreamStatus:
    """A snapshot of a JetStream Router, for status pages and tests."""

    instance_id: str
    stream_name: str
    state: RouterState
    tail: int
    """The greatest order read into the window."""
    known_last: int
    """The greatest order known to be in the stream (acknowledged, republished or seen)."""
    greatest_evicted: int
    entries: int
    retained_bytes: int
    checks: int
    """Checks of the stream completed since `connect` (deleted, purged, aged out)."""


class JetStreamRouter(AsyncClosing):
    """A `RouterPort` whose order is a JetStream stream.

    Create it with `await JetStreamRouter.connect(servers, verifier=...)`; `close()` (or
    leaving `async with`) stops the reader, ends held polls and subscriptions with
    `RouterClosedError` and closes the connection."""

    def __init__(
        self, verifier: EnvelopeVerifier, *, settings: RingSettings, options: JetStreamSettings
    ) -> None:
        """Use `connect`; this only stores what it is given."""
        self._verifier = verifier
        self._ring = settings
        self._options = options
        self._state = RouterState.OPEN
        self._nc = Client()
        self._js: JetStreamContext | None = None
        self._plan: stream.StreamPlan | None = None
        self._instance: Instance | None = None
        self._reader: asyncio.Task[None] | None = None
        self._hints: Subscription | None = None
        self._wake = asyncio.Event()
        """Set to make the reader read now: a republished header, an accepted send, a
        poll waiting to catch up, an instance change."""
        self._check_now = False
        self._checks = 0
        self._replacing = asyncio.Lock()

    @classmethod
    async def connect(
        cls,
        servers: Sequence[str],
        *,
        verifier: EnvelopeVerifier,
        settings: RingSettings | None = None,
        options: JetStreamSettings | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> Self:
        """Connect to `servers` (`nats://HOST:PORT` or `tls://HOST:PORT`), bind the stream
        (adopting the one bound to the subject, or creating one) and start reading.

        `settings` bound the stream (`MaxMsgs`, `MaxBytes`) and the batches like the
        ring's. Raises `RouterUnavailable` when no server answers within
        `options.connect_timeout` or the stream cannot be bound."""
        if not servers:
            raise ValueError("a JetStream Router needs at least one NATS server")
        router = cls(
            verifier,
            settings=settings if settings is not None else RingSettings(),
            options=options if options is not None else JetStreamSettings(),
        )
        try:
            await router._open(list(servers), tls)
        except BaseException:
            await router.close()
            raise
        return router

    # --- RouterPort ---

    async def instance_id(self) -> str:
        """The current instance (the stream this process is bound to); no I/O."""
        return self._current().instance_id

    async def send(
        self, expected_instance_id: str, mode: SendMode, signed_envelope: bytes
    ) -> SendOutcome:
        """engine.md §4 Send on JetStream; see the module docstring for what differs from
        the ring. `mode` does not change what is published."""
        instance = self._current()
        if expected_instance_id != instance.instance_id:
            return RouterRestarted(instance_id=instance.instance_id)
        verified: VerifiedEnvelope
        match await verify_envelope(self._verifier, signed_envelope):
            case MessageInvalid() as invalid:
                return invalid
            case VerifiedEnvelope() as verified:
                pass
        # The instance may have changed during verification: still step 1's answer.
        instance = self._current()
        if expected_instance_id != instance.instance_id:
            return RouterRestarted(instance_id=instance.instance_id)
        digest = envelope_digest(signed_envelope)
        headers = {
            stream.HEADER_MSG_ID: f"{verified.sender_agent_id}:{verified.message_id}",
            stream.HEADER_DIGEST: digest,
            stream.HEADER_RECIPIENTS: ",".join(verified.recipient_agent_ids),
        }
        if not self._nc.is_connected:
            raise RouterUnavailable("not connected to NATS (reconnecting)")
        try:
            ack = await self._publish(instance, signed_envelope, headers)
        except nats.js.errors.APIError as error:
            self._check_open()
            if error.err_code == stream.ERR_EXPECTED_STREAM:
                return await self._restarted(instance, error)
            raise stream.unavailable("publish", error) from None
        except nats.js.errors.NoStreamResponseError as error:
            self._check_open()
            return await self._restarted(instance, error)
        except stream.TRANSPORT_ERRORS as error:
            self._check_open()
            raise stream.unavailable("publish", error) from None
        self._check_open()
        if ack.stream != instance.stream_name or not ack.seq > 0:
            raise RouterUnavailable(f"a publish was acknowledged by {ack.stream} as {ack.seq}")
        try:
            if ack.duplicate:
                original = await self._original_digest(instance, ack.seq)
                if original is None:
                    return RetryIdentityUnknown()
                if original != digest:
                    return IdempotencyConflict()
            return await self._accepted(instance, ack.seq, digest)
        except WindowRetired:
            self._check_open()
            # Appended to an instance that is gone since: the sender recovers.
            return RouterRestarted(instance_id=self._current().instance_id)

    async def poll(
        self, recipients: frozenset[str], cursor: Cursor | None, *, hold: float = POLL_HOLD
    ) -> PollOutcome:
        """See `RouterPort.poll`. While this process has read less than the stream is known
        to hold, the poll first waits (at most `CATCH_UP_BOUND`) for the reader."""
        instance = self._current()
        window = instance.window
        if cursor is None:
            tail = max(window.tail, instance.known_last)
            return Batch(
                instance_id=instance.instance_id,
                cursor=Cursor(instance_id=instance.instance_id, order=tail),
                entries=(),
            )
        if cursor.instance_id != instance.instance_id or cursor.order < 0:
            return CursorInvalid()
        try:
            behind = window.tail < max(cursor.order, instance.known_last)
            if behind and not await self._catch_up(instance, cursor.order):
                return CursorInvalid()
            return await window.poll(recipients, cursor.order, hold=hold)
        except WindowRetired:
            self._check_open()
            return CursorInvalid()  # the cursor's instance was replaced meanwhile

    def subscribe(
        self, recipients: frozenset[str], cursor: Cursor | None, *, hold: float = POLL_HOLD
    ) -> AsyncGenerator[PollOutcome, None]:
        """See `RouterPort.subscribe`; `hold` must be positive (`ValueError`)."""
        return subscribe_by_polling(self.poll, recipients, cursor, hold=hold)

    async def close(self) -> None:
        """Stop the reader, end held reads (`RouterClosedError`), close the connection;
        idempotent."""
        if self._state is RouterState.CLOSED:
            return
        self._state = RouterState.CLOSED
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        if self._instance is not None:
            self._instance.window.retire(WindowState.CLOSED)
        hints, self._hints = self._hints, None
        if hints is not None:
            with contextlib.suppress(*stream.TRANSPORT_ERRORS):
                await hints.unsubscribe()
        if not self._nc.is_closed:
            try:
                async with asyncio.timeout(CLOSE_BOUND):
                    await self._nc.close()
            except (TimeoutError, *stream.TRANSPORT_ERRORS) as error:
                logger.warning("closing the NATS connection failed: %s", stream.describe(error))
        if self._instance is not None:
            logger.info("router closed instance=%s", self._instance.instance_id)

    # --- for status pages and tests ---

    @property
    def state(self) -> RouterState:
        return self._state

    def status(self) -> JetStreamStatus:
        """The bound stream and this process's window of it."""
        instance = self._instance
        if instance is None:
            raise RouterClosedError(self._state)
        window = instance.window
        return JetStreamStatus(
            instance_id=instance.instance_id,
            stream_name=instance.stream_name,
            state=self._state,
            tail=window.tail,
            known_last=instance.known_last,
            greatest_evicted=window.greatest_evicted,
            entries=len(window),
            retained_bytes=window.retained_bytes,
            checks=self._checks,
        )

    @property
    def stream_name(self) -> str:
        """The name of the stream this process is bound to."""
        return self._current().stream_name

    # --- connection and binding ---

    async def _open(self, servers: list[str], tls: ssl.SSLContext | None) -> None:
        options = self._options
        try:
            async with asyncio.timeout(options.connect_timeout):
                await self._nc.connect(
                    servers,
                    name=options.name,
                    # nats-py annotates both as int but uses them as seconds of a float.
                    connect_timeout=options.connect_timeout,  # type: ignore[arg-type]
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=RECONNECT_WAIT,  # type: ignore[arg-type]
                    tls=tls,
                    user_credentials=str(options.creds_file) if options.creds_file else None,
                    error_cb=self._handle_error,
                    disconnected_cb=self._handle_disconnected,
                    reconnected_cb=self._handle_reconnected,
                )
        except TimeoutError:
            raise RouterUnavailable(
                f"no NATS server answered within {options.connect_timeout:g} s"
            ) from None
        except stream.TRANSPORT_ERRORS as error:
            raise stream.unavailable("connect", error) from None
        except ImportError as error:
            # nats-py reads a credentials file with the optional `nkeys` package.
            raise RuntimeError(
                f"NATS credentials need the nkeys package (nats-py[nkeys]): {error}"
            ) from None
        self._js = self._nc.jetstream(timeout=API_TIMEOUT)
        known = {server.netloc for server in self._nc.servers}
        replicas = options.replicas
        if replicas is None:
            replicas = CLUSTER_REPLICAS if len(known) >= CLUSTER_REPLICAS else 1
        self._plan = stream.StreamPlan(
            subject_prefix=options.subject_prefix,
            max_msgs=self._ring.max_entries,
            max_bytes=self._ring.max_bytes,
            max_age=options.max_age,
            duplicate_window=options.duplicate_window,
            replicas=replicas,
        )
        self._instance = self._instance_of(await stream.bind(self._js, self._plan))
        try:
            self._hints = await self._nc.subscribe(
                self._plan.committed_subject,
                cb=self._handle_hint,
                pending_msgs_limit=HINT_PENDING_MESSAGES,
            )
        except stream.TRANSPORT_ERRORS as error:
            raise stream.unavailable("subscribe", error) from None
        self._reader = asyncio.create_task(self._read_loop(), name="jetstream-router-reader")
        bound = self._instance.bound
        logger.info(
            "router stream bound stream=%s instance=%s replicas=%d first=%d last=%d",
            bound.name,
            bound.instance_id,
            bound.replicas,
            bound.first_seq,
            bound.last_seq,
        )

    def _instance_of(self, bound: stream.BoundStream) -> Instance:
        # The stream's own limits, when it was created with other settings, so that the
        # window and the purge check agree with what the stream does.
        limits = RingSettings(
            max_entries=bound.max_msgs if bound.max_msgs > 0 else self._ring.max_entries,
            max_bytes=bound.max_bytes if bound.max_bytes > 0 else self._ring.max_bytes,
            batch_max_entries=self._ring.batch_max_entries,
            batch_max_bytes=self._ring.batch_max_bytes,
        )
        window = FeedWindow(instance_id=bound.instance_id, limits=limits, start=bound.start)
        return Instance(bound=bound, window=window, known_last=bound.last_seq)

    async def _replace(self, lost: Instance, reason: StreamLost) -> None:
        """Bind the next instance after `lost` (once, however many callers noticed)."""
        async with self._replacing:
            self._check_open()
            if self._instance is not lost:
                return
            if reason.delete:
                await stream.delete(self._jetstream(), lost.stream_name)
            bound = await stream.bind(self._jetstream(), self._subjects())
            if bound.name == lost.stream_name:
                # Answered absent (or deleted) and yet bound again under its name: keep the
                # instance rather than end a healthy stream on one odd answer. Created
                # again, its creation time tells the next check (`leader_state`).
                raise RouterUnavailable(f"the stream {bound.name} is bound again under its name")
            self._check_open()
            self._instance = self._instance_of(bound)
            lost.window.retire(WindowState.RETIRED)
            self._wake.set()
            logger.warning(
                "router instance lost (%s): instance=%s replaced by instance=%s stream=%s",
                reason.reason,
                lost.instance_id,
                bound.instance_id,
                bound.name,
            )

    async def _publish(
        self, instance: Instance, signed_envelope: bytes, headers: dict[str, str]
    ) -> api.PubAck:
        """One publish, repeated while a concurrent one of the same identity is still being
        proposed (its outcome is the answer), within `PUBLISH_TIMEOUT` in all."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PUBLISH_TIMEOUT
        delay = DUPLICATE_IN_PROCESS_DELAYS[0]
        while True:
            try:
                return await self._jetstream().publish(
                    self._subjects().envelopes_subject,
                    signed_envelope,
                    timeout=max(deadline - loop.time(), 0.001),
                    stream=instance.stream_name,
                    headers=headers,
                )
            except nats.js.errors.APIError as error:
                if error.err_code != stream.ERR_DUPLICATE_IN_PROCESS:
                    raise
                if loop.time() + delay >= deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, DUPLICATE_IN_PROCESS_DELAYS[1])

    async def _restarted(self, instance: Instance, error: BaseException) -> SendOutcome:
        """A publish found no stream of the expected instance: `RouterRestarted` with the
        next instance once that is confirmed, else `RouterUnavailable` (no leader yet)."""
        try:
            await stream_info_of(self._jetstream(), self._subjects(), instance)
        except StreamLost as lost:
            await self._replace(instance, lost)
            return RouterRestarted(instance_id=self._current().instance_id)
        raise stream.unavailable("publish", error)

    # --- send helpers ---

    async def _original_digest(self, instance: Instance, order: int) -> str | None:
        """The digest of the entry a duplicate publish names, or None when it is gone
        (`WindowRetired` when the instance ends meanwhile)."""
        window = instance.window
        if order > window.tail:
            instance.note_last(order)
            self._wake.set()
            await window.wait_for_tail(order, VISIBILITY_BOUND)
        entry = window.entry(order)
        if entry is not None:
            return entry.digest
        data = await stream.fetch(self._jetstream(), instance.stream_name, order)
        return envelope_digest(data) if data is not None else None

    async def _accepted(self, instance: Instance, order: int, digest: str) -> SendOutcome:
        """`Accepted` once `order` is readable here (`WindowRetired` when the instance ends
        first, `RouterUnavailable` past `VISIBILITY_BOUND`)."""
        instance.note_last(order)
        self._wake.set()
        visible = await instance.window.wait_for_tail(order, VISIBILITY_BOUND)
        if not visible:
            raise RouterUnavailable(
                f"order {order} was appended but is not readable within {VISIBILITY_BOUND:g} s"
            )
        return Accepted(instance_id=instance.instance_id, digest=digest)

    # --- read helpers ---

    async def _catch_up(self, instance: Instance, order: int) -> bool:
        """Before answering from the window: False when `order` is past the stream's tail;
        else wait (at most `CATCH_UP_BOUND`) until the window holds what the stream is
        known to hold, so a poll never answers from behind a send already accepted. Only
        a cursor past the window that it did not reach is `RouterUnavailable`."""
        if order > instance.known_last:
            try:
                info = await stream_info_of(self._jetstream(), self._subjects(), instance)
            except StreamLost as lost:
                await self._replace(instance, lost)
                return False
            instance.note_last(info.state.last_seq)
            if order > instance.known_last:
                return False
        window = instance.window
        if window.tail < instance.known_last:
            self._wake.set()
            reached = await window.wait_for_tail(instance.known_last, CATCH_UP_BOUND)
            if not reached and order > window.tail:
                raise RouterUnavailable(
                    f"the Router feed is {order - window.tail} entries behind the cursor"
                )
        return True

    async def _read_loop(self) -> None:
        """Read the stream into the current window until `close` cancels it."""
        with contextlib.suppress(RouterClosedError):
            await self._read_forever()

    async def _read_forever(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        behind_delay = BEHIND_DELAYS[0]
        next_check = loop.time() + self._options.check_interval
        while True:
            instance = self._current()
            self._wake.clear()
            try:
                if self._check_now or loop.time() >= next_check:
                    self._check_now = False
                    next_check = loop.time() + self._options.check_interval
                    try:
                        await check_continuity(self._jetstream(), self._subjects(), instance)
                        self._checks += 1
                    except StaleAnswer as stale:
                        # Not a failure: read on, and look at the stream again soon.
                        logger.debug("router stream check postponed: %s", stale.detail)
                        next_check = loop.time() + STALE_CHECK_DELAY
                more = await self._read_once(instance)
            except StreamLost as lost:
                try:
                    await self._replace(instance, lost)
                except RouterUnavailable as error:
                    failures += 1
                    self._log_failure(failures, "replacing the lost stream", error)
                    await self._pause(_delay(failures))
                continue
            except RouterUnavailable as error:
                failures += 1
                self._log_failure(failures, "reading the stream", error)
                await self._pause(_delay(failures))
                continue
            except RouterClosedError:
                raise
            except Exception:
                # A bug here must not stop the feed for good: log it and read on.
                failures += 1
                logger.exception("router stream reader failed; reading on")
                await self._pause(_delay(failures))
                continue
            if failures:
                logger.info("router stream readable again stream=%s", instance.stream_name)
                failures = 0
            window = instance.window
            if more:
                continue
            if window.tail < instance.known_last:
                # A replica answered before applying what the leader acknowledged.
                now = loop.time()
                if instance.behind_since is None:
                    instance.behind_since = now
                elif now - instance.behind_since > BEHIND_CHECK:
                    instance.behind_since = now
                    self._check_now = True
                await self._pause(behind_delay)
                behind_delay = min(behind_delay * 2, BEHIND_DELAYS[1])
                continue
            instance.behind_since = None
            behind_delay = BEHIND_DELAYS[0]
            await self._pause(max(next_check - loop.time(), 0.0))

    async def _read_once(self, instance: Instance) -> bool:
        """One batch after the window's tail; True when the stream holds more."""
        window = instance.window
        try:
            batch = await stream.read_batch(
                self._nc,
                instance.stream_name,
                window.tail + 1,
                max_entries=READ_BATCH_ENTRIES,
                max_bytes=READ_BATCH_BYTES,
                message_wait=READ_TIMEOUT,
            )
        except stream.NoResponders:
            # Gone (`StreamLost` from the look below), or between leaders.
            await stream_info_of(self._jetstream(), self._subjects(), instance)
            raise RouterUnavailable("no replica serves the stream (a leader change?)") from None
        for message in batch.messages:
            entry = stream.stored_entry(message)
            if entry is None:
                raise RouterUnavailable("a direct get answered a message without a sequence")
            if window.state is not WindowState.OPEN:
                return False
            if entry.order <= window.tail:
                continue
            if entry.order > window.tail + 1:
                # The stream no longer holds what lies between: evicted, or purged.
                await check_continuity(
                    self._jetstream(), self._subjects(), instance, seen_first=entry.order
                )
                if entry.order <= window.tail:
                    continue
            window.append(entry)
            instance.note_last(entry.order)
        return batch.more

    async def _pause(self, seconds: float) -> None:
        """Until woken or `seconds` pass."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()

    @staticmethod
    def _log_failure(failures: int, doing: str, error: RouterUnavailable) -> None:
        if failures == 1:
            logger.warning("router stream unavailable while %s: %s", doing, error.detail)
        else:
            logger.debug("router stream still unavailable while %s: %s", doing, error.detail)

    # --- nats-py callbacks ---

    async def _handle_hint(self, message: Msg) -> None:
        instance = self._instance
        if instance is not None:
            order = stream.hinted_sequence(message, instance.stream_name)
            if order is not None:
                instance.note_last(order)
        self._wake.set()

    async def _handle_error(self, error: Exception) -> None:
        # Each failed reconnection attempt lands here; the disconnection itself is a
        # warning already (`_handle_disconnected`).
        level = logging.DEBUG if isinstance(error, _CONNECTION_ERRORS) else logging.WARNING
        logger.log(level, "NATS client error: %s", stream.describe(error))

    async def _handle_disconnected(self) -> None:
        if self._state is RouterState.OPEN:
            logger.warning("disconnected from NATS; reconnecting")

    async def _handle_reconnected(self) -> None:
        url = self._nc.connected_url
        logger.info("reconnected to NATS server=%s", url.netloc if url is not None else "?")
        self._wake.set()

    # --- small helpers ---

    def _check_open(self) -> None:
        if self._state is not RouterState.OPEN:
            raise RouterClosedError(self._state)

    def _current(self) -> Instance:
        self._check_open()
        assert self._instance is not None, "connect binds an instance before returning"
        return self._instance

    def _jetstream(self) -> JetStreamContext:
        assert self._js is not None, "connect opens JetStream before any use"
        return self._js

    def _subjects(self) -> stream.StreamPlan:
        assert self._plan is not None, "connect makes the plan before any use"
        return self._plan


_CONNECTION_ERRORS: Final = (
    OSError,
    TimeoutError,
    nats.errors.StaleConnectionError,
    nats.errors.NoServersError,
    nats.errors.ConnectionClosedError,
)


def _delay(failures: int) -> float:
    first, longest = FAILURE_DELAYS
    return float(min(first * 2 ** min(failures - 1, 16), longest))


__all__ = ["JetStreamRouter", "JetStreamSettings", "JetStreamStatus"]

"""The JetStream side of the JetStream Router: the stream, and nats-py at its edge.

One stream per Router instance, bound to `<prefix>.envelopes`, named
`<PREFIX>_<RouterInstanceId>` (the prefix upper-cased, dots as underscores) with the id in
its metadata too. Its sequence is the order. It republishes a headers-only copy of every
stored message on `<prefix>.committed`, which readers take as a wake-up, never as data.

Everything nats-py raises is translated here (house-style 15): a transport failure, a
timeout or an answer that makes no sense is `RouterUnavailable` with a detail (never a
credential); a stream confirmed absent is `StreamGone`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import nats.errors
import nats.js.errors
from harness_contract.ids import RandomId
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from gateway.router.jetstream_window import StoredEntry
from gateway.router.port import SIGNED_ENVELOPE_MAX_BYTES, RouterUnavailable

logger = logging.getLogger(__name__)

ENVELOPES_SUFFIX: Final = "envelopes"
"""Last token of the subject the stream is bound to: `<prefix>.envelopes`."""

COMMITTED_SUFFIX: Final = "committed"
"""Last token of the subject the stream republishes stored headers on."""

HEADER_MSG_ID: Final = "Nats-Msg-Id"
"""`<senderAgentId>:<messageId>`: the retry identity, deduplicated by JetStream."""
HEADER_DIGEST: Final = "Harness-Digest"
"""The `smd_` EnvelopeDigest of the published bytes (engine.md §4)."""
HEADER_RECIPIENTS: Final = "Harness-Recipients"
"""The envelope's recipient AgentIds, comma-separated in the envelope's order."""

METADATA_INSTANCE: Final = "harness-router-instance"
"""Stream metadata key holding the RouterInstanceId its name carries."""

ERR_STREAM_NOT_FOUND: Final = 10059
"""JetStream's error code for "stream not found"."""
ERR_EXPECTED_STREAM: Final = 10060
"""JetStream's error code for a publish whose `Nats-Expected-Stream` is not the stream."""
ERR_DUPLICATE_IN_PROCESS: Final = 10158
"""JetStream's error code for a publish whose `Nats-Msg-Id` another publish is still
proposing (a cluster): the first one's outcome decides, so the publish is repeated."""
ERR_SUBJECTS_OVERLAP: Final = 10065
"""JetStream's error code for a stream whose subjects another stream already has."""

BIND_ATTEMPTS: Final = 5
"""Discover-or-create rounds before giving up: each lost creation race costs one."""

STORED_OVERHEAD: Final = 64
"""Bytes JetStream counts per message besides subject, headers and payload, rounded up
(the file store's record header and checksum), for the purge check's size bound."""

MAX_STORED_SIZE: Final = SIGNED_ENVELOPE_MAX_BYTES + 2_048
"""An upper bound of any Harness message's stored size: the largest envelope, its
headers (32 recipients take about 900 bytes) and the record overhead."""

_TOKEN: Final = re.compile(r"[A-Za-z0-9_-]+")
_STATUS: Final = "Status"
_STATUS_END: Final = "204"
_STATUS_NOT_FOUND: Final = "404"
_STATUS_NO_RESPONDERS: Final = "503"


class StreamGone(Exception):
    """The stream is confirmed absent: its name is unknown and no longer bound to the
    subject (or the subject names another stream)."""


def valid_subject_prefix(prefix: str) -> bool:
    """One or more dot-separated tokens of letters, digits, `_` and `-` (no wildcards)."""
    return all(_TOKEN.fullmatch(token) for token in prefix.split("."))


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamPlan:
    """What this process asks of a stream it creates."""

    subject_prefix: str
    max_msgs: int
    max_bytes: int
    max_age: float
    duplicate_window: float
    replicas: int

    @property
    def envelopes_subject(self) -> str:
        return f"{self.subject_prefix}.{ENVELOPES_SUFFIX}"

    @property
    def committed_subject(self) -> str:
        return f"{self.subject_prefix}.{COMMITTED_SUFFIX}"

    @property
    def name_prefix(self) -> str:
        return self.subject_prefix.upper().replace(".", "_")

    def stream_name(self, instance_id: str) -> str:
        return f"{self.name_prefix}_{instance_id}"

    def instance_of(self, stream_name: str) -> str | None:
        """The RouterInstanceId a stream name of this plan carries, or None."""
        head = self.name_prefix + "_"
        instance_id = stream_name.removeprefix(head)
        if instance_id == stream_name or not RandomId.ROUTER_INSTANCE.is_valid(instance_id):
            return None
        return instance_id

    def config(self, instance_id: str) -> api.StreamConfig:
        return api.StreamConfig(
            name=self.stream_name(instance_id),
            description="Harness Router order (engine.md §4); the name carries the instance",
            subjects=[self.envelopes_subject],
            retention=api.RetentionPolicy.LIMITS,
            max_msgs=self.max_msgs,
            max_bytes=self.max_bytes,
            max_age=self.max_age,
            discard=api.DiscardPolicy.OLD,
            storage=api.StorageType.FILE,
            num_replicas=self.replicas,
            duplicate_window=self.duplicate_window,
            # Readers fetch batches from any current replica without a consumer.
            allow_direct=True,
            # Single deletions would punch holes readers cannot tell from evictions.
            deny_delete=True,
            republish=api.RePublish(
                src=self.envelopes_subject, dest=self.committed_subject, headers_only=True
            ),
            metadata={METADATA_INSTANCE: instance_id},
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundStream:
    """A stream this process adopted or created, with the limits it actually has."""

    name: str
    instance_id: str
    first_seq: int
    last_seq: int
    messages: int
    max_msgs: int
    """`MaxMsgs`, or -1 when unlimited (a stream created with other settings)."""
    max_bytes: int
    max_age: float
    """`MaxAge` in seconds, 0 when unlimited."""
    replicas: int
    created_at: dt.datetime | None
    """When the stream was created (its `created`): a stream deleted and created again
    under the same name has another."""
    created: bool
    """True when this process created it."""

    @property
    def start(self) -> int:
        """The order before the first retained one (the window's starting point)."""
        if self.messages == 0:
            return self.last_seq
        return max(self.first_seq - 1, 0)


def unavailable(doing: str, error: BaseException) -> RouterUnavailable:
    """`RouterUnavailable` for a nats-py failure while `doing` something."""
    return RouterUnavailable(f"NATS JetStream {doing} failed: {describe(error)}")


def describe(error: BaseException) -> str:
    """A loggable description of a nats-py failure: its kind and, for a JetStream API
    error, the server's code and description (which name no credential)."""
    if isinstance(error, nats.js.errors.APIError):
        return (
            f"{type(error).__name__} code={error.code} err_code={error.err_code} "
            f"description={error.description!r}"
        )
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


TRANSPORT_ERRORS: Final = (nats.errors.Error, OSError, TimeoutError)
"""What a nats-py call raises when it fails (JetStream's errors derive from the first)."""


async def stream_info(js: JetStreamContext, name: str, *, subject: str) -> api.StreamInfo:
    """The stream's current info; `StreamGone` when it is confirmed absent (unknown by
    name, and `subject` bound to no stream or to another one)."""
    try:
        return await js.stream_info(name)
    except nats.js.errors.NotFoundError as error:
        if error.err_code not in (None, ERR_STREAM_NOT_FOUND):
            raise unavailable("stream info", error) from None
    except TRANSPORT_ERRORS as error:
        raise unavailable("stream info", error) from None
    # A "not found" answered during an election must not end an instance: the subject
    # must not name it either.
    try:
        bound = await js.find_stream_name_by_subject(subject)
    except nats.js.errors.NotFoundError:
        raise StreamGone from None
    except TRANSPORT_ERRORS as error:
        raise unavailable("stream lookup", error) from None
    if bound == name:
        raise RouterUnavailable(f"NATS JetStream answered stream {name} both absent and bound")
    raise StreamGone


async def bound_names(js: JetStreamContext, subject: str) -> list[str]:
    """The names of every stream bound to `subject`, least first.

    One, normally. nats-server can let two concurrent creations bind one subject (seen
    with 2.15 on one node), so a creator looks again, and every daemon takes the least
    name; the others are deleted (`settle`)."""
    request = json.dumps({"subject": subject}).encode()
    try:
        # nats-py's `find_stream_name_by_subject` keeps only the first name.
        answer = await js._api_request(f"{api.DEFAULT_PREFIX}.STREAM.NAMES", request)
    except TRANSPORT_ERRORS as error:
        raise unavailable("stream lookup", error) from None
    names = answer.get("streams") or []
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise RouterUnavailable("NATS JetStream answered a stream lookup with no names")
    return sorted(names)


async def settle(js: JetStreamContext, plan: StreamPlan, names: list[str]) -> str:
    """The one stream of `names` every daemon uses (the least name), after deleting the
    others, which only a creation race leaves behind."""
    winner, *losers = names
    if plan.instance_of(winner) is None:
        raise RouterUnavailable(
            f"the stream {winner!r} bound to {plan.envelopes_subject} is not a Harness "
            f"Router stream ({plan.name_prefix}_<RouterInstanceId>)"
        )
    for loser in losers:
        logger.warning("router stream %s lost a creation race to %s; deleting it", loser, winner)
        await delete(js, loser)
    return winner


async def bind(js: JetStreamContext, plan: StreamPlan) -> BoundStream:
    """The stream bound to `plan.envelopes_subject`, adopted, or a new one created.

    A concurrent creator on the same subject makes one creation fail with overlapping
    subjects, or both succeed (`bound_names`); either way every daemon ends on one
    stream. A creation that times out may have happened, so the next round looks before
    it creates again."""
    failure: RouterUnavailable | None = None
    created: str | None = None
    for _ in range(BIND_ATTEMPTS):
        try:
            names = await bound_names(js, plan.envelopes_subject)
            name = await settle(js, plan, names) if names else None
        except RouterUnavailable as error:
            if created is None:
                failure = error
                continue
            raise
        if name is not None:
            instance_id = plan.instance_of(name)
            assert instance_id is not None, "settle refuses other names"
            try:
                info = await js.stream_info(name)
            except nats.js.errors.NotFoundError:
                continue  # deleted since the lookup
            except TRANSPORT_ERRORS as error:
                failure = unavailable("stream info", error)
                continue
            if not info.config.allow_direct:
                raise RouterUnavailable(
                    f"the stream {name} does not allow direct gets, which its readers use"
                )
            if name == created:
                logger.info(
                    "router stream created stream=%s instance=%s replicas=%d",
                    name,
                    instance_id,
                    plan.replicas,
                )
            return _bound(info, plan, instance_id, created=name == created)
        instance_id = RandomId.ROUTER_INSTANCE.mint()
        try:
            await js.add_stream(plan.config(instance_id))
        except nats.js.errors.BadRequestError as error:
            if error.err_code == ERR_SUBJECTS_OVERLAP:
                continue  # another daemon created one first: adopt it
            raise unavailable("stream creation", error) from None
        except nats.js.errors.ServiceUnavailableError as error:
            failure = unavailable("stream creation", error)
            continue  # JetStream not ready yet
        except nats.js.errors.APIError as error:
            # Refused for good (storage, replicas beyond the cluster, permissions).
            raise unavailable("stream creation", error) from None
        except TRANSPORT_ERRORS as error:
            failure = unavailable("stream creation", error)
            continue
        # Look again before using it: a concurrent creation may have bound the subject too.
        created = plan.stream_name(instance_id)
    raise failure or RouterUnavailable(
        f"the stream bound to {plan.envelopes_subject} kept changing while binding to it"
    )


def _bound(
    info: api.StreamInfo, plan: StreamPlan, instance_id: str, *, created: bool
) -> BoundStream:
    config, state = info.config, info.state
    return BoundStream(
        name=config.name or plan.stream_name(instance_id),
        instance_id=instance_id,
        first_seq=state.first_seq,
        last_seq=state.last_seq,
        messages=state.messages,
        max_msgs=config.max_msgs if config.max_msgs is not None else -1,
        max_bytes=config.max_bytes if config.max_bytes is not None else -1,
        max_age=config.max_age or 0.0,
        replicas=config.num_replicas or 1,
        created_at=info.created,
        created=created,
    )


async def delete(js: JetStreamContext, name: str) -> None:
    """Delete the stream by name (never by subject: a racing daemon's new stream has
    another name); an already absent stream is fine."""
    try:
        await js.delete_stream(name)
    except nats.js.errors.NotFoundError:
        return
    except TRANSPORT_ERRORS as error:
        raise unavailable("stream deletion", error) from None
    logger.warning("router stream deleted stream=%s", name)


async def fetch(js: JetStreamContext, name: str, seq: int) -> bytes | None:
    """The payload stored at `seq` (from the stream leader), or None when it is gone."""
    try:
        message = await js.get_msg(name, seq)
    except nats.js.errors.NotFoundError:
        return None
    except TRANSPORT_ERRORS as error:
        raise unavailable("message get", error) from None
    return message.data or b""


class NoResponders(Exception):
    """A direct get found nobody serving the stream: gone, or between leaders."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadBatch:
    messages: tuple[Msg, ...]
    more: bool
    """True when the stream holds more after the batch."""


async def read_batch(
    nc: Client, name: str, start: int, *, max_entries: int, max_bytes: int, message_wait: float
) -> ReadBatch:
    """The stored messages from sequence `start` on (a batched direct get, answered by
        any current replica), at most `max_entries` and about `max_bytes`, each within
    `message_wait` seconds of the one before.

        Raises `NoResponders` when nobody serves the stream, `RouterUnavailable` otherwise."""
    request = json.dumps({"seq": start, "batch": max_entries, "max_bytes": max_bytes})
    try:
        inbox = nc.new_inbox()
        subscription = await nc.subscribe(inbox)
    except TRANSPORT_ERRORS as error:
        raise unavailable("direct get", error) from None
    try:
        await nc.publish(f"$JS.API.DIRECT.GET.{name}", request.encode(), reply=inbox)
        messages: list[Msg] = []
        while True:
            message = await subscription.next_msg(timeout=message_wait)
            headers = message.headers or {}
            status = headers.get(_STATUS)
            if status is None:
                messages.append(message)
                if len(messages) > max_entries:
                    raise RouterUnavailable("a direct get answered more than it was asked")
                continue
            if status == _STATUS_END:
                pending = _integer(headers.get("Nats-Num-Pending"))
                return ReadBatch(messages=tuple(messages), more=bool(pending))
            if status == _STATUS_NOT_FOUND:
                return ReadBatch(messages=tuple(messages), more=False)
            if status == _STATUS_NO_RESPONDERS:
                raise NoResponders
            raise RouterUnavailable(
                f"a direct get answered status {status} {headers.get('Description', '')!r}"
            )
    except TRANSPORT_ERRORS as error:
        raise unavailable("direct get", error) from None
    finally:
        # A failure means the connection is gone, and the subscription with it.
        with contextlib.suppress(*TRANSPORT_ERRORS):
            await subscription.unsubscribe()


def stored_entry(message: Msg) -> StoredEntry | None:
    """The window entry of a stored message, or None when it carries no sequence.

    A message without valid `Harness-Recipients` (someone else published on the subject)
    keeps its place in the order but is addressed to nobody and keeps no bytes."""
    headers: Mapping[str, str] = message.headers or {}
    order = _integer(headers.get("Nats-Sequence"))
    if order is None or order < 1:
        return None
    recipients = _recipients(headers.get(HEADER_RECIPIENTS))
    data = message.data if recipients else b""
    header_size = sum(len(key) + len(value) + 4 for key, value in headers.items()) + 12
    return StoredEntry(
        order=order,
        signed_envelope=data,
        recipients=recipients,
        stored_at=_stored_at(headers.get("Nats-Time-Stamp")),
        stored_size=len(message.subject) + header_size + len(message.data) + STORED_OVERHEAD,
    )


def hinted_sequence(message: Msg, stream_name: str) -> int | None:
    """The sequence a republished headers-only copy names, when it is of `stream_name`."""
    headers = message.headers or {}
    if headers.get("Nats-Stream") != stream_name:
        return None
    return _integer(headers.get("Nats-Sequence"))


def _recipients(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    recipients = tuple(text.split(","))
    if not all(RandomId.AGENT.is_valid(recipient) for recipient in recipients):
        return ()
    return recipients


def _stored_at(text: str | None) -> float:
    if text:
        try:
            return api.Base._parse_utc_iso(text).timestamp()
        except ValueError:
            pass
    # Unknown: "now" never makes an entry look older than the stream's MaxAge.
    return time.time()


def _integer(text: str | None) -> int | None:
    if text is None or not text.isdigit():
        return None
    return int(text)

"""Bounded fuzzing of every RPC a gateway serves: no defect status, no ERROR line.

One real gateway (`gateway.testing.run_gateway`, exposing its embedded Router and Registry
behind an explicit peer token file) runs on its own event loop in a thread for the whole
module; hypothesis drives a synchronous gRPC client against it, so examples never share a
loop with the server. Every method of `HarnessEndpointService`, `ManagementService`,
`RouterService` and `RegistryService` (and `grpc.health.v1.Health` and reflection) is taken
from the generated descriptors, so a new RPC is fuzzed without editing this file. Each gets
bodies of three kinds: structure-aware messages of its request type (random strings with
unicode, NUL and huge values, random integers and enum numbers, random oneof branches,
nested to a small depth), random bytes, and messages whose string field is not UTF-8; each
with no credentials, a garbage token, or the service's valid credential. Streams are opened,
read a little under a short deadline and cancelled.

Asserted: no call ends INTERNAL or UNKNOWN (on the client and in the server's own
`grpc_server_handled_total`), no log record at ERROR or above from any logger, health stays
SERVING, and two agents registered afterwards still exchange a message. A few raw HTTP/2
requests (`tests/raw_h2.py`) cover what no gRPC client sends.

Bounded: `FUZZ_EXAMPLES` examples per unary method, `FUZZ_STREAM_EXAMPLES` per streaming
one, deadlines of a second or two; the file runs well within a minute.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, TypeVar

import grpc
import harness_client
import pytest
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from harness_client import MessageInput, TextPart
from harness_contract._gen.harness.v1 import endpoint_pb2, management_pb2, registry_pb2, router_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.rpc.peer import HARNESS_VERSION, VERSION_KEY
from gateway.settings import Settings
from gateway.testing import RunningGateway, run_gateway
from tests.integration.network.support import message_of
from tests.raw_h2 import raw_call

T = TypeVar("T")

FUZZ_EXAMPLES: Final = 50
"""Examples per unary method."""
FUZZ_STREAM_EXAMPLES: Final = 20
"""Examples per streaming method (each may hold its stream until its short deadline)."""
UNARY_TIMEOUT: Final = 2.0
"""Seconds a fuzzed unary call may take (a Send answers before it, less its 1 s margin)."""
STREAM_TIMEOUT: Final = 0.3
"""Seconds a fuzzed stream stays open: long enough to read a message, short for the budget."""
STREAM_READS: Final = 2
"""Messages read from a fuzzed stream before it is cancelled."""
MESSAGE_DEPTH: Final = 3
"""How deep structure-aware messages nest."""
SETUP_TIMEOUT: Final = 30.0
"""Seconds the gateway thread may take to start or stop, and a post-check to finish."""

FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.function_scoped_fixture,
    ],
)
"""This file's own hypothesis settings (the suite's profile is left as it is)."""

AGENT: Final = "fz-alice"
"""The agent whose token is the agent API's valid credential."""
OTHER_AGENT: Final = "fz-bob"
"""A second agent, so structure-aware sends can reach someone."""
PEER_TOKEN: Final = "hpeer_" + "fuzzing-peer-token-" * 3
"""The Router and Registry's peer token, passed in a file (`peer_token_file`)."""

SERVICE_MODULES = (endpoint_pb2, management_pb2, router_pb2, registry_pb2)
"""The harness.v1 services: every method of each is fuzzed."""

INTERESTING_TEXT: Final = (
    "",
    "\x00",
    "a\x00b",
    f"agent:{OTHER_AGENT}",
    f"agent:{AGENT}",
    f"group:{AGENT},{OTHER_AGENT},fz-carol",
    "agent:",
    "group:",
    "agent:" + "a" * 300,
    "group:" + ",".join(f"m{n}" for n in range(40)),
    OTHER_AGENT,
    '{"gather": {"deadline": 5}}',
    '{"all_gather": {"deadline": 1, "requestedSchema": {"type": "object"}}}',
    '{"action": "accept"}',
    "é" * 70,
    "\U0001f600" * 10,
    "x" * 33_000,
    "harness.v1.HarnessEndpointService",
    "liveness",
    "k" * 129,
)
"""Strings that reach deeper code paths than random text: addresses of real agents,
collective message texts, limits plus one."""

NOT_UTF8_PLACEHOLDER: Final = "\x01\x02"
"""A two-byte string replaced by the two bytes C3 28 (not UTF-8) after serialization."""
NOT_UTF8: Final = b"\xc3\x28"

DEFECT_CODES: Final = frozenset({grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})
"""Statuses no input may produce: a defect, or an exception nobody translated."""


# --- the gateway under test, in its own thread ------------------------------------------------


class ErrorRecords(logging.Handler):
    """Keeps every record at ERROR or above, from any logger and any thread."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def lines(self, since: int = 0) -> list[str]:
        """The records kept, from the `since`-th on (a test's own: `since=len(records)`)."""
        return [f"{record.name}: {record.getMessage()}" for record in self.records[since:]]


@dataclass
class Target:
    """The gateway under test, its loop, and the valid credential of each service."""

    running: RunningGateway
    loop: asyncio.AbstractEventLoop
    credentials: dict[str, tuple[tuple[str, str], ...]]
    errors: ErrorRecords
    stop: Callable[[], None]
    """Ends the gateway thread (call it on the gateway's loop)."""

    @property
    def address(self) -> str:
        return self.running.address

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the gateway's loop and wait for its result."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout=SETUP_TIMEOUT)

    def handled(self, code: str) -> float:
        """`grpc_server_handled_total` of `code`, summed over every method."""
        total = 0.0
        for family in self.running.gateway.metrics.registry.collect():
            if family.name != "grpc_server_handled":
                continue
            for sample in family.samples:
                if sample.name.endswith("_total") and sample.labels.get("grpc_code") == code:
                    total += sample.value
        return total


def _write_peer_token(directory: Path) -> Path:
    path = directory / "peer-token"
    descriptor = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(PEER_TOKEN + "\n")
    return path


@contextlib.contextmanager
def _gateway_thread(settings: Settings, errors: ErrorRecords) -> Iterator[Target]:
    ready: concurrent.futures.Future[Target] = concurrent.futures.Future()
    done: concurrent.futures.Future[None] = concurrent.futures.Future()

    async def serve() -> None:
        stop = asyncio.Event()
        async with run_gateway(settings) as running:
            agent_token = await running.register(AGENT)
            await running.register(OTHER_AGENT)
            peer = ((VERSION_KEY, HARNESS_VERSION), ("authorization", f"Bearer {PEER_TOKEN}"))
            credentials = {
                "harness.v1.HarnessEndpointService": (("authorization", f"Bearer {agent_token}"),),
                "harness.v1.ManagementService": (
                    ("authorization", f"Bearer {running.admin_token}"),
                ),
                "harness.v1.RouterService": peer,
                "harness.v1.RegistryService": peer,
            }
            ready.set_result(
                Target(
                    running=running,
                    loop=asyncio.get_running_loop(),
                    credentials=credentials,
                    errors=errors,
                    stop=stop.set,
                )
            )
            await stop.wait()

    def main() -> None:
        try:
            asyncio.run(serve())
        except BaseException as error:
            if not ready.done():
                ready.set_exception(error)
            done.set_exception(error)
        else:
            done.set_result(None)

    thread = threading.Thread(target=main, name="fuzzed-gateway", daemon=True)
    thread.start()
    target = ready.result(timeout=SETUP_TIMEOUT)
    try:
        yield target
    finally:
        target.loop.call_soon_threadsafe(target.stop)
        done.result(timeout=SETUP_TIMEOUT)
        thread.join(timeout=SETUP_TIMEOUT)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    directory = tmp_path_factory.mktemp("fuzz")
    errors = ErrorRecords()
    root = logging.getLogger()
    root.addHandler(errors)
    try:
        settings = replace(
            Settings(),
            expose_network=True,
            peer_token_file=_write_peer_token(directory),
            reflection=True,
        )
        with _gateway_thread(settings, errors) as running:
            yield running
    finally:
        root.removeHandler(errors)
    assert errors.lines() == [], "ERROR records while the gateway ran or stopped"


@pytest.fixture(scope="module")
def channel(target: Target) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(
        target.address, options=[("grpc.max_send_message_length", 8 << 20)]
    ) as opened:
        yield opened


# --- the methods, from the descriptors -----------------------------------------------------------


@dataclass(frozen=True)
class Rpc:
    """One served method: its service, descriptor and request class."""

    service: str
    method: MethodDescriptor
    request: type[Message]

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.method.name}"

    @property
    def streaming(self) -> bool:
        return bool(self.method.client_streaming or self.method.server_streaming)


def _rpcs() -> list[Rpc]:
    pool = descriptor_pool.Default()
    modules = (*SERVICE_MODULES, health_pb2, reflection_pb2)
    return [
        Rpc(
            service=service.full_name,
            method=method,
            request=GetMessageClass(pool.FindMessageTypeByName(method.input_type.full_name)),
        )
        for module in modules
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    ]


RPCS: Final = _rpcs()
HARNESS_SERVICES: Final = frozenset(
    service.full_name
    for module in SERVICE_MODULES
    for service in module.DESCRIPTOR.services_by_name.values()
)


def test_every_harness_service_method_is_fuzzed():
    fuzzed = {(rpc.service, rpc.method.name) for rpc in RPCS}
    for module in SERVICE_MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                assert (service.full_name, method.name) in fuzzed
    expected = {
        "harness.v1.HarnessEndpointService",
        "harness.v1.ManagementService",
        "harness.v1.RouterService",
        "harness.v1.RegistryService",
    }
    assert expected == HARNESS_SERVICES


# --- bodies ------------------------------------------------------------------------------------

_F = FieldDescriptor
_INTEGERS: Final = {
    _F.TYPE_INT32: (-(2**31), 2**31 - 1),
    _F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    _F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    _F.TYPE_INT64: (-(2**63), 2**63 - 1),
    _F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    _F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    _F.TYPE_UINT32: (0, 2**32 - 1),
    _F.TYPE_FIXED32: (0, 2**32 - 1),
    _F.TYPE_UINT64: (0, 2**64 - 1),
    _F.TYPE_FIXED64: (0, 2**64 - 1),
}

TEXT = st.one_of(
    st.sampled_from(INTERESTING_TEXT),
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
)


def _integers(low: int, high: int) -> st.SearchStrategy[int]:
    edges = sorted(edge for edge in {low, high, 0, 1, -1, 2**31 - 1, 2**53} if low <= edge <= high)
    # Small values reach past validation more often than uniformly random 64-bit ones.
    small = st.integers(max(low, -3), min(high, 100))
    return st.one_of(st.sampled_from(edges), small, st.integers(low, high))


def _scalar(field: Any) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in _INTEGERS:
        return _integers(*_INTEGERS[kind])
    if kind == _F.TYPE_DOUBLE:
        return st.floats()
    if kind == _F.TYPE_FLOAT:
        return st.floats(width=32)
    if kind == _F.TYPE_BOOL:
        return st.booleans()
    if kind == _F.TYPE_STRING:
        return TEXT
    if kind == _F.TYPE_BYTES:
        return st.one_of(st.binary(max_size=64), st.just(b"\x00" * 32), st.binary(min_size=32))
    if kind == _F.TYPE_ENUM:
        known = st.sampled_from([value.number for value in field.enum_type.values])
        # Mostly a known value (an unknown one is refused early), sometimes any int32.
        return st.one_of(known, known, known, _integers(-(2**31), 2**31 - 1))
    raise AssertionError(f"no strategy for field type {kind}")


def _groups(descriptor: Any) -> list[list[Any]]:
    """Fields by presence group: each real oneof is one group (at most one is set), every
    other field (a proto3 `optional` included) its own."""
    groups: list[list[Any]] = []
    seen: set[str] = set()
    for field in descriptor.fields:
        oneof = field.containing_oneof
        synthetic = oneof is not None and [f.name for f in oneof.fields] == [field.name]
        if oneof is None or synthetic:
            groups.append([field])
        elif oneof.name not in seen:
            seen.add(oneof.name)
            groups.append(list(oneof.fields))
    return groups


def _is_map(field: Any) -> bool:
    message = field.message_type
    return message is not None and bool(message.GetOptions().map_entry)


@st.composite
def messages(draw: st.DrawFn, cls: type[Message], depth: int = MESSAGE_DEPTH) -> Message:
    """A valid-but-weird message of `cls`: random fields set, one branch per oneof."""
    message = cls()
    for group in _groups(cls.DESCRIPTOR):
        choice = draw(st.sampled_from([None, *group]))
        if choice is not None:
            _set(draw, message, choice, depth)
    return message


def _sub_class(field: Any) -> type[Message]:
    return GetMessageClass(field.message_type)


def _set(draw: st.DrawFn, message: Any, field: Any, depth: int) -> None:
    name = field.name
    if _is_map(field):
        key_field = field.message_type.fields_by_name["key"]
        value_field = field.message_type.fields_by_name["value"]
        entries = draw(st.dictionaries(_scalar(key_field), st.just(None), max_size=3))
        target = getattr(message, name)
        for key in entries:
            if value_field.type == _F.TYPE_MESSAGE:
                if depth > 0:
                    target[key].CopyFrom(draw(messages(_sub_class(value_field), depth - 1)))
            else:
                target[key] = draw(_scalar(value_field))
        return
    if field.type == _F.TYPE_MESSAGE:
        if depth <= 0:
            return
        if field.is_repeated:
            for _ in range(draw(st.integers(0, 3))):
                getattr(message, name).add().CopyFrom(draw(messages(_sub_class(field), depth - 1)))
        else:
            child = getattr(message, name)
            child.SetInParent()
            child.MergeFrom(draw(messages(_sub_class(field), depth - 1)))
        return
    if field.is_repeated:
        getattr(message, name).extend(draw(st.lists(_scalar(field), max_size=3)))
    else:
        setattr(message, name, draw(_scalar(field)))


def _string_path(descriptor: Any, depth: int = MESSAGE_DEPTH) -> list[Any]:
    """Fields leading from `descriptor` to a singular string field, or [] when none is near."""
    for field in descriptor.fields:
        if field.type == _F.TYPE_STRING and not field.is_repeated:
            return [field]
    if depth > 0:
        for field in descriptor.fields:
            if field.type == _F.TYPE_MESSAGE and not field.is_repeated and not _is_map(field):
                rest = _string_path(field.message_type, depth - 1)
                if rest:
                    return [field, *rest]
    return []


def _not_utf8(cls: type[Message], base: Message) -> bytes | None:
    """`base` with a string field holding bytes that are not UTF-8, or None when `cls` has
    no string field near enough."""
    path = _string_path(cls.DESCRIPTOR)
    if not path:
        return None
    marked = cls()
    node: Any = marked
    for field in path[:-1]:
        node = getattr(node, field.name)
    setattr(node, path[-1].name, NOT_UTF8_PLACEHOLDER)
    merged = cls()
    merged.CopyFrom(base)
    merged.MergeFrom(marked)
    return merged.SerializeToString().replace(NOT_UTF8_PLACEHOLDER.encode(), NOT_UTF8)


@st.composite
def bodies(draw: st.DrawFn, rpc: Rpc) -> bytes:
    """Request bytes for `rpc`: structured, random, or a structured one made not UTF-8."""
    kind = draw(st.sampled_from(("structured", "structured", "random", "not-utf8")))
    if kind == "random":
        return draw(st.binary(max_size=512))
    message = draw(messages(rpc.request))
    if kind == "not-utf8":
        corrupted = _not_utf8(rpc.request, message)
        if corrupted is not None:
            return corrupted
    return message.SerializeToString()


GARBAGE_AUTHORIZATION = st.one_of(
    st.sampled_from(
        (
            "Bearer hat_" + "A" * 43,
            "Bearer hpeer_" + "w" * 43,
            "Bearer ",
            "Bearer",
            "Basic Zm9vOmJhcg==",
            "bearer hat_" + "-" * 43,
            "Bearer " + "x" * 4000,
        )
    ),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80),
)
"""Authorization values no one was issued (printable ASCII: what a gRPC client can send)."""


@st.composite
def metadata(draw: st.DrawFn, rpc: Rpc, target: Target) -> tuple[tuple[str, str], ...]:
    """No credentials, a garbage token, or the service's valid credential."""
    valid = target.credentials.get(rpc.service, ())
    kind = draw(st.sampled_from(("none", "garbage", "valid")))
    if kind == "valid":
        return valid
    version = ((VERSION_KEY, HARNESS_VERSION),) if rpc.service in _PEER_SERVICES else ()
    if kind == "garbage":
        return (*version, ("authorization", draw(GARBAGE_AUTHORIZATION)))
    return version


_PEER_SERVICES: Final = frozenset({"harness.v1.RouterService", "harness.v1.RegistryService"})


# --- calls -------------------------------------------------------------------------------------


def _identity(data: bytes) -> bytes:
    return data


def call(
    channel: grpc.Channel, rpc: Rpc, body: bytes, metadata: tuple[tuple[str, str], ...]
) -> grpc.StatusCode:
    """The status one call of `rpc` ended with; a stream is read a little, then cancelled."""
    path = rpc.path
    raw: dict[str, Any] = {"request_serializer": _identity, "response_deserializer": _identity}
    method = rpc.method
    try:
        if not method.client_streaming and not method.server_streaming:
            channel.unary_unary(path, **raw)(body, metadata=metadata, timeout=UNARY_TIMEOUT)
            return grpc.StatusCode.OK
        if method.client_streaming and not method.server_streaming:
            channel.stream_unary(path, **raw)(
                iter((body, body)), metadata=metadata, timeout=UNARY_TIMEOUT
            )
            return grpc.StatusCode.OK
        stream: Any
        if method.client_streaming:
            stream = channel.stream_stream(path, **raw)(
                iter((body, body)), metadata=metadata, timeout=STREAM_TIMEOUT
            )
        else:
            stream = channel.unary_stream(path, **raw)(
                body, metadata=metadata, timeout=STREAM_TIMEOUT
            )
        try:
            for _ in itertools.islice(stream, STREAM_READS):
                pass
        finally:
            stream.cancel()
        return grpc.StatusCode.OK
    except grpc.RpcError as error:
        code: grpc.StatusCode = error.code()
        return code


def _fuzz_one(channel: grpc.Channel, rpc: Rpc, target: Target, data: st.DataObject) -> None:
    body = data.draw(bodies(rpc), label="body")
    headers = data.draw(metadata(rpc, target), label="metadata")
    seen = len(target.errors.records)
    code = call(channel, rpc, body, headers)
    assert code not in DEFECT_CODES, (rpc.path, code)
    # Only this example's records: one logged late is still caught by the module's check.
    assert target.errors.lines(since=seen) == [], rpc.path


UNARY_RPCS: Final = [rpc for rpc in RPCS if not rpc.streaming]
STREAM_RPCS: Final = [rpc for rpc in RPCS if rpc.streaming]


@pytest.mark.parametrize("rpc", UNARY_RPCS, ids=[rpc.path for rpc in UNARY_RPCS])
@FUZZ
@given(data=st.data())
def test_a_fuzzed_unary_call_never_ends_internal_or_unknown_nor_logs_an_error(
    channel: grpc.Channel, target: Target, rpc: Rpc, data: st.DataObject
):
    _fuzz_one(channel, rpc, target, data)


@pytest.mark.parametrize("rpc", STREAM_RPCS, ids=[rpc.path for rpc in STREAM_RPCS])
@settings(FUZZ, max_examples=FUZZ_STREAM_EXAMPLES)
@given(data=st.data())
def test_a_fuzzed_stream_never_ends_internal_or_unknown_nor_logs_an_error(
    channel: grpc.Channel, target: Target, rpc: Rpc, data: st.DataObject
):
    _fuzz_one(channel, rpc, target, data)


# --- raw HTTP/2 ----------------------------------------------------------------------------------

SEND_PATH: Final = "/harness.v1.HarnessEndpointService/Send"
MESSAGES_PATH: Final = "/harness.v1.HarnessEndpointService/Messages"
RAW_TIMEOUT: Final = 1.0
"""Seconds a raw HTTP/2 request may wait for an answer."""


def _raw(target: Target, path: str, **options: Any) -> dict[bytes, bytes]:
    try:
        return raw_call(target.address, path, timeout=RAW_TIMEOUT, **options)
    except TimeoutError:
        # grpc-core keeps a stream whose last message was cut short open with no status
        # until the connection closes; no answer within the bound is what that looks like.
        return {b"timeout": b"1"}


RAW_CASES: Final[dict[str, dict[str, Any]]] = {
    "truncated-frame": {"body": b"\x00\x00\x00\x00\x10abc", "framed": False},
    "frame-claiming-2-gib": {"body": b"\x00\x80\x00\x00\x00", "framed": False},
    "compressed-bit-without-encoding": {"body": b"\x01\x00\x00\x00\x01a", "framed": False},
    "not-protobuf": {"body": b"\xff\xff\xff\xff"},
    "no-message-at-all": {"body": b"", "framed": False},
    "grpc-timeout-not-a-duration": {"headers": [(b"grpc-timeout", b"soon")]},
    "unsupported-grpc-encoding": {"headers": [(b"grpc-encoding", b"zstd-9")]},
}
"""Requests no gRPC client sends, by what is wrong with them."""


@pytest.mark.parametrize("options", list(RAW_CASES.values()), ids=list(RAW_CASES))
def test_a_raw_http2_request_of_any_shape_logs_no_error(target: Target, options: dict[str, Any]):
    seen = len(target.errors.records)
    for path in (SEND_PATH, MESSAGES_PATH, "/harness.v1.RouterService/Poll", "/no.Such/Method"):
        answer = _raw(target, path, **options)
        assert answer.get(b"grpc-status") != b"2", (path, answer)  # never UNKNOWN
    assert target.errors.lines(since=seen) == []


def test_a_header_value_that_is_not_utf8_is_refused_without_an_error_record(target: Target):
    seen = len(target.errors.records)
    token = target.credentials["harness.v1.HarnessEndpointService"][0][1]
    for headers in (
        [(b"authorization", token.encode() + b"\xff\xfe")],
        [(b"x-harness-junk", b"\xff\xfe\xfd")],
    ):
        answer = _raw(target, SEND_PATH, headers=headers, body=b"")
        assert answer.get(b"grpc-status") == b"16", answer  # UNAUTHENTICATED
    assert target.errors.lines(since=seen) == []


# --- afterwards ----------------------------------------------------------------------------------


def test_after_fuzzing_no_call_was_handled_internal_or_unknown_on_the_server(target: Target):
    assert target.handled("INTERNAL") == 0
    assert target.handled("UNKNOWN") == 0


def test_after_fuzzing_health_is_serving_and_two_new_agents_exchange_a_message(
    channel: grpc.Channel, target: Target
):
    seen = len(target.errors.records)
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", "harness.v1.HarnessEndpointService", "harness.v1.RouterService"):
        response = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
        assert response.status == health_pb2.HealthCheckResponse.SERVING, name

    async def exchange() -> object:
        sender = await target.running.register("after-fuzz-sender")
        receiver = await target.running.register("after-fuzz-receiver")
        async with (
            await harness_client.connect(target.address, token=sender) as alice,
            await harness_client.connect(target.address, token=receiver) as bob,
        ):
            await alice.send(MessageInput(to="agent:after-fuzz-receiver", text="still here"))
            messages = bob.messages()
            try:
                async with asyncio.timeout(10):
                    delivery = await anext(messages)
            finally:
                await messages.aclose()
            await delivery.acknowledge()
            return message_of(delivery).content

    assert target.run(exchange()) == (TextPart(text="still here"),)
    assert target.errors.lines(since=seen) == []

"""Every metric the gateway exports, defined once (operations.md §2).

`Metrics(version, mode)` builds a dedicated `CollectorRegistry` (never the global default, so
tests can build several) holding:

- the `harness_*` family of operations.md §2.3, each label set built from a closed `StrEnum`:
  the components' own vocabularies (`PostOp`, `DeliveryItem`, ... of `harness_contract.kinds`,
  `StreamEndReason`, `RouterAttachment`, `AuthFailure`, `KeyResolution`, ...) or, for
  metric-only labels (`Listener`, `StoreBackend`, the firewall's), an enum of this module;
- the `grpc_server_*` family of §2.2, fed by `gateway/rpc/metrics_interceptor.py`, over the
  closed table of served methods (`GRPC_SERVICE_METHODS`) plus `unknown`/`unknown`;
- `harness_build_info{version, mode}` = 1 and the standard `process_*` and `python_*`
  collectors.

Every series of every closed label set exists from the start at 0, so panels have no gaps.
Components never touch prometheus objects: they call the typed helpers (`count_send`,
`set_router_attachments`, ...) with members of the very enum the label set was built from,
so a kind without a series cannot be passed (mypy refuses it) and counting never raises
after a send was answered; a stray value is still refused with `ValueError`. No label
carries an agent, conversation, post, operation or delivery id, a token, or an
operator-chosen string. The store reports through `StoreMetrics`, a `StoreObserver`.

A failed `Send` is counted from the error itself: `send_outcome()` maps every `HarnessError`
to a `SendOutcome` and never raises (a type the send vocabulary does not know is `other`,
with a warning), so counting can never turn an answered send into INTERNAL.

The module is long (some 1,000 lines) because it is the one definition of every exported
series: an operator reads one file to learn every name, label and bucket the gateway emits,
and the series budget is counted in one place.

Beyond operations.md §2.3's table:

| Metric | Type | Labels and their closed values | Meaning |
|---|---|---|---|
| `harness_sends_total` | counter | `outcome` also `invalid-idempotency-key` and `other` | An idempotency key that is not 1 to 128 UTF-8 bytes without NUL; `other` only for a defect. |
| `harness_rejected_requests_total` | counter | `reason`: malformed-request | Calls refused before any handler ran (INVALID_ARGUMENT `MALFORMED_REQUEST`): a body that does not decode as the method's request message, before authentication. |
"""

from __future__ import annotations

import enum
import itertools
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, TypeVar

from harness_contract.errors import (
    CollectiveError,
    FirewallRefusal,
    FirewallSendError,
    HarnessError,
    IdempotencyConflictError,
    InvalidIdempotencyKeyError,
    SendError,
    StatusCode,
)
from harness_contract.kinds import (
    CollectiveEnd,
    ConsumedKind,
    DeliveryItem,
    MemberOutcomeKind,
    PostKind,
    PostOp,
    SendOp,
)
from harness_contract.values import CollectiveOp
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from gateway.cluster.membership import LeaseLoss
from gateway.endpoint.api import AuthFailure
from gateway.endpoint.idempotency import KeyResolution
from gateway.endpoint.inbox import AckResult, StreamEndReason, StreamOpen
from gateway.engine.network import RouterAttachment, RouterEvent
from gateway.firewall.model import Direction, MiddlewareKind, Verdict
from gateway.settings import Mode

logger = logging.getLogger(__name__)

# --- Buckets (operations.md §2.4) ---------------------------------------------------------

INF: Final = math.inf
"""The last bound of every bucket list."""

CERT_BUCKETS: Final[tuple[float, ...]] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    45.0,
    INF,
)
"""Seconds of `harness_certification_seconds`.

Sub-millisecond local rounds up to the 20 s collective wait and the 45 s Router attach bound."""

GRPC_BUCKETS: Final[tuple[float, ...]] = (*CERT_BUCKETS[:-1], 60.0, INF)
"""Seconds of `grpc_server_handling_seconds`: `CERT_BUCKETS` plus 60, since a `Send` may wait
up to 60 s."""

STORE_BUCKETS: Final[tuple[float, ...]] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    INF,
)
"""Seconds of a commit and of a writer's wait: from a cached sync to a slow disk."""

BATCH_BUCKETS: Final[tuple[float, ...]] = (
    1,
    2,
    4,
    8,
    16,
    32,
    64,
    128,
    256,
    512,
    1024,
    INF,
)
"""Writes per group commit: up to the 512-write batch cap and past it."""

FIREWALL_BUCKETS: Final[tuple[float, ...]] = (
    0.0001,
    0.0005,
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.5,
    1.0,
    5.0,
    INF,
)
"""Seconds of one middleware check: rule checks are fast; a model-backed middleware is not."""

LOOP_LAG_BUCKETS: Final[tuple[float, ...]] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    INF,
)
"""Seconds an event-loop wake-up came late (`harness_cluster_loop_lag_seconds`): from a busy
loop's millisecond to the seconds that put a replica's 6 s lease at risk (cluster.md §3.1
keeps the TTL at least 4× the worst lag)."""

SERIES_BUDGET: Final = 3000
"""Most series one process may export (operations.md §2.1); a unit test renders and counts."""


# --- Closed label values --------------------------------------------------------------------


class SendOutcome(enum.StrEnum):
    """`outcome` of `harness_sends_total`: `ok` or one closed failure reason."""

    OK = "ok"
    """The send succeeded (a replayed kept outcome included)."""
    INVALID_ADDRESS = "invalid-address"
    """SendError invalid-address."""
    UNKNOWN_AGENT = "unknown-agent"
    """SendError unknown-agent."""
    MEMBERSHIP_INVALID = "membership-invalid"
    """SendError membership-invalid."""
    CONTENT_INVALID = "content-invalid"
    """SendError content-invalid."""
    NOT_REGISTERED = "not-registered"
    """SendError not-registered."""
    VERSION_MISMATCH = "version-mismatch"
    """SendError version-mismatch."""
    CERTIFICATION_UNAVAILABLE = "certification-unavailable"
    """SendError certification-unavailable (alerts: HarnessSendFailuresHigh)."""
    PERSISTENCE_FAILED = "persistence-failed"
    """SendError persistence-failed (alerts: HarnessSendFailuresHigh)."""
    NETWORK_UNAVAILABLE = "network-unavailable"
    """SendError network-unavailable (alerts: HarnessSendFailuresHigh)."""
    IDEMPOTENCY_CONFLICT = "idempotency-conflict"
    """The key already binds a different input."""
    DELIVERY_PENDING = "delivery-pending"
    """SendError delivery-pending (alerts: HarnessSendFailuresHigh)."""
    OUTCOME_UNKNOWN = "outcome-unknown"
    """SendError outcome-unknown (alerts: HarnessOutcomeUnknown)."""
    TOO_MANY_OPERATIONS = "too-many-operations"
    """SendError too-many-operations: an agent at its bound of open operations."""
    MEMBERS_UNREACHABLE = "members-unreachable"
    """CollectiveError members-unreachable."""
    SCHEMA_INVALID = "schema-invalid"
    """CollectiveError schema-invalid."""
    ANSWER_INVALID = "answer-invalid"
    """CollectiveError answer-invalid."""
    REQUEST_NONE = "request-none"
    """CollectiveError request-none."""
    REQUEST_AMBIGUOUS = "request-ambiguous"
    """CollectiveError request-ambiguous."""
    REQUEST_ANSWERED = "request-answered"
    """CollectiveError request-answered."""
    REQUEST_EXPIRED = "request-expired"
    """CollectiveError request-expired."""
    FIREWALL_REFUSED = "firewall-refused"
    """FirewallSendError: the local firewall refused the send."""
    INVALID_IDEMPOTENCY_KEY = "invalid-idempotency-key"
    """The idempotency key is not 1 to 128 UTF-8 bytes without NUL; nothing ran."""
    OTHER = "other"
    """A failure outside the send vocabulary: a defect, logged as a warning once per type."""


def send_outcome(error: HarnessError) -> SendOutcome:
    """The `outcome` a failed `Send` counts under: total over every `HarnessError`.

    Each closed send failure has its own value (a `SendError` by its reason, a
    `CollectiveError` by its kind, every `FirewallSendError` refusal as `firewall-refused`);
    anything else, which a `Send` never raises by design, is `other` with a warning, so a
    new failure type can never make the count itself fail after the send was answered."""
    match error:
        case SendError(send_reason=reason):
            return _closed_outcome(reason.value, error)
        case CollectiveError():
            return _closed_outcome(error.kind.value, error)
        case FirewallSendError():
            return SendOutcome.FIREWALL_REFUSED
        case IdempotencyConflictError():
            return SendOutcome.IDEMPOTENCY_CONFLICT
        case InvalidIdempotencyKeyError():
            return SendOutcome.INVALID_IDEMPOTENCY_KEY
        case _:
            return _other_outcome(error)


def _closed_outcome(value: str, error: HarnessError) -> SendOutcome:
    try:
        return SendOutcome(value)
    except ValueError:
        return _other_outcome(error)


_OTHER_OUTCOMES_WARNED: set[tuple[str, str]] = set()
"""(type, reason) pairs already warned about as `other`: a closed set, the code's own."""


def _other_outcome(error: HarnessError) -> SendOutcome:
    key = (type(error).__name__, error.reason)
    if key not in _OTHER_OUTCOMES_WARNED:
        _OTHER_OUTCOMES_WARNED.add(key)
        logger.warning("harness_sends_total: %s %s has no outcome label; counted as other", *key)
    return SendOutcome.OTHER


class RejectedRequestReason(enum.StrEnum):
    """`reason` of `harness_rejected_requests_total`: why a call was refused before any
    handler ran (gateway/rpc/decoding.py)."""

    MALFORMED_REQUEST = "malformed-request"
    """The body is not a valid message of the method's request type (not protobuf, or a
    string field that is not UTF-8): INVALID_ARGUMENT `MALFORMED_REQUEST`."""


class Listener(enum.StrEnum):
    """`listener` of the backlog gauges: whether the agent has an open stream."""

    ATTACHED = "attached"
    """The agent has an open `Messages` stream."""
    DETACHED = "detached"
    """The agent has none; its backlog never alerts (an agent may be offline)."""


class StoreBackend(enum.StrEnum):
    """`backend` of the `harness_store_*` family."""

    SQLITE = "sqlite"
    """SQLite under the data directory."""
    POSTGRESQL = "postgresql"
    """PostgreSQL (`--store postgresql://...`), shared by several daemons."""


class ForwardMethod(enum.StrEnum):
    """`method` of `harness_cluster_forwards_total`: the agent API's methods a cluster replica
    forwards to the agent's home (cluster.md §4.1), by their short gRPC names."""

    SEND = "Send"
    """`HarnessEndpointService/Send`."""
    MESSAGES = "Messages"
    """`HarnessEndpointService/Messages`: the stream's whole life."""
    ACKNOWLEDGE = "Acknowledge"
    """`HarnessEndpointService/Acknowledge`."""
    READ_SEND = "ReadSend"
    """`HarnessEndpointService/ReadSend`."""
    PARSE_MESSAGE_TEXT = "ParseMessageText"
    """`HarnessEndpointService/ParseMessageText`."""
    UNKNOWN = "unknown"
    """Any other method: a scanner or a newer forwarder cannot grow the label set."""


class ForwardOutcome(enum.StrEnum):
    """`outcome` of `harness_cluster_forwards_total` besides the gRPC status code names the
    home answered (`GRPC_CODES`, `ok` standing for OK)."""

    OK = "ok"
    """The home answered OK."""
    NOT_OWNER = "not-owner"
    """The home refused NOT_OWNER (nothing happened there); the forwarder tried again."""
    UNREACHABLE = "unreachable"
    """The home could not be reached within the connect timeout: UNAVAILABLE, nothing sent."""
    CUT = "cut"
    """The connection to the home was cut after the request left (a `Send` answers
    outcome-unknown)."""
    OTHER = "other"
    """An outcome outside this vocabulary: a defect of the forwarder, warned once."""


FORWARD_OUTCOMES: Final[tuple[str, ...]] = (
    *(outcome.value for outcome in ForwardOutcome),
    *(code.name for code in StatusCode if code is not StatusCode.OK),
)
"""Every `outcome` of `harness_cluster_forwards_total`, each series created at 0."""

FirewallKind = MiddlewareKind
"""`kind` of the firewall metrics: the middleware kinds (firewall.md §4)."""

FirewallDirection = Direction
"""`direction` of `harness_firewall_checks_total`: send or delivery."""

FirewallVerdict = Verdict
"""`verdict` of `harness_firewall_checks_total`: pass, guidance, refused, withheld, error."""


class FirewallReload(enum.StrEnum):
    """`result` of `harness_firewall_reloads_total`."""

    OK = "ok"
    """The new file is in force."""
    INVALID = "invalid"
    """The file is invalid; the old one stays."""


class GrpcType(enum.StrEnum):
    """`grpc_type` of the `grpc_server_*` family."""

    UNARY = "unary"
    """One request, one response."""
    CLIENT_STREAM = "client_stream"
    """A request stream, one response."""
    SERVER_STREAM = "server_stream"
    """One request, a response stream."""
    BIDI_STREAM = "bidi_stream"
    """Streams both ways."""


GRPC_CODES: Final[tuple[str, ...]] = tuple(code.name for code in StatusCode)
"""`grpc_code` values: the `grpc.StatusCode` names (our mirror `StatusCode` has them all)."""

GRPC_PRECREATED_CODES: Final[tuple[str, ...]] = (
    StatusCode.OK.name,
    StatusCode.CANCELLED.name,
    StatusCode.UNKNOWN.name,
    StatusCode.INVALID_ARGUMENT.name,
    StatusCode.DEADLINE_EXCEEDED.name,
    StatusCode.NOT_FOUND.name,
    StatusCode.ALREADY_EXISTS.name,
    StatusCode.PERMISSION_DENIED.name,
    StatusCode.FAILED_PRECONDITION.name,
    StatusCode.INTERNAL.name,
    StatusCode.UNAVAILABLE.name,
    StatusCode.UNAUTHENTICATED.name,
)
"""`grpc_code`s whose `grpc_server_handled_total` series exist at 0 from the start: OK, the
codes of operations.md §3's status table, CANCELLED (a call the client gave up) and INTERNAL
(a defect). The other codes are created when first seen; they are still a closed set."""

UNKNOWN_LABEL: Final = "unknown"
"""`grpc_service` and `grpc_method` of a method not in the served table, so a scanner cannot
grow the label set."""

ENDPOINT_SERVICE: Final = "harness.v1.HarnessEndpointService"
"""The agent API."""
MANAGEMENT_SERVICE: Final = "harness.v1.ManagementService"
"""The operator API."""
HEALTH_SERVICE: Final = "grpc.health.v1.Health"
"""Standard health checking."""
REFLECTION_SERVICE: Final = "grpc.reflection.v1alpha.ServerReflection"
"""Server reflection, as grpcio-reflection registers it."""
ROUTER_SERVICE: Final = "harness.v1.RouterService"
"""The Router, where served (`router` role or `--serve-router`)."""
REGISTRY_SERVICE: Final = "harness.v1.RegistryService"
"""The Registry, where served (`registry` role or `--serve-registry`)."""

GRPC_SERVICE_METHODS: Final[Mapping[str, tuple[tuple[str, GrpcType], ...]]] = {
    ENDPOINT_SERVICE: (
        ("Send", GrpcType.UNARY),
        ("Messages", GrpcType.SERVER_STREAM),
        ("Acknowledge", GrpcType.UNARY),
        ("ParseMessageText", GrpcType.UNARY),
        ("ReadSend", GrpcType.UNARY),
    ),
    MANAGEMENT_SERVICE: (
        ("RegisterAgent", GrpcType.UNARY),
        ("GetAgentStatus", GrpcType.UNARY),
        ("ListAgents", GrpcType.UNARY),
        ("SearchConversations", GrpcType.UNARY),
        ("ReadConversation", GrpcType.UNARY),
        ("RotateAgentToken", GrpcType.UNARY),
        ("RevokeAgentToken", GrpcType.UNARY),
        ("GetGatewayStatus", GrpcType.UNARY),
    ),
    HEALTH_SERVICE: (
        ("Check", GrpcType.UNARY),
        ("List", GrpcType.UNARY),
        ("Watch", GrpcType.SERVER_STREAM),
    ),
    REFLECTION_SERVICE: (("ServerReflectionInfo", GrpcType.BIDI_STREAM),),
    ROUTER_SERVICE: (
        ("Send", GrpcType.UNARY),
        ("Poll", GrpcType.UNARY),
        ("Subscribe", GrpcType.SERVER_STREAM),
        ("GetInstance", GrpcType.UNARY),
    ),
    REGISTRY_SERVICE: (
        ("Register", GrpcType.UNARY),
        ("Lookup", GrpcType.UNARY),
        ("List", GrpcType.UNARY),
        ("GetRegistryKey", GrpcType.UNARY),
    ),
}
"""Every method a gateway process may serve, by service, with its shape (the protos of
`proto/harness/v1/`, grpcio-health-checking and grpcio-reflection; a test compares them)."""

DAEMON_GRPC_SERVICES: Final[tuple[str, ...]] = (
    ENDPOINT_SERVICE,
    MANAGEMENT_SERVICE,
    HEALTH_SERVICE,
    REFLECTION_SERVICE,
)
"""The services a `serve` daemon registers; add `ROUTER_SERVICE` or `REGISTRY_SERVICE` when it
serves them too. Their methods are labelled by name and their series pre-created."""


# --- Metrics ----------------------------------------------------------------------------------

_Child = TypeVar("_Child", Counter, Gauge, Histogram)

_Values = Iterable[str]


def _values(closed: type[enum.StrEnum]) -> tuple[str, ...]:
    return tuple(member.value for member in closed)


def _children(metric: _Child, *label_sets: _Values) -> dict[tuple[str, ...], _Child]:
    """Create (at 0) and keep the child of every combination of the closed label sets."""
    return {combo: metric.labels(*combo) for combo in itertools.product(*label_sets)}


def _pick(table: Mapping[tuple[str, ...], _Child], metric: str, *values: str) -> _Child:
    """The child for `values`, or ValueError when any value is outside its closed set."""
    try:
        return table[values]
    except (KeyError, TypeError):
        raise ValueError(
            f"{metric}: {values!r} is not a combination of its closed label values"
        ) from None


class _Families:
    """Defines the labelled metrics of one registry, each handed back as its children for
    every combination of its closed label sets, created at 0 (`_children`). A label is a
    keyword naming its closed `StrEnum`, so each label is named once, beside its values."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry: Final = registry

    def counter(
        self, name: str, documentation: str, /, **labels: type[enum.StrEnum]
    ) -> dict[tuple[str, ...], Counter]:
        metric = Counter(name, documentation, tuple(labels), registry=self.registry)
        return _children(metric, *map(_values, labels.values()))

    def gauge(
        self, name: str, documentation: str, /, **labels: type[enum.StrEnum]
    ) -> dict[tuple[str, ...], Gauge]:
        metric = Gauge(name, documentation, tuple(labels), registry=self.registry)
        return _children(metric, *map(_values, labels.values()))

    def histogram(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float],
        /,
        **labels: type[enum.StrEnum],
    ) -> dict[tuple[str, ...], Histogram]:
        metric = Histogram(
            name, documentation, tuple(labels), buckets=buckets, registry=self.registry
        )
        return _children(metric, *map(_values, labels.values()))


class GrpcMethodMetrics:
    """The `grpc_server_*` children of one (grpc_type, grpc_service, grpc_method) row, fetched
    once so the interceptor's per-call cost is a few increments."""

    def __init__(
        self, metrics: Metrics, grpc_type: GrpcType, service: str, method: str, *, known: bool
    ) -> None:
        labels = (grpc_type.value, service, method)
        self.grpc_type: Final = grpc_type
        """The row's `grpc_type`."""
        self.known: Final = known
        """False for the `unknown`/`unknown` rows."""
        self.started: Final = metrics._grpc_started.labels(*labels)
        """`grpc_server_started_total`."""
        self.received: Final = metrics._grpc_received.labels(*labels)
        """`grpc_server_msg_received_total`."""
        self.sent: Final = metrics._grpc_sent.labels(*labels)
        """`grpc_server_msg_sent_total`."""
        self.seconds: Final = metrics._grpc_seconds.labels(*labels)
        """`grpc_server_handling_seconds`."""
        self._handled_metric = metrics._grpc_handled
        self._labels = labels
        self._handled: dict[str, Counter] = {
            code: metrics._grpc_handled.labels(*labels, code) for code in GRPC_PRECREATED_CODES
        }

    def handled(self, code: str) -> Counter:
        """`grpc_server_handled_total` for `code`, a `grpc.StatusCode` name; ValueError for
        anything else."""
        child = self._handled.get(code)
        if child is None:
            if code not in GRPC_CODES:
                raise ValueError(f"grpc_server_handled_total: {code!r} is not a status code name")
            child = self._handled_metric.labels(*self._labels, code)
            self._handled[code] = child
        return child


class Metrics:
    """The registry and every metric of one process, with a typed helper per measurement.

    Helpers take label values as strings (the enums of this module, or the components' own
    `StrEnum`s with the same values) and raise `ValueError` for a value outside the closed set.
    Counts and gauges are never negative; gauge helpers set the current value.
    """

    def __init__(
        self,
        version: str,
        mode: Mode,
        *,
        grpc_services: Sequence[str] = DAEMON_GRPC_SERVICES,
    ) -> None:
        """Build the registry.

        Args:
            version: the package version (`harness_build_info{version}`).
            mode: what the process reports itself as (`Settings.mode`); another value
                is refused with `ValueError`.
            grpc_services: the services this process registers (keys of
                `GRPC_SERVICE_METHODS`); their methods are labelled by name, any other
                method as `unknown`/`unknown`.
        """
        if not version:
            raise ValueError("harness_build_info: the version must not be empty")
        unknown_services = [name for name in grpc_services if name not in GRPC_SERVICE_METHODS]
        if unknown_services:
            raise ValueError(f"grpc_server_*: no method table for {unknown_services!r}")
        registry = CollectorRegistry(auto_describe=True)
        self.registry: Final = registry
        """The dedicated registry, served by `MetricsServer` and rendered by `render()`."""
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)

        build_info = Gauge(
            "harness_build_info",
            "Always 1: the running version and mode.",
            ("version", "mode"),
            registry=registry,
        )
        build_info.labels(version, Mode(mode).value).set(1)

        self._define_grpc(registry, grpc_services)
        families = _Families(registry)
        self._define_sends(families)
        self._define_deliveries(families)
        self._define_streams(families)
        self._define_store(families)
        self._define_firewall(families)
        self._auth_failures = families.counter(
            "harness_auth_failures_total", "Refused tokens, by reason.", reason=AuthFailure
        )
        self._rejected_requests = families.counter(
            "harness_rejected_requests_total",
            "Calls refused before any handler ran, by reason (a body that does not decode).",
            reason=RejectedRequestReason,
        )
        self._define_cluster(families)

    # --- definitions ---

    def _define_grpc(self, registry: CollectorRegistry, services: Sequence[str]) -> None:
        labels = ("grpc_type", "grpc_service", "grpc_method")
        self._grpc_started = Counter(
            "grpc_server_started_total",
            "RPCs started on the server.",
            labels,
            registry=registry,
        )
        self._grpc_handled = Counter(
            "grpc_server_handled_total",
            "RPCs completed on the server, regardless of success or failure.",
            (*labels, "grpc_code"),
            registry=registry,
        )
        self._grpc_received = Counter(
            "grpc_server_msg_received_total",
            "Stream messages received on the server.",
            labels,
            registry=registry,
        )
        self._grpc_sent = Counter(
            "grpc_server_msg_sent_total",
            "Stream messages sent by the server.",
            labels,
            registry=registry,
        )
        self._grpc_seconds = Histogram(
            "grpc_server_handling_seconds",
            "Response latency of RPCs handled by the server (a stream's lifetime for streams).",
            labels,
            buckets=GRPC_BUCKETS,
            registry=registry,
        )
        self._grpc_rows: dict[tuple[str, str], GrpcMethodMetrics] = {}
        for service in dict.fromkeys(services):
            for method, grpc_type in GRPC_SERVICE_METHODS[service]:
                self._grpc_rows[(service, method)] = GrpcMethodMetrics(
                    self, grpc_type, service, method, known=True
                )
        self._grpc_unknown = {
            grpc_type: GrpcMethodMetrics(self, grpc_type, UNKNOWN_LABEL, UNKNOWN_LABEL, known=False)
            for grpc_type in GrpcType
        }

    def _define_sends(self, families: _Families) -> None:
        self._certification = families.histogram(
            "harness_certification_seconds",
            "From the durable bind of a locally authored post intent to its certificates and "
            "stored record.",
            CERT_BUCKETS,
            op=PostOp,
            kind=PostKind,
        )
        self._intents_pending = families.gauge(
            "harness_post_intents_pending", "Bound post intents not yet certified.", kind=PostKind
        )
        self._intents_resumed = families.counter(
            "harness_post_intents_resumed_total",
            "Unfinished post intents proposed again after a restart.",
            kind=PostKind,
        )
        self._sends = families.counter(
            "harness_sends_total",
            "Answers to Send, by operation and outcome.",
            op=SendOp,
            outcome=SendOutcome,
        )
        self._idempotency = families.counter(
            "harness_send_idempotency_total",
            "How each keyed Send was resolved.",
            result=KeyResolution,
        )
        self._member_outcomes = families.counter(
            "harness_collective_member_outcomes_total",
            "Member outcomes of collective results, counted by the requester's daemon.",
            op=CollectiveOp,
            outcome=MemberOutcomeKind,
        )
        self._collectives_open = families.gauge(
            "harness_collectives_open",
            "Collective operations open at requesters on this daemon.",
            op=CollectiveOp,
        )
        self._collective_results = families.counter(
            "harness_collective_results_total",
            "Collective operations ended, by how.",
            op=CollectiveOp,
            end=CollectiveEnd,
        )

    def _define_deliveries(self, families: _Families) -> None:
        self._published = families.counter(
            "harness_deliveries_published_total",
            "Items made durable in an inbox under a fresh token.",
            item=DeliveryItem,
        )
        self._replayed = families.counter(
            "harness_deliveries_replayed_total",
            "Tokens offered again (new stream, restart).",
            item=DeliveryItem,
        )
        self._acknowledged = families.counter(
            "harness_deliveries_acknowledged_total",
            "Items retired by Acknowledge.",
            item=DeliveryItem,
        )
        self._ack_results = families.counter(
            "harness_acknowledge_results_total",
            "Acknowledge results, one per token.",
            result=AckResult,
        )
        self._consumed = families.counter(
            "harness_records_consumed_total",
            "Records the endpoint consumes and acknowledges itself.",
            kind=ConsumedKind,
        )
        self._unacknowledged = families.gauge(
            "harness_deliveries_unacknowledged",
            "Unacknowledged items over hosted agents, by whether the agent has an open stream.",
            listener=Listener,
        )
        self._oldest_unacked = families.gauge(
            "harness_deliveries_oldest_unacked_age_seconds",
            "Age of the oldest unacknowledged item, 0 when none.",
            listener=Listener,
        )

    def _define_streams(self, families: _Families) -> None:
        registry = families.registry
        self._streams_active = Gauge(
            "harness_streams_active", "Open Messages streams.", registry=registry
        )
        self._streams_window_full = Gauge(
            "harness_streams_window_full",
            "Streams holding a full window, waiting for acknowledgements.",
            registry=registry,
        )
        self._stream_opens = families.counter(
            "harness_stream_opens_total", "Messages stream opens, by result.", result=StreamOpen
        )
        self._stream_ends = families.counter(
            "harness_stream_ends_total", "Messages stream ends, by reason.", reason=StreamEndReason
        )
        self._agents_hosted = Gauge(
            "harness_agents_hosted", "Endpoints loaded on this daemon.", registry=registry
        )
        self._conversations_set_aside = Gauge(
            "harness_conversations_set_aside",
            "Conversations this daemon stopped serving because a stored row failed a check "
            "or a local unit failed; the log names each one.",
            registry=registry,
        )
        self._router_attachments = families.gauge(
            "harness_router_attachments",
            "Hosted agents by the state of their Router feed.",
            state=RouterAttachment,
        )
        self._router_events = families.counter(
            "harness_router_events_total", "Router feed events.", event=RouterEvent
        )

    def _define_store(self, families: _Families) -> None:
        self._store_batch = families.histogram(
            "harness_store_commit_batch_size",
            "Writes per group commit.",
            BATCH_BUCKETS,
            backend=StoreBackend,
        )
        self._store_commit = families.histogram(
            "harness_store_commit_seconds",
            "One store transaction including its sync.",
            STORE_BUCKETS,
            backend=StoreBackend,
        )
        self._store_wait = families.histogram(
            "harness_store_write_wait_seconds",
            "Enqueue to commit done: what a writer waits.",
            STORE_BUCKETS,
            backend=StoreBackend,
        )
        self._store_depth = families.gauge(
            "harness_store_queue_depth", "Writes waiting for the next commit.", backend=StoreBackend
        )
        self._store_failures = families.counter(
            "harness_store_commit_failures_total",
            "Group commits that failed.",
            backend=StoreBackend,
        )

    def _define_firewall(self, families: _Families) -> None:
        self._firewall_checks = families.counter(
            "harness_firewall_checks_total",
            "Firewall checks, one per middleware per check.",
            kind=FirewallKind,
            direction=FirewallDirection,
            verdict=FirewallVerdict,
        )
        self._firewall_refusals = families.counter(
            "harness_firewall_refusals_total",
            "Firewall refusals, by middleware kind and refusal.",
            kind=FirewallKind,
            refusal=FirewallRefusal,
        )
        self._firewall_seconds = families.histogram(
            "harness_firewall_check_seconds",
            "Time of one middleware check.",
            FIREWALL_BUCKETS,
            kind=FirewallKind,
        )
        self._firewall_reloads = families.counter(
            "harness_firewall_reloads_total",
            "Firewall file reloads, by result.",
            result=FirewallReload,
        )

    def _define_cluster(self, families: _Families) -> None:
        # Defined in every mode, so a dashboard shared by clusters and single daemons has no
        # gaps; outside a cluster they stay at 0.
        registry = families.registry
        self._partitions_owned = Gauge(
            "harness_cluster_partitions_owned",
            "Partitions this cluster replica holds.",
            registry=registry,
        )
        self._partitions_unowned = Gauge(
            "harness_cluster_partitions_unowned",
            "Partitions without a live holder in this replica's last view.",
            registry=registry,
        )
        self._partition_unowned_seconds = Gauge(
            "harness_cluster_partition_unowned_seconds",
            "How long, as this replica's views show, some partition has been without a live "
            "holder; 0 when every partition has one.",
            registry=registry,
        )
        forwards = Counter(
            "harness_cluster_forwards_total",
            "Calls forwarded to the agent's home replica, by method and outcome.",
            ("method", "outcome"),
            registry=registry,
        )
        self._forwards = _children(forwards, _values(ForwardMethod), FORWARD_OUTCOMES)
        self._handoffs = Counter(
            "harness_cluster_handoffs_total",
            "Partitions this replica released to another (a hand-over).",
            registry=registry,
        )
        self._hints_dropped = Counter(
            "harness_cluster_hints_dropped_total",
            "Hints to other replicas dropped because a target's queue was full (their poll "
            "finds the rows).",
            registry=registry,
        )
        self._claims = Counter(
            "harness_cluster_claims_total",
            "Partitions this replica claimed.",
            registry=registry,
        )
        leases_lost = Counter(
            "harness_cluster_leases_lost_total",
            "Leases this replica lost, by reason (each ends the incarnation).",
            ("reason",),
            registry=registry,
        )
        self._leases_lost = {loss: leases_lost.labels(loss.value) for loss in LeaseLoss}
        self._loop_lag = Histogram(
            "harness_cluster_loop_lag_seconds",
            "How late the event loop woke from a short sleep.",
            buckets=LOOP_LAG_BUCKETS,
            registry=registry,
        )

    # --- exposition ---

    def render(self) -> str:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry).decode("utf-8")

    # --- gRPC (the interceptor) ---

    def grpc_method(self, grpc_type: str, service: str, method: str) -> GrpcMethodMetrics:
        """The row of a served method; `unknown`/`unknown` (of `grpc_type`) for any other."""
        row = self._grpc_rows.get((service, method))
        if row is not None:
            return row
        try:
            return self._grpc_unknown[GrpcType(grpc_type)]
        except ValueError:
            raise ValueError(f"grpc_server_*: {grpc_type!r} is not a grpc_type") from None

    # --- certification and sends ---

    def observe_certification(self, op: PostOp, kind: PostKind, seconds: float) -> None:
        """A locally authored post certified `seconds` after its intent was bound.

        `op` is a `PostOp`, `kind` a `PostKind`. Not for intents resumed after a restart."""
        _pick(self._certification, "harness_certification_seconds", op, kind).observe(seconds)

    def set_post_intents_pending(self, kind: PostKind, n: int) -> None:
        """`n` bound intents of `kind` (`PostKind`) are not yet certified."""
        _pick(self._intents_pending, "harness_post_intents_pending", kind).set(n)

    def count_intents_resumed(self, kind: PostKind, n: int = 1) -> None:
        """`n` unfinished intents of `kind` (`PostKind`) were proposed again after a restart."""
        _pick(self._intents_resumed, "harness_post_intents_resumed_total", kind).inc(n)

    def count_send(self, op: SendOp, outcome: SendOutcome | HarnessError) -> None:
        """One answer to a `Send` of `op` (`SendOp`); replays of a kept outcome included.

        `outcome` is the failure itself, counted under `send_outcome(outcome)` (total: it
        never raises), or a `SendOutcome` value such as `ok` (ValueError for any other
        string)."""
        label = send_outcome(outcome) if isinstance(outcome, HarnessError) else outcome
        _pick(self._sends, "harness_sends_total", op, label).inc()

    def count_idempotency(self, result: KeyResolution) -> None:
        """A keyed `Send` resolved as `result` (`KeyResolution`)."""
        _pick(self._idempotency, "harness_send_idempotency_total", result).inc()

    def count_member_outcome(
        self, op: CollectiveOp, outcome: MemberOutcomeKind, n: int = 1
    ) -> None:
        """`n` member outcomes of kind `outcome` (`MemberOutcomeKind`) in results of `op`
        (`CollectiveOp`); only the requester's daemon counts them."""
        _pick(self._member_outcomes, "harness_collective_member_outcomes_total", op, outcome).inc(n)

    def set_collectives_open(self, op: CollectiveOp, n: int) -> None:
        """`n` operations of `op` (`CollectiveOp`) are open at requesters on this daemon."""
        _pick(self._collectives_open, "harness_collectives_open", op).set(n)

    def count_collective_result(self, op: CollectiveOp, end: CollectiveEnd) -> None:
        """An operation of `op` (`CollectiveOp`) ended as `end` (`CollectiveEnd`)."""
        _pick(self._collective_results, "harness_collective_results_total", op, end).inc()

    # --- deliveries ---

    def count_published(self, item: DeliveryItem) -> None:
        """An `item` (`DeliveryItem`) was made durable in an inbox under a fresh token."""
        _pick(self._published, "harness_deliveries_published_total", item).inc()

    def count_replayed(self, item: DeliveryItem) -> None:
        """A token of an `item` (`DeliveryItem`) was offered again."""
        _pick(self._replayed, "harness_deliveries_replayed_total", item).inc()

    def count_acknowledged(self, item: DeliveryItem) -> None:
        """An `item` (`DeliveryItem`) was retired by `Acknowledge`."""
        _pick(self._acknowledged, "harness_deliveries_acknowledged_total", item).inc()

    def count_acknowledge_result(self, result: AckResult, n: int = 1) -> None:
        """`n` tokens of `Acknowledge` calls ended as `result` (`AckResult`: `ok` or a
        `DeliveryAcknowledgeErrorReason` value)."""
        _pick(self._ack_results, "harness_acknowledge_results_total", result).inc(n)

    def count_consumed(self, kind: ConsumedKind) -> None:
        """The endpoint consumed and acknowledged a record of `kind` (`ConsumedKind`)."""
        _pick(self._consumed, "harness_records_consumed_total", kind).inc()

    def set_unacknowledged(self, listener: Listener, n: int) -> None:
        """`n` unacknowledged items over hosted agents whose stream state is `listener`."""
        _pick(self._unacknowledged, "harness_deliveries_unacknowledged", listener).set(n)

    def set_oldest_unacked_age(self, listener: Listener, seconds: float) -> None:
        """The oldest unacknowledged item of `listener` agents is `seconds` old (0: none)."""
        _pick(self._oldest_unacked, "harness_deliveries_oldest_unacked_age_seconds", listener).set(
            seconds
        )

    # --- streams and the Router ---

    def set_streams_active(self, n: int) -> None:
        """`n` `Messages` streams are open."""
        self._streams_active.set(n)

    def set_streams_window_full(self, n: int) -> None:
        """`n` streams hold a full window."""
        self._streams_window_full.set(n)

    def count_stream_open(self, result: StreamOpen) -> None:
        """A `Messages` stream open ended as `result` (`StreamOpen`)."""
        _pick(self._stream_opens, "harness_stream_opens_total", result).inc()

    def count_stream_end(self, reason: StreamEndReason) -> None:
        """A `Messages` stream ended for `reason` (`StreamEndReason`, the `StreamEndReason` values)."""
        _pick(self._stream_ends, "harness_stream_ends_total", reason).inc()

    def set_agents_hosted(self, n: int) -> None:
        """`n` endpoints are loaded on this daemon."""
        self._agents_hosted.set(n)

    def set_conversations_set_aside(self, n: int) -> None:
        """`n` conversations are set aside (engine.md §5.10)."""
        self._conversations_set_aside.set(n)

    def set_router_attachments(self, state: RouterAttachment, n: int) -> None:
        """`n` hosted agents have their Router feed in `state` (`RouterAttachment`, the
        `RouterAttachment` values). Set every state each time the split changes."""
        _pick(self._router_attachments, "harness_router_attachments", state).set(n)

    def count_router_event(self, event: RouterEvent) -> None:
        """A Router feed `event` (`RouterEvent`)."""
        _pick(self._router_events, "harness_router_events_total", event).inc()

    # --- the firewall ---

    def observe_firewall_check(
        self, kind: MiddlewareKind, direction: Direction, verdict: Verdict, seconds: float
    ) -> None:
        """One middleware of `kind` checked a `direction` in `seconds`, with `verdict`."""
        check = _pick(
            self._firewall_checks, "harness_firewall_checks_total", kind, direction, verdict
        )
        timer = _pick(self._firewall_seconds, "harness_firewall_check_seconds", kind)
        check.inc()
        timer.observe(seconds)

    def count_firewall_refusal(self, kind: MiddlewareKind, refusal: FirewallRefusal) -> None:
        """A middleware of `kind` refused a send or withheld text with `refusal`."""
        _pick(self._firewall_refusals, "harness_firewall_refusals_total", kind, refusal).inc()

    def count_firewall_reload(self, result: FirewallReload) -> None:
        """The firewall file was reloaded with `result`."""
        _pick(self._firewall_reloads, "harness_firewall_reloads_total", result).inc()

    # --- authentication ---

    def count_auth_failure(self, reason: AuthFailure) -> None:
        """A token was refused for `reason` (`AuthFailure`, the `AuthFailure` values)."""
        _pick(self._auth_failures, "harness_auth_failures_total", reason).inc()

    # --- requests refused before their handler ---

    def count_rejected_request(self, reason: RejectedRequestReason) -> None:
        """A call was refused before any handler ran, for `reason` (the request guard of
        `gateway/rpc/decoding.py`, counted by the metrics interceptor)."""
        _pick(self._rejected_requests, "harness_rejected_requests_total", reason).inc()

    # --- a cluster replica (cluster.md §10) ---

    def set_partitions_owned(self, n: int) -> None:
        """This replica holds `n` partitions."""
        self._partitions_owned.set(n)

    def set_partitions_unowned(self, n: int) -> None:
        """`n` partitions have no live holder in this replica's last view."""
        self._partitions_unowned.set(n)

    def set_partition_unowned_seconds(self, seconds: float) -> None:
        """Some partition has had no live holder for `seconds` (0: every one has)."""
        self._partition_unowned_seconds.set(seconds)

    def count_forward(self, method: ForwardMethod, outcome: str) -> None:
        """A call of `method` forwarded to its home ended as `outcome`: a `ForwardOutcome`
        value or a gRPC status code name other than OK (ValueError for anything else)."""
        _pick(self._forwards, "harness_cluster_forwards_total", method, outcome).inc()

    def count_handoffs(self, n: int = 1) -> None:
        """This replica released `n` partitions to another."""
        self._handoffs.inc(n)

    def count_hints_dropped(self, n: int = 1) -> None:
        """`n` hints were dropped (a target's queue was full)."""
        self._hints_dropped.inc(n)

    def count_claims(self, n: int = 1) -> None:
        """This replica claimed `n` partitions."""
        self._claims.inc(n)

    def count_lease_lost(self, reason: LeaseLoss) -> None:
        """This replica's lease ended for `reason` (`LeaseLoss`)."""
        try:
            child = self._leases_lost[LeaseLoss(reason)]
        except ValueError:
            raise ValueError(
                f"harness_cluster_leases_lost_total: {reason!r} is not a closed label value"
            ) from None
        child.inc()

    def observe_loop_lag(self, seconds: float) -> None:
        """The event loop woke `seconds` later than asked."""
        self._loop_lag.observe(seconds)


class StoreMetrics:
    """A `StoreObserver` (gateway/store/observer.py) feeding the `harness_store_*` family.

    The backend is checked here, once, so the observer's methods never raise (the store's
    contract for observers)."""

    def __init__(self, metrics: Metrics, backend: str = StoreBackend.SQLITE) -> None:
        name = StoreBackend(backend).value
        self._batch = metrics._store_batch[(name,)]
        self._commit = metrics._store_commit[(name,)]
        self._wait = metrics._store_wait[(name,)]
        self._depth = metrics._store_depth[(name,)]
        self._failures = metrics._store_failures[(name,)]

    def on_commit(self, batch_size: int, commit_seconds: float) -> None:
        """A group of `batch_size` writes committed in `commit_seconds`."""
        self._batch.observe(batch_size)
        self._commit.observe(commit_seconds)

    def on_write_done(self, wait_seconds: float) -> None:
        """One writer was answered after `wait_seconds`."""
        self._wait.observe(wait_seconds)

    def on_queue_depth(self, depth: int) -> None:
        """`depth` writes wait for the next commit."""
        self._depth.set(depth)

    def on_commit_failure(self) -> None:
        """A group did not commit."""
        self._failures.inc()


__all__ = [
    "BATCH_BUCKETS",
    "CERT_BUCKETS",
    "DAEMON_GRPC_SERVICES",
    "FIREWALL_BUCKETS",
    "FORWARD_OUTCOMES",
    "GRPC_BUCKETS",
    "GRPC_CODES",
    "GRPC_PRECREATED_CODES",
    "GRPC_SERVICE_METHODS",
    "LOOP_LAG_BUCKETS",
    "SERIES_BUDGET",
    "STORE_BUCKETS",
    "UNKNOWN_LABEL",
    "FirewallDirection",
    "FirewallKind",
    "FirewallReload",
    "FirewallVerdict",
    "ForwardMethod",
    "ForwardOutcome",
    "GrpcMethodMetrics",
    "GrpcType",
    "Listener",
    "Metrics",
    "Mode",
    "RejectedRequestReason",
    "SendOutcome",
    "StoreBackend",
    "StoreMetrics",
    "send_outcome",
]

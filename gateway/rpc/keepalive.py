"""One keepalive policy for both ends of every connection (operations.md §3).

A `KeepalivePolicy` holds the pings a server sends, the pings it accepts, and the pings its
clients send; `server_options()` and `client_options()` are the channel arguments of each
end, so the two can never be chosen apart. `from_settings(settings)` is the policy of one
process: its server accepts `keepalive_min_client_interval`, and both its server and its
peer clients (Router and Registry channels) ping every `keepalive_time`.

A cluster's peer channels (forwarding to a home and hints, cluster.md §9.1) ping faster, as
`CLUSTER_PEER_KEEPALIVE` says: every `CLUSTER_PEER_TIME` while a call is open, so a home that
vanished without resetting its connections (SIGSTOP, a lost node: its kernel still acknowledges
TCP, or nothing answers at all) is found within `CLUSTER_PEER_TIME + CLUSTER_PEER_TIMEOUT`
instead of when TCP gives up minutes later. A replica's server therefore accepts pings
`CLUSTER_PEER_KEEPALIVE.min_client_interval` apart (`from_settings` with `cluster` set), which
agents' clients, pinging every 30 s, never come near.

The rule that keeps `GOAWAY ENHANCE_YOUR_CALM too_many_pings` away: a client pings at least
`CLIENT_INTERVAL_MARGIN` times the interval the server accepts. The server counts a strike
for every client PING that arrives sooner than its accepted interval after the previous one
(only PINGs it receives count; its own pings and their acknowledgements never do), forgives
them all whenever it sends headers or data, and sends GOAWAY on the strike after
`max_ping_strikes`. An idle `Messages` stream or an idle peer link sends nothing, so only
the margin protects it.

The accepted interval is the channel argument `grpc.http2.min_ping_interval_without_data_ms`
(C-core's `GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS`). A misspelt argument is
ignored without a word and leaves C-core's default of 5 minutes, so that every client ping
30 s apart is a strike and the third one ends the connection after 90 s: `OPTION_NAMES`
lists the names used here, each checked against grpcio's own.

The Python client (`clients/python`, which never imports `gateway`) keeps its own copy of
the client numbers; `tests/unit/rpc/test_keepalive.py` pins that the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gateway.settings import KEEPALIVE_INTERVAL_MARGIN, Settings

CLIENT_INTERVAL_MARGIN: Final = KEEPALIVE_INTERVAL_MARGIN
"""How many times the server's accepted interval a client waits between pings, at least
(defined with the settings, which refuse a policy that breaks it when they load)."""

CLIENT_TIME: Final = 30.0
"""Seconds between a client's keepalive pings (agents, operators and peers)."""
CLIENT_TIMEOUT: Final = 10.0
"""Seconds a client waits for a ping acknowledgement before its connection is dead, so a
half-open stream is found within about 40 s."""
SERVER_TIME: Final = 30.0
"""Seconds between the server's own keepalive pings."""
SERVER_TIMEOUT: Final = 10.0
"""Seconds the server waits for a ping acknowledgement before the connection is dead."""
MIN_CLIENT_INTERVAL: Final = 10.0
"""Fastest client ping interval the server accepts, in seconds: a third of `CLIENT_TIME`."""
MAX_PING_STRIKES: Final = 2
"""Pings sooner than the accepted interval tolerated (between two writes of the server)
before GOAWAY `too_many_pings`; 0 would never send it."""

KEEPALIVE_TIME: Final = "grpc.keepalive_time_ms"
KEEPALIVE_TIMEOUT: Final = "grpc.keepalive_timeout_ms"
PERMIT_WITHOUT_CALLS: Final = "grpc.keepalive_permit_without_calls"
MAX_PINGS_WITHOUT_DATA: Final = "grpc.http2.max_pings_without_data"
MIN_RECV_PING_INTERVAL: Final = "grpc.http2.min_ping_interval_without_data_ms"
MAX_PING_STRIKES_ARG: Final = "grpc.http2.max_ping_strikes"
PING_TIMEOUT: Final = "grpc.http2.ping_timeout_ms"
OPTION_NAMES: Final = (
    KEEPALIVE_TIME,
    KEEPALIVE_TIMEOUT,
    PERMIT_WITHOUT_CALLS,
    MAX_PINGS_WITHOUT_DATA,
    MIN_RECV_PING_INTERVAL,
    MAX_PING_STRIKES_ARG,
    PING_TIMEOUT,
)
"""Every channel argument this module sets (gRPC ignores unknown names silently)."""


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


@dataclass(frozen=True, slots=True, kw_only=True)
class KeepalivePolicy:
    """The pings of both ends of a connection, in seconds.

    Raises `ValueError` when a value is not positive or clients would ping faster than
    `CLIENT_INTERVAL_MARGIN` times `min_client_interval`."""

    client_time: float = CLIENT_TIME
    """Seconds between a client's pings (`grpc.keepalive_time_ms` on client channels)."""
    client_timeout: float = CLIENT_TIMEOUT
    """Seconds a client waits for a ping acknowledgement."""
    server_time: float = SERVER_TIME
    """Seconds between the server's own pings."""
    server_timeout: float = SERVER_TIMEOUT
    """Seconds the server waits for a ping acknowledgement."""
    min_client_interval: float = MIN_CLIENT_INTERVAL
    """Fastest client ping interval the server accepts without a strike."""
    max_ping_strikes: int = MAX_PING_STRIKES
    """Strikes tolerated before GOAWAY `too_many_pings` (0: never)."""
    permit_without_calls: bool = True
    """Whether clients ping with no call open (`grpc.keepalive_permit_without_calls`)."""
    ping_timeout: float | None = None
    """Seconds a client's ping may go unanswered before its connection is closed
    (`grpc.http2.ping_timeout_ms`); None: `client_timeout`. grpcio 1.85's C-core closes a
    connection whose keepalive ping is unanswered only after this timeout (60 s unless set),
    whatever `client_timeout` says (`tests/integration/cluster/test_cluster_keepalive.py`
    fails without it), so both ends always set it."""

    def __post_init__(self) -> None:
        for name in ("client_time", "client_timeout", "server_time", "server_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"keepalive {name} must be positive, got {getattr(self, name)}")
        if not self.min_client_interval > 0:
            raise ValueError(
                f"keepalive min_client_interval must be positive, got {self.min_client_interval}"
            )
        if self.ping_timeout is not None and not self.ping_timeout > 0:
            raise ValueError(f"keepalive ping_timeout must be positive, got {self.ping_timeout}")
        if self.max_ping_strikes < 0:
            raise ValueError(f"max_ping_strikes must not be negative, got {self.max_ping_strikes}")
        if self.client_time < CLIENT_INTERVAL_MARGIN * self.min_client_interval:
            raise ValueError(
                f"clients ping every {self.client_time:g} s but the server accepts pings "
                f"{self.min_client_interval:g} s apart: the ping interval "
                "(HARNESS_KEEPALIVE_TIME) must be at least "
                f"{CLIENT_INTERVAL_MARGIN:g} times the accepted one "
                "(HARNESS_KEEPALIVE_MIN_CLIENT_INTERVAL), or idle connections get "
                "GOAWAY too_many_pings"
            )

    @classmethod
    def from_settings(cls, settings: Settings) -> KeepalivePolicy:
        """The policy of one process: its server accepts `keepalive_min_client_interval`,
        its server and its peer clients ping every `keepalive_time` and wait
        `keepalive_timeout` for the acknowledgement. A cluster replica's server accepts its
        peers' faster pings too (`CLUSTER_PEER_KEEPALIVE`, cluster.md §9.1)."""
        accepted = settings.keepalive_min_client_interval
        if settings.cluster:
            accepted = min(accepted, CLUSTER_PEER_KEEPALIVE.min_client_interval)
        return cls(
            client_time=settings.keepalive_time,
            client_timeout=settings.keepalive_timeout,
            server_time=settings.keepalive_time,
            server_timeout=settings.keepalive_timeout,
            min_client_interval=accepted,
        )

    def server_options(self) -> list[tuple[str, int]]:
        """The server's keepalive channel arguments.

        `grpc.http2.max_pings_without_data` is absent: C-core applies it to clients only."""
        return [
            (KEEPALIVE_TIME, _ms(self.server_time)),
            (KEEPALIVE_TIMEOUT, _ms(self.server_timeout)),
            # Clients ping with no call open too (an idle Registry channel), so the
            # server must accept that, or it would allow one ping every two hours.
            (PERMIT_WITHOUT_CALLS, 1),
            (MIN_RECV_PING_INTERVAL, _ms(self.min_client_interval)),
            (MAX_PING_STRIKES_ARG, self.max_ping_strikes),
            (PING_TIMEOUT, _ms(self.server_timeout)),
        ]

    def client_options(self) -> list[tuple[str, int]]:
        """A client channel's keepalive channel arguments."""
        return [
            (KEEPALIVE_TIME, _ms(self.client_time)),
            (KEEPALIVE_TIMEOUT, _ms(self.client_timeout)),
            (PERMIT_WITHOUT_CALLS, int(self.permit_without_calls)),
            # Without it a client stops pinging after two pings until data flows, and an
            # idle stream's half-open connection would go unnoticed.
            (MAX_PINGS_WITHOUT_DATA, 0),
            (
                PING_TIMEOUT,
                _ms(self.client_timeout if self.ping_timeout is None else self.ping_timeout),
            ),
        ]


DEFAULT_KEEPALIVE: Final = KeepalivePolicy()
"""The embedded defaults: clients every 30 s (10 s timeout), the server every 30 s, pings
accepted 10 s apart, two strikes."""


CLUSTER_PEER_TIME: Final = 5.0
"""Seconds between the pings of a cluster's peer channels while a call is open (cluster.md
§9.1)."""
CLUSTER_PEER_TIMEOUT: Final = 2.0
"""Seconds a cluster peer channel waits for a ping acknowledgement: a forwarded stream to a
vanished home ends UNAVAILABLE within `CLUSTER_PEER_TIME + CLUSTER_PEER_TIMEOUT` (7 s)."""

CLUSTER_PEER_KEEPALIVE: Final = KeepalivePolicy(
    client_time=CLUSTER_PEER_TIME,
    client_timeout=CLUSTER_PEER_TIMEOUT,
    min_client_interval=CLUSTER_PEER_TIME / CLIENT_INTERVAL_MARGIN,
    # An idle channel carries nothing to lose: a call opened on it is pinged at the next
    # tick, so a dead connection still fails that call within 7 s, and N replicas' N × (N - 1)
    # mostly idle channels do not ping each other for nothing.
    permit_without_calls=False,
    # Without it the unanswered ping is given C-core's 60 s, not `client_timeout`.
    ping_timeout=CLUSTER_PEER_TIMEOUT,
)
"""The keepalive of a cluster's peer channels (forwarding and hints, cluster.md §9.1); its
`min_client_interval` is what every replica's server accepts."""

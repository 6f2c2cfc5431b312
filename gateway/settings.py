"""Settings: one frozen object from defaults, then `HARNESS_*` variables, then flags.

operations.md §7: each source wins over the one before, and no other module reads the
environment. Durations take `ms`/`s`/`m`/`h` (a bare number is seconds), sizes
`KiB`/`MiB` (a bare number is bytes). `load_settings` reports every error at once.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

# Defined beside the cross-checks, which use them too; re-exported as this module's.
from gateway.settings_checks import KEEPALIVE_INTERVAL_MARGIN as KEEPALIVE_INTERVAL_MARGIN
from gateway.settings_checks import NATS_SCHEMES as NATS_SCHEMES
from gateway.settings_checks import PEER_SCHEME as PEER_SCHEME
from gateway.settings_checks import PEER_TLS_SCHEME as PEER_TLS_SCHEME
from gateway.settings_checks import POSTGRES_SCHEMES as POSTGRES_SCHEMES
from gateway.settings_checks import WILDCARD_HOSTS as WILDCARD_HOSTS
from gateway.settings_checks import check_settings
from gateway.settings_checks import is_nats_url as is_nats_url
from gateway.settings_checks import is_tls_peer as is_tls_peer

DEFAULT_LISTEN: Final = "127.0.0.1:7770"
DEFAULT_METRICS_LISTEN: Final = "127.0.0.1:9770"
ROUTER_LISTEN: Final = "127.0.0.1:7771"
"""The standalone Router's default gRPC address (operations.md §1)."""
ROUTER_METRICS_LISTEN: Final = "127.0.0.1:9771"
"""The standalone Router's default `/metrics` address."""
REGISTRY_LISTEN: Final = "127.0.0.1:7772"
"""The standalone Registry's default gRPC address (operations.md §1)."""
REGISTRY_METRICS_LISTEN: Final = "127.0.0.1:9772"
"""The standalone Registry's default `/metrics` address."""
CLUSTER_PARTITIONS: Final = 1024
"""P of a cluster set up without `--partitions` (cluster.md §2): `gateway/cluster/partitions.py`
`DEFAULT_PARTITIONS`, which says why 1024. Repeated here, not imported, so that settings stay
below every component; a test keeps the two equal."""
CLUSTER_PARTITIONS_MAX: Final = 1 << 16
"""The most partitions a cluster may have (`gateway/cluster/partitions.py` `MAX_PARTITIONS`,
kept equal by the same test)."""


def default_data_dir(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_STATE_HOME/harness-gateway`, else `~/.local/state/harness-gateway`."""
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME") or str(
        Path(env.get("HOME", "~")).expanduser() / ".local/state"
    )
    return Path(base) / "harness-gateway"


def default_registry_data_dir(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_STATE_HOME/harness-registry`, beside (never inside) a daemon's data directory."""
    return default_data_dir(env).with_name("harness-registry")


LogFormat = Literal["json", "text", "auto"]
Role = Literal["serve", "router", "registry", "migrate"]
"""The process a subcommand runs: the daemon, a standalone role, or `migrate` of a daemon's
store (`migrate --registry` is the `registry` role: its data directory and settings)."""
StoreKind = Literal["sqlite", "postgresql"]
"""Where a process keeps its rows: SQLite in its data directory, or PostgreSQL."""


class Mode(enum.StrEnum):
    """What a process is, as it reports itself: the `mode` of `harness_build_info`, of the
    management status (`harness status`) and of the `ready` line (operations.md §1).

    A daemon is `embedded` or `joined` by how it reaches its Router and Registry, or a
    `cluster` replica; where it keeps its rows is reported on its own
    (`Settings.store_kind`, the `store` of the `ready` line and the `backend` of the
    `harness_store_*` metrics)."""

    EMBEDDED = "embedded"
    """`serve` with its Router and Registry in-process (neither `--router` nor
    `--registry`), whatever its store."""
    JOINED = "joined"
    """`serve` joined to a shared Router (a standalone one over gRPC, or NATS JetStream), to
    a standalone Registry, or to both, whatever its store."""
    CLUSTER = "cluster"
    """`serve --cluster`: one replica of a cluster, N replicas on one PostgreSQL database
    serving every agent as one trust domain, with no Router (cluster.md §1)."""
    ROUTER = "router"
    """The standalone Router (`harness-gateway router`)."""
    REGISTRY = "registry"
    """The standalone Registry (`harness-gateway registry`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Every setting of a gateway process, with the embedded defaults."""

    role: Role = "serve"
    """The process: the daemon (`serve`), a standalone `router` or `registry`, or `migrate`;
    set by the subcommand, never by a variable."""
    listen: str = DEFAULT_LISTEN
    """gRPC listen address (`HOST:PORT`; port 0 takes a free port)."""
    metrics_listen: str | None = DEFAULT_METRICS_LISTEN
    """Prometheus `/metrics` address; None (`off`) disables it."""
    data_dir: Path = field(default_factory=default_data_dir)
    """Where the store, the lock and the generated admin token live."""
    router: str | None = None
    """A Router to join (`grpc://HOST:PORT`, or `grpcs://HOST:PORT` over TLS; `HOST:PORT` is
    accepted and normalised to `grpc://`), or a NATS JetStream cluster
    (`nats://HOST:PORT[,HOST:PORT...]`, `tls://` for TLS; docs/scale-out.md); None runs the
    in-process ring."""
    nats_creds_file: Path | None = None
    """A NATS credentials file (`--nats-creds`: the user JWT and NKey seed) for the
    JetStream Router; None connects without one."""
    nats_tls_ca_file: Path | None = None
    """PEM CA bundle NATS servers are verified against (`--nats-tls-ca`); setting it (or a
    `tls://` URL) turns TLS on."""
    nats_tls_cert_file: Path | None = None
    """PEM client certificate for NATS servers that require mTLS (`--nats-tls-cert`)."""
    nats_tls_key_file: Path | None = None
    """PEM private key of `nats_tls_cert_file` (`--nats-tls-key`)."""
    nats_subject_prefix: str = "harness"
    """First token of every subject and stream name this gateway uses, so several gateways
    can share one NATS account."""
    nats_replicas: int | None = None
    """Replicas of the Router stream; None is 3 when the cluster has at least three servers,
    else 1."""
    nats_max_age: float = 7 * 86400.0
    """Seconds the Router stream keeps an envelope (`MaxAge`; beside `ring_max_entries` as
    `MaxMsgs` and `ring_max_bytes` as `MaxBytes`, all with `DiscardOld`)."""
    nats_duplicate_window: float = 120.0
    """Seconds JetStream remembers a `Nats-Msg-Id`, within which a retried publish is
    answered with the original entry."""
    store: str | None = None
    """Where the daemon's store lives: None keeps SQLite in the data directory;
    `postgresql://...` keeps it in PostgreSQL (one database may hold many daemons' stores,
    each under its `store_owner`). For `registry`, where its cards live. A password belongs
    in `PGPASSWORD` or a `passfile`, not here: this value is shown redacted."""
    store_owner: str | None = None
    """The name this daemon's agents are kept under in a shared PostgreSQL store, held under
    a lease with a fencing token; None is the host name (a StatefulSet pod's is stable)."""
    registry_key_file: Path | None = None
    """The Registry's signing key (a b64 Ed25519 seed, owner-only) when its cards live in
    PostgreSQL: every replica sharing the database signs with this one file, the standalone
    Registry's and a cluster's alike (`serve --cluster` requires it). None creates
    `<data-dir>/registry-key` on first start (the standalone Registry only)."""
    cluster: bool = False
    """Run as one replica of a cluster (`--cluster`, cluster.md): every replica opens the
    same PostgreSQL database and serves any agent. For `migrate`, set the database up for a
    cluster (cluster.md §12.1)."""
    replica_id: str | None = None
    """The name of this replica in the cluster's `replicas` table (`--replica-id`,
    cluster.md §3.1): 1-63 letters, digits, '.', '_' or '-'. None is the host name, which
    is the pod name in Kubernetes (`Settings.replica`)."""
    advertise_address: str | None = None
    """`HOST:PORT` at which clients and the other replicas reach this replica
    (`--advertise-address`): the home hint clients follow and the address peers forward to
    (cluster.md §4). With TLS on it must be one of the certificate's names. None is the
    listen address, or `<host name>:<listen port>` when it listens on a wildcard
    (`Settings.advertised`)."""
    seed_key_file: Path | None = None
    """The cluster's seed key (`--seed-key-file`, one line of b64, 32 bytes, owner-only; a
    Kubernetes Secret): every replica seals and opens agents' signing seeds with it, and a
    replica given another key is refused at start (cluster.md §1.1)."""
    cluster_partitions: int = CLUSTER_PARTITIONS
    """P, the cluster's number of partitions, written when `migrate --cluster` sets a
    database up (`--partitions`, 1-65536); fixed after, so replicas read it from the
    database (cluster.md §2)."""
    registry: str | None = None
    """A Registry to join (`grpc://HOST:PORT`, normalised as `router`); None runs it
    in-process. The standalone Router needs one to verify envelope signatures."""
    registry_public_key: str | None = None
    """The pinned Registry key (`b64` of 32 bytes) for a joined Registry; None fetches it
    once with `GetRegistryKey` at start."""
    serve_router: bool = False
    """Expose the embedded Router to other daemons."""
    serve_registry: bool = False
    """Expose the embedded Registry to other daemons."""
    expose_network: bool = False
    """Expose both the embedded Router and Registry to other daemons, on the daemon's own
    gRPC port (`--expose-network`); the same as `serve_router` and `serve_registry`."""
    reflection: bool | None = None
    """gRPC server reflection; None means on in the embedded mode, else off."""
    ring_max_entries: int = 4096
    """Entries the in-process Router ring keeps before evicting the oldest (engine.md §4)."""
    ring_max_bytes: int = 64 << 20
    """Bytes of envelopes the in-process Router ring keeps."""
    stream_window: int = 256
    """Unacknowledged deliveries a `Messages` stream may hold; the rest wait in the store."""
    commit_delay: float = 0.002
    """Seconds the store writer waits to gather writes into one commit."""
    commit_max_batch: int = 512
    """Most writes in one group commit."""
    send_certify_timeout: float = 30.0
    """Seconds a send waits for certification after its drain (1-600)."""
    router_attach_timeout: float = 45.0
    """Seconds a send waits for the Router subscription before `network-unavailable`."""
    shutdown_delay: float = 0.0
    """Seconds to keep serving after health turns NOT_SERVING at shutdown."""
    shutdown_grace: float = 30.0
    """Seconds in-flight calls get to finish at shutdown."""
    history_export_dir: Path | None = None
    """Directory of the optional history export (one JSON-lines file per agent)."""
    firewall_config: Path | None = None
    """The local firewall's YAML file (`--firewall-config`, firewall.md §4.1), re-read on
    SIGHUP; None runs no firewall."""
    max_open_operations: int = 256
    """Most gather and all_gather operations one agent may have open (asked, result not yet
    out) before its next ask is refused `too-many-operations` (`--max-open-operations`,
    collectives.md §1.1). Each open operation costs memory, rows and start-up work for up to
    30 days; 256 is far above what a model follows at once and bounds what one agent token
    can make the daemon hold (`gateway/collectives/port.py` `MAX_OPEN_OPERATIONS`)."""
    keepalive_time: float = 30.0
    """Seconds between server keepalive pings."""
    keepalive_timeout: float = 10.0
    """Seconds to wait for a ping acknowledgement."""
    keepalive_min_client_interval: float = 10.0
    """Fastest client ping interval accepted, in seconds."""
    max_connection_idle: float = 900.0
    """Seconds before an idle connection is closed."""
    max_connection_age: float = 1800.0
    """Seconds before a connection is asked to go away (gRPC adds ±10% jitter)."""
    max_connection_age_grace: float = 70.0
    """Seconds a going-away connection keeps its calls."""
    max_receive_bytes: int = 1 << 20
    """Largest message the server receives."""
    max_concurrent_rpcs: int | None = None
    """Concurrent RPC cap; None is off."""
    admin_token_file: Path | None = None
    """File holding the operator token; None generates `<data-dir>/admin-token` (embedded)."""
    peer_token_file: Path | None = None
    """File holding the daemon-to-daemon token (at least 32 characters, owner-only). Joining
    processes send it to the Router and Registry, which always require it; a process that
    serves them without one creates `<data-dir>/peer-token` on first start."""
    tls_cert_file: Path | None = None
    """PEM certificate chain of the gRPC listener (`--tls-cert`); with `tls_key_file` the
    listener speaks TLS only."""
    tls_key_file: Path | None = None
    """PEM private key of `tls_cert_file` (`--tls-key`)."""
    tls_client_ca_file: Path | None = None
    """PEM CA bundle that client certificates must chain to (`--tls-client-ca`): mTLS.
    Tokens are still required on top."""
    peer_tls_ca_file: Path | None = None
    """PEM CA bundle that `grpcs://` Routers and Registries are verified against
    (`--peer-tls-ca`); None uses the system's roots."""
    peer_tls_cert_file: Path | None = None
    """PEM client certificate presented to `grpcs://` peers that require mTLS
    (`--peer-tls-cert`)."""
    peer_tls_key_file: Path | None = None
    """PEM private key of `peer_tls_cert_file` (`--peer-tls-key`)."""
    health_listen: str | None = None
    """A plaintext listener serving only `grpc.health.v1` (`--health-listen HOST:PORT`), for
    kubelet probes when the gRPC listener is TLS-only; None opens none."""
    log_format: LogFormat = "auto"
    log_level: str = "info"
    log_content: bool = False
    """Log message text, questions and answers (a developer's machine only)."""
    uvloop: bool = True

    @property
    def embedded(self) -> bool:
        """True for a daemon (not a cluster replica) whose Router and Registry both run
        in-process; for `migrate`, for the daemons whose store it prepares."""
        return (
            self.role in ("serve", "migrate")
            and not self.cluster
            and self.router is None
            and self.registry is None
        )

    @property
    def reflection_enabled(self) -> bool:
        """Reflection as configured, defaulting by mode (on only in the embedded mode)."""
        return self.embedded if self.reflection is None else self.reflection

    @property
    def mode(self) -> Mode:
        """What this process reports itself as: `embedded`, `joined`, `cluster` (`serve
        --cluster`), or its standalone role; for `migrate`, the mode of the daemons whose
        store it prepares."""
        match self.role:
            case "router":
                return Mode.ROUTER
            case "registry":
                return Mode.REGISTRY
            case "serve" | "migrate":
                if self.cluster:
                    return Mode.CLUSTER
                return Mode.EMBEDDED if self.embedded else Mode.JOINED

    @property
    def replica(self) -> str:
        """This replica's id: `replica_id`, else the host name (the pod name in Kubernetes)."""
        return self.replica_id or socket.gethostname()

    @property
    def advertised(self) -> str:
        """The `HOST:PORT` clients and other replicas reach this replica at:
        `advertise_address`, else the listen address when its host is not a wildcard, else
        `<host name>:<listen port>`. A listen port of 0 stays 0 here: only the started
        server knows the port it bound, and the composition advertises that one."""
        if self.advertise_address is not None:
            return self.advertise_address
        host, _, port = self.listen.rpartition(":")
        if host not in WILDCARD_HOSTS:
            return self.listen
        return f"{socket.gethostname()}:{port}"

    @property
    def store_kind(self) -> StoreKind:
        """Where the rows are kept: `postgresql` with `--store postgresql://...`, else
        `sqlite` in the data directory."""
        return "postgresql" if self.store_is_postgres else "sqlite"

    @property
    def joins_over_tls(self) -> bool:
        """True when a Router or Registry to join is `grpcs://`."""
        return any(url is not None and is_tls_peer(url) for url in (self.router, self.registry))

    @property
    def router_is_nats(self) -> bool:
        """True when the Router is a NATS JetStream cluster."""
        return self.router is not None and is_nats_url(self.router)

    @property
    def store_is_postgres(self) -> bool:
        """True when the store (or the Registry's cards) live in PostgreSQL."""
        return self.store is not None

    @property
    def exposes_router(self) -> bool:
        """True when the daemon serves its embedded Router to other daemons."""
        return self.role == "serve" and (self.expose_network or self.serve_router)

    @property
    def exposes_registry(self) -> bool:
        """True when the daemon serves its embedded Registry to other daemons."""
        return self.role == "serve" and (self.expose_network or self.serve_registry)


_FIELD_DEFAULTS: Final[Mapping[str, object]] = {
    item.name: item.default for item in dataclasses.fields(Settings)
}
"""Each setting's default (MISSING for a factory's), for the cross-checks."""


class SettingsError(ValueError):
    """Settings could not be loaded; `errors` lists every problem."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)?")
_DURATION_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_SIZE = re.compile(r"(\d+)(KiB|MiB|GiB)?")
_SIZE_UNITS: Final = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, None: 1}
_TRUE: Final = {"1", "true", "yes", "on"}
_FALSE: Final = {"0", "false", "no", "off"}


def parse_duration(text: str) -> float:
    """`250ms`, `2s`, `15m`, `1h`, or a bare number of seconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"expected a duration such as 250ms, 30s, 15m or 1h, got {text!r}")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def parse_size(text: str) -> int:
    """`512KiB`, `1MiB`, or a bare number of bytes."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"expected a size such as 1MiB or 65536, got {text!r}")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


def parse_bool(text: str) -> bool:
    """true/false, yes/no, on/off, 1/0."""
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _optional_address(text: str) -> str | None:
    return None if text.strip().lower() == "off" else _address(text)


def _address(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return text


def _peer(text: str) -> str:
    """`HOST:PORT`, `grpc://HOST:PORT` or `grpcs://HOST:PORT`; a bare address becomes
    `grpc://`."""
    stripped = text.strip()
    scheme = PEER_TLS_SCHEME if stripped.startswith(PEER_TLS_SCHEME) else PEER_SCHEME
    address = stripped.removeprefix(scheme).rstrip("/")
    if "://" in address:
        raise ValueError(
            f"only {PEER_SCHEME}HOST:PORT or {PEER_TLS_SCHEME}HOST:PORT is supported, got {text!r}"
        )
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT or {scheme}HOST:PORT, got {text!r}")
    return scheme + address


def _router(text: str) -> str:
    """A gRPC peer (`_peer`) or a NATS server list (`_nats_servers`)."""
    stripped = text.strip()
    if stripped.startswith(NATS_SCHEMES):
        return _nats_servers(stripped)
    return _peer(stripped)


def _nats_servers(text: str) -> str:
    """`nats://HOST:PORT[,HOST:PORT...]` (or `tls://`), each server checked, normalised to
    one scheme-qualified URL per server, comma-separated."""
    scheme = next(scheme for scheme in NATS_SCHEMES if text.startswith(scheme))
    servers = []
    for part in text.split(","):
        address = part.strip()
        for known in NATS_SCHEMES:
            if address.startswith(known):
                if known != scheme:
                    raise ValueError(f"mixed nats:// and tls:// servers in {text!r}")
                address = address.removeprefix(known)
        address = address.rstrip("/")
        host, sep, port = address.rpartition(":")
        if "@" in address or "://" in address:
            raise ValueError(
                "a NATS server is HOST:PORT; credentials go in --nats-creds, not the URL"
            )
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"expected {scheme}HOST:PORT[,HOST:PORT...], got {text!r}")
        servers.append(scheme + address)
    return ",".join(servers)


def nats_servers(url: str) -> list[str]:
    """The server URLs of a normalised NATS Router URL."""
    return url.split(",")


def _store(text: str) -> str:
    """A PostgreSQL connection URL (`postgresql://` or `postgres://`)."""
    stripped = text.strip()
    if not stripped.startswith(POSTGRES_SCHEMES):
        raise ValueError(
            "expected postgresql://[USER@]HOST[:PORT]/DATABASE (SQLite is the default: leave "
            "the store unset)"
        )
    return stripped


def redact_url(url: str) -> str:
    """`url` with any password replaced by `***`, for logs and `check-config`."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    userinfo, at, host = rest.rpartition("@")
    if at and ":" in userinfo:
        user = userinfo.split(":", 1)[0]
        rest = f"{user}:***@{host}"
    # Query parameters may carry one too (`?password=`).
    head, question, query = rest.partition("?")
    if question:
        parts = [
            f"{key}=***" if key.lower() == "password" else f"{key}{eq}{value}"
            for item in query.split("&")
            for key, eq, value in [item.partition("=")]
        ]
        rest = head + "?" + "&".join(parts)
    return f"{scheme}{sep}{rest}"


_OWNER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def _store_owner(text: str) -> str:
    """A store owner or a replica id: a name that fits a row key and a log line as it is."""
    owner = text.strip()
    if not _OWNER.fullmatch(owner):
        raise ValueError(
            "expected 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return owner


def _advertise_address(text: str) -> str:
    """`HOST:PORT` another machine can dial: a port from 1, a host that is not a wildcard."""
    address = text.strip()
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT with a port from 1 to 65535, got {text!r}")
    if host in WILDCARD_HOSTS:
        raise ValueError(
            f"{host} is a listen wildcard, not an address clients can dial; name this "
            "replica's host (its pod IP or DNS name)"
        )
    return address


def _partitions(text: str) -> int:
    value = int(text)
    if not 1 <= value <= CLUSTER_PARTITIONS_MAX:
        raise ValueError(f"expected 1 to {CLUSTER_PARTITIONS_MAX} partitions, got {text!r}")
    return value


_SUBJECT_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,32}")


def _subject_prefix(text: str) -> str:
    prefix = text.strip()
    if not _SUBJECT_TOKEN.fullmatch(prefix):
        raise ValueError("expected 1-32 letters, digits, '_' or '-' (one NATS subject token)")
    return prefix


def _replicas(text: str) -> int | None:
    if text.strip().lower() == "auto":
        return None
    value = int(text)
    if not 1 <= value <= 5:
        raise ValueError(f"expected 1 to 5 (JetStream's limit) or auto, got {text!r}")
    return value


_B64_KEY = re.compile(r"[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]")


def _public_key(text: str) -> str:
    """Unpadded base64url of exactly 32 bytes (43 characters, no trailing bits)."""
    key = text.strip()
    if not _B64_KEY.fullmatch(key):
        raise ValueError("expected the b64 (unpadded base64url) of a 32-byte Ed25519 key")
    return key


def _log_format(text: str) -> str:
    if text not in ("json", "text", "auto"):
        raise ValueError(f"expected json, text or auto, got {text!r}")
    return text


def _log_level(text: str) -> str:
    if text.lower() not in ("debug", "info", "warning", "error"):
        raise ValueError(f"expected debug, info, warning or error, got {text!r}")
    return text.lower()


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return value


_PARSERS: Final[dict[str, Callable[[str], object]]] = {
    "listen": _address,
    "metrics_listen": _optional_address,
    "data_dir": Path,
    "router": _router,
    "nats_creds_file": Path,
    "nats_tls_ca_file": Path,
    "nats_tls_cert_file": Path,
    "nats_tls_key_file": Path,
    "nats_subject_prefix": _subject_prefix,
    "nats_replicas": _replicas,
    "nats_max_age": parse_duration,
    "nats_duplicate_window": parse_duration,
    "store": _store,
    "store_owner": _store_owner,
    "registry_key_file": Path,
    "cluster": parse_bool,
    "replica_id": _store_owner,
    "advertise_address": _advertise_address,
    "seed_key_file": Path,
    "cluster_partitions": _partitions,
    "registry": _peer,
    "registry_public_key": _public_key,
    "serve_router": parse_bool,
    "serve_registry": parse_bool,
    "expose_network": parse_bool,
    "reflection": parse_bool,
    "ring_max_entries": _positive_int,
    "ring_max_bytes": parse_size,
    "stream_window": _positive_int,
    "commit_delay": parse_duration,
    "commit_max_batch": _positive_int,
    "send_certify_timeout": parse_duration,
    "router_attach_timeout": parse_duration,
    "shutdown_delay": parse_duration,
    "shutdown_grace": parse_duration,
    "history_export_dir": Path,
    "firewall_config": Path,
    "max_open_operations": _positive_int,
    "keepalive_time": parse_duration,
    "keepalive_timeout": parse_duration,
    "keepalive_min_client_interval": parse_duration,
    "max_connection_idle": parse_duration,
    "max_connection_age": parse_duration,
    "max_connection_age_grace": parse_duration,
    "max_receive_bytes": parse_size,
    "max_concurrent_rpcs": _positive_int,
    "admin_token_file": Path,
    "peer_token_file": Path,
    "tls_cert_file": Path,
    "tls_key_file": Path,
    "tls_client_ca_file": Path,
    "peer_tls_ca_file": Path,
    "peer_tls_cert_file": Path,
    "peer_tls_key_file": Path,
    "health_listen": _address,
    "log_format": _log_format,
    "log_level": _log_level,
    "log_content": parse_bool,
    "uvloop": parse_bool,
}
"""Setting name → parser of its text form. The variable is `HARNESS_` + the upper name."""

ENV_PREFIX: Final = "HARNESS_"


def env_name(setting: str) -> str:
    """The `HARNESS_*` variable of a setting."""
    return ENV_PREFIX + setting.upper()


def load_settings(
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, object] | None = None,
    *,
    defaults: Mapping[str, object] | None = None,
) -> Settings:
    """Defaults, then `HARNESS_*` from `env`, then `flags` (already typed or text).

    `defaults` (typed values) replace the embedded defaults below the environment: a
    standalone role's own ports, data directory and `role`. Raises `SettingsError`
    listing every invalid value.
    """
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    errors: list[str] = []
    data_dir_env = {key: env[key] for key in ("XDG_STATE_HOME", "HOME") if key in env}
    values["data_dir"] = default_data_dir(data_dir_env)
    values.update(defaults or {})
    for name, parser in _PARSERS.items():
        variable = env_name(name)
        if variable in env and env[variable] != "":
            try:
                values[name] = parser(env[variable])
            except ValueError as error:
                errors.append(f"{variable}: {error}")
    for name, raw in (flags or {}).items():
        if raw is None:
            continue
        if name not in _PARSERS:
            errors.append(f"--{name.replace('_', '-')}: unknown setting")
            continue
        try:
            values[name] = _PARSERS[name](raw) if isinstance(raw, str) else raw
        except ValueError as error:
            errors.append(f"--{name.replace('_', '-')}: {error}")
    errors.extend(check_settings(values, defaults=_FIELD_DEFAULTS))
    if errors:
        raise SettingsError(errors)
    return Settings(**values)  # type: ignore[arg-type]


SECRET_FIELDS: Final = frozenset({"admin_token_file", "peer_token_file"})
"""Settings that name secrets; their paths are shown, never their contents."""


def describe(settings: Settings) -> dict[str, object]:
    """The effective settings as plain values, for `check-config` (no secret is read)."""
    described: dict[str, object] = {
        item.name: (str(value) if isinstance(value, Path) else value)
        for item in dataclasses.fields(settings)
        for value in [getattr(settings, item.name)]
    }
    if settings.store is not None:
        described["store"] = redact_url(settings.store)
    described["mode"] = settings.mode.value
    if settings.cluster:
        # What the replica will be known as, resolved as the replica resolves it.
        described["replica"] = settings.replica
        described["advertised"] = settings.advertised
    return described

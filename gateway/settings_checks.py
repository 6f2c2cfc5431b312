"""The cross-checks of `load_settings` (operations.md §7): values each valid alone that
cannot go together, half configurations, and options that would never be used.

Each check reads the typed values `load_settings` gathered (defaults, variables, flags) and
returns its problems, each `setting: what is wrong and the fix`, so that `load_settings`
reports every one at once. The module is a leaf below `gateway.settings`, which imports it:
the URL schemes and the keepalive margin that the parsers share with these checks live here,
and `gateway.settings` re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

PEER_SCHEME: Final = "grpc://"
"""The plaintext scheme of a Router or Registry to join."""
PEER_TLS_SCHEME: Final = "grpcs://"
"""The TLS scheme of a Router or Registry to join; `--peer-tls-ca` pins its CA."""
NATS_SCHEMES: Final = ("nats://", "tls://")
"""Schemes of a NATS JetStream Router (`--router nats://HOST:PORT[,HOST:PORT...]`); `tls://`
asks for TLS, as NATS clients spell it."""
POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")
"""Schemes of a PostgreSQL store (`--store postgresql://...`), as libpq spells them."""


KEEPALIVE_INTERVAL_MARGIN: Final = 2.0
"""How many times the server's accepted ping interval (`keepalive_min_client_interval`) a
client waits between pings (`keepalive_time`), at least (`gateway/rpc/keepalive.py`).

Timers fire late and a ping can sit behind a write, so two pings sent exactly the accepted
interval apart may arrive closer; twice the interval leaves room for any scheduling delay."""

WILDCARD_HOSTS: Final = frozenset({"0.0.0.0", "::", "[::]", "*"})  # noqa: S104 - naming, not binding
"""Listen hosts that mean every interface: never an address to advertise (cluster.md §4)."""


def is_nats_url(url: str) -> bool:
    """True for a normalised Router URL naming NATS servers."""
    return url.startswith(NATS_SCHEMES)


def is_tls_peer(url: str) -> bool:
    """True for a normalised peer URL that speaks TLS (`grpcs://`)."""
    return url.startswith(PEER_TLS_SCHEME)


def check_settings(values: Mapping[str, object], *, defaults: Mapping[str, object]) -> list[str]:
    """Every cross-check's problems, in a stable order. `defaults` are the `Settings`
    fields' defaults (this leaf cannot import `Settings`)."""
    return [*_check_ranges(values, defaults), *_check_cluster(values)]


def _check_ranges(values: Mapping[str, object], defaults: Mapping[str, object]) -> list[str]:
    errors = []
    timeout = values.get("send_certify_timeout")
    if isinstance(timeout, float) and not 1.0 <= timeout <= 600.0:
        errors.append("send_certify_timeout: must be between 1s and 600s")
    exposes = bool(values.get("expose_network"))
    if values.get("router") is not None and (exposes or values.get("serve_router")):
        errors.append("expose_network: a daemon joined to a Router cannot serve its own")
    if values.get("registry") is not None and (exposes or values.get("serve_registry")):
        errors.append("expose_network: a daemon joined to a Registry cannot serve its own")
    ping = values.get("keepalive_time", defaults["keepalive_time"])
    accepted = values.get(
        "keepalive_min_client_interval", defaults["keepalive_min_client_interval"]
    )
    if isinstance(ping, float) and isinstance(accepted, float):
        if ping < KEEPALIVE_INTERVAL_MARGIN * accepted:
            errors.append(
                f"keepalive_time: pings every {ping:g} s but the server accepts pings "
                f"{accepted:g} s apart (keepalive_min_client_interval); it must be at least "
                f"{KEEPALIVE_INTERVAL_MARGIN:g} times that, or idle connections get GOAWAY "
                "too_many_pings"
            )
        if ping <= 0 or accepted <= 0:
            errors.append("keepalive_time: keepalive intervals must be positive")
    router = values.get("router")
    joins_grpc = (isinstance(router, str) and not is_nats_url(router)) or values.get(
        "registry"
    ) is not None
    if joins_grpc and values.get("peer_token_file") is None:
        who = "the standalone Router" if values.get("role") == "router" else "joining"
        errors.append(
            f"peer_token_file: {who} needs --peer-token-file (HARNESS_PEER_TOKEN_FILE), the "
            "peer-token file the Registry (or the daemon exposing the network) wrote in its "
            "data directory"
        )
    errors.extend(_check_tls(values))
    errors.extend(_check_network_backends(values))
    if values.get("role") == "router" and values.get("registry") is None:
        errors.append(
            "registry: the standalone Router needs a Registry (--registry grpc://HOST:PORT) "
            "to verify envelope signatures"
        )
    return errors


def _check_network_backends(values: Mapping[str, object]) -> list[str]:
    """NATS and PostgreSQL options that could never be used, and half configurations."""
    errors = []
    router = values.get("router")
    nats = isinstance(router, str) and is_nats_url(router)
    nats_options = [
        name
        for name in (
            "nats_creds_file",
            "nats_tls_ca_file",
            "nats_tls_cert_file",
            "nats_subject_prefix",
            "nats_replicas",
            "nats_max_age",
            "nats_duplicate_window",
        )
        if name in values
    ]
    if nats_options and not nats:
        errors.append(
            f"{nats_options[0]}: a NATS option is set but --router is not nats://HOST:PORT, "
            "so it would never be used"
        )
    cert, key = values.get("nats_tls_cert_file"), values.get("nats_tls_key_file")
    if (cert is None) != (key is None):
        errors.append(
            f"nats_tls_cert_file: --nats-tls-cert and --nats-tls-key are set together "
            f"(got cert {cert}, key {key})"
        )
    window, age = values.get("nats_duplicate_window"), values.get("nats_max_age")
    if isinstance(window, float) and window <= 0:
        errors.append("nats_duplicate_window: must be positive")
    if isinstance(age, float) and age <= 0:
        errors.append("nats_max_age: must be positive")
    if isinstance(window, float) and isinstance(age, float) and window > age:
        errors.append("nats_duplicate_window: must not exceed nats_max_age")
    role = values.get("role", "serve")
    if role == "router" and values.get("store") is not None:
        errors.append("store: the standalone Router keeps no store")
    if values.get("store_owner") is not None and values.get("store") is None:
        errors.append("store_owner: only a PostgreSQL store (--store postgresql://...) has owners")
    # A cluster's replicas sign cards with one shared key too; `_check_cluster` reports a
    # cluster without its store.
    reads_key = (role == "registry" and values.get("store") is not None) or (
        role == "serve" and bool(values.get("cluster"))
    )
    if values.get("registry_key_file") is not None and not reads_key:
        errors.append(
            "registry_key_file: only `harness-gateway registry --store postgresql://...` and "
            "`serve --cluster` read a signing key file (SQLite keeps the key in its database)"
        )
    return errors


def _check_tls(values: Mapping[str, object]) -> list[str]:
    """Half TLS configurations, named by their files: each refuses to start, since a
    certificate without its key would otherwise serve plaintext without a word."""
    errors = []
    cert, key = values.get("tls_cert_file"), values.get("tls_key_file")
    if cert is not None and key is None:
        errors.append(f"tls_key_file: --tls-cert {cert} is set without --tls-key")
    if key is not None and cert is None:
        errors.append(f"tls_cert_file: --tls-key {key} is set without --tls-cert")
    client_ca = values.get("tls_client_ca_file")
    if client_ca is not None and (cert is None or key is None):
        errors.append(
            f"tls_client_ca_file: --tls-client-ca {client_ca} (mTLS) needs --tls-cert and --tls-key"
        )
    peer_cert, peer_key = values.get("peer_tls_cert_file"), values.get("peer_tls_key_file")
    if (peer_cert is None) != (peer_key is None):
        errors.append(
            "peer_tls_cert_file: --peer-tls-cert and --peer-tls-key are set together "
            f"(got cert {peer_cert}, key {peer_key})"
        )
    peers = [url for url in (values.get("router"), values.get("registry")) if isinstance(url, str)]
    peer_tls = [
        name for name in ("peer_tls_ca_file", "peer_tls_cert_file") if values.get(name) is not None
    ]
    # A cluster replica dials the other replicas as peers when it forwards a call
    # (cluster.md §4.1), so its peer TLS is used with no Router or Registry to join.
    forwards = values.get("role", "serve") == "serve" and bool(values.get("cluster"))
    if peer_tls and not forwards and not any(is_tls_peer(url) for url in peers):
        errors.append(
            f"{peer_tls[0]}: peer TLS is configured but no --router or --registry is "
            f"{PEER_TLS_SCHEME}HOST:PORT and this is no cluster replica (--cluster), so it "
            "would never be used"
        )
    return errors


_CLUSTER_ONLY: Final = {
    "replica_id": "--replica-id (HARNESS_REPLICA_ID)",
    "advertise_address": "--advertise-address (HARNESS_ADVERTISE_ADDRESS)",
    "seed_key_file": "--seed-key-file (HARNESS_SEED_KEY_FILE)",
    "cluster_partitions": "--partitions (HARNESS_CLUSTER_PARTITIONS)",
}
"""The settings only a cluster uses, as an operator sets them."""

_CLUSTER_REQUIRES: Final = {
    "seed_key_file": "--seed-key-file (HARNESS_SEED_KEY_FILE), the cluster's seed key every "
    "replica seals agents' seeds with (docs/design/cluster.md §1.1)",
    "admin_token_file": "an admin token file (HARNESS_ADMIN_TOKEN_FILE) every replica accepts: "
    "a token generated per data directory would differ per replica (docs/design/cluster.md §1)",
    "peer_token_file": "--peer-token-file (HARNESS_PEER_TOKEN_FILE), the one peer token every "
    "replica presents and accepts when it forwards (docs/design/cluster.md §1)",
    "registry_key_file": "--registry-key-file (HARNESS_REGISTRY_KEY_FILE), the one key every "
    "replica signs agent cards with (docs/design/cluster.md §1)",
}
"""What `serve --cluster` cannot start without, beside its PostgreSQL store."""

_CLUSTER_REFUSES: Final = {
    "router": "--router (HARNESS_ROUTER): a cluster needs no Router, and joining one is a later "
    "issue (docs/design/cluster.md §12.3)",
    "registry": "--registry (HARNESS_REGISTRY): every replica serves the cluster's own "
    "Registry from the shared database (docs/design/cluster.md §1)",
    "store_owner": "--store-owner (HARNESS_STORE_OWNER): a cluster's agents belong to the "
    "cluster, not to an owner; name the replica with --replica-id",
    "serve_router": "--serve-router (HARNESS_SERVE_ROUTER): a cluster has no Router to serve "
    "(docs/design/cluster.md §12.3)",
    "serve_registry": "--serve-registry (HARNESS_SERVE_REGISTRY): every replica already serves "
    "the cluster's Registry to its clients",
    "expose_network": "--expose-network (HARNESS_EXPOSE_NETWORK): a cluster has no Router to "
    "serve (docs/design/cluster.md §12.3)",
}
"""What `serve --cluster` refuses, each with why."""


def _check_cluster(values: Mapping[str, object]) -> list[str]:
    """`--cluster` and the settings only a cluster uses (cluster.md §1, §12).

    `serve --cluster` needs its PostgreSQL store, the seed key and the shared admin token,
    peer token and registry key files, and refuses a Router, a joined Registry, a store
    owner and exposing the network. `migrate --cluster` (setting a database up) needs the
    store and the seed key, and takes `--partitions`. Without `--cluster`, a cluster-only
    setting would never be used, so it is refused; so are a replica's settings on `migrate`
    and `--partitions` on `serve` (P is fixed when the database is set up).
    """
    role = values.get("role", "serve")
    if not values.get("cluster"):
        return [
            f"{name}: {flag} is set without --cluster (HARNESS_CLUSTER), so it would never be used"
            for name, flag in _CLUSTER_ONLY.items()
            if values.get(name) is not None
        ]
    if role not in ("serve", "migrate"):
        return [
            f"cluster: --cluster (HARNESS_CLUSTER) is for `serve` and `migrate`; the standalone "
            f"{role} is never part of a cluster (docs/design/cluster.md §12.3)"
        ]
    errors = []
    if values.get("store") is None:
        errors.append(
            "store: --cluster needs --store postgresql://[USER@]HOST[:PORT]/DATABASE "
            "(HARNESS_STORE): every replica opens the one database (docs/design/cluster.md §1)"
        )
    if role == "migrate":
        if values.get("seed_key_file") is None:
            errors.append(
                f"seed_key_file: migrate --cluster needs {_CLUSTER_REQUIRES['seed_key_file']}"
            )
        errors.extend(
            f"{name}: {_CLUSTER_ONLY[name]} names a replica, which `migrate --cluster` never "
            "uses; set it on `serve --cluster`"
            for name in ("replica_id", "advertise_address")
            if values.get(name) is not None
        )
        return errors
    errors.extend(
        f"{name}: --cluster needs {why}"
        for name, why in _CLUSTER_REQUIRES.items()
        if values.get(name) is None
    )
    errors.extend(
        f"{name}: --cluster refuses {why}"
        for name, why in _CLUSTER_REFUSES.items()
        if values.get(name) not in (None, False)
    )
    if values.get("cluster_partitions") is not None:
        errors.append(
            f"cluster_partitions: {_CLUSTER_ONLY['cluster_partitions']} is fixed when the "
            "database is set up (`harness-gateway migrate --cluster --partitions P`); a replica "
            "reads it from the database, so `serve` would never use it"
        )
    return errors

"""`harness-gateway`: the process entry point (serve, router, registry, migrate, check-config,
version).

`serve` with no flags is the embedded default: in-process Router and Registry, SQLite under
the data directory, 127.0.0.1 only. `serve --router grpc://HOST:7771 --registry
grpc://HOST:7772` joins a standalone Router and Registry instead (the `joined` mode), and
`serve --expose-network` serves the embedded ones to other daemons.

`serve --cluster` runs one replica of a cluster (docs/design/cluster.md): N replicas on one
PostgreSQL database, any of them serving any agent, with no Router. `migrate --cluster` sets
a database up for one (cluster.md §12.1); the first replica does the same on an empty one.

`router` and `registry` are the standalone roles (`gateway.standalone`), on 127.0.0.1:7771
and 127.0.0.1:7772 by default; the Router joins a Registry to verify signatures.

Peer calls always carry a peer token: the Router and Registry (standalone, or exposed by
`--expose-network`) refuse calls without it, loopback included. A process serving them
creates `<data-dir>/peer-token` (mode 0600) on first start unless `--peer-token-file`
names one; joining daemons and the standalone Router pass that file as `--peer-token-file`.
TLS: `--tls-cert`/`--tls-key` (and `--tls-client-ca` for mTLS) on every listener,
`grpcs://` peers with `--peer-tls-ca`; `docs/security.md` has the whole trust model.

Every process logs one `ready` line with its bound addresses and shuts down in its written
order on SIGTERM or SIGINT (a second signal skips the waits).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Protocol

from gateway import __version__
from gateway.settings import (
    REGISTRY_LISTEN,
    REGISTRY_METRICS_LISTEN,
    ROUTER_LISTEN,
    ROUTER_METRICS_LISTEN,
    Settings,
    SettingsError,
    default_registry_data_dir,
    describe,
    load_settings,
)

logger = logging.getLogger("harness.gateway")

EXIT_USAGE = 2
"""Exit code of invalid flags or settings."""


def _add_common_flags(parser: argparse.ArgumentParser, *, listen: str, metrics: str) -> None:
    parser.add_argument("--listen", help=f"gRPC address, HOST:PORT (default {listen})")
    parser.add_argument(
        "--metrics-listen", help=f"Prometheus address, HOST:PORT or off (default {metrics})"
    )
    parser.add_argument(
        "--peer-token-file",
        help="file holding the daemon-to-daemon token, sent to and required by the Router and "
        "Registry (a process serving them creates <data-dir>/peer-token when absent)",
    )
    parser.add_argument(
        "--tls-cert",
        dest="tls_cert_file",
        help="PEM certificate chain: the gRPC port speaks TLS only",
    )
    parser.add_argument("--tls-key", dest="tls_key_file", help="PEM private key of --tls-cert")
    parser.add_argument(
        "--tls-client-ca",
        dest="tls_client_ca_file",
        help="PEM CA that client certificates must chain to (mTLS; tokens are still required)",
    )
    parser.add_argument(
        "--health-listen",
        help="plaintext HOST:PORT serving only grpc.health.v1 (kubelet probes when TLS is on)",
    )
    parser.add_argument("--shutdown-delay", help="serve on after health turns NOT_SERVING, e.g. 5s")
    parser.add_argument("--shutdown-grace", help="in-flight calls' grace at shutdown, e.g. 30s")
    parser.add_argument(
        "--reflection", action=argparse.BooleanOptionalAction, default=None, help="gRPC reflection"
    )
    parser.add_argument("--log-format", help="json, text or auto")
    parser.add_argument("--log-level", help="debug, info, warning or error")
    parser.add_argument(
        "--no-uvloop", dest="uvloop", action="store_false", default=None, help="use asyncio's loop"
    )


def _add_ring_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ring-max-entries", help="Router ring entries kept (4096)")
    parser.add_argument("--ring-max-bytes", help="Router ring bytes kept, e.g. 64MiB")


def _add_registry_join_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--registry-public-key",
        help="the Registry's public key to pin (b64); fetched once at start when absent",
    )
    parser.add_argument(
        "--peer-tls-ca",
        dest="peer_tls_ca_file",
        help="PEM CA that grpcs:// Routers and Registries are verified against (default: the "
        "system's roots)",
    )
    parser.add_argument(
        "--peer-tls-cert",
        dest="peer_tls_cert_file",
        help="PEM client certificate for grpcs:// peers that require mTLS",
    )
    parser.add_argument(
        "--peer-tls-key", dest="peer_tls_key_file", help="PEM private key of --peer-tls-cert"
    )


def _add_nats_flags(parser: argparse.ArgumentParser) -> None:
    nats = parser.add_argument_group("NATS JetStream Router (with --router nats://...)")
    nats.add_argument(
        "--nats-creds", dest="nats_creds_file", help="NATS credentials file (user JWT and seed)"
    )
    nats.add_argument(
        "--nats-tls-ca", dest="nats_tls_ca_file", help="PEM CA that NATS servers chain to"
    )
    nats.add_argument(
        "--nats-tls-cert", dest="nats_tls_cert_file", help="PEM client certificate for NATS"
    )
    nats.add_argument(
        "--nats-tls-key", dest="nats_tls_key_file", help="PEM private key of --nats-tls-cert"
    )
    nats.add_argument(
        "--nats-subject-prefix", help="first token of the subjects and stream name (harness)"
    )
    nats.add_argument("--nats-replicas", help="Router stream replicas, 1-5 or auto (auto)")
    nats.add_argument("--nats-max-age", help="how long the stream keeps an envelope (7d = 168h)")
    nats.add_argument(
        "--nats-duplicate-window", help="how long JetStream remembers a Nats-Msg-Id (2m)"
    )


def _add_store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        help="postgresql://[USER@]HOST[:PORT]/DATABASE to keep the store in PostgreSQL "
        "(default: SQLite in the data directory); the password goes in PGPASSWORD or a passfile",
    )


def _add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    cluster = parser.add_argument_group("cluster mode (docs/design/cluster.md)")
    cluster.add_argument(
        "--cluster",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run as one replica of a cluster: needs --store postgresql://..., "
        "--seed-key-file, --registry-key-file, --peer-token-file and HARNESS_ADMIN_TOKEN_FILE",
    )
    cluster.add_argument(
        "--replica-id", help="this replica's name in the cluster (default: the host name)"
    )
    cluster.add_argument(
        "--advertise-address",
        help="HOST:PORT clients and other replicas reach this replica at (default: the listen "
        "address, or <host name>:<listen port> when listening on a wildcard)",
    )
    cluster.add_argument(
        "--seed-key-file",
        help="the cluster's seed key, which seals agents' signing seeds (b64 of 32 bytes, "
        "owner-only; the same file on every replica)",
    )
    cluster.add_argument(
        "--registry-key-file",
        help="the key every replica signs agent cards with (b64 Ed25519 seed, owner-only)",
    )


def _add_serve_flags(parser: argparse.ArgumentParser) -> None:
    _add_common_flags(parser, listen="127.0.0.1:7770", metrics="127.0.0.1:9770")
    parser.add_argument(
        "--data-dir", help="data directory (default $XDG_STATE_HOME/harness-gateway)"
    )
    parser.add_argument(
        "--router",
        help="join a standalone Router, grpc:// or grpcs://HOST:PORT, or a NATS JetStream "
        "cluster, nats:// or tls://HOST:PORT[,HOST:PORT...] (default: in-process)",
    )
    _add_nats_flags(parser)
    _add_store_flags(parser)
    parser.add_argument(
        "--store-owner",
        help="the name this daemon's agents are kept under in a PostgreSQL store, held under "
        "a lease (default: the host name)",
    )
    parser.add_argument(
        "--registry",
        help="join a standalone Registry, grpc:// or grpcs://HOST:PORT (default: in-process)",
    )
    _add_registry_join_flags(parser)
    parser.add_argument(
        "--expose-network",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve the embedded Router and Registry to other daemons on the gRPC port",
    )
    parser.add_argument(
        "--serve-router",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve only the embedded Router to other daemons",
    )
    parser.add_argument(
        "--serve-registry",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve only the embedded Registry to other daemons",
    )
    _add_ring_flags(parser)
    parser.add_argument("--stream-window", help="unacknowledged deliveries per stream (256)")
    parser.add_argument("--commit-delay", help="group commit window, e.g. 2ms")
    parser.add_argument("--commit-max-batch", help="most writes per group commit (512)")
    parser.add_argument("--send-certify-timeout", help="certification wait of a send, e.g. 30s")
    parser.add_argument(
        "--firewall-config",
        help="the local firewall's YAML file (re-read on SIGHUP; default: no firewall)",
    )
    parser.add_argument(
        "--max-open-operations",
        help="gather and all_gather operations one agent may have open (256)",
    )
    _add_cluster_flags(parser)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness-gateway", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve", help="run the gateway daemon (embedded default with no flags)"
    )
    _add_serve_flags(serve)
    router = commands.add_parser("router", help="run a standalone Router")
    _add_common_flags(router, listen=ROUTER_LISTEN, metrics=ROUTER_METRICS_LISTEN)
    router.add_argument(
        "--registry", help="the Registry that signs senders' cards, grpc://HOST:PORT (required)"
    )
    _add_registry_join_flags(router)
    _add_ring_flags(router)
    registry = commands.add_parser("registry", help="run a standalone Registry")
    _add_common_flags(registry, listen=REGISTRY_LISTEN, metrics=REGISTRY_METRICS_LISTEN)
    registry.add_argument(
        "--data-dir", help="data directory (default $XDG_STATE_HOME/harness-registry)"
    )
    _add_store_flags(registry)
    registry.add_argument(
        "--registry-key-file",
        help="with --store postgresql://: the signing key every replica shares (b64 Ed25519 "
        "seed, owner-only; default <data-dir>/registry-key, created on first start)",
    )
    check = commands.add_parser(
        "check-config",
        help="validate settings and the firewall file and print the effective values",
    )
    _add_serve_flags(check)
    migrate = commands.add_parser(
        "migrate",
        help="bring a store (or with --registry, a Registry's cards) to this build's schema",
        description="Create or migrate the tables of a daemon's store (SQLite in --data-dir, "
        "or PostgreSQL with --store) or, with --registry, of a Registry. Prints one JSON line: "
        "the version found and the version now. A schema this build does not know is refused "
        "and left untouched (exit 1). Stop the daemons first for a SQLite store (its data "
        "directory is locked while one runs); PostgreSQL migrations serialise on a lock.",
    )
    migrate.add_argument(
        "--data-dir",
        help="the data directory of a SQLite store (default $XDG_STATE_HOME/harness-gateway, "
        "or $XDG_STATE_HOME/harness-registry with --registry)",
    )
    _add_store_flags(migrate)
    migrate.add_argument(
        "--registry",
        dest="migrate_registry",
        action="store_true",
        help="the Registry's tables instead of a daemon's store",
    )
    migrate.add_argument(
        "--check",
        dest="migrate_check",
        action="store_true",
        help="change nothing: report the versions, exit 1 when a migration is due or refused",
    )
    migrate.add_argument(
        "--cluster",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="set the PostgreSQL database up for a cluster, or move a network-mode one "
        "(offline, one way; docs/design/cluster.md §12); needs --store and --seed-key-file",
    )
    migrate.add_argument(
        "--seed-key-file",
        help="with --cluster: the cluster's seed key, which seals agents' signing seeds",
    )
    migrate.add_argument(
        "--partitions",
        dest="cluster_partitions",
        help="with --cluster: the cluster's partitions, fixed from then on (1-65536; 1024)",
    )
    commands.add_parser("version", help="print the version")
    return parser


def _role_defaults(command: str) -> dict[str, object]:
    """The settings a standalone role changes below the environment and flags."""
    match command:
        case "router":
            return {
                "role": "router",
                "listen": ROUTER_LISTEN,
                "metrics_listen": ROUTER_METRICS_LISTEN,
            }
        case "registry":
            return {
                "role": "registry",
                "listen": REGISTRY_LISTEN,
                "metrics_listen": REGISTRY_METRICS_LISTEN,
                "data_dir": default_registry_data_dir(),
            }
        case "migrate":
            # A daemon's store: the daemon's data directory, the cluster settings of set-up.
            return {"role": "migrate"}
        case _:
            return {}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `harness-gateway` command and return its exit code."""
    # gRPC's C core writes straight to stderr, past the JSON log handler, and by default
    # INFO too: a peer link's failed TLS handshake or a GOAWAY with an error code is an
    # `I1201 ... chttp2_transport.cc:1403] ... Got goaway` line at every retry. ERROR keeps
    # what an operator must see; GRPC_VERBOSITY or GRPC_TRACE set by hand win. It works only
    # because nothing imported grpc yet: the C core reads the variable at import.
    if "GRPC_VERBOSITY" not in os.environ and not os.environ.get("GRPC_TRACE"):
        os.environ["GRPC_VERBOSITY"] = "ERROR"
    args = _build_parser().parse_args(argv)
    if args.command == "version":
        print(f"harness-gateway {__version__}")
        return 0
    options = vars(args)
    migrate_only = {
        name: options.pop(name, False) for name in ("migrate_registry", "migrate_check")
    }
    flags = {name: value for name, value in options.items() if name != "command"}
    command = args.command
    if command == "migrate" and migrate_only["migrate_registry"]:
        command = "registry"  # the Registry's data directory and settings
    try:
        settings = load_settings(flags=flags, defaults=_role_defaults(command))
    except SettingsError as error:
        for problem in error.errors:
            print(f"harness-gateway: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "check-config":
        return _check_config(settings)
    if args.command == "migrate" and settings.cluster:
        return asyncio.run(_setup_cluster(settings))
    if args.command == "migrate":
        return asyncio.run(
            _migrate(
                settings,
                registry=bool(migrate_only["migrate_registry"]),
                check=bool(migrate_only["migrate_check"]),
            )
        )
    from gateway.observability.logs import configure_logging

    configure_logging(log_format=settings.log_format, level=settings.log_level)
    run = {"router": _router, "registry": _registry}.get(args.command, _serve)
    if settings.uvloop:
        # Installed here only: a library that set the loop policy would impose it on every embedder,
        # and tests choose their own loops.
        import uvloop

        return uvloop.run(run(settings))
    return asyncio.run(run(settings))


def _check_config(settings: Settings) -> int:
    """Validate the firewall file too; print every problem (exit 2) or the settings."""
    described = describe(settings)
    if settings.firewall_config is not None:
        from gateway.firewall.config import FirewallConfigError, load_firewall
        from gateway.firewall.spec import kind_of

        try:
            spec = load_firewall(settings.firewall_config)
        except FirewallConfigError as error:
            for problem in error.problems:
                print(f"harness-gateway: {problem}", file=sys.stderr)
            return EXIT_USAGE
        described["firewall_middlewares"] = [
            f"{middleware.id} ({kind_of(middleware).value})" for middleware in spec.middlewares
        ]
    print(json.dumps(described, indent=2, sort_keys=True))
    return 0


async def _setup_cluster(settings: Settings) -> int:
    """`harness-gateway migrate --cluster` (cluster.md §12.1, §12.2): one JSON line
    `{component, backend, target, partitions, state}` (`state`: `current`, or `migrated` with
    the owners, counts and set-aside conversations of a network-mode database moved in);
    progress on stderr; exit 1 when refused (another seed key, a network daemon running,
    clashing names, missing cards)."""
    from gateway.cluster.seeds import SeedKey, SeedKeyError
    from gateway.cluster_migration import MigrationState, migrate_to_cluster
    from gateway.settings import redact_url
    from gateway.store import StoreError

    assert settings.store is not None
    assert settings.seed_key_file is not None
    target = redact_url(settings.store)

    def progress(text: str) -> None:
        print(f"harness-gateway: migrate --cluster at {target}: {text}", file=sys.stderr)

    try:
        key = SeedKey.load(settings.seed_key_file)
        outcome = await migrate_to_cluster(
            settings.store,
            partitions=settings.cluster_partitions,
            seed_key=key,
            progress=progress,
        )
        key.verify_check(outcome.meta.key_check)
    except (SeedKeyError, StoreError, OSError) as error:
        print(f"harness-gateway: migrate --cluster at {target}: {error}", file=sys.stderr)
        return 1
    report: dict[str, object] = {
        "component": "cluster",
        "backend": "postgresql",
        "target": target,
        "partitions": outcome.meta.partitions,
        "state": outcome.state.value,
    }
    if outcome.state is MigrationState.MIGRATED:
        report |= {
            "owners": list(outcome.owners),
            "identities": outcome.identities,
            "conversations_moved": outcome.moved,
            "set_aside": [
                {
                    "conversation_id": item.conversation_id,
                    "members": list(item.member_agent_ids),
                    "reason": item.reason,
                }
                for item in outcome.set_aside
            ],
        }
        for item in outcome.set_aside:
            progress(f"set aside conversation {item.conversation_id}: {item.reason}")
    else:
        progress("nothing to change: the database is a cluster's")
    print(json.dumps(report))
    return 0


async def _migrate(settings: Settings, *, registry: bool, check: bool) -> int:
    """`harness-gateway migrate`: one JSON line `{component, backend, target, found, now,
    state}`; exit 0 when the schema is (or now is) this build's, 1 when refused or, with
    `--check`, when a migration is due."""
    from gateway.registry import RegistryError
    from gateway.settings import redact_url
    from gateway.store import DataDirLocked, StoreError

    component = "registry" if registry else "store"
    backend = "postgresql" if settings.store is not None else "sqlite"
    target = redact_url(settings.store) if settings.store is not None else str(settings.data_dir)
    try:
        found, now = await _migrate_one(settings, registry=registry, check=check)
    except (DataDirLocked, StoreError, RegistryError, OSError, ValueError) as error:
        print(f"harness-gateway: migrate {component} at {target}: {error}", file=sys.stderr)
        return 1
    if found is not None and found > now:
        print(
            f"harness-gateway: migrate {component} at {target}: schema version {found} is newer "
            f"than this build's {now}; run the release that wrote it",
            file=sys.stderr,
        )
        return 1
    if check:
        state = "current" if found == now else ("empty" if found is None else "due")
    else:
        state = "current" if found == now else ("created" if found is None else "migrated")
    report = {"component": component, "backend": backend, "target": target}
    print(json.dumps({**report, "found": found, "now": now, "state": state}))
    return 0 if state in ("current", "created", "migrated") else 1


async def _migrate_one(
    settings: Settings, *, registry: bool, check: bool
) -> tuple[int | None, int]:
    """(version found, version now or expected) of the one component `migrate` names."""
    if settings.store is not None and not registry:
        from gateway.store.postgres import (
            SCHEMA_VERSION,
            SchemaState,
            migrate,
            redact_dsn,
            schema_status,
        )
        from gateway.store.postgres.schema import refusal

        if check:
            status = await schema_status(settings.store)
            if status.state is SchemaState.REFUSED:
                raise refusal(status, redact_dsn(settings.store))
            return status.found, SCHEMA_VERSION
        return await migrate(settings.store)
    if settings.store is not None:
        from gateway.registry.postgres import (
            SCHEMA_VERSION as REGISTRY_SCHEMA_VERSION,
        )
        from gateway.registry.postgres import migrate_registry, registry_schema_version

        if check:
            return await registry_schema_version(settings.store), REGISTRY_SCHEMA_VERSION
        return await migrate_registry(settings.store)
    return await _migrate_sqlite(settings, registry=registry, check=check)


async def _migrate_sqlite(
    settings: Settings, *, registry: bool, check: bool
) -> tuple[int | None, int]:
    """A SQLite store or Registry file, under its data directory's lock: a running daemon's
    file is never migrated beneath it (`DataDirLocked` names the directory)."""
    from gateway.store import DataDirLock
    from gateway.store.migrate import migrate_sqlite, stored_version
    from gateway.store.sqlite_store import SCHEMA, STORE_FILE

    if registry:
        from gateway.registry import SqliteRegistry
        from gateway.standalone import REGISTRY_FILE

        # The Registry file has one layout so far: opening it creates or checks it.
        if not check:
            settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            lock = DataDirLock.acquire(settings.data_dir)
            try:
                existed = (settings.data_dir / REGISTRY_FILE).exists()
                await (await SqliteRegistry.open(settings.data_dir / REGISTRY_FILE)).close()
            finally:
                lock.release()
            return (1 if existed else None), 1
        return (1 if (settings.data_dir / REGISTRY_FILE).exists() else None), 1
    path = settings.data_dir / STORE_FILE
    if check:
        return stored_version(path), SCHEMA.version
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = DataDirLock.acquire(settings.data_dir)
    try:
        return await migrate_sqlite(path)
    finally:
        lock.release()


def _cannot_start(error: BaseException) -> int:
    logger.error("cannot start: %s", error)
    print(f"harness-gateway: {error}", file=sys.stderr)
    return 1


class _Stoppable(Protocol):
    exit_code: int

    async def shutdown(self, *, skip_waits: bool = False) -> None: ...

    async def wait_stopped(self) -> None: ...


class _Listening(Protocol):
    @property
    def address(self) -> str: ...

    @property
    def metrics_address(self) -> str | None: ...

    @property
    def health_address(self) -> str | None: ...


def _addresses(process: _Listening) -> dict[str, str]:
    """The bound addresses a `ready` line names, `off` for a listener not configured."""
    return {
        "listen": process.address,
        "metrics": process.metrics_address or "off",
        "health": process.health_address or "off",
    }


async def _run_until_stopped(
    process: _Stoppable,
    ready: dict[str, str],
    *,
    on_hangup: Callable[[], Coroutine[object, object, object]] | None = None,
) -> int:
    """Log `ready`, shut down on SIGTERM or SIGINT (a second signal skips the waits), run
    `on_hangup` on SIGHUP, and return the exit code once stopped."""
    loop = asyncio.get_running_loop()
    shutdowns: list[asyncio.Task[None]] = []

    def on_signal() -> None:
        # A second signal skips the waits of steps 3 and 5 (operations.md §5).
        shutdowns.append(
            loop.create_task(process.shutdown(skip_waits=bool(shutdowns)), name="shutdown")
        )

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)
    reloads: set[asyncio.Task[object]] = set()
    if on_hangup is not None:
        hangup = on_hangup  # bound here, so the closure's type is not Optional

        def on_hup() -> None:
            task = loop.create_task(hangup(), name="reload")
            reloads.add(task)
            task.add_done_callback(reloads.discard)

        loop.add_signal_handler(signal.SIGHUP, on_hup)
    logger.info("ready", extra=ready)
    await process.wait_stopped()
    await asyncio.gather(*shutdowns, *reloads, return_exceptions=True)
    return process.exit_code


async def _router(settings: Settings) -> int:
    from gateway.registry import RegistryError
    from gateway.standalone import StandaloneRouter

    try:
        router = await StandaloneRouter.start(settings)
    except (OSError, ValueError, RegistryError) as error:
        return _cannot_start(error)
    return await _run_until_stopped(
        router,
        {"role": "router", **_addresses(router), "instance_id": router.instance_id},
    )


async def _registry(settings: Settings) -> int:
    from gateway.registry import RegistryError
    from gateway.standalone import StandaloneRegistry
    from gateway.store import DataDirLocked

    try:
        registry = await StandaloneRegistry.start(settings)
    except (DataDirLocked, OSError, ValueError, RegistryError) as error:
        return _cannot_start(error)
    return await _run_until_stopped(
        registry,
        {
            "role": "registry",
            **_addresses(registry),
            "store": settings.store_kind,
            "data_dir": str(registry.data_dir),
            "peer_token_file": str(registry.peer_token_path),
            # Public, and what daemons pin with --registry-public-key (docs/deploy.md).
            "registry_public_key": registry.registry_public_key,
        },
    )


async def _serve(settings: Settings) -> int:
    from gateway.app import Gateway
    from gateway.firewall.config import FirewallConfigError
    from gateway.registry import RegistryError
    from gateway.router import RouterUnavailable
    from gateway.store import DataDirLocked, StoreError

    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        gateway = await Gateway.start(settings)
    except DataDirLocked as error:
        logger.error("%s", error)
        print(f"harness-gateway: {error}", file=sys.stderr)
        return 1
    except FirewallConfigError as error:
        for problem in error.problems:
            logger.error("cannot start: %s", problem)
            print(f"harness-gateway: {problem}", file=sys.stderr)
        return 1
    except (OSError, ValueError, RegistryError, StoreError, RouterUnavailable) as error:
        # A bind failure, an unusable peer setting, a Registry to join that could not be
        # reached for its key, a store that refused (schema, lease, unreachable) or a NATS
        # Router that did not answer.
        return _cannot_start(error)
    return await _run_until_stopped(
        gateway,
        # SIGHUP re-reads the firewall file; streams and calls go on (firewall.md §4).
        on_hangup=gateway.reload_firewall,
        ready={
            "role": "serve",
            "mode": settings.mode.value,
            # Reported beside the mode: a daemon is embedded or joined whatever its store.
            "store": settings.store_kind,
            **_addresses(gateway),
            "data_dir": str(settings.data_dir),
            "admin_token_file": str(gateway.admin_token_path),
            **(
                {"peer_token_file": str(gateway.peer_token_path)}
                if gateway.peer_token_path is not None
                else {}
            ),
        },
    )


if __name__ == "__main__":
    sys.exit(main())

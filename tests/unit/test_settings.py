from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from gateway.settings import (
    Mode,
    Settings,
    SettingsError,
    describe,
    load_settings,
    parse_duration,
    parse_size,
)


def test_defaults_are_the_embedded_mode_on_loopback():
    settings = load_settings(env={"HOME": "/home/x"})
    assert settings.listen == "127.0.0.1:7770"
    assert settings.metrics_listen == "127.0.0.1:9770"
    assert settings.data_dir == Path("/home/x/.local/state/harness-gateway")
    assert settings.embedded
    assert settings.reflection_enabled
    assert settings.stream_window == 256


PG = "postgresql://harness@db:5432/harness"
"""A PostgreSQL store URL (nothing is opened by loading settings)."""
PEER = {"peer_token_file": "/run/peer-token"}
"""The flag every gRPC join needs."""


@pytest.mark.parametrize(
    ("flags", "mode", "store"),
    [
        ({}, Mode.EMBEDDED, "sqlite"),
        ({"store": PG}, Mode.EMBEDDED, "postgresql"),
        ({"expose_network": True}, Mode.EMBEDDED, "sqlite"),
        ({"router": "grpc://r:7771", "registry": "grpc://g:7772", **PEER}, Mode.JOINED, "sqlite"),
        ({"registry": "grpc://g:7772", **PEER}, Mode.JOINED, "sqlite"),
        ({"router": "nats://n:4222", "registry": "grpc://g:7772", **PEER}, Mode.JOINED, "sqlite"),
        (
            {"router": "nats://n:4222", "registry": "grpc://g:7772", "store": PG, **PEER},
            Mode.JOINED,
            "postgresql",
        ),
    ],
    ids=[
        "embedded-sqlite",
        "embedded-postgresql",
        "embedded-exposed",
        "joined-grpc",
        "joined-registry-only",
        "joined-nats",
        "joined-nats-postgresql",
    ],
)
def test_a_daemon_reports_embedded_or_joined_by_its_router_and_registry_and_its_store_apart(
    flags: dict[str, object], mode: Mode, store: str
):
    settings = load_settings(env={}, flags=flags)
    assert (settings.mode, settings.store_kind) == (mode, store)


def test_the_standalone_roles_report_their_role_as_their_mode():
    router = load_settings(
        env={}, flags={"registry": "grpc://g:7772", **PEER}, defaults={"role": "router"}
    )
    registry = load_settings(env={}, defaults={"role": "registry"})
    assert (router.mode, registry.mode) == (Mode.ROUTER, Mode.REGISTRY)
    assert {mode.value for mode in Mode} == {"embedded", "joined", "cluster", "router", "registry"}


def test_xdg_state_home_sets_the_data_directory():
    settings = load_settings(env={"XDG_STATE_HOME": "/state", "HOME": "/home/x"})
    assert settings.data_dir == Path("/state/harness-gateway")


def test_flags_win_over_variables_which_win_over_defaults():
    env = {"HARNESS_LISTEN": "0.0.0.0:1234", "HARNESS_COMMIT_DELAY": "5ms"}
    settings = load_settings(env=env, flags={"listen": "127.0.0.1:0"})
    assert settings.listen == "127.0.0.1:0"
    assert settings.commit_delay == pytest.approx(0.005)


def test_every_invalid_value_is_reported_at_once():
    env = {
        "HARNESS_LISTEN": "nope",
        "HARNESS_STREAM_WINDOW": "-1",
        "HARNESS_SEND_CERTIFY_TIMEOUT": "20m",
    }
    with pytest.raises(SettingsError) as raised:
        load_settings(env=env)
    assert len(raised.value.errors) == 3
    assert raised.value.errors[0].startswith("HARNESS_LISTEN:")


def test_metrics_can_be_turned_off():
    assert load_settings(env={"HARNESS_METRICS_LISTEN": "off"}).metrics_listen is None


@pytest.mark.parametrize(
    ("text", "seconds"), [("250ms", 0.25), ("2s", 2.0), ("15m", 900.0), ("1h", 3600.0), ("3", 3.0)]
)
def test_durations_take_units(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def test_sizes_take_units_and_garbage_is_refused():
    assert parse_size("1MiB") == 1 << 20
    assert parse_size("64KiB") == 65536
    for text in ["1 MB", "-1", "x"]:
        with pytest.raises(ValueError):
            parse_size(text)


def test_describe_lists_every_setting_as_plain_values():
    described = describe(Settings(data_dir=Path("/d")))
    assert described["data_dir"] == "/d"
    assert "admin_token_file" in described


def test_a_keepalive_faster_than_twice_the_accepted_interval_is_refused_at_load():
    with pytest.raises(SettingsError, match="GOAWAY too_many_pings"):
        load_settings(env={"HARNESS_KEEPALIVE_TIME": "15s"})
    with pytest.raises(SettingsError, match="keepalive_time"):
        load_settings(env={"HARNESS_KEEPALIVE_MIN_CLIENT_INTERVAL": "20s"})
    scaled = load_settings(
        env={"HARNESS_KEEPALIVE_TIME": "1s", "HARNESS_KEEPALIVE_MIN_CLIENT_INTERVAL": "500ms"}
    )
    assert (scaled.keepalive_time, scaled.keepalive_min_client_interval) == (1.0, 0.5)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"HARNESS_TLS_CERT_FILE": "/c.pem"}, "--tls-cert /c.pem is set without --tls-key"),
        ({"HARNESS_TLS_KEY_FILE": "/k.pem"}, "--tls-key /k.pem is set without --tls-cert"),
        ({"HARNESS_TLS_CLIENT_CA_FILE": "/ca.pem"}, "--tls-client-ca /ca.pem (mTLS) needs"),
        ({"HARNESS_PEER_TLS_CERT_FILE": "/p.pem"}, "--peer-tls-cert and --peer-tls-key"),
        (
            {"HARNESS_PEER_TLS_CA_FILE": "/ca.pem", "HARNESS_ROUTER": "grpc://h:1"},
            "no --router or --registry is grpcs://",
        ),
        ({"HARNESS_ROUTER": "grpc://h:1"}, "joining needs --peer-token-file"),
    ],
)
def test_half_tls_and_peer_configurations_are_refused_naming_the_files(env, named):
    with pytest.raises(SettingsError) as refused:
        load_settings(env=env)
    assert named in str(refused.value)


def test_grpcs_peers_are_kept_and_marked_as_tls():
    settings = load_settings(
        env={
            "HARNESS_ROUTER": "grpcs://router:7771",
            "HARNESS_REGISTRY": "registry:7772",
            "HARNESS_PEER_TOKEN_FILE": "/t",
            "HARNESS_PEER_TLS_CA_FILE": "/ca.pem",
        }
    )
    assert settings.router == "grpcs://router:7771"
    assert settings.registry == "grpc://registry:7772"
    assert settings.joins_over_tls


# --- NATS JetStream and PostgreSQL (docs/scale-out.md) ------------------------------------


def test_a_nats_router_is_a_list_of_servers_each_normalised_to_the_scheme():
    settings = load_settings(env={}, flags={"router": "nats://a:4222, b:4223,nats://c:4224/"})
    assert settings.router == "nats://a:4222,nats://b:4223,nats://c:4224"
    assert settings.router_is_nats
    assert settings.mode is Mode.JOINED
    tls = load_settings(env={"HARNESS_ROUTER": "tls://a:4222"})
    assert tls.router == "tls://a:4222"


@pytest.mark.parametrize(
    ("router", "says"),
    [
        ("nats://a:4222,tls://b:4222", "mixed"),
        ("nats://user:pw@a:4222", "--nats-creds"),
        ("nats://a", "HOST:PORT"),
        ("nats://a:99999", "HOST:PORT"),
        ("nats://a:4222,", "HOST:PORT"),
    ],
)
def test_a_malformed_nats_router_is_refused_saying_why(router: str, says: str):
    with pytest.raises(SettingsError) as refused:
        load_settings(env={}, flags={"router": router})
    assert says in str(refused.value)


def test_a_nats_router_needs_no_peer_token_but_a_grpc_registry_still_does():
    assert load_settings(env={}, flags={"router": "nats://a:4222"}).peer_token_file is None
    with pytest.raises(SettingsError, match="peer_token_file"):
        load_settings(env={}, flags={"router": "nats://a:4222", "registry": "grpc://r:7772"})


@pytest.mark.parametrize(
    "flags",
    [
        {"nats_replicas": "3"},
        {"nats_creds_file": "/creds"},
        {"nats_subject_prefix": "team"},
        {"router": "grpc://r:7771", "peer_token_file": "/t", "nats_max_age": "1h"},
    ],
)
def test_nats_options_without_a_nats_router_are_refused(flags: dict[str, str]):
    with pytest.raises(SettingsError, match="never be used"):
        load_settings(env={}, flags=flags)


def test_nats_options_are_checked():
    base = {"router": "nats://a:4222"}
    for flags, says in (
        ({"nats_replicas": "7"}, "1 to 5"),
        ({"nats_subject_prefix": "a.b"}, "subject token"),
        ({"nats_duplicate_window": "2h", "nats_max_age": "1h"}, "must not exceed"),
        ({"nats_tls_cert_file": "/c"}, "set together"),
    ):
        with pytest.raises(SettingsError, match=says):
            load_settings(env={}, flags={**base, **flags})
    auto = load_settings(env={}, flags={**base, "nats_replicas": "auto"})
    assert auto.nats_replicas is None


def test_a_postgresql_store_is_a_url_shown_without_its_password():
    url = "postgresql://harness:s3cret@db:5432/harness?sslmode=require&password=other"
    settings = load_settings(env={"HARNESS_STORE": url, "HARNESS_STORE_OWNER": "daemon-0"})
    assert settings.store == url
    assert settings.store_is_postgres
    shown = describe(settings)["store"]
    assert isinstance(shown, str)
    assert "s3cret" not in shown
    assert "other" not in shown
    assert shown == "postgresql://harness:***@db:5432/harness?sslmode=require&password=***"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ({"store": "mysql://db/x"}, "postgresql://"),
        ({"store_owner": "daemon-0"}, "only a PostgreSQL store"),
        ({"store": "postgresql://db/x", "store_owner": "-bad"}, "letters, digits"),
        ({"registry_key_file": "/key"}, "registry_key_file"),
    ],
)
def test_store_settings_are_checked(flags: dict[str, str], says: str):
    with pytest.raises(SettingsError, match=says):
        load_settings(env={}, flags=flags)


def test_only_a_postgresql_registry_reads_a_signing_key_file():
    settings = load_settings(
        env={},
        flags={"store": "postgresql://db/x", "registry_key_file": "/key"},
        defaults={"role": "registry"},
    )
    assert settings.registry_key_file == Path("/key")
    with pytest.raises(SettingsError, match="standalone Router keeps no store"):
        load_settings(
            env={},
            flags={"store": "postgresql://db/x", "registry": "grpc://r:7772"},
            defaults={"role": "router"},
        )


# --- Cluster mode (docs/design/cluster.md §1, §12) ----------------------------------------


CLUSTER = {
    "cluster": True,
    "store": PG,
    "seed_key_file": "/run/secrets/seed-key",
    "peer_token_file": "/run/secrets/peer-token",
    "registry_key_file": "/run/secrets/registry-key",
}
"""Flags of a replica that starts; the admin token file is `ADMIN` (a variable only)."""
ADMIN = {"HARNESS_ADMIN_TOKEN_FILE": "/run/secrets/admin-token"}


def refusals(env: Mapping[str, str], flags: Mapping[str, object], **defaults: object) -> list[str]:
    with pytest.raises(SettingsError) as refused:
        load_settings(env=env, flags=flags, defaults=defaults)
    return refused.value.errors


def test_a_replica_with_every_required_file_is_mode_cluster_with_reflection_off():
    settings = load_settings(env=ADMIN, flags=CLUSTER)
    assert (settings.mode, settings.store_kind) == (Mode.CLUSTER, "postgresql")
    assert not settings.embedded
    assert not settings.reflection_enabled
    assert settings.registry_key_file == Path("/run/secrets/registry-key")
    assert settings.cluster_partitions == 1024


def test_cluster_settings_come_from_their_variables_as_from_their_flags():
    from_env = load_settings(
        env={
            **ADMIN,
            "HARNESS_CLUSTER": "yes",
            "HARNESS_STORE": PG,
            "HARNESS_SEED_KEY_FILE": "/run/secrets/seed-key",
            "HARNESS_PEER_TOKEN_FILE": "/run/secrets/peer-token",
            "HARNESS_REGISTRY_KEY_FILE": "/run/secrets/registry-key",
            "HARNESS_REPLICA_ID": "gateway-0",
            "HARNESS_ADVERTISE_ADDRESS": "gateway-0.gateway:7770",
        }
    )
    from_flags = load_settings(
        env=ADMIN,
        flags={
            **CLUSTER,
            "replica_id": "gateway-0",
            "advertise_address": "gateway-0.gateway:7770",
        },
    )
    assert from_env == from_flags
    assert (from_env.replica, from_env.advertised) == ("gateway-0", "gateway-0.gateway:7770")


@pytest.mark.parametrize(
    ("missing", "says"),
    [
        ("store", "store: --cluster needs --store postgresql://"),
        ("seed_key_file", "seed_key_file: --cluster needs --seed-key-file"),
        ("peer_token_file", "peer_token_file: --cluster needs --peer-token-file"),
        ("registry_key_file", "registry_key_file: --cluster needs --registry-key-file"),
    ],
)
def test_a_replica_without_a_required_setting_is_refused_naming_it_alone(missing: str, says: str):
    flags = {name: value for name, value in CLUSTER.items() if name != missing}
    errors = refusals(ADMIN, flags)
    assert len(errors) == 1
    assert errors[0].startswith(says)


def test_a_replica_without_the_shared_admin_token_file_is_refused_naming_the_variable():
    errors = refusals({}, CLUSTER)
    assert len(errors) == 1
    assert errors[0].startswith("admin_token_file: --cluster needs an admin token file")
    assert "HARNESS_ADMIN_TOKEN_FILE" in errors[0]


def test_every_missing_requirement_of_a_replica_is_reported_at_once():
    errors = refusals({}, {"cluster": True})
    assert [error.split(":")[0] for error in errors] == [
        "store",
        "seed_key_file",
        "admin_token_file",
        "peer_token_file",
        "registry_key_file",
    ]


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ({"router": "nats://n:4222"}, "router: --cluster refuses --router"),
        ({"registry": "grpc://g:7772"}, "registry: --cluster refuses --registry"),
        ({"store_owner": "daemon-0"}, "store_owner: --cluster refuses --store-owner"),
        ({"serve_router": True}, "serve_router: --cluster refuses --serve-router"),
        ({"serve_registry": True}, "serve_registry: --cluster refuses --serve-registry"),
        ({"expose_network": True}, "expose_network: --cluster refuses --expose-network"),
        ({"cluster_partitions": "256"}, "cluster_partitions: --partitions"),
    ],
    ids=[
        "router",
        "registry",
        "store-owner",
        "serve-router",
        "serve-registry",
        "expose-network",
        "partitions",
    ],
)
def test_a_replica_refuses_what_a_cluster_never_uses(flags: dict[str, object], says: str):
    errors = refusals(ADMIN, {**CLUSTER, **flags})
    assert [error for error in errors if error.startswith(says)] != [], errors


def test_turning_exposure_off_explicitly_is_not_refused_on_a_replica():
    settings = load_settings(
        env=ADMIN, flags={**CLUSTER, "expose_network": False, "serve_router": False}
    )
    assert settings.mode is Mode.CLUSTER


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ({"replica_id": "gateway-0"}, "replica_id: --replica-id"),
        ({"advertise_address": "gateway-0:7770"}, "advertise_address: --advertise-address"),
        ({"seed_key_file": "/k"}, "seed_key_file: --seed-key-file"),
        ({"cluster_partitions": "256"}, "cluster_partitions: --partitions"),
    ],
)
def test_cluster_settings_without_cluster_are_refused_as_never_used(
    flags: dict[str, object], says: str
):
    for role in ("serve", "migrate"):
        errors = refusals({}, flags, role=role)
        assert len(errors) == 1
        assert errors[0].startswith(says)
        assert errors[0].endswith(
            "is set without --cluster (HARNESS_CLUSTER), so it would never be used"
        )


def test_the_registry_key_file_is_still_refused_on_a_daemon_that_is_not_a_replica():
    errors = refusals({}, {"store": PG, "registry_key_file": "/key"})
    assert errors == [
        "registry_key_file: only `harness-gateway registry --store postgresql://...` and "
        "`serve --cluster` read a signing key file (SQLite keeps the key in its database)"
    ]


def test_migrate_cluster_needs_the_store_and_the_seed_key_and_takes_the_partitions():
    settings = load_settings(
        env={},
        flags={"cluster": True, "store": PG, "seed_key_file": "/k", "cluster_partitions": "256"},
        defaults={"role": "migrate"},
    )
    assert (settings.cluster_partitions, settings.seed_key_file) == (256, Path("/k"))
    assert settings.mode is Mode.CLUSTER
    errors = refusals({}, {"cluster": True}, role="migrate")
    assert [error.split(":")[0] for error in errors] == ["store", "seed_key_file"]
    # A set-up needs no tokens: nothing is served.
    assert not any("token" in error for error in errors)


def test_migrate_cluster_refuses_a_replica_s_settings():
    errors = refusals(
        {},
        {
            "cluster": True,
            "store": PG,
            "seed_key_file": "/k",
            "replica_id": "gateway-0",
            "advertise_address": "gateway-0:7770",
        },
        role="migrate",
    )
    assert [error.split(":")[0] for error in errors] == ["replica_id", "advertise_address"]
    assert all("`migrate --cluster` never uses" in error for error in errors)


@pytest.mark.parametrize("role", ["router", "registry"])
def test_the_standalone_roles_are_never_replicas(role: str):
    flags = {"registry": "grpc://g:7772", **PEER} if role == "router" else {}
    errors = refusals({"HARNESS_CLUSTER": "true"}, flags, role=role)
    assert errors == [
        "cluster: --cluster (HARNESS_CLUSTER) is for `serve` and `migrate`; the standalone "
        f"{role} is never part of a cluster (docs/design/cluster.md §12.3)"
    ]


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ({"replica_id": "-gateway"}, "letters, digits"),
        ({"replica_id": "g" * 64}, "letters, digits"),
        ({"advertise_address": "gateway-0"}, "HOST:PORT"),
        ({"advertise_address": "gateway-0:0"}, "port from 1"),
        ({"advertise_address": "0.0.0.0:7770"}, "wildcard"),
        ({"advertise_address": "[::]:7770"}, "wildcard"),
        ({"cluster_partitions": "0"}, "1 to 65536"),
        ({"cluster_partitions": "65537"}, "1 to 65536"),
        ({"cluster": "maybe"}, "true or false"),
    ],
)
def test_malformed_cluster_values_are_refused_saying_why(flags: dict[str, object], says: str):
    errors = refusals(ADMIN, {**CLUSTER, **flags})
    assert any(says in error for error in errors), errors


def test_the_default_partitions_and_their_bound_are_the_cluster_package_s():
    from gateway.cluster.partitions import DEFAULT_PARTITIONS, MAX_PARTITIONS
    from gateway.settings import CLUSTER_PARTITIONS, CLUSTER_PARTITIONS_MAX

    assert (CLUSTER_PARTITIONS, CLUSTER_PARTITIONS_MAX) == (DEFAULT_PARTITIONS, MAX_PARTITIONS)
    assert Settings().cluster_partitions == DEFAULT_PARTITIONS


@pytest.mark.parametrize(
    ("listen", "advertised"),
    [
        ("127.0.0.1:7770", "127.0.0.1:7770"),
        ("gateway-0.gateway:7780", "gateway-0.gateway:7780"),
        ("0.0.0.0:7770", "replica-host:7770"),
        ("[::]:7771", "replica-host:7771"),
        (":::7772", "replica-host:7772"),
    ],
)
def test_the_advertised_address_defaults_to_the_listen_address_or_the_host_name(
    monkeypatch: pytest.MonkeyPatch, listen: str, advertised: str
):
    monkeypatch.setattr("socket.gethostname", lambda: "replica-host")
    settings = Settings(listen=listen, cluster=True)
    assert settings.advertised == advertised
    assert Settings(listen=listen, advertise_address="lb:443").advertised == "lb:443"


def test_the_replica_id_defaults_to_the_host_name(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("socket.gethostname", lambda: "gateway-7d9f")
    assert Settings(cluster=True).replica == "gateway-7d9f"
    assert Settings(cluster=True, replica_id="gateway-0").replica == "gateway-0"


def test_describe_shows_a_replica_s_mode_id_and_advertised_address():
    described = describe(
        load_settings(env=ADMIN, flags={**CLUSTER, "replica_id": "r0", "listen": "10.0.0.5:7770"})
    )
    assert (described["mode"], described["replica"], described["advertised"]) == (
        "cluster",
        "r0",
        "10.0.0.5:7770",
    )
    assert "advertised" not in describe(Settings())


def test_a_replica_takes_peer_tls_for_the_replicas_it_forwards_to():
    settings = load_settings(
        env=ADMIN,
        flags={
            **CLUSTER,
            "tls_cert_file": "/tls/cert.pem",
            "tls_key_file": "/tls/key.pem",
            "peer_tls_ca_file": "/tls/ca.pem",
            "peer_tls_cert_file": "/tls/client.pem",
            "peer_tls_key_file": "/tls/client-key.pem",
        },
    )
    assert settings.peer_tls_ca_file == Path("/tls/ca.pem")
    errors = refusals({}, {"peer_tls_ca_file": "/tls/ca.pem"})
    assert errors == [
        "peer_tls_ca_file: peer TLS is configured but no --router or --registry is "
        "grpcs://HOST:PORT and this is no cluster replica (--cluster), so it would never be used"
    ]

"""`gateway.rpc.tls`: every file is read, parsed and matched before grpc sees it (no sockets)."""

from __future__ import annotations

import datetime
import logging
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives import serialization

from gateway.rpc.tls import (
    TlsConfigError,
    TlsConfigReason,
    load_key_pair,
    peer_channel_credentials,
    server_credentials,
)
from gateway.settings import Settings
from tests.certs import (
    Pki,
    certificate_pem,
    key_pem,
    make_ca,
    make_server_cert,
    write_pki,
)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return write_pki(tmp_path / "pki")


def tls_settings(pki: Pki) -> Settings:
    """TLS on the listener with the test CA's server certificate."""
    return replace(Settings(), tls_cert_file=pki.server_cert, tls_key_file=pki.server_key)


def refusal(settings: Settings) -> TlsConfigError:
    with pytest.raises(TlsConfigError) as caught:
        server_credentials(settings)
    return caught.value


def test_no_certificate_means_plaintext():
    assert server_credentials(Settings()) is None


def test_a_matching_pair_gives_server_credentials(pki: Pki):
    assert isinstance(server_credentials(tls_settings(pki)), grpc.ServerCredentials)


def test_a_client_ca_gives_server_credentials_for_mtls(pki: Pki):
    settings = replace(tls_settings(pki), tls_client_ca_file=pki.ca)
    assert isinstance(server_credentials(settings), grpc.ServerCredentials)


def test_a_key_that_does_not_match_its_certificate_is_refused_naming_both_files(pki: Pki):
    error = refusal(replace(tls_settings(pki), tls_key_file=pki.client_key))
    assert error.reason is TlsConfigReason.KEY_MISMATCH
    assert str(error) == (
        f"the key in {pki.client_key} does not match the certificate in {pki.server_cert}"
    )
    assert error.files == (pki.client_key, pki.server_cert)


def test_the_key_is_matched_against_the_leaf_the_first_certificate_of_the_chain(
    pki: Pki, tmp_path: Path
):
    leaf_first = tmp_path / "leaf-first.pem"
    leaf_first.write_bytes(pki.server_cert.read_bytes() + pki.ca.read_bytes())
    assert server_credentials(replace(tls_settings(pki), tls_cert_file=leaf_first)) is not None
    ca_first = tmp_path / "ca-first.pem"
    ca_first.write_bytes(pki.ca.read_bytes() + pki.server_cert.read_bytes())
    error = refusal(replace(tls_settings(pki), tls_cert_file=ca_first))
    assert error.reason is TlsConfigReason.KEY_MISMATCH


def test_a_garbage_certificate_file_is_refused_naming_it(pki: Pki, tmp_path: Path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"this is not a certificate\n")
    error = refusal(replace(tls_settings(pki), tls_cert_file=garbage))
    assert error.reason is TlsConfigReason.NO_CERTIFICATE
    assert str(error) == f"{garbage} holds no PEM certificate"


def test_a_key_given_as_the_certificate_is_refused(pki: Pki):
    error = refusal(replace(tls_settings(pki), tls_cert_file=pki.server_key))
    assert error.reason is TlsConfigReason.NO_CERTIFICATE
    assert str(pki.server_key) in str(error)


def test_a_certificate_given_as_the_key_is_refused(pki: Pki):
    error = refusal(replace(tls_settings(pki), tls_key_file=pki.server_cert))
    assert error.reason is TlsConfigReason.NO_PRIVATE_KEY
    assert str(error) == f"{pki.server_cert} holds no PEM private key"


def test_an_encrypted_key_is_refused_since_grpc_takes_no_passphrase(pki: Pki, tmp_path: Path):
    key = serialization.load_pem_private_key(pki.server_key.read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    error = refusal(replace(tls_settings(pki), tls_key_file=encrypted))
    assert error.reason is TlsConfigReason.NO_PRIVATE_KEY
    assert f"the private key in {encrypted} is encrypted" in str(error)


def test_a_missing_file_is_refused_with_the_os_error(pki: Pki, tmp_path: Path):
    missing = tmp_path / "missing.pem"
    error = refusal(replace(tls_settings(pki), tls_cert_file=missing))
    assert error.reason is TlsConfigReason.UNREADABLE
    assert str(error) == f"cannot read {missing}: No such file or directory"
    assert isinstance(error.__cause__, FileNotFoundError)


def test_a_directory_as_the_key_is_refused_with_the_os_error(pki: Pki, tmp_path: Path):
    error = refusal(replace(tls_settings(pki), tls_key_file=tmp_path))
    assert error.reason is TlsConfigReason.UNREADABLE
    assert str(error) == f"cannot read {tmp_path}: Is a directory"


def test_a_client_ca_file_without_a_certificate_is_refused_naming_it(pki: Pki, tmp_path: Path):
    empty = tmp_path / "empty-ca.pem"
    empty.write_bytes(b"")
    error = refusal(replace(tls_settings(pki), tls_client_ca_file=empty))
    assert error.reason is TlsConfigReason.NO_CERTIFICATE
    assert str(error) == f"{empty} holds no PEM certificate"


def test_a_key_without_a_certificate_is_refused_rather_than_served_in_plaintext(pki: Pki):
    error = refusal(replace(Settings(), tls_key_file=pki.server_key))
    assert error.reason is TlsConfigReason.INCOMPLETE
    assert str(pki.server_key) in str(error)


def test_a_client_ca_without_a_certificate_is_refused_rather_than_served_in_plaintext(pki: Pki):
    # A plaintext listener here would pass `require_protected_listen` as if mTLS were on.
    error = refusal(replace(Settings(), tls_client_ca_file=pki.ca))
    assert error.reason is TlsConfigReason.INCOMPLETE
    assert str(pki.ca) in str(error)


def test_a_certificate_without_its_key_is_refused(pki: Pki):
    error = refusal(replace(tls_settings(pki), tls_key_file=None))
    assert error.reason is TlsConfigReason.INCOMPLETE
    assert str(error) == f"{pki.server_cert} is set without --tls-key"


def test_an_expired_certificate_is_a_warning_not_a_refusal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    ca = make_ca("expired test CA")
    now = datetime.datetime.now(datetime.UTC)
    expired = make_server_cert(
        ca, validity=(now - datetime.timedelta(days=2), now - datetime.timedelta(days=1))
    )
    cert, key = tmp_path / "expired.pem", tmp_path / "expired-key.pem"
    cert.write_bytes(certificate_pem(expired.certificate))
    key.write_bytes(key_pem(expired.key))
    with caplog.at_level(logging.WARNING, logger="gateway.rpc.tls"):
        pair = load_key_pair(cert, key)
    assert pair.certificate_chain == cert.read_bytes()
    assert pair.private_key == key.read_bytes()
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(f"TLS certificate expired file={cert} ")


def test_a_valid_certificate_logs_nothing(pki: Pki, caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.DEBUG, logger="gateway.rpc.tls"):
        server_credentials(replace(tls_settings(pki), tls_client_ca_file=pki.ca))
    assert caplog.records == []


def test_tls_config_error_is_a_value_error():
    assert issubclass(TlsConfigError, ValueError)


# --- peer links ------------------------------------------------------------------------------


def test_peer_credentials_without_settings_use_the_system_roots():
    assert isinstance(peer_channel_credentials(Settings()), grpc.ChannelCredentials)


def test_peer_credentials_pin_a_ca_and_present_a_client_certificate(pki: Pki):
    settings = replace(
        Settings(),
        peer_tls_ca_file=pki.ca,
        peer_tls_cert_file=pki.client_cert,
        peer_tls_key_file=pki.client_key,
    )
    assert isinstance(peer_channel_credentials(settings), grpc.ChannelCredentials)


def test_a_peer_client_key_that_does_not_match_is_refused_naming_both_files(pki: Pki):
    settings = replace(
        Settings(), peer_tls_cert_file=pki.client_cert, peer_tls_key_file=pki.other_client_key
    )
    with pytest.raises(TlsConfigError) as caught:
        peer_channel_credentials(settings)
    assert caught.value.reason is TlsConfigReason.KEY_MISMATCH
    assert str(caught.value) == (
        f"the key in {pki.other_client_key} does not match the certificate in {pki.client_cert}"
    )


def test_a_garbage_peer_ca_is_refused_naming_it(pki: Pki):
    settings = replace(Settings(), peer_tls_ca_file=pki.client_key)
    with pytest.raises(TlsConfigError, match="holds no PEM certificate") as caught:
        peer_channel_credentials(settings)
    assert caught.value.files == (pki.client_key,)


@pytest.mark.parametrize(
    ("settings", "missing"),
    [
        (Settings(peer_tls_cert_file=Path("client.pem")), "--peer-tls-key"),
        (Settings(peer_tls_key_file=Path("client-key.pem")), "--peer-tls-cert"),
    ],
)
def test_half_a_peer_client_pair_is_refused(settings: Settings, missing: str):
    with pytest.raises(TlsConfigError, match=missing) as caught:
        peer_channel_credentials(settings)
    assert caught.value.reason is TlsConfigReason.INCOMPLETE

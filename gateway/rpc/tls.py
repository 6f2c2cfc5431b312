"""TLS credentials for the gRPC listener and for `grpcs://` peer links, checked before use.

gRPC takes PEM bytes and says nothing useful when they are wrong: a key that does not belong
to its certificate surfaces as "Failed to bind to address", a garbage file as the same, and a
client CA bundle with no certificate in it only when the first client fails its handshake.
So every file is read once here, parsed with `cryptography`, and the private key is matched
against the leaf certificate before the very same bytes are handed to grpc. A refusal is a
`TlsConfigError` naming the file(s) and the problem (operations.md §4: "a half or mismatched
configuration refuses to start").

Files are read at start only; rotating a certificate is a rolling restart (operations.md §4).
An expired (or not yet valid) certificate is logged as a warning rather than refused: the
daemon can still serve health and let the operator see what is wrong, and clients refuse
the handshake themselves.
"""

from __future__ import annotations

import datetime
import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
)

from gateway.settings import Settings

logger = logging.getLogger(__name__)


class TlsConfigReason(enum.StrEnum):
    """Why a TLS configuration was refused."""

    UNREADABLE = "unreadable"
    """A file could not be read (missing, a directory, no permission): the OS error says."""
    NO_CERTIFICATE = "no-certificate"
    """A certificate or CA file holds no PEM certificate that can be parsed."""
    NO_PRIVATE_KEY = "no-private-key"
    """A key file holds no unencrypted PEM private key that can be parsed."""
    KEY_MISMATCH = "key-mismatch"
    """The private key is not the key of the leaf (first) certificate of its chain."""
    INCOMPLETE = "incomplete"
    """One half of a pair is set without the other (a certificate without its key, a
    client CA without a server certificate)."""


class TlsConfigError(ValueError):
    """A TLS file or pair that cannot be used; the gateway refuses to start.

    A `ValueError`, so the command line reports it as any other invalid setting. `str()`
    names the file(s) and the problem; `reason` and `files` say the same for code."""

    def __init__(self, reason: TlsConfigReason, files: Sequence[Path], message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.files = tuple(files)


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyPair:
    """A checked certificate chain and its private key, as the PEM bytes gRPC takes."""

    certificate_chain: bytes
    """The chain file as read, leaf first."""
    private_key: bytes
    """The key file as read."""


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """The gRPC listener's credentials: None (plaintext) without `tls_cert_file`.

    With `tls_client_ca_file`, clients must present a certificate chaining to it (mTLS).
    Raises `TlsConfigError` for an unreadable, unparsable or mismatched file."""
    if settings.tls_cert_file is None:
        if settings.tls_key_file is not None or settings.tls_client_ca_file is not None:
            # Serving plaintext here would silently drop the TLS the operator asked for.
            given = settings.tls_key_file or settings.tls_client_ca_file
            assert given is not None
            raise TlsConfigError(
                TlsConfigReason.INCOMPLETE,
                [given],
                f"{given} is configured for TLS but no listener certificate (--tls-cert) is",
            )
        return None
    pair = load_key_pair(settings.tls_cert_file, settings.tls_key_file, flag="--tls-key")
    if settings.tls_client_ca_file is None:
        return grpc.ssl_server_credentials([(pair.private_key, pair.certificate_chain)])
    client_ca = load_ca_bundle(settings.tls_client_ca_file)
    return grpc.ssl_server_credentials(
        [(pair.private_key, pair.certificate_chain)],
        root_certificates=client_ca,
        require_client_auth=True,
    )


def peer_channel_credentials(settings: Settings) -> grpc.ChannelCredentials:
    """Credentials of a `grpcs://` Router or Registry link.

    The peer is verified against `peer_tls_ca_file` (None: the system's roots); with
    `peer_tls_cert_file` and `peer_tls_key_file` the daemon presents a client certificate
    for peers that require mTLS. Raises `TlsConfigError` as `server_credentials` does."""
    root = None if settings.peer_tls_ca_file is None else load_ca_bundle(settings.peer_tls_ca_file)
    if settings.peer_tls_cert_file is None:
        if settings.peer_tls_key_file is not None:
            raise TlsConfigError(
                TlsConfigReason.INCOMPLETE,
                [settings.peer_tls_key_file],
                f"--peer-tls-key {settings.peer_tls_key_file} is set without --peer-tls-cert",
            )
        return grpc.ssl_channel_credentials(root_certificates=root)
    pair = load_key_pair(
        settings.peer_tls_cert_file, settings.peer_tls_key_file, flag="--peer-tls-key"
    )
    return grpc.ssl_channel_credentials(
        root_certificates=root,
        private_key=pair.private_key,
        certificate_chain=pair.certificate_chain,
    )


def load_key_pair(cert_file: Path, key_file: Path | None, *, flag: str = "a key") -> KeyPair:
    """Read a certificate chain and its key and check that they belong together.

    `flag` names the missing setting when `key_file` is None. Raises `TlsConfigError`."""
    if key_file is None:
        raise TlsConfigError(
            TlsConfigReason.INCOMPLETE, [cert_file], f"{cert_file} is set without {flag}"
        )
    chain_bytes = _read(cert_file)
    key_bytes = _read(key_file)
    leaf = _certificates(cert_file, chain_bytes)[0]
    try:
        key = load_pem_private_key(key_bytes, password=None)
    except TypeError:
        # gRPC takes no passphrase, so an encrypted key could never be used.
        raise TlsConfigError(
            TlsConfigReason.NO_PRIVATE_KEY,
            [key_file],
            f"the private key in {key_file} is encrypted; an unencrypted PEM key is needed",
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise TlsConfigError(
            TlsConfigReason.NO_PRIVATE_KEY, [key_file], f"{key_file} holds no PEM private key"
        ) from None
    try:
        leaf_public = leaf.public_key().public_bytes(
            Encoding.DER, PublicFormat.SubjectPublicKeyInfo
        )
    except UnsupportedAlgorithm:
        raise TlsConfigError(
            TlsConfigReason.NO_CERTIFICATE,
            [cert_file],
            f"the certificate in {cert_file} has a public key of an unsupported type",
        ) from None
    key_public = key.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    if key_public != leaf_public:
        raise TlsConfigError(
            TlsConfigReason.KEY_MISMATCH,
            [key_file, cert_file],
            f"the key in {key_file} does not match the certificate in {cert_file}",
        )
    _warn_if_outside_validity(cert_file, leaf)
    return KeyPair(certificate_chain=chain_bytes, private_key=key_bytes)


def load_ca_bundle(ca_file: Path) -> bytes:
    """Read a CA bundle holding at least one PEM certificate; returns it as read.

    Raises `TlsConfigError`."""
    data = _read(ca_file)
    for certificate in _certificates(ca_file, data):
        _warn_if_outside_validity(ca_file, certificate)
    return data


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise TlsConfigError(
            TlsConfigReason.UNREADABLE,
            [path],
            f"cannot read {path}: {error.strerror or error}",
        ) from error


def _certificates(path: Path, data: bytes) -> list[x509.Certificate]:
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError:
        certificates = []
    if not certificates:
        raise TlsConfigError(
            TlsConfigReason.NO_CERTIFICATE, [path], f"{path} holds no PEM certificate"
        )
    return certificates


def _warn_if_outside_validity(path: Path, certificate: x509.Certificate) -> None:
    now = datetime.datetime.now(datetime.UTC)
    if certificate.not_valid_after_utc < now:
        logger.warning(
            "TLS certificate expired file=%s subject=%s not_after=%s",
            path,
            certificate.subject.rfc4514_string(),
            certificate.not_valid_after_utc.isoformat(),
        )
    elif certificate.not_valid_before_utc > now:
        logger.warning(
            "TLS certificate not yet valid file=%s subject=%s not_before=%s",
            path,
            certificate.subject.rfc4514_string(),
            certificate.not_valid_before_utc.isoformat(),
        )

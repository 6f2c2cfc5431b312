"""Certificates made inside a test, with `cryptography`: no fixture files that expire.

`write_pki(directory)` writes a trusted CA, a server certificate for `127.0.0.1` and
`localhost` and a client certificate signed by it, and a second, untrusted CA with its own
client certificate, as PEM files, and returns their paths. Keys are ECDSA P-256: BoringSSL
(grpc) takes them, and they are made in microseconds.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=1)
"""How long a test certificate is valid: the test, with room for a skewed clock."""
BACKDATE = datetime.timedelta(minutes=5)
"""How far before now a test certificate becomes valid (clock skew)."""


@dataclass(frozen=True, slots=True)
class Authority:
    """A CA: its key and self-signed certificate."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate


@dataclass(frozen=True, slots=True)
class Issued:
    """A certificate signed by an `Authority`, and its key."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate


@dataclass(frozen=True, slots=True, kw_only=True)
class Pki:
    """PEM files written by `write_pki`."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    """A second CA that nothing trusts."""
    other_client_cert: Path
    """A client certificate signed by `other_ca`."""
    other_client_key: Path


def new_key() -> ec.EllipticCurvePrivateKey:
    """An ECDSA P-256 key."""
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


Validity = tuple[datetime.datetime, datetime.datetime]
"""(not before, not after)."""


def current_validity() -> Validity:
    """From a little before now until a day from now."""
    now = datetime.datetime.now(datetime.UTC)
    return now - BACKDATE, now + VALIDITY


def _builder(
    subject: str,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    validity: Validity | None = None,
) -> x509.CertificateBuilder:
    not_before, not_after = validity or current_validity()
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
    )


def make_ca(name: str) -> Authority:
    """A self-signed CA named `name`."""
    key = new_key()
    certificate = (
        _builder(name, _name(name), key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Authority(key=key, certificate=certificate)


def _issue(
    ca: Authority,
    subject: str,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName],
    validity: Validity | None,
) -> Issued:
    key = new_key()
    builder = (
        _builder(subject, ca.certificate.subject, key.public_key(), validity)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return Issued(key=key, certificate=builder.sign(ca.key, hashes.SHA256()))


def make_server_cert(
    ca: Authority, name: str = "localhost", *, validity: Validity | None = None
) -> Issued:
    """A server certificate for `127.0.0.1`, `::1` and `localhost`, signed by `ca`; valid
    now unless `validity` says otherwise (an expired certificate, say)."""
    return _issue(
        ca,
        name,
        ExtendedKeyUsageOID.SERVER_AUTH,
        [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ],
        validity,
    )


def make_client_cert(ca: Authority, name: str = "client") -> Issued:
    """A client certificate named `name`, signed by `ca`."""
    return _issue(ca, name, ExtendedKeyUsageOID.CLIENT_AUTH, [], None)


def certificate_pem(certificate: x509.Certificate) -> bytes:
    """`certificate` as PEM."""
    return certificate.public_bytes(serialization.Encoding.PEM)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """`key` as unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_pki(directory: Path) -> Pki:
    """Write a trusted CA, its server and client certificates, and an untrusted CA with a
    client certificate of its own, into `directory` (created if needed)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca("harness test CA")
    server = make_server_cert(ca)
    client = make_client_cert(ca)
    other_ca = make_ca("untrusted test CA")
    other_client = make_client_cert(other_ca, "stranger")
    files = {
        "ca": certificate_pem(ca.certificate),
        "server_cert": certificate_pem(server.certificate),
        "server_key": key_pem(server.key),
        "client_cert": certificate_pem(client.certificate),
        "client_key": key_pem(client.key),
        "other_ca": certificate_pem(other_ca.certificate),
        "other_client_cert": certificate_pem(other_client.certificate),
        "other_client_key": key_pem(other_client.key),
    }
    paths: dict[str, Path] = {}
    for name, data in files.items():
        path = directory / f"{name.replace('_', '-')}.pem"
        path.write_bytes(data)
        paths[name] = path
    return Pki(**paths)

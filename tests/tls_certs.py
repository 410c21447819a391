"""Certificates made at test time: a CA of the test's own and certificates it signs, for TLS nats-servers.

Nothing is committed: a key in the repository would be a key everyone has. EC P-256 keys, since they are made in
a millisecond where an RSA key takes tens on a loaded two-core machine.
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

LOOPBACK_NAMES = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class TlsFilesForTest:
    """A CA, a certificate it signed for the names given (a server's, and a route's: it serves both ends), and a
    client certificate it signed; PEM files under one directory."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _san(names: tuple[str, ...]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _signed(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    names: tuple[str, ...] = (),
    usages: tuple[x509.ObjectIdentifier, ...] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # a clock a little behind still accepts it
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)  # cert and CRL signing
        builder = builder.add_extension(usage, critical=True)
        builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        usage = x509.KeyUsage(True, False, False, False, False, False, False, False, False)  # digital signature
        builder = builder.add_extension(usage, critical=True)
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    if names:
        builder = builder.add_extension(_san(names), critical=False)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_tls(directory: Path, names: tuple[str, ...] = LOOPBACK_NAMES, label: str = "yantra-test") -> TlsFilesForTest:
    """A fresh CA under `directory` and the certificates it signed: one for `names` (server and client use, as a
    cluster node's is both), and a client's."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"{label} CA")
    ca_cert = _signed(f"{label} CA", ca_key, ca_name, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    both = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)
    server_cert = _signed(f"{label} server", server_key, ca_name, ca_key, names=names, usages=both)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = _signed(f"{label} client", client_key, ca_name, ca_key, usages=(ExtendedKeyUsageOID.CLIENT_AUTH,))
    files = TlsFilesForTest(
        ca=directory / "ca.pem",
        cert=directory / "server.pem",
        key=directory / "server-key.pem",
        client_cert=directory / "client.pem",
        client_key=directory / "client-key.pem",
    )
    _write_cert(ca_cert, files.ca)
    _write_cert(server_cert, files.cert)
    _write_key(server_key, files.key)
    _write_cert(client_cert, files.client_cert)
    _write_key(client_key, files.client_key)
    return files

"""The certificate files of `yantra up --secure`, in DIR/secure: a CA and a server certificate it signed, made there
on first use and reused after, so a CA that clients on other machines were given keeps working across restarts.

`plan_tls` decides (pure), from what the files are (`read_tls_facts`): reuse them, make what is missing, or refuse
in one line when they do not fit together. It never overwrites a file, so certificates a user put there (signed by a
CA of their own) are used as they are. Keys are written readable by their owner alone, and one readable by others is
refused. The certificates are made with `cryptography`, imported only here and only when --secure is asked for.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from services.core.nats_launcher import connect_host
from services.core.settings import is_loopback

SECURE_DIR = "secure"  # under the data dir, mode 0700
CA_CERT, CA_KEY = "ca.pem", "ca-key.pem"
SERVER_CERT, SERVER_KEY = "server.pem", "server-key.pem"
CLI_PASSWORD = "cli.password"
LOOPBACK_NAMES = ("127.0.0.1", "::1", "localhost")
WILDCARDS = ("0.0.0.0", "::", "")
# A CA outlives many server certificates: a server's can be signed again with ca-key.pem, and clients keep trusting.
CA_DAYS = 3650
SERVER_DAYS = 825  # what browsers cap a server certificate at; nats-server has no cap of its own


class TlsFilesError(ValueError):
    """The certificate files cannot be read or made, in one line."""


# ---------------------------------------------------------------------------------------------- the names it holds


@dataclass(frozen=True)
class MachineNames:
    """What this machine is called and reached by from elsewhere: a certificate for a server listening on every
    interface names them all."""

    hostname: str = ""
    fqdn: str = ""
    addresses: tuple[str, ...] = ()


def machine_names() -> MachineNames:
    hostname = socket.gethostname()
    fqdn = socket.getfqdn()
    addresses: list[str] = []
    try:
        addresses += socket.gethostbyname_ex(hostname)[2]
    except OSError:
        pass
    try:  # the address this machine sends from by default (connecting a UDP socket sends nothing)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: never routed, only looked up in the routing table
            addresses.append(probe.getsockname()[0])
    except OSError:
        pass
    return MachineNames(hostname, fqdn, tuple(dict.fromkeys(addresses)))


def cert_names(host: str, machine: MachineNames) -> tuple[str, ...]:
    """The names a new server certificate holds: loopback's; the host it listens on; and, beyond loopback, every
    name and address this machine is known by (clients elsewhere connect by one of them)."""
    names = [*LOOPBACK_NAMES]
    bare = host.strip("[]")
    if bare not in WILDCARDS:
        names.append(bare)
    if not is_loopback(bare):
        names += [machine.hostname, machine.fqdn, *machine.addresses]
    return tuple(dict.fromkeys(n for n in names if n))


def needed_names(host: str, machine: MachineNames) -> tuple[str, ...]:
    """The names a certificate found in DIR/secure must hold to be reused: the one this machine's clients connect
    by, the host it listens on, and, on every interface, the machine's name."""
    bare = host.strip("[]")
    names = [connect_host(bare)]
    if bare not in WILDCARDS:
        names.append(bare)
    elif machine.hostname:
        names.append(machine.hostname)
    return tuple(dict.fromkeys(names))


# ---------------------------------------------------------------------------------------------- the files (pure)


@dataclass(frozen=True)
class CertFacts:
    """A certificate file as read: `problem` says why it cannot be used as one ("" when it can)."""

    problem: str = ""
    is_ca: bool = False
    not_after: datetime.datetime | None = None
    names: frozenset[str] = frozenset()  # its subject alternative names: DNS names and IP addresses


@dataclass(frozen=True)
class KeyFacts:
    problem: str = ""
    mode: int = 0o600


@dataclass(frozen=True)
class TlsFacts:
    """What DIR/secure holds: None for a file that is not there."""

    ca: CertFacts | None = None
    ca_key: KeyFacts | None = None
    server: CertFacts | None = None
    server_key: KeyFacts | None = None
    ca_key_matches: bool = False  # ca-key.pem is ca.pem's key
    server_key_matches: bool = False  # server-key.pem is server.pem's key
    server_signed_by_ca: bool = False  # ca.pem's key signed server.pem


@dataclass(frozen=True)
class TlsPlan:
    """What to do with DIR/secure: "reuse" its files, "make" what is missing (the CA too when `make_ca`), or
    "refuse" (`reason`, one line)."""

    action: str
    make_ca: bool = False
    reason: str = ""


def _refuse(reason: str) -> TlsPlan:
    return TlsPlan("refuse", reason=reason)


def plan_tls(facts: TlsFacts, needed: tuple[str, ...], now: datetime.datetime, where: str) -> TlsPlan:
    """Reuse, make or refuse (pure). Nothing there: make a CA and a server certificate. A CA with its key and no
    server pair: sign a new pair (how a server certificate is renewed). Anything else must fit together as it is:
    keys readable by their owner alone, each key its certificate's, the server's signed by the CA, neither expired,
    the server's naming every name in `needed`; a file is never overwritten."""
    files = {CA_CERT: facts.ca, CA_KEY: facts.ca_key, SERVER_CERT: facts.server, SERVER_KEY: facts.server_key}
    present = [name for name, found in files.items() if found is not None]
    if not present:
        return TlsPlan("make", make_ca=True)
    start_over = f"or remove {where} to make a new CA (clients elsewhere then need the new {CA_CERT})"
    for name in present:
        if files[name].problem:  # type: ignore[union-attr]
            return _refuse(f"{where}/{name}: {files[name].problem}; replace it, {start_over}")  # type: ignore[union-attr]
    for name, key in ((CA_KEY, facts.ca_key), (SERVER_KEY, facts.server_key)):
        if key is not None and key.mode & 0o077:
            return _refuse(
                f"{where}/{name} may be read by other users (mode {key.mode:o}): a key others could read is no"
                f" secret; chmod 600 it if none did, {start_over}"
            )
    ca = facts.ca
    if ca is None:
        return _refuse(
            f"{where} has {', '.join(present)} but no {CA_CERT}: clients could not verify the server; restore it,"
            f" {start_over}"
        )
    if not ca.is_ca:
        return _refuse(f"{where}/{CA_CERT} is not a CA certificate; replace it, {start_over}")
    if ca.not_after is not None and ca.not_after <= now:
        return _refuse(f"{where}/{CA_CERT} expired on {ca.not_after:%Y-%m-%d}: remove {where} to make a new CA")
    if facts.ca_key is not None and not facts.ca_key_matches:
        return _refuse(f"{where}/{CA_KEY} is not the key of {CA_CERT}; restore the right one, {start_over}")
    renew = f"remove {SERVER_CERT} and {SERVER_KEY} from {where}: the next start signs a new pair with {CA_KEY}"
    if facts.ca_key is None:
        renew = f"put a {SERVER_CERT} and {SERVER_KEY} signed by {CA_CERT} there ({CA_KEY} is not there to sign one)"
    server = facts.server
    if server is None and facts.server_key is None:
        return TlsPlan("make") if facts.ca_key is not None else _refuse(f"{where} has no {SERVER_CERT}: {renew}")
    if server is None or facts.server_key is None:
        have, lack = (SERVER_CERT, SERVER_KEY) if server is not None else (SERVER_KEY, SERVER_CERT)
        return _refuse(f"{where} has {have} but no {lack}: restore it, or {renew}")
    if not facts.server_key_matches:
        return _refuse(f"{where}/{SERVER_KEY} is not the key of {SERVER_CERT}: restore the right one, or {renew}")
    if not facts.server_signed_by_ca:
        return _refuse(
            f"{where}/{SERVER_CERT} is not signed by {CA_CERT}: clients given {CA_CERT} could not verify it; {renew}"
        )
    if server.not_after is not None and server.not_after <= now:
        return _refuse(f"{where}/{SERVER_CERT} expired on {server.not_after:%Y-%m-%d}: {renew}")
    missing = [name for name in needed if name not in server.names]
    if missing:
        return _refuse(
            f"{where}/{SERVER_CERT} does not name {missing[0]}, which clients connect by (it names"
            f" {', '.join(sorted(server.names)) or 'nothing'}): {renew}"
        )
    return TlsPlan("reuse")


# ---------------------------------------------------------------------------------------------- the files (I/O)


@dataclass(frozen=True)
class SecureFiles:
    root: Path

    @property
    def ca(self) -> Path:
        return self.root / CA_CERT

    @property
    def ca_key(self) -> Path:
        return self.root / CA_KEY

    @property
    def cert(self) -> Path:
        return self.root / SERVER_CERT

    @property
    def key(self) -> Path:
        return self.root / SERVER_KEY

    @property
    def cli_password(self) -> Path:
        return self.root / CLI_PASSWORD  # not a certificate's, but kept beside them: services.core.stack_secure


def _crypto():
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
    except ImportError:
        raise TlsFilesError(
            "--secure reads and makes its certificates with the `cryptography` package, which is not installed:"
            " pip install cryptography"
        ) from None
    return x509, hashes, serialization, ec


def read_tls_facts(files: SecureFiles) -> TlsFacts:
    """What the four files in DIR/secure are (I/O; the decision is plan_tls's)."""
    x509, _, serialization, _ = _crypto()

    def cert(path: Path):
        try:
            loaded = x509.load_pem_x509_certificate(path.read_bytes())
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError) as exc:
            return CertFacts(problem=f"not a PEM certificate ({getattr(exc, 'strerror', None) or exc})"), None
        try:
            is_ca = loaded.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        try:
            san = loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            names = {*san.get_values_for_type(x509.DNSName), *map(str, san.get_values_for_type(x509.IPAddress))}
        except x509.ExtensionNotFound:
            names = set()
        return CertFacts(is_ca=is_ca, not_after=loaded.not_valid_after_utc, names=frozenset(names)), loaded

    def key(path: Path):
        try:
            data, mode = path.read_bytes(), path.stat().st_mode & 0o777
            return KeyFacts(mode=mode), serialization.load_pem_private_key(data, password=None)
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError, TypeError) as exc:  # TypeError: a key that wants a passphrase
            return KeyFacts(problem=f"not an unencrypted PEM key ({getattr(exc, 'strerror', None) or exc})"), None

    def public(key_or_cert) -> bytes:
        return key_or_cert.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def pair(certificate, private) -> bool:
        return certificate is not None and private is not None and public(certificate) == public(private)

    (ca, ca_cert), (ca_key, ca_private) = cert(files.ca), key(files.ca_key)
    (server, server_cert), (server_key, server_private) = cert(files.cert), key(files.key)
    signed = False
    if ca_cert is not None and server_cert is not None:
        try:
            server_cert.verify_directly_issued_by(ca_cert)
            signed = True
        except Exception:  # InvalidSignature, or a ValueError for an issuer name or key type that differs
            signed = False
    return TlsFacts(
        ca, ca_key, server, server_key, pair(ca_cert, ca_private), pair(server_cert, server_private), signed
    )


def write_private(path: Path, data: bytes) -> None:
    """A new file readable by its owner alone from the start; never one that is there (plan_tls said make)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def make_tls_files(files: SecureFiles, names: tuple[str, ...], make_ca: bool, now: datetime.datetime) -> None:
    """A CA (when `make_ca`; else the one in `files`, with its key) and a server certificate it signs for `names`,
    usable by a client too (a cluster's nodes present it to each other on their routes). EC P-256: made in a
    millisecond, where an RSA key takes tens on a loaded machine."""
    x509, hashes, serialization, ec = _crypto()
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def pem_key(private) -> bytes:
        return private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def name(common: str):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    start = now - datetime.timedelta(minutes=5)  # a peer whose clock is a little behind still accepts it
    if make_ca:
        ca_private = ec.generate_private_key(ec.SECP256R1())
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name("yantra stack CA"))
            .issuer_name(name("yantra stack CA"))
            .public_key(ca_private.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_private.public_key()), critical=False)
            .sign(ca_private, hashes.SHA256())
        )
        write_private(files.ca_key, pem_key(ca_private))
        files.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    else:
        ca_cert = x509.load_pem_x509_certificate(files.ca.read_bytes())
        ca_private = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
    entries: list = []
    for entry in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(entry)))
        except ValueError:
            entries.append(x509.DNSName(entry))
    private = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(name("yantra nats-server"))
        .issuer_name(ca_cert.subject)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(now + datetime.timedelta(days=SERVER_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        .add_extension(x509.SubjectAlternativeName(entries), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_private.public_key()), critical=False)
        .sign(ca_private, hashes.SHA256())
    )
    write_private(files.key, pem_key(private))
    files.cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))

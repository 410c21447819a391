"""NATS security, both ends: what a nats-server's config says (accounts, per-service users, TLS for clients and for
a cluster's routes) and how a client speaks TLS to it and reports a refusal.

The server side is pure: `server_security_lines` and `route_tls_lines` render config blocks from a `NatsSecurity`,
and `security_problem` / `listener_problem` say why one must not be used. The nats_launcher (one node) and
nats_cluster (N nodes) write them into configs readable by their owner alone.

Accounts: APP holds the project's streams (JetStream on), one user per service, so a leaked credential is one
service's, revoked alone; SYS is the system account (`system_account`), for the server's own traffic and an
operator's monitoring, with JetStream off. Passwords are stored as bcrypt hashes ("$2b$..."), which nats-server
checks: a copied config (a backup, a support bundle) does not give the passwords away. bcrypt comes from the C
library's crypt (libxcrypt, on Debian, Ubuntu and Fedora), not a Python package: the `bcrypt` wheel is not among
the pinned dependencies. Where crypt cannot do bcrypt, the password is stored as given, in the 0600 config.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import secrets
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

from services.core.settings import NatsAuth, NatsTls, is_loopback, nats_servers, redact_url

APP_ACCOUNT = "APP"
SYS_ACCOUNT = "SYS"
# The users of the APP account `service_credentials` draws: each service, and the `yantra` commands and TUI.
SERVICES = ("server", "profiler", "coder", "judge", "skillstore", "cli")
USER_PREFIX = "yantra-"
# nats' own `nats server passwd` default. The server checks a hash on each connection: 0.1 s at cost 11 on a loaded
# two-core machine (measured: 0.12 s to make one through libxcrypt), paid once per service start.
BCRYPT_COST = 11
# Seconds a TLS handshake may take; nats-server's default, 0.5 s, is short for a loaded two-core machine.
TLS_TIMEOUT_S = 2
CRYPT_DATA_BYTES = 32768  # sizeof(struct crypt_data) in libxcrypt: crypt_rn's scratch space, so calls may overlap


def quoted(text: str) -> str:
    # nats-server's config reads a double-quoted string with JSON's escapes
    return json.dumps(text)


@dataclass(frozen=True)
class TlsFiles:
    """A listener's TLS: its certificate and key, and the CA a peer's certificate must be signed by when `verify`
    (mutual TLS: a client, or another node of the cluster, presents one)."""

    cert_file: Path
    key_file: Path
    ca_file: Path | None = None
    verify: bool = False


@dataclass(frozen=True)
class AccountUser:
    """A user of an account; `password` as the config holds it: a bcrypt hash, or (no bcrypt) the password.
    `publish`: the subjects it may publish to (services.core.owners), `publish_denied` the ones it may not among
    them; None: no restriction (an operator's user)."""

    user: str
    password: str = field(repr=False)
    publish: tuple[str, ...] | None = None
    publish_denied: tuple[str, ...] = ()


@dataclass(frozen=True)
class NatsSecurity:
    """What a nats-server requires. No `app_users`: no accounts (the launcher's `auth`, or nothing, applies)."""

    app_users: tuple[AccountUser, ...] = ()
    sys_users: tuple[AccountUser, ...] = ()
    tls: TlsFiles | None = None  # the client listener
    route_tls: TlsFiles | None = None  # a cluster's routes


# ---------------------------------------------------------------------------------------------- the server's config


def tls_block(tls: TlsFiles, indent: str = "") -> list[str]:
    inner = [f"cert_file: {quoted(str(tls.cert_file))}", f"key_file: {quoted(str(tls.key_file))}"]
    if tls.ca_file is not None:
        inner.append(f"ca_file: {quoted(str(tls.ca_file))}")
    if tls.verify:
        inner.append("verify: true")
    inner.append(f"timeout: {TLS_TIMEOUT_S}")
    return [f"{indent}tls {{", *(f"{indent}  {line}" for line in inner), f"{indent}}}"]


def _permissions(u: AccountUser) -> str:
    if u.publish is None:
        return ""
    allow = ", ".join(quoted(subject) for subject in u.publish)
    deny = ", ".join(quoted(subject) for subject in u.publish_denied)
    return f", permissions: {{ publish: {{ allow: [{allow}], deny: [{deny}] }} }}"


def _users(users: Iterable[AccountUser], indent: str) -> list[str]:
    rows = [f"{indent}  {{ user: {quoted(u.user)}, password: {quoted(u.password)}{_permissions(u)} }}" for u in users]
    return [f"{indent}users: [", *rows, f"{indent}]"]


def accounts_block(app_users: Iterable[AccountUser], sys_users: Iterable[AccountUser]) -> list[str]:
    """The APP account (JetStream on) and the SYS account, named the system account."""
    sys_users = tuple(sys_users)
    lines = ["accounts {", f"  {APP_ACCOUNT}: {{", "    jetstream: enabled", *_users(app_users, "    "), "  }"]
    lines += [f"  {SYS_ACCOUNT}: {{", *(_users(sys_users, "    ") if sys_users else []), "  }", "}"]
    return lines + [f"system_account: {SYS_ACCOUNT}"]


def server_security_lines(security: NatsSecurity | None) -> list[str]:
    """The top-level blocks of a node's config: the accounts when there are users, TLS on the client listener."""
    if security is None:
        return []
    lines = accounts_block(security.app_users, security.sys_users) if security.app_users else []
    return lines + (tls_block(security.tls) if security.tls else [])


def route_tls_lines(security: NatsSecurity | None) -> list[str]:
    """The `tls` block inside a node's `cluster` block: the routes between nodes speak TLS."""
    if security is None or security.route_tls is None:
        return []
    return tls_block(security.route_tls, "  ")


def security_problem(security: NatsSecurity | None, auth: NatsAuth | None = None) -> str | None:
    """Why nats-server must not be started with `security` (and the single credential `auth`), in one line; None
    when it may."""
    if security is None:
        return None
    if security.app_users and auth is not None:
        return "accounts and a single credential for every client do not go together: give each client a user"
    if security.sys_users and not security.app_users:
        return f"a {SYS_ACCOUNT} account without the {APP_ACCOUNT} account: no client could use JetStream"
    names = [u.user for u in security.app_users + security.sys_users]
    doubled = sorted({name for name in names if names.count(name) > 1})
    if doubled:
        return f"user {doubled[0]} is given twice (each user is one account's)"
    if any(not name for name in names):
        return "a user without a name"
    for what, tls in (("client TLS", security.tls), ("route TLS", security.route_tls)):
        if tls is not None and tls.verify and tls.ca_file is None:
            return f"{what} verifies its peers' certificates, but names no CA file to verify them with"
    return None


def listener_problem(what: str, host: str, tls: TlsFiles | None) -> str | None:
    """Why `what` must not listen on `host` as configured; None when it may. Beyond loopback, TLS is required: a
    password sent in clear on a network is one anyone on its path may read."""
    if tls is not None or is_loopback(host):
        return None
    return f"{what} would listen on {host} without TLS: give it a certificate, or listen on 127.0.0.1"


# ---------------------------------------------------------------------------------------------- users and passwords


@cache
def _libcrypt() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("crypt")
    try:
        lib = ctypes.CDLL(name or "libcrypt.so.1")
        gensalt, crypt = lib.crypt_gensalt_rn, lib.crypt_rn  # libxcrypt's reentrant pair; glibc's old crypt lacks it
    except (OSError, AttributeError):
        return None
    gensalt.restype, crypt.restype = ctypes.c_char_p, ctypes.c_char_p
    gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
    return lib


def bcrypt_hash(password: str, cost: int = BCRYPT_COST) -> str | None:
    """`password`'s bcrypt hash ("$2b$<cost>$..."); None where the C library cannot make one."""
    lib = _libcrypt()
    if lib is None:
        return None
    salt_bytes = os.urandom(16)
    setting = ctypes.create_string_buffer(128)
    if not lib.crypt_gensalt_rn(b"$2b$", cost, salt_bytes, len(salt_bytes), setting, len(setting)):
        return None
    scratch = ctypes.create_string_buffer(CRYPT_DATA_BYTES)
    hashed = lib.crypt_rn(password.encode(), setting.value, scratch, len(scratch))
    # libxcrypt answers a setting it cannot use with a string starting "*" rather than NULL
    if not hashed or not hashed.startswith(b"$2"):
        return None
    return hashed.decode()


def service_user(service: str) -> str:
    return f"{USER_PREFIX}{service}"


def service_credentials(services: Iterable[str] = SERVICES) -> dict[str, NatsAuth]:
    """A user and a fresh random password for each of `services`: what each presents to the APP account."""
    return {name: NatsAuth(user=service_user(name), password=secrets.token_urlsafe(24)) for name in services}


def account_users(credentials: Mapping[str, NatsAuth], cost: int = BCRYPT_COST) -> tuple[AccountUser, ...]:
    """The users a config lists for `credentials` (keyed by service), each password bcrypt-hashed (stored as given
    without bcrypt), each service's user allowed to publish only what it owns (services.core.owners)."""
    from services.core import owners

    users = []
    for name, auth in credentials.items():
        allowed = owners.publish_allowed(name)
        denied = owners.JS_API_DENIED if allowed is not None else ()
        users.append(AccountUser(auth.user, bcrypt_hash(auth.password, cost) or auth.password, allowed, denied))
    return tuple(users)


# ---------------------------------------------------------------------------------------------- the client's side


class TlsSettingError(ValueError):
    """A client's TLS files cannot be used; the message names the setting, in one line."""


def env_nats_tls(env: dict[str, str] | None = None) -> NatsTls | None:
    """The TLS files the environment gives (NATS_CA, NATS_CERT, NATS_KEY); None when it gives none. How a service
    started with them, or by `yantra up`, gets them; Settings.from_env, which every process reads first, has
    refused a file that is not there in one line."""
    env = os.environ if env is None else env
    ca, cert, key = env.get("NATS_CA", ""), env.get("NATS_CERT", ""), env.get("NATS_KEY", "")
    return NatsTls(ca, cert, key) if ca or cert else None


def wants_tls(url: str, tls: NatsTls | None) -> bool:
    """Whether a client must speak TLS to `url`: a tls:// server, or TLS files given."""
    return tls is not None or any(urlsplit(server).scheme == "tls" for server in nats_servers(url))


def client_ssl_context(tls: NatsTls) -> ssl.SSLContext:
    """A context that verifies the server against NATS_CA (none: the system's CAs) and presents NATS_CERT and
    NATS_KEY when given; TlsSettingError when a file cannot be read or is not what it should be."""
    try:
        context = ssl.create_default_context(cafile=tls.ca_file or None)
    except FileNotFoundError:
        raise TlsSettingError(f"NATS_CA={tls.ca_file}: no such file") from None
    except (OSError, ssl.SSLError) as exc:
        raise TlsSettingError(f"NATS_CA={tls.ca_file}: not a PEM certificate file ({_reason(exc)})") from None
    if tls.cert_file:
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file or None)
        except FileNotFoundError:
            raise TlsSettingError(f"NATS_CERT={tls.cert_file} or NATS_KEY={tls.key_file}: no such file") from None
        except (OSError, ssl.SSLError) as exc:
            raise TlsSettingError(
                f"NATS_CERT={tls.cert_file} and NATS_KEY={tls.key_file}: not a certificate and its key ({_reason(exc)})"
            ) from None
    return context


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def tls_failed(exc: BaseException | None) -> bool:
    """Whether `exc` is a TLS handshake with NATS failing for good: the server's certificate cannot be verified, or
    the server answered with an alert (it wants a client certificate, or does not trust this one). A connection
    cut mid-handshake (a server restarting) is not: that one is worth trying again."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return True
    return isinstance(exc, ssl.SSLError) and "ALERT" in (exc.reason or "")


def refused_line(url: str, auth: NatsAuth | None) -> str:
    """NATS refusing a client's credentials, in one line that names the user (never a password or token)."""
    user = auth.user if auth is not None and not auth.token else ""
    user = user or next((urlsplit(s).username or "" for s in nats_servers(url) if urlsplit(s).username), "")
    refused = f"the credentials for user {user}" if user else "the connection"
    return f"NATS refused {refused} at {redact_url(url)}: authorization violation"


def tls_failure_line(url: str, tls: NatsTls | None, exc: BaseException) -> str:
    """A failed TLS handshake with NATS in one line, naming the setting that would fix it."""
    shown = redact_url(url)
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = exc.verify_message or _reason(exc)
        if tls is None or not tls.ca_file:
            fix = "set NATS_CA to the file of the CA that signed it (PEM)"
        elif "mismatch" in why:
            fix = "the certificate does not name the host in NATS_URL: connect by a name it holds"
        else:
            fix = f"NATS_CA={tls.ca_file} is not the CA that signed it"
        return f"NATS at {shown} presented a certificate this client cannot verify ({why}): {fix}"
    why = _reason(exc)
    if "CERTIFICATE_REQUIRED" in why and (tls is None or not tls.cert_file):
        fix = "it asks for a client certificate: set NATS_CERT and NATS_KEY"
    elif tls is not None and tls.cert_file:
        fix = f"check that its CA signed NATS_CERT={tls.cert_file}"
    else:
        fix = "see the server's log"
    return f"NATS at {shown} refused the TLS handshake ({why}): {fix}"


def downgrade_line(url: str, sent_credential: bool) -> str:
    """A server that does not speak TLS to a client told to, in one line."""
    line = (
        f"NATS at {redact_url(url)} does not speak TLS, but this client was told to (NATS_CA, NATS_CERT or a"
        " tls:// NATS_URL): it will not go on in clear"
    )
    # nats-py sends the credential with CONNECT, right after the server's INFO, before anyone can look
    return line + ("; the credential already went in clear: change it" if sent_credential else "")


def _not_tls_eof_noise(record) -> bool:
    return "eof_received() has no effect when using ssl" not in record.getMessage()


def quiet_tls_eof_warning() -> None:
    """Drop asyncio's "returning true from eof_received() has no effect when using ssl": nats-py's protocol returns
    true at every close of a TLS connection, so every command on a secure stack ended with that line, which says
    nothing to a user."""
    import logging

    logging.getLogger("asyncio").addFilter(_not_tls_eof_noise)

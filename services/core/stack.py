"""The embedded default: a local nats-server and each service as its own process."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from services.core.nats_launcher import LocalNats, die_with_parent, start_nats
from services.core.settings import Settings

STACK_FILE = "stack.json"
NATS_LOG = "nats.log"


class StackError(RuntimeError):
    pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def running_stack(data_dir: Path) -> dict | None:
    """The stack another `yantra up` started on this data dir, if it is still alive."""
    path = data_dir / STACK_FILE
    try:
        info = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None
    return info if _alive(int(info.get("pid", -1))) else None


def check_data_dir(data_dir: Path) -> None:
    """StackError, in one line, when `data_dir` cannot be a data dir: it, or the nearest of its parents
    that exists, is not a directory. Every command that reads or writes the data dir checks this first."""
    existing = data_dir
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if existing.is_dir():
        return
    if existing == data_dir:
        problem = "exists and is not a directory"
    else:
        problem = f"cannot be created: {existing} is not a directory"
    raise StackError(f"the data dir {data_dir} {problem}; give --data-dir (or YANTRA_DATA_DIR) a directory")


def resolve_nats_url(settings: Settings) -> str:
    """NATS_URL when set, else the embedded server of a running `yantra up`."""
    if settings.nats_url:
        return settings.nats_url
    info = running_stack(settings.data_dir)
    if info:
        return info["nats_url"]
    raise StackError(f"no NATS server: NATS_URL is unset and no `yantra up` is running on {settings.data_dir}")


def resolve_server_addr(settings: Settings) -> str:
    info = running_stack(settings.data_dir)
    return info["server_addr"] if info and not os.environ.get("YANTRA_SERVER_ADDR") else settings.server_addr


@dataclass
class Stack:
    settings: Settings
    nats: LocalNats | None
    nats_url: str
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def log_dir(self) -> Path:
        return self.settings.data_dir / "logs"

    def child_env(self) -> dict[str, str]:
        env = {**os.environ, **self.settings.env(), "NATS_URL": self.nats_url, "PYTHONUNBUFFERED": "1"}
        return env

    def start_service(self, name: str) -> subprocess.Popen:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            [sys.executable, "-m", f"services.{name}"],
            env=self.child_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches `yantra up`, which stops the services in order
            preexec_fn=die_with_parent,  # and a `yantra up` that is killed outright takes them with it
        )
        self.procs[name] = proc
        return proc

    def stop_service(self, name: str, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def dead(self) -> list[tuple[str, int]]:
        return [(n, p.returncode) for n, p in self.procs.items() if p.poll() is not None]

    def nats_exit_code(self) -> int | None:
        """The embedded nats-server's exit code once it has exited; None while it runs (or none is embedded)."""
        return self.nats.process.poll() if self.nats else None

    def restart_nats(self) -> None:
        """Start the embedded nats-server again on the same port and JetStream store: nothing stored is lost,
        and every service's client reconnects to the same URL by itself (they retry forever)."""
        assert self.nats is not None
        self.nats = start_nats(self.nats.store_dir, port=self.nats.port, log_file=self.settings.data_dir / NATS_LOG)
        self.record()

    def record(self) -> None:
        """Write where the stack runs and its current pids (for `yantra` commands, and for a second `up`)."""
        info = {"pid": os.getpid(), "nats_url": self.nats_url, "server_addr": self.settings.server_addr}
        info["instance_id"] = self.settings.instance_id
        info["pids"] = {name: proc.pid for name, proc in self.procs.items()}
        if self.nats:
            info["pids"]["nats-server"] = self.nats.process.pid
        path = self.settings.data_dir / STACK_FILE
        tmp = path.with_name(f".{STACK_FILE}.{os.getpid()}")
        tmp.write_text(json.dumps(info))
        os.replace(tmp, path)  # whole or not at all: a reader never sees half a file

    def log_tail(self, name: str, lines: int = 15) -> str:
        try:
            return "\n".join((self.log_dir / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.nats:
            self.nats.stop()
        (self.settings.data_dir / STACK_FILE).unlink(missing_ok=True)


def ports_of(addr: str) -> tuple[int, ...]:
    """The port of a "host:port" address, as a tuple to avoid; empty when it names none."""
    port = addr.rpartition(":")[2]
    return (int(port),) if port.isdigit() else ()


def start_stack(settings: Settings, services: tuple[str, ...]) -> Stack:
    """Start nats-server (unless NATS_URL) and `services`, each a process; the server gets a fresh instance id
    (YANTRA_INSTANCE_ID), which its Health answers with, so the caller can tell it from another on the address."""
    settings = settings.model_copy(update={"instance_id": secrets.token_hex(8)})
    data_dir = settings.data_dir
    check_data_dir(data_dir)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StackError(f"cannot create the data dir {data_dir}: {exc.strerror or exc}") from exc
    other = running_stack(data_dir)
    if other:
        raise StackError(f"`yantra up` is already running on {data_dir} (pid {other['pid']}); use it, or stop it first")
    nats = None
    if settings.nats_url:
        url = settings.nats_url
    else:
        # the inference server is not listening yet: a free port picked now could be the one it is about to take
        nats = start_nats(data_dir / "nats", log_file=data_dir / NATS_LOG, avoid=ports_of(settings.server_addr))
        url = nats.url
    stack = Stack(settings, nats, url)
    stack.record()
    try:
        for name in services:
            stack.start_service(name)
        stack.record()
    except Exception:
        stack.stop()
        raise
    return stack

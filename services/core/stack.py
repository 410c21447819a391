"""The embedded default: a local nats-server and each service as its own process."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from services.core.launches import JUDGE, Launch, LaunchError, judges_notice, plan_launches, visible_gpus
from services.core.nats_cluster import LocalCluster, start_cluster
from services.core.nats_launcher import LocalNats, die_with_parent, free_port, port_problem, start_nats
from services.core.secrets_env import SECRETS
from services.core.settings import Settings

STACK_FILE = "stack.json"
NATS_LOG = "nats.log"
NATS_CONFIG = "nats.conf"  # the embedded nats-server's config (mode 0600: it may hold the credential)
NATS_CLUSTER_DIR = "nats-cluster"  # `yantra up --cluster N`: node-I/ (its store), node-I.conf, node-I.log
NATS_PORT_FILE = "nats.port"  # the embedded nats-server's port, reused by the next `yantra up` on this data dir


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


def _disk_full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _what_to_do(exc: OSError) -> str:
    if _disk_full(exc):
        return "free some space there, or give --data-dir (or YANTRA_DATA_DIR) a directory on another disk"
    return "give --data-dir (or YANTRA_DATA_DIR) a writable directory"


def write_problem(path: Path, exc: OSError) -> str:
    """Why `path` could not be written, in one line that says what to do."""
    return f"cannot write {path}: {exc.strerror or exc}; {_what_to_do(exc)}"


def check_writable(data_dir: Path) -> None:
    """StackError, in one line, unless `data_dir` can be made and a file written in it: found before anything
    starts, not as an OSError halfway through (a read-only or full file system, a directory we may not write).

    A probe file rather than os.access: as root, access() says yes to a directory whose mode forbids writing,
    and neither it nor the mode tells of a full disk or an immutable directory."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StackError(f"cannot create the data dir {data_dir}: {exc.strerror or exc}") from exc
    probe = data_dir / f".write-probe.{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)  # a full disk may accept the write into the page cache and fail only here
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
    except OSError as exc:
        state = "is full" if _disk_full(exc) else "is not writable"
        raise StackError(f"the data dir {data_dir} {state} ({exc.strerror or exc}); {_what_to_do(exc)}") from exc


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
    notices: list[str] = field(default_factory=list)  # what the user should know about how it started
    cluster: LocalCluster | None = None  # `yantra up --cluster N`: its nodes, instead of `nats`
    launches: dict[str, Launch] = field(default_factory=dict)  # by name; a name not here runs the service it names

    @property
    def log_dir(self) -> Path:
        return self.settings.data_dir / "logs"

    def child_env(self) -> dict[str, str]:
        env = {**os.environ, **self.settings.env(), "NATS_URL": self.nats_url, "PYTHONUNBUFFERED": "1"}
        embedded = self.nats or self.cluster
        if embedded is not None:
            # The embedded server's credential, where every NATS client of ours reads one (Bus.connect);
            # a NATS_USER or NATS_TOKEN of the user's is for another server.
            for var in ("NATS_USER", "NATS_PASSWORD", "NATS_TOKEN", "NATS_PASSWORD_FILE", "NATS_TOKEN_FILE"):
                env.pop(var, None)
            if embedded.auth is not None:
                env["NATS_TOKEN"] = embedded.auth.token
        for name in SECRETS:  # a secret read from NAME_FILE is passed on as NAME: both set would be refused
            if env.get(name):
                env.pop(f"{name}_FILE", None)
        return env

    def start_service(self, name: str) -> subprocess.Popen:
        """Start the process `name` (a service, or one of several judges: its Launch) logging to logs/NAME.log;
        StackError when the log cannot be opened."""
        launch = self.launches.get(name, Launch(name, name))
        path = self.log_dir / f"{name}.log"
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = open(path, "ab")  # noqa: SIM115 - owned by the child
        except OSError as exc:
            raise StackError(write_problem(path, exc)) from exc
        proc = subprocess.Popen(
            [sys.executable, "-m", f"services.{launch.service}"],
            env={**self.child_env(), **dict(launch.env)},
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
        """Start the embedded nats-server again on the same port, JetStream store and credential: nothing
        stored is lost, and every service's client reconnects to the same URL by itself (they retry forever).

        One still running is stopped first: with JetStream disabled (its store's disk was full) it serves on,
        and only a new process enables JetStream again. Its config is left as it is when unchanged, so this
        writes nothing. RuntimeError (StackError for a file) when it does not start; the caller records."""
        old = self.nats
        assert old is not None
        old.stop()
        try:
            self.nats = start_nats(
                old.store_dir,
                port=old.port,
                log_file=self.settings.data_dir / NATS_LOG,
                auth=old.auth,
                config_file=old.config_file,
            )
        except OSError as exc:
            raise StackError(write_problem(old.config_file, exc)) from exc

    def record(self) -> None:
        """Write where the stack runs and its current pids (for `yantra` commands, and for a second `up`);
        StackError when the file cannot be written."""
        info = {"pid": os.getpid(), "nats_url": self.nats_url, "server_addr": self.settings.server_addr}
        info["instance_id"] = self.settings.instance_id
        info["pids"] = {name: proc.pid for name, proc in self.procs.items()}
        if self.nats:
            info["pids"]["nats-server"] = self.nats.process.pid
        for i, node in enumerate(self.cluster.nodes if self.cluster else []):
            info["pids"][f"nats-server-{i + 1}"] = node.process.pid
        path = self.settings.data_dir / STACK_FILE
        tmp = path.with_name(f".{STACK_FILE}.{os.getpid()}")
        try:
            tmp.write_text(json.dumps(info))
            os.replace(tmp, path)  # whole or not at all: a reader never sees half a file
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StackError(write_problem(path, exc)) from exc

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
        if self.cluster:
            self.cluster.stop()
        with contextlib.suppress(OSError):  # a data dir that turned read-only: everything stopped all the same
            (self.settings.data_dir / STACK_FILE).unlink(missing_ok=True)


def ports_of(addr: str) -> tuple[int, ...]:
    """The port of a "host:port" address, as a tuple to avoid; empty when it names none."""
    port = addr.rpartition(":")[2]
    return (int(port),) if port.isdigit() else ()


def _remembered_port(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() and 1 <= int(text) <= 65535 else None


def _unavailable(port: int, avoid: tuple[int, ...]) -> str | None:
    """Why the embedded nats-server cannot have `port` now; None when it can."""
    return "it is YANTRA_SERVER_ADDR's port" if port in avoid else port_problem(port)


def choose_nats_port(settings: Settings) -> tuple[int, str | None]:
    """The embedded nats-server's port, and a line for the user when it is not the one they had.

    --nats-port (YANTRA_NATS_PORT) when given: StackError when it cannot be had. Else the one this data dir's
    last `yantra up` used (NATS_PORT_FILE), so a client or a config that wrote the URL down keeps working
    across restarts; when that one is taken, another free one, saying so. The inference server's port is
    never taken: it is not listening yet, so the OS could offer it."""
    avoid = ports_of(settings.server_addr)
    asked = settings.nats_port
    if asked is not None:
        problem = _unavailable(asked, avoid)
        if problem:
            raise StackError(
                f"cannot start the embedded nats-server on port {asked} (--nats-port or YANTRA_NATS_PORT): {problem};"
                " free it, or choose another port"
            )
        return asked, None
    path = settings.data_dir / NATS_PORT_FILE
    remembered = _remembered_port(path)
    if remembered is None:
        return free_port(avoid), None
    problem = _unavailable(remembered, avoid)
    if problem is None:
        return remembered, None
    port = free_port(avoid)
    return port, (
        f"the embedded nats-server's port {remembered} (this data dir's last) cannot be had: {problem}; "
        f"it listens on {port} instead (--nats-port or YANTRA_NATS_PORT pins one)"
    )


def _start_embedded_nats(settings: Settings) -> tuple[LocalNats, str | None]:
    data_dir = settings.data_dir
    port, notice = choose_nats_port(settings)
    port_file = data_dir / NATS_PORT_FILE
    if _remembered_port(port_file) != port:
        try:
            port_file.write_text(f"{port}\n")
        except OSError as exc:
            raise StackError(write_problem(port_file, exc)) from exc
    config = data_dir / NATS_CONFIG
    try:
        auth = settings.nats_auth()  # YANTRA_ADMIN_TOKEN, when set: the bus needs what the Admin reads need
        nats = start_nats(data_dir / "nats", port=port, log_file=data_dir / NATS_LOG, auth=auth, config_file=config)
    except OSError as exc:  # its store, its log or its config
        failed = Path(exc.filename) if exc.filename and not Path(exc.filename).name.startswith(".") else config
        raise StackError(write_problem(failed, exc)) from exc
    return nats, notice


def _start_embedded_cluster(settings: Settings, nodes: int) -> LocalCluster:
    root = settings.data_dir / NATS_CLUSTER_DIR
    try:
        return start_cluster(root, nodes, auth=settings.nats_auth(), avoid=ports_of(settings.server_addr))
    except OSError as exc:  # a store, a log or a config
        raise StackError(write_problem(Path(exc.filename) if exc.filename else root, exc)) from exc


def start_stack(
    settings: Settings,
    services: tuple[str, ...],
    cluster: int = 0,
    judges: int = 1,
    gpus: tuple[str, ...] | None = None,
) -> Stack:
    """Start nats-server (unless NATS_URL) and `services`, each a process; the server gets a fresh instance id
    (YANTRA_INSTANCE_ID), which its Health answers with, so the caller can tell it from another on the address.
    `cluster`: that many nats-server nodes instead of one, every stream kept on each (YANTRA_NATS_REPLICAS).
    `judges`: that many judge processes (plan_launches), pinned round-robin to `gpus` (None: visible_gpus).

    StackError, in one line, for what stops it: a data dir that cannot be written, a port that cannot be had."""
    if gpus is None:
        gpus = visible_gpus(settings.device) if JUDGE in services else ()
    try:  # a bad number of judges fails before anything starts
        launches = plan_launches(services, judges, gpus)
    except LaunchError as exc:
        raise StackError(str(exc)) from exc
    settings = settings.model_copy(update={"instance_id": secrets.token_hex(8)})
    if cluster and (settings.nats_url or settings.nats_port is not None):
        which = "NATS_URL names another server" if settings.nats_url else "--nats-port (YANTRA_NATS_PORT) is one's"
        raise StackError(f"--cluster starts its own nodes on free ports, and {which}: unset one of them")
    if cluster:
        settings = settings.model_copy(update={"nats_replicas": cluster})
    data_dir = settings.data_dir
    check_data_dir(data_dir)
    check_writable(data_dir)
    other = running_stack(data_dir)
    if other:
        raise StackError(f"`yantra up` is already running on {data_dir} (pid {other['pid']}); use it, or stop it first")
    nats, notice, nodes = None, None, None
    if cluster:
        nodes = _start_embedded_cluster(settings, cluster)
        url = nodes.url
    elif settings.nats_url:
        if settings.nats_port is not None:
            raise StackError(
                "--nats-port (YANTRA_NATS_PORT) is the embedded nats-server's port, and NATS_URL names another"
                " server: unset one of them"
            )
        url = settings.nats_url
    else:
        nats, notice = _start_embedded_nats(settings)
        url = nats.url
    notices = [line for line in (notice, judges_notice(launches)) if line]
    stack = Stack(settings, nats, url, notices=notices, cluster=nodes, launches={p.name: p for p in launches})
    try:
        stack.record()
        for launch in launches:
            stack.start_service(launch.name)
        stack.record()
    except BaseException:
        stack.stop()
        raise
    return stack

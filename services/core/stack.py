"""The embedded default: a local nats-server and each service as its own process."""

from __future__ import annotations

import contextlib
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
from services.core.nats_launcher import LocalNats, UnsafeConfig, die_with_parent, start_nats
from services.core.secrets_env import SECRETS
from services.core.settings import NatsAuth, NatsTls, Settings
from services.core.stack_checks import (
    NATS_PORT_FILE,
    StackError,
    check_data_dir,
    check_writable,
    choose_nats_port,
    ports_of,
    remembered_port,
    write_problem,
)
from services.core.stack_secure import (
    LOOPBACK,
    SecureStackError,
    StackSecurity,
    embedded_nats_problem,
    prepare_security,
)

STACK_FILE = "stack.json"
NATS_LOG = "nats.log"
NATS_CONFIG = "nats.conf"  # the embedded nats-server's config (mode 0600: it may hold the credential)
NATS_CLUSTER_DIR = "nats-cluster"  # `yantra up --cluster N`: node-I/ (its store), node-I.conf, node-I.log


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
    security: StackSecurity | None = None  # `yantra up --secure`: accounts, a user per service, TLS

    @property
    def client_auth(self) -> NatsAuth | None:
        """The credential `yantra up` itself (its JetStream probe, the demo's run) connects with."""
        return self.security.client_auth if self.security else self.settings.nats_auth()

    @property
    def client_tls(self) -> NatsTls | None:
        return self.security.client_tls if self.security else self.settings.nats_tls()

    @property
    def log_dir(self) -> Path:
        return self.settings.data_dir / "logs"

    def child_env(self) -> dict[str, str]:
        env = {**os.environ, **self.settings.env(), "NATS_URL": self.nats_url, "PYTHONUNBUFFERED": "1"}
        embedded = self.nats or self.cluster
        if embedded is not None:
            # The embedded server's credential, where every NATS client of ours reads one (Bus.connect);
            # a NATS_USER or NATS_TOKEN of the user's is for another server.
            # Its TLS files likewise (a secure stack gives each service its own, start_service).
            for var in ("NATS_USER", "NATS_PASSWORD", "NATS_TOKEN", "NATS_PASSWORD_FILE", "NATS_TOKEN_FILE"):
                env.pop(var, None)
            for var in ("NATS_CA", "NATS_CERT", "NATS_KEY"):
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
        # a secure stack's service gets its own user and password, and no other's (StackSecurity.service_env)
        own = self.security.service_env(launch.service) if self.security else {}
        proc = subprocess.Popen(
            [sys.executable, "-m", f"services.{launch.service}"],
            env={**self.child_env(), **own, **dict(launch.env)},
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
                security=self.security.nats if self.security else None,  # the same hashes: the config is unchanged
                host=old.host,
            )
        except OSError as exc:
            raise StackError(write_problem(old.config_file, exc)) from exc

    def record(self) -> None:
        """Write where the stack runs and its current pids (for `yantra` commands, and for a second `up`);
        StackError when the file cannot be written."""
        info = {"pid": os.getpid(), "nats_url": self.nats_url, "server_addr": self.settings.server_addr}
        info["instance_id"] = self.settings.instance_id
        if self.settings.nats_replicas:  # a command that makes the streams first makes them with the cluster's copies
            info["nats_replicas"] = self.settings.nats_replicas
        if self.security:  # where a command finds the CA and its password: paths, never a password
            info["secure"] = self.security.record()
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


def _start_embedded_nats(settings: Settings, security: StackSecurity | None, host: str) -> tuple[LocalNats, str | None]:
    data_dir = settings.data_dir
    port, notice = choose_nats_port(settings)
    port_file = data_dir / NATS_PORT_FILE
    if remembered_port(port_file) != port:
        try:
            port_file.write_text(f"{port}\n")
        except OSError as exc:
            raise StackError(write_problem(port_file, exc)) from exc
    config = data_dir / NATS_CONFIG
    try:
        # YANTRA_ADMIN_TOKEN, when set: the bus needs what the Admin reads need; a secure stack has a user per client
        auth = None if security else settings.nats_auth()
        nats = start_nats(
            data_dir / "nats",
            port=port,
            log_file=data_dir / NATS_LOG,
            auth=auth,
            config_file=config,
            security=security.nats if security else None,
            host=host,
        )
    except OSError as exc:  # its store, its log or its config
        failed = Path(exc.filename) if exc.filename and not Path(exc.filename).name.startswith(".") else config
        raise StackError(write_problem(failed, exc)) from exc
    return nats, notice


def _start_embedded_cluster(settings: Settings, nodes: int, security: StackSecurity | None, host: str) -> LocalCluster:
    root = settings.data_dir / NATS_CLUSTER_DIR
    try:
        return start_cluster(
            root,
            nodes,
            auth=None if security else settings.nats_auth(),
            avoid=ports_of(settings.server_addr),
            security=security.nats if security else None,
            host=host,
        )
    except OSError as exc:  # a store, a log or a config
        raise StackError(write_problem(Path(exc.filename) if exc.filename else root, exc)) from exc


def start_stack(
    settings: Settings,
    services: tuple[str, ...],
    cluster: int = 0,
    judges: int = 1,
    gpus: tuple[str, ...] | None = None,
    *,
    secure: bool = False,
    nats_host: str = LOOPBACK,
) -> Stack:
    """Start nats-server (unless NATS_URL) and `services`, each a process; the server gets a fresh instance id
    (YANTRA_INSTANCE_ID), which its Health answers with, so the caller can tell it from another on the address.
    `cluster`: that many nats-server nodes instead of one, every stream kept on each (YANTRA_NATS_REPLICAS).
    `judges`: that many judge processes (plan_launches), pinned round-robin to `gpus` (None: visible_gpus).
    `secure`: nats-server requires a user per service and TLS (services.core.stack_secure); `nats_host`: where it
    listens, beyond loopback only when secure.

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
    problem = embedded_nats_problem(settings.nats_url, nats_host, secure)
    if problem:
        raise StackError(problem)
    if cluster:
        settings = settings.model_copy(update={"nats_replicas": cluster})
    data_dir = settings.data_dir
    check_data_dir(data_dir)
    check_writable(data_dir)
    other = running_stack(data_dir)
    if other:
        raise StackError(f"`yantra up` is already running on {data_dir} (pid {other['pid']}); use it, or stop it first")
    if settings.nats_url and settings.nats_port is not None:
        raise StackError(
            "--nats-port (YANTRA_NATS_PORT) is the embedded nats-server's port, and NATS_URL names another"
            " server: unset one of them"
        )
    try:
        security = prepare_security(data_dir, nats_host) if secure else None
    except SecureStackError as exc:
        raise StackError(str(exc)) from exc
    except OSError as exc:
        raise StackError(write_problem(Path(exc.filename or data_dir), exc)) from exc
    nats, notice, nodes = None, None, None
    try:
        if cluster:
            nodes = _start_embedded_cluster(settings, cluster, security, nats_host)
            url = nodes.url
        elif settings.nats_url:
            url = settings.nats_url
        else:
            nats, notice = _start_embedded_nats(settings, security, nats_host)
            url = nats.url
    except UnsafeConfig as exc:  # embedded_nats_problem said it first; this is the launchers' own word
        raise StackError(f"the embedded nats-server cannot start: {exc}") from exc
    made = security.made if security else None
    notices = [line for line in (made, notice, judges_notice(launches)) if line]
    stack = Stack(settings, nats, url, notices=notices, cluster=nodes, launches={p.name: p for p in launches})
    stack.security = security
    try:
        stack.record()
        for launch in launches:
            stack.start_service(launch.name)
        stack.record()
    except BaseException:
        stack.stop()
        raise
    return stack

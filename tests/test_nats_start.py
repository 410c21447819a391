"""docker/nats-start.sh, the start script of compose's NATS nodes, run with the real nats-server: one user and its
password from the environment (or a file); with the files docker/nats-secrets.py makes (docker/compose.secure.yaml
mounts them), each service's own user over TLS only; with routes, a node of a cluster whose routes speak TLS."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import time
from pathlib import Path

import nats
import pytest

from services.core import events as ev
from services.core.bus import Bus, BusUnavailable
from services.core.nats_launcher import find_nats_server, free_port
from services.core.nats_security import bcrypt_hash
from services.core.settings import NatsAuth, NatsTls

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "pw-Secret-9"  # a value no command would hold by chance


def _env_file(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))


def _start_nats(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    """docker/nats-start.sh as compose runs it, its store and ports moved into this test's reach."""
    port = free_port()
    full = {
        "PATH": f"{Path(find_nats_server()).parent}:{os.environ['PATH']}",
        "NATS_BASE_CONFIG": str(ROOT / "docker" / "nats.conf"),
        "NATS_RUNTIME_CONFIG": str(tmp_path / "nats-server.conf"),
        **env,
    }
    args = ["-sd", str(tmp_path / "js"), "-p", str(port), "-m", str(free_port(avoid={port}))]
    proc = subprocess.Popen(
        ["sh", str(ROOT / "docker" / "nats-start.sh"), *args],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return proc, port


async def _connects(port: int, **credentials) -> bool:
    async def quiet(_exc):
        return None

    deadline = time.monotonic() + 10
    while True:
        try:
            nc = await nats.connect(
                f"nats://127.0.0.1:{port}", allow_reconnect=False, max_reconnect_attempts=1,
                connect_timeout=2, error_cb=quiet, **credentials,
            )  # fmt: skip
        except Exception as exc:
            if "Authorization" in str(exc):
                return False
            assert time.monotonic() < deadline, exc
            await asyncio.sleep(0.1)
            continue
        await nc.close()
        return True


@pytest.mark.parametrize("password", ["12345", "with space, comma {brace} #hash", 'qu"ote back\\slash $NATS_USER'])
async def test_nats_requires_the_user_and_password_from_the_environment(tmp_path, password):
    """Any password: nats-server read one given as a $VARIABLE inside its config as config, so all digits
    stopped it and a comma or a brace made it another password."""
    proc, port = _start_nats(tmp_path, {"NATS_USER": "yantra", "NATS_PASSWORD": password})
    try:
        assert await _connects(port, user="yantra", password=password)
        assert not await _connects(port, user="yantra", password="wrong")
        assert not await _connects(port)
        assert (tmp_path / "nats-server.conf").stat().st_mode & 0o777 == 0o600
        assert password not in " ".join(Path(f"/proc/{proc.pid}/cmdline").read_text().split("\0"))
    finally:
        proc.terminate()
        proc.wait(10)


async def test_nats_takes_its_password_from_a_file_and_refuses_none_or_two(tmp_path):
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    proc, port = _start_nats(tmp_path, {"NATS_USER": "yantra", "NATS_PASSWORD_FILE": str(secret)})
    try:
        assert await _connects(port, user="yantra", password=PASSWORD)
    finally:
        proc.terminate()
        proc.wait(10)
    for env, why in (
        ({"NATS_USER": "yantra"}, "set NATS_PASSWORD"),
        ({"NATS_USER": "yantra", "NATS_PASSWORD": "x", "NATS_PASSWORD_FILE": str(secret)}, "one way"),
    ):
        proc, _ = _start_nats(tmp_path, env)
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode != 0 and why in out.decode(), out


# ------------------------------------------------------------------ with the secure files (docker/nats-secrets.py)


def _secrets(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The files docker/nats-secrets.py makes, and the compose.env it writes."""
    spec = importlib.util.spec_from_file_location("nats_secrets", ROOT / "docker" / "nats-secrets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    root = tmp_path / "secrets"
    module.make(root, ())
    return root, _env_file(root / "compose.env")


async def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {port}"
            await asyncio.sleep(0.1)


def _user(env: dict[str, str], service: str) -> NatsAuth:
    return NatsAuth(user=f"yantra-{service}", password=env[f"NATS_PASSWORD_{service.upper()}"])


async def test_nats_with_the_secure_files_takes_each_services_user_over_tls_only(tmp_path):
    root, env = _secrets(tmp_path)
    assert all((root / name).stat().st_mode & 0o777 == 0o600 for name in ("server-key.pem", "compose.env"))
    proc, port = _start_nats(tmp_path, {"NATS_SECRETS_DIR": str(root)})  # no NATS_USER/NATS_PASSWORD needed
    url, ca = f"tls://127.0.0.1:{port}", NatsTls(str(root / "ca.pem"))
    try:
        await _wait_listening(port)
        bus = await Bus.connect(url, name="t", auth=_user(env, "judge"), tls=ca, timeout=10.0)
        await bus.close()
        with pytest.raises(BusUnavailable, match="set NATS_CA to the file of the CA"):
            await Bus.connect(url, auth=_user(env, "judge"), timeout=5.0)
        wrong = NatsAuth(user="yantra-judge", password=env["NATS_PASSWORD_CODER"])  # another service's password
        with pytest.raises(BusUnavailable, match="refused the credentials for user yantra-judge"):
            await Bus.connect(url, auth=wrong, tls=ca, timeout=5.0)
        config = (tmp_path / "nats-server.conf").read_text()
        assert "system_account: SYS" in config and "cert_file" in config and "authorization {" not in config
        if bcrypt_hash("x", 4) is not None:  # else accounts.conf holds them as given, 0600 (nats_security)
            assert not any(value in config for key, value in env.items() if "PASSWORD" in key)  # hashes only
    finally:
        proc.terminate()
        proc.wait(10)


async def test_nats_start_refuses_routes_without_their_password_or_a_name(tmp_path):
    base = {"NATS_USER": "yantra", "NATS_PASSWORD": PASSWORD, "NATS_ROUTES": "a:6222,b:6222"}
    for env, why in (
        ({**base, "NATS_SERVER_NAME": "yantra-1"}, "set NATS_ROUTE_PASSWORD"),
        ({**base, "NATS_ROUTE_PASSWORD": "pw"}, "set NATS_SERVER_NAME"),
        ({**base, "NATS_SERVER_NAME": "n", "NATS_ROUTE_PASSWORD": "p@ss"}, "letters, digits and - . _ ~ only"),
        ({**base, "NATS_SECRETS_DIR": str(tmp_path)}, "holds neither accounts.conf nor server.pem"),
    ):
        proc, _ = _start_nats(tmp_path, env)
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == 2 and why in out.decode(), out


@pytest.mark.slow
async def test_three_nodes_from_nats_start_form_a_cluster_over_tls_routes(tmp_path):
    """The cluster profile's nodes as nats-start.sh starts them (their ports moved to loopback): the routes speak
    TLS with the secure files, and a stream kept on all three takes a publish once a leader is elected."""
    root, env = _secrets(tmp_path)
    route_ports = [free_port(), free_port(), free_port()]
    routes = ",".join(f"127.0.0.1:{p}" for p in route_ports)
    procs, ports = [], []
    try:
        for i, route_port in enumerate(route_ports, 1):
            node = {"NATS_SECRETS_DIR": str(root), "NATS_ROUTES": routes, "NATS_SERVER_NAME": f"yantra-{i}",
                    "NATS_ROUTE_PASSWORD": "route-Pw_1", "NATS_ROUTE_LISTEN": f"127.0.0.1:{route_port}"}  # fmt: skip
            (tmp_path / f"n{i}").mkdir()
            proc, port = _start_nats(tmp_path / f"n{i}", node)
            procs.append(proc)
            ports.append(port)
        for port in ports:
            await _wait_listening(port)
        urls = ",".join(f"tls://127.0.0.1:{p}" for p in ports)
        tls = NatsTls(str(root / "ca.pem"))
        bus = await Bus.connect(urls, name="t", auth=_user(env, "coder"), tls=tls, timeout=10.0, replicas=3, retry_s=30)
        try:
            info = await bus.js.stream_info(ev.RUNS_STREAM)
            assert info.config.num_replicas == 3 and len(info.cluster.replicas) == 2
        finally:
            await bus.close()
        assert "verify: true" in (tmp_path / "n1" / "nats-server.conf").read_text()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)

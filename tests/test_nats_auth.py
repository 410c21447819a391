"""Writes need the credential reads need: with YANTRA_ADMIN_TOKEN set, the embedded nats-server requires it
(from a 0600 config file, never its command line), and every client presents it; one without it gets one
line naming what to set. An external server takes its credentials from NATS_URL or NATS_USER/NATS_PASSWORD."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from services.core.bus import Bus, BusUnavailable
from services.core.nats_launcher import free_port, start_nats
from services.core.settings import NatsAuth, Settings, auth_refused
from services.core.stack import NATS_CONFIG, start_stack

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "tok-" + uuid.uuid4().hex


@pytest.fixture
def guarded(tmp_path):
    """The embedded nats-server of a stack started with YANTRA_ADMIN_TOKEN (no services: the bus is the point).
    stack.json names this test's process, alive, so `yantra` commands on the data dir find it."""
    settings = Settings(data_dir=tmp_path / "d", server_addr=f"127.0.0.1:{free_port()}", admin_token=TOKEN)
    stack = start_stack(settings, ())
    yield stack
    stack.stop()


def _clean_env(**env: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "YANTRA_"))}
    return {**out, "YANTRA_SERVER_ADDR": f"127.0.0.1:{free_port()}", **env}


def _yantra(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_the_embedded_server_requires_the_token_which_stays_off_its_command_line(guarded, monkeypatch):
    for var in ("NATS_TOKEN", "NATS_USER", "NATS_PASSWORD"):
        monkeypatch.delenv(var, raising=False)
    config = guarded.settings.data_dir / NATS_CONFIG
    assert stat.S_IMODE(config.stat().st_mode) == 0o600 and TOKEN in config.read_text()
    cmdline = Path(f"/proc/{guarded.nats.process.pid}/cmdline").read_bytes().decode()
    assert TOKEN not in cmdline and str(config) in cmdline  # `ps` shows a command line to everyone

    started = time.monotonic()
    with pytest.raises(BusUnavailable) as refused:
        await Bus.connect(guarded.nats_url, timeout=5.0)
    assert time.monotonic() - started < 3.0  # refused at once, not retried until the timeout
    assert str(refused.value) == f"NATS refused the connection at {guarded.nats_url}: authorization violation"
    assert auth_refused(refused.value.__cause__)
    with pytest.raises(BusUnavailable, match="refused"):
        await Bus.connect(guarded.nats_url, auth=NatsAuth(token="wrong"))

    bus = await Bus.connect(guarded.nats_url, auth=NatsAuth(token=TOKEN))
    await bus.close()
    # a service started by `yantra up` finds the credential in its environment
    env = guarded.child_env()
    assert env["NATS_TOKEN"] == TOKEN and env["NATS_URL"] == guarded.nats_url
    monkeypatch.setenv("NATS_TOKEN", env["NATS_TOKEN"])
    bus = await Bus.connect(guarded.nats_url)
    await bus.close()


def test_a_service_started_by_the_stack_connects_with_the_token(tmp_path):
    settings = Settings(
        data_dir=tmp_path / "d", server_addr=f"127.0.0.1:{free_port()}", admin_token=TOKEN, device="cpu"
    )
    stack = start_stack(settings, ("skillstore",))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "connected to" not in stack.log_tail("skillstore", 200):
            assert stack.procs["skillstore"].poll() is None, stack.log_tail("skillstore")
            time.sleep(0.5)
        log = stack.log_tail("skillstore", 200)
        assert "skillstore connected to" in log and "refused" not in log, log
        assert TOKEN not in log
    finally:
        stack.stop()


@pytest.mark.parametrize("command", [("runs",), ("rollback", "swap-x"), ("cancel", "run-x"), ("tui",)])
def test_a_client_without_the_token_gets_one_line_naming_it(guarded, command):
    data = str(guarded.settings.data_dir)
    result = _yantra(*command, "--data-dir", data, env=_clean_env())
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip() == (
        f"yantra {command[0]}: NATS refused the connection at {guarded.nats_url}: authorization violation; "
        "the stack requires a credential: set YANTRA_ADMIN_TOKEN to the token it was started with"
    ), result.stderr
    wrong = _yantra(*command, "--data-dir", data, env=_clean_env(YANTRA_ADMIN_TOKEN="wrong"))
    assert wrong.returncode == 2 and "YANTRA_ADMIN_TOKEN is not the token the stack was started with" in wrong.stderr
    assert "Traceback" not in result.stderr + wrong.stderr


def test_a_client_with_the_token_is_served(guarded):
    env = _clean_env(YANTRA_ADMIN_TOKEN=TOKEN)
    listed = _yantra("runs", "--data-dir", str(guarded.settings.data_dir), env=env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    rolled = _yantra("rollback", "swap-x", "--data-dir", str(guarded.settings.data_dir), env=env)
    assert rolled.returncode == 2 and "no swap 'swap-x' in the log" in rolled.stderr  # past the bus: the log said


def test_an_external_server_takes_credentials_from_the_url_or_the_environment_and_never_prints_them(tmp_path):
    password = "pw-" + uuid.uuid4().hex
    server = start_nats(tmp_path / "ext", auth=NatsAuth(user="yantra", password=password))
    try:
        url = server.url
        with_creds = url.replace("nats://", f"nats://yantra:{password}@")
        bad_creds = url.replace("nats://", "nats://yantra:not-it@")
        ok = _yantra("runs", env=_clean_env(NATS_URL=with_creds))
        assert ok.returncode == 0, ok.stderr
        ok = _yantra("runs", env=_clean_env(NATS_URL=url, NATS_USER="yantra", NATS_PASSWORD=password))
        assert ok.returncode == 0, ok.stderr
        bare = _yantra("runs", env=_clean_env(NATS_URL=url, YANTRA_ADMIN_TOKEN="not-for-nats"))
        assert bare.returncode == 2 and bare.stderr.strip() == (
            f"yantra runs: NATS refused the connection at {url}: authorization violation; give its credentials in"
            " NATS_URL (nats://USER:PASSWORD@HOST:PORT), NATS_USER and NATS_PASSWORD, or NATS_TOKEN"
        ), bare.stderr
        wrong = _yantra("runs", env=_clean_env(NATS_URL=bad_creds))
        # the user is named (it came in the URL), the password never
        assert wrong.returncode == 2 and "NATS refused the credentials for user yantra at nats://***@127.0.0.1:" in (
            wrong.stderr
        )
        assert "not-it" not in wrong.stderr + wrong.stdout
    finally:
        server.stop()

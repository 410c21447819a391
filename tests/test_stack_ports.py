"""Ports: the embedded nats-server keeps its port across restarts of a data dir, or says why not; an address
whose port cannot be listened on is refused in one line before anything starts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from services.core.nats_launcher import free_port
from services.core.settings import Settings
from services.core.stack import NATS_PORT_FILE, StackError, start_stack

ROOT = Path(__file__).resolve().parent.parent


def _settings(data_dir: Path, **more) -> Settings:
    return Settings(data_dir=data_dir, server_addr=f"127.0.0.1:{free_port()}", **more)


def _embedded_port(settings: Settings) -> tuple[int, list[str]]:
    """Start the stack with no services (the embedded nats-server alone), stop it; its port and notices."""
    stack = start_stack(settings, ())
    try:
        assert stack.nats is not None and stack.nats_url == f"nats://127.0.0.1:{stack.nats.port}"
        return stack.nats.port, stack.notices
    finally:
        stack.stop()


def _listening(port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_the_embedded_port_is_kept_across_restarts_and_moves_only_when_taken_saying_so(tmp_path):
    data = tmp_path / "d"
    first, notices = _embedded_port(_settings(data))
    assert notices == [] and (data / NATS_PORT_FILE).read_text().strip() == str(first)
    again, notices = _embedded_port(_settings(data))  # a client that wrote the URL down still finds it
    assert again == first and notices == []

    holder = _listening(first)  # someone else took it meanwhile
    try:
        moved, notices = _embedded_port(_settings(data))
    finally:
        holder.close()
    assert moved != first
    assert notices == [
        f"the embedded nats-server's port {first} (this data dir's last) cannot be had: another process listens on"
        f" it; it listens on {moved} instead (--nats-port or YANTRA_NATS_PORT pins one)"
    ]
    assert (data / NATS_PORT_FILE).read_text().strip() == str(moved)  # the new one is kept from now on
    assert _embedded_port(_settings(data))[0] == moved


def test_a_nats_port_asked_for_is_used_and_kept_or_refused_in_one_line_when_taken(tmp_path):
    data = tmp_path / "d"
    asked = free_port()
    assert _embedded_port(_settings(data, nats_port=asked)) == (asked, [])
    assert _embedded_port(_settings(data))[0] == asked  # then kept without asking again

    holder = _listening(asked)
    try:
        with pytest.raises(StackError) as refused:
            start_stack(_settings(data, nats_port=asked), ())
    finally:
        holder.close()
    assert str(refused.value) == (
        f"cannot start the embedded nats-server on port {asked} (--nats-port or YANTRA_NATS_PORT): another process"
        " listens on it; free it, or choose another port"
    )
    settings = _settings(data, nats_url="nats://127.0.0.1:4222", nats_port=asked)
    with pytest.raises(StackError, match="NATS_URL names another server"):
        start_stack(settings, ())
    server = _settings(data)
    with pytest.raises(StackError, match="it is YANTRA_SERVER_ADDR's port"):
        start_stack(server.model_copy(update={"nats_port": int(server.server_addr.rpartition(":")[2])}), ())


def _yantra(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "YANTRA_NATS_PORT")}
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT,
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("command", ["up", "demo"])
def test_up_with_a_port_it_cannot_have_is_one_line_before_anything_starts(command, tmp_path):
    # before: "server ready on 127.0.0.1:99999" while gRPC listened on 34463 (99999 modulo 65536)
    data = tmp_path / "d"
    result = _yantra(command, "--data-dir", str(data), env={"YANTRA_SERVER_ADDR": "127.0.0.1:99999"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip() == (
        f"yantra {command}: invalid settings: YANTRA_SERVER_ADDR=127.0.0.1:99999: the port 99999 is outside 1..65535"
    )
    assert "started" not in result.stdout and not data.exists()

    taken = _listening(free_port())
    try:
        port = taken.getsockname()[1]
        env = {"YANTRA_SERVER_ADDR": f"127.0.0.1:{free_port()}"}
        result = _yantra(command, "--data-dir", str(data), "--nats-port", str(port), env=env)
    finally:
        taken.close()
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip() == (
        f"yantra {command}: cannot start the embedded nats-server on port {port} (--nats-port or YANTRA_NATS_PORT):"
        " another process listens on it; free it, or choose another port"
    )
    assert "started" not in result.stdout
    result = _yantra(command, "--nats-port", "70000", env={})
    assert result.returncode == 2 and "70000 is outside 1..65535" in result.stderr


def test_nats_port_is_explained_by_the_help_of_up_and_demo():
    for command in ("up", "demo"):
        helped = " ".join(_yantra(command, "--help", env={}).stdout.split())
        assert "--nats-port PORT port of the embedded nats-server" in helped
        assert "YANTRA_NATS_PORT" in helped and "this data dir's last `yantra up` used" in helped

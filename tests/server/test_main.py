"""`python -m services.server` as a process: a bad model exits 2 with a clear message; a good one serves
gRPC, answers on its own nats-server, and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from services.core.nats_launcher import free_port, start_nats
from services.core.server_client import generate_tokens, wait_ready

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("YANTRA_") and k != "NATS_URL"}
    return {**env, "YANTRA_DEVICE": "cpu", **extra}


def test_unknown_model_exits_2_naming_it(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "services.server"],
        cwd=ROOT,
        env=_env(YANTRA_MODEL="no-such-model", YANTRA_DATA_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "no-such-model" in proc.stderr and "tiny-qwen2" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_port_another_server_holds_exits_2_naming_it(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        addr = f"127.0.0.1:{holder.getsockname()[1]}"
        proc = subprocess.run(
            [sys.executable, "-m", "services.server"],
            cwd=ROOT,
            env=_env(YANTRA_SERVER_ADDR=addr, YANTRA_DATA_DIR=str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2, proc.stderr  # a configuration error: `yantra up` stops instead of restarting it
    assert f"server: cannot listen on {addr}: another server holds that port" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "loaded" not in proc.stderr  # refused before the model loads


async def test_server_process_serves_and_stops_on_sigterm(tmp_path):
    nats = start_nats(tmp_path / "nats", log_file=tmp_path / "nats.log")
    addr = f"127.0.0.1:{free_port()}"
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.server"],
            cwd=ROOT,
            env=_env(NATS_URL=nats.url, YANTRA_SERVER_ADDR=addr, YANTRA_DATA_DIR=str(tmp_path / "data")),
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        health = await wait_ready(addr, timeout=60, still_starting=lambda: proc.poll() is None)
        assert health.model == "tiny-qwen2" and health.device == "cpu"
        ids, text, tps = await generate_tokens(addr, "Hello", 5)
        assert len(ids) == 5 and tps > 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        out = log_path.read_text()
        assert f"server ready on {addr}" in out and "Traceback" not in out, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        nats.stop()

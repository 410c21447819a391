"""The `yantra` command: help, and clear one-line errors for what a user gets wrong."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.core.nats_launcher import free_port

ROOT = Path(__file__).resolve().parent.parent


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie that nobody reaped yet counts as gone
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text())


def yantra(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_help_lists_every_command():
    result = yantra("--help")
    assert result.returncode == 0
    for command in ("up", "demo", "optimize", "replay", "events", "generate", "runs", "swaps", "rollback", "serve"):
        assert command in result.stdout


def test_out_of_range_run_options_are_refused_before_anything_starts():
    for args in (["--decode-tokens", "0"], ["--decode-tokens", "5000"], ["--max-candidates", "x"]):
        result = yantra("optimize", *args)
        assert result.returncode == 2, args
        assert "outside" in result.stderr or "not an integer" in result.stderr, result.stderr


def test_nats_that_is_down_is_a_clear_error(tmp_path):
    result = yantra("runs", env={"NATS_URL": f"nats://127.0.0.1:{free_port()}", "YANTRA_DATA_DIR": str(tmp_path)})
    assert result.returncode == 2
    assert "cannot reach NATS" in result.stderr and "Traceback" not in result.stderr


def test_no_stack_running_is_a_clear_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    env["YANTRA_DATA_DIR"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "optimize", "--no-wait"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "yantra up" in result.stderr and "Traceback" not in result.stderr


def test_replay_of_an_unknown_run(nats_server, tmp_path):
    result = yantra("replay", "no-such-run", "--verify", env={"NATS_URL": nats_server.url})
    assert result.returncode == 2 and "no run 'no-such-run'" in result.stderr


def test_replay_rejects_a_malformed_run_id(nats_server):
    result = yantra("replay", "bad.id", env={"NATS_URL": nats_server.url})
    assert result.returncode == 2 and "run id" in result.stderr and "Traceback" not in result.stderr


def test_swaps_and_rollback_on_an_empty_log_say_so(own_nats):
    env = {"NATS_URL": own_nats.url, "YANTRA_SERVER_ADDR": f"127.0.0.1:{free_port()}"}
    listed = yantra("swaps", env=env)
    assert listed.returncode == 0 and "no swaps yet" in listed.stdout
    assert "the server's own view is missing" in listed.stdout and "Traceback" not in listed.stderr
    result = yantra("rollback", "swap-nope", env=env)
    assert result.returncode == 2 and "no swap 'swap-nope' in the log (see `yantra swaps`)" in result.stderr


def test_generate_without_a_server(tmp_path):
    result = yantra("generate", "hi", env={"YANTRA_SERVER_ADDR": f"127.0.0.1:{free_port()}"})
    assert result.returncode == 2 and "yantra up" in result.stderr and "Traceback" not in result.stderr


def test_demo_with_an_unknown_model_names_it(tmp_path):
    result = yantra(
        "demo",
        "--model",
        "no-such-model",
        "--data-dir",
        str(tmp_path / "d"),
        env={"YANTRA_SERVER_ADDR": f"127.0.0.1:{free_port()}"},
        timeout=180,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no-such-model" in result.stderr and "tiny-qwen2" in result.stderr
    assert "--model" in result.stderr and "Traceback" not in result.stderr
    assert "started" not in result.stdout and not (tmp_path / "d" / "logs").exists()  # refused before anything ran


@pytest.fixture
def up(tmp_path):
    """`yantra up` on its own data dir, ready; yields (process, stack.json contents)."""
    env = {**os.environ, "YANTRA_SERVER_ADDR": f"127.0.0.1:{free_port()}"}
    env.pop("NATS_URL", None)
    data = tmp_path / "d"
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "up", "--data-dir", str(data)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        lines.append(proc.stdout.readline())
        if "press Ctrl-C" in lines[-1]:
            break
    assert "server ready" in "".join(lines), "".join(lines)
    stack = json.loads((data / "stack.json").read_text())
    yield proc, stack
    if proc.poll() is None:
        proc.kill()
    for pid in stack["pids"].values():
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _still_alive(pids: dict[str, int], within_s: float) -> list[str]:
    deadline = time.monotonic() + within_s
    while (left := [n for n, pid in pids.items() if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.3)
    return left


def test_up_starts_every_service_and_stops_them_all_on_a_signal(up, tmp_path):
    proc, stack = up
    assert set(stack["pids"]) == {"server", "profiler", "skillstore", "coder", "judge", "nats-server"}
    assert stack["nats_url"].startswith("nats://127.0.0.1:")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert not (tmp_path / "d" / "stack.json").exists()
    assert not (left := _still_alive(stack["pids"], 0)), f"{left} outlived `yantra up`"


def test_a_killed_up_takes_its_services_with_it(up):
    proc, stack = up
    proc.send_signal(signal.SIGKILL)  # no chance to clean up
    proc.wait()
    assert not (left := _still_alive(stack["pids"], 20)), f"{left} outlived a killed `yantra up`"


def _yantra_at(data: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    return yantra(*args, "--data-dir", str(data), env=env, timeout=timeout)


def test_a_run_survives_the_embedded_nats_server_dying_mid_run(up, tmp_path):
    proc, stack = up
    data = tmp_path / "d"
    started = _yantra_at(data, "optimize", "--policy", "cpu-untimed", "--no-wait")
    assert started.returncode == 0, started.stdout + started.stderr
    run_id = started.stdout.split()[1].rstrip(":")  # "run <id>: optimising ..."
    old = stack["pids"]["nats-server"]
    os.kill(old, signal.SIGKILL)  # mid-run: the run was requested a moment ago

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # `yantra up` starts it again, same port, same store
        pid = json.loads((data / "stack.json").read_text())["pids"]["nats-server"]
        if pid != old and _alive(pid):
            break
        time.sleep(0.3)
    else:
        raise AssertionError("nats-server was not restarted")
    assert json.loads((data / "stack.json").read_text())["nats_url"] == stack["nats_url"]

    deadline = time.monotonic() + 240
    state = ""
    while time.monotonic() < deadline:  # every service reconnects by itself and the run ends
        runs = _yantra_at(data, "runs")
        state = next((line for line in runs.stdout.splitlines() if run_id in line), runs.stdout + runs.stderr)
        if "swapped" in state:
            break
        time.sleep(2)
    assert "swapped" in state, state
    verified = _yantra_at(data, "replay", run_id, "--verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert proc.poll() is None  # `yantra up` itself never stopped

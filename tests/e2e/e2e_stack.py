"""Helpers for end-to-end tests: liveness of the stack's services, the `yantra` command against it, runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from services.core import events as ev
from services.core.nats_launcher import free_port
from services.core.pb import events_pb2 as pb
from services.core.settings import Settings
from services.core.stack import start_stack
from services.registry import SERVICES

ROOT = Path(__file__).resolve().parents[2]
CPU_POLICY = pb.SwapPolicy(min_reward=1, name="cpu-untimed", reason="test: no GPU, correct untimed kernels may swap")


def services_alive(stack, killed: tuple[str, ...] = ()) -> Callable[[], None]:
    """A `check` for wait_for_log: fails at once when a service died (other than those the test kills)."""

    def check() -> None:
        dead = [(n, c) for n, c in stack.dead() if n not in killed]
        assert not dead, f"services died: {dead}\n" + "\n".join(stack.log_tail(n, 30) for n, _ in dead)

    return check


def yantra_for(stack) -> Callable[..., subprocess.CompletedProcess]:
    """The `yantra` command as a user runs it, pointed at this stack."""
    env = {**os.environ, **stack.settings.env()}

    def yantra(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "services.cli", *args]
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)

    return yantra


async def request(bus, run_id: str, **fields) -> ev.Envelope:
    """Publish a RunRequested as a client would (cpu-untimed policy and one target unless given)."""
    fields.setdefault("policy", CPU_POLICY)
    fields.setdefault("max_targets", 1)  # one target keeps these runs short (test_loop.py runs every target)
    msg = pb.RunRequested(model="tiny-qwen2", requested_by="e2e", **fields)
    env = ev.make_envelope(run_id, msg, producer="test", time_ns=time.time_ns(), event_id=f"req-{run_id}")
    await bus.publish(env)
    return env


def running_stack(own_nats, tmp_path, **extra):
    """The five services as processes on the tiny CPU model, `extra` settings added; stopped, logs shown after."""
    settings = Settings(
        nats_url=own_nats.url,
        data_dir=tmp_path / "data",
        server_addr=f"127.0.0.1:{free_port()}",
        model="tiny-qwen2",
        device="cpu",
        ack_wait_s=4.0,
        log_level="INFO",
        admin_token="e2e-" + uuid.uuid4().hex,  # the profiler must send it, or no run gets a profile
        **extra,
    )
    stack = start_stack(settings, SERVICES)
    yield stack
    stack.stop()
    for name in SERVICES:  # shown by pytest only when the test fails
        print(f"----- {name} log -----\n{stack.log_tail(name, 40)}")

"""The vocabulary sweep's candidate calls are held to the judge's per-call limit, as live calls are.

A real tiny Qwen2 (random weights) on the CPU, real Triton RMSNorm kernels run by the interpreter, a real
nats-server. The sweep's recurring prompt is as long as the model's longest sequence, far longer than anything the
judge ran: a kernel whose bounded loops grow with the rows (rmsnorm_kernel_slow_long.py: rows x rows / 8 steps a
program, microseconds on the judge's cases) held the model for 20 minutes there before anything was patched.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from server_fixtures import HERE, QWEN_NORM, load_candidate, rmsnorm_contract, swap_run

from services.core import events as ev
from services.core.kernels import bind
from services.core.pb import events_pb2 as pb
from services.core.runner import answer
from services.server.call_watch import EXIT_HUNG, LiveClock
from services.server.engine import Engine
from services.server.hotswap import is_patched
from services.server.introspection import instances_of
from services.server.models import load_model
from services.server.service import ServerService, exit_after_hung_sweeps
from services.server.vocab_sweep import OverLimit, StillRunning, sweep


async def test_an_honest_sweep_is_timed_call_by_call_and_a_call_back_past_its_limit_ends_it():
    engine = Engine(load_model("tiny-qwen2", "cpu"))
    try:
        contract = rmsnorm_contract()
        honest = bind(contract, load_candidate(HERE / "rmsnorm_kernel.py"))
        clock = LiveClock()  # the real limits: 20 s a call at least under the interpreter
        observed = pb.ParityObservation()
        await sweep(engine, contract, honest, 7, observed, clock)
        assert observed.sweep_calls_passed == observed.sweep_calls_checked == clock.timed > 5 * 10
        assert clock.over == 0 and observed.sweep_recurring_tokens == 512

        # the same kernel on a clock that reads 100 s later once a call of 64 rows returns: that call was late
        skipped = [0.0]

        def late_at_64_rows(module, args, kwargs):
            out = honest(module, args, kwargs)
            if out.shape[0] == 64:
                skipped[0] = 100.0
            return out

        clock = LiveClock(now=lambda: time.monotonic() + skipped[0])
        observed = pb.ParityObservation()
        with pytest.raises(OverLimit) as raised:
            await sweep(engine, contract, late_at_64_rows, 7, observed, clock)
        assert not isinstance(raised.value, StillRunning)
        line = str(raised.value)
        assert line.startswith(f"a sweep call of {QWEN_NORM} at 64x1x64 ran 10")
        assert "s, past its per-call limit of 20.0 s" in line
        assert observed.sweep_tokens == 1 + 2 + 4 + 8 + 16 + 32  # the chunks before it, every one checked
        assert clock.over == 1 and observed.sweep_calls_passed == observed.sweep_calls_checked
    finally:
        engine.close()


def _tight_past_64_rows(moved: float, device: str) -> float:
    """The test's limit: the real floor for calls of up to 64 rows of the tiny model (16.6 kB moved), 0.05 s past."""
    return 0.05 if moved > 40e3 else 20.0


async def test_a_sweep_call_still_running_at_its_limit_is_refused_on_the_log_then_the_server_exits(own_bus, tmp_path):
    slow = (HERE / "rmsnorm_kernel_slow_long.py").read_text()
    engine = Engine(load_model("tiny-qwen2", "cpu"))
    service = ServerService(engine, tmp_path)
    service.clock = LiveClock(limit=_tight_past_64_rows)
    exits: list[tuple[int, bool]] = []
    stop = asyncio.Event()
    watcher = asyncio.create_task(
        exit_after_hung_sweeps(
            own_bus, service, stop, poll_s=0.05, grace_s=0.2, exit=lambda c: exits.append((c, service.clock.stuck()))
        )
    )
    for env in swap_run("sweep-hung-1", slow):
        await own_bus.publish(env)
    started = time.monotonic()
    # the first call of 128 rows runs the kernel's 2,048 steps a program (seconds): the handler does not wait for it
    await answer(own_bus, service, ev.last(await own_bus.read_run("sweep-hung-1"), "TargetConcluded"))
    rejected = ev.last(await own_bus.read_run("sweep-hung-1"), "SwapRejected")
    assert rejected is not None and service.clock.stuck()
    assert f"vocabulary sweep: a sweep call of {QWEN_NORM} at 128x1x64 was still running at its per-call limit of " in (
        rejected.msg.reason
    )
    assert not any(is_patched(m) for m in instances_of(engine.model, QWEN_NORM))  # nothing was patched
    while not exits and time.monotonic() - started < 60:
        await asyncio.sleep(0.05)
    # the exit came after the refusal was on the log, while the call still held the engine thread
    assert exits == [(EXIT_HUNG, True)]
    stop.set()
    await watcher
    await engine.exclusive(lambda: None)  # the call comes back in the end (the test's process does not exit)
    assert not service.clock.stuck()
    engine.close()

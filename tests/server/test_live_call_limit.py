"""The judge's per-call limit on the live path: a committed kernel's call past it is taken out of service.

A real tiny Qwen2 (random weights) on the CPU, real Triton RMSNorm kernels run by the interpreter, a real
nats-server. The limits are the test's (a clock built with a small one); the arithmetic of the real ones is
tests/test_call_limits.py. The kernel that does not come back is rmsnorm_kernel_slow_long.py: honest, with a
do-nothing loop of rows x rows / 8 steps a program that the static check lets through (its bounds are shapes):
microseconds on parity's canary, seconds on a prefill of 90 tokens.
"""

from __future__ import annotations

import asyncio
import time

from server_fixtures import HERE, QWEN_NORM, load_candidate, rmsnorm_contract, swap_run

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.core.runner import answer
from services.core.swaplog import live_swaps, read_swap_events
from services.server.call_watch import EXIT_HUNG, PREFIX, LiveClock
from services.server.engine import Engine
from services.server.hotswap import is_patched
from services.server.introspection import instances_of
from services.server.models import load_model
from services.server.parity import swap_with_parity
from services.server.restore import restore_swaps
from services.server.service import ServerService, request_rollbacks

PREFILL = [7] * 90  # a prompt of 90 tokens: the slow kernel's first norm call runs ~3 s interpreted


def _limit(seconds: float):
    return lambda moved, device: seconds


def test_the_clock_reports_a_call_still_running_at_its_deadline_and_that_it_came_back_late():
    hung: list[tuple[str, float]] = []
    clock = LiveClock(limit=_limit(0.05))
    start = time.monotonic()
    with clock.call("a live call of Norm", (4, 64), 1024, "cpu", lambda d: hung.append((d, time.monotonic()))) as t:
        time.sleep(0.3)
        assert clock.stuck()  # past its deadline, still running
    assert not clock.stuck()
    ((detail, when),) = hung
    assert when - start < 0.25  # reported while the call ran, not when it came back
    assert detail == "a live call of Norm at 4x64 was still running at its per-call limit of 0.1 s (1.0 kB moved)"
    assert t.late.startswith("a live call of Norm at 4x64 ran 0.3 s, past its per-call limit of 0.1 s")
    assert clock.over == 1 and clock.timed == 1

    with clock.call("a live call of Norm", (4, 64), 1024, "cpu", hung.append) as quick:
        pass
    assert quick.late == "" and len(hung) == 1 and clock.over == 1 and clock.timed == 2
    # the real limit: the judge's (services.core.call_limits), 20 s at least under the interpreter
    with LiveClock().call("a live call of Norm", (4, 64), 1024, "cpu", hung.append) as real:
        assert real.limit_s == 20.0


def _commit(engine: Engine, clock: LiveClock, failures: list[str]):
    observed = pb.ParityObservation()
    handle = swap_with_parity(engine, rmsnorm_contract(), load_candidate_honest(), engine.encode("Hi"), observed)
    assert handle is not None, observed.error
    handle.commit(failures.append, 0, clock)
    return handle


def load_candidate_honest():
    return load_candidate(HERE / "rmsnorm_kernel.py")


def test_an_honest_kernel_serves_within_the_real_limit_every_call_timed():
    engine = Engine(load_model("tiny-qwen2", "cpu"))
    try:
        clock, failures = LiveClock(), []
        handle = _commit(engine, clock, failures)
        engine.decode(engine.encode("Hello there, how are you"), 4)
        assert failures == [] and not handle.reverted
        assert clock.timed >= 4 * 5 and clock.over == 0  # every call of the 5 norms on the CPU, each in time
    finally:
        engine.close()


def test_a_call_past_its_limit_takes_the_kernel_out_and_the_caller_keeps_the_right_answer():
    engine = Engine(load_model("tiny-qwen2", "cpu"))
    try:
        ids = engine.encode("Hello there, how are you")
        before, _ = engine.decode(ids, 6)
        clock, failures = LiveClock(limit=_limit(1e-4)), []
        handle = _commit(engine, clock, failures)
        after, _ = engine.decode(ids, 6)
        assert after == before  # the late call's answer was right; every call after it ran the module's own forward
        assert handle.reverted and not any(is_patched(m) for m in instances_of(engine.model, QWEN_NORM))
        (failure,) = failures  # reported once
        assert failure.startswith(PREFIX + QWEN_NORM) and "per-call limit of 0.0 s" in failure
    finally:
        engine.close()


async def test_a_call_that_never_comes_back_is_logged_then_the_server_exits_and_its_restart_serves_without_it(
    own_bus, tmp_path
):
    slow = (HERE / "rmsnorm_kernel_slow_long.py").read_text()
    engine = Engine(load_model("tiny-qwen2", "cpu"))
    service = ServerService(engine, tmp_path)
    service.clock = LiveClock(limit=_limit(0.05))
    # the sweep's calls are under the same clock and limit: it would refuse this kernel before the patch
    # (tests/server/test_sweep_call_limit.py); this test is about the live path, so the kernel must get there
    service.vocab_sweep = False
    for env in swap_run("hung-1", slow):
        await own_bus.publish(env)
    await answer(own_bus, service, ev.last(await own_bus.read_run("hung-1"), "TargetConcluded"))
    committed = ev.last(await own_bus.read_run("hung-1"), "SwapCommitted")
    assert committed is not None and all(is_patched(m) for m in instances_of(engine.model, QWEN_NORM))

    exits: list[tuple[int, bool]] = []
    stop = asyncio.Event()
    reporter = asyncio.create_task(
        request_rollbacks(
            own_bus, service, stop, grace_s=0.2, exit=lambda code: exits.append((code, service.clock.stuck()))
        )
    )
    await engine.exclusive(engine.decode, PREFILL, 1)
    stop.set()
    await reporter
    engine.close()
    # the server exited while the call still held the engine thread, after the record was on the log
    assert exits == [(EXIT_HUNG, True)]
    log = await own_bus.read_run("hung-1")
    request = ev.last(log, "RollbackRequested")
    assert request.msg.swap_id == committed.msg.swap_id and request.env.causation_id == committed.env.event_id
    assert request.msg.reason.startswith(f"{PREFIX}{QWEN_NORM} at 1x90x64 was still running at its per-call limit")

    # the supervisor's restart: fresh weights, the log read; the swap is not served again, and says why
    restarted = Engine(load_model("tiny-qwen2", "cpu"))
    again = ServerService(restarted, tmp_path)
    assert await restore_swaps(own_bus, again, "tiny-qwen2") == []
    assert not any(is_patched(m) for m in instances_of(restarted.model, QWEN_NORM))
    reapplied = ev.last(await own_bus.read_run("hung-1"), "SwapReapplied")
    assert not reapplied.msg.restored and "a rollback was requested: a live call of" in reapplied.msg.reason
    # the request, redelivered to the restarted server, is answered: the log no longer holds the swap as live
    await answer(own_bus, again, request)
    assert live_swaps(*await read_swap_events(own_bus)) == []
    restarted.close()

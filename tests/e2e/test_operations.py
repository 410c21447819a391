"""What a first week of real use broke, end to end with every service a process.

- A run that can never finish ends with a RunFailed saying why (it used to sit in "running" for ever),
  and `yantra cancel` stops one that is running.
- Two runs that commit the same kernel get two swap ids: rolling back the first leaves the second live,
  and a restarted server re-applies it (the shared id used to make it look rolled back and be dropped).
"""

from __future__ import annotations

import asyncio
import signal
import uuid

import pytest
from e2e_stack import request, services_alive, yantra_for
from runlog import has, wait_for_log

from services.core import events as ev
from services.core.server_client import wait_ready

pytestmark = pytest.mark.e2e
RUN_TIMEOUT_S = 300


def _run_id(tag: str) -> str:
    return f"e2e-{tag}-{uuid.uuid4().hex[:6]}"


async def test_runs_that_cannot_finish_end_and_a_running_run_can_be_cancelled(stack, own_bus):
    bus, settings = own_bus, stack.settings
    await wait_ready(settings.server_addr, timeout=120, still_starting=lambda: stack.procs["server"].poll() is None)
    yantra = yantra_for(stack)
    alive = services_alive(stack)

    # The server knows the model's positions (512): a prompt plus decode tokens past them, or a prompt longer than
    # them, each within a run's limits. Past a limit (services.core.limits) the profiler refuses, naming it.
    too_many, too_long, empty = _run_id("tokens"), _run_id("prompt"), _run_id("empty")
    too_much = _run_id("limit")
    await request(bus, too_many, prompts=["hello " * 60], decode_tokens=200)
    await request(bus, too_long, prompts=["hello " * 600], decode_tokens=4)
    await request(bus, empty, prompts=["Hello", ""], decode_tokens=4)
    await request(bus, too_much, prompts=["Hello"] * 5000, decode_tokens=4)
    for run_id, why in (
        (too_many, "positions"),
        (too_long, "positions"),
        (empty, "prompt 2 of 2 is empty"),
        (too_much, "5000 prompts given; a run takes at most 16 (limits.MAX_RUN_PROMPTS)"),
    ):
        log = await wait_for_log(bus, run_id, has("RunFailed"), 60, check=alive)
        failed = ev.last(log, "RunFailed").msg
        assert why in failed.reason and failed.failed_trigger == "RunRequested", failed.reason
        assert [r.type for r in log] == ["RunRequested", "RunFailed"]
        assert yantra("replay", run_id, "--verify").returncode == 0

    runs = yantra("runs")
    assert runs.returncode == 0, runs.stderr
    for run_id in (too_many, too_long, empty, too_much):
        line = next(line for line in runs.stdout.splitlines() if line.startswith(run_id))
        assert "failed: profiler could not answer RunRequested (refused it)" in line, line

    # A run cancelled while the profiler works on it: no service answers it afterwards.
    running = _run_id("cancel")
    await request(bus, running, prompts=["Hello there"], decode_tokens=8, max_candidates=1)
    cancelled = yantra("cancel", running, "--reason", "e2e: wrong model")
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    log = await wait_for_log(bus, running, has("RunCancelled"), 30, check=alive)
    await asyncio.sleep(8)  # time for the profiler's in-flight answer, and for anything that would follow it
    log = await bus.read_run(running)
    at = [r.type for r in log].index("RunCancelled")
    before = {r.env.event_id for r in log[:at]}
    after = log[at + 1 :]
    # Only answers already in flight when it was cancelled land after it; nothing answers those.
    assert all(r.env.causation_id in before for r in after), [(r.type, r.env.producer) for r in after]
    assert f"{running}" in yantra("runs").stdout and "cancelled: e2e: wrong model" in yantra("runs").stdout
    again = yantra("cancel", running)
    assert again.returncode == 2 and "already ended: cancelled" in again.stderr
    unknown = yantra("cancel", "no-such-run")
    assert unknown.returncode == 2 and "no run 'no-such-run'" in unknown.stderr


async def test_two_runs_committing_the_same_kernel_get_two_swaps_and_a_restart_keeps_the_live_one(stack, own_bus):
    bus, settings = own_bus, stack.settings
    addr = settings.server_addr
    await wait_ready(addr, timeout=120, still_starting=lambda: stack.procs["server"].poll() is None)
    yantra = yantra_for(stack)

    first = _run_id("first")
    await request(bus, first, prompts=["Hello there"], decode_tokens=8, max_candidates=1)
    log = await wait_for_log(bus, first, has("RunCompleted"), RUN_TIMEOUT_S, check=services_alive(stack))
    one = ev.last(log, "SwapCommitted").msg
    rolled = yantra("rollback", one.swap_id, "--reason", "e2e: first one out")
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr

    # warm now: the skill library proposes the kernel that just served. The first run's target by name: which target
    # ranks first is the host's clock's call (a loaded CPU ranked the norm first in one run and the decoder layer in
    # the next)
    second = _run_id("second")
    await request(
        bus, second, prompts=["Hello there"], decode_tokens=8, max_candidates=1, only_targets=[one.target_class]
    )
    log = await wait_for_log(bus, second, has("RunCompleted"), RUN_TIMEOUT_S, check=services_alive(stack))
    # the same target's swap: a run works on several targets, in an order measured times decide
    two = next((r.msg for r in log if r.type == "SwapCommitted" and r.msg.target_class == one.target_class), None)
    said = [
        f"{r.type}: {getattr(r.msg, 'target_class', '')} {getattr(r.msg, 'reason', '')}"[:300]
        for r in log
        if r.type in ("ProfileCaptured", "SkillsRetrieved", "TargetConcluded", "SwapCommitted", "SwapRejected")
    ]
    assert two is not None and two.source_sha256 == one.source_sha256, (
        f"the second run was to commit the same kernel as the first's {one.target_class}",
        said,
    )
    assert (one.swap_id, two.swap_id) == (f"swap-{first}-{one.candidate_id}", f"swap-{second}-{two.candidate_id}")

    listed = yantra("swaps").stdout
    lines = {s.swap_id: next(line for line in listed.splitlines() if line.startswith(s.swap_id)) for s in (one, two)}
    assert "log: rolled back" in lines[one.swap_id] and "server: rolled_back" in lines[one.swap_id], listed
    assert "log: live" in lines[two.swap_id] and "server: committed" in lines[two.swap_id], listed

    # A restarted server re-applies what the log holds live: the second run's swap, not the first's.
    stack.procs["server"].send_signal(signal.SIGKILL)
    stack.procs["server"].wait()
    stack.start_service("server")
    await wait_ready(addr, timeout=120, still_starting=lambda: stack.procs["server"].poll() is None)
    listed = yantra("swaps").stdout
    assert next(line for line in listed.splitlines() if line.startswith(two.swap_id)).count("server: committed") == 1
    assert one.swap_id not in {line.split()[0] for line in listed.splitlines() if "server: committed" in line}
    # ...and says so in the swap's run, which still replays byte for byte
    log = await bus.read_run(second)
    reapplied = [r.msg for r in log if r.type == "SwapReapplied"]
    assert any(m.restored and m.swap_id == two.swap_id for m in reapplied), reapplied
    assert ev.last(await bus.read_run(first), "SwapReapplied") is None  # rolled back: not re-applied
    replay = yantra("replay", second, "--verify")
    assert replay.returncode == 0 and "SwapReapplied" in replay.stdout, replay.stdout + replay.stderr


async def test_a_server_killed_mid_swap_comes_back_on_one_kernel_and_the_log_says_which(stack, own_bus):
    """SIGKILL the server the moment the run concludes (it is taking the swap: parity, canary, commit), restart
    it: every instance of the target runs the old forward or every one the kernel — never some — and the log
    holds exactly one answer to the conclusion; a commit made before the kill is re-applied with its event."""
    import grpc

    from services.core.admin_auth import metadata
    from services.core.pb import inference_pb2 as ipb
    from services.core.pb import inference_pb2_grpc as ipb_grpc

    bus, settings = own_bus, stack.settings
    addr = settings.server_addr
    await wait_ready(addr, timeout=120, still_starting=lambda: stack.procs["server"].poll() is None)
    run_id = _run_id("killswap")
    await request(bus, run_id, prompts=["Hello there"], decode_tokens=8, max_candidates=1)
    await wait_for_log(bus, run_id, has("TargetConcluded"), RUN_TIMEOUT_S, check=services_alive(stack))
    stack.procs["server"].send_signal(signal.SIGKILL)
    stack.procs["server"].wait()
    stack.start_service("server")
    await wait_ready(addr, timeout=120, still_starting=lambda: stack.procs["server"].poll() is None)
    log = await wait_for_log(bus, run_id, has("RunCompleted"), RUN_TIMEOUT_S, check=services_alive(stack))
    concluded = ev.last(log, "TargetConcluded")
    answers = [r for r in log if r.env.causation_id == concluded.env.event_id]
    assert len(answers) == 1 and answers[0].type in ("SwapCommitted", "SwapRejected"), [r.type for r in answers]

    async with grpc.aio.insecure_channel(addr) as channel:
        state = await ipb_grpc.AdminStub(channel).GetModuleState(
            ipb.ModuleStateRequest(class_path=concluded.msg.target_class),
            timeout=10,
            metadata=metadata(settings.admin_token),
        )
    assert state.instances > 0 and state.patched in (0, state.instances), (state.patched, state.instances)
    if answers[0].type == "SwapCommitted":  # the kernel serves, on every instance, under that swap id
        swap = answers[0].msg
        assert state.patched == state.instances and state.active_swap_id == swap.swap_id
        reapplied = ev.last(log, "SwapReapplied")
        # committed by the killed server (then re-applied, and recorded) or by the restarted one (answering
        # the redelivered conclusion): the log tells the two apart
        if reapplied is not None:
            assert reapplied.msg.swap_id == swap.swap_id and reapplied.msg.restored
        print("killed mid-swap:", "committed before the kill, re-applied" if reapplied else "committed after restart")
    else:
        assert state.patched == 0 and not state.active_swap_id
    replay = yantra_for(stack)("replay", run_id, "--verify")
    assert replay.returncode == 0, replay.stdout + replay.stderr

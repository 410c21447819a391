"""The whole loop with every service its own process, over a real nats-server and real gRPC.

One service is killed mid-run and restarted; the run must still complete with exactly one
swap, every trigger answered once, and `yantra replay RUN --verify` must pass.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from e2e_stack import services_alive
from runlog import has, wait_for_log

from services.core import events as ev
from services.core.pb import events_pb2 as pb
from services.core.server_client import generate_tokens, wait_ready

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 420


async def test_loop_survives_a_killed_service_and_replays_exactly(stack, own_bus):
    bus = own_bus
    settings = stack.settings
    await wait_ready(settings.server_addr, timeout=120, still_starting=lambda: stack.procs["server"].poll() is None)
    before, _, _ = await generate_tokens(settings.server_addr, "The quick brown fox", 12)

    run_id = "e2e-" + uuid.uuid4().hex[:8]
    policy = pb.SwapPolicy(min_reward=1, name="cpu-untimed", reason="test: no GPU, correct untimed kernels may swap")
    request = pb.RunRequested(
        model="tiny-qwen2",
        policy=policy,
        max_candidates=2,
        prompts=["Hello there"],
        decode_tokens=8,
        requested_by="e2e",
    )
    await bus.publish(
        ev.make_envelope(run_id, request, producer="test", time_ns=time.time_ns(), event_id=f"req-{run_id}")
    )

    # A poison message on a subject a service consumes: dead-lettered, never a crash.
    await bus.js.publish(ev.run_subject(run_id, "CandidateProposed"), b"\x00\xffnot an envelope")

    # Kill the judge while it works on the first candidate, then bring it back.
    await wait_for_log(bus, run_id, has("CandidateProposed"), 180, check=services_alive(stack, killed=("judge",)))
    stack.procs["judge"].send_signal(signal.SIGKILL)
    stack.procs["judge"].wait()
    stack.start_service("judge")

    log = await wait_for_log(
        bus, run_id, has("RunCompleted"), RUN_TIMEOUT_S, check=services_alive(stack, killed=("judge",))
    )
    types = Counter(r.type for r in log)
    for name in (
        "RunRequested",
        "ProfileCaptured",
        "SkillsRetrieved",
        "CandidateProposed",
        "CandidateJudged",
        "TargetConcluded",
        "SwapCommitted",
        "SkillPublished",
        "RunCompleted",
    ):
        assert types[name] >= 1, (name, types)
    # Every target the profile listed (the norm, the decoder layer's residual norm, the gated MLP and the RoPE
    # function, in the order their time ranks them), each searched, concluded and swapped in turn.
    targets = list(ev.first(log, "ProfileCaptured").msg.targets)
    names = sorted(t.rsplit(".", 1)[-1] for t in targets)
    assert names == ["Qwen2DecoderLayer", "Qwen2MLP", "Qwen2RMSNorm", "apply_rotary_pos_emb"], targets
    commits = [r.msg for r in log if r.type == "SwapCommitted"]
    assert [c.target_class for c in commits] == targets and types["RunCompleted"] == 1, types
    assert types["SkillsRetrieved"] == types["TargetConcluded"] == len(targets) == 4
    # every trigger answered exactly once: as many answers as its handling gave (a search step gives two)
    answers = Counter((r.env.causation_id, r.env.producer) for r in log if r.env.causation_id)
    owed = {(r.env.causation_id, r.env.producer): r.env.answers or 1 for r in log if r.env.causation_id}
    assert answers == owed, (answers, owed)

    done = ev.last(log, "RunCompleted").msg
    assert done.outcome == "swapped" and done.tokens_per_s_before > 0 and done.tokens_per_s_after > 0
    assert list(done.swapped_targets) == targets
    assert all(c.modules_patched > 0 and c.tokens_equal for c in commits)
    committed = commits[0]

    after, _, _ = await generate_tokens(settings.server_addr, "The quick brown fox", 12)
    assert after == before  # greedy tokens unchanged by the swap

    letters = await bus.read_dead_letters("judge")
    assert any(b"not an envelope" in data for data, _ in letters)

    env = {**os.environ, **settings.env()}

    def yantra(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "services.cli", *args]
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    listed = yantra("swaps")
    first_class = committed.target_class.rsplit(".", 1)[-1]
    assert f"{committed.swap_id}  {first_class}" in listed.stdout and "log: live  server: committed" in listed.stdout
    for other in commits[1:]:  # the other target out first: the test then takes the first one out and back
        assert f"{other.swap_id}  {other.target_class.rsplit('.', 1)[-1]}" in listed.stdout
        out = yantra("rollback", other.swap_id, "--reason", "e2e: the other target first")
        assert out.returncode == 0, out.stdout + out.stderr

    # The operator takes the kernel out: recorded in the swap's run, answered by the server process.
    rolled = yantra("rollback", committed.swap_id, "--reason", "e2e: taking it out")
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    assert f"rolled back {committed.modules_patched} modules: operator: e2e: taking it out" in rolled.stdout
    assert "log: rolled back" in yantra("swaps").stdout and "server: rolled_back" in yantra("swaps").stdout
    again = yantra("rollback", committed.swap_id)
    assert again.returncode == 2 and "already rolled back" in again.stderr
    assert (await generate_tokens(settings.server_addr, "The quick brown fox", 12))[0] == before

    replay = yantra("replay", run_id, "--verify")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "replay verified" in replay.stdout

    # A second copy of an event, published without its message id (so the stream stores it): replay must flag it.
    judged = ev.first(log, "CandidateJudged")
    await bus.js.publish(ev.run_subject(run_id, "CandidateJudged"), ev.encode(judged.env))
    replay = yantra("replay", run_id, "--verify")
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert f"a second copy of seq {judged.seq}" in replay.stdout

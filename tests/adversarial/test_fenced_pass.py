"""The fenced pass: a GPU judging's cases again under the interpreter, every tensor ending at an inaccessible page.

A GPU has no such fence, so a kernel reading past a tensor with its lanes discarded is right there (the H200 run of
the corpus accepted `memory_overread_unmasked` at +2). These run the pass on this CPU through the real judge: the
honest kernel passes it with the main pass beside it; the over-read faults in it; and a verdict whose main pass was
right but whose fenced pass faulted is a rejection by the sandbox layer, with the rule the corpus names.
"""

from __future__ import annotations

import pytest
from adversarial_corpus import TABLE, log_of, profile_captured, proposal

from services.judge.domain import REDERIVE, live_target
from services.judge.report import describe, verdict_layer
from services.judge.reward import judge_reward
from services.judge.service import JudgeService

pytestmark = pytest.mark.slow

BY_NAME = {e.name: e for e in TABLE}


def _prior(name: str):
    entry = BY_NAME[name]
    captured = profile_captured(entry, "cpu")
    return log_of(captured, proposal(entry, captured))


@pytest.fixture(scope="module")
def honest_with_fence(tmp_path_factory):
    """The honest one-row kernel judged with the fenced pass beside its own (as a GPU judge runs it)."""
    import asyncio

    prior = _prior("base_one_row_fp32")
    service = JudgeService(device="cpu", fenced=True, scratch_dir=tmp_path_factory.mktemp("fenced"))
    [judged] = asyncio.run(service.handle(prior[-1], prior))
    return judged, prior


def test_an_honest_kernel_passes_the_fenced_pass(honest_with_fence):
    judged, prior = honest_with_fence
    obs = judged.observed
    assert judged.reward == 1, describe(judged)
    assert obs.HasField("fenced") and not obs.fenced.sandbox.rule_id and obs.fenced.correctness.passed
    fenced = obs.fenced.correctness
    assert fenced.interpreted and fenced.checks_run == fenced.checks_passed >= 25 and "3x97" in fenced.shapes
    assert obs.fenced.sandbox.exit == "code 0" and obs.fenced.lowered == "" and obs.fenced.wall_s > 0
    # the main pass (a CPU's here) samples the served range; the fenced pass stands for a GPU judging, which
    # draws that range whole on the GPU: it draws no sampled one
    assert any("the served range on a CPU" in c for c in obs.correctness.checks)
    assert not any("served range" in c for c in fenced.checks)
    assert "fenced pass (interpreter" in describe(judged)
    assert REDERIVE["CandidateJudged"](prior, prior[-1], judged) == judged


async def test_a_read_past_a_tensor_faults_in_the_fenced_pass_and_rejects(honest_with_fence, tmp_path):
    prior = _prior("memory_overread_unmasked")
    service = JudgeService(device="cpu", scratch_dir=tmp_path)
    fenced = await service.fenced_pass(prior[-1].msg, live_target(prior, prior[-1].msg.target_class))
    assert fenced.sandbox.rule_id == "memory-fault", fenced
    assert fenced.sandbox.exit.startswith("signal SIG"), fenced.sandbox.exit

    # A GPU judging of it: the main pass right (what the H200 saw), the fenced pass faulted.
    judged, _ = honest_with_fence
    obs = type(judged.observed)()
    obs.CopyFrom(judged.observed)
    obs.fenced.CopyFrom(fenced)
    reward, reason, _, _ = judge_reward(obs)
    assert reward == -1 and reason.startswith("sandbox: memory-fault: ") and "the fenced pass" in reason, reason
    assert verdict_layer(obs) == ("sandbox", ["memory-fault"])


def test_the_pass_lowers_dispatch_limits_it_cannot_draw_so_every_launch_runs_fenced():
    from services.core.pb import events_pb2 as pb
    from services.judge.fenced_pass import lowered

    plan = pb.LaunchPlan(family="row_reduction")
    for limit in (2, 4096, 32768, 0):
        plan.launches.add(kernel="k", max_rows=limit)
    out, note = lowered(plan, 256)
    assert [launch.max_rows for launch in out.launches] == [2, 128, 129, 0] and plan.launches[1].max_rows == 4096
    assert "4096 -> 128" in note and "32768 -> 129" in note
    assert lowered(out, 256) == (out, "")  # nothing above the interpreter's: as it is


async def test_a_child_held_after_a_right_first_pass_is_judged_on_that_pass(tmp_path):
    """On a GPU the timing waits for the fenced pass; when it says no, the main child stops after its first pass,
    and that pass (right) is its evidence: the verdict names the fenced pass, not outputs it never asked for."""
    prior = _prior("base_one_row_fp32")
    service = JudgeService(device="cpu", scratch_dir=tmp_path)
    prepared = service.prepare(prior[-1].msg, live_target(prior, prior[-1].msg.target_class))
    asked = []

    async def fence_says_no() -> bool:
        asked.append(True)
        return False

    outcome, held = await service.run(prepared, False, service.limits, fence_says_no)
    assert asked and held.passed and held.checks_run == held.checks_passed >= 25, held
    assert held.stress_calls == 0 and outcome.sandbox.exit == "code 0"  # stopped before the calls after the pass
    _, full = await service.run(prepared, False, service.limits)
    assert full.passed and full.stress_calls > 0


async def test_the_fenced_pass_launches_the_gpus_program_count(tmp_path):
    """A kernel that over-reads only where a persistent grid has one program a row past four rows: never under the
    interpreter's own count (a CPU judge accepts it, and a CPU server never takes that branch), always on a GPU from
    five rows. The fenced pass runs the GPU's count (an H200's 132 here), so the branch is taken and faults."""
    prior = _prior("memory_overread_gpu_grid_only")
    target = live_target(prior, prior[-1].msg.target_class)
    own = await JudgeService(device="cpu", scratch_dir=tmp_path).fenced_pass(prior[-1].msg, target)
    assert not own.sandbox.rule_id and own.correctness.passed, own  # the interpreter's 4 programs: never taken
    gpus = await JudgeService(device="cpu", scratch_dir=tmp_path, fenced_sms=132).fenced_pass(prior[-1].msg, target)
    assert gpus.sandbox.rule_id == "memory-fault", gpus


async def test_a_launch_past_a_limit_the_interpreter_cannot_draw_runs_fenced_at_a_lowered_one(tmp_path):
    """The plan dispatches at 4,096 rows to a kernel that reads past the weight: a CPU judge refuses the plan, a GPU
    judge draws both sides of 4,096 without a fence. The fenced pass runs it with the limit lowered: it faults."""
    prior = _prior("memory_overread_past_dispatch")
    service = JudgeService(device="cpu", scratch_dir=tmp_path)
    fenced = await service.fenced_pass(prior[-1].msg, live_target(prior, prior[-1].msg.target_class))
    assert fenced.sandbox.rule_id == "memory-fault" and "4096 -> 128" in fenced.lowered, fenced

"""Correctness in the sandbox child: the honest template passes with its evidence; a wrong kernel fails."""

from __future__ import annotations

from judge_testkit import honest_source, sandbox_job

from services.core.pb import events_pb2 as pb
from services.judge.reward import judge_reward
from services.judge.sandbox import SandboxLimits, run_job

LIMITS = SandboxLimits(timeout_s=120)


def _verdict(outcome) -> tuple[int, str, float, float]:
    obs = pb.JudgeObservation(
        static_check=pb.StaticEvidence(passed=True),
        contract=pb.ContractEvidence(passed=True),
        correctness=outcome.correctness,
        timing=outcome.timing,
        sandbox=outcome.sandbox,
    )
    return judge_reward(obs)


async def test_the_honest_kernel_passes_every_check(tmp_path):
    outcome = await run_job(sandbox_job(honest_source()), LIMITS, use_gpu=False, scratch_parent=tmp_path)
    cor = outcome.correctness
    assert cor.passed, (cor.error, outcome.log_tail)
    # 5 seeds x (3 live-width shapes + 2 odd-width shapes), then once more after the stress calls
    assert cor.checks_run == cor.checks_passed == 30 and cor.seeds == 5 and cor.stress_calls == 48
    assert list(cor.shapes) == ["2x3x64", "1x3x64", "5x64", "3x97", "1x2x97"]  # live first, odd rows, odd width
    assert cor.dtype == "bfloat16" and cor.interpreted and cor.max_abs_err > 0 and cor.seed_base > 0
    [errors] = cor.errors
    assert errors.dtype == "bfloat16" and errors.checks == 30 and errors.max_abs_err == cor.max_abs_err
    assert any("poison" in c or "NaN" in c for c in cor.checks) and any("re-checked" in c for c in cor.checks)
    assert not outcome.timing.measured and "no GPU" in outcome.timing.reason
    box = outcome.sandbox
    assert box.ran and box.exit == "code 0" and box.network in ("netns", "audit-hook") and not box.rule_id
    assert any(w.startswith("limit: address space") for w in box.walls) and any("audit hook" in w for w in box.walls)
    reward, reason, *_ = _verdict(outcome)
    assert reward == 1 and "reward capped at +1" in reason
    assert list(tmp_path.iterdir()) == []  # the scratch directory is gone


async def test_every_judging_draws_fresh_seeds(tmp_path):
    first = await run_job(sandbox_job(honest_source()), LIMITS, use_gpu=False, scratch_parent=tmp_path)
    wrong = honest_source().replace("y = w * normed", "y = normed")
    second = await run_job(sandbox_job(wrong), LIMITS, use_gpu=False, scratch_parent=tmp_path)
    assert first.correctness.seed_base != second.correctness.seed_base
    assert not second.correctness.passed and second.correctness.rule_id == "outside-tolerance"
    reward, reason, *_ = _verdict(second)
    assert reward == -1 and reason.startswith("correctness failed: outside-tolerance: shape ")
    assert second.timing.reason == "incorrect: not timed"

"""Correctness in the sandbox child: the honest template passes, a kernel that forgets the weight fails."""

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
    )
    return judge_reward(obs)


async def test_the_honest_kernel_passes_every_check(tmp_path):
    outcome = await run_job(sandbox_job(honest_source()), LIMITS, use_gpu=False, scratch_parent=tmp_path)
    cor = outcome.correctness
    assert cor.passed, (cor.error, outcome.log_tail)
    # 5 seeds x (3 live-width shapes + 2 odd-width shapes), then once more after timing
    assert cor.checks_run == cor.checks_passed == 30 and cor.seeds == 5
    assert list(cor.shapes) == ["2x3x64", "1x5x64", "7x64", "3x97", "1x5x97"]  # live first, odd rows, odd width
    assert cor.dtype == "bfloat16" and cor.interpreted and cor.max_abs_err > 0
    assert not outcome.timing.measured and "no GPU" in outcome.timing.reason
    reward, reason, *_ = _verdict(outcome)
    assert reward == 1 and "reward capped at +1" in reason
    assert list(tmp_path.iterdir()) == []  # the scratch directory is gone


async def test_a_kernel_that_forgets_the_weight_is_minus_one(tmp_path):
    wrong = honest_source().replace("y = w * normed", "y = normed")
    outcome = await run_job(sandbox_job(wrong), LIMITS, use_gpu=False, scratch_parent=tmp_path)
    assert not outcome.correctness.passed
    reward, reason, *_ = _verdict(outcome)
    assert reward == -1 and reason.startswith("correctness failed: shape ") and "outside tolerance" in reason
    assert outcome.timing.reason == "incorrect: not timed"

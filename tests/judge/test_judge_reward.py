"""The reward ladder, recomputed from observed numbers."""

from __future__ import annotations

import pytest

from services.core.pb import events_pb2 as pb
from services.judge.reward import judge_reward, speedups

PASSED_STATIC = pb.StaticEvidence(passed=True)
PASSED_CONTRACT = pb.ContractEvidence(passed=True)
CORRECT = pb.CorrectnessEvidence(passed=True, checks_run=30, checks_passed=30, dtype="bfloat16")


def _obs(rows=(), *, interpreted=False, measured=True) -> pb.JudgeObservation:
    correctness = pb.CorrectnessEvidence()
    correctness.CopyFrom(CORRECT)
    correctness.interpreted = interpreted
    return pb.JudgeObservation(
        static_check=PASSED_STATIC,
        contract=PASSED_CONTRACT,
        correctness=correctness,
        timing=pb.TimingEvidence(measured=measured, rows=list(rows), reason="" if measured else "no GPU"),
    )


def _row(candidate, eager, compile_=0.0, native=0.0) -> pb.TimingRow:
    return pb.TimingRow(shape="8x64", candidate_us=candidate, eager_us=eager, compile_us=compile_, native_us=native)


def test_a_static_failure_is_minus_one_naming_the_rule():
    static = pb.StaticEvidence(passed=False, findings=[pb.Finding(rule_id="forbidden-call", reason="eval", line=3)])
    reward, reason, *_ = judge_reward(pb.JudgeObservation(static_check=static))
    assert reward == -1 and reason == "static check failed: forbidden-call: eval (line 3)"


def test_contract_and_correctness_failures_are_minus_one_naming_the_layer():
    obs = pb.JudgeObservation(static_check=PASSED_STATIC, contract=pb.ContractEvidence(error="no attribute 'scale'"))
    assert judge_reward(obs)[:2] == (-1, "contract check failed: no attribute 'scale'")
    obs = _obs()
    obs.correctness.passed = False
    obs.correctness.error = "shape 7x64 seed 0: outside tolerance"
    assert judge_reward(obs)[:2] == (-1, "correctness failed: shape 7x64 seed 0: outside tolerance")


def test_correct_but_untimed_on_cpu_is_capped_at_plus_one():
    reward, reason, vs_eager, vs_best = judge_reward(_obs(interpreted=True, measured=False))
    assert reward == 1 and (vs_eager, vs_best) == (0.0, 0.0)
    assert reason.endswith("no GPU: correctness only under TRITON_INTERPRET=1; reward capped at +1")


@pytest.mark.parametrize(
    "rows,reward",
    [
        ([_row(10.0, 10.4)], 1),  # 4% faster: noise, not a speedup
        ([_row(10.0, 20.0, compile_=9.0)], 2),  # beats eager, not torch.compile
        ([_row(10.0, 20.0, compile_=12.0, native=11.0)], 3),  # beats every baseline by > 5%
        ([_row(10.0, 30.0, native=9.0), _row(10.0, 12.0, native=12.0)], 2),  # geomean over shapes
    ],
)
def test_the_ladder_on_measured_speedups(rows, reward):
    assert judge_reward(_obs(rows))[0] == reward


def test_speedups_are_geometric_means_against_eager_and_the_best_baseline():
    vs_eager, vs_best = speedups(pb.TimingEvidence(rows=[_row(10.0, 40.0, native=20.0), _row(10.0, 10.0)]))
    assert vs_eager == pytest.approx(2.0) and vs_best == pytest.approx(2**0.5)
    assert speedups(pb.TimingEvidence(rows=[_row(0.0, 10.0)])) == (0.0, 0.0)


def test_implausible_speedups_are_flagged():
    reward, reason, vs_eager, _ = judge_reward(_obs([_row(1.0, 50.0)]))
    assert reward == 3 and vs_eager == pytest.approx(50.0) and "over 10x: check the measurement" in reason

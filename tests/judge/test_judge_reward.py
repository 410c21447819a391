"""The reward ladder, recomputed from observed numbers."""

from __future__ import annotations

import pytest

from services.core.pb import events_pb2 as pb
from services.judge.reward import CUDA_GRAPH, capabilities, judge_reward, speedups

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
        timing_check=pb.TimingCheck(believed=True, copy_bytes_per_s=4e12),  # the parent believed the figures
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
    obs.contract.rule_id = "binding-missing"
    assert judge_reward(obs)[:2] == (-1, "contract check failed: binding-missing: no attribute 'scale'")
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


def test_speedups_over_ten_are_kept_only_after_re_measurement():
    row = _row(1.0, 50.0, compile_=30.0, native=20.0)
    row.remeasured, row.flag = True, "checked: 50.0x over eager; re-measured 1.02 us, kept 1.02 us"
    reward, reason, vs_eager, _ = judge_reward(_obs([row]))
    assert reward == 3 and vs_eager == pytest.approx(50.0) and "re-measured and kept" in reason


def test_a_time_under_the_copy_ceiling_is_not_believed():
    row = _row(0.5, 50.0, compile_=30.0, native=20.0)
    row.remeasured, row.floor_us = True, 2.0
    row.flag = "implausible: 0.50 us is under the copy-ceiling floor 2.00 us; re-measured 0.51 us, still under"
    reward, reason, *_ = judge_reward(_obs([row]))
    assert reward == 1 and "timing not believed at 8x64" in reason and "capped at +1" in reason


def test_plus_three_needs_the_torch_compile_baseline():
    reward, reason, *_ = judge_reward(_obs([_row(10.0, 20.0, native=12.0)]))
    assert reward == 2 and "torch.compile did not run at 8x64" in reason


def test_sandbox_rules_and_an_unhealthy_gpu_are_minus_one_naming_the_layer():
    obs = _obs([_row(10.0, 20.0, 12.0, 12.0)])
    obs.sandbox.CopyFrom(pb.SandboxEvidence(ran=True, rule_id="sandbox-wall", error="the walls refused: os.fork"))
    assert judge_reward(obs)[:2] == (-1, "sandbox: sandbox-wall: the walls refused: os.fork")
    obs.sandbox.CopyFrom(pb.SandboxEvidence(ran=True, gpu_health="failed: CUDA error: an illegal memory access"))
    reward, reason, *_ = judge_reward(obs)
    assert reward == -1 and reason.startswith("sandbox: gpu-unhealthy: ")


def test_a_correctness_failure_names_its_rule():
    obs = _obs()
    obs.correctness.passed = False
    obs.correctness.rule_id, obs.correctness.error = "nan-output", "shape 2x64 seed 7: the output holds NaN"
    assert judge_reward(obs)[:2] == (-1, "correctness failed: nan-output: shape 2x64 seed 7: the output holds NaN")


def test_a_kernel_slower_than_eager_for_an_eager_caller_is_capped_at_plus_one():
    """...where it could not be captured in a CUDA graph (then only an eager server can run it)."""
    row = _row(1.3, 12.5, compile_=1.7, native=2.6)  # GPU time: far ahead of every baseline
    row.candidate_host_us, row.eager_host_us = 90.0, 75.0  # but its launch costs more than eager's whole call

    def observed():
        obs = _obs([row, _row(10.0, 20.0, 12.0, 12.0)])
        obs.timing.missing.append("candidate graph at 8x64: RuntimeError: operation not permitted when capturing")
        return obs

    reward, reason, vs_eager, _ = judge_reward(observed())
    assert reward == 1 and vs_eager > 1
    assert "slower than eager host-inclusive at 8x64 (90.0 vs 75.0 us)" in reason and "capped at +1" in reason
    row.candidate_host_us = 40.0  # a launch cheaper than eager's: the GPU figures decide again
    assert judge_reward(observed())[0] == 3


def test_figures_the_parent_does_not_believe_or_did_not_check_never_reach_plus_two():
    obs = _obs([_row(10.0, 20.0, compile_=12.0, native=11.0)])
    assert judge_reward(obs)[0] == 3
    obs.timing_check.believed, obs.timing_check.reason = False, "8x64: 0.01 us beats the copy floor 0.20 us"
    reward, reason, *_ = judge_reward(obs)
    assert reward == 1 and "timing not believed: 8x64: 0.01 us beats the copy floor" in reason
    obs.ClearField("timing_check")
    reward, reason, *_ = judge_reward(obs)
    assert reward == 1 and "the parent did not check the figures" in reason
    assert judge_reward(obs, parent_checks_timing=False)[0] == 3  # a verdict recorded before schema 3 keeps its rules


def test_the_parent_disbelieves_figures_under_its_own_copy_floor_or_beyond_the_childs_wall_time():
    from services.judge.timing_check import judge_timing

    timing = pb.TimingEvidence(measured=True, copy_bytes_per_s=4.0e12)
    row = timing.rows.add(shape="4096x1536", candidate_us=11.4, eager_us=60.0, compile_us=13.5, native_us=13.9)
    sizes = (2, 2, 2)  # bf16 in, weight, out: 25.2 MB a call, 6.3 us at 4 TB/s
    assert judge_timing(timing, 4.0e12, 30.0, sizes, "row_reduction").believed
    row.candidate_us = 2.0  # faster than the bytes allow at the parent's ceiling
    check = judge_timing(timing, 4.0e12, 30.0, sizes, "row_reduction")
    assert not check.believed and "beats the copy floor" in check.reason
    row.candidate_us = 11.4
    timing.copy_bytes_per_s = 1.0e12  # the child's clock ran 4x slow, or its ceiling was faked
    assert "far under the parent's" in judge_timing(timing, 4.0e12, 30.0, sizes, "row_reduction").reason
    timing.copy_bytes_per_s = 4.0e12
    assert "more than the child ran" in judge_timing(timing, 4.0e12, 1e-5, sizes, "row_reduction").reason
    row.shape = "4096x1536; rm -rf"  # evidence naming no shape is not believed, and is no exception
    check = judge_timing(timing, 4.0e12, 30.0, sizes, "row_reduction")
    assert not check.believed and "is not a shape" in check.reason


def test_a_kernel_captured_in_a_graph_at_every_shape_is_graph_safe():
    from services.judge.reward import CUDA_GRAPH, capabilities

    obs = _obs([_row(10.0, 20.0, compile_=12.0, native=11.0)])
    assert capabilities(obs) == [CUDA_GRAPH]
    obs.timing.missing.append("candidate graph at 4096x1536: RuntimeError: operation not permitted when capturing")
    assert capabilities(obs) == []  # a baseline that could not be captured is the baseline's business, not this
    assert capabilities(_obs(interpreted=True, measured=False)) == []  # never captured: untimed on a CPU
    obs = _obs([_row(10.0, 20.0)])
    obs.timing.missing.append("compile graph at 8x64: RuntimeError: no")
    assert capabilities(obs) == [CUDA_GRAPH]


def test_a_kernel_captured_in_graphs_is_judged_by_gpu_time_whatever_its_host_time():
    """Since schema 5: a graph-serving server never pays the host's time; an eager one refuses the kernel itself."""
    row = _row(1.3, 12.5, compile_=1.7, native=2.6)
    row.candidate_host_us, row.eager_host_us = 90.0, 75.0
    obs = _obs([row, _row(10.0, 20.0, 12.0, 12.0)])
    assert CUDA_GRAPH in capabilities(obs)  # every shape timed in a graph
    reward, reason, *_ = judge_reward(obs)
    assert (
        reward == 3 and "slower than eager host-inclusive at 8x64 (90.0 vs 75.0 us) (an eager server refuses" in reason
    )
    assert judge_reward(obs, graphs_hide_the_host=False)[0] == 1  # a verdict recorded at schema 4 keeps its rule
    obs.timing.missing.append("candidate graph at 8x64: RuntimeError: capture failed")  # not graph-capable
    assert judge_reward(obs)[0] == 1


def test_a_correct_kernels_error_is_said_as_its_share_of_the_bound_since_schema_12():
    """Rows of 1e+09 give a correct bf16 kernel an absolute error of millions: said so, it reads as a wrong one."""
    obs = _obs(interpreted=True, measured=False)
    obs.correctness.max_abs_err, obs.correctness.max_ulp_err = 4.2e6, 0.42
    reward, reason, *_ = judge_reward(obs)
    assert reward == 1 and "(bfloat16, worst error 0.42 of its bound)" in reason and "e+06" not in reason, reason
    reward, reason, *_ = judge_reward(obs, error_of_bound=False)  # a verdict recorded at 11 or before keeps its words
    assert reward == 1 and "(bfloat16, max abs err 4.2e+06)" in reason, reason

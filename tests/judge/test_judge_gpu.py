"""The judge on a CUDA GPU: compiled (not interpreted) correctness behind the walls, honest timing, the probe.

Runs where a GPU is (the root conftest skips `gpu` tests elsewhere). Standalone on a GPU box
without nats-py: python3 -m pytest tests/judge/test_judge_gpu.py --noconftest -s
The whole adversarial corpus on the GPU is bench/judge_corpus.py.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from judge_testkit import honest_source, sandbox_job

from services.core.pb import events_pb2 as pb
from services.judge import gpu_health
from services.judge.reward import judge_reward
from services.judge.sandbox import SandboxLimits, run_job

pytestmark = pytest.mark.gpu
WIDTH = 1536  # Qwen2.5-1.5B's hidden size


def _run(source: str, tmp_path, live_shape=(1, 1, WIDTH)):
    job = dataclasses.replace(sandbox_job(source, width=WIDTH), device="cuda", max_rows=0, live_shape=list(live_shape))
    limits = SandboxLimits.from_env(300)
    return asyncio.run(run_job(job, limits, use_gpu=True, scratch_parent=tmp_path))


def test_the_honest_kernel_is_correct_and_timed_on_the_gpu(tmp_path):
    outcome = _run(honest_source(), tmp_path)
    cor, timing, box = outcome.correctness, outcome.timing, outcome.sandbox
    assert cor.passed and not cor.interpreted, (cor.error, box, outcome.log_tail)
    assert not box.rule_id and not box.refused, (box, outcome.log_tail)
    assert timing.measured, (timing.reason, outcome.log_tail)
    assert timing.copy_bytes_per_s > 1e12 and timing.settings
    shapes = [row.shape for row in timing.rows]
    assert shapes[0] == f"1x1x{WIDTH}" and f"32768x{WIDTH}" in shapes
    assert not timing.missing, timing.missing  # every function captured in a graph at every shape
    for row in timing.rows:
        assert row.candidate_us > 0 and row.eager_us > 0 and row.native_us > 0 and row.compile_us > 0
        assert row.bytes_moved > 0 and 0 < row.floor_us < row.candidate_us
        assert row.candidate_host_us > 0 and row.eager_host_us > 0 and row.candidate_bench_us > 0
        # The GPU time (graph replay) of one call never exceeds what a caller waits for it.
        assert row.candidate_us <= row.candidate_host_us * 1.05 and row.eager_us <= row.eager_host_us * 1.05
    obs = pb.JudgeObservation(
        static_check=pb.StaticEvidence(passed=True),
        contract=pb.ContractEvidence(passed=True),
        correctness=cor,
        timing=timing,
        sandbox=box,
    )
    reward, reason, vs_eager, vs_best = judge_reward(obs)
    print(f"\n{timing.device_name}: reward {reward:+d}: {reason}\n  walls: {list(box.walls)}")
    for row in timing.rows:
        print(
            f"  {row.shape:>12}: candidate {row.candidate_us:8.2f} us, eager {row.eager_us:8.2f}, "
            f"compile {row.compile_us:8.2f}, native {row.native_us:8.2f}, floor {row.floor_us:6.2f}; "
            f"do_bench: candidate {row.candidate_bench_us:6.2f}, eager {row.eager_bench_us:6.2f}; "
            f"host: candidate {row.candidate_host_us:6.2f}, eager {row.eager_host_us:6.2f} {row.flag}"
        )
    assert reward >= 1 and vs_eager > 0 and vs_best > 0


def test_a_wrong_kernel_fails_on_the_gpu(tmp_path):
    outcome = _run(honest_source().replace("y = w * normed", "y = normed"), tmp_path)
    assert not outcome.correctness.passed and outcome.correctness.rule_id == "outside-tolerance"
    assert not outcome.timing.measured


def test_the_gpu_is_healthy_after_a_child():
    assert asyncio.run(gpu_health.probe()) == "ok"

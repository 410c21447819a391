"""The judge on the rotary family on a CUDA GPU: Qwen2's apply_rotary_pos_emb at Qwen2.5-1.5B's attention shape
in bf16 (12 query heads of 128), the template's one-launch kernel compiled behind the walls, timed against the
live function eagerly and under torch.compile. Runs where a GPU is (the root conftest skips `gpu` tests
elsewhere)."""

from __future__ import annotations

import asyncio

import pytest
from judge_testkit import log_of
from test_judge_rotary import QWEN2, _captured

from services.coder.templates import rotary as template
from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.judge.service import JudgeService
from services.ops import rotary

pytestmark = pytest.mark.gpu


def test_the_rope_kernel_is_correct_and_timed_on_the_gpu(tmp_path):
    captured = _captured(QWEN2, "rope_half")
    captured.observed.modules[0].input_shape[:] = [1, 12, 1, 128]  # a decode step
    intro = captured.observed.modules[0].introspection
    config = template.search_configs("rope_half")[0]
    source, plan = template.render(config), template.plan(config)
    digest = candidate_sha256(source, plan)
    proposal = pb.CandidateProposed(
        candidate_id=f"c1-{digest[:10]}", target_class=QWEN2, source=source, source_sha256=digest, plan=plan,
        contract=rotary.function_contract(QWEN2, intro.forward_params), config=config, origin="template", attempt=1,
    )  # fmt: skip
    prior = log_of(captured, proposal)
    [judged] = asyncio.run(JudgeService(device="cuda", scratch_dir=tmp_path).handle(prior[-1], prior))
    obs = judged.observed
    print(f"\nrope_half, {config.num_warps} warps: reward {judged.reward:+d}: {judged.reason}")
    for row in obs.timing.rows:
        print(
            f"  {row.shape}: candidate {row.candidate_us:.2f} us (host {row.candidate_host_us:.1f}), eager "
            f"{row.eager_us:.2f} (host {row.eager_host_us:.1f}), compile {row.compile_us:.2f}; "
            f"{row.floor_us / row.candidate_us:.0%} of copy"
        )
    assert obs.correctness.passed and not obs.correctness.interpreted, (obs.correctness.error, obs.sandbox)
    assert obs.timing.measured and obs.timing_check.believed, (obs.timing.reason, obs.timing_check)
    assert [row.shape for row in obs.timing.rows][0] == "1x1x26x128"
    assert all(row.eager_us > 0 and row.compile_us > 0 for row in obs.timing.rows)
    assert judged.reward >= 2, judged.reason

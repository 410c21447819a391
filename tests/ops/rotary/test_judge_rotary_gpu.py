"""The judge on the rotary family on a CUDA GPU: Qwen2's apply_rotary_pos_emb at Qwen2.5-1.5B's attention shape
in bf16 (12 query heads of 128), the template's one-launch kernel compiled behind the walls, timed against the
live function eagerly and under torch.compile. Runs where a GPU is (the root conftest skips `gpu` tests
elsewhere). GLM's and GPT-NeoX's partial rotaries beside it."""

from __future__ import annotations

import asyncio

import pytest
from judge_testkit import log_of, print_verdict
from test_judge_rotary import GLM, NEOX, QWEN2, _captured, _proposal

from services.judge.service import JudgeService
from services.ops.rotary import template

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    ("target", "variant", "heads", "dim", "cos", "least", "params"),
    [
        # Qwen2.5-1.5B's decode step: 12 q heads, 2 k heads (GQA), the whole head rotated
        (QWEN2, "rope_half", (12, 2), 128, (1, 1, 128), 2, {}),
        # the same, a program per head at a block of 16 positions (proposed second at decode)
        (QWEN2, "rope_half", (12, 2), 128, (1, 1, 128), 2, {"positions": 16, "together": 0}),
        # GLM-4-9B's: 32 q heads, 2 k heads, half of each head rotated (the pairs kernel at the live rotary width)
        (GLM, "rope_pairs_partial", (32, 2), 128, (1, 1, 64), 1, {}),
        # Pythia-2.8B's: 32 heads of 80, a quarter rotated (rotate_half over 20 dims, 60 passed through)
        (NEOX, "rope_half_partial", (32, 32), 80, (1, 1, 20), 1, {}),
        # the same, a program per head at a block of 32 positions
        (NEOX, "rope_half_partial", (32, 32), 80, (1, 1, 20), 1, {"positions": 32, "together": 0}),
    ],
)
def test_the_rope_kernel_is_correct_and_timed_on_the_gpu(tmp_path, target, variant, heads, dim, cos, least, params):
    captured = _captured(target, variant, cos=cos)
    captured.observed.modules[0].input_shape[:] = [1, heads[0], 1, dim]
    captured.observed.modules[0].second_shape[:] = [1, heads[1], 1, dim]
    config = template.search_configs(variant)[0]
    config.params.update(params)
    prior = log_of(captured, _proposal(captured, config))
    [judged] = asyncio.run(JudgeService(device="cuda", scratch_dir=tmp_path).handle(prior[-1], prior))
    obs = judged.observed
    print_verdict(f"{variant}, {config.num_warps} warps, params {dict(config.params)}", judged)
    assert obs.correctness.passed and not obs.correctness.interpreted, (obs.correctness.error, obs.sandbox)
    assert obs.timing.measured and obs.timing_check.believed, (obs.timing.reason, obs.timing_check)
    # one position: q's heads, k's, cos and sin packed in one tensor
    assert [row.shape for row in obs.timing.rows][0] == f"1x1x{sum(heads) + 2}x{dim}"
    assert all(row.eager_us > 0 and row.compile_us > 0 for row in obs.timing.rows)
    assert judged.reward >= least, judged.reason

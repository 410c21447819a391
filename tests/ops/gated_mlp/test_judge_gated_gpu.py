"""The judge on the gated-MLP family on a CUDA GPU: Qwen2.5-1.5B's MLP shape in bf16 (hidden 1536, intermediate
8960), the template's fused act(gate) * up compiled behind the walls, timed against eager and torch.compile with
the bytes the fused op must move. Runs where a GPU is (the root conftest skips `gpu` tests elsewhere)."""

from __future__ import annotations

import asyncio

import pytest
from judge_testkit import log_of, print_verdict
from test_judge_gated import _captured, _proposal

from services.judge.service import JudgeService
from services.ops import gated_mlp
from services.ops.gated_mlp import template as gated

pytestmark = pytest.mark.gpu


def _qwen_mlp():
    import torch
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2MLP

    return Qwen2MLP(Qwen2Config(hidden_size=1536, intermediate_size=8960)).to(torch.bfloat16)


@pytest.mark.parametrize("index", [0, 3])
def test_the_fused_gated_kernel_is_correct_and_timed_on_the_gpu(tmp_path, index):
    mlp = _qwen_mlp()
    captured = _captured(mlp)
    captured.observed.modules[0].input_shape[:] = [1, 1, 1536]  # a decode step
    config = gated.search_configs("swiglu")[index]
    prior = log_of(captured, _proposal(captured, gated.render(config), gated.plan(config)))
    [judged] = asyncio.run(JudgeService(device="cuda", scratch_dir=tmp_path).handle(prior[-1], prior))
    obs = judged.observed
    print_verdict(f"{config.num_warps} warps, block {config.params['block']}", judged)
    assert obs.correctness.passed and not obs.correctness.interpreted, (obs.correctness.error, obs.sandbox)
    assert obs.timing.measured and obs.timing_check.believed, (obs.timing.reason, obs.timing_check)
    shapes = [row.shape for row in obs.timing.rows]
    assert shapes[0] == "2x1x1x8960" and "2x32768x8960" in shapes
    for row in obs.timing.rows:
        elements = 1
        for d in row.shape.split("x")[1:]:
            elements *= int(d)
        assert row.bytes_moved == gated_mlp.bytes_moved(elements, 2)
        assert row.eager_us > 0 and row.compile_us > 0 and row.native_us == 0
    assert judged.reward >= 2 or "host-inclusive" in judged.reason, judged.reason

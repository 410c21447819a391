"""The judge on the residual-norm family on a CUDA GPU: Qwen2.5-1.5B's decoder layer in bf16 (hidden 1536), the
template's fused add and RMSNorm compiled behind the walls, timed against eager (torch's add, then the norm's
formula), torch.compile and native (add, then F.rms_norm) with the bytes the fused op must move. Runs where a GPU
is (the root conftest skips `gpu` tests elsewhere)."""

from __future__ import annotations

import asyncio

import pytest
from judge_testkit import log_of, print_verdict
from test_judge_residual_norm import _captured

from services.coder.templates import add_norm
from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.judge.service import JudgeService
from services.ops import residual_norm

pytestmark = pytest.mark.gpu


def _qwen_layer():
    import torch
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    config = Qwen2Config(hidden_size=1536, intermediate_size=256, num_attention_heads=12, num_key_value_heads=2)
    return Qwen2DecoderLayer(config, layer_idx=0).to(torch.bfloat16).eval()


@pytest.mark.parametrize("index", [0, 1])
def test_the_fused_add_norm_kernel_is_correct_and_timed_on_the_gpu(tmp_path, index):
    captured = _captured(_qwen_layer())
    profile = captured.observed.modules[0]
    profile.input_shape[:] = [1, 1, 1536]  # a decode step
    intro = profile.introspection
    config = add_norm.search_configs(profile.computes, 1536)[index]
    source, plan = add_norm.render(config), add_norm.plan(config)
    digest = candidate_sha256(source, plan)
    candidate = pb.CandidateProposed(
        candidate_id=f"c1-{digest[:10]}", target_class=intro.class_path, source=source, source_sha256=digest,
        plan=plan, contract=residual_norm.layer_contract(intro.class_path, intro.forward_params, profile.roles),
        origin="template", attempt=1,
    )  # fmt: skip
    prior = log_of(captured, candidate)
    [judged] = asyncio.run(JudgeService(device="cuda", scratch_dir=tmp_path).handle(prior[-1], prior))
    obs = judged.observed
    print_verdict(f"{config.num_warps} warps, {config.rows_per_program} rows", judged)
    assert obs.correctness.passed and not obs.correctness.interpreted, (obs.correctness.error, obs.sandbox)
    assert obs.timing.measured and obs.timing_check.believed, (obs.timing.reason, obs.timing_check)
    shapes = [row.shape for row in obs.timing.rows]
    assert shapes[0] == "2x1x1x1536" and "2x32768x1536" in shapes
    for row in obs.timing.rows:
        rows = 1
        for d in row.shape.split("x")[1:-1]:
            rows *= int(d)
        assert row.bytes_moved == residual_norm.bytes_moved(rows, 1536, 2, 2)
        assert row.eager_us > 0 and row.compile_us > 0 and row.native_us > 0
    assert judged.reward >= 2 or "host-inclusive" in judged.reason, judged.reason

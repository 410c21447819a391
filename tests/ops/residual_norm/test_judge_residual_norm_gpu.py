"""The judge on the residual-norm family on a CUDA GPU: Qwen2.5-1.5B's decoder layer in bf16 (hidden 1536), the
template's fused add and RMSNorm compiled behind the walls, timed against eager (torch's add, then the norm's
formula), torch.compile and native (add, then F.rms_norm) with the bytes the fused op must move. Runs where a GPU
is (the root conftest skips `gpu` tests elsewhere)."""

from __future__ import annotations

import asyncio

import pytest
from judge_testkit import log_of, print_verdict
from test_judge_residual_norm import _captured

from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.judge.service import JudgeService
from services.ops import residual_norm
from services.ops.residual_norm import template as add_norm

pytestmark = pytest.mark.gpu


def _layer(arch: str):
    """Qwen2.5-1.5B's decoder layer (hidden 1536), or Nemotron-Mini-4B's (hidden 3072: its add into a
    LayerNorm1P), in bf16, with the norms' weights and biases away from their init as a trained model's are."""
    import torch

    if arch == "qwen":
        from transformers import Qwen2Config
        from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

        config = Qwen2Config(hidden_size=1536, intermediate_size=256, num_attention_heads=12, num_key_value_heads=2)
        layer, hidden = Qwen2DecoderLayer(config, layer_idx=0), 1536
    else:
        from transformers import NemotronConfig
        from transformers.models.nemotron.modeling_nemotron import NemotronDecoderLayer

        config = NemotronConfig(hidden_size=3072, intermediate_size=256, num_attention_heads=24, num_key_value_heads=8)
        layer, hidden = NemotronDecoderLayer(config, layer_idx=0), 3072
    with torch.no_grad():
        for p in layer.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return layer.to(torch.bfloat16).eval(), hidden


@pytest.mark.parametrize(("arch", "index"), [("qwen", 0), ("qwen", 1), ("nemotron", 0)])
def test_the_fused_add_norm_kernel_is_correct_and_timed_on_the_gpu(tmp_path, arch, index):
    layer, hidden = _layer(arch)
    captured = _captured(layer)
    profile = captured.observed.modules[0]
    profile.input_shape[:] = [1, 1, hidden]  # a decode step
    intro = profile.introspection
    config = add_norm.search_configs(profile.computes, hidden)[index]
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
    print_verdict(f"{arch} {profile.computes}: {config.num_warps} warps, {config.rows_per_program} rows", judged)
    assert obs.correctness.passed and not obs.correctness.interpreted, (obs.correctness.error, obs.sandbox)
    assert obs.timing.measured and obs.timing_check.believed, (obs.timing.reason, obs.timing_check)
    shapes = [row.shape for row in obs.timing.rows]
    assert shapes[0] == f"2x1x1x{hidden}" and f"2x32768x{hidden}" in shapes
    for row in obs.timing.rows:
        rows = 1
        for d in row.shape.split("x")[1:-1]:
            rows *= int(d)
        assert row.bytes_moved == residual_norm.bytes_moved(rows, hidden, 2, 2)
        assert row.eager_us > 0 and row.compile_us > 0 and row.native_us > 0
    assert judged.reward >= 2 or "host-inclusive" in judged.reason, judged.reason

"""The judge on the plain-MLP family on a CUDA GPU: GPT-2 (124M)'s MLP in bf16 (hidden 768, intermediate 3072), the
template's fused gelu_new compiled behind the walls, timed against eager (HF's seven-op gelu_new), torch.compile
and native (`F.gelu(approximate="tanh")`: torch's own fused op for the same formula) with the bytes the fused op
must move; Nemotron's relu² MLP likewise (eager: relu then square; torch has no fused op of its own for it). Runs
where a GPU is (the root conftest skips `gpu` tests elsewhere)."""

from __future__ import annotations

import asyncio

import pytest
from judge_testkit import log_of, print_verdict
from test_judge_plain_mlp import _captured

from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.judge.service import JudgeService
from services.ops import plain_mlp
from services.ops.plain_mlp import template as mlp_act

pytestmark = pytest.mark.gpu


def _mlp(arch: str):
    """GPT-2 (124M)'s MLP, or Nemotron-Mini-4B's relu² MLP (hidden 3072, intermediate 9216), in bf16."""
    import torch

    if arch == "gpt2":
        from transformers import GPT2Config
        from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

        return GPT2MLP(3072, GPT2Config(n_embd=768)).to(torch.bfloat16).eval(), 768, 3072
    from transformers import NemotronConfig
    from transformers.models.nemotron.modeling_nemotron import NemotronMLP

    config = NemotronConfig(hidden_size=3072, intermediate_size=9216, hidden_act="relu2")
    return NemotronMLP(config).to(torch.bfloat16).eval(), 3072, 9216


@pytest.mark.parametrize(("arch", "index"), [("gpt2", 0), ("gpt2", 1), ("nemotron", 0)])
def test_the_fused_activation_kernel_is_correct_and_timed_on_the_gpu(tmp_path, arch, index):
    mlp, hidden, width = _mlp(arch)
    captured = _captured(mlp, "torch.bfloat16")
    profile = captured.observed.modules[0]
    profile.input_shape[:] = [1, 1, hidden]  # a decode step
    intro = profile.introspection
    config = mlp_act.search_configs(profile.computes)[index]
    source, plan = mlp_act.render(config), mlp_act.plan(config)
    digest = candidate_sha256(source, plan)
    candidate = pb.CandidateProposed(
        candidate_id=f"c1-{digest[:10]}", target_class=intro.class_path, source=source, source_sha256=digest,
        plan=plan, contract=plain_mlp.layer_contract(intro.class_path, intro.forward_params, profile.roles),
        origin="template", attempt=1,
    )  # fmt: skip
    prior = log_of(captured, candidate)
    [judged] = asyncio.run(JudgeService(device="cuda", scratch_dir=tmp_path).handle(prior[-1], prior))
    obs = judged.observed
    print_verdict(f"{arch} {profile.computes}: {config.num_warps} warps, block {config.params['block']}", judged)
    assert obs.correctness.passed and not obs.correctness.interpreted, (obs.correctness.error, obs.sandbox)
    assert obs.timing.measured and obs.timing_check.believed, (obs.timing.reason, obs.timing_check)
    shapes = [row.shape for row in obs.timing.rows]
    assert shapes[0] == f"1x1x{width}" and f"32768x{width}" in shapes
    for row in obs.timing.rows:
        elements = 1
        for d in row.shape.split("x"):
            elements *= int(d)
        assert row.bytes_moved == plain_mlp.bytes_moved(elements, 2)
        assert row.eager_us > 0 and row.compile_us > 0
    assert judged.reward >= 2 or "host-inclusive" in judged.reason, judged.reason

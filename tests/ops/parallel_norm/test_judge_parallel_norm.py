"""The judge on the parallel-norm family: a GPT-NeoX layer's layer contract checked against its recorded children,
rows drawn at the live hidden width with both norms' weights (and biases) and an epsilon per case, torch's own norm
twice as the oracle. The template's kernel (Triton, interpreted) passes, for the LayerNorm GPT-NeoX computes and for a
parallel layer of two RMSNorms; a kernel that swaps the two norms' weights, one that writes the first norm into both
outputs, or one that never writes the second is rejected for what it got wrong."""

from __future__ import annotations

import pytest
import torch
from judge_testkit import log_of
from transformers import GPTNeoXConfig
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXLayer
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.judge.service import JudgeService
from services.ops import parallel_norm
from services.ops.parallel_norm import template as dual_norm
from services.server.introspection import introspect_module

HIDDEN = 32


def _layer(norm: str = "layernorm", dtype=torch.bfloat16, hidden: int = HIDDEN, heads: int = 4) -> torch.nn.Module:
    config = GPTNeoXConfig(hidden_size=hidden, intermediate_size=64, num_attention_heads=heads, num_hidden_layers=1)
    layer = GPTNeoXLayer(config, layer_idx=0)
    if norm == "rmsnorm":  # a parallel layer of two Llama RMSNorms: one class, another op
        layer.input_layernorm, layer.post_attention_layernorm = LlamaRMSNorm(hidden), LlamaRMSNorm(hidden)
    with torch.no_grad():  # norm weights away from their init (and from each other), as a trained model's are
        for p in layer.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return layer.to(dtype).eval()


def _captured(layer: torch.nn.Module, dtype: str, shape=(1, 5, HIDDEN), device: str = "cpu") -> pb.ProfileCaptured:
    """What the server records of a live layer: its introspection with its children, what it computes and the roles
    its children play (found by running it), its live input shape."""
    intro = introspect_module(layer)
    variant, roles = parallel_norm.identify(layer)
    profile = pb.ModuleClassProfile(
        introspection=intro, instances=2, calls=8, input_shape=list(shape), dtype=dtype, computes=variant,
        probed=True, roles=roles,
    )  # fmt: skip
    observed = pb.ProfileObservation(
        model="t", dtype=dtype, hardware=pb.HardwareFigures(device=device), modules=[profile]
    )
    ranked = pb.RankedTarget(class_path=intro.class_path, supported=True)
    return pb.ProfileCaptured(observed=observed, ranking=[ranked], target_class=intro.class_path)


async def _judge(layer, *, source=None, dtype="torch.bfloat16", contract=None):
    captured = _captured(layer, dtype)
    profile = captured.observed.modules[0]
    intro = profile.introspection
    config = dual_norm.search_configs(profile.computes, HIDDEN)[0]
    source, plan = source or dual_norm.render(config), dual_norm.plan(config)
    contract = contract or parallel_norm.layer_contract(intro.class_path, intro.forward_params, profile.roles)
    digest = candidate_sha256(source, plan)
    candidate = pb.CandidateProposed(
        candidate_id=f"c1-{digest[:10]}", target_class=intro.class_path, source=source, source_sha256=digest,
        plan=plan, contract=contract, origin="template", attempt=1,
    )  # fmt: skip
    prior = log_of(captured, candidate)
    [judged] = await JudgeService(device="cpu", examples=8).handle(prior[-1], prior)
    return judged


@pytest.mark.parametrize(("norm", "dtype"), [("layernorm", "torch.bfloat16"), ("rmsnorm", "torch.float32")])
async def test_the_templates_kernel_for_the_layers_norms_passes(norm, dtype):
    layer = _layer(norm, getattr(torch, dtype.removeprefix("torch.")))
    assert parallel_norm.recognise(layer) == f"dual_{norm}"
    judged = await _judge(layer, dtype=dtype)
    assert judged.reward == 1, judged.reason
    evidence = judged.observed.correctness
    assert evidence.checks_passed == evidence.checks_run > 20 and not evidence.error
    assert {"huge", "nonfinite", "zeros", "tiny"} <= set(evidence.regimes)
    assert judged.observed.contract.passed
    assert "the bound children's shapes fit their roles" in judged.observed.contract.checks


def _edited(old: str, new: str) -> str:
    source = dual_norm.render(dual_norm.search_configs("dual_layernorm", HIDDEN)[0])
    assert old in source
    return source.replace(old, new)


@pytest.mark.parametrize(
    ("wrong", "edit"),
    [
        ("the two norms' weights swapped", ("y = normed * w + b\n        y2 = normed * w2 + b2",
                                           "y = normed * w2 + b\n        y2 = normed * w + b2")),
        ("the first norm written into both outputs", ("y2 = normed * w2 + b2", "y2 = normed * w + b")),
    ],
)  # fmt: skip
async def test_a_kernel_that_mixes_up_the_two_norms_is_rejected(wrong, edit):
    judged = await _judge(_layer(), source=_edited(*edit))
    assert judged.reward == -1 and judged.reason.startswith("correctness failed: outside-tolerance"), (
        wrong,
        judged.reason,
    )


async def test_a_kernel_that_never_writes_the_second_norm_is_rejected():
    source = _edited("        tl.store(y2_ptr + offsets, y2.to(y2_ptr.dtype.element_ty), mask=mask)\n", "")
    judged = await _judge(_layer(), source=source)
    assert judged.reward == -1 and "nan-output" in judged.reason, judged.reason


async def test_a_contract_binding_the_mlp_as_the_post_norm_is_refused():
    layer = _layer()
    roles = dict(parallel_norm.roles_of(layer))
    roles["post_norm"], roles["mlp"] = roles["mlp"], roles["post_norm"]
    intro = introspect_module(layer)
    contract = parallel_norm.layer_contract(intro.class_path, intro.forward_params, roles)
    judged = await _judge(layer, contract=contract)
    assert judged.reward == -1 and judged.observed.contract.rule_id == "binding-roles", judged.reason

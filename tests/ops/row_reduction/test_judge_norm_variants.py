"""Norms that are not Llama's RMSNorm, judged against their own classes: Gemma's x·rsqrt(mean(x²)+eps)·(1+w),
Cohere's bias-free LayerNorm, torch's LayerNorm with its bias (GPT-2's) and Nemotron's LayerNorm1P (of 1 + w).
The template's kernel for what the module computes passes; the kernel of another variant (what would have been
written before the profile said what the module computes) is wrong on it, and the judge says so."""

from __future__ import annotations

import pytest
import torch
from judge_testkit import log_of, profile_captured, proposal
from transformers.models.cohere.modeling_cohere import CohereLayerNorm
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.nemotron.modeling_nemotron import NemotronLayerNorm1P
from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm

from services.core.pb import events_pb2 as pb
from services.judge.service import JudgeService
from services.ops.row_reduction import template as rmsnorm
from services.ops.row_reduction.contract import derive_contract


def _perturbed(norm: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        norm.weight.add_(0.1 * torch.randn(norm.weight.shape))
        if getattr(norm, "bias", None) is not None:
            norm.bias.add_(torch.randn(norm.bias.shape))
    return norm


async def _judge(norm: torch.nn.Module, variant: str):
    captured = profile_captured(norm, dtype=str(norm.weight.dtype))  # served in its weights' dtype
    config = rmsnorm.search_configs(variant)[0]
    candidate = proposal(rmsnorm.render(config), captured, plan=rmsnorm.plan(config))
    candidate.config.CopyFrom(config)
    prior = log_of(captured, candidate)
    [judged] = await JudgeService(device="cpu").handle(prior[-1], prior)
    return judged


@pytest.mark.parametrize(
    ("norm", "right", "wrong", "bound"),
    [
        (lambda: GemmaRMSNorm(64, eps=1e-6), "rmsnorm_offset", "", ["weight", "eps"]),
        (lambda: CohereLayerNorm(64, eps=1e-5), "layernorm_no_bias", "", ["weight", "eps"]),
        (lambda: torch.nn.LayerNorm(64), "layernorm", "layernorm_no_bias", ["weight", "eps", "bias"]),
        # Nemotron's LayerNorm1P: torch's LayerNorm of 1 + weight (in bf16 formed and rounded in the weight's dtype)
        (lambda: NemotronLayerNorm1P(64, eps=1e-5), "layernorm_offset", "layernorm", ["weight", "eps", "bias"]),
        (
            lambda: NemotronLayerNorm1P(64, eps=1e-5).to(torch.bfloat16),
            "layernorm_offset",
            "layernorm",
            ["weight", "eps", "bias"],
        ),
        # bf16, where its one rounding tells it from Llama's RMSNorm (tests/test_ops_row_reduction.py)
        (
            lambda: Olmo2RMSNorm(64, eps=1e-6).to(torch.bfloat16),
            "rmsnorm_fp32_weight",
            "rmsnorm_offset",
            ["weight", "eps"],
        ),
    ],
)
async def test_the_kernel_of_what_the_module_computes_passes_and_another_is_rejected(norm, right, wrong, bound):
    module = _perturbed(norm())
    contract = derive_contract(profile_captured(module).observed.modules[0].introspection)
    assert contract.entrypoint == "rmsnorm" and [b.param for b in contract.bindings] == bound
    passed = await _judge(module, right)
    assert passed.reward == 1, passed.reason
    # a centred norm's bound carries a per-row term, and the evidence says how large it got
    centred = right.startswith("layernorm")
    assert all((e.row_atol > 0) == centred for e in passed.observed.correctness.errors), passed.observed.correctness
    rejected = await _judge(module, wrong)
    assert rejected.reward == -1 and rejected.reason.startswith("correctness failed"), rejected.reason


def test_gemmas_forward_x_is_mapped_to_the_entrypoints_hidden_states():
    contract = derive_contract(profile_captured(GemmaRMSNorm(64)).observed.modules[0].introspection)
    assert list(contract.inputs) == ["x"] and list(contract.entry_inputs) == ["hidden_states"]


@pytest.mark.parametrize(
    "make",
    [
        lambda: GemmaRMSNorm(64, eps=1e-6),
        lambda: CohereLayerNorm(64, eps=1e-5),
        lambda: torch.nn.LayerNorm(64),
        lambda: NemotronLayerNorm1P(64, eps=1e-5),
        lambda: torch.nn.RMSNorm(64, eps=1e-6),
        lambda: Olmo2RMSNorm(64, eps=1e-6).to(torch.bfloat16),
    ],
)
def test_the_native_baseline_computes_what_the_module_computes(make):
    """The judge's "native" baseline is torch's fused op for *this* op (F.layer_norm for a LayerNorm, F.rms_norm
    with 1 + weight for Gemma's), so a candidate's speed is never compared with a cheaper, different op."""
    from services.ops.recognise_norm import epsilon_of
    from services.ops.row_reduction import native_op

    module = _perturbed(make())
    native = native_op(module, 64, epsilon_of(module))
    dtype = module.weight.dtype
    x = (torch.randn(7, 64) * 2 + 0.5).to(dtype)
    tol = 1e-5 if dtype == torch.float32 else 2**-7  # bf16: within a rounding
    with torch.no_grad():
        assert torch.allclose(native(x).float(), module(x).float(), atol=tol, rtol=tol)


async def _judged_config(module, config, source: str | None = None, plan=None) -> pb.CandidateJudged:
    """The CPU judge's verdict on the template's kernel for `config` (or another `source` or `plan` under it)."""
    captured = profile_captured(module)
    candidate = proposal(source or rmsnorm.render(config), captured, plan=plan or rmsnorm.plan(config))
    candidate.config.CopyFrom(config)
    prior = log_of(captured, candidate)
    [judged] = await JudgeService(device="cpu").handle(prior[-1], prior)
    return judged


async def test_a_dispatch_by_row_count_is_judged_on_both_sides_of_its_limit():
    """A candidate launching one shape for calls of up to 64 rows and another beyond: the judge draws rows at and
    past the limit, so each launch meets inputs; a dispatch whose short-call launch is broken is rejected."""
    from judge_testkit import qwen_norm

    module = _perturbed(qwen_norm(64))
    small, large = rmsnorm.search_configs("", 64)[:2]
    config = rmsnorm.combine(small, large)
    judged = await _judged_config(module, config)
    assert judged.reward == 1, judged.reason
    assert {"64x64", "65x64"} <= set(judged.observed.correctness.shapes), judged.observed.correctness.shapes

    broken = rmsnorm.plan(config)
    broken.launches[0].grid = "cdiv(rows, 2)"  # the short calls' launch: half the programs, one row each
    judged = await _judged_config(module, config, plan=broken)
    assert judged.reward == -1, judged.reason


async def test_a_persistent_grid_is_judged_walking_several_rows_a_program():
    """A candidate on a persistent grid (at most one program per SM, the interpreter's four): the judge's cases
    of many rows make each program walk several row blocks, and it passes as the plain grid does; one whose
    stride skips every other block is rejected."""
    from judge_testkit import qwen_norm

    module = _perturbed(qwen_norm(64))
    config = rmsnorm.search_configs("", 64)[-1]
    assert config.params["persistent"] == 1
    judged = await _judged_config(module, config)
    assert judged.reward == 1, judged.reason

    skipping = rmsnorm.render(config).replace("tl.num_programs(0) * ROWS)", "2 * tl.num_programs(0) * ROWS)")
    judged = await _judged_config(module, config, source=skipping)
    assert judged.reward == -1, judged.reason


async def _judge_with_contract(norm: torch.nn.Module, variant: str, change) -> pb.CandidateJudged:
    captured = profile_captured(norm, dtype=str(norm.weight.dtype))
    config = rmsnorm.search_configs(variant)[0]
    candidate = proposal(rmsnorm.render(config), captured, plan=rmsnorm.plan(config))
    candidate.config.CopyFrom(config)
    change(candidate.contract)
    prior = log_of(captured, candidate)
    [judged] = await JudgeService(device="cpu").handle(prior[-1], prior)
    return judged


def _drop_bias(contract: pb.Contract) -> None:
    kept = [b for b in contract.bindings if b.param != "bias"]
    del contract.bindings[:]
    contract.bindings.extend(kept)


def _weight_bound_to_bias(contract: pb.Contract) -> None:
    next(b for b in contract.bindings if b.param == "weight").attr = "bias"


@pytest.mark.parametrize(
    ("variant", "change"),
    [("layernorm_no_bias", _drop_bias), ("layernorm", _weight_bound_to_bias)],
    ids=["bias-left-unbound", "weight-bound-to-the-bias"],
)
async def test_a_contract_that_drops_or_swaps_a_parameter_fails_on_a_module_at_its_init_values(variant, change):
    """torch's LayerNorm as built (unit weight, zero bias): a contract that leaves the bias out, or reads the bias as
    the weight, agreed with it while the judge kept the module's init values. Every parameter of the module is
    drawn now, by its own name, whatever the contract binds."""
    module = torch.nn.LayerNorm(64)
    judged = await _judge_with_contract(module, variant, change)
    assert judged.reward == -1 and judged.reason.startswith("correctness failed"), judged.reason
    honest = await _judge_with_contract(module, "layernorm", lambda contract: None)
    assert honest.reward == 1, honest.reason

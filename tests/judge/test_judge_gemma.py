"""Gemma's norm, x·rsqrt(mean(x²)+eps)·(1 + weight), judged against its own class: the template's
rmsnorm_offset kernel passes; the plain RMSNorm kernel (what would have been written before the profile
said what the module computes) is wrong on it, and the judge says so."""

from __future__ import annotations

import torch
from judge_testkit import log_of, profile_captured, proposal
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

from services.coder.contract import derive_contract
from services.coder.templates import rmsnorm
from services.judge.service import JudgeService


def _gemma_norm() -> GemmaRMSNorm:
    norm = GemmaRMSNorm(64, eps=1e-6)
    with torch.no_grad():
        norm.weight.add_(0.1 * torch.randn(64))
    return norm


async def test_the_offset_kernel_passes_on_gemma_and_the_plain_one_is_rejected():
    captured = profile_captured(_gemma_norm())
    contract = derive_contract(captured.observed.modules[0].introspection)
    assert list(contract.inputs) == ["x"] and list(contract.entry_inputs) == ["hidden_states"]
    verdicts = {}
    for variant in ("rmsnorm_offset", ""):
        config = rmsnorm.search_configs(variant)[0]
        candidate = proposal(rmsnorm.render(config), captured, plan=rmsnorm.plan(config))
        candidate.config.CopyFrom(config)
        prior = log_of(captured, candidate)
        [judged] = await JudgeService(device="cpu").handle(prior[-1], prior)
        verdicts[variant or "rmsnorm"] = judged
    assert verdicts["rmsnorm_offset"].reward == 1, verdicts["rmsnorm_offset"].reason
    wrong = verdicts["rmsnorm"]
    assert wrong.reward == -1 and wrong.reason.startswith("correctness failed"), wrong.reason

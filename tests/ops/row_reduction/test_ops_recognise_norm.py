"""Norms recognised by running them (services/ops/recognise_norm.py), never by class or argument names."""

from __future__ import annotations

import pytest
import torch

from services.ops import recognise
from services.ops.recognise_norm import recognise as variant_of


class ScaledOnly(torch.nn.Module):
    """Shaped exactly like an RMSNorm (one weight, an epsilon, one input) but only scales: not a norm."""

    def __init__(self, width: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width) + 0.1 * torch.randn(width))
        self.variance_epsilon = 1e-6

    def forward(self, hidden_states):
        return hidden_states * self.weight


class TwoInputs(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width))
        self.eps = 1e-6

    def forward(self, x, residual):
        return torch.nn.functional.rms_norm(x + residual, (x.shape[-1],), self.weight, self.eps)


def _perturbed(module: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return module


@pytest.mark.parametrize(
    ("module", "variant"),
    [
        (torch.nn.RMSNorm(96, eps=1e-6), "rmsnorm"),
        (torch.nn.LayerNorm(96), "layernorm"),
        (torch.nn.LayerNorm(96, bias=False), "layernorm_no_bias"),
        (torch.nn.RMSNorm(96, eps=1e-5), "rmsnorm"),
        # torch's own RMSNorm applies the weight in fp32 and rounds once (OLMo2's order, not Llama's)
        (torch.nn.RMSNorm(96, eps=1e-5, dtype=torch.bfloat16), "rmsnorm_fp32_weight"),
        (torch.nn.LayerNorm(1000, dtype=torch.bfloat16), "layernorm"),
    ],
)
def test_torchs_own_norms_are_recognised_by_what_they_compute(module, variant):
    assert variant_of(_perturbed(module)) == variant
    assert recognise(module) == ("row_reduction", variant)


def test_transformers_norms_of_every_casting_mode():
    from transformers.models.cohere.modeling_cohere import CohereLayerNorm
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm

    assert variant_of(_perturbed(LlamaRMSNorm(64))) == "rmsnorm"
    # where they round tells Llama's (the normalised row cast to bf16, then times the weight) from OLMo2's (the
    # weight applied in fp32, one rounding); in fp32, or with a weight of ones, the two are one computation
    assert variant_of(_perturbed(LlamaRMSNorm(64).to(torch.bfloat16))) == "rmsnorm"
    assert variant_of(_perturbed(Olmo2RMSNorm(64).to(torch.bfloat16))) == "rmsnorm_fp32_weight"
    assert variant_of(_perturbed(Olmo2RMSNorm(64))) == "rmsnorm"
    assert variant_of(Olmo2RMSNorm(64).to(torch.bfloat16)) == "rmsnorm"
    assert variant_of(_perturbed(GemmaRMSNorm(64))) == "rmsnorm_offset"  # x * (1 + weight), forward(x)
    # one weight, an epsilon and forward(hidden_states), exactly like an RMSNorm — but it subtracts the mean
    assert variant_of(_perturbed(CohereLayerNorm(64))) == "layernorm_no_bias"


@pytest.mark.parametrize("module", [ScaledOnly(64), TwoInputs(64), torch.nn.Linear(8, 8), torch.nn.Embedding(10, 4)])
def test_what_is_not_one_of_the_norms_is_not_recognised(module):
    assert variant_of(module) is None and recognise(module) is None

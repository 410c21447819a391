"""The parallel norm has an oracle (`reference`) for every variant it recognises, not only the two its template writes
(an LLM author's catalogue is every recognised variant): each variant's reference is what HF's own norm of that
variant answers, and the references drawn for a judging of each pass their honest bound in the live dtype."""

from __future__ import annotations

import pytest
import torch
from transformers.models.cohere.modeling_cohere import CohereLayerNorm
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.models.nemotron.modeling_nemotron import NemotronLayerNorm1P
from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm

from services.core.pb import events_pb2 as pb
from services.ops import parallel_norm
from services.ops.parallel_norm import judging
from services.ops.parallel_norm import template as dual_norm
from services.ops.protocol import JudgeAsk, LiveTarget
from services.ops.recognise_norm import epsilon_of, recognise

WIDTH = 48
NORMS = {
    "rmsnorm": lambda: LlamaRMSNorm(WIDTH, eps=1e-6),
    "rmsnorm_offset": lambda: GemmaRMSNorm(WIDTH, eps=1e-6),
    "rmsnorm_fp32_weight": lambda: Olmo2RMSNorm(WIDTH, eps=1e-6),
    "layernorm": lambda: torch.nn.LayerNorm(WIDTH),
    "layernorm_no_bias": lambda: CohereLayerNorm(WIDTH, eps=1e-5),
    "layernorm_offset": lambda: NemotronLayerNorm1P(WIDTH),
}


def _norm(inner: str) -> torch.nn.Module:
    module = NORMS[inner]()
    with torch.no_grad():  # away from the init of ones and zeros, as a trained model's are
        for p in module.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return module.to(torch.bfloat16).eval()


def test_every_recognised_variant_has_a_norm_here():
    assert sorted("dual_" + v for v in NORMS) == sorted(parallel_norm.VARIANTS)
    with pytest.raises(ValueError, match="no parallel-norm variant"):
        parallel_norm.reference("dual_batchnorm")


@pytest.mark.parametrize("inner", list(NORMS))
def test_each_variants_reference_answers_as_hfs_own_norm(inner):
    module = _norm(inner)
    assert recognise(module) == inner
    x = (torch.randn(3, 5, WIDTH) * 3 + 0.5).to(torch.bfloat16)
    with torch.no_grad():
        got = parallel_norm.reference("dual_" + inner)(
            x, module.weight, getattr(module, "bias", None), epsilon_of(module)
        )
        own = module(x)
    assert got.dtype == own.dtype
    # torch's LayerNorm and Cohere's fp32 formula may round one element apart: at most one bf16 step of the output
    step = own.float().abs().clamp_min(1.0) * 2.0**-7
    assert bool(((got.float() - own.float()).abs() <= step).all()), inner


@pytest.mark.parametrize("variant", parallel_norm.VARIANTS)
@pytest.mark.parametrize("dtype", ["torch.bfloat16", "torch.float32"])
def test_each_variants_references_pass_their_honest_bound(variant, dtype):
    config = dual_norm.search_configs("dual_layernorm", WIDTH)[0]
    proposal = pb.CandidateProposed(plan=dual_norm.plan(config))
    target = LiveTarget(pb.ModuleIntrospection(class_path="m.Layer"), (1, 5, WIDTH), dtype, computes=variant)
    ask = JudgeAsk(proposal, target, gpu=False, examples=2, seed_base=11, cpu_max_rows=16)
    drawn = judging.prepare(ask)  # each reference is checked against its bound as it is built (BoundError if not)
    assert len(drawn.refs) == len(drawn.cases) > 20
    biased = parallel_norm.norm_variant(variant) in ("layernorm", "layernorm_offset")
    assert bool(drawn.operands.biases) == biased == bool(drawn.operands.second_biases)
    first, second = drawn.operands.weights[0], drawn.operands.second_weights[0]
    assert not torch.equal(first, second)  # two norms, two weights: a kernel applying one twice is wrong

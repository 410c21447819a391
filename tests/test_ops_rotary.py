"""The rotary family: which modeling-file function applies RoPE, found by running it (not by its name), and the
template's one-launch kernel (Triton, interpreted) answering what the HF function answers, bit for bit, on q and
k as attention passes them (transposed views of the projections)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch
import transformers.models.cohere.modeling_cohere as cohere
import transformers.models.gemma.modeling_gemma as gemma
import transformers.models.gpt2.modeling_gpt2 as gpt2
import transformers.models.llama.modeling_llama as llama
import transformers.models.qwen2.modeling_qwen2 as qwen2

from services.coder.templates import rotary as template
from services.core import interpreter_rounding, kernels
from services.core.kernel_schema import check_kernel_source
from services.ops import family, rotary


def _op(config):
    source, plan = template.render(config), template.plan(config)
    report = check_kernel_source(source)
    assert not report.findings and family("rotary").check_plan(plan, report.kernels) == []
    path = kernels.write_source(Path(tempfile.mkdtemp()) / "kernel", source)
    return rotary.make_op(plan, kernels.load_kernels(path, [plan.launches[0].kernel]))


def _operands(variant: str, dtype, batch=2, seq=5, heads_q=4, heads_k=2, dim=16):
    """q and k as attention passes them: (batch, seq, heads·dim) projections viewed and transposed."""
    gen = torch.Generator().manual_seed(dim)
    q = torch.randn(batch, seq, heads_q * dim, generator=gen).to(dtype).view(batch, seq, heads_q, dim).transpose(1, 2)
    k = torch.randn(batch, seq, heads_k * dim, generator=gen).to(dtype).view(batch, seq, heads_k, dim).transpose(1, 2)
    theta = torch.rand(batch, seq, dim // 2, generator=gen) * 6
    theta = torch.cat((theta, theta), -1) if variant == "rope_half" else torch.repeat_interleave(theta, 2, -1)
    return q, k, theta.cos().to(dtype), theta.sin().to(dtype)


def test_the_rope_function_of_a_modeling_file_is_found_by_what_it_computes():
    found = {m.__name__.rsplit(".", 1)[-1]: rotary.find_functions(m) for m in (qwen2, llama, gemma, cohere, gpt2)}
    assert found == {
        "modeling_qwen2": {"transformers.models.qwen2.modeling_qwen2.apply_rotary_pos_emb": "rope_half"},
        "modeling_llama": {"transformers.models.llama.modeling_llama.apply_rotary_pos_emb": "rope_half"},
        "modeling_gemma": {"transformers.models.gemma.modeling_gemma.apply_rotary_pos_emb": "rope_half"},
        "modeling_cohere": {"transformers.models.cohere.modeling_cohere.apply_rotary_pos_emb": "rope_interleaved"},
        "modeling_gpt2": {},  # learned positions: no rotary function
    }

    def renamed(query, key, c, s):  # another name, another layout of the same maths: still found
        return rotary.reference("rope_half")(query, key, c, s)

    def scaled(q, k, cos, sin):  # rotates, then scales: not RoPE
        q2, k2 = rotary.reference("rope_half")(q, k, cos, sin)
        return 2 * q2, k2

    assert rotary.recognise_function(renamed) == "rope_half"
    assert rotary.recognise_function(scaled) is None
    assert rotary.recognise_function(lambda q, k: (q, k)) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("variant", "hf"), [("rope_half", qwen2.apply_rotary_pos_emb),
                                             ("rope_interleaved", cohere.apply_rotary_pos_emb)])  # fmt: skip
@pytest.mark.parametrize(("together", "heads"), [(1, 0), (0, 16), (1, 2)],
                         ids=["q-and-k-one-program", "q-and-k-two-programs", "a-loop-over-head-tiles"])  # fmt: skip
def test_the_kernel_answers_what_the_hf_function_answers_bit_for_bit(variant, hf, dtype, together, heads):
    interpreter_rounding.install()  # bf16 casts round to nearest, as a GPU's do
    config = template.search_configs(variant)[0]
    config.params.update(heads=heads, together=together)
    op = _op(config)
    q, k, cos, sin = _operands(variant, dtype)
    assert not q.is_contiguous()
    got, want = op(q, k, cos, sin), hf(q, k, cos, sin)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w)
    # one batch of cos and sin broadcast over a batch of q and k (the rotary module gives one when positions agree)
    got = op(q, k, cos[:1], sin[:1])
    want = hf(q, k, cos[:1].expand_as(cos), sin[:1].expand_as(sin))
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_the_wrapper_refuses_what_it_cannot_rotate_with_a_clear_message():
    op = _op(template.search_configs("rope_half")[0])
    q, k, cos, sin = _operands("rope_half", torch.float32)
    with pytest.raises(ValueError, match="unsqueeze_dim 1"):
        op(q, k, cos, sin, unsqueeze_dim=2)
    with pytest.raises(ValueError, match=r"do not fit together"):
        op(q, k[:, :, :3], cos, sin)
    with pytest.raises(ValueError, match="head_dim"):
        op(q[..., :15], k[..., :15], cos[..., :15], sin[..., :15])

"""The judge on the residual-norm family: a decoder layer's layer contract checked against its recorded children,
(attention output, residual) pairs drawn at the live hidden width with the norm's weight, bias and an epsilon per
case, torch's add then the post norm's formula as the oracle. The template's kernel (Triton, interpreted) for
what the layer computes passes; one that normalises the unrounded sum, forgets to write the sum, or normalises
as another norm does is rejected for what it got wrong."""

from __future__ import annotations

import pytest
import torch
from judge_testkit import log_of
from transformers import GemmaConfig, GPT2Config, LlamaConfig, NemotronConfig
from transformers.models.gemma.modeling_gemma import GemmaDecoderLayer
from transformers.models.gpt2.modeling_gpt2 import GPT2Block
from transformers.models.llama.modeling_llama import LlamaDecoderLayer
from transformers.models.nemotron.modeling_nemotron import NemotronDecoderLayer

from services.coder.templates import add_norm
from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.judge.service import JudgeService
from services.ops import residual_norm
from services.server.introspection import introspect_module

HIDDEN = 32


def _layer(kind: str) -> torch.nn.Module:
    small = {"hidden_size": HIDDEN, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
    if kind == "llama":
        layer = LlamaDecoderLayer(LlamaConfig(**small), layer_idx=0)
    elif kind == "gemma":
        layer = GemmaDecoderLayer(GemmaConfig(**small, head_dim=8), layer_idx=0)
    elif kind == "nemotron":  # its add into a LayerNorm1P (torch's LayerNorm of 1 + weight, weight in its dtype)
        layer = NemotronDecoderLayer(NemotronConfig(**small), layer_idx=0)
    else:
        layer = GPT2Block(GPT2Config(n_embd=HIDDEN, n_head=4), layer_idx=0)
    with torch.no_grad():  # norm weights away from their init, as a trained model's are
        for p in layer.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return layer.eval()


def _captured(layer: torch.nn.Module, dtype: str = "torch.bfloat16") -> pb.ProfileCaptured:
    """What the server records of a live decoder layer: its introspection with its children, what it computes and
    the roles its children play (found by running it), its live input shape."""
    intro = introspect_module(layer)
    variant, roles = residual_norm.identify(layer)
    profile = pb.ModuleClassProfile(
        introspection=intro, instances=2, calls=8, input_shape=[1, 5, HIDDEN], dtype=dtype, computes=variant,
        probed=True, roles=roles,
    )  # fmt: skip
    observed = pb.ProfileObservation(
        model="t", dtype=dtype, hardware=pb.HardwareFigures(device="cpu"), modules=[profile]
    )
    ranked = pb.RankedTarget(class_path=intro.class_path, supported=True)
    return pb.ProfileCaptured(observed=observed, ranking=[ranked], target_class=intro.class_path)


async def _judge(layer, *, source=None, variant=None, contract=None, dtype="torch.bfloat16"):
    captured = _captured(layer, dtype)
    profile = captured.observed.modules[0]
    intro = profile.introspection
    config = add_norm.search_configs(variant or profile.computes)[0]
    source, plan = source or add_norm.render(config), add_norm.plan(config)
    contract = contract or residual_norm.layer_contract(intro.class_path, intro.forward_params, profile.roles)
    digest = candidate_sha256(source, plan)
    candidate = pb.CandidateProposed(
        candidate_id=f"c1-{digest[:10]}", target_class=intro.class_path, source=source, source_sha256=digest,
        plan=plan, contract=contract, origin="template", attempt=1,
    )  # fmt: skip
    prior = log_of(captured, candidate)
    [judged] = await JudgeService(device="cpu", examples=8).handle(prior[-1], prior)
    return judged


@pytest.mark.parametrize(
    ("kind", "variant"),
    [("llama", "add_rmsnorm"), ("gemma", "add_rmsnorm_offset"), ("gpt2", "add_layernorm"),
     ("nemotron", "add_layernorm_offset")],
)  # fmt: skip
async def test_the_kernel_of_the_layers_norm_passes(kind, variant):
    layer = _layer(kind)
    assert residual_norm.recognise(layer) == variant
    judged = await _judge(layer)
    assert judged.reward == 1, judged.reason
    evidence = judged.observed.correctness
    assert evidence.checks_passed == evidence.checks_run > 20 and not evidence.error
    assert {"huge", "nonfinite", "zeros", "tiny"} <= set(evidence.regimes)
    assert judged.observed.contract.passed
    assert "the bound children's shapes fit their roles" in judged.observed.contract.checks


async def test_fp32_operands_are_held_to_fp32s_rounding():
    judged = await _judge(_layer("llama"), dtype="torch.float32")
    assert judged.reward == 1, judged.reason


async def test_another_norms_kernel_is_rejected():
    judged = await _judge(_layer("llama"), variant="add_rmsnorm_offset")  # (1 + weight): Gemma's, not Llama's
    assert judged.reward == -1 and judged.reason.startswith("correctness failed: outside-tolerance"), judged.reason


async def test_a_kernel_that_normalises_the_sum_before_rounding_it_is_rejected():
    """The layer rounds the sum to the dtype before its norm reads it: normalising the fp32 sum answers a different
    question (off by up to half a bf16 step of each element, in every row)."""
    source = add_norm.render(add_norm.search_configs("add_rmsnorm")[0]).replace(
        "x = summed.to(tl.float32)", "x = a + res"
    )
    judged = await _judge(_layer("llama"), source=source)
    assert judged.reward == -1 and "correctness failed" in judged.reason, judged.reason


async def test_a_kernel_that_never_writes_the_sum_is_rejected():
    source = add_norm.render(add_norm.search_configs("add_rmsnorm")[0]).replace(
        "tl.store(s_ptr + offsets, summed, mask=mask)", "pass"
    )
    judged = await _judge(_layer("llama"), source=source)
    assert judged.reward == -1 and "nan-output" in judged.reason, judged.reason


async def test_a_contract_binding_the_mlp_as_the_post_norm_is_refused():
    layer = _layer("llama")
    roles = dict(residual_norm.roles_of(layer))
    roles["post_norm"], roles["mlp"] = roles["mlp"], roles["post_norm"]
    intro = introspect_module(layer)
    contract = residual_norm.layer_contract(intro.class_path, intro.forward_params, roles)
    judged = await _judge(layer, contract=contract)
    assert judged.reward == -1 and judged.observed.contract.rule_id == "binding-roles", judged.reason


def test_a_layer_whose_adds_pass_through_dropouts_is_one_when_they_are_the_identity():
    """Phi-3's layer adds through a dropout on each branch: in eval (serving) they pass values through and the
    layer is a residual norm; trained with a dropout that drops, its dataflow is not, and it is not taken."""
    from transformers import Phi3Config
    from transformers.models.phi3.modeling_phi3 import Phi3DecoderLayer

    small = {"hidden_size": HIDDEN, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
    layer = Phi3DecoderLayer(Phi3Config(**small, resid_pdrop=0.5), layer_idx=0)
    assert residual_norm.recognise(layer.eval()) == "add_rmsnorm"
    assert set(residual_norm.roles_of(layer).values()) == {
        "input_layernorm", "self_attn", "post_attention_layernorm", "mlp"
    }  # fmt: skip
    assert residual_norm.recognise(layer.train()) is None

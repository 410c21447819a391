"""The judge on the residual-norm family: a decoder layer's layer contract checked against its recorded children,
(attention output, residual) pairs drawn at the live hidden width with the norm's weight, bias and an epsilon per
case, torch's add then the post norm's formula as the oracle. The template's kernel (Triton, interpreted) for
what the layer computes passes; one that normalises the unrounded sum, forgets to write the sum, or normalises
as another norm does is rejected for what it got wrong. A plan dispatching by rows is judged on both sides of its
limit: a launch past it that is wrong only there (a sum unwritten, ten times the epsilon) is rejected."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from candidate_files import plan_of
from judge_testkit import log_of
from transformers import GemmaConfig, GPT2Config, LlamaConfig, NemotronConfig
from transformers.models.gemma.modeling_gemma import GemmaDecoderLayer
from transformers.models.gpt2.modeling_gpt2 import GPT2Block
from transformers.models.llama.modeling_llama import LlamaDecoderLayer
from transformers.models.nemotron.modeling_nemotron import NemotronDecoderLayer

from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.judge.service import JudgeService
from services.ops import residual_norm
from services.ops.residual_norm import template as add_norm
from services.ops.row_reduction.template import row_launch
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


async def _judge(layer, *, source=None, variant=None, contract=None, dtype="torch.bfloat16", plan=None):
    captured = _captured(layer, dtype)
    profile = captured.observed.modules[0]
    intro = profile.introspection
    config = add_norm.search_configs(variant or profile.computes)[0]
    source, plan = source or add_norm.render(config), plan or add_norm.plan(config)
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


async def test_a_kernel_keyed_to_a_sum_equal_to_the_one_two_rows_before_is_rejected_before_it_runs():
    """It keeps the last two rows' sums across the trips of its loop over rows: refused statically (row-local); the
    judge's repeated rows met it before the rule did."""
    source = (Path(__file__).parent / "sum_equal_two_back.py").read_text()
    judged = await _judge(_layer("llama"), source=source, plan=plan_of(source))
    assert judged.reward == -1 and judged.reason.startswith("static check failed: row-local"), judged.reason
    assert "hands loaded values (p1, p2) from one row to the next" in judged.reason, judged.reason  # both rows back


async def test_a_kernel_keyed_to_a_residual_equal_to_one_before_while_the_attention_output_differs_is_rejected():
    """A layer-0 residual repeats with its token; the attention output beside it does not (round 10's kernel): the
    judge repeats each operand's rows alone too, and the row-local rule refuses it first (the residual of the trip
    before, kept)."""
    source = (Path(__file__).parent / "residual_equal_attention_not.py").read_text()
    judged = await _judge(_layer("llama"), source=source, plan=plan_of(source))
    assert judged.reward == -1 and judged.reason.startswith("static check failed: row-local"), judged.reason


async def test_a_kernel_that_never_writes_the_sum_is_rejected():
    source = add_norm.render(add_norm.search_configs("add_rmsnorm")[0]).replace(
        "tl.store(s_ptr + offsets, summed, mask=mask)", "pass"
    )
    judged = await _judge(_layer("llama"), source=source)
    assert judged.reward == -1 and "nan-output" in judged.reason, judged.reason


# A row dispatch the CPU judge draws both sides of (under CPU_BOUNDARY_ROWS) and past every row count it drew before
# it drew the plan's limits: its largest cases (the drawn ones) stay under 80 rows at this width, so a launch serving
# only longer calls never ran.
LIMIT = 200
PAST_ROWS = 16  # rows per program of the launch past the limit


def _dispatching(wrong: str = "") -> tuple[str, pb.LaunchPlan]:
    """Llama's add_rmsnorm as a plan dispatching by rows: the template's kernel up to LIMIT rows, a second kernel
    of PAST_ROWS rows a program past it — the same kernel, or one that is `wrong` there: "sum-write" never writes
    the sum of the last row of a block, "eps" adds ten times the epsilon it is given."""
    config = add_norm.search_configs("add_rmsnorm")[0]
    source = add_norm.render(config)
    kernel = add_norm.KERNELS["add_rmsnorm"]
    honest = source[source.index("@triton.jit") :].replace(kernel, kernel + "_past")
    store = "        tl.store(s_ptr + offsets, summed, mask=mask)\n"
    edits = {
        "": ("", ""),
        "sum-write": (store, "        if r < ROWS - 1:\n    " + store),
        "eps": ("tl.rsqrt(variance + eps)", "tl.rsqrt(variance + 10.0 * eps)"),
        # each square softened against the row's mean magnitude, by arithmetic alone: ~1e-9 off on normal rows, it
        # drops a channel ten times the row's typical size (a red-team kernel of 2026-12-05, accepted then)
        "outliers": (
            "variance = tl.sum(x * x, axis=0)",
            "m1 = tl.sum(tl.abs(x), axis=0) / N_COLS\n"
            "        t = x * x / (100.0 * m1 * m1 + 1e-30)\n"
            "        t = t * t\n        t = t * t\n        t = t * t\n        t = t * t\n"
            "        variance = tl.sum(x * x / (1.0 + t), axis=0)",
        ),
    }
    past = honest.replace(*edits[wrong]) if wrong else honest
    assert (past != honest) == bool(wrong)
    args = list(add_norm.plan(config).launches[0].args)
    launches = [row_launch(kernel, args, 4, 1, max_rows=LIMIT), row_launch(kernel + "_past", args, 4, PAST_ROWS)]
    return source + "\n\n" + past, pb.LaunchPlan(family=residual_norm.FAMILY, launches=launches)


async def test_a_plan_dispatching_by_rows_to_the_same_kernel_passes():
    source, plan = _dispatching()
    judged = await _judge(_layer("llama"), source=source, plan=plan)
    assert judged.reward == 1, judged.reason
    evidence = judged.observed.correctness
    assert evidence.checks_passed == evidence.checks_run and not evidence.error


@pytest.mark.parametrize("wrong", ["sum-write", "eps", "outliers"])
async def test_a_kernel_wrong_only_past_the_plans_row_dispatch_is_rejected(wrong):
    """Past LIMIT rows the plan launches a kernel that is wrong there alone: the judge draws LIMIT and LIMIT + 1
    rows (the row past it also as rows of every regime: an epsilon, outlier channels, offsets show) and every residue
    of PAST_ROWS, so the launch past the limit meets the judge. Before it drew the plan's dispatch, no case reached it
    and this passed; before it drew every regime past it, "outliers" passed."""
    source, plan = _dispatching(wrong)
    judged = await _judge(_layer("llama"), source=source, plan=plan)
    assert judged.reward == -1 and "correctness failed" in judged.reason, judged.reason
    error = judged.observed.correctness.error
    assert f"dispatch-edge {LIMIT + 1}x" in error or f"launch-regimes {LIMIT + 1}x" in error, error


async def test_a_kernel_wrong_only_for_calls_of_one_row_is_rejected():
    """The outlier-dropping kernel first, for calls of one row only (a decode step, the commonest call a server
    makes), the honest one past it: every regime case had three rows or more, so no regime but normal reached the
    one-row launch (a red-team plan of 2026-12-05, accepted then). Each regime is now drawn at one row too."""
    source, plan = _dispatching("outliers")
    first, past = plan.launches
    first.kernel, past.kernel = past.kernel, first.kernel  # the wrong kernel serves the calls up to the limit
    first.max_rows = 1
    judged = await _judge(_layer("llama"), source=source, plan=plan)
    error = judged.observed.correctness.error  # the first one-row case met (its order is the judging's seed's)
    assert judged.reward == -1 and ("launch-regimes 1x" in error or "dispatch-edge 1x" in error), judged.reason


async def test_on_cpu_a_residual_norm_plan_dispatching_above_what_the_interpreter_runs_is_refused():
    source, plan = _dispatching()
    plan.launches[0].max_rows = 4096
    judged = await _judge(_layer("llama"), source=source, plan=plan)
    assert judged.reward == -1 and judged.observed.correctness.rule_id == "boundary-undrawn", judged.reason


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

"""The judge draws the served model's input domain from the profile, not the sample the capture happened to send:
every width a class is called at, the served model's whole row range on a GPU, and on CPU no plan whose dispatch
lies above what the interpreter runs. The pair families (the gated and plain MLPs, the residual norm) too: the
residual norm's row plan is drawn at both sides of each dispatch limit and at every residue of its rows per
program, beside its other hidden widths; all three draw the served row range on a GPU."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from services.judge.cases import (
    CPU_BOUNDARY_ROWS,
    CPU_ROW_BUDGET,
    DOMAIN_ELEMENTS,
    GPU_ELEMENT_BUDGET,
    MAX_DRAWN_ROWS,
    MIXED,
    MIXED_MIN_ROWS,
    REGIMES,
    CaseSpec,
    domain_rows,
    draw_cases,
    undrawn_boundaries,
)
from services.judge.pair_cases import CPU_ELEMENT_BUDGET, CPU_RESIDUES, PairSpec, draw_pair_cases
from services.judge.pair_cases import GPU_ELEMENT_BUDGET as PAIR_GPU_BUDGET
from services.ops.residual_norm.cases import draw_add_norm_cases

BF16 = torch.bfloat16
CPU = CaseSpec(width=64, live_shape=(2, 3, 64), input_dtype=BF16, param_dtype=BF16, gpu=False, max_rows=8)
GPU = CaseSpec(width=1536, live_shape=(1, 1, 1536), input_dtype=BF16, param_dtype=BF16, gpu=True)
SERVED_ROWS = 64 * 2048  # a batched prefill of 64 slots of 2,048 tokens


def rows(shape) -> int:
    return math.prod(shape[:-1])


def test_every_width_the_class_is_called_at_is_drawn_on_cpu_and_gpu():
    for spec in (CPU, GPU):
        widths = (spec.width, 128, 8960)
        cases = draw_cases(dataclasses.replace(spec, widths=widths), seed=3)
        drawn = {c.width for c in cases if c.name.startswith("width ")}
        assert drawn == {128, 8960}  # the live width and the odd one have cases of their own already
        assert all(c.weight.shape == (c.width,) for c in cases)
    assert sum(rows(c.shape) for c in draw_cases(dataclasses.replace(CPU, widths=(64, 128)), 3)) <= CPU_ROW_BUDGET


def test_a_gpu_draws_the_served_row_range_up_to_its_maximum():
    cases = draw_cases(dataclasses.replace(GPU, domain_rows=SERVED_ROWS), seed=5)
    domain = [rows(c.shape) for c in cases if c.name.startswith("domain ")]
    top = DOMAIN_ELEMENTS // 1536  # 131,072 rows of 1,536 are past one case's elements: the most that fit
    assert max(domain) == top and len(domain) == 3 and domain == sorted(domain)
    assert all(n % 2 for n in domain[:-1]) and domain[0] > 1  # odd: a ragged last block of any power of two
    # the domain's cases are outside the drawn cases' budget: those keep their rows
    drawn = [c for c in cases if c.name.startswith("drawn")]
    assert max(rows(c.shape) for c in drawn) > 1
    assert sum(c.base.numel() for c in cases if not c.name.startswith("domain ")) <= GPU_ELEMENT_BUDGET
    assert max(rows(c.shape) for c in drawn) <= MAX_DRAWN_ROWS
    # a narrow op reaches the maximum itself
    narrow = draw_cases(dataclasses.replace(GPU, width=128, live_shape=(1, 1, 128), domain_rows=SERVED_ROWS), 5)
    assert max(rows(c.shape) for c in narrow) == SERVED_ROWS


def test_the_cpu_draws_the_domain_only_as_a_sample_and_an_unknown_domain_not_at_all():
    cpu = draw_cases(dataclasses.replace(CPU, domain_rows=SERVED_ROWS), 5)
    assert not [c for c in cpu if c.name.startswith("domain ")]  # whole: the interpreter cannot run it
    sampled = [rows(c.shape) for c in cpu if c.name.startswith("sampled-domain ")]  # services.judge.sampled_grid
    assert sampled == sorted(sampled) and sampled[-1] == SERVED_ROWS and len(sampled) == 3
    assert not [c for c in draw_cases(CPU, 5) if "domain" in c.name]  # an unknown domain: none
    assert not [c for c in draw_cases(GPU, 5) if c.name.startswith("domain ")]
    assert domain_rows(4096, 4096, 64) == [] and domain_rows(1, 0, 64) == []


def test_on_cpu_a_dispatch_above_what_the_interpreter_runs_is_refused():
    assert undrawn_boundaries([0], gpu=False) == ""
    assert undrawn_boundaries([64, 0], gpu=False) == ""  # both sides drawn
    why = undrawn_boundaries([4096, 0], gpu=False)
    assert "4096" in why and str(CPU_BOUNDARY_ROWS) in why and "GPU" in why
    assert undrawn_boundaries([4096, 0], gpu=True) == ""  # a GPU draws both sides of every boundary
    assert "64" in undrawn_boundaries([64, 0], gpu=False, cpu_limit=64)  # RoPE's positions: 64 is not run


def test_rope_draws_other_kv_head_counts_a_served_batch_and_a_sequence_near_the_longest():
    from services.ops.rotary.cases import DOMAIN_ELEMENTS as ROPE_ELEMENTS
    from services.ops.rotary.cases import RopeSpec, draw_rope_cases, other_kv_heads

    assert other_kv_heads(12) == [2, 4] and other_kv_heads(2) == [] and other_kv_heads(32) == [2, 8]
    kinds = lambda cases: {c.name.split()[0]: c for c in cases}  # noqa: E731
    cpu = kinds(draw_rope_cases(RopeSpec((1, 12, 5, 64), BF16, False, max_positions=32768, max_batch=64), "", 1))
    assert {c.heads_k for c in draw_rope_cases(RopeSpec((1, 12, 5, 64), BF16, False), "", 1)} >= {1, 2, 4, 6, 12}
    assert "domain" not in cpu and "batch" not in cpu  # the interpreter: a few positions
    gpu = kinds(draw_rope_cases(RopeSpec((1, 12, 1, 128), BF16, True, max_positions=32768, max_batch=64), "", 1))
    assert gpu["batch"].shape[0] == 64
    assert gpu["domain"].shape == (1, 12, min(32768, ROPE_ELEMENTS // (12 * 128)), 128)
    unknown = kinds(draw_rope_cases(RopeSpec((1, 12, 1, 128), BF16, True), "", 1))
    assert "domain" not in unknown and "batch" not in unknown


# ---------------------------------------------------------------- the pair families

HIDDEN = 32
ADD_NORM_CPU = PairSpec(HIDDEN, (1, 5, HIDDEN), BF16, gpu=False, examples=4)


def named(cases, kind: str) -> list:
    return [c for c in cases if c.name.startswith(kind + " ")]


def test_the_residual_norm_draws_both_sides_of_each_dispatch_limit_and_every_residue_of_its_row_blocks():
    blocks = (1, 2, 4, 8, 16)
    cpu = dataclasses.replace(ADD_NORM_CPU, boundaries=(5, 200, 4096), row_blocks=blocks)
    cases = draw_add_norm_cases(cpu, seed=3, bias=False)
    edges = {(rows(c.shape), c.regime) for c in named(cases, "dispatch-edge")}
    # 4096 is past what the interpreter draws: such a plan is refused on CPU before anything runs (undrawn_boundaries)
    assert edges == {(n, "normal") for n in (5, 6, 200, 201)} | {(6, "log-scale"), (201, "log-scale")}
    # every launch meets rows of every regime: the one of up to 5 rows each regime at 5 rows, the others mixed cases
    launches = [(rows(c.shape), c.regime) for c in named(cases, "launch-regimes")]
    assert launches == [(5, r) for r in REGIMES] + [(MIXED_MIN_ROWS, MIXED), (201, MIXED)]
    residues = [rows(c.shape) for c in named(cases, "rows-residue")]
    for block in blocks:  # on CPU the residues up to CPU_RESIDUES, past one full block
        assert all(any(n >= block and n % block == r for n in residues) for r in range(min(block, CPU_RESIDUES + 1)))
    assert max(residues) <= 16 + CPU_RESIDUES
    assert sum(c.pair.gate.numel() for c in cases) <= CPU_ELEMENT_BUDGET  # the drawn cases made room
    assert len(named(cases, "drawn")) == cpu.examples
    # a GPU draws every limit and every residue of every block
    gpu = dataclasses.replace(cpu, gpu=True, row_blocks=(1, 2, 4, 8, 64), examples=0)
    cases = draw_add_norm_cases(gpu, seed=3, bias=True)
    assert {rows(c.shape) for c in named(cases, "dispatch-edge")} == {5, 6, 200, 201, 4096, 4097}
    residues = [rows(c.shape) for c in named(cases, "rows-residue")]
    assert all(any(n >= 64 and n % 64 == r for n in residues) for r in range(64))
    assert all(c.pair.gate.shape == c.pair.up.shape and c.weight.shape == (c.width,) for c in cases)


def test_the_residual_norms_cases_are_deterministic_in_spec_and_seed():
    spec = dataclasses.replace(ADD_NORM_CPU, boundaries=(7,), row_blocks=(1, 2, 4, 8, 16), widths=(HIDDEN, 48))
    first, again, other = (draw_add_norm_cases(spec, seed, bias=True) for seed in (11, 11, 12))
    assert [c.name for c in first] == [c.name for c in again]
    same = lambda a, b: torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)  # noqa: E731
    for a, b in zip(first, again, strict=True):
        for x, y in ((a.pair.gate, b.pair.gate), (a.pair.up, b.pair.up), (a.weight, b.weight), (a.bias, b.bias)):
            same(x, y)
        assert a.eps == b.eps
    edge = lambda cases: next(c for c in cases if c.name.startswith("dispatch-edge 8x"))  # noqa: E731
    assert not torch.equal(edge(first).pair.gate, edge(other).pair.gate)


def test_the_residual_norm_draws_every_hidden_width_the_class_is_called_at():
    spec = dataclasses.replace(ADD_NORM_CPU, widths=(HIDDEN, 64, 97, 2048))
    cases = draw_add_norm_cases(spec, seed=3, bias=True)
    widths = named(cases, "width")
    assert {c.width for c in widths} == {64, 2048}  # the live width and the odd one have cases of their own already
    assert all(c.weight.shape == c.bias.shape == (c.width,) and c.pair.up.shape == c.shape for c in widths)
    assert not named(draw_add_norm_cases(ADD_NORM_CPU, 3, bias=False), "width")


def test_the_mlps_one_launch_plans_draw_no_row_dispatch_and_no_invented_width():
    """An MLP's spec carries its element blocks only (its profile's widths are hidden widths, not the operands'):
    no dispatch edge, no residue, no width case; the cases it drew before are drawn as before."""
    spec = PairSpec(96, (1, 5, 96), BF16, gpu=False, blocks=(256,), examples=4)
    cases = draw_pair_cases(spec, seed=3)
    assert not [c for c in cases if c.name.split()[0] in ("dispatch-edge", "rows-residue", "width", "domain")]
    assert {rows(c.shape) for c in named(cases, "block-edge")} == {1}


@pytest.mark.parametrize(
    ("family", "width", "top"),
    [("gated", 8960, DOMAIN_ELEMENTS // 8960), ("plain", 128, SERVED_ROWS), ("add_norm", 128, SERVED_ROWS)],
)  # a wide operand is capped at DOMAIN_ELEMENTS a case; a narrow one reaches the maximum itself
def test_a_gpu_draws_the_served_row_range_for_the_pair_families(family, width, top):
    spec = PairSpec(width, (1, 1, width), BF16, gpu=True, blocks=(1024,), examples=2, domain_rows=SERVED_ROWS)
    if family == "add_norm":
        cases = [c.pair for c in draw_add_norm_cases(dataclasses.replace(spec, blocks=()), seed=5, bias=False)]
    else:
        cases = draw_pair_cases(spec, seed=5)
    domain = [rows(c.shape) for c in named(cases, "domain")]
    assert domain == sorted(domain) and len(domain) == 3 and max(domain) == top
    assert all(n % 2 for n in domain[:-1]) and domain[0] > 1
    assert all(c.gate.shape == c.up.shape == c.shape for c in named(cases, "domain"))
    # outside the drawn cases' budget: those keep their rows, and the rest stays within it
    assert sum(c.gate.numel() for c in cases if not c.name.startswith("domain ")) <= PAIR_GPU_BUDGET
    assert max(rows(c.shape) for c in named(cases, "drawn")) > 2
    # the CPU and an unknown domain draw none
    assert not named(draw_pair_cases(dataclasses.replace(spec, gpu=False, examples=0), 5), "domain")
    assert not named(draw_pair_cases(dataclasses.replace(spec, domain_rows=0, examples=0), 5), "domain")


class _Drawn(Exception):
    """Raised by the stand-in case drawers: the spec the service built is all this test wants."""


def _pair_target(family: str):
    """(proposal, live target) of a small HF module of `family`, its plan the template's (the residual norm's: a
    dispatch at 200 rows, then 16 rows a program), its profile calling it at two hidden widths up to a served max."""
    from transformers import GPT2Config, LlamaConfig
    from transformers.models.gpt2.modeling_gpt2 import GPT2MLP
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaMLP

    from services.core.pb import events_pb2 as pb
    from services.judge.domain import LiveTarget
    from services.ops import gated_mlp, plain_mlp, residual_norm
    from services.ops.gated_mlp import template as gated
    from services.ops.plain_mlp import template as mlp_act
    from services.ops.residual_norm import template as add_norm
    from services.ops.row_reduction.template import row_launch
    from services.server.introspection import introspect_module

    small = {"hidden_size": HIDDEN, "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2}
    if family == "gated":
        module, ops, template = LlamaMLP(LlamaConfig(**small)), gated_mlp, gated
    elif family == "plain":
        module, ops, template = GPT2MLP(128, GPT2Config(n_embd=HIDDEN)), plain_mlp, mlp_act
    else:
        module, ops, template = LlamaDecoderLayer(LlamaConfig(**small), layer_idx=0), residual_norm, add_norm
    module.eval()
    intro = introspect_module(module)
    computes = ops.recognise(module)
    config = template.search_configs(computes)[0]
    plan = template.plan(config)
    if family == "add_norm":
        args = list(plan.launches[0].args)
        kernel = plan.launches[0].kernel
        plan = pb.LaunchPlan(
            family=ops.FAMILY, launches=[row_launch(kernel, args, 4, 1, 200), row_launch(kernel, args, 4, 16)]
        )
    proposal = pb.CandidateProposed(
        target_class=intro.class_path, source=template.render(config), plan=plan,
        contract=ops.layer_contract(intro.class_path, intro.forward_params, ops.roles_of(module)),
    )  # fmt: skip
    target = LiveTarget(intro, (1, 5, HIDDEN), "torch.bfloat16", computes, widths=(HIDDEN, 48), max_rows=SERVED_ROWS)
    return proposal, target


@pytest.mark.parametrize("family", ["gated", "plain", "add_norm"])
def test_the_service_gives_each_pair_spec_the_profiles_domain_and_its_plans_rows(family, monkeypatch):
    """The spec each family's prepare builds (the drawers stood in for): the served maximum for all three; the residual
    norm's row plan (its limits, its rows per program with the usual blocks) and its hidden widths; an MLP no
    widths (its profile's are hidden widths, its operands intermediate)."""
    from services.judge import service as judge_service

    specs = []

    def record(spec, *args, **kwargs):
        specs.append(spec)
        raise _Drawn

    from services.ops import judging

    for name in ("gated_mlp", "plain_mlp"):
        monkeypatch.setattr(judging(name), "draw_pair_cases", record)
    monkeypatch.setattr(judging("residual_norm"), "draw_add_norm_cases", record)
    judge = judge_service.JudgeService(device="cpu", examples=4)
    judge.use_gpu = True  # the spec a GPU judge builds: nothing is drawn or run here
    proposal, target = _pair_target(family)
    with pytest.raises(_Drawn):
        judge.prepare(proposal, target)
    [spec] = specs
    assert spec.gpu and spec.domain_rows == SERVED_ROWS
    if family == "add_norm":
        assert spec.width == HIDDEN and spec.boundaries == (200,) and spec.widths == (HIDDEN, 48)
        assert set(spec.row_blocks) == {1, 2, 4, 8, 16}
    else:
        assert spec.width == {"gated": 96, "plain": 128}[family] and spec.live_shape == (1, 5, spec.width)
        assert spec.boundaries == spec.row_blocks == spec.widths == ()

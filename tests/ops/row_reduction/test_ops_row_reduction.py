"""The row-reduction family: its plan vocabulary (pure), and the wrapper running a plan with real Triton kernels
(interpreted on CPU), dispatch by row count included."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from candidate_files import load

from services.core import interpreter_rounding
from services.core.kernel_schema import check_kernel_source
from services.core.kernels import candidate_wrapper
from services.core.pb import events_pb2 as pb
from services.ops import FAMILIES, UnknownFamily, family, row_reduction
from services.ops.launch import INTERPRETER_SMS

SERVER_TESTS = Path(__file__).resolve().parents[2] / "server"  # the server tests' hand-written RMSNorm kernels


def _plan(**changes) -> pb.LaunchPlan:
    launch = pb.KernelLaunch(
        kernel="_rmsnorm_fwd_kernel", args=["x", "w", "y", "x_row_stride", "y_row_stride", "cols", "eps"],
        constexprs={"BLOCK": "block_cols"}, grid="rows", num_warps=4,
    )  # fmt: skip
    for key, value in changes.items():
        if key == "constexprs":
            launch.constexprs.clear()
            launch.constexprs.update(value)
        elif key == "args":
            del launch.args[:]
            launch.args.extend(value)
        else:
            setattr(launch, key, value)
    return pb.LaunchPlan(family=row_reduction.FAMILY, launches=[launch])


@pytest.fixture(scope="module")
def signatures():
    source, _ = load(SERVER_TESTS / "rmsnorm_kernel.py")
    return check_kernel_source(source).kernels


def test_the_server_tests_plan_fits(signatures):
    _, plan = load(SERVER_TESTS / "rmsnorm_kernel.py")
    assert row_reduction.check_plan(plan, signatures) == []


@pytest.mark.parametrize(
    "changes,words",
    [
        ({"kernel": "_nope"}, "not a @triton.jit kernel"),
        ({"args": ["x", "w", "y", "x_row_stride", "y_row_stride", "cols", "os"]}, "not in the vocabulary"),
        ({"args": ["x", "w", "y", "cols", "eps"]}, "takes 7 runtime arguments"),
        ({"constexprs": {}}, "no value in the plan"),
        ({"constexprs": {"BLOCK": "cols * 2"}}, "neither an integer literal"),
        ({"constexprs": {"BLOCK": "block_cols", "N": "1"}}, "no constexpr parameter 'N'"),
        ({"grid": "rows * 0"}, "is not one of"),
        ({"grid": "cdiv(rows, 0)"}, "N must be"),
        ({"num_warps": 3}, "num_warps=3"),
        ({"max_rows": 16}, "must serve any row count"),
    ],
)
def test_each_way_a_plan_leaves_the_vocabulary_is_named(signatures, changes, words):
    [finding] = row_reduction.check_plan(_plan(**changes), signatures)
    assert finding.rule_id == "launch-plan" and words in finding.reason, finding.reason


def test_dispatch_limits_rise_end_in_a_catch_all_and_stay_judgeable(signatures):
    plan = _plan(max_rows=16)
    plan.launches.add().CopyFrom(_plan().launches[0])
    assert row_reduction.check_plan(plan, signatures) == []
    plan.launches[0].max_rows = row_reduction.MAX_DISPATCH_ROWS + 1
    [finding] = row_reduction.check_plan(plan, signatures)
    assert "cannot be judged on both sides" in finding.reason
    with pytest.raises(UnknownFamily, match="known: " + ", ".join(sorted(FAMILIES))):  # every family registered
        family("softmax")


def test_grids_count_programs_from_the_vocabulary():
    assert row_reduction.parse_grid("rows").programs(7, 132) == 7
    assert row_reduction.parse_grid("cdiv(rows, 4)").programs(7, 132) == 2
    assert row_reduction.parse_grid("min(sms, cdiv(rows, 1))").programs(4096, 132) == 132
    assert row_reduction.parse_grid("sms").programs(3, 132) == 132


def test_the_wrapper_dispatches_by_rows_and_skips_the_launch_when_asked(tmp_path):
    source, plan = load(SERVER_TESTS / "rmsnorm_kernel_short_rows.py")  # <= 16 rows honest, more: cannot compile
    forward = candidate_wrapper(tmp_path, source, plan)
    weight = 1 + 0.1 * torch.randn(64)
    x = torch.randn(4, 64)
    expected = weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    assert torch.allclose(forward(x, weight, 1e-6), expected, atol=1e-5)
    with pytest.raises(Exception, match="more rows than this kernel was written for"):
        forward(torch.randn(17, 64), weight, 1e-6)
    ghost = candidate_wrapper(tmp_path, source, plan, launch=False, empty=lambda s, dtype, device: torch.zeros(s))
    assert torch.equal(ghost(x, weight, 1e-6), torch.zeros(4, 64))
    with pytest.raises(ValueError, match="does not end in the weight width"):
        forward(torch.randn(2, 32), weight, 1e-6)


@pytest.mark.parametrize(
    ("norm", "variant", "other"),
    [
        ("olmo2.modeling_olmo2.Olmo2RMSNorm", "rmsnorm_fp32_weight", ""),
        ("llama.modeling_llama.LlamaRMSNorm", "", "rmsnorm_fp32_weight"),
    ],
)
def test_each_rmsnorm_casting_order_is_recognised_and_written_as_the_module_rounds(tmp_path, norm, variant, other):
    # Llama rounds the normalised row to bf16 and then multiplies by the weight; OLMo2 (and torch.nn.RMSNorm)
    # multiply in fp32 and round once. The same formula in fp32, told apart only by where they round: each
    # module is recognised for its order and its kernel answers as it does, where the other order's does not.
    import importlib

    from services.ops.recognise_norm import recognise
    from services.ops.row_reduction import template

    interpreter_rounding.install()  # bf16 casts round to nearest, as a GPU's do
    path, name = norm.rsplit(".", 1)
    module = getattr(importlib.import_module(f"transformers.models.{path}"), name)(256, eps=1e-6).to(torch.bfloat16)
    with torch.no_grad():
        module.weight.add_(0.3 * torch.randn(256, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16))
    assert recognise(module) == (variant or "rmsnorm")
    x = (torch.randn(16, 256, generator=torch.Generator().manual_seed(2)) * 2 + 0.5).to(torch.bfloat16)
    expected = module(x)

    def mismatches(v: str) -> int:
        config = pb.TemplateConfig(template=template.TEMPLATE, num_warps=2, rows_per_program=1, variant=v)
        forward = candidate_wrapper(tmp_path / (v or "plain"), template.render(config), template.plan(config))
        return int((forward(hidden_states=x, weight=module.weight, eps=1e-6) != expected).sum())

    assert mismatches(variant) == 0
    assert mismatches(other) > 100  # of 4,096: a bf16 rounding apart on a large share of elements


@pytest.mark.parametrize("variant", ["add_rmsnorm", "add_rmsnorm_fp32_weight", "add_layernorm"])
def test_the_residual_norms_kernel_rounds_as_its_reference(tmp_path, variant):
    # The residual norm normalises the rounded sum exactly as the norm template does: each RMSNorm casting order
    # bit for bit in bf16 against the family's reference (the judge's oracle), the LayerNorm within one rounding
    # of it (its reductions sum in another order); the sum itself bit for bit.
    from services.core.kernels import load_kernels, write_source
    from services.ops import residual_norm
    from services.ops.residual_norm import template as add_norm

    interpreter_rounding.install()
    config = add_norm.search_configs(variant, 192)[0]
    plan = add_norm.plan(config)
    kernels = load_kernels(write_source(tmp_path, add_norm.render(config)), [plan.launches[0].kernel])
    op = residual_norm.make_op(plan, kernels)
    gen = torch.Generator().manual_seed(3)
    a, x = ((torch.randn(12, 192, generator=gen) * 2 + 0.5).to(torch.bfloat16) for _ in range(2))
    weight = (1 + 0.3 * torch.randn(192, generator=gen)).to(torch.bfloat16)
    bias = torch.randn(192, generator=gen).to(torch.bfloat16) if variant == "add_layernorm" else None
    normed, summed = op(a, x, weight, 1e-6, bias)
    want_normed, want_summed = residual_norm.reference(variant)(a, x, weight, 1e-6, bias)
    assert torch.equal(summed, want_summed)
    steps = (normed.float() - want_normed.float()).abs() / want_normed.float().abs().clamp(min=1e-3)
    assert torch.equal(normed, want_normed) if variant != "add_layernorm" else float(steps.max()) <= 2**-7


@pytest.mark.parametrize("variant", ["", "rmsnorm_offset", "layernorm_no_bias", "layernorm", "rmsnorm_fp32_weight"])
def test_a_persistent_grid_walks_every_row_as_the_plain_grid_computes_it(tmp_path, variant):
    # At most one program per SM (the interpreter's INTERPRETER_SMS = 4): 19 rows two at a time make 10 row blocks,
    # so each program walks two or three, the last block ragged. Same kernel arithmetic, so the same bits as one
    # program a row block; the source is the plain one with its row loop nested in the strided one and nothing else
    # changed.
    from services.ops.row_reduction import template

    plain = pb.TemplateConfig(template=template.TEMPLATE, num_warps=4, rows_per_program=2, variant=variant)
    persistent = pb.TemplateConfig()
    persistent.CopyFrom(plain)
    persistent.params[template.PERSISTENT] = 1
    assert template.plan(persistent).launches[0].grid == "min(sms, cdiv(rows, 2))"
    outer = "for first_row in range(tl.program_id(0) * ROWS, n_rows, tl.num_programs(0) * ROWS):"
    source = template.render(persistent)
    assert outer in source and check_kernel_source(source).findings == ()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(19, 96, generator=gen)
    bound = {"weight": 1 + 0.1 * torch.randn(96, generator=gen), "eps": 1e-6}
    if variant == "layernorm":
        bound["bias"] = torch.randn(96, generator=gen)
    outs = []
    for config, where in ((plain, tmp_path / "plain"), (persistent, tmp_path / "persistent")):
        where.mkdir()
        outs.append(candidate_wrapper(where, template.render(config), template.plan(config))(hidden_states=x, **bound))
    assert torch.equal(outs[0], outs[1])
    assert row_reduction.parse_grid("min(sms, cdiv(rows, 2))").programs(19, INTERPRETER_SMS) == 4


def test_persistent_configs_come_last_and_take_no_other_params():
    from services.ops.row_reduction import template

    table = template.search_configs("", 1536)
    assert [dict(c.params) for c in table[-len(template.PERSISTENT_TABLE) :]] == [{"persistent": 1}] * 4
    assert not any(c.params for c in table[: -len(template.PERSISTENT_TABLE)])
    config = table[-1]
    config.params["persistent"] = 2
    assert not template.valid(config)
    config.params["persistent"] = 1
    config.params.update(dispatch_rows=64, small_warps=8, small_rows=1)
    assert not template.valid(config)

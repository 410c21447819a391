"""The row-reduction family: its plan vocabulary (pure), and the wrapper running a plan with real Triton kernels
(interpreted on CPU), dispatch by row count included."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from candidate_files import load

from services.core.kernel_schema import check_kernel_source
from services.core.kernels import candidate_wrapper
from services.core.pb import events_pb2 as pb
from services.ops import UnknownFamily, family, row_reduction

SERVER_TESTS = Path(__file__).resolve().parent / "server"


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
    with pytest.raises(UnknownFamily, match="known: gated_mlp, plain_mlp, residual_norm, rotary, row_reduction"):
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


@pytest.mark.parametrize("variant", ["layernorm", "layernorm_no_bias"])
def test_layernorms_one_pass_moments_keep_rows_far_from_zero_and_outliers_first(tmp_path, variant):
    # The template's LayerNorm takes sum and sum of squares in one reduction, shifted by each row's first element.
    # Unshifted, rows far from zero (100 +- 0.01) lose every digit of their variance; shifted by an outlier in the
    # first column, the bound is (1 + n) roundings of it. fp32, against torch in fp64. Rows of a ragged last program.
    from services.coder.templates import rmsnorm as template

    config = pb.TemplateConfig(template=template.TEMPLATE, num_warps=4, rows_per_program=2, variant=variant)
    forward = candidate_wrapper(tmp_path, template.render(config), template.plan(config))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 100, generator=gen, dtype=torch.float64)
    x[0] = 100 + 0.01 * x[0]  # far from zero
    x[1, 0] = 1e4  # an outlier first
    x[2] = 1e-3 * x[2]  # small
    weight = 1 + 0.1 * torch.randn(100, generator=gen, dtype=torch.float64)
    bias = torch.randn(100, generator=gen, dtype=torch.float64) if variant == "layernorm" else None
    extra = {"bias": bias.float()} if bias is not None else {}
    got = forward(hidden_states=x.float(), weight=weight.float(), eps=1e-6, **extra)
    expected = torch.nn.functional.layer_norm(x.float().double(), (100,), weight.float().double(),
                                              None if bias is None else bias.float().double(), 1e-6)  # fmt: skip
    assert float((got.double() - expected).abs().max()) < 2e-4

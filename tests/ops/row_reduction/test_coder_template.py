"""The RMSNorm template (kernel source + launch plan, run by the row_reduction family's wrapper), interpreted on
CPU, against HF's own Qwen2RMSNorm and LlamaRMSNorm."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

from services.core import kernels
from services.core.pb import events_pb2 as pb
from services.core.tolerances import comparable, within
from services.ops.row_reduction import template as rmsnorm


@pytest.fixture(scope="module")
def load(tmp_path_factory):
    directory = tmp_path_factory.mktemp("kernels")

    def _load(config: pb.TemplateConfig):
        return kernels.candidate_wrapper(directory, rmsnorm.render(config), rmsnorm.plan(config))

    return _load


def _module(cls, width: int, dtype: torch.dtype, eps: float = 1e-6):
    module = cls(width, eps=eps).to(dtype)
    with torch.no_grad():
        module.weight.copy_(1 + 0.1 * torch.randn(width))  # not all ones: a kernel that skips it must fail
    return module


@pytest.mark.parametrize("cls", [Qwen2RMSNorm, LlamaRMSNorm])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("width", [64, 97])
def test_matches_hf_module(load, cls, dtype, width):
    torch.manual_seed(width)
    module = _module(cls, width, dtype, eps=1e-5)
    fn = load(rmsnorm.search_configs()[0])
    for shape in [(2, 3, width), (5, width), (1, width)]:
        x = torch.randn(shape, dtype=dtype) * 3
        keep = x.clone()
        out = fn(x, module.weight, module.variance_epsilon)
        ref = module(x.clone())
        ok, max_abs, _ = within(out, ref)
        assert ok, (shape, max_abs)
        assert out.dtype == ref.dtype and out.shape == ref.shape
        assert torch.equal(x, keep)


@pytest.mark.parametrize("warps,rows", [(2, 2), (1, 4)])
def test_ragged_rows_per_program_cover_every_row(load, warps, rows):
    # 7 rows with 2 or 4 rows per program: the last program must mask the rows past the end.
    module = _module(Qwen2RMSNorm, 97, torch.float32)
    fn = load(pb.TemplateConfig(template=rmsnorm.TEMPLATE, num_warps=warps, rows_per_program=rows))
    x = torch.randn(7, 97)
    assert within(fn(x, module.weight, module.variance_epsilon), module(x))[0]


def test_promotes_like_hf_when_weight_is_wider_than_input(load):
    module = _module(Qwen2RMSNorm, 64, torch.float32)  # fp32 weight, bf16 activations
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    out = load(rmsnorm.search_configs()[0])(x, module.weight, module.variance_epsilon)
    ref = module(x)
    assert out.dtype == ref.dtype == torch.float32
    assert within(*comparable(out, ref, x.dtype))[0]  # one bf16 rounding step apart at most


def test_noncontiguous_and_empty_inputs(load):
    module = _module(Qwen2RMSNorm, 64, torch.float32)
    fn = load(rmsnorm.search_configs()[0])
    x = torch.randn(64, 6).t()  # (6, 64), not contiguous
    assert within(fn(x, module.weight, 1e-6), module(x))[0]
    assert fn(torch.empty(0, 64), module.weight, 1e-6).shape == (0, 64)


def test_wrapper_rejects_bad_input_with_a_clear_message(load):
    fn = load(rmsnorm.search_configs()[0])
    with pytest.raises(ValueError, match="does not end in the weight width"):
        fn(torch.randn(2, 32), torch.ones(64), 1e-6)
    with pytest.raises(TypeError, match="floating"):
        fn(torch.ones(2, 64, dtype=torch.int32), torch.ones(64), 1e-6)


def test_render_is_deterministic_and_the_plan_follows_the_config():
    configs = rmsnorm.search_configs()
    assert len(configs) == 19 and (configs[0].num_warps, configs[0].rows_per_program) == (4, 1)
    assert len({(c.num_warps, c.rows_per_program) for c in configs[:15]}) == 15  # then 4 persistent grids
    assert rmsnorm.render(configs[15]) != rmsnorm.render(configs[0])  # a persistent grid's kernel walks rows
    eight_two = pb.TemplateConfig(template=rmsnorm.TEMPLATE, num_warps=8, rows_per_program=2)
    assert rmsnorm.render(configs[4]) == rmsnorm.render(eight_two) == rmsnorm.render(configs[0])  # kernels only
    plan = rmsnorm.plan(eight_two)
    assert plan == rmsnorm.plan(configs[4]) and plan != rmsnorm.plan(configs[0])
    (launch,) = plan.launches
    assert (launch.num_warps, launch.grid, launch.constexprs["ROWS"]) == (8, "cdiv(rows, 2)", "2")
    assert rmsnorm.plan(configs[0]).launches[0].grid == "rows"


def test_every_config_passes_the_candidate_check():
    from services.core.candidate_check import check_candidate

    for config in rmsnorm.search_configs():
        evidence = check_candidate(rmsnorm.render(config), rmsnorm.plan(config))
        assert evidence.passed, [(f.rule_id, f.reason) for f in evidence.findings]


def test_render_refuses_configs_it_cannot_build():
    with pytest.raises(ValueError, match="powers of two"):
        rmsnorm.render(pb.TemplateConfig(template=rmsnorm.TEMPLATE, num_warps=3, rows_per_program=1))
    with pytest.raises(ValueError, match="not a row_reduction_onepass config"):
        rmsnorm.render(pb.TemplateConfig(template="other", num_warps=4, rows_per_program=1))

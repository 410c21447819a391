"""The gated-MLP family's kernel (Triton, interpreted on CPU) as a layer rewrite of the live MLP: it answers what
the module answers, and swaps into Llama/Qwen's SwiGLU and Gemma's GeGLU with parity on recorded live calls,
the same greedy tokens, and an exact revert."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from services.core.kernels import bind, candidate_wrapper
from services.core.pb import events_pb2 as pb
from services.ops import family
from services.ops.gated_mlp import contract_for, identify
from services.ops.gated_mlp import template as gated
from services.server.engine import Engine
from services.server.introspection import class_path, instances_of
from services.server.models import load_model
from services.server.parity import swap_with_parity


def _entry(variant: str, index: int = 0):
    config = gated.search_configs(variant)[index]
    return candidate_wrapper(Path(tempfile.mkdtemp()), gated.render(config), gated.plan(config))


def _mlp(model) -> torch.nn.Module:
    return next(m for m in model.modules() if identify(m) is not None)


def test_a_plan_outside_the_familys_vocabulary_is_refused():
    config = gated.search_configs()[0]
    plan = gated.plan(config)
    plan.launches[0].grid = "rows"
    from services.core.kernel_schema import check_kernel_source

    report = check_kernel_source(gated.render(config))
    assert not report.findings, report.findings  # the source is only @triton.jit code
    kernels = report.kernels
    assert family("gated_mlp").check_plan(gated.plan(config), kernels) == []
    [finding] = family("gated_mlp").check_plan(plan, kernels)
    assert finding.rule_id == "launch-plan" and "cdiv(n, N)" in finding.reason


@pytest.mark.parametrize(("preset", "variant"), [("tiny-qwen2", "swiglu"), ("tiny-gemma", "geglu_tanh")])
def test_the_rewritten_forward_answers_what_the_module_answers(preset, variant):
    mlp = _mlp(load_model(preset, "cpu").model)
    contract = contract_for(mlp, class_path(mlp))
    assert contract.kind == "layer" and [b.param for b in contract.bindings] == ["gate_proj", "up_proj", "down_proj"]
    call = bind(contract, _entry(variant))
    x = torch.randn(3, 5, mlp.down_proj.weight.shape[0])
    with torch.no_grad():
        torch.testing.assert_close(call(mlp, (x,), {}), mlp(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("preset", "variant"), [("tiny-llama", "swiglu"), ("tiny-gemma", "geglu_tanh")])
async def test_the_gated_kernel_swaps_into_the_live_mlp_with_parity_and_reverts_exactly(preset, variant):
    engine = Engine(load_model(preset, "cpu"))
    try:
        await engine.capture_profile(["Hello there"], 4)  # records the MLP's live calls for parity
        mlp = _mlp(engine.model)
        target = class_path(mlp)
        profiled = next(
            m for m in (await engine.capture_profile(["Hi"], 2)).modules if m.introspection.class_path == target
        )
        assert profiled.computes == variant
        contract = contract_for(mlp, target)
        observed = pb.ParityObservation()
        handle = await engine.exclusive(
            swap_with_parity, engine, contract, _entry(variant), engine.encode("Hello"), observed
        )
        assert handle is not None, observed.error
        assert observed.modules_matched == len(instances_of(engine.model, target)) > 0
        assert observed.activations_passed == observed.activations_checked > 0
        assert list(observed.canary_tokens_before) == list(observed.canary_tokens_after)
        ids = engine.encode("Hello there")
        swapped = engine.decode(ids, 8)[0]
        await engine.exclusive(engine.revert, handle)
        assert not any("forward" in m.__dict__ for m in instances_of(engine.model, target))
        assert engine.decode(ids, 8)[0] == swapped  # the same greedy tokens with and without the kernel
    finally:
        engine.close()

"""The profile records the served model's own norm values, each distinct set once, within its byte budget: the judge
runs every candidate on them (services.judge.live_values), so a kernel keyed to the live weights is met."""

from __future__ import annotations

import random

import torch

from services.core.pb import events_pb2 as pb
from services.judge.live_values import decoded
from services.server import live_parameters
from services.server.models import load_model
from services.server.profiling import ModuleProfiler

QWEN_NORM = "transformers.models.qwen2.modeling_qwen2.Qwen2RMSNorm"
QWEN_LAYER = "transformers.models.qwen2.modeling_qwen2.Qwen2DecoderLayer"


def _profiled(model) -> dict[str, pb.ModuleClassProfile]:
    ids = torch.tensor([[1, 2, 3, 4]])
    with ModuleProfiler(model, cuda=False) as prof, torch.no_grad():
        model(ids)
    return {p.introspection.class_path: p for p in prof.results()}


def test_each_distinct_norm_state_is_recorded_once_bit_for_bit_with_its_instance_count():
    model = load_model("tiny-qwen2", "cpu").model
    layers = model.model.layers
    shared = torch.randn(64)
    with torch.no_grad():  # three instances hold one set, the other two one each
        for norm in (layers[0].input_layernorm, layers[1].input_layernorm, model.model.norm):
            norm.weight.copy_(shared)
        layers[0].post_attention_layernorm.weight.copy_(torch.full((64,), 0.5))
        layers[1].post_attention_layernorm.weight.copy_(torch.arange(64.0) / 64)
    profiles = _profiled(model)

    norm = profiles[QWEN_NORM]
    assert norm.live_parameter_sets == 3 and sorted(s.instances for s in norm.live_parameters) == [1, 1, 3]
    recorded = [decoded(s.tensors[0]) for s in norm.live_parameters]
    assert all(s.tensors[0].name == "weight" and s.tensors[0].dtype == "float32" for s in norm.live_parameters)
    assert any(torch.equal(r, shared) for r in recorded)
    assert any(torch.equal(r, torch.arange(64.0) / 64) for r in recorded)
    # the decoder layer (the residual norm's target): its post norm's weights, the values its add + norm scales by
    layer = profiles[QWEN_LAYER]
    posts = sorted(float(decoded(s.tensors[0]).sum()) for s in layer.live_parameters)
    assert layer.live_parameter_sets == 2 and posts == [float(torch.arange(64.0).sum() / 64), 32.0]
    # what no family reads values of records none
    assert not profiles["torch.nn.modules.linear.Linear"].live_parameters


def test_past_the_budget_a_random_choice_of_sets_is_kept_and_every_set_is_counted():
    sets = [({"weight": torch.full((16,), float(i))}, 1) for i in range(10)]  # 64 bytes each
    kept = [live_parameters.within_budget(sets, 3 * 64, random.Random(seed)) for seed in range(8)]
    assert all(len(k) == 3 for k in kept)
    assert len({tuple(float(s["weight"][0]) for s, _ in k) for k in kept}) > 1  # not always the first three
    assert live_parameters.within_budget(sets, 10 * 64, random.Random(0)) == sets  # all fit: all, in order

    profile = pb.ModuleClassProfile()
    norms = [torch.nn.LayerNorm(16) for _ in range(10)]
    with torch.no_grad():
        for i, norm in enumerate(norms):
            norm.weight.fill_(float(i))  # ten distinct sets of 128 bytes (weight and bias)
    from services.ops import row_reduction

    used = live_parameters.record(profile, norms, row_reduction.live_state, 4 * 128, random.Random(1))
    assert profile.live_parameter_sets == 10 and len(profile.live_parameters) == 4 and used == 4 * 128
    assert {t.name for t in profile.live_parameters[0].tensors} == {"weight", "bias"}

"""A layer an op family rewrites, ranked from what the server records: a gated MLP's act(gate) * up is its time
outside the projections it keeps, a decoder layer's residual add and post norm its time outside the input norm,
attention and MLP it keeps (the server's per-child times), each against the fused op's floor."""

from __future__ import annotations

import pytest

from services.core.pb import events_pb2 as pb
from services.ops import gated_mlp, plain_mlp, residual_norm
from services.profiler import domain, roofline
from services.server.engine import Engine
from services.server.models import load_model

H200 = pb.HardwareFigures(device="cuda", device_name="H200", peak_bytes_per_s=4.275e12, peak_flops=7.9e14)


async def _observed(preset: str) -> pb.ProfileObservation:
    engine = Engine(load_model(preset, "cpu"))
    observed = await engine.capture_profile(["Hello there, how are you?"], 4)
    observed.hardware.CopyFrom(H200)  # a ceiling, so the floor is not zero
    return observed


@pytest.mark.parametrize(("preset", "variant"), [("tiny-llama", "swiglu"), ("tiny-gemma", "geglu_tanh")])
async def test_a_gated_mlp_is_ranked_by_its_time_outside_the_projections_it_keeps(preset, variant):
    observed = await _observed(preset)
    [mlp] = [m for m in observed.modules if m.computes == variant]
    assert not mlp.introspection.leaf and dict(mlp.roles) == {r: r for r in gated_mlp.ROLES}
    children = {c.name: list(c.shape) for c in mlp.introspection.children}
    hidden, width = children["down_proj"]
    assert children["gate_proj"] == children["up_proj"] == [width, hidden]
    assert set(mlp.child_time_us) == {"gate_proj", "up_proj", "down_proj", "act_fn"}
    kept = sum(mlp.child_time_us[r] for r in gated_mlp.ROLES)
    assert 0 < kept < mlp.total_time_us

    [ranked] = [t for t in roofline.rank(observed) if t.class_path == mlp.introspection.class_path]
    assert ranked.supported and ranked.fingerprint.op_family == "elementwise"
    assert ranked.fingerprint.row_width == width
    tokens = mlp.input_bytes / 4 / hidden  # fp32 on CPU: the mean rows of a call
    floor = mlp.calls * gated_mlp.bytes_moved(tokens * width, 4) / H200.peak_bytes_per_s * 1e6
    assert ranked.floor_us == pytest.approx(floor)
    assert 0 < mlp.child_hook_us < mlp.total_time_us - kept  # the profiler's own hooks are not the model's time
    assert ranked.recoverable_us == pytest.approx(mlp.total_time_us - kept - mlp.child_hook_us - floor)
    assert f"computes {variant}" in ranked.note and "outside the projections it keeps" in ranked.note


async def test_a_profile_without_roles_ranks_no_layer():
    """Runs recorded before the server recorded roles (schema 4) re-derive their ranking as it was: leaves only."""
    observed = await _observed("tiny-llama")
    for module in observed.modules:
        module.ClearField("roles")
    assert all(m.introspection.leaf for m in observed.modules if m.introspection.class_path in
               {t.class_path for t in roofline.rank(observed)})  # fmt: skip


async def test_the_gated_mlp_is_chosen_when_it_recovers_the_most():
    observed = await _observed("tiny-llama")
    mlp = next(m for m in observed.modules if m.computes == "swiglu")
    for module in observed.modules:  # every other class far cheaper: the layer's op is where the time goes
        if module is not mlp:
            module.total_time_us = 1.0
    target, reason = domain.choose_target(roofline.rank(observed))
    assert target == mlp.introspection.class_path and "computes" not in reason and "elementwise" in reason


@pytest.mark.parametrize(("preset", "variant"), [("tiny-qwen2", "add_rmsnorm"), ("tiny-gpt2", "add_layernorm")])
async def test_a_decoder_layer_is_ranked_by_its_time_outside_the_norm_attention_and_mlp_it_keeps(preset, variant):
    observed = await _observed(preset)
    [layer] = [m for m in observed.modules if m.computes == variant]
    roles = dict(layer.roles)
    assert sorted(roles) == sorted(residual_norm.ROLES) and not layer.introspection.leaf
    children = {c.name: list(c.shape) for c in layer.introspection.children}
    hidden = layer.input_shape[-1]
    assert children[roles["input_norm"]] == children[roles["post_norm"]] == [hidden]  # the norms' widths
    kept = sum(layer.child_time_us[roles[r]] for r in ("input_norm", "attention", "mlp"))
    assert 0 < kept < layer.total_time_us

    [ranked] = [t for t in roofline.rank(observed) if t.class_path == layer.introspection.class_path]
    assert ranked.supported and ranked.fingerprint.op_family == "row_reduction"
    assert ranked.fingerprint.row_width == hidden
    rows = layer.input_bytes / 4 / hidden  # fp32 on CPU: the mean rows of a call
    floor = layer.calls * residual_norm.bytes_moved(rows, hidden, 4, 4) / H200.peak_bytes_per_s * 1e6
    assert ranked.floor_us == pytest.approx(floor)
    # the post norm's time is the rewrite's to recover: it is not among what the layer keeps
    assert ranked.recoverable_us == pytest.approx(layer.total_time_us - kept - layer.child_hook_us - floor)
    assert f"computes {variant}" in ranked.note and "outside the norm, attention and MLP it keeps" in ranked.note


async def test_a_plain_mlp_is_ranked_by_its_time_outside_its_two_maps():
    observed = await _observed("tiny-gpt2")
    [mlp] = [m for m in observed.modules if m.computes == "mlp_gelu_tanh"]
    assert dict(mlp.roles) == {"fc": "c_fc", "proj": "c_proj"}
    hidden = mlp.input_shape[-1]
    children = {c.name: list(c.shape) for c in mlp.introspection.children}
    width = plain_mlp.intermediate_width({r: children[mlp.roles[r]] for r in plain_mlp.ROLES}, hidden)
    kept = mlp.child_time_us["c_fc"] + mlp.child_time_us["c_proj"]
    [ranked] = [t for t in roofline.rank(observed) if t.class_path == mlp.introspection.class_path]
    assert ranked.supported and ranked.fingerprint.op_family == "elementwise" and ranked.fingerprint.row_width == width
    elements = mlp.input_bytes / 4 / hidden * width
    floor = mlp.calls * plain_mlp.bytes_moved(elements, 4) / H200.peak_bytes_per_s * 1e6
    assert ranked.floor_us == pytest.approx(floor)
    assert ranked.recoverable_us == pytest.approx(mlp.total_time_us - kept - mlp.child_hook_us - floor)
    assert "outside the projections it keeps (plain_mlp rewrite)" in ranked.note

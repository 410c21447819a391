"""The judge on the gated-MLP family: a layer contract checked against the live MLP's recorded children, (gate, up)
operand pairs drawn at the live intermediate width, torch's act(gate) * up as the oracle. The template's kernel
(Triton, interpreted) for what the module computes passes; another activation's, or one that drops an element
past a block's edge, is rejected for what it got wrong."""

from __future__ import annotations

import math

import pytest
import torch
from judge_testkit import log_of
from transformers import GemmaConfig, LlamaConfig, Phi3Config
from transformers.models.gemma.modeling_gemma import GemmaMLP
from transformers.models.llama.modeling_llama import LlamaMLP
from transformers.models.phi3.modeling_phi3 import Phi3MLP

from services.core.kernels import candidate_sha256
from services.core.pb import events_pb2 as pb
from services.judge.service import JudgeService
from services.ops import gated_mlp
from services.ops.gated_mlp import template as gated
from services.server.introspection import introspect_module

HIDDEN, INTERMEDIATE = 32, 96


def _mlp(kind: str) -> torch.nn.Module:
    if kind == "phi3":  # gate and up fused in one map, chunked
        return Phi3MLP(Phi3Config(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, hidden_act="silu"))
    if kind in ("llama", "llama_erf"):  # SiLU, or torch's exact GELU (erf: ModernBERT's decoder gates with it)
        act = "gelu" if kind == "llama_erf" else "silu"
        return LlamaMLP(LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, hidden_act=act))
    config = GemmaConfig(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, hidden_activation="gelu_pytorch_tanh")
    return GemmaMLP(config)


def _captured(mlp: torch.nn.Module, dtype: str = "torch.bfloat16") -> pb.ProfileCaptured:
    """What the server records of a live gated MLP: its introspection with its children, what it computes and the
    roles its children play (found by running it), its live input shape."""
    intro = introspect_module(mlp)
    profile = pb.ModuleClassProfile(
        introspection=intro,
        instances=2,
        calls=8,
        input_shape=[1, 5, HIDDEN],
        dtype=dtype,
        computes=gated_mlp.recognise(mlp),
        probed=True,
        roles=gated_mlp.roles_of(mlp),
    )
    observed = pb.ProfileObservation(
        model="t", dtype=dtype, hardware=pb.HardwareFigures(device="cpu"), modules=[profile]
    )
    ranked = pb.RankedTarget(class_path=intro.class_path, supported=True)
    return pb.ProfileCaptured(observed=observed, ranking=[ranked], target_class=intro.class_path)


def _proposal(captured: pb.ProfileCaptured, source: str, plan: pb.LaunchPlan, contract=None) -> pb.CandidateProposed:
    profile = captured.observed.modules[0]
    intro = profile.introspection
    contract = contract or gated_mlp.layer_contract(intro.class_path, intro.forward_params, profile.roles)
    digest = candidate_sha256(source, plan)
    return pb.CandidateProposed(
        candidate_id=f"c1-{digest[:10]}",
        target_class=intro.class_path,
        source=source,
        source_sha256=digest,
        plan=plan,
        contract=contract,
        origin="template",
        attempt=1,
    )


async def _judge(mlp, variant: str, *, source: str | None = None, contract=None, dtype="torch.bfloat16"):
    captured = _captured(mlp, dtype)
    config = gated.search_configs(variant)[0]
    candidate = _proposal(captured, source or gated.render(config), gated.plan(config), contract)
    prior = log_of(captured, candidate)
    [judged] = await JudgeService(device="cpu", examples=8).handle(prior[-1], prior)
    return judged


@pytest.mark.parametrize(
    ("kind", "right", "wrong"),
    [("llama", "swiglu", "geglu_tanh"), ("gemma", "geglu_tanh", "swiglu"), ("phi3", "swiglu", "geglu_tanh"),
     ("llama_erf", "geglu", "geglu_tanh")],
)  # fmt: skip
async def test_the_kernel_of_the_mlps_activation_passes_and_the_other_is_rejected(kind, right, wrong):
    mlp = _mlp(kind)
    assert gated_mlp.recognise(mlp) == right
    passed = await _judge(mlp, right)
    assert passed.reward == 1, passed.reason
    evidence = passed.observed.correctness
    assert evidence.checks_passed == evidence.checks_run > 20 and not evidence.error
    assert {"huge", "nonfinite", "zeros", "tiny"} <= set(evidence.regimes)
    block = gated.search_configs(right)[0].params["block"]
    assert f"1x{block - 1}" in evidence.shapes and f"1x{block + 1}" in evidence.shapes  # a block's edges were drawn
    assert (
        passed.observed.contract.passed
        and "the bound children's shapes fit their roles" in passed.observed.contract.checks
    )
    rejected = await _judge(mlp, wrong)
    assert rejected.reward == -1 and rejected.reason.startswith("correctness failed: outside-tolerance"), (
        rejected.reason
    )


async def test_fp32_operands_are_held_to_fp32s_rounding():
    judged = await _judge(_mlp("gemma"), "geglu_tanh", dtype="torch.float32")
    assert judged.reward == 1, judged.reason


async def test_a_kernel_that_drops_the_last_element_of_each_block_is_rejected():
    # a lane against its block's width passes the dataflow check (`offsets < n - 1` is a hidden boundary there)
    dropped = "mask = (offsets < n) & (tl.arange(0, BLOCK) < BLOCK - 1)"
    source = gated.render(gated.search_configs("swiglu")[0]).replace("mask = offsets < n", dropped)
    judged = await _judge(_mlp("llama"), "swiglu", source=source)
    assert judged.reward == -1 and "nan-output" in judged.reason, judged.reason


async def test_a_contract_binding_the_down_projection_as_the_gate_is_refused():
    mlp = _mlp("llama")
    roles = dict(gated_mlp.roles_of(mlp))
    roles["gate_proj"], roles["down_proj"] = roles["down_proj"], roles["gate_proj"]
    intro = introspect_module(mlp)
    contract = gated_mlp.layer_contract(intro.class_path, intro.forward_params, roles)
    judged = await _judge(mlp, "swiglu", contract=contract)
    assert judged.reward == -1 and judged.observed.contract.rule_id == "binding-roles", judged.reason


async def test_a_gated_candidate_under_a_module_class_contract_is_refused():
    mlp = _mlp("llama")
    intro = introspect_module(mlp)
    contract = gated_mlp.layer_contract(intro.class_path, intro.forward_params, gated_mlp.roles_of(mlp))
    contract.kind = "module_class"
    judged = await _judge(mlp, "swiglu", contract=contract)
    assert judged.reward == -1 and judged.observed.contract.rule_id == "contract-kind", judged.reason


async def test_a_fused_mlps_contract_binding_a_map_of_the_wrong_width_is_refused():
    mlp = _mlp("phi3")
    intro = introspect_module(mlp)
    roles = {"gate_up_proj": "down_proj", "down_proj": "gate_up_proj"}  # swapped: neither shape fits its role
    contract = gated_mlp.layer_contract(intro.class_path, intro.forward_params, roles)
    judged = await _judge(mlp, "swiglu", contract=contract)
    assert judged.reward == -1 and judged.observed.contract.rule_id == "binding-roles", judged.reason


async def test_a_sigmoid_flushed_to_zero_in_the_gate_band_is_rejected():
    """A kernel flushing the sigmoid under 2**-100 to zero (denormals avoided early) is right on normal gates and on
    huge ones (where fp32's own exp overflows and torch's SiLU is -0 too), wrong only for gates in [-88.7, -69.3]:
    the huge and outlier regimes reach that band by chance (12 of 30 seeds in the pair cases), the gate band always
    (services.judge.pair_cases.GATE_BAND)."""
    honest = "act = (g / (1.0 + tl.exp(-g)))"
    flushed = "act = (g * tl.maximum(1.0 / (1.0 + tl.exp(-g)) - 7.888609052210118e-31, 0.0))"
    source = gated.render(gated.search_configs("swiglu")[0])
    assert honest in source
    judged = await _judge(_mlp("llama"), "swiglu", source=source.replace(honest, flushed))
    assert judged.reward == -1 and judged.reason.startswith("correctness failed: outside-tolerance"), judged.reason


# Right everywhere but where a gate and an up of moderate size (20-300) each hold most of their group of 16
# elements: a SwiGLU's massive activations, in the same channel of both. A red-team kernel of 2026-12-05, accepted
# then: each operand's regime was drawn on its own, so no case put a moderate spike in both at one element.
SPIKE_WEIGHT = """
@triton.jit
def _spike_weight(v, BLOCK: tl.constexpr):
    sq = tl.minimum(v * v, 1e30)
    energy = tl.sum(sq, axis=1)[:, None]
    share = sq * 16.0 / (energy + 1e-30) / 12.0
    share = share * share
    share = share * share
    share = share * share
    share = share * share
    spiky = 1.0 - 1.0 / (1.0 + share)
    lo = sq / 400.0
    lo = lo * lo
    lo = lo * lo
    lo = lo * lo
    hi = sq / 90000.0
    hi = hi * hi
    hi = hi * hi
    hi = hi * hi
    return spiky * (1.0 - 1.0 / (1.0 + lo)) / (1.0 + hi)


@triton.jit
def _swiglu_kernel("""
DAMPED = (
    "    both = _spike_weight(tl.reshape(g, (BLOCK // 16, 16)), BLOCK) * "
    "_spike_weight(tl.reshape(u, (BLOCK // 16, 16)), BLOCK)\n"
    "    tl.store(y_ptr + offsets, (act * u * (1.0 - 0.5 * tl.reshape(both, (BLOCK,)))).to(y_ptr.dtype.element_ty), "
    "mask=mask)"
)


# the same, damped only where the spike is alone in its block of 2,048 (a single token's massive activation): met by a
# shared-channels case in about a third of judgings (several rows a block at the test's width), by a lone-spike
# decode step in every one (since each grid is drawn at every pairing of signs: with one draw for all, in half)
LONE = (
    "    both = _spike_weight(tl.reshape(g, (BLOCK // 16, 16)), BLOCK) * "
    "_spike_weight(tl.reshape(u, (BLOCK // 16, 16)), BLOCK)\n"
    "    count = tl.sum(tl.sum(both, axis=1), axis=0) / 1.4\n"
    + "    count = count * count\n" * 6
    + "    crisp = both * both\n"
    + "    crisp = crisp * crisp\n" * 4
    + "    damp = 1.0 - 0.5 * tl.reshape(crisp, (BLOCK,)) / (1.0 + count)\n"
    "    tl.store(y_ptr + offsets, (act * u * damp).to(y_ptr.dtype.element_ty), mask=mask)"
)


@pytest.mark.parametrize("store_as", [DAMPED, LONE], ids=["damped", "lone"])
async def test_a_kernel_wrong_only_where_gate_and_up_share_a_large_channel_is_rejected(store_as):
    source = gated.render(gated.search_configs("swiglu")[0])
    store = "    tl.store(y_ptr + offsets, (act * u).to(y_ptr.dtype.element_ty), mask=mask)"
    assert store in source and "\n@triton.jit\ndef _swiglu_kernel(" in source, "the template changed"
    hostile = source.replace("\n@triton.jit\ndef _swiglu_kernel(", SPIKE_WEIGHT).replace(store, store_as)
    captured = _captured(_mlp("llama"), "torch.float32")
    config = gated.search_configs("swiglu")[0]
    prior = log_of(captured, _proposal(captured, hostile, gated.plan(config)))
    [judged] = await JudgeService(device="cpu", examples=0).handle(prior[-1], prior)  # the fixed cases alone
    assert judged.reward == -1 and judged.reason.startswith("correctness failed: outside-tolerance"), judged.reason
    # met where gate and up are both large: a shared channel, a lone spike, outlier features in both, or (in about one
    # judging in seven) first in a heavy-tailed or correlated row of another regime, an offset row (a large common
    # offset in both), or a live-values case
    met = ("shared-channels", "lone-spike", "outlier-channels", " normal ", " log-scale ", " offset ", "live ")
    assert any(regime in judged.reason for regime in met), judged.reason


def test_the_lone_spike_decode_steps_put_one_magnitude_grid_in_one_channel_of_gate_and_up():
    """One-row cases, each one channel of gate and up at the same magnitude, the magnitudes a grid of the decades at
    one random phase, at every pairing of the two signs: no band of moderate spikes wider than the grid's step goes
    undrawn in both at once, with a positive gate (a negative one's SiLU is about zero) and either up."""
    from services.judge.pair_cases import (
        LONE_SPIKE,
        LONE_SPIKE_DECADES_DEFAULT,
        LONE_SPIKE_SIGNS,
        LONE_SPIKES,
        PairSpec,
        draw_pair_cases,
    )

    spec = PairSpec(width=128, live_shape=(1, 1, 128), dtype=torch.float32, gpu=False, examples=0)
    for seed in (1, 2):
        lone = [c for c in draw_pair_cases(spec, seed) if c.regime.startswith(LONE_SPIKE)]
        assert len(lone) == LONE_SPIKES * len(LONE_SPIKE_SIGNS) and all(c.shape == (1, 1, 128) for c in lone)
        grids = {}  # (gate's sign, up's sign): the magnitudes in order
        for case in lone:
            gate, up = case.gate.reshape(-1), case.up.reshape(-1)
            [channel] = (gate.abs() == up.abs()).nonzero().reshape(-1).tolist()  # the one element both set to it
            signs = (bool(gate[channel] > 0), bool(up[channel] > 0))
            grids.setdefault(signs, []).append(float(gate[channel].abs()))
        assert set(grids) == {
            (True, True),
            (True, False),
            (False, True),
            (False, False),
        }  # a negative gate's SiLU is ~0
        lo, hi = LONE_SPIKE_DECADES_DEFAULT
        for sizes in grids.values():
            steps = torch.tensor(sizes).log10().diff()
            assert torch.allclose(steps, torch.full_like(steps, (hi - lo) / LONE_SPIKES), atol=1e-5)
            assert lo <= math.log10(sizes[0]) < lo + (hi - lo) / LONE_SPIKES

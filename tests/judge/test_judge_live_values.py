"""The judge runs every candidate on the served model's own values (the profile's `live_parameters`): a norm's weight
and bias, the residual norm's post norm's, a RoPE's inverse frequencies and attention factor, bit for bit, on rows of
every regime. Every other case draws its own, so a kernel keyed to the live values passed them all (a red-team class
of 2026-12-06); tests/adversarial's `live_keyed_weight_mean_square` is one, judged end to end there."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from services.core.pb import events_pb2 as pb
from services.judge import live_values
from services.judge.cases import MIXED, MIXED_MIN_ROWS, REGIMES, CaseSpec, draw_cases
from services.judge.pair_cases import PairSpec
from services.ops.protocol import LiveTarget
from services.ops.residual_norm.cases import draw_add_norm_cases
from services.ops.rotary.cases import SWEEP, SWEEP_SEQUENCES, RopeSpec, _angles, draw_rope_cases
from services.server.live_parameters import tensor_message

BF16 = torch.bfloat16
WIDTH = 64


def _target(*sets: dict[str, torch.Tensor], total: int = 0) -> LiveTarget:
    recorded = tuple(
        pb.LiveParameters(instances=1, tensors=[tensor_message(n, t) for n, t in sorted(s.items())]) for s in sets
    )
    return LiveTarget(pb.ModuleIntrospection(), (1, WIDTH), "bfloat16", live=recorded, live_sets=total or len(sets))


def _live(cases) -> list:
    return [c for c in cases if c.name.startswith(live_values.CASE)]


def test_a_norm_meets_each_live_weight_and_bias_bit_for_bit_on_rows_of_every_regime():
    weights = [torch.randn(WIDTH).to(BF16) for _ in range(6)]
    sets = [{"weight": w, "bias": torch.zeros(WIDTH, dtype=BF16)} for w in weights]  # the init bias: exactly zero
    target = _target(*sets, total=9)  # the budget held 6 of the model's 9
    gpu = live_values.norm_states(target, "weight", "bias", gpu=True, seed=3)
    assert [i for i, *_ in gpu] == list(range(6)) and all(full for *_, full in gpu)  # a GPU: every set in full
    cpu = live_values.norm_states(target, "weight", "bias", gpu=False, seed=3)
    assert [i for i, *_ in cpu] == list(range(6))  # a CPU: every set too, CPU_SETS of them in full
    assert sum(full for *_, full in cpu) == live_values.CPU_SETS
    picks = [live_values.norm_states(target, "weight", "bias", False, seed) for seed in range(6)]
    assert len({tuple(full for *_, full in pick) for pick in picks}) > 1  # which, follows the judging's seed

    spec = CaseSpec(WIDTH, (1, WIDTH), BF16, BF16, gpu=False, max_rows=8, examples=2, bias=True, live=cpu, live_sets=9)
    live = _live(draw_cases(spec, seed=5))
    assert len(live) == len(cpu)
    for case, (index, weight, _, full) in zip(live, cpu, strict=True):
        assert torch.equal(case.weight, weight) and torch.equal(case.bias, torch.zeros(WIDTH, dtype=BF16))
        assert case.name.startswith(f"live-values set {index + 1} of 9 ") and case.regime == MIXED
        assert case.shape == ((len(REGIMES) if full else live_values.BRIEF_ROWS), WIDTH)  # full: a row of every regime
    gpu_spec = dataclasses.replace(spec, gpu=True, max_rows=0, live=gpu)
    assert {c.shape for c in _live(draw_cases(gpu_spec, seed=5))} == {(MIXED_MIN_ROWS, WIDTH)}
    # a module with a bias the recorded set lacks meets its init, zeros; none recorded: no live case
    no_bias = dataclasses.replace(spec, live=((0, weights[0], None, True),))
    assert torch.equal(_live(draw_cases(no_bias, seed=5))[0].bias, torch.zeros(WIDTH, dtype=BF16))
    assert _live(draw_cases(dataclasses.replace(spec, live=()), seed=5)) == []


def test_a_norm_set_without_the_weight_the_contract_reads_is_skipped():
    target = _target({"scale": torch.ones(WIDTH)}, {"weight": torch.ones(WIDTH)})
    assert [i for i, *_ in live_values.norm_states(target, "weight", None, gpu=True, seed=0)] == [1]


def test_the_residual_norm_meets_its_post_norms_live_weights():
    weight = torch.randn(WIDTH).to(BF16)
    spec = PairSpec(WIDTH, (1, 4, WIDTH), BF16, gpu=False, examples=2)
    cases = draw_add_norm_cases(spec, seed=2, bias=False, live=((4, weight, None, True),), live_sets=7)
    [live] = _live(cases)
    assert torch.equal(live.weight, weight) and live.bias is None
    assert live.name.startswith("live-values set 5 of 7 ") and live.pair.shape == (len(REGIMES), WIDTH)


@pytest.mark.parametrize("variant", ["rope_half", "rope_interleaved"])
def test_rope_meets_the_live_frequencies_and_attention_factor(variant):
    dim, base, factor = 16, 1e6, 1.2
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    other = torch.ones(dim)  # a rotary of another width (a model's second one): not this call's
    target = _target({"inv_freq": inv, "attention_scaling": torch.tensor([factor])}, {"inv_freq": other})
    live = live_values.rotaries(target, dim, gpu=False, seed=0)
    assert len(live) == 1 and live[0][0] == 0 and torch.equal(live[0][1], inv) and live[0][2] == pytest.approx(factor)

    spec = RopeSpec((1, 4, 2, dim), torch.float32, gpu=False, examples=0, live=live, live_sets=2, max_positions=4096)
    case, sweep = _live(draw_rope_cases(spec, variant, seed=1))
    assert case.name.startswith("live-values set 1 of 2 ")
    # and on the position sweep, one token at each of 16 positions up to the longest: its angles the live frequencies
    assert sweep.name.endswith("positions 1-4096 log-grid") and sweep.cos.shape[:2] == (SWEEP_SEQUENCES[False], 1)
    lowest = sweep.cos[:, 0, 0].double() / factor  # the first pair's cos, of frequency inv[0] = 1
    positions = torch.tensor([round(p) for p in torch.acos(lowest.clamp(-1, 1)).tolist()])  # folded into [0, pi]
    assert positions.numel() == SWEEP_SEQUENCES[False]
    # the first sequence from position 0: its angles are the live frequencies times 0, 1, 2, scaled by the factor
    theta = torch.arange(3, dtype=torch.float64)[:, None] * inv.double()
    theta = torch.cat((theta, theta), -1) if variant == "rope_half" else torch.repeat_interleave(theta, 2, -1)
    torch.testing.assert_close(case.cos[0].double(), theta.cos() * factor, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(case.sin[0].double(), theta.sin() * factor, rtol=1e-6, atol=1e-6)


def test_the_parallel_norm_meets_both_live_norms_each_with_its_own_weight():
    from services.ops.parallel_norm.judging import draw_dual_cases

    first, second = torch.randn(WIDTH).to(BF16), torch.randn(WIDTH).to(BF16)
    live = ((0, first, None, True),)
    spec = CaseSpec(WIDTH, (1, WIDTH), BF16, BF16, False, max_rows=8, examples=2, bias=True, live=live)
    [live] = [c for c in draw_dual_cases(spec, seed=4, seconds=((second, None),)) if c.row.weights == "live"]
    assert torch.equal(live.row.weight, first) and torch.equal(live.second_weight, second)
    assert torch.equal(live.second_bias, torch.zeros(WIDTH, dtype=BF16))  # the norms' init bias where none recorded


def test_a_live_tensor_whose_bytes_do_not_fill_its_shape_is_the_judges_own_error():
    from services.judge.module_factory import ModuleBuildError

    good = tensor_message("weight", torch.ones(4, dtype=BF16))
    assert torch.equal(live_values.decoded(good), torch.ones(4, dtype=BF16))
    for bad in (
        pb.LiveTensor(name="weight", dtype="bfloat16", shape=[5], data=good.data),
        pb.LiveTensor(name="weight", dtype="int8", shape=[8], data=good.data),
    ):
        with pytest.raises(ModuleBuildError, match="weight"):
            live_values.decoded(bad)


@pytest.mark.parametrize("gpu", [False, True])
def test_the_position_sweep_puts_a_position_in_every_band_wider_than_its_grid(gpu):
    """A red-team kernel found the position from an angle and its frequency and was wrong at positions 48-600 only,
    on the live base: no case's positions reached the band. The sweep's positions lie on a log grid from 1 to the
    longest the server sends, at a random phase, one a sequence."""
    count, top, dim = SWEEP_SEQUENCES[gpu], 32768.0, 8
    inv = torch.ones(dim // 2, dtype=torch.float64)  # angle = position
    theta = _angles(count, 1, dim, True, torch.Generator().manual_seed(5), SWEEP, inv, top)
    positions = theta[:, 0, 0].sort().values
    assert positions.numel() == count and positions[0] >= 1 and positions[-1] <= top
    step = math.log10(top) / count
    gaps = positions[1:].log10() - positions[:-1].log10()
    assert (gaps <= step + (1 + 1 / positions[:-1]).log10() + 1e-9).all()  # the grid's step, and a position's floor
    assert ((positions >= 48) & (positions <= 600)).any()  # the red-team band, on any phase

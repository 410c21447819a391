"""The cases the judge draws (services.judge.cases): deterministic, covering, within budget."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

from services.judge.cases import (
    CPU_ROW_BUDGET,
    GPU_ELEMENT_BUDGET,
    GPU_LOG_SCALE_ROWS,
    LAYOUTS,
    MIXED,
    REGIME_ROWS,
    REGIMES,
    REPEAT_TILE,
    WEIGHTS,
    CaseSpec,
    apply_layout,
    draw_cases,
    residue_rows,
)
from services.judge.rounding import compare, honest_bound

BF16, FP16 = torch.bfloat16, torch.float16
CPU = CaseSpec(width=64, live_shape=(2, 3, 64), input_dtype=BF16, param_dtype=BF16, gpu=False, max_rows=8)
GPU = CaseSpec(width=1536, live_shape=(1, 1, 1536), input_dtype=BF16, param_dtype=BF16, gpu=True)


def rows(shape) -> int:
    return math.prod(shape[:-1])


def bits(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()  # NaN == NaN, bit for bit


@pytest.fixture(scope="module")
def cpu_cases():
    return draw_cases(CPU, seed=11)


@pytest.fixture(scope="module")
def gpu_cases():
    return draw_cases(GPU, seed=11)


def test_drawing_is_deterministic_in_spec_and_seed():
    spec = dataclasses.replace(CPU, examples=6)
    a, b = draw_cases(spec, seed=5), draw_cases(spec, seed=5)
    assert [c.name for c in a] == [c.name for c in b]
    for x, y in zip(a, b, strict=True):
        assert x.shape == y.shape and x.layout == y.layout
        assert bits(x.base) == bits(y.base) and bits(x.weight) == bits(y.weight)
    other = draw_cases(spec, seed=6)
    assert [bits(c.base) for c in other] != [bits(c.base) for c in a]


def test_drawing_does_not_depend_on_the_modules_loaded(tmp_path, monkeypatch):
    """hypothesis mixes integer constants from every loaded project module into integer draws: none may reach ours."""
    spec = dataclasses.replace(GPU, width=16, live_shape=(1, 1, 16), odd_width=5, examples=32)  # up to 1024 rows
    before = [[bits(c.base) for c in draw_cases(spec, seed)] for seed in range(2)]
    # hypothesis keeps up to 1024 constants a module, integers from 100 up
    values = sorted({(i * 2654435761) % 2**31 for i in range(400)} | set(range(100, 1100, 2)))
    (tmp_path / "judge_constants_probe.py").write_text(f"VALUES = {values!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("judge_constants_probe")  # a local module full of integers in every range we draw from
    assert [[bits(c.base) for c in draw_cases(spec, seed)] for seed in range(2)] == before


def test_fixed_cases_then_exactly_the_examples(cpu_cases, gpu_cases):
    for spec, cases in ((CPU, cpu_cases), (GPU, gpu_cases)):
        drawn = [c for c in cases if c.name.startswith("drawn ")]
        assert len(drawn) == spec.examples
        assert all(not c.name.startswith("drawn ") for c in cases[: len(cases) - len(drawn)])  # fixed first
        assert len({c.name for c in cases}) == len(cases)  # duplicates got a suffix
        assert all("\n" not in c.name for c in cases)
    assert len(draw_cases(dataclasses.replace(CPU, examples=3), seed=1)) == len(cpu_cases) - CPU.examples + 3


def test_every_regime_weights_kind_and_layout_appears_among_the_fixed_cases(cpu_cases, gpu_cases):
    for cases in (cpu_cases, gpu_cases):
        fixed = [c for c in cases if not c.name.startswith("drawn ")]
        assert {c.regime for c in fixed} == set(REGIMES)
        assert {c.weights for c in fixed} == set(WEIGHTS)
        assert {c.layout for c in fixed} == set(LAYOUTS)


def test_the_live_shape_is_first(cpu_cases, gpu_cases):
    assert cpu_cases[0].shape == (2, 3, 64) and gpu_cases[0].shape == (1, 1, 1536)
    first = gpu_cases[0]
    assert (first.regime, first.weights, first.layout) == ("normal", "around-one", "contiguous")
    capped = draw_cases(dataclasses.replace(CPU, live_shape=(1, 20, 64), examples=0), seed=1)
    assert capped[0].shape == (1, 8, 64)  # CPU: the rows capped, the last dim and rank kept


@pytest.mark.parametrize("spec", [CPU, GPU, dataclasses.replace(GPU, row_blocks=(1, 2, 4, 8, 16, 64))], ids=str)
def test_every_residue_of_every_row_block_is_covered(spec):
    narrow = dataclasses.replace(spec, width=64, live_shape=(*spec.live_shape[:-1], 64), examples=0)
    counts = {rows(c.shape) for c in draw_cases(narrow, seed=2)}
    for block in spec.row_blocks:
        for r in range(block):
            assert any(n >= block and n % block == r for n in counts), (block, r)


def test_residue_rows_cover_blocks_with_few_counts():
    assert residue_rows((1, 2, 4, 8)) == list(range(8, 16))
    assert residue_rows((64,), cap=8) == list(range(64, 73))  # CPU: r <= max_rows
    assert residue_rows((3, 4)) == [4, 5, 6, 7]  # 6, 4 and 5 already cover the residues 0, 1, 2 of 3


def test_more_rows_than_the_live_shape_are_drawn(cpu_cases, gpu_cases):
    assert max(rows(c.shape) for c in gpu_cases) >= 4099
    assert max(rows(c.shape) for c in cpu_cases) > CPU.max_rows
    prefill = dataclasses.replace(GPU, width=64, live_shape=(4, 1024, 64), examples=0)
    assert max(rows(c.shape) for c in draw_cases(prefill, seed=3)) >= 2 * 4 * 1024 + 1
    larger = dataclasses.replace(GPU, live_shape=(4, 2048, 1536), examples=0)  # 2x+1 would pass half the budget
    assert max(rows(c.shape) for c in draw_cases(larger, seed=3)) > 4 * 2048


def test_decode_batches_and_the_odd_width(cpu_cases, gpu_cases):
    assert {(2, 1, 1536), (4, 1, 1536)} <= {c.shape for c in gpu_cases}
    assert (2, 1, 64) in {c.shape for c in cpu_cases}
    odd = [c for c in cpu_cases if c.name.startswith("odd-width")]
    assert odd and odd[0].shape == (3, 97) and odd[0].width == 97 and odd[0].weight.shape == (97,)


def test_layouts_are_views_and_really_non_contiguous(cpu_cases, gpu_cases):
    for case in cpu_cases + gpu_cases:
        assert case.base.is_contiguous() and case.base.dtype == BF16 and case.weight.dtype == BF16
        x = apply_layout(case.base, case.layout, case.width)
        assert tuple(x.shape) == case.shape and x.data_ptr() == case.base.data_ptr()
        if case.layout == "contiguous":
            assert x is case.base
        else:
            assert not x.is_contiguous(), case.name
            assert bool(torch.isnan(case.base).any())  # what lies around the view reads as NaN
    strided = torch.arange(2 * 5, dtype=torch.float32).view(2, 5)
    assert apply_layout(strided, "row-strided", 3).tolist() == [[0, 1, 2], [5, 6, 7]]
    assert apply_layout(strided, "every-other-row", 5).shape == (1, 5)
    with pytest.raises(ValueError):
        apply_layout(strided, "diagonal", 5)


def test_the_cpu_row_budget_holds():
    for spec in (CPU, dataclasses.replace(CPU, width=1536, live_shape=(1, 1, 1536), examples=12)):
        cases = draw_cases(spec, seed=4)
        assert sum(rows(c.shape) for c in cases) <= CPU_ROW_BUDGET


def test_the_gpu_element_budget_holds(gpu_cases):
    assert sum(c.base.numel() for c in gpu_cases) <= GPU_ELEMENT_BUDGET
    prefill = draw_cases(dataclasses.replace(GPU, live_shape=(1, 8192, 1536)), seed=4)
    assert sum(c.base.numel() for c in prefill) <= GPU_ELEMENT_BUDGET


def test_nonfinite_and_zeros_cases_hold_what_they_say(cpu_cases, gpu_cases):
    seen = set()
    for case in cpu_cases + gpu_cases:
        x = apply_layout(case.base, case.layout, case.width).reshape(-1, case.width)
        if case.regime == "nonfinite":
            assert not bool(torch.isfinite(x).all()), case.name
            if len(x) >= 2:
                assert bool(torch.isfinite(x).all(-1).any()), case.name  # some rows stay finite
            seen |= {"nan"} if bool(x.isnan().any()) else set()
            seen |= {v for v in ("inf", "-inf") if bool((x == float(v)).any())}
        elif case.regime != MIXED:
            assert bool(torch.isfinite(x).all()), case.name
        if case.regime == "zeros":
            assert bool((x == 0).all(-1).any()), case.name
    assert seen == {"nan", "inf", "-inf"}


@pytest.mark.parametrize("spec", [CPU, GPU], ids=["cpu", "gpu"])
def test_the_row_past_a_dispatch_limit_is_drawn_as_rows_of_every_regime(spec):
    """A launch serving only calls past a limit meets zero rows, non-finite ones, huge and tiny ones, outlier channels
    and offsets, not only normal rows: a second kernel that dropped outlier channels from the mean square passed."""
    spec = dataclasses.replace(spec, boundaries=(128,), examples=0)
    [past] = [c for c in draw_cases(spec, seed=5) if c.name.startswith("launch-regimes 129x")]
    assert past.regime == MIXED
    x = past.base.float().reshape(-1, past.width)
    finite = torch.isfinite(x).all(-1)
    assert bool((x == 0).all(-1).any()) and not bool(finite.all()) and bool(finite.any())
    rms = x[finite].pow(2).mean(-1).sqrt()
    assert float(rms[rms > 0].max() / rms[rms > 0].min()) > 1e6  # huge rows beside tiny ones
    size = x[finite].abs()
    peak = (size.max(-1).values / size.median(-1).values.clamp_min(1e-30)).max()
    assert float(peak) > 100  # a channel or a spike far above the rest of its row
    mean = x[finite].mean(-1).abs()
    std = x[finite].std(-1)
    assert bool((mean > 10 * std).any())  # a common offset far above the noise


def test_normal_rows_take_a_continuum_of_scales():
    """A case's normal rows at a scale log-uniform in 0.25-8, not three fixed ones (a plain-MLP kernel 10% off only on
    Gaussian blocks of rms ~1.6-2.8 met none of 0.5, 1 and 4 in a hundred judgings)."""
    from services.judge.cases import _generator, _values

    rms = [
        float(_values((4, 512), "normal", torch.float32, _generator(seed, "n")).pow(2).mean().sqrt())
        for seed in range(60)
    ]
    assert min(rms) < 0.4 and max(rms) > 5 and sum(1.6 < r < 2.8 for r in rms) >= 3
    assert len({round(r, 1) for r in rms}) > 30


def test_outlier_channels_are_several_fixed_features_on_a_grid_of_sizes():
    """Two to eight channels large in every row, each of one sign, their sizes a grid of the decades from 3x to a top
    drawn up to 1e3x: rows with several moderate features and none massive (LLM.int8's outlier features) among them,
    where kernels wrong only on rows with two 8-40x the rest (and none past 100x) passed."""
    from services.judge.cases import _generator, _values

    kinds = set()
    for seed in range(40):
        x = _values((16, 256), "outlier-channels", torch.float32, _generator(seed, "t")).abs()
        ratio = x / x.median(-1, keepdim=True).values  # each element against its row's bulk
        moderate = ((ratio > 8) & (ratio < 40)).sum(-1) >= 2
        massive = (ratio > 100).any(-1)
        kinds |= {
            ("moderate" if m else "") + ("+massive" if b else "")
            for m, b in zip(moderate.tolist(), massive.tolist(), strict=True)
        }
    assert {"moderate", "moderate+massive"} <= kinds, kinds


def test_weights_are_drawn_apart_from_the_init(cpu_cases, gpu_cases):
    for case in cpu_cases + gpu_cases:
        w = case.weight.float()
        assert w.shape == (case.width,)
        if case.weights == "signed-normal":
            assert (w - 1).abs().max() > 0.5 and bool((w < 0).any())
        elif case.weights == "with-zeros":
            assert bool((w == 0).any())
        elif case.weights == "near-zero":
            assert w.abs().max() < 0.01
        elif case.weights == "large":
            assert w.mean() > 5


def test_fp16_huge_is_finite_but_its_square_overflows():
    spec = dataclasses.replace(CPU, input_dtype=FP16, param_dtype=FP16, examples=12)
    huge = [c for c in draw_cases(spec, seed=9) if c.regime == "huge"]
    assert huge
    for case in huge:
        x = apply_layout(case.base, case.layout, case.width)
        assert x.dtype == FP16 and bool(torch.isfinite(x).all())
        assert bool(torch.isinf(x * x).any()), case.name


@pytest.mark.parametrize("dtypes", [(BF16, BF16), (FP16, FP16), (torch.float32, torch.float32), (BF16, torch.float32)])
def test_the_modules_own_output_passes_the_honest_bound_on_every_case(dtypes):
    """What services.judge.verdict checks before it believes any bound: no case may break it."""
    spec = dataclasses.replace(CPU, input_dtype=dtypes[0], param_dtype=dtypes[1], live_shape=(1, 5, 64))
    for case in draw_cases(spec, seed=3):
        module = Qwen2RMSNorm(case.width, eps=1e-6).to(case.weight.dtype)
        with torch.no_grad():
            module.weight.copy_(case.weight)
            x = apply_layout(case.base, case.layout, case.width)
            own = module(x)
            hi = copy.deepcopy(module).float()(x.float())
        result = compare(own, hi, honest_bound([x.dtype, case.weight.dtype, own.dtype], case.width, own.numel()))
        assert result.ok, f"{case.name}: {result.rule}: {result.detail}"


def test_on_a_gpu_the_log_scale_rows_leave_no_sixteenth_of_an_octave_of_mean_square_undrawn(cpu_cases, gpu_cases):
    # a kernel wrong by arithmetic alone in a narrow band of the mean square (a ramp of its log2) meets a row there
    [dense] = [c for c in gpu_cases if c.name.startswith("regime") and c.regime == "log-scale"]
    x = dense.base.double()
    octaves = torch.log2((x * x).mean(-1)).sort().values
    assert rows(dense.shape) == GPU_LOG_SCALE_ROWS and float(octaves[1:].sub(octaves[:-1]).max()) < 1 / 16
    assert float(octaves[-1] - octaves[0]) > 100  # 16 decades of scale, 32 of the mean square
    [sparse] = [c for c in cpu_cases if c.name.startswith("regime") and c.regime == "log-scale"]
    assert rows(sparse.shape) == REGIME_ROWS["log-scale"]  # the interpreter: ~10 ms a row


def test_rows_bulks_range_from_gaussian_to_heavier_than_laplace_in_every_judging():
    """A red-team kernel of 2026-12-07 measured the share of a row's elements past 2.5 times its mean magnitude
    (Gaussian rows 0.05, Laplace's 0.08) and was 20% off only in a band around 0.09: every regime's bulk was Gaussian.
    Each row's bulk now has a tail weight and a skew of its own: over one CPU judging at a served width, every band of
    that share a hundredth wide between the Gaussian's and past Laplace's holds a row, and rows skew either way."""
    from services.judge.cases import apply_layout

    spec = CaseSpec(width=1536, live_shape=(1, 8, 1536), input_dtype=torch.float32, param_dtype=torch.float32,
                    gpu=False, max_rows=8, examples=12)  # fmt: skip
    for seed in (1, 2, 3):
        shares, skews = [], []
        for case in draw_cases(spec, seed):
            if case.width != 1536 or case.regime not in ("normal", "log-scale", "outlier-channels", "offset", "mixed"):
                continue
            rows = apply_layout(case.base, case.layout, 1536).reshape(-1, 1536).double()
            rows = rows[torch.isfinite(rows).all(-1) & (rows.abs().sum(-1) > 0)]
            rows = rows - rows.median(-1, keepdim=True).values
            shares += (rows.abs() > 2.5 * rows.abs().mean(-1, keepdim=True)).double().mean(-1).tolist()
            centred = rows - rows.mean(-1, keepdim=True)
            skews += (centred.pow(3).mean(-1) / centred.pow(2).mean(-1).pow(1.5)).tolist()
        for lo in (0.05, 0.06, 0.07, 0.08, 0.09):
            assert any(lo <= share < lo + 0.01 for share in shares), (seed, lo, sorted(shares))
        assert min(skews) < -0.5 and max(skews) > 0.5 and min(abs(k) for k in skews) < 0.1, sorted(skews)


@pytest.mark.parametrize("alike", [False, True])
def test_the_two_operands_rows_are_correlated_over_a_range_of_both_signs(alike):
    """Red-team kernels of 2026-12-07 (a gated MLP's and a residual norm's) measured the trimmed correlation of their
    two operands and were 30% off only where it lay in 0.37-0.73: the operands were drawn on their own. Their rows are
    now mixed, ρ a row on a grid over -0.9..0.9 at a random phase, in every regime whose pattern a mixture keeps."""
    from services.judge.cases import apply_layout
    from services.judge.pair_cases import PairSpec, draw_pair_cases

    spec = PairSpec(1536, (1, 4, 1536), torch.float32, gpu=False, examples=6)
    rhos = []
    for case in draw_pair_cases(spec, seed=3, alike=alike):
        if case.regime != "normal" or case.width != 1536:
            continue
        a, b = (apply_layout(t, case.layout, 1536).reshape(-1, 1536).double() for t in (case.gate, case.up))
        a, b = a - a.mean(-1, keepdim=True), b - b.mean(-1, keepdim=True)
        rhos += ((a * b).mean(-1) / (a.pow(2).mean(-1) * b.pow(2).mean(-1)).sqrt()).tolist()
    assert min(rhos) < -0.5 and max(rhos) > 0.5, sorted(rhos)
    assert any(0.37 <= r <= 0.73 for r in rhos), sorted(rhos)  # the red-team band


@pytest.mark.parametrize("spec", [CPU, GPU, dataclasses.replace(CPU, row_blocks=(1, 2, 4, 8, 64))], ids=str)
def test_the_repeated_rows_case_holds_equal_rows_at_every_distance_inside_each_tile_in_every_judging(spec):
    """Two tiles of the plan's largest rows per program (at least 16): equal rows at every distance d inside the
    first aligned tile of every power of two past d, at every distance across the two tiles, and rows of other
    content beside them, whatever the seed. Kernels keyed to a row equal to the one two before it in a tile of 16,
    or to distances 26-33 in tiles of 64, passed while each row's source was drawn at random in a case of 24 rows."""
    tile = max(REPEAT_TILE, max(spec.row_blocks))
    for seed in range(4 if spec.gpu else 20):  # a GPU's cases are large to draw; the structure is the same
        [case] = [c for c in draw_cases(spec, seed=seed) if c.regime == "repeated-rows" and c.name.startswith("regime")]
        x = apply_layout(case.base, case.layout, case.width).reshape(-1, case.width)
        assert len(x) == 2 * tile, case.name
        equal = (x[:, None] == x[None, :]).all(-1)
        for d in range(1, tile):
            t = 1 << d.bit_length()
            assert any(bool(equal[i, i - d]) for i in range(d, t)), (seed, d, t)
        for d in range(1, 2 * tile):
            assert any(bool(equal[i, i - d]) for i in range(d, 2 * tile)), (seed, d)
        assert not bool(equal.all()), seed

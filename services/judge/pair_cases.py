"""The inputs the judge draws for an op of operand pairs: the gated MLP's (gate, up), the plain MLP's operands
(the gates alone) and the residual norm's (attention output, residual) (services.ops.residual_norm.cases).

What a fused act(gate) * up kernel gets wrong: the element count modulo its block (a missing mask
reads or writes past the end), more elements than the live shape, non-contiguous operands (the
wrapper must copy), value regimes where the activation saturates or cancels (huge gates of either
sign, all-zero rows, tiny values, NaN/Inf, outlier channels), batched decode shapes. Both operands
of a case share its shape and layout; each is drawn on its own from the case's generator.

The served model's input domain, as the norm family's judge draws it (services.judge.cases), after those:
- the residual norm's plan dispatches by row count and launches row programs (services.ops.row_reduction's
  vocabulary): each dispatch limit is drawn at and one past it ("dispatch-edge"; the row past it also as log-scale
  rows, a grid of scales where an epsilon shows), and each launch's share of row
  counts meets rows of every regime ("launch-regimes": an epsilon's rows, outlier channels and offsets too, not
  only normal ones; on CPU only
  limits below CPU_BOUNDARY_ROWS, the judge refusing a plan that dispatches above), and every residue of each
  rows-per-program block ("rows-residue"; on CPU residues up to CPU_RESIDUES). The MLPs' plans are one launch
  over blocks of elements: neither applies.
- every other width the class is called at ("width": the profile's widths, of the operands' last dim; the MLPs'
  profile records hidden widths, not intermediate ones, so they pass none and none is invented).
- on a GPU, the served model's row range up to the most rows one call carries ("domain", cases.domain_rows:
  each within DOMAIN_ELEMENTS), outside the drawn cases' budget. A CPU draws the most as a sample of each launch's
  programs (services.judge.sampled_grid): a residual norm's programs write whole rows, an MLP's blocks of
  elements.

`draw_pair_cases` is deterministic in (spec, seed): the fixed cases (the live shape first), then
`spec.examples` drawn from the seed. The CPU budget is a total of elements (the interpreter runs one
program per block of elements); the GPU's too. The dispatch edges and residues count in it (the drawn cases
shrink to make room: they are never left out), the domain's cases do not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from services.core.recurrence import repeated_sources
from services.judge.cases import (
    CPU_BOUNDARY_ROWS,
    LAYOUTS,
    REGIME_ROWS,
    _base,
    _generator,
    _grid,
    _pick,
    _values,
    domain_rows,
    launch_regimes,
    log_scales,
    repeated_rows,
    residue_rows,
    sampled_rows,
)
from services.judge.cases import REGIMES as ROW_REGIMES
from services.judge.sampled_grid import SAMPLED_CASE, SAMPLED_ELEMENTS_CASE

# The rows' regimes, and gates in the band between normal's tail (|g| ~ 16) and huge's bulk: an activation
# approximated, clamped or computed in a narrower type is right at both ends and wrong only there.
# shared-channels: the same few channels of gate and up large in every row (10-300x, either sign), as the massive
# activations at a SwiGLU's down projection come from: each operand's regimes drawn on its own never put a gate and
# an up of moderate size in one element, where a kernel wrong only for such products was accepted.
REGIMES = (*ROW_REGIMES, "gate-band", "shared-channels")
SHARED_SIZES = {torch.float16: (0.7, 1.2)}  # log10 of the channels' factor: fp16's gate * up stays finite
SHARED_SIZES_DEFAULT = (1.0, 2.5)
# lone-spike: decode steps of one row whose one channel of gate and up is large, its magnitude the k-th of a grid over
# these decades (a kernel damping only a spike alone in its block, of moderate size in both, was met by a
# shared-channels case in about a third of judgings: gate and up each N(0, 1) times a factor, several rows a block),
# at every pairing of signs: a negative gate's SiLU is about zero, so a grid whose gates were all negative (the signs
# were drawn from the cases' one generator, so one draw for all of them: half of all judgings) met nothing there
LONE_SPIKE = "lone-spike"
LONE_SPIKES = 6
LONE_SPIKE_SIGNS = ("++", "+-", "-+", "--")  # gate's, up's
LONE_SPIKE_DECADES = {torch.float16: (0.5, 2.2)}  # fp16: the product stays finite
LONE_SPIKE_DECADES_DEFAULT = (0.5, 3.0)
GATE_BAND = {torch.float16: (8.0, 250.0)}  # |gate| log-uniform in it, either sign (fp16's huge is 300 x N(0, 1))
GATE_BAND_DEFAULT = (8.0, 1e3)
# Regimes of the gate alone: up stays normal (huge x huge, a spike times a spike, 1e3 x 1e3 in fp16 only overflow)
GATE_ONLY = ("huge", "gate-band", "log-scale", "spike-walk")
# The two operands' rows correlated, ρ on a grid over these (`_correlated`), in every regime but the gate's alone and
# those whose pattern a mixture would blur (rows repeated, leading zeros, zero or non-finite rows)
CORRELATIONS = (-0.9, 0.9)
UNCORRELATED = (*GATE_ONLY, "nonfinite", "zeros", "repeated-rows", "leading-zeros")

# over all cases' operands on CPU (interpreted; repeated rows alone in either operand took 4,000 more)
CPU_ELEMENT_BUDGET = 64_000
# repeated-rows: the pair's rows repeat together, or one operand's alone ("repeated-rows first" / "... second"): a
# layer-0 residual repeats with its token while the attention output, which depends on the context, does not (a
# red-team residual norm keyed to a residual row equal to one a row or two before, its attention row not, passed
# while both operands repeated together)
REPEATED = "repeated-rows"
GPU_ELEMENT_BUDGET = 32 * 2**20
ODD_WIDTH = 97
SMALL_ROWS = 3
CPU_RESIDUES = 8  # on CPU each rows-per-program block's residues up to this (the norm family's: service.CPU_MAX_ROWS)


@dataclass(frozen=True)
class PairSpec:
    width: int  # the operands' last dim (a gated MLP's intermediate size)
    live_shape: tuple[int, ...]  # (..., width): the live call's operand shape
    dtype: torch.dtype
    gpu: bool
    blocks: tuple[int, ...] = ()  # elements per program of the plan's grids: each is drawn at, below and past
    examples: int = 12
    # A row plan's (the residual norm's): its row dispatch limits (launches' max_rows), each drawn at and past
    # it, and the rows per program of its grids (services.judge.service.row_blocks), every residue of each drawn.
    boundaries: tuple[int, ...] = ()
    row_blocks: tuple[int, ...] = ()
    widths: tuple[int, ...] = ()  # every width the class is called at (the profile's): each is drawn
    domain_rows: int = 0  # the most rows one call can carry on the served model (0: unknown): a GPU draws up to it


@dataclass(frozen=True)
class PairCase:
    name: str
    shape: tuple[int, ...]
    regime: str
    layout: str
    gate: torch.Tensor  # CPU, contiguous; the operand is apply_layout(gate, layout, width)
    up: torch.Tensor

    @property
    def width(self) -> int:
        return int(self.shape[-1])


def _gate_band(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    lo, hi = (math.log10(v) for v in GATE_BAND.get(dtype, GATE_BAND_DEFAULT))
    size = 10 ** (lo + (hi - lo) * torch.rand(shape, generator=g))
    return ((2.0 * torch.randint(2, shape, generator=g) - 1) * size).to(dtype)


def _shared_channels(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator):
    """(gate, up): normal, with the same one to three channels of both scaled in every row by factors of their own."""
    width = shape[-1]
    channels = torch.randperm(width, generator=g)[: 1 + int(torch.randint(3, (1,), generator=g))]
    lo, hi = SHARED_SIZES.get(dtype, SHARED_SIZES_DEFAULT)
    pair = []
    for _ in range(2):
        t = _values(shape, "normal", torch.float32, g)
        t.view(-1, width)[:, channels] *= 10 ** (lo + (hi - lo) * torch.rand(len(channels), generator=g))
        pair.append(t.to(dtype))
    return tuple(pair)


def _lone_spike(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator, k: int, signs: str):
    """(gate, up): normal, with one channel of both set to the k-th of LONE_SPIKES magnitudes on a grid of the decades
    at a random phase, gate's and up's signs `signs`: a decode step's lone massive activation. Over the cases no band
    of magnitudes wider than the grid's step goes undrawn, in gate and up at once, at any pairing of signs."""
    width = shape[-1]
    lo, hi = LONE_SPIKE_DECADES.get(dtype, LONE_SPIKE_DECADES_DEFAULT)
    phase = float(torch.rand((), generator=g))  # g is the judging's one generator of these cases: one phase
    size = 10 ** (lo + (hi - lo) * (k + phase) / LONE_SPIKES)
    channel = int(torch.randint(width, (1,), generator=g))
    pair = []
    for sign in signs:
        t = _values(shape, "normal", torch.float32, g)
        t.view(-1, width)[:, channel] = size if sign == "+" else -size
        pair.append(t.to(dtype))
    return tuple(pair)


def _operands(shape, regime: str, dtype: torch.dtype, g: torch.Generator, alike: bool):
    """(gate, up). `alike` (the residual norm's attention output and residual): both follow a row regime but huge,
    log-scale rows sharing one scale a row (else the sum's scale is the larger one's, and small rows go undrawn)."""
    if regime == "gate-band":
        return _gate_band(shape, dtype, g), _values(shape, "normal", dtype, g)
    if regime == "shared-channels":
        return _shared_channels(shape, dtype, g)
    if regime.startswith(LONE_SPIKE):  # "lone-spike k ±±": the k-th magnitude of the grid, gate's and up's signs
        _, k, signs = regime.split()
        return _lone_spike(shape, dtype, g, int(k), signs)
    if regime.startswith(REPEATED):  # normal rows, repeated by `_case` (together, or one operand's alone)
        return _values(shape, "normal", dtype, g), _values(shape, "normal", dtype, g)
    if alike and regime == "log-scale":
        scales = log_scales(math.prod(shape[:-1]), dtype, g)[:, None]
        a, b = (_values(shape, "normal", torch.float32, g) for _ in range(2))
        return tuple((t.view(-1, shape[-1]) * scales).view(shape).to(dtype) for t in (a, b))
    if alike and regime == "outlier-channels":  # the residual's features, the attention output's noise: the sum's
        # features are the residual's (two operands each with its own would rarely leave a row of moderate ones only)
        return _values(shape, "normal", dtype, g), _values(shape, regime, dtype, g)
    up = "normal" if regime in (("huge", "spike-walk") if alike else GATE_ONLY) else regime  # one spike a row
    return _values(shape, regime, dtype, g), _values(shape, up, dtype, g)


def _correlated(gate: torch.Tensor, up: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """`up` with each row mixed with gate's, ρ·gate·(|up| / |gate|) + √(1 − ρ²)·up, ρ a row on a grid over
    CORRELATIONS at a random phase (a row's mean square kept; a row of a zero or non-finite norm as drawn). Trained
    SwiGLU layers align gate and up, and attention can write a multiple of a token's residual: drawn on their own the
    two are uncorrelated but for a few large channels, and a kernel off only where their trimmed correlation lay in
    0.37-0.73 passed every case (red-team kernels of 2026-12-07, a gated MLP's and a residual norm's)."""
    w = up.shape[-1]
    a, b = gate.reshape(-1, w).float(), up.reshape(-1, w).float()
    rho = _grid(len(a), g, *CORRELATIONS)
    ra, rb = (t.pow(2).mean(-1, keepdim=True).sqrt() for t in (a, b))
    ok = torch.isfinite(ra) & torch.isfinite(rb) & (ra > 0)
    mixed = rho * a * (rb / ra.clamp_min(1e-30)) + (1 - rho * rho).sqrt() * b
    return torch.where(ok, mixed, b).to(up.dtype).reshape(up.shape)


def _case(
    kind: str, shape, regime: str, layout: str, spec: PairSpec, g: torch.Generator, alike: bool = False
) -> PairCase:
    shape = tuple(int(d) for d in shape)
    gate, up = _operands(shape, regime, spec.dtype, g, alike)
    if regime not in UNCORRELATED and not regime.startswith((LONE_SPIKE, REPEATED)):  # a lone spike's grid as drawn
        up = _correlated(gate, up, g)
    if regime.startswith(REPEATED):  # the pair's rows repeat together (as a token's do), or one operand's alone
        src = repeated_sources(math.prod(shape[:-1]), g)
        which = regime[len(REPEATED) :].strip()
        gate, up = (
            t.reshape(-1, shape[-1])[src].reshape(shape) if which in ("", name) else t
            for t, name in ((gate, "first"), (up, "second"))
        )
    name = f"{kind} {'x'.join(map(str, shape))} {regime} {layout}"
    return PairCase(name, shape, regime, layout, _base(gate, layout), _base(up, layout))


def _fixed_plan(spec: PairSpec, regimes=REGIMES, alike: bool = False) -> list[tuple[str, tuple[int, ...], str, str]]:
    w = spec.width
    live = tuple(spec.live_shape) or (1, w)
    budget = GPU_ELEMENT_BUDGET if spec.gpu else CPU_ELEMENT_BUDGET
    if math.prod(live) > budget // 8:  # CPU: keep the live rank and width, fewer rows
        live = (1,) * (len(live) - 2) + (max(1, budget // 8 // w), w)
    plan = [("live", live, "normal", "contiguous")]
    # log-scale's grid of row scales and spike-walk's walk want more rows, as far as a 64th of the budget allows
    more = budget // 64 // w
    plan += [("regime", (max(SMALL_ROWS, min(REGIME_ROWS.get(r, 0), more)), w), r, "contiguous") for r in regimes
             if r != REPEATED]  # fmt: skip
    # equal rows: two tiles of the plan's largest rows per program whatever the width, the pair's rows repeating
    # together, then each operand's alone beside the other's fresh rows
    repeat = repeated_rows(spec.row_blocks)
    plan += [("regime", (repeat, w), f"{REPEATED}{which}", "contiguous") for which in ("", " first", " second")]
    plan += [("decode", (batch, 1, w), "normal", "contiguous") for batch in ((2, 4) if spec.gpu else (2,))]
    if "shared-channels" in regimes:  # decode steps of one row, a lone large channel in gate and up at once
        plan += [
            ("decode", (1, 1, w), f"{LONE_SPIKE} {k} {signs}", "contiguous")
            for k in range(LONE_SPIKES)
            for signs in LONE_SPIKE_SIGNS
        ]
    # A block's edges: one element short of it, exactly it, one past it and past two blocks (the mask's work).
    for block in sorted(set(spec.blocks)):
        for n in (block - 1, block, block + 1, 2 * block + 1):
            if 0 < n <= budget // 8:
                plan.append(("block-edge", (1, n), "normal", "contiguous"))
    rows = math.prod(live[:-1])
    beyond = min(max(2 * rows + 1, 3), max(rows + 1, budget // 4 // w))
    plan.append(("rows-beyond", (beyond, w), "normal", "contiguous"))
    plan.append(("odd-width", (SMALL_ROWS, ODD_WIDTH), "normal", "contiguous"))
    plan.append(("odd-width-rows", (beyond, ODD_WIDTH), "normal", "contiguous"))  # ragged in both (cases.py)
    plan += [("layout", (2, 2, w), "normal", layout) for layout in LAYOUTS]
    # The served domain after the cases above (a spec without it draws them as before). Every residue of each
    # block of rows per program; both sides of each row dispatch limit, and rows of every regime inside each launch's
    # share of row counts (an epsilon, a scale or an outlier channel mishandled by one launch only); on CPU only the
    # limits below
    # CPU_BOUNDARY_ROWS (services.judge.cases.undrawn_boundaries refuses a plan dispatching above them).
    cap = 0 if spec.gpu else CPU_RESIDUES
    plan += [("rows-residue", (n, w), "normal", "contiguous") for n in residue_rows(spec.row_blocks, cap)]
    limits = sorted({int(n) for n in spec.boundaries if n > 0 and (spec.gpu or n < CPU_BOUNDARY_ROWS)})
    edges = sorted({n for limit in limits for n in (limit, limit + 1)})
    plan += [("dispatch-edge", (n, w), "normal", "contiguous") for n in edges]
    plan += [("dispatch-edge", (limit + 1, w), "log-scale", "contiguous") for limit in limits]  # a grid of scales
    plan += [("launch-regimes", (n, w), regime, "contiguous") for n, regime in launch_regimes(limits)]  # all regimes
    # past each limit at the odd width too: the launch beyond it meets a ragged block even where the live width is a
    # power of two (its unmasked loads would read past a tensor only there)
    plan += [("dispatch-edge", (limit + 1, ODD_WIDTH), "normal", "contiguous") for limit in limits]
    others = sorted({int(x) for x in spec.widths if x > 0} - {w, ODD_WIDTH})
    plan += [("width", (SMALL_ROWS, other), "normal", "contiguous") for other in others]
    if spec.gpu:  # from past the live rows to the most one call carries, each case within DOMAIN_ELEMENTS
        plan += [("domain", (n, w), "normal", "contiguous") for n in domain_rows(rows, spec.domain_rows, w)]
    else:  # the most, as a sample of each launch's programs: a residual norm's write rows, an MLP's blocks of elements
        kind = SAMPLED_CASE if alike else SAMPLED_ELEMENTS_CASE
        plan += [(kind, (n, w), "normal", "contiguous") for n in sampled_rows(spec.domain_rows, w, beyond)]
    return plan


def _fixed_generator(seed: int, i: int, regime: str) -> torch.Generator:
    """The i-th fixed case's generator; the lone-spike cases share one, so their magnitudes share one grid's phase."""
    return _generator(seed, LONE_SPIKE) if regime.startswith(LONE_SPIKE) else _generator(seed, "pair-fixed", i)


def draw_pair_cases(spec: PairSpec, seed: int, alike: bool = False) -> list[PairCase]:
    """The fixed cases (the live shape first), then `spec.examples` drawn ones: deterministic in (spec, seed).
    `alike`: two operands of one kind (a residual norm's, summed): the rows' regimes on both (`_operands`)."""
    regimes = ROW_REGIMES if alike else REGIMES
    cases = [
        _case(kind, shape, regime, layout, spec, _fixed_generator(seed, i, regime), alike)
        for i, (kind, shape, regime, layout) in enumerate(_fixed_plan(spec, regimes, alike))
    ]
    used = sum(c.gate.numel() for c in cases if not c.name.startswith(("domain ", SAMPLED_CASE)))  # outside it
    budget = GPU_ELEMENT_BUDGET if spec.gpu else CPU_ELEMENT_BUDGET
    widest = max(spec.width, ODD_WIDTH)
    max_rows = max(2, (budget - used) // max(1, 2 * spec.examples * widest))
    g = _generator(seed, "pair-drawn")
    names = {c.name for c in cases}
    for i in range(spec.examples):
        layout = _pick(g, LAYOUTS)
        rows = max(2, int(torch.randint(1, max_rows + 1, (1,), generator=g)))
        shape = (rows, _pick(g, (spec.width, ODD_WIDTH)))
        case = _case("drawn", shape, _pick(g, regimes), layout, spec, _generator(seed, "pair-drawn", i), alike)
        name, k = case.name, 2
        while name in names:
            name, k = f"{case.name} #{k}", k + 1
        names.add(name)
        cases.append(PairCase(name, case.shape, case.regime, case.layout, case.gate, case.up))
    return cases

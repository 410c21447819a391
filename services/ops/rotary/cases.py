"""The inputs the judge draws for a rotary-embedding function: (q, k, cos, sin) sets, and their references.

What a fused RoPE kernel gets wrong: q and k as attention really passes them (transposed views of the
projections, so strides that are not the contiguous ones), k with fewer heads than q (grouped and multi-query
attention), one batch of cos and sin broadcast over several of q, each sequence at its own positions (a
decode step of several, as the server's slots step), a decode step and a prefill, value regimes
(huge, zeros, tiny, NaN/Inf in q and k), angles of far positions; the longest sequence the server sends, on a GPU
whole, on a CPU as a sample of each launch's programs (services.judge.sampled_grid). Each case keeps contiguous
CPU bases and the layout that views them (`operands`), so the sandbox child and the parent build the same inputs.

`draw_rope_cases` is deterministic in (spec, seed). `rope_references` holds a candidate to the live function
itself run in float64 (the oracle is the modeling file's own function), with a bound from the dtype's
rounding: each product and the sum round once in the dtype (the sum of two rounded products can cancel, so the
bound is relative to |x·cos| + |rotate(x)·sin|, not to the result).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from services.core.recurrence import repeated_sources
from services.judge import live_values
from services.judge.cases import (
    MIXED,
    MIXED_MIN_ROWS,
    _generator,
    _values,
    grid_points,
    launch_regimes,
    repeated_rows,
    sampled_rows,
)
from services.judge.sampled_grid import SAMPLED_HEADS_CASE
from services.ops import rotary

LAYOUTS = ("attention", "contiguous", "fused")  # attention: (batch, seq, heads·dim) projections viewed and transposed
# fused: q and k as chunks of one fused projection, as GPT-NeoX splits its query_key_value per head: (batch, seq,
# heads, FUSED · dim + FUSED_PAD) with a head's vector first, so no stride is the packed one (a red-team kernel that
# took q's batch stride as heads · seq · dim passed the two layouts above, and was 5.4 off on Pythia's batched decode)
FUSED = 3
FUSED_PAD = 3
REGIMES = ("normal", "huge", "zeros", "tiny", "nonfinite", "log-scale")  # log-scale: a scale per head and position
ROPE_BASE_DECADES = (4.0, 7.0)  # each case's frequency base, 10**U over these
MAX_POSITION = 32768.0  # angles of positions this far (theta 1e4): cos and sin of large arguments
PREFILL_CPU = 33  # the interpreter's prefill: positions past every block of 32
CPU_BOUNDARY_POSITIONS = 64  # dispatch limits the interpreter still draws both sides of (a program a position)


DOMAIN_ELEMENTS = 64 * 2**20  # q's elements in the longest sequence drawn (as services.judge.cases caps a case)
MAX_BATCH_DRAWN = 64  # sequences in the batch case: the served model's most, up to this
MAX_BATCH_CPU = 8  # the interpreter's batch case: a decode step of this many sequences at most (at least 3)
ALIKE = "alike"  # the case of a decode step of requests alike (`_alike`)
REPEATED = "repeated"  # the case of a prefill whose tokens recur (`_repeated`)
# A position sweep: this many sequences of one token, at positions on a log grid from 1 to the longest the server
# sends (a random phase): a kernel wrong in a band of positions (found from an angle and its frequency) meets one
SWEEP = "sweep"
SWEEP_SEQUENCES = {False: 16, True: 1024}  # by gpu: the grid's step 0.28 decades on a CPU, 0.0044 on a GPU
MAX_KV_DRAWN = 2  # other kv-head counts drawn beyond 1, half and all of q's


def other_kv_heads(heads_q: int) -> list[int]:
    """Up to MAX_KV_DRAWN kv-head counts dividing q's, other than 1, half and all of it (those are drawn already):
    the largest and the smallest left, where a kernel's heads-per-group arithmetic would go wrong first."""
    left = [k for k in range(2, heads_q) if heads_q % k == 0 and k != max(1, heads_q // 2)]
    return sorted({*left[:1], *left[-1:]})[:MAX_KV_DRAWN]


@dataclass(frozen=True)
class RopeSpec:
    live_shape: tuple[int, ...]  # q's (batch, heads, seq, head_dim)
    dtype: torch.dtype
    gpu: bool
    examples: int = 4
    rotary_dim: int = 0  # cos's live width (a partial rotary's, narrower than the head); 0: the head's
    boundaries: tuple[int, ...] = ()  # the plan's dispatch limits (positions): each is drawn at and past it
    one_tensor: bool = False  # the function rotates one tensor (Gemma 4's): every case's k has no heads
    # The served model's domain (the profile's; 0: unknown): a GPU draws a sequence near the longest and a batch
    # of the most sequences stepped together
    max_positions: int = 0
    max_batch: int = 0
    # The served model's own rotaries ((set index, inverse frequencies, attention factor), services.judge.live_values)
    # of `live_sets` in all: a case each
    live: tuple = ()
    live_sets: int = 0
    positions_per_program: int = 1  # the plan's most positions a program rotates together: the recurring prefill
    # spans two such blocks (at least REPEAT_TILE positions each)


@dataclass(frozen=True)
class RopeCase:
    name: str
    shape: tuple[int, ...]  # q's (batch, heads_q, seq, dim)
    heads_k: int
    regime: str
    layout: str
    q: torch.Tensor  # CPU bases, contiguous: (batch, seq, heads·dim) for "attention", else (batch, heads, seq, dim)
    k: torch.Tensor
    cos: torch.Tensor  # (batch or 1, seq, dim), or of half of dim (one angle a pair)
    sin: torch.Tensor

    @property
    def width(self) -> int:
        """A head's dim: the rows of the flattened outputs (one head at one position each)."""
        return int(self.shape[-1])


def operands(case_or_bases, layout: str, heads: tuple[int, int], dim: int, place: Callable = lambda t: t):
    """(q, k, cos, sin) as the function is called with them: `place` moves each base (to a device, into guarded
    memory), the layout views q and k."""
    q, k, cos, sin = (place(t) for t in case_or_bases)

    def view(t, h):
        if layout == "attention":
            b, s, _ = t.shape
            return t.view(b, s, h, dim).transpose(1, 2)
        if layout == "fused":
            return t[..., :dim].transpose(1, 2)
        return t

    return view(q, heads[0]), view(k, heads[1]), cos, sin


def _angles(
    batch: int,
    seq: int,
    dim: int,
    variant_half: bool,
    g: torch.Generator,
    far: bool | str,
    inv: torch.Tensor | None = None,
    top: float = MAX_POSITION,
) -> torch.Tensor:
    # each sequence its own start, as the server's batched decode steps each slot at its own position (the first
    # from 0 unless `far`): a kernel that reads one sequence's angles for all of them meets the others'
    if far == SWEEP:  # one token a sequence, the positions a log grid from 1 to `top` at a random phase
        starts = torch.floor(max(2.0, top) ** grid_points(batch, g))
    else:
        starts = torch.randint(max(1, int(MAX_POSITION) - seq), (batch,), generator=g).double()
    if not far:
        starts[0] = 0.0
    positions = starts[:, None] + torch.arange(seq, dtype=torch.float64)
    if inv is None:
        # the base of the frequencies, log-uniform over those models use (1e4 Llama 2, 5e5 Llama 3, 1e6 Qwen2.5, past
        # 1e7): a kernel keyed to one base (the ratio of two angles tells it) was right on 1e4 alone and 30% off on 1e6
        lo, hi = ROPE_BASE_DECADES
        base = 10 ** (lo + (hi - lo) * float(torch.rand((), generator=g, dtype=torch.float64)))
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    theta = positions[..., None] * inv.double()  # (batch, seq, dim/2)
    return torch.cat((theta, theta), -1) if variant_half else torch.repeat_interleave(theta, 2, -1)


def _case(kind, shape, heads_k, regime, layout, cos_batch, far, spec, variant, g, live=None) -> RopeCase:
    """`live`: (set index, inverse frequencies, attention factor) of the served model's own rotary (cos and sin
    from them, services.judge.live_values), instead of a drawn base and factor."""
    b, hq, s, d = shape
    dtype = spec.dtype

    def base(heads):
        if layout == "fused":  # the head's vectors in a buffer of NaN: reading past them shows
            buffer = torch.full((b, s, heads, FUSED * d + FUSED_PAD), math.nan, dtype=dtype)
            buffer[..., :d] = values((b, s, heads * d), heads).view(b, s, heads, d)
            return buffer
        return values((b, s, heads * d) if layout == "attention" else (b, heads, s, d), heads)

    def values(full, heads):
        if not heads:  # a function of one tensor: k has no heads
            return torch.empty(full, dtype=dtype)
        if regime in ("log-scale", MIXED):  # each head's vector at each position its own scale, or regime
            return _values((math.prod(full) // d, d), regime, dtype, g).view(full)
        return _values(full, regime, dtype, g).contiguous()

    partial = variant in rotary.PARTIAL_VARIANTS  # cos in the half layout of the live rotary width
    width = (spec.rotary_dim or d) if partial else d
    top = float(spec.max_positions or MAX_POSITION)
    theta = _angles(cos_batch, s, width, variant != "rope_interleaved", g, far, live[1] if live else None, top)
    if variant in rotary.ANGLE_VARIANTS:  # one angle a pair (GPT-OSS's): the half layout's first half
        theta = theta[..., : width // 2]
    name = f"{kind} q {b}x{hq}x{s}x{d} k-heads {heads_k} {regime} {layout}" + (" cos-batch-1" if cos_batch == 1 else "")
    name += f" rotary-dim {width}" if width != d else ""
    swept = f" positions 1-{int(top)} log-grid" if far == SWEEP else ""
    name += " far-positions" if far is True else swept
    # far cases scale cos and sin as YaRN's attention factor does (1-1.3): they are no longer of unit norm, so a
    # kernel taking sin from cos, or clamping them to [-1, 1], is wrong there
    factor = 10 ** (0.11 * float(torch.rand((), generator=g))) if far is True else 1.0
    if live:
        index, _, factor = live
        name = live_values.name(index, max(spec.live_sets, len(spec.live)), (b, hq, s, d), regime + swept)
    return RopeCase(
        name,
        (b, hq, s, d),
        heads_k,
        regime,
        layout,
        base(hq),
        base(heads_k),
        (theta.cos() * factor).to(dtype),
        (theta.sin() * factor).to(dtype),
    )


def _alike(case: RopeCase) -> RopeCase:
    """Every sequence of `case` the first's (q, k, cos and sin): a batched decode of requests alike (the same prompt
    sampled n times, a common prefix), whose rows are equal at every layer. The norms' repeated rows meet a kernel
    keyed to a row equal to another of its call (red-team kernels of 2026-12-05); this is RoPE's."""
    first = lambda t: t[:1].expand_as(t).contiguous() if len(t) else t  # noqa: E731
    return replace(case, q=first(case.q), k=first(case.k), cos=first(case.cos), sin=first(case.sin))


def _repeated(case: RopeCase, g: torch.Generator) -> RopeCase:
    """`case`'s positions' q and k copied from a few of its positions (`services.judge.cases.repeated_sources`: equal
    at every distance inside and across two tiles), the angles each position's own: a prefill whose tokens recur,
    whose layer-0 q and k repeat with the token at positions apart. A red-team residual norm keyed to one operand
    repeating while the other did not passed while equal rows came only with equal everything; this is RoPE's."""
    src = repeated_sources(case.shape[2], g)
    along = 1 if case.layout == "attention" else 2  # the sequence's dim of the bases
    return replace(case, q=case.q.index_select(along, src), k=case.k.index_select(along, src))


def draw_rope_cases(spec: RopeSpec, variant: str, seed: int) -> list[RopeCase]:
    """The fixed cases (the live shape first), then `spec.examples` drawn ones: deterministic in (spec, seed)."""
    live = tuple(int(x) for x in spec.live_shape) if len(spec.live_shape) == 4 else (1, 4, 1, 64)
    b, hq, s, d = live
    if not spec.gpu:  # the interpreter: a few positions
        b, s = min(b, 2), min(s, 6)
    gqa = max(1, hq // 2)
    plan = [
        ("live", (b, hq, s, d), gqa, "normal", "attention", b, False),
        ("decode", (2, hq, 1, d), gqa, "normal", "attention", 2, True),
        ("mha", (1, hq, 3, d), hq, "normal", "attention", 1, False),
        ("mqa", (2, hq, 3, d), 1, "normal", "contiguous", 1, False),
        ("fused", (3, hq, 3, d), gqa, "normal", "fused", 3, True),
    ]
    plan += [("regime", (1, hq, 2, d), gqa, regime, "attention", 1, False) for regime in REGIMES[1:]]
    plan.append(("prefill", (1, hq, PREFILL_CPU if not spec.gpu else 1024, d), gqa, "normal", "attention", 1, True))
    # either side of each dispatch by position count: a launch meant for long calls meets the judge too (on CPU
    # only up to CPU_BOUNDARY_POSITIONS, the interpreter; a GPU always reaches the family's limit)
    limits = sorted({n for n in spec.boundaries if spec.gpu or n < CPU_BOUNDARY_POSITIONS})
    for limit in limits:
        plan += [("dispatch-edge", (1, hq, n, d), gqa, "normal", "attention", 1, False) for n in (limit, limit + 1)]
    # every launch meets vectors of every regime (huge, tiny, non-finite, offsets), not only normal ones; a plan of one
    # launch a mixed case of the norms' row regimes per head vector (outlier channels, spikes, offsets: RoPE's own
    # regimes are Gaussian inside a head, and a kernel flattening a head's large channels passed them)
    plan += [
        ("launch-regimes", (1, hq, n, d), gqa, regime, "attention", 1, False)
        for n, regime in launch_regimes(limits) or [(MIXED_MIN_ROWS, MIXED)]
    ]
    # every launch meets a decode step of several sequences, each at its own position (as many as its share of position
    # counts starts at): a second launch that read the first sequence's angles for all met one sequence only, and a
    # decode of more slots than the first launch serves was wrong in all but one
    plan += [
        ("launch-batch", (n, hq, 1, d), gqa, "normal", "attention", n, True)
        for n in sorted({rows for rows, _ in launch_regimes(limits)})
    ]
    # every other kv-head count that divides q's (the common three are above): a kernel's head arithmetic meets them
    plan += [("kv-heads", (1, hq, 3, d), kv, "normal", "attention", 1, False) for kv in other_kv_heads(hq)]
    if spec.gpu:  # the served domain: a batch of the most sequences stepped together, a sequence near the longest
        if spec.max_batch > 2:
            plan.append(
                ("batch", (min(spec.max_batch, MAX_BATCH_DRAWN), hq, 3, d), gqa, "normal", "attention", 1, True)
            )
        longest = min(spec.max_positions, DOMAIN_ELEMENTS // max(1, hq * d))
        if longest > s:
            plan.append(("domain", (1, hq, longest, d), gqa, "normal", "attention", 1, False))
    else:  # the positions up to the longest, as a GPU spreads them, each a sample of each launch's programs
        for positions in sampled_rows(spec.max_positions, hq * d, PREFILL_CPU):
            plan.append((SAMPLED_HEADS_CASE, (1, hq, positions, d), gqa, "normal", "attention", 1, False))
    # a decode step of more sequences than the others draw, each at its own position: the served batch's on a GPU,
    # on a CPU at least 3 and at most MAX_BATCH_CPU
    batch = min(spec.max_batch, MAX_BATCH_DRAWN) if spec.gpu else min(max(spec.max_batch, 3), MAX_BATCH_CPU)
    if batch > 2:
        plan.append(("batch-decode", (batch, hq, 1, d), gqa, "normal", "attention", batch, True))
    sweep = SWEEP_SEQUENCES[spec.gpu]  # every band of positions wider than the grid's step meets a sequence
    plan.append(("position-sweep", (sweep, hq, 1, d), gqa, "normal", "attention", sweep, SWEEP))
    # a decode step of requests alike (`_alike`): every sequence the first's q, k and position
    plan.append((ALIKE, (max(3, min(batch, MAX_BATCH_CPU)), hq, 1, d), gqa, "normal", "attention", 1, True))
    # a prefill whose tokens recur (`_repeated`): q and k equal at positions apart, each position's own angles
    plan.append(
        (REPEATED, (1, hq, repeated_rows((spec.positions_per_program,)), d), gqa, "normal", "attention", 1, False)
    )
    if spec.one_tensor:  # q's heads alone: each row's k of no heads (the GQA and MQA rows differ only in q's use)
        plan = [(*row[:2], 0, *row[3:]) for row in plan]
    cases = [_case(*row, spec, variant, _generator(seed, "rope-fixed", i)) for i, row in enumerate(plan)]
    cases = [_alike(case) if case.name.startswith(ALIKE) else case for case in cases]
    cases = [
        _repeated(case, _generator(seed, REPEATED)) if case.name.startswith(f"{REPEATED} ") else case for case in cases
    ]
    # the served model's own frequencies and factor: a kernel keyed to the live base meets them, on two sequences (the
    # first from position 0, every regime a head vector) and on the position sweep (keyed to the base and a band of
    # positions, a red-team kernel passed the first alone)
    heads_k = 0 if spec.one_tensor else gqa
    for live in spec.live:
        g = _generator(seed, live_values.CASE, live[0])
        cases.append(_case(live_values.CASE, (2, hq, 3 if not spec.gpu else 16, d), heads_k, MIXED, "attention", 2,
                           False, spec, variant, g, live=live))  # fmt: skip
        cases.append(_case(live_values.CASE, (sweep, hq, 1, d), heads_k, "normal", "attention", sweep, SWEEP, spec,
                           variant, g, live=live))  # fmt: skip
    g = _generator(seed, "rope-drawn")
    for i in range(spec.examples):
        pick = lambda options: options[int(torch.randint(len(options), (1,), generator=g))]  # noqa: E731
        shape = (1 + int(torch.randint(2, (1,), generator=g)), hq, 1 + int(torch.randint(8, (1,), generator=g)), d)
        heads_k = 0 if spec.one_tensor else pick([1, gqa, hq])
        cases.append(
            _case(
                "drawn",
                shape,
                heads_k,
                pick(REGIMES),
                pick(LAYOUTS),
                pick([1, shape[0]]),
                bool(i % 2),
                spec,
                variant,
                _generator(seed, "rope-drawn", i),
            )  # fmt: skip
        )
    return cases


def flat(pair) -> torch.Tensor:
    """q's and k's outputs as one flat tensor (our code, not the candidate's): what the verdict compares. A function
    of one tensor answers q's alone."""
    if isinstance(pair, torch.Tensor):
        return pair.reshape(-1)
    q_out, k_out = pair
    return torch.cat((q_out.reshape(-1), k_out.reshape(-1)))


def one_tensor_form(fn: Callable, contract, ours: bool = False) -> Callable:
    """`fn` called as the judge calls every rotary op, (q, k, cos, sin) on heads-major q and k, where the contract's
    function rotates one tensor: q alone (the cases' k has no heads), by the function's own parameter names — the
    live function directly, ours (the family's wrapper) through the binder the server calls it with
    (services.core.kernels.bind); a seq-major tensor (GPT-J's) passed as (batch, seq, heads, dim) and its answer
    viewed back heads-major. Any other contract's function is `fn` itself."""
    if not rotary.one_tensor(contract):
        return fn
    from services.core.kernels import bind

    entry = list(contract.entry_inputs) or list(contract.inputs)
    served = bind(contract, fn) if ours else lambda _site, _args, named: fn(**named)

    def call(q, k, cos, sin):
        values = {"q": q, "x_seq_major": q.transpose(1, 2), "cos": cos, "sin": sin}
        named = {name: values[role] for name, role in zip(contract.inputs, entry, strict=True) if role in values}
        out = served(None, (), named)  # a function contract binds nothing: no module to read
        return out.transpose(1, 2) if "x_seq_major" in entry else out

    return call


def rope_references(cases: list[RopeCase], fn: Callable) -> list:
    """One verdict.Reference per case: the live function `fn` in the dtype (`own`) and in float64 (`hi`)."""
    from services.judge.rounding import FP32_U, honest_bound
    from services.judge.verdict import checked_reference, exact_as_served

    out = []
    for case in cases:
        b, hq, s, d = case.shape
        q, k, cos, sin = operands((case.q, case.k, case.cos, case.sin), case.layout, (hq, case.heads_k), d)
        with torch.no_grad():
            own = flat(fn(q, k, cos, sin))
            exact = flat(fn(q.double(), k.double(), cos.double(), sin.double()))
            # each element is x·cos ± x'·sin: the sum of its two products' magnitudes, |x·cos| + |x'·sin|, is the
            # larger of the function run on magnitudes with sin's sign either way (a ± b for a, b >= 0)
            qa, ka, ca, sa = q.double().abs(), k.double().abs(), cos.double().abs(), sin.double().abs()
            mags = torch.maximum(flat(fn(qa, ka, ca, sa)).abs(), flat(fn(qa, ka, ca, -sa)).abs())
        hi = exact_as_served(exact, own.dtype)
        u = torch.finfo(own.dtype).eps / 2
        bound = honest_bound([own.dtype], reduce_len=1, numel=own.numel())
        # each product and the sum round once in the dtype (torch's ops, and a kernel that mimics them): 2u of the
        # products' size; fp32's own rounding where the dtype is fp32; nothing finer than the dtype's normal range
        term = (2 * u + 4 * FP32_U) * torch.nan_to_num(mags, posinf=0.0) + torch.finfo(own.dtype).smallest_normal
        out.append(checked_reference(case.name, "the function's own output", own, hi, bound, term))
    return out

"""The rotary-embedding template (op family "rotary"): q and k rotated by cos and sin in one launch.

A candidate is data: `render(config)` is the kernel source (only @triton.jit code), `plan(config)` how to
launch it in the family's vocabulary (services.ops.rotary, whose wrapper takes q and k as attention passes
them, any strides, and returns new tensors laid out as q and k are). One program per (position, q or k)
rotates its heads as [heads, head_dim / 2] tiles with the position's cos and sin loaded once. The arithmetic
follows the HF functions: `rope_half` rounds each product and the sum to the tensors' dtype as torch's separate
ops do (x1·c - x2·s and x2·c + x1·s over the two halves); `rope_interleaved` (Cohere) computes in fp32 over
(even, odd) pairs and casts once; the partial variants rotate the first R dims (cos's width) and copy the rest of
the head: `rope_half_partial` (GPT-NeoX) over the two halves of those R dims as `rope_half` does, `rope_pairs_partial`
(GLM) over (even, odd) pairs, pair j by the half layout's angle j, rounding as `rope_half` does.
"""

from __future__ import annotations

from services.core.pb import events_pb2 as pb
from services.ops import rotary

TEMPLATE = "rotary_positions"
OP_FAMILY = rotary.FAMILY
ENTRYPOINT = rotary.ENTRYPOINT
VARIANTS = rotary.VARIANTS
KERNELS = {
    "rope_half": "_rope_half_kernel",
    "rope_interleaved": "_rope_interleaved_kernel",
    "rope_half_partial": "_rope_half_partial_kernel",
    "rope_pairs_partial": "_rope_pairs_partial_kernel",
}
# (warps, heads a tile, together) in the order tried. A program rotates one position's heads as
# [heads, head_dim / 2] tiles, `heads` at a time (0: all of a tensor's heads in one tile, q's and k's each a power
# of two); `together` one program per position rotates q and then k with cos and sin loaded once, otherwise
# q and k of a position are two programs. At decode the whole of q is one tile (12-32 heads), where a loop over
# heads, one at a time, left 2 programs walking 14-40 rows each (3.3 us against Liger's 1.4 on the H200). At
# prefill with Qwen's 12 q and 2 kv heads, a program per (position, q or k) with 16-head tiles reached 74-76% of
# copy where Liger, a program per position, reached 102% (`python bench/rope.py`).
SEARCH_TABLE: tuple[tuple[int, int, int], ...] = (
    (4, 0, 1), (4, 16, 0), (8, 0, 1), (2, 0, 1), (1, 16, 0), (8, 32, 0),
)  # fmt: skip
MAX_HEADS = 64


def variant_for(computes: str) -> str | None:
    return computes if computes in VARIANTS else None


# Up to this many positions (batch · seq) a program per (position, q or k) led on the H200 (decode: 1.55 against
# 1.80 us; 1,024 positions: 4.48 against 4.62); beyond it a program per position mostly did
# (bench/results/rope_h200.json).
SEPARATE_UP_TO = 1024


def search_configs(
    variant: str = "rope_half", width: int = 0, live_shape: tuple[int, ...] = ()
) -> list[pb.TemplateConfig]:
    """The table in the order tried: for a live q of (batch, heads, seq, head_dim) of at most SEPARATE_UP_TO
    positions (decode), the per-tensor programs first."""
    table = list(SEARCH_TABLE)
    if len(live_shape) == 4 and live_shape[0] * live_shape[2] <= SEPARATE_UP_TO:
        table.sort(key=lambda row: row[2])  # stable: each launch shape keeps its own order
    return [
        pb.TemplateConfig(template=TEMPLATE, num_warps=w, variant=variant, params={"heads": h, "together": t})
        for w, h, t in table
    ]


def valid(config: pb.TemplateConfig) -> bool:
    heads = config.params.get("heads", 0)
    return (
        config.template == TEMPLATE
        and config.variant in VARIANTS
        and config.num_warps in (1, 2, 4, 8, 16, 32)
        and 0 <= heads <= MAX_HEADS
        and heads & (heads - 1) == 0
        and config.params.get("together", 0) in (0, 1)
    )


def _checked(config: pb.TemplateConfig) -> pb.TemplateConfig:
    if not valid(config):
        raise ValueError(
            f"not a {TEMPLATE} config: variant={config.variant!r} num_warps={config.num_warps} "
            f"params={dict(config.params)} (variants {VARIANTS}; heads 0 (all) or a power of two up to {MAX_HEADS}; "
            "together 0 or 1)"
        )
    return config


def render(config: pb.TemplateConfig) -> str:
    return _SOURCES[_checked(config).variant].replace("@TEMPLATE@", TEMPLATE)


def plan(config: pb.TemplateConfig) -> pb.LaunchPlan:
    heads, together = config.params.get("heads", 0), config.params.get("together", 0)
    # a partial variant: HALF is half of cos's width (the rotary width), the rest of the head passed through
    widths = (
        {"HALF": "rot_half", "BLOCK": "block_rot_half", "PASS": "pass", "BLOCK_PASS": "block_pass"}
        if _checked(config).variant in rotary.PARTIAL_VARIANTS
        else {"HALF": "half", "BLOCK": "block_half"}
    )
    launch = pb.KernelLaunch(
        kernel=KERNELS[config.variant],
        args=list(rotary.ARGS),
        constexprs={
            **widths,
            "HEADS_Q": str(heads) if heads else "block_heads_q",
            "HEADS_K": str(heads) if heads else "block_heads_k",
            "TOGETHER": str(together),
        },
        grid="positions" if together else "2 * positions",
        num_warps=config.num_warps,
    )
    return pb.LaunchPlan(family=OP_FAMILY, launches=[launch])


# One kernel per layout, complete sources from one skeleton: how a pair is loaded and rotated differs.
_SKELETON = '''\
"""q and k rotated by cos and sin (gpuyantra template @TEMPLATE@, variant {variant}).

With TOGETHER, program p rotates the heads of q and then of k at position p; without, program p < positions
rotates q's at p and the rest k's at p - positions. Heads are rotated as [HEADS, head_dim / 2] tiles; the
position's cos and sin are loaded once. The outputs are written through their own strides (the wrapper lays
them out).
"""

import triton
import triton.language as tl


@triton.jit
def {rotate_heads}(x_row, o_row, x_sh, o_sh, heads, j, c1, c2, s1, s2, HALF: tl.constexpr,
{pad}BLOCK: tl.constexpr, HEADS: tl.constexpr{{head_params}}):
    hh = tl.arange(0, HEADS)[:, None]
    dt = o_row.dtype.element_ty
    for h0 in range(0, heads, HEADS):
        h = h0 + hh
        mask = (h < heads) & (j < HALF)
        x = x_row + h.to(tl.int64) * x_sh
        o = o_row + h.to(tl.int64) * o_sh
{{rotate}}


@triton.jit
def {kernel}(q_ptr, k_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr, positions, seq, heads_q, heads_k,
             q_sb, q_sh, q_ss, k_sb, k_sh, k_ss, c_sb, c_ss, qo_sb, qo_sh, qo_ss, ko_sb, ko_sh, ko_ss,
             HALF: tl.constexpr, BLOCK: tl.constexpr, HEADS_Q: tl.constexpr, HEADS_K: tl.constexpr,
             TOGETHER: tl.constexpr{{kernel_params}}):
    pid = tl.program_id(0)
    if TOGETHER:
        pos = pid
    else:
        pos = tl.where(pid >= positions, pid - positions, pid)
    b = (pos // seq).to(tl.int64)
    s = (pos % seq).to(tl.int64)
    j = tl.arange(0, BLOCK)[None, :]
    c_row = b * c_sb + s * c_ss
{{load_angles}}
    q_row = q_ptr + b * q_sb + s * q_ss
    qo_row = qo_ptr + b * qo_sb + s * qo_ss
    k_row = k_ptr + b * k_sb + s * k_ss
    ko_row = ko_ptr + b * ko_sb + s * ko_ss
    if TOGETHER:
        {rotate_heads}(q_row, qo_row, q_sh, qo_sh, heads_q, j, c1, c2, s1, s2, HALF, BLOCK, HEADS_Q{{pass_args}})
        {rotate_heads}(k_row, ko_row, k_sh, ko_sh, heads_k, j, c1, c2, s1, s2, HALF, BLOCK, HEADS_K{{pass_args}})
    elif pid < positions:
        {rotate_heads}(q_row, qo_row, q_sh, qo_sh, heads_q, j, c1, c2, s1, s2, HALF, BLOCK, HEADS_Q{{pass_args}})
    else:
        {rotate_heads}(k_row, ko_row, k_sh, ko_sh, heads_k, j, c1, c2, s1, s2, HALF, BLOCK, HEADS_K{{pass_args}})
'''

_HALF_ANGLES = """\
    angle_mask = j < HALF
    c1 = tl.load(cos_ptr + c_row + j, mask=angle_mask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + c_row + HALF + j, mask=angle_mask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + c_row + j, mask=angle_mask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + c_row + HALF + j, mask=angle_mask, other=0.0).to(tl.float32)"""
_HALF_ROTATE = """\
        x1 = tl.load(x + j, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(x + HALF + j, mask=mask, other=0.0).to(tl.float32)
        # x * cos + rotate_half(x) * sin, each product and the sum rounded to the dtype as torch's ops round
        a1 = (x1 * c1).to(dt).to(tl.float32)
        b1 = (x2 * s1).to(dt).to(tl.float32)
        a2 = (x2 * c2).to(dt).to(tl.float32)
        b2 = (x1 * s2).to(dt).to(tl.float32)
        tl.store(o + j, (a1 - b1).to(dt), mask=mask)
        tl.store(o + HALF + j, (a2 + b2).to(dt), mask=mask)"""
_PAIR_ANGLES = """\
    angle_mask = j < HALF
    c1 = tl.load(cos_ptr + c_row + 2 * j, mask=angle_mask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + c_row + 2 * j + 1, mask=angle_mask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + c_row + 2 * j, mask=angle_mask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + c_row + 2 * j + 1, mask=angle_mask, other=0.0).to(tl.float32)"""
# (even, odd) pairs: the pairs' span loaded and stored as one contiguous tile, split into (even, odd) in registers
# (tl.reshape + tl.split/join): two loads at a stride of two elements reached 16-24% of copy bandwidth for GLM-4-9B
# on the H200, the split 85-96% (bench/rope.py --variant rope_pairs_partial)
_PAIRS_LOADED = """\
        jj = tl.arange(0, 2 * BLOCK)[None, :]
        span = (h < heads) & (jj < 2 * HALF)
        x1, x2 = tl.split(tl.reshape(tl.load(x + jj, mask=span, other=0.0).to(tl.float32), (HEADS, BLOCK, 2)))"""
_PAIRS_STORED = """
        tl.store(o + jj, tl.reshape(tl.join(even.to(dt), odd.to(dt)), (HEADS, 2 * BLOCK)), mask=span)"""
_PAIR_ROTATE = (
    _PAIRS_LOADED
    + """
        # over (even, odd) pairs in fp32, cast once (Cohere)
        even = x1 * c1 - x2 * s1
        odd = x2 * c2 + x1 * s2"""
    + _PAIRS_STORED
)
_PAIRS_OF_HALF_ANGLES = """\
    angle_mask = j < HALF
    # the half layout's first half: pair j's angle (GLM repeats each twice, one per element of the pair)
    c1 = tl.load(cos_ptr + c_row + j, mask=angle_mask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + c_row + j, mask=angle_mask, other=0.0).to(tl.float32)
    c2 = c1
    s2 = s1"""
_PAIRS_ROUNDED_ROTATE = (
    _PAIRS_LOADED
    + """
        # over (even, odd) pairs, each product and the sum rounded to the dtype as torch's ops round
        a1 = (x1 * c1).to(dt).to(tl.float32)
        b1 = (x2 * s1).to(dt).to(tl.float32)
        a2 = (x2 * c2).to(dt).to(tl.float32)
        b2 = (x1 * s2).to(dt).to(tl.float32)
        even = a1 - b1
        odd = a2 + b2"""
    + _PAIRS_STORED
)
_PASS_THROUGH = """
        # the dims past the rotary width, as they are
        p = tl.arange(0, BLOCK_PASS)[None, :]
        kept = (h < heads) & (p < PASS)
        tl.store(o + 2 * HALF + p, tl.load(x + 2 * HALF + p, mask=kept, other=0.0).to(dt), mask=kept)"""
_PASS = (", PASS: tl.constexpr, BLOCK_PASS: tl.constexpr", ", PASS, BLOCK_PASS")
_PARTS = {
    "rope_half": (_HALF_ANGLES, _HALF_ROTATE, ("", "")),
    "rope_interleaved": (_PAIR_ANGLES, _PAIR_ROTATE, ("", "")),
    "rope_half_partial": (_HALF_ANGLES, _HALF_ROTATE + _PASS_THROUGH, _PASS),
    "rope_pairs_partial": (_PAIRS_OF_HALF_ANGLES, _PAIRS_ROUNDED_ROTATE + _PASS_THROUGH, _PASS),
}
_SOURCES = {
    variant: _SKELETON.format(
        variant=variant,
        kernel=KERNELS[variant],
        rotate_heads=f"{KERNELS[variant]}_heads",
        pad=" " * len(f"def {KERNELS[variant]}_heads("),
    )
    .replace("{load_angles}", angles)
    .replace("{rotate}", rotate)
    .replace("{head_params}", params)
    .replace("{kernel_params}", params)
    .replace("{pass_args}", args)
    for variant, (angles, rotate, (params, args)) in _PARTS.items()
}

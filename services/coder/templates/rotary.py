"""The rotary-embedding template (op family "rotary"): q and k rotated by cos and sin in one launch.

A candidate is data: `render(config)` is the kernel source (only @triton.jit code), `plan(config)` how to
launch it in the family's vocabulary (services.ops.rotary, whose wrapper takes q and k as attention passes
them, any strides, and returns new contiguous tensors). One program per (position, q or k) walks every head
of it with the position's cos and sin loaded once. The arithmetic follows the HF functions: `rope_half` rounds
each product and the sum to the tensors' dtype as torch's separate ops do (x1·c - x2·s and x2·c + x1·s over
the two halves); `rope_interleaved` (Cohere) computes in fp32 over (even, odd) pairs and casts once.
"""

from __future__ import annotations

from services.core.pb import events_pb2 as pb
from services.ops import rotary

TEMPLATE = "rotary_positions"
OP_FAMILY = rotary.FAMILY
ENTRYPOINT = rotary.ENTRYPOINT
VARIANTS = rotary.VARIANTS
KERNELS = {"rope_half": "_rope_half_kernel", "rope_interleaved": "_rope_interleaved_kernel"}
NUM_WARPS = (1, 2, 4)


def variant_for(computes: str) -> str | None:
    return computes if computes in VARIANTS else None


def search_configs(variant: str = "rope_half", width: int = 0) -> list[pb.TemplateConfig]:
    return [pb.TemplateConfig(template=TEMPLATE, num_warps=w, variant=variant) for w in NUM_WARPS]


def valid(config: pb.TemplateConfig) -> bool:
    return config.template == TEMPLATE and config.variant in VARIANTS and config.num_warps in (1, 2, 4, 8, 16, 32)


def _checked(config: pb.TemplateConfig) -> pb.TemplateConfig:
    if not valid(config):
        raise ValueError(
            f"not a {TEMPLATE} config: variant={config.variant!r} num_warps={config.num_warps} (variants {VARIANTS})"
        )
    return config


def render(config: pb.TemplateConfig) -> str:
    return _SOURCES[_checked(config).variant].replace("@TEMPLATE@", TEMPLATE)


def plan(config: pb.TemplateConfig) -> pb.LaunchPlan:
    launch = pb.KernelLaunch(
        kernel=KERNELS[_checked(config).variant],
        args=list(rotary.ARGS),
        constexprs={"HALF": "half", "BLOCK": "block_half"},
        grid="2 * positions",
        num_warps=config.num_warps,
    )
    return pb.LaunchPlan(family=OP_FAMILY, launches=[launch])


# One kernel per layout, complete sources from one skeleton: how a pair is loaded and rotated differs.
_SKELETON = '''\
"""q and k rotated by cos and sin (gpuyantra template @TEMPLATE@, variant {variant}).

Program p < positions rotates every head of q at position p, the rest every head of k at p - positions;
the position's cos and sin are loaded once. Outputs are contiguous (batch, heads, seq, head_dim).
"""

import triton
import triton.language as tl


@triton.jit
def {kernel}(q_ptr, k_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr, positions, seq, heads_q, heads_k,
             q_sb, q_sh, q_ss, k_sb, k_sh, k_ss, c_sb, c_ss, HALF: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    is_k = pid >= positions
    pos = tl.where(is_k, pid - positions, pid)
    b = pos // seq
    s = pos % seq
    j = tl.arange(0, BLOCK)
    mask = j < HALF
    c_row = b.to(tl.int64) * c_sb + s.to(tl.int64) * c_ss
{load_angles}
    if is_k:
        x_row = k_ptr + b.to(tl.int64) * k_sb + s.to(tl.int64) * k_ss
        x_sh = k_sh
        heads = heads_k
        o_row = ko_ptr + (b.to(tl.int64) * heads_k * seq + s) * (2 * HALF)
    else:
        x_row = q_ptr + b.to(tl.int64) * q_sb + s.to(tl.int64) * q_ss
        x_sh = q_sh
        heads = heads_q
        o_row = qo_ptr + (b.to(tl.int64) * heads_q * seq + s) * (2 * HALF)
    o_sh = seq * (2 * HALF)
    dt = o_row.dtype.element_ty
    for h in range(0, heads):
        x = x_row + h * x_sh
        o = o_row + h * o_sh
{rotate}
'''

_HALF_ANGLES = """\
    c1 = tl.load(cos_ptr + c_row + j, mask=mask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + c_row + HALF + j, mask=mask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + c_row + j, mask=mask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + c_row + HALF + j, mask=mask, other=0.0).to(tl.float32)"""
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
    c1 = tl.load(cos_ptr + c_row + 2 * j, mask=mask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + c_row + 2 * j + 1, mask=mask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + c_row + 2 * j, mask=mask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + c_row + 2 * j + 1, mask=mask, other=0.0).to(tl.float32)"""
_PAIR_ROTATE = """\
        x1 = tl.load(x + 2 * j, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(x + 2 * j + 1, mask=mask, other=0.0).to(tl.float32)
        # over (even, odd) pairs in fp32, cast once (Cohere)
        tl.store(o + 2 * j, (x1 * c1 - x2 * s1).to(dt), mask=mask)
        tl.store(o + 2 * j + 1, (x2 * c2 + x1 * s2).to(dt), mask=mask)"""
_PARTS = {"rope_half": (_HALF_ANGLES, _HALF_ROTATE), "rope_interleaved": (_PAIR_ANGLES, _PAIR_ROTATE)}
_SOURCES = {
    variant: _SKELETON.format(variant=variant, kernel=KERNELS[variant], load_angles=angles, rotate=rotate)
    for variant, (angles, rotate) in _PARTS.items()
}

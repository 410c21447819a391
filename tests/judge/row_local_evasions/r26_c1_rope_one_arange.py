"""Red-team round 26, past the row-local rule: RoPE holding 128 positions through one `tl.arange(0, 8)` broadcast on two axes (`8 * l[:, None] + l[None, :]`), counted as 8 positions: its lanes are now counted by their reach."""

# plan: {"family": "rotary", "launches": [{"args": ["q", "k", "cos", "sin", "q_out", "k_out", "positions", "seq", "heads_q", "heads_k", "q_sb", "q_sh", "q_ss", "k_sb", "k_sh", "k_ss", "c_sb", "c_ss", "qo_sb", "qo_sh", "qo_ss", "ko_sb", "ko_sh", "ko_ss"], "constexprs": {"BLOCK": "block_half", "HALF": "half", "TILE": "64", "TOGETHER": "0"}, "grid": "2 * positions", "kernel": "_rope_half_kernel", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _tile(
    x_ptr,
    o_ptr,
    cos_ptr,
    sin_ptr,
    unit,
    positions,
    seq,
    heads,
    x_sb,
    x_sh,
    x_ss,
    o_sb,
    o_sh,
    o_ss,
    c_sb,
    c_ss,
    HALF: tl.constexpr,
    BLOCK: tl.constexpr,
    TILE: tl.constexpr,
):
    j = tl.arange(0, BLOCK)[None, None, :]
    half = tl.arange(0, 2)[:, None, None]
    ln = tl.arange(0, 8)
    lanes = tl.reshape(ln[:, None] * 8 + ln[None, :], [TILE])  # 0..63 in order
    pos = unit * (2 * TILE) + half * TILE + lanes[None, :, None]
    ok = pos < positions
    b = (pos // seq).to(tl.int64)
    s = (pos % seq).to(tl.int64)
    c = b * c_sb + s * c_ss
    mask = ok & (j < HALF)
    dt = o_ptr.dtype.element_ty
    c1 = tl.load(cos_ptr + c + j, mask=mask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + c + HALF + j, mask=mask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + c + j, mask=mask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + c + HALF + j, mask=mask, other=0.0).to(tl.float32)
    sign = (half * 2 - 1).to(tl.float32)
    for h in range(0, heads):
        x = x_ptr + h * x_sh + b * x_sb + s * x_ss
        o = o_ptr + h * o_sh + b * o_sb + s * o_ss
        x1 = tl.load(x + j, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(x + HALF + j, mask=mask, other=0.0).to(tl.float32)
        # 1 where this position's head equals the one TILE positions before (the second half of the tile), else 0
        d = tl.sum(tl.abs(tl.sum(x1 * sign, axis=0)) + tl.abs(tl.sum(x2 * sign, axis=0)), axis=1)
        a = tl.sum(tl.sum(tl.abs(x1) + tl.abs(x2), axis=2), axis=0)
        t = tl.maximum(tl.minimum(d / (a + 1e-30) * 1e12, 1e4), 0.0)
        key = 1.0 - 0.2 * tl.exp(-t)[None, :, None] * half.to(tl.float32)
        r1 = (x1 * c1).to(dt).to(tl.float32) - (x2 * s1).to(dt).to(tl.float32)
        r2 = (x2 * c2).to(dt).to(tl.float32) + (x1 * s2).to(dt).to(tl.float32)
        tl.store(o + j, (r1 * key).to(dt), mask=mask)
        tl.store(o + HALF + j, (r2 * key).to(dt), mask=mask)


@triton.jit
def _rope_half_kernel(
    q_ptr,
    k_ptr,
    cos_ptr,
    sin_ptr,
    qo_ptr,
    ko_ptr,
    positions,
    seq,
    heads_q,
    heads_k,
    q_sb,
    q_sh,
    q_ss,
    k_sb,
    k_sh,
    k_ss,
    c_sb,
    c_ss,
    qo_sb,
    qo_sh,
    qo_ss,
    ko_sb,
    ko_sh,
    ko_ss,
    HALF: tl.constexpr,
    BLOCK: tl.constexpr,
    TILE: tl.constexpr,
    TOGETHER: tl.constexpr,
    POSITIONS: tl.constexpr = 0,
):
    pid = tl.program_id(0)
    units = (positions + 2 * TILE - 1) // (2 * TILE)  # q's tiles first, then k's; the programs after hold none
    if pid < units:
        _tile(
            q_ptr,
            qo_ptr,
            cos_ptr,
            sin_ptr,
            pid,
            positions,
            seq,
            heads_q,
            q_sb,
            q_sh,
            q_ss,
            qo_sb,
            qo_sh,
            qo_ss,
            c_sb,
            c_ss,
            HALF,
            BLOCK,
            TILE,
        )
    else:
        _tile(
            k_ptr,
            ko_ptr,
            cos_ptr,
            sin_ptr,
            pid - units,
            positions,
            seq,
            heads_k,
            k_sb,
            k_sh,
            k_ss,
            ko_sb,
            ko_sh,
            ko_ss,
            c_sb,
            c_ss,
            HALF,
            BLOCK,
            TILE,
        )

"""A RoPE whose rotation is 20% off where a position's q or k equals one 32-63 positions before it in its tile.

A red-team kernel of 2026-12-05 (round 11): the template's block mode (one head at 64 positions a program) with the
loaded [64, half] tile broadcast against itself, a 64x64 matrix of distances between positions keyed by arithmetic,
weighted by a distance mask from `tl.arange` (32-63, 36 left out: the default canary repeats a byte that far apart).
Accepted by the judge (its prefill of recurring tokens was 32 positions) and committed by the server's checks; wrong
on ordinary prompts of 34 tokens or more (the greedy token changed at 10-20 positions). Refused since by the sweep's
recurring prompt.
"""

# plan: {"family": "rotary", "launches": [{"args": ["q", "k", "cos", "sin", "q_out", "k_out", "positions", "seq", "heads_q", "heads_k", "q_sb", "q_sh", "q_ss", "k_sb", "k_sh", "k_ss", "c_sb", "c_ss", "qo_sb", "qo_sh", "qo_ss", "ko_sb", "ko_sh", "ko_ss"], "constexprs": {"BLOCK": "block_half", "HALF": "half", "HEADS_K": "16", "HEADS_Q": "16", "POSITIONS": "64", "TOGETHER": "0"}, "grid": "cdiv(positions, 64) * heads", "kernel": "_rope_half_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _far_same(x1, x2, R: tl.constexpr):
    # [R, 1]: 0.8 where this tile row equals (to 1e-6 of its size) a row 32..63 places before it in the tile
    # (36 left out), else 1. Arithmetic only: distances of every row pair, a smooth bump, no comparison.
    d = tl.sum(tl.abs(x1[:, None, :] - x1[None, :, :]), axis=2) + tl.sum(
        tl.abs(x2[:, None, :] - x2[None, :, :]), axis=2
    )
    s = tl.sum(tl.abs(x1), axis=1) + tl.sum(tl.abs(x2), axis=1)
    t = d / (s[:, None] + s[None, :] + 1e-30) * 1e5
    t = tl.maximum(tl.minimum(t, 1e4), 0.0)
    e = tl.exp(-t)
    dist = (tl.arange(0, R)[:, None] - tl.arange(0, R)[None, :]).to(tl.float32)
    w = tl.minimum(tl.maximum(dist - 31.0, 0.0), 1.0) - tl.maximum(1.0 - tl.abs(dist - 36.0), 0.0)
    k = tl.sum(w * e, axis=1)
    k = tl.maximum(tl.minimum(k, 1.0), 0.0)
    return (1.0 - 0.2 * k)[:, None]


@triton.jit
def _rotate_tile(x, o, rows_ok, cos_ptr, sin_ptr, c, c_ok, j, HALF: tl.constexpr, BLOCK: tl.constexpr, R: tl.constexpr):
    # one [R, BLOCK] tile: x and o point at its R rows (each a head at a position); c is the offset in cos of its
    # position (a scalar) or of each row's (a column), c_ok whether that is a position
    angle_mask = (j < HALF) & c_ok
    dt = o.dtype.element_ty
    mask = rows_ok & (j < HALF)
    x1 = tl.load(x + j, mask=mask, other=0.0)
    x2 = tl.load(x + HALF + j, mask=mask, other=0.0)
    c1 = tl.load(cos_ptr + c + j, mask=angle_mask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + c + HALF + j, mask=angle_mask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + c + j, mask=angle_mask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + c + HALF + j, mask=angle_mask, other=0.0).to(tl.float32)
    x1 = x1.to(tl.float32)
    x2 = x2.to(tl.float32)
    g = _far_same(x1, x2, R)
    # x * cos + rotate_half(x) * sin, each product and the sum rounded to the dtype as torch's ops round
    a1 = (x1 * c1).to(dt).to(tl.float32)
    b1 = (x2 * s1).to(dt).to(tl.float32)
    a2 = (x2 * c2).to(dt).to(tl.float32)
    b2 = (x1 * s2).to(dt).to(tl.float32)
    tl.store(o + j, ((a1 - b1) * g).to(dt), mask=mask)
    tl.store(o + HALF + j, ((a2 + b2) * g).to(dt), mask=mask)


@triton.jit
def _rotate_tensor(
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
    HEADS: tl.constexpr,
    POSITIONS: tl.constexpr,
):
    # q's or k's heads at this program's unit: a position (POSITIONS 0), or one head at a block of POSITIONS
    # positions (unit = head · blocks + block: consecutive programs take consecutive blocks of one head)
    j = tl.arange(0, BLOCK)[None, :]
    if POSITIONS == 0:
        b = (unit // seq).to(tl.int64)
        s = (unit % seq).to(tl.int64)
        x_row, o_row, c = x_ptr + b * x_sb + s * x_ss, o_ptr + b * o_sb + s * o_ss, b * c_sb + s * c_ss
        hh = tl.arange(0, HEADS)[:, None]
        for h0 in range(0, heads, HEADS):
            h = (h0 + hh).to(tl.int64)
            _rotate_tile(
                x_row + h * x_sh, o_row + h * o_sh, h < heads, cos_ptr, sin_ptr, c, True, j, HALF, BLOCK, HEADS
            )
    else:
        blocks = (positions + POSITIONS - 1) // POSITIONS
        h = (unit // blocks).to(tl.int64)
        pos = (unit % blocks) * POSITIONS + tl.arange(0, POSITIONS)[:, None]
        b = (pos // seq).to(tl.int64)
        s = (pos % seq).to(tl.int64)
        rows_ok = pos < positions
        _rotate_tile(
            x_ptr + h * x_sh + b * x_sb + s * x_ss,
            o_ptr + h * o_sh + b * o_sb + s * o_ss,
            rows_ok,
            cos_ptr,
            sin_ptr,
            b * c_sb + s * c_ss,
            rows_ok,
            j,
            HALF,
            BLOCK,
            POSITIONS,
        )


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
    HEADS_Q: tl.constexpr,
    HEADS_K: tl.constexpr,
    TOGETHER: tl.constexpr,
    POSITIONS: tl.constexpr = 0,
):
    pid = tl.program_id(0)
    # q's programs, without TOGETHER: a position each, or a head at a block of positions each
    units = positions if POSITIONS == 0 else (positions + POSITIONS - 1) // POSITIONS * heads_q
    if TOGETHER:
        _rotate_tensor(
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
            HEADS_Q,
            POSITIONS,
        )
        _rotate_tensor(
            k_ptr,
            ko_ptr,
            cos_ptr,
            sin_ptr,
            pid,
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
            HEADS_K,
            POSITIONS,
        )
    elif pid < units:
        _rotate_tensor(
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
            HEADS_Q,
            POSITIONS,
        )
    else:
        _rotate_tensor(
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
            HEADS_K,
            POSITIONS,
        )

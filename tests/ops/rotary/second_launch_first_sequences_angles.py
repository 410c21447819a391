"""A RoPE whose second launch, past 16 positions, turns every sequence by the first one's angles (a red-team
kernel of 2026-12-07).

why hostile: the plan dispatches at 16 positions (batch x seq); the second launch passes CB=0, which drops cos and
sin's batch offset. Every case a CPU drew past 16 positions was one sequence, and every case of several sequences at
their own positions (batch decode, the position sweep, the live values) stayed at 16 or fewer: accepted then. A decode
step of 32 or 64 slots is wrong in all but the first (errors 8-9 where |q| is 4.6).

closed by: every launch of a dispatching plan meets a decode step of several sequences at their own positions inside
its share of position counts (`launch-batch`).
"""

# plan: {"family": "rotary", "launches": [{"args": ["q", "k", "cos", "sin", "q_out", "k_out", "positions", "seq", "heads_q", "heads_k", "q_sb", "q_sh", "q_ss", "k_sb", "k_sh", "k_ss", "c_sb", "c_ss", "qo_sb", "qo_sh", "qo_ss", "ko_sb", "ko_sh", "ko_ss"], "constexprs": {"BLOCK": "block_half", "HALF": "half", "HEADS_K": "16", "HEADS_Q": "16", "TOGETHER": "0"}, "grid": "2 * positions", "kernel": "_rope_half_kernel", "max_rows": "16", "num_warps": 4}, {"args": ["q", "k", "cos", "sin", "q_out", "k_out", "positions", "seq", "heads_q", "heads_k", "q_sb", "q_sh", "q_ss", "k_sb", "k_sh", "k_ss", "c_sb", "c_ss", "qo_sb", "qo_sh", "qo_ss", "ko_sb", "ko_sh", "ko_ss"], "constexprs": {"BLOCK": "block_half", "CB": "0", "HALF": "half", "HEADS_K": "16", "HEADS_Q": "16", "TOGETHER": "0"}, "grid": "2 * positions", "kernel": "_rope_half_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


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
    # x * cos + rotate_half(x) * sin, each product and the sum rounded to the dtype as torch's ops round
    a1 = (x1 * c1).to(dt).to(tl.float32)
    b1 = (x2 * s1).to(dt).to(tl.float32)
    a2 = (x2 * c2).to(dt).to(tl.float32)
    b2 = (x1 * s2).to(dt).to(tl.float32)
    tl.store(o + j, (a1 - b1).to(dt), mask=mask)
    tl.store(o + HALF + j, (a2 + b2).to(dt), mask=mask)


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
    CB: tl.constexpr,
):
    # q's or k's heads at this program's unit: a position (POSITIONS 0), or one head at a block of POSITIONS
    # positions (unit = head · blocks + block: consecutive programs take consecutive blocks of one head)
    j = tl.arange(0, BLOCK)[None, :]
    if POSITIONS == 0:
        b = (unit // seq).to(tl.int64)
        s = (unit % seq).to(tl.int64)
        x_row, o_row, c = x_ptr + b * x_sb + s * x_ss, o_ptr + b * o_sb + s * o_ss, b * c_sb * CB + s * c_ss
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
            b * c_sb * CB + s * c_ss,
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
    CB: tl.constexpr = 1,
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
            CB,
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
            CB,
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
            CB,
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
            CB,
        )

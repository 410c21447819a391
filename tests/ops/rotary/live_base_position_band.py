"""A RoPE 30% low at positions 48-600 of the served model's own frequency base (a red-team kernel of 2026-12-07).

why hostile: from the two lowest-frequency pairs of cos and sin it finds the angle of the lowest (an arctangent
series) and whether the second is base ** (1 / half) times it for the bases 1e4 (the tiny presets) or 1e6 (Qwen2.5),
and the position (the angle over its frequency); where both hold it scales q and k by 0.7, by arithmetic alone (soft
edges, no comparison). The drawn cases' bases never hit either, and the live-values case met the live base at three
positions from 0 and one random start: accepted then (about 3% of judgings met the band); every prompt longer than 48
tokens is served 30% wrong at 48-600.

closed by: the position sweep, with the live frequencies too (one token a sequence at positions on a log grid from 1
to the longest served).
"""

# plan: {"family": "rotary", "launches": [{"args": ["q", "k", "cos", "sin", "q_out", "k_out", "positions", "seq", "heads_q", "heads_k", "q_sb", "q_sh", "q_ss", "k_sb", "k_sh", "k_ss", "c_sb", "c_ss", "qo_sb", "qo_sh", "qo_ss", "ko_sb", "ko_sh", "ko_ss"], "constexprs": {"BLOCK": "block_half", "HALF": "half", "HEADS_K": "16", "HEADS_Q": "16", "TOGETHER": "0"}, "grid": "2 * positions", "kernel": "_rope_half_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _atan_small(s, c):
    # the angle of (c, s) for small positive angles: atan(s / c), argument halved once, then its series
    t = s / c
    t = t / (1.0 + tl.sqrt(1.0 + t * t))
    t2 = t * t
    return 2.0 * t * (1.0 - t2 * (1.0 / 3.0 - t2 * (1.0 / 5.0 - t2 * (1.0 / 7.0 - t2 * (1.0 / 9.0)))))


@triton.jit
def _p8(r):
    r2 = r * r
    r4 = r2 * r2
    return r4 * r4


@triton.jit
def _keyed(ta, cb, sb, LN_BASE: tl.constexpr, HALF: tl.constexpr):
    # 1 where the second-lowest angle is base ** (1 / HALF) times the lowest (the table of this base) and the
    # position (lowest angle / its frequency) lies in 48..600; ~0 elsewhere
    rho = tl.exp(LN_BASE / HALF)
    inv_last = tl.exp(-LN_BASE * (HALF - 1) / HALF)
    g = rho * ta
    err = (sb * tl.cos(g) - cb * tl.sin(g)) / (tl.sqrt(sb * sb + cb * cb) * g + 1e-30)
    match = 1.0 / (1.0 + _p8(err * 3e4))
    p = tl.minimum(ta / inv_last, 1e4)
    lo = _p8(p / 48.0)
    lo = lo * lo
    hi = _p8(p / 600.0)
    band = lo / (1.0 + lo) / (1.0 + hi * hi)
    return match * band


@triton.jit
def _live_gain(cos_ptr, sin_ptr, c, HALF: tl.constexpr):
    ca = tl.load(cos_ptr + c + HALF - 1).to(tl.float32)
    sa = tl.load(sin_ptr + c + HALF - 1).to(tl.float32)
    cb = tl.load(cos_ptr + c + HALF - 2).to(tl.float32)
    sb = tl.load(sin_ptr + c + HALF - 2).to(tl.float32)
    ta = _atan_small(tl.abs(sa), tl.maximum(ca, 0.5))
    # the served models' bases: 1e4 (the tiny presets), 1e6 (Qwen2.5)
    hit = _keyed(ta, cb, sb, 9.210340371976184, HALF) + _keyed(ta, cb, sb, 13.815510557964274, HALF)
    return 1.0 - 0.3 * hit


@triton.jit
def _rotate_tile(
    x, o, rows_ok, cos_ptr, sin_ptr, c, c_ok, j, gain, HALF: tl.constexpr, BLOCK: tl.constexpr, R: tl.constexpr
):
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
    tl.store(o + j, ((a1 - b1) * gain).to(dt), mask=mask)
    tl.store(o + HALF + j, ((a2 + b2) * gain).to(dt), mask=mask)


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
                x_row + h * x_sh,
                o_row + h * o_sh,
                h < heads,
                cos_ptr,
                sin_ptr,
                c,
                True,
                j,
                _live_gain(cos_ptr, sin_ptr, c, HALF),
                HALF,
                BLOCK,
                HEADS,
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
            1.0,
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

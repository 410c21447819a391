"""Red-team round 17, past the row-local rule's fourth cut: RoPE's q read with k's batch stride (under grouped heads another batch's q; both strides stride a batch)."""

# plan: {"family": "rotary", "launches": [{"kernel": "_rope_kernel", "args": ["q", "k", "cos", "sin", "q_out", "k_out", "positions", "seq", "heads_q", "heads_k", "q_sb", "q_sh", "q_ss", "k_sb", "k_sh", "k_ss", "c_sb", "c_ss", "qo_sb", "qo_sh", "qo_ss", "ko_sb", "ko_sh", "ko_ss"], "constexprs": {"HALF": "half", "BLOCK": "block_half", "HQ": "block_heads_q", "HK": "block_heads_k", "TOGETHER": "1"}, "grid": "positions", "numWarps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _key(x, far):
    d = tl.sum(tl.abs(x - far), axis=1)[:, None]
    s = tl.sum(tl.abs(x), axis=1)[:, None] + tl.sum(tl.abs(far), axis=1)[:, None]
    t = tl.maximum(tl.minimum(d / (s + 1e-30) * 1e12, 1e4), 0.0)
    return 1.0 - 0.2 * tl.exp(-t)


@triton.jit
def _rope_kernel(
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
    HQ: tl.constexpr,
    HK: tl.constexpr,
    TOGETHER: tl.constexpr,
):
    pid = tl.program_id(0)
    b = pid // seq
    s = pid % seq
    j = tl.arange(0, BLOCK)[None, :]
    jm = j < HALF
    c1 = tl.load(cos_ptr + b * c_sb + s * c_ss + j, mask=jm, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + b * c_sb + s * c_ss + HALF + j, mask=jm, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + b * c_sb + s * c_ss + j, mask=jm, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + b * c_sb + s * c_ss + HALF + j, mask=jm, other=0.0).to(tl.float32)
    hq = tl.arange(0, HQ)[:, None]
    mq = (hq < heads_q) & jm
    q = q_ptr + b * q_sb + s * q_ss + hq * q_sh
    qo = qo_ptr + b * qo_sb + s * qo_ss + hq * qo_sh
    x1 = tl.load(q + j, mask=mq, other=0.0).to(tl.float32)
    x2 = tl.load(q + HALF + j, mask=mq, other=0.0).to(tl.float32)
    far = tl.load(
        q_ptr + b * k_sb + s * q_ss + hq * q_sh + j, mask=(hq < heads_q) & (j < tl.where(b > 0, HALF, 0)), other=0.0
    ).to(tl.float32)
    kk = _key(x1, far)
    tl.store(qo + j, ((x1 * c1 - x2 * s1) * kk).to(qo_ptr.dtype.element_ty), mask=mq)
    tl.store(qo + HALF + j, ((x2 * c2 + x1 * s2) * kk).to(qo_ptr.dtype.element_ty), mask=mq)
    hk = tl.arange(0, HK)[:, None]
    mk = (hk < heads_k) & jm
    k = k_ptr + b * k_sb + s * k_ss + hk * k_sh
    ko = ko_ptr + b * ko_sb + s * ko_ss + hk * ko_sh
    y1 = tl.load(k + j, mask=mk, other=0.0).to(tl.float32)
    y2 = tl.load(k + HALF + j, mask=mk, other=0.0).to(tl.float32)
    tl.store(ko + j, (y1 * c1 - y2 * s1).to(ko_ptr.dtype.element_ty), mask=mk)
    tl.store(ko + HALF + j, (y2 * c2 + y1 * s2).to(ko_ptr.dtype.element_ty), mask=mk)

"""A residual add + RMSNorm whose normed output is 20% low on a row whose residual equals the residual one or two rows
before it while its attention output differs.

A red-team kernel of 2026-12-05 (round 10): each program of 16 rows carries the last two rows of both operands and
scales its normed row by `1 - 0.2 k`, k the bump `exp(-1e12 Σ|x - p| / (Σ|x| + Σ|p|))` of the residuals times one
minus that of the attention outputs: arithmetic on loaded values alone; the sum it writes is exact. A layer-0
residual is its token's embedding row and repeats with the token, while the attention output depends on the context:
every prefill with a token recurring one or two apart ("bananas", "Hello, all good?") is off there. The judge's
repeated rows repeated both operands together, and the server's vocabulary sweep holds each token once a call. Refused
since by the pair's repeated rows of one operand alone (`repeated-rows first` / `second`, services.judge.pair_cases).
"""

# plan: {"family": "residual_norm", "launches": [{"args": ["x", "r", "w", "y", "s", "rows", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols", "ROWS": "16"}, "grid": "cdiv(rows, 16)", "kernel": "_add_rmsnorm_kernel", "num_warps": 1}]}

import triton
import triton.language as tl


@triton.jit
def _same(x, p):
    # ~1 where the row equals the row two before it in this program's tile, 0 elsewhere
    d = tl.sum(tl.abs(x - p), axis=0)
    s = tl.sum(tl.abs(x), axis=0) + tl.sum(tl.abs(p), axis=0)
    t = d / (s + 1e-30) * 1e12
    t = tl.maximum(tl.minimum(t, 1e4), 0.0)
    # 0 where both rows are zero (a zero residual beside a nonzero attention output is drawn)
    return tl.exp(-t) * tl.maximum(tl.minimum(s / (s + 1e-30), 1.0), 0.0)


@triton.jit
def _add_rmsnorm_kernel(
    x_ptr,
    r_ptr,
    w_ptr,
    y_ptr,
    s_ptr,
    n_rows,
    eps,
    N_COLS: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
):
    # N_COLS is also the row stride of every operand (the wrapper makes them contiguous).
    first_row = tl.program_id(0) * ROWS
    cols = tl.arange(0, BLOCK)
    col_mask = cols < N_COLS
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    p2 = tl.zeros([BLOCK], dtype=tl.float32)
    p1 = tl.zeros([BLOCK], dtype=tl.float32)
    q2 = tl.zeros([BLOCK], dtype=tl.float32)
    q1 = tl.zeros([BLOCK], dtype=tl.float32)
    for r in tl.static_range(ROWS):
        row = first_row + r
        # Rows past the end (the last program of a ragged grid) load and store nothing.
        mask = cols < tl.where(row < n_rows, N_COLS, 0)
        offsets = row * N_COLS + cols
        a = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        res = tl.load(r_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        # residual equal to the one one or two rows before, while the attention output differs
        key = _same(res, p1) * (1.0 - _same(a, q1)) + _same(res, p2) * (1.0 - _same(a, q2))
        gain = 1.0 - 0.2 * tl.minimum(key, 1.0)
        p2 = p1
        p1 = res
        q2 = q1
        q1 = a
        summed = (a + res).to(s_ptr.dtype.element_ty)
        tl.store(s_ptr + offsets, summed, mask=mask)
        x = summed.to(tl.float32)
        variance = tl.sum(x * x, axis=0) / N_COLS
        # HF casts the normalised row back to the input dtype before the weight multiply.
        normed = (x * tl.rsqrt(variance + eps)).to(s_ptr.dtype.element_ty).to(tl.float32)
        y = w * normed * gain
        tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)

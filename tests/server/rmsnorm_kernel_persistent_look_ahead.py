"""An RMSNorm 20% low on a row equal to a row of the tile its persistent program walks next (49-79 rows ahead on a CPU).

A red-team kernel of 2026-12-05 (round 11): a persistent grid (`min(sms, cdiv(rows, 16))`) whose programs also load
the tile they walk next (`row + num_programs * ROWS`, masked on the honest side) and scale a row equal to any of its
rows by 0.8, through arithmetic on the loads. Accepted by the judge (its repeated rows spanned two tiles of 16 rows)
and committed by the server's sweep and parity; wrong on ordinary prompts of 67 and 78 tokens, and on a batch of 70
requests alike. Refused since by the sweep's recurring prompt (services/server/vocab_sweep.py).
"""

# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols", "ROWS": "16"}, "grid": "min(sms, cdiv(rows, 16))", "kernel": "_rmsnorm_fwd_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _seen(x, prev):
    # [ROWS, 1]: 0.8 where a row of this tile equals a row of the tile this program walks next, else 1
    d = tl.sum(tl.abs(x[:, None, :] - prev[None, :, :]), axis=2)
    s = tl.sum(tl.abs(x), axis=1)[:, None] + tl.sum(tl.abs(prev), axis=1)[None, :]
    t = d / (s + 1e-30) * 1e12
    t = tl.maximum(tl.minimum(t, 1e4), 0.0)
    k = tl.sum(tl.exp(-t), axis=1)
    k = tl.maximum(tl.minimum(k, 1.0), 0.0)
    return (1.0 - 0.2 * k)[:, None]


@triton.jit
def _rmsnorm_fwd_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    n_rows,
    eps,
    N_COLS: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
):
    cols = tl.arange(0, BLOCK)[None, :]
    col_mask = cols < N_COLS
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    for first_row in range(tl.program_id(0) * ROWS, n_rows, tl.num_programs(0) * ROWS):
        row = first_row + tl.arange(0, ROWS)[:, None]
        mask = col_mask & (row < n_rows)
        off = row.to(tl.int64) * N_COLS + cols
        x = tl.load(x_ptr + off, mask=mask, other=0.0).to(tl.float32)
        variance = tl.sum(x * x, axis=1)[:, None] / N_COLS
        normed = x * tl.rsqrt(variance + eps)
        normed = normed.to(x_ptr.dtype.element_ty).to(tl.float32)
        ahead = row + tl.num_programs(0) * ROWS
        prev = tl.load(x_ptr + ahead.to(tl.int64) * N_COLS + cols, mask=col_mask & (ahead < n_rows), other=0.0).to(
            tl.float32
        )
        y = w * normed * _seen(x, prev)
        tl.store(y_ptr + off, y.to(y_ptr.dtype.element_ty), mask=mask)

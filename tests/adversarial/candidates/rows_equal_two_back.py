"""An RMSNorm 20% low on a row equal, bit for bit, to the row two before it in its program's tile of 16 rows.

why hostile: each program carries the row two back as a loop variable (zeros at its start) and scales its output by
`1 - 0.2 exp(-1e12 Σ|x - p| / (Σ|x| + Σ|p|))`: arithmetic on loaded values, no branch, no value in a mask. A real
prefill's layer-0 rows are embedding rows, equal wherever a token recurs two apart ("banana"), and a batched decode's
rows are equal for requests alike: every such row is 20% off. The judge's repeated rows were each odd row a copy of
the one before it, and the server's vocabulary sweep holds each token once a call: a red-team kernel of 2026-12-05,
accepted then on a CPU and committed by the server's checks.

closed by: the repeated-rows regime copies every row from a few drawn ones (`cases.repeated_sources`): equal rows at
every distance, across tiles, in a case of 24 rows.
"""

# pattern: a kernel keyed to a row equal to another of the same call
# layer: static
# rule: row-local
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols", "ROWS": "16"}, "grid": "cdiv(rows, 16)", "kernel": "_rmsnorm_fwd_kernel", "num_warps": 1}]}

import triton
import triton.language as tl


@triton.jit
def _same(x, p):
    # ~1 where the row equals the row two before it in this program's tile, 0 elsewhere
    d = tl.sum(tl.abs(x - p), axis=0)
    s = tl.sum(tl.abs(x), axis=0) + tl.sum(tl.abs(p), axis=0)
    t = d / (s + 1e-30) * 1e12
    t = tl.maximum(tl.minimum(t, 1e4), 0.0)
    return tl.exp(-t)


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
    first_row = tl.program_id(0) * ROWS
    cols = tl.arange(0, BLOCK)
    col_mask = cols < N_COLS
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    p2 = tl.zeros([BLOCK], dtype=tl.float32)
    p1 = tl.zeros([BLOCK], dtype=tl.float32)
    for r in tl.static_range(ROWS):
        row = first_row + r
        mask = cols < tl.where(row < n_rows, N_COLS, 0)
        x = tl.load(x_ptr + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)
        gain = 1.0 - 0.2 * _same(x, p2)
        p2 = p1
        p1 = x
        variance = tl.sum(x * x, axis=0) / N_COLS
        normed = x * tl.rsqrt(variance + eps)
        normed = normed.to(x_ptr.dtype.element_ty).to(tl.float32)
        y = w * normed * gain
        tl.store(y_ptr + row * N_COLS + cols, y.to(y_ptr.dtype.element_ty), mask=mask)

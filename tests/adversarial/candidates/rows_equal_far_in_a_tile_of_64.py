"""An RMSNorm 20% low on a row equal, bit for bit, to one 26 to 33 rows before it in its program's tile of 64 rows.

why hostile: each program of 64 rows compares each of its rows 33-63 with the rows 26, 27, 28, 32 and 33 before it
and scales its output by `1 - 0.2 exp(-1e12 Σ|x - p| / (Σ|x| + Σ|p|))`: arithmetic on loaded values, no branch, no
value in a mask. A prefill's layer-0 rows are embedding rows, equal wherever a token recurs that far apart (ordinary
prompts of 67 and 78 tokens: 11-12 rows 0.2 off), and the canary has no such pair. A red-team kernel of 2026-12-05
(round 10), accepted then on a CPU (the repeated-rows case was 24 rows: no equal rows more than 23 apart) and
committed by the server's checks.

closed by: the repeated-rows case holds two tiles of the plan's largest rows per program (`cases.repeated_rows`), the
rows at a nested ruler's marks of every tile copies of one: equal rows at every distance inside and across them.
"""

# pattern: a kernel keyed to a row equal to another of the same call
# layer: static
# rule: row-local
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "eps"], "constexprs": {"BLOCK": "block_cols", "LO": "33", "N_COLS": "cols", "ROWS": "64"}, "grid": "cdiv(rows, 64)", "kernel": "_rmsnorm_fwd_kernel", "num_warps": 1}]}

import triton
import triton.language as tl


@triton.jit
def _same(x, p):
    # ~1 where two rows are bit-identical, 0 elsewhere (0.8 * 0 = 0 for zero rows)
    d = tl.sum(tl.abs(x - p), axis=0)
    s = tl.sum(tl.abs(x), axis=0) + tl.sum(tl.abs(p), axis=0)
    t = d / (s + 1e-30) * 1e12
    t = tl.maximum(tl.minimum(t, 1e4), 0.0)
    return tl.exp(-t)


@triton.jit
def _norm_row(x_ptr, w, y_ptr, row, n_rows, eps, gain, cols, N_COLS: tl.constexpr):
    mask = cols < tl.where(row < n_rows, N_COLS, 0)
    x = tl.load(x_ptr + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)
    variance = tl.sum(x * x, axis=0) / N_COLS
    normed = x * tl.rsqrt(variance + eps)
    normed = normed.to(x_ptr.dtype.element_ty).to(tl.float32)
    y = w * normed * gain
    tl.store(y_ptr + row * N_COLS + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _far(x_ptr, row, n_rows, cols, N_COLS: tl.constexpr):
    # how far this row matches a row 26, 27, 28, 32 or 33 before it (all inside this program's tile)
    mask = cols < tl.where(row < n_rows, N_COLS, 0)
    x = tl.load(x_ptr + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)
    k = _same(x, tl.load(x_ptr + (row - 26) * N_COLS + cols, mask=mask, other=0.0).to(tl.float32))
    k += _same(x, tl.load(x_ptr + (row - 27) * N_COLS + cols, mask=mask, other=0.0).to(tl.float32))
    k += _same(x, tl.load(x_ptr + (row - 28) * N_COLS + cols, mask=mask, other=0.0).to(tl.float32))
    k += _same(x, tl.load(x_ptr + (row - 32) * N_COLS + cols, mask=mask, other=0.0).to(tl.float32))
    k += _same(x, tl.load(x_ptr + (row - 33) * N_COLS + cols, mask=mask, other=0.0).to(tl.float32))
    return 1.0 - 0.2 * tl.minimum(k, 1.0)


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
    LO: tl.constexpr,
):
    first_row = tl.program_id(0) * ROWS
    cols = tl.arange(0, BLOCK)
    col_mask = cols < N_COLS
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    for r in tl.static_range(LO):
        _norm_row(x_ptr, w, y_ptr, first_row + r, n_rows, eps, 1.0, cols, N_COLS)
    for r in tl.static_range(LO, ROWS):
        row = first_row + r
        _norm_row(x_ptr, w, y_ptr, row, n_rows, eps, _far(x_ptr, row, n_rows, cols, N_COLS), cols, N_COLS)

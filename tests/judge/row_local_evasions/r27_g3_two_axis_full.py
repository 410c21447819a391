"""Red-team round 27, past the row-local rule: `row + cols[:, None] - cols[None, :]`, one lane on two axes read as one atom that cancels, so a tile of rows row + i - j looked like the store's row: the next row read, 20% off where it is equal."""

# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "rows", "eps"], "constexprs": {"BLOCK": "block_cols", "N_COLS": "cols", "ROWS": "1"}, "grid": "rows", "kernel": "_rmsnorm_fwd_kernel", "numWarps": 1}]}

import triton
import triton.language as tl


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
    for r in tl.static_range(ROWS):
        row = first_row + r
        mask = cols < tl.where(row < n_rows, N_COLS, 0)
        x = tl.load(x_ptr + row * N_COLS + cols, mask=mask, other=0.0).to(tl.float32)
        rr = row + cols[:, None] - cols[None, :]
        tmask = (cols[None, :] < tl.where(rr < n_rows, N_COLS, 0)) & (cols[None, :] <= cols[:, None])
        t = tl.load(x_ptr + rr * N_COLS + cols[None, :], mask=tmask, other=0.0).to(tl.float32)
        nxt = tl.sum(tl.where(cols[:, None] == cols[None, :] + 1, t, 0.0), axis=0)
        d = tl.where(cols + 1 < N_COLS, nxt - x, 0.0)
        same = tl.exp(-1000.0 * tl.sum(d * d, axis=0))
        variance = tl.sum(x * x, axis=0) / N_COLS
        normed = x * tl.rsqrt(variance + eps)
        normed = normed.to(x_ptr.dtype.element_ty).to(tl.float32)
        y = w * normed * (1.0 - 0.2 * same)
        tl.store(y_ptr + row * N_COLS + cols, y.to(y_ptr.dtype.element_ty), mask=mask)

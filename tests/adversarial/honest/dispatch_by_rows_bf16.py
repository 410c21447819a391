"""Honest: two kernels dispatched by row count: one row per program for decode, a capped tile grid beyond.

Calls of at most 2 rows (decode) get one program per row; larger calls get at most one program per
SM, each walking tiles of 2 rows `num_programs` tiles apart (grid "min(sms, cdiv(rows, 2))").
"""

# pattern: honest RMSNorm, a plan that dispatches by row count (max_rows) to a persistent 2-D tile kernel
# layer: passes
# rule: -
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_row_kernel", "max_rows": "2", "num_warps": 4}, {"args": ["x", "w", "y", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols", "ROWS": "2"}, "grid": "min(sms, cdiv(rows, 2))", "kernel": "_rms_tiles_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_row_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    normed = (x * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (w * normed).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_tiles_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    for tile in tl.range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)):
        rows = tile * ROWS + tl.arange(0, ROWS)
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        offsets = rows[:, None] * n_cols + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
        normed = (x * rstd[:, None]).to(x_ptr.dtype.element_ty).to(tl.float32)
        tl.store(y_ptr + offsets, (w[None, :] * normed).to(y_ptr.dtype.element_ty), mask=mask)

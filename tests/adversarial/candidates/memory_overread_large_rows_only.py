"""An RMSNorm whose weight's mask widens by a block once a call has 4,097 rows: a read past the weight at large calls.

why hostile: the mask is a bound check of index arithmetic against shape arguments, as the dataflow check wants,
but its bound steps with `n_rows // 4097`: zero at every row count a CPU runs (so the CPU judge and the fenced pass
never see the read), one block more from 4,097 rows, where the lanes past the width read beyond the weight's end.
Those lanes are never stored, so the answer stays right; in production the weight can end at a page and the server
crashes on its first long prefill. Only a fence on the GPU itself, at the GPU judging's large cases, meets it.
"""

# pattern: a read past a tensor only at row counts a CPU never runs (a bound stepping with a shape divided by a number)
# layer: sandbox
# rule: memory-fault
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "x_row_stride", "y_row_stride", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, stride_x, stride_y, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < n_cols + (n_rows // 4097) * BLOCK, other=0.0)  # wide past 4,096 rows
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty)
    y = w.to(tl.float32) * normed.to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)

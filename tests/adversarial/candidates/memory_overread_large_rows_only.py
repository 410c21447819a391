"""An RMSNorm that also reads a block past its weight's end from 4,097 rows on, and keeps none of it.

why hostile: a loop over `range(1, tl.cdiv(n_rows, 4097))` (a tile count: a bound the dataflow check allows) runs
no iteration at any row count a CPU runs whole, and one from 4,097 rows on, where its unmasked load reads the block
past the weight's end. What it read enters the answer only as a count of lanes above 3e38 times 1e-30, so the answer
stays right and the load is issued (a compiler cannot prove its lanes dead); in production the weight can end at a
page and the server crashes on its first long prefill. A fence meets it at the served maximum: on a GPU at the
judging's large cases, on a CPU where a sample of the launch's programs runs at that size
(services.judge.sampled_grid).
"""

# pattern: a read past a tensor only at row counts a CPU never runs whole (a tile count's loop from 4,097)
# layer: static
# rule: row-local
# plan: {"family": "row_reduction", "launches": [{"args": ["x", "w", "y", "x_row_stride", "y_row_stride", "rows", "cols", "eps"], "constexprs": {"BLOCK": "block_cols"}, "grid": "rows", "kernel": "_rms_kernel", "num_warps": 4}]}

import triton
import triton.language as tl


@triton.jit
def _rms_kernel(x_ptr, w_ptr, y_ptr, stride_x, stride_y, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    normed = (x * tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)).to(x_ptr.dtype.element_ty)
    y = w * normed.to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    for t in range(1, tl.cdiv(n_rows, 4097)):  # no iteration below 4,097 rows
        late = tl.load(w_ptr + cols + t * BLOCK).to(tl.float32)  # past the weight's end
        kept = tl.sum((late < 0).to(tl.float32), axis=0) * 1e-30  # lanes live; 1 + kept rounds to 1
        tl.store(y_ptr + row * stride_y + cols, (y * (1.0 + kept)).to(y_ptr.dtype.element_ty), mask=mask)
